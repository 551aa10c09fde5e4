//! Stripe-signed `payment_intent.succeeded` deliveries, generated and signed *before* a phase starts, so that
//! during the measurement the load generator only hands out prepared bytes. The payloads, the signature and the
//! random generator come from `hookline-fake`; this module owns the benchmark's ids, amounts and body sizes.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use bytes::Bytes;
use hookline_fake::{headers_for, merge, stripe, Event, Rng, Scheme};
use hyper::header::HeaderValue;
use serde_json::{json, Value};

/// Stripe endpoint secret of the benchmark's provider (written into the configuration of the children).
pub const STRIPE_SECRET: &str = "whsec_hookline_bench_secret";
/// Configured provider name, i.e. the URL segment of `POST /webhooks/{name}`.
pub const PROVIDER: &str = "stripe";
/// Provider fee in basis points (3.99 %), as the issue prescribes.
pub const FEE_BPS: i64 = 399;
/// Fixed provider fee in minor units.
pub const FEE_FIXED: i64 = 39;

/// One prepared delivery: the exact bytes and header a provider would send.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The Stripe event id (`evt_…`), the edge's dedupe key.
    pub event_id: Arc<str>,
    /// Raw JSON body.
    pub body: Bytes,
    /// `Stripe-Signature` header value, signed when the plan was built.
    pub signature: HeaderValue,
    /// True when this delivery repeats an earlier one of the same plan (provider retry).
    pub duplicate: bool,
}

/// The deliveries of one phase, in send order.
#[derive(Debug, Default)]
pub struct Plan {
    /// Deliveries in the order they are sent.
    pub deliveries: Vec<Delivery>,
}

impl Plan {
    /// Number of deliveries.
    pub fn len(&self) -> usize {
        self.deliveries.len()
    }

    /// True when the plan holds nothing.
    pub fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }

    /// Number of distinct events in the plan.
    pub fn unique(&self) -> usize {
        self.deliveries.iter().filter(|d| !d.duplicate).count()
    }
}

/// Current unix time in seconds (0 if the clock is before 1970, which only makes signatures fail visibly).
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Builds unique events for one benchmark run. Event ids carry the run tag and a phase label, so the events of
/// one phase can be found in the database afterwards (`starts_with(provider_event_id, …)`).
#[derive(Debug, Clone)]
pub struct EventFactory {
    run: String,
    body_bytes: usize,
    rng: Rng,
}

impl EventFactory {
    /// A factory for run `run` (a short tag) producing bodies of about `body_bytes` bytes.
    pub fn new(run: &str, body_bytes: usize, seed: u64) -> EventFactory {
        EventFactory {
            run: run.to_string(),
            body_bytes,
            rng: Rng::from_state(seed),
        }
    }

    /// The prefix shared by the event ids of `phase`.
    pub fn event_prefix(&self, phase: &str) -> String {
        format!("evt_{}_{phase}_", self.run)
    }

    /// The id of event `seq` of `phase`.
    pub fn event_id(&self, phase: &str, seq: u64) -> String {
        format!("evt_{}_{phase}_{seq:08}", self.run)
    }

    /// A realistic Stripe `payment_intent.succeeded` event for a payment of its own, padded (in
    /// `metadata.note`) to the configured size. Each event is a distinct payment, so every one posts a ledger
    /// transaction.
    pub fn body(&self, phase: &str, seq: u64, created: i64) -> Vec<u8> {
        let run = &self.run;
        // Amounts spread over 10.00–5,000.00 BRL; never below the fixed fee, so every leg is non-zero.
        let amount = 1_000 + (seq.wrapping_mul(2_654_435_761) % 499_000) as i64;
        let pi = format!("pi_{run}_{phase}_{seq:08}");
        let mut object = stripe::payment_intent_object(&pi, "succeeded", amount);
        merge(
            &mut object,
            json!({
                "amount_capturable": 0, "capture_method": "automatic", "confirmation_method": "automatic",
                "created": created, "customer": format!("cus_{run}{seq}"),
                "description": format!("Order {seq} of run {run}"),
                "latest_charge": format!("ch_{run}_{phase}_{seq}"), "livemode": false,
                "payment_method": format!("pm_{run}{seq}"), "payment_method_types": ["card"],
                "receipt_email": format!("buyer{seq}@example.com"),
                "metadata": { "order_id": format!("ord_{seq}"), "channel": "web", "note": "" },
            }),
        );
        let event = stripe::live_envelope(
            &self.event_id(phase, seq),
            "payment_intent.succeeded",
            created,
            object,
            &format!("req_{run}{seq}"),
            &format!("ik-{run}-{phase}-{seq}"),
        );
        padded(event, self.body_bytes)
    }

    /// `n` deliveries of `phase`, signed now; about `duplicate_share` of them repeat an earlier delivery of the
    /// plan (same bytes, same signature: a provider's retry).
    pub fn plan(&mut self, phase: &str, n: usize, duplicate_share: f64) -> anyhow::Result<Plan> {
        let now = unix_now() as i64;
        let mut deliveries: Vec<Delivery> = Vec::with_capacity(n);
        let mut seq = 0u64;
        for i in 0..n {
            if i > 0 && self.rng.next_f64() < duplicate_share {
                let original = (self.rng.next_u64() % i as u64) as usize;
                let mut d = deliveries[original].clone();
                d.duplicate = true;
                deliveries.push(d);
                continue;
            }
            let event = Event::raw(
                "payment_intent.succeeded",
                self.body(phase, seq, now),
                self.event_id(phase, seq),
            );
            let signed = headers_for(Scheme::Stripe, STRIPE_SECRET.as_bytes(), &event, now)
                .map_err(anyhow::Error::msg)?;
            let signature = signed
                .headers
                .iter()
                .find(|(name, _)| *name == "Stripe-Signature")
                .context("a Stripe request without Stripe-Signature")?;
            deliveries.push(Delivery {
                event_id: Arc::from(event.delivery_id),
                body: Bytes::from(event.body),
                signature: HeaderValue::from_str(&signature.1)?,
                duplicate: false,
            });
            seq += 1;
        }
        Ok(Plan { deliveries })
    }
}

/// `event` serialised to `size` bytes (when it is smaller) by filling its empty `metadata.note` with `x`: one
/// serialisation, since baseline A builds bodies inside its measurement.
fn padded(event: Value, size: usize) -> Vec<u8> {
    const NOTE: &[u8] = br#""note":"""#;
    let mut body = event.to_string().into_bytes();
    let pad = size.saturating_sub(body.len());
    if let Some(at) = body.windows(NOTE.len()).position(|w| w == NOTE) {
        let inside = at + NOTE.len() - 1;
        body.splice(inside..inside, std::iter::repeat_n(b'x', pad));
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_requested_size_and_parse() {
        let f = EventFactory::new("abcd1234", 1024, 7);
        let body = f.body("max", 42, 1_767_225_600);
        assert_eq!(body.len(), 1024);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], "evt_abcd1234_max_00000042");
        assert_eq!(v["type"], "payment_intent.succeeded");
        assert_eq!(v["data"]["object"]["object"], "payment_intent");
    }

    #[test]
    fn plan_has_unique_ids_and_about_the_duplicate_share() {
        let mut f = EventFactory::new("abcd1234", 1024, 7);
        let plan = f.plan("p", 10_000, 0.1).unwrap();
        let unique: std::collections::HashSet<_> = plan
            .deliveries
            .iter()
            .filter(|d| !d.duplicate)
            .map(|d| d.event_id.clone())
            .collect();
        assert_eq!(unique.len(), plan.unique());
        let share = 1.0 - plan.unique() as f64 / plan.len() as f64;
        assert!((0.08..0.12).contains(&share), "{share}");
    }
}
