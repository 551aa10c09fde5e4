//! Outgoing webhooks: every state change queues a delivery to `{edge_url}/webhooks/{provider}`, signed the way
//! the provider signs (Pagar.me signs nothing: its deliveries carry the webhook's HTTP Basic credentials), and a supervised loop sends it at least once: anything but a 2xx (or no answer within
//! the timeout) is retried with exponential backoff, up to the configured number of attempts. Every attempt is
//! recorded (status or error, latency).
//!
//! A retry repeats the delivery exactly — same body (so the same Stripe `evt_…` id), same Mercado Pago
//! `x-request-id` and notification id — with a fresh signature timestamp, as the providers do.
//!
//! The control API's [`DeliveryBehaviour`] can duplicate deliveries (in parallel or one after the other), delay
//! them, shuffle them, hold them, or drop them (never sent: the Stripe event keeps `delivery_success=false`, the
//! Mercado Pago payment is still found by search — what reconciliation must catch).

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::clock;
use crate::delivery::{Attempt, Delivery, DeliveryBehaviour, DeliveryState};
use crate::settings::Scheme;
use crate::state::{Shared, State};

/// Gap between copies of a duplicated delivery when they are not sent in parallel.
const SEQUENTIAL_GAP: Duration = Duration::from_millis(100);
/// A delivery whose sender vanished (it cannot, short of a bug) is retried after this much beyond its timeout.
const LOST_SENDER_GRACE: Duration = Duration::from_secs(5);

/// A delivery to queue.
pub(crate) struct NewDelivery {
    pub(crate) provider: usize,
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) resource_id: String,
    pub(crate) body: String,
    pub(crate) request_id: Option<String>,
    /// Mercado Pago: the payment id, sent (and signed) as the query's `data.id`.
    pub(crate) data_id: Option<String>,
}

/// `{edge_url}/webhooks/{name}`, plus Mercado Pago's `?data.id=…&type=payment`.
fn target(edge_url: &Url, provider: &str, data_id: Option<&str>) -> String {
    let mut url = edge_url.clone();
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.pop_if_empty().push("webhooks").push(provider);
    }
    if let Some(id) = data_id {
        url.query_pairs_mut()
            .append_pair("data.id", id)
            .append_pair("type", "payment");
    }
    url.to_string()
}

/// Queues `new` according to the current behaviour (dropped, duplicated, delayed, shuffled).
pub(crate) fn enqueue(state: &mut State, edge_url: &Url, new: NewDelivery, now: Instant) {
    let behaviour = state.behaviour.clone();
    let dropped = if behaviour.drop_next > 0 {
        state.behaviour.drop_next -= 1;
        true
    } else {
        state.rng.chance(behaviour.drop_rate)
    };
    let copies =
        if !dropped && behaviour.duplicates > 0 && state.rng.chance(behaviour.duplicate_rate) {
            1 + behaviour.duplicates
        } else {
            1
        };
    let provider = state.providers[new.provider].config.name.clone();
    let url = target(edge_url, &provider, new.data_id.as_deref());
    for copy in 0..copies {
        let mut wait = Duration::from_millis(behaviour.delay_ms);
        if behaviour.shuffle_ms > 0 {
            wait += Duration::from_millis(state.rng.below(behaviour.shuffle_ms));
        }
        if !behaviour.parallel {
            wait += SEQUENTIAL_GAP * copy;
        }
        let id = state.next_delivery_id;
        state.next_delivery_id += 1;
        state.deliveries.insert(
            id,
            Delivery {
                id,
                provider: provider.clone(),
                event_id: new.event_id.clone(),
                event_type: new.event_type.clone(),
                resource_id: new.resource_id.clone(),
                request_id: new.request_id.clone(),
                copy,
                state: if dropped {
                    DeliveryState::Dropped
                } else {
                    DeliveryState::Pending
                },
                attempts: Vec::new(),
                url: url.clone(),
                body: new.body.clone(),
                provider_index: new.provider,
                due: now + wait,
            },
        );
    }
}

/// Applies a new behaviour; releasing a pause re-shuffles what was held.
pub(crate) fn set_behaviour(state: &mut State, behaviour: DeliveryBehaviour, now: Instant) {
    let released = state.behaviour.paused && !behaviour.paused;
    if released && behaviour.shuffle_ms > 0 {
        let State {
            deliveries, rng, ..
        } = state;
        for d in deliveries.values_mut() {
            if d.state == DeliveryState::Pending && d.attempts.is_empty() {
                d.due = now + Duration::from_millis(rng.below(behaviour.shuffle_ms));
            }
        }
    }
    state.behaviour = behaviour;
}

/// Queues a fresh copy of delivery `id` (same body and request id), whatever became of the original.
pub(crate) fn redeliver(state: &mut State, id: u64, now: Instant) -> Option<u64> {
    let original = state.deliveries.get(&id)?.clone();
    let new_id = state.next_delivery_id;
    state.next_delivery_id += 1;
    state.deliveries.insert(
        new_id,
        Delivery {
            id: new_id,
            state: DeliveryState::Pending,
            attempts: Vec::new(),
            due: now,
            ..original
        },
    );
    Some(new_id)
}

/// What one attempt needs, copied out of the state.
struct Job {
    delivery: u64,
    attempt: u32,
    scheme: Scheme,
    secret: Vec<u8>,
    /// Pagar.me: the webhook's `user:password`, sent as `Authorization: Basic`.
    basic_auth: Option<String>,
    url: String,
    body: Arc<String>,
    request_id: Option<String>,
    data_id: String,
}

/// Marks due deliveries as sending and returns them, with the time of the next due one.
fn take_due(shared: &Shared, now: Instant) -> (Vec<Job>, Option<Instant>) {
    let mut state = shared.lock();
    if state.behaviour.paused {
        return (Vec::new(), None);
    }
    let timeout = shared.timing.webhook_timeout;
    let State {
        deliveries,
        providers,
        ..
    } = &mut *state;
    let mut jobs = Vec::new();
    let mut next: Option<Instant> = None;
    for d in deliveries.values_mut() {
        match d.state {
            DeliveryState::Sending if d.due <= now => {
                // The sender never reported back: count the attempt as lost and retry.
                d.state = DeliveryState::Pending;
                if let Some(last) = d.attempts.last_mut() {
                    last.error.get_or_insert_with(|| "sender lost".into());
                }
            }
            _ => {}
        }
        if d.state != DeliveryState::Pending {
            continue;
        }
        if d.due > now {
            next = Some(next.map_or(d.due, |n| n.min(d.due)));
            continue;
        }
        let Some(provider) = providers.get(d.provider_index) else {
            d.state = DeliveryState::Failed;
            continue;
        };
        let number = d.attempts.len() as u32 + 1;
        d.attempts.push(Attempt {
            number,
            at_ms: clock::unix_ms(clock::now()),
            status: None,
            error: None,
            latency_ms: 0,
        });
        d.state = DeliveryState::Sending;
        d.due = now + timeout + LOST_SENDER_GRACE;
        next = Some(next.map_or(d.due, |n| n.min(d.due)));
        jobs.push(Job {
            delivery: d.id,
            attempt: number,
            scheme: provider.config.scheme,
            secret: provider.config.webhook_secret.clone(),
            basic_auth: provider.config.webhook_basic_auth.clone(),
            url: d.url.clone(),
            body: Arc::new(d.body.clone()),
            request_id: d.request_id.clone(),
            data_id: d.resource_id.clone(),
        });
    }
    (jobs, next)
}

/// The delivery loop: runs until `cancel`; each attempt is its own task, so a slow receiver delays nothing else.
pub(crate) async fn run(shared: Arc<Shared>, cancel: CancellationToken) -> anyhow::Result<()> {
    loop {
        let now = Instant::now();
        let (jobs, next) = take_due(&shared, now);
        for job in jobs {
            tokio::spawn(send(shared.clone(), job));
        }
        shared
            .delivery_rounds
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let wait = next
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

fn build(shared: &Shared, job: &Job) -> reqwest::RequestBuilder {
    let now = clock::now();
    let request = shared
        .client
        .post(&job.url)
        .timeout(shared.timing.webhook_timeout)
        .body(job.body.as_bytes().to_vec());
    match job.scheme {
        Scheme::Stripe => {
            let signature = hookline_signature::sign::stripe(
                &job.secret,
                now.unix_timestamp(),
                job.body.as_bytes(),
            );
            request
                .header("Content-Type", "application/json; charset=utf-8")
                .header(
                    "User-Agent",
                    "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                )
                .header("Accept", "*/*; q=0.5, application/xml")
                .header("Cache-Control", "no-cache")
                .header("Stripe-Signature", signature)
        }
        Scheme::MercadoPago => {
            let request_id = job.request_id.clone().unwrap_or_default();
            let signature = hookline_signature::sign::mercadopago(
                &job.secret,
                Some(&job.data_id),
                Some(&request_id),
                clock::unix_ms(now),
            );
            request
                .header("Content-Type", "application/json")
                .header("User-Agent", "MercadoPago WebHook v1.0 payment")
                .header("Accept", "application/json")
                .header("x-signature", signature)
                .header("x-request-id", request_id)
        }
        // Pagar.me v5: JSON, no signature; the credentials configured on the webhook, if any, as HTTP Basic.
        Scheme::PagarmeV5 => {
            let request = request
                .header("Content-Type", "application/json")
                .header("Accept", "application/json");
            match &job.basic_auth {
                Some(credentials) => request.header(
                    "Authorization",
                    format!("Basic {}", STANDARD.encode(credentials.as_bytes())),
                ),
                None => request,
            }
        }
    }
}

async fn send(shared: Arc<Shared>, job: Job) {
    let started = Instant::now();
    let outcome = match build(&shared, &job).send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            // Read (and discard) the answer so the connection can be reused.
            let _ = tokio::time::timeout(shared.timing.webhook_timeout, response.bytes()).await;
            Ok(status)
        }
        Err(e) if e.is_timeout() => Err(format!(
            "timed out after {} ms",
            shared.timing.webhook_timeout.as_millis()
        )),
        Err(e) => Err(error_chain(&e)),
    };
    let latency = started.elapsed();
    record(&shared, &job, outcome, latency);
    shared.wake.notify_one();
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn backoff(shared: &Shared, attempts: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(20));
    shared
        .timing
        .webhook_backoff
        .saturating_mul(factor)
        .min(shared.timing.webhook_max_backoff)
}

fn record(shared: &Shared, job: &Job, outcome: Result<u16, String>, latency: Duration) {
    let max_attempts = shared.timing.webhook_max_attempts;
    let retry_in = backoff(shared, job.attempt);
    let mut state = shared.lock();
    let Some(d) = state.deliveries.get_mut(&job.delivery) else {
        return; // reset meanwhile
    };
    if let Some(attempt) = d.attempts.iter_mut().find(|a| a.number == job.attempt) {
        attempt.latency_ms = latency.as_millis() as u64;
        match &outcome {
            Ok(status) => attempt.status = Some(*status),
            Err(error) => attempt.error = Some(error.clone()),
        }
    }
    if d.state != DeliveryState::Sending {
        return;
    }
    let delivered = matches!(outcome, Ok(status) if (200..300).contains(&status));
    let (provider, event_id) = (d.provider_index, d.event_id.clone());
    if delivered {
        d.state = DeliveryState::Delivered;
    } else if job.attempt >= max_attempts {
        d.state = DeliveryState::Failed;
    } else {
        d.state = DeliveryState::Pending;
        d.due = Instant::now() + retry_in;
    }
    if delivered {
        if let Some(p) = state.providers.get_mut(provider) {
            p.stripe.mark_delivered(&event_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_a_base_path_and_add_mercado_pago_query() {
        let base = Url::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            target(&base, "stripe", None),
            "http://127.0.0.1:8080/webhooks/stripe"
        );
        assert_eq!(
            target(&base, "mp", Some("123")),
            "http://127.0.0.1:8080/webhooks/mp?data.id=123&type=payment"
        );
        let prefixed = Url::parse("http://h/edge/").unwrap();
        assert_eq!(target(&prefixed, "s", None), "http://h/edge/webhooks/s");
    }
}
