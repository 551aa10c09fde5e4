//! `hookline-fake`: the one place that builds what a webhook provider would send — realistic payloads and their
//! signed headers — for `hookline simulate`, the benchmark (`hookline-bench`) and the test harness.
//!
//! It must never: be linked by the edge or the worker; hold a rule the product depends on (it only produces
//! input, the verifiers and the pipeline judge it).
//!
//! - Payload builders, per provider: [`stripe`] (event envelopes and every object type the callers use, bare or
//!   realistic), [`pagarme`] (form-encoded postbacks), [`mercadopago`] (payment notifications), [`ping`] (generic
//!   events for GitHub, Shopify, Standard Webhooks and Svix) and [`adyen`] (notifications signed inside the body).
//! - [`headers_for`]: the query string and headers a scheme's provider sends with an [`Event`], signed with
//!   [`hookline_signature::sign`], so every caller exercises the verifiers' real key derivation.
//! - [`Rng`]: the seeded random generator behind amounts, names, request ids and UUIDs; [`Faker`]: the context
//!   of one generation run (a per-run id that keeps ids unique across runs, the generator, the clock), and
//!   [`Payment`], the customer payment that realistic events describe.
//!
//! Nothing here does I/O: sending the requests is the caller's business.

mod faker;
mod headers;
mod rng;

pub mod adyen;
pub mod mercadopago;
pub mod pagarme;
pub mod pagarme_v5;
pub mod ping;
pub mod stripe;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub use faker::{Faker, Payment};
pub use headers::{headers_for, user_agent, Signed};
pub use hookline_signature::Scheme;
pub use rng::{clock_seed, Rng};

/// One provider event, ready to be signed and sent (and re-sent: a retry repeats all of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event type (Stripe `type`, GitHub `X-GitHub-Event`, Shopify topic, …).
    pub kind: String,
    /// The exact body; re-sends repeat these bytes.
    pub body: Vec<u8>,
    /// The delivery id header where the scheme has one (GitHub, Shopify, Standard Webhooks, Svix, Mercado Pago's
    /// `x-request-id`); a retry repeats it, so dedupe keys taken from signed material stay stable.
    pub delivery_id: String,
    /// Mercado Pago: the notified resource id, sent (and signed) as the query's `data.id`.
    pub data_id: Option<String>,
}

impl Event {
    /// An event whose body is `body` serialised.
    pub fn json(kind: impl Into<String>, body: &Value, delivery_id: impl Into<String>) -> Event {
        Event::raw(kind, body.to_string().into_bytes(), delivery_id)
    }

    /// An event with these exact body bytes.
    pub fn raw(kind: impl Into<String>, body: Vec<u8>, delivery_id: impl Into<String>) -> Event {
        Event {
            kind: kind.into(),
            body,
            delivery_id: delivery_id.into(),
            data_id: None,
        }
    }
}

/// Adds every field of the object `extra` to the object `base` (replacing fields of the same name): a realistic
/// object is a bare one plus the fields only realism needs. Does nothing unless both are objects.
pub fn merge(base: &mut Value, extra: Value) {
    if let (Value::Object(base), Value::Object(extra)) = (base, extra) {
        base.extend(extra);
    }
}

/// Current unix time in seconds (0 if the clock is before 1970, which only makes signatures fail visibly).
pub fn unix_now() -> i64 {
    since_epoch().as_secs() as i64
}

/// Time since the unix epoch (zero if the clock is before 1970).
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SSZ` of unix seconds.
pub fn rfc3339(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix.to_string())
}

/// `application/x-www-form-urlencoded` serialisation of `pairs` (WHATWG: space as `+`), as Pagar.me bodies and
/// Mercado Pago queries are written.
pub fn form_encode<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding_matches_whatwg() {
        assert_eq!(
            form_encode([("transaction[id]", "Ana Lima")]),
            "transaction%5Bid%5D=Ana+Lima"
        );
        assert_eq!(form_encode([("a", "ã"), ("b", "*-._")]), "a=%C3%A3&b=*-._");
    }

    #[test]
    fn merge_adds_and_replaces_fields() {
        let mut base = serde_json::json!({ "id": "x", "status": "a" });
        merge(&mut base, serde_json::json!({ "status": "b", "extra": 1 }));
        assert_eq!(
            base,
            serde_json::json!({ "id": "x", "status": "b", "extra": 1 })
        );
    }

    #[test]
    fn rfc3339_of_unix_seconds() {
        assert_eq!(rfc3339(1_767_225_600), "2026-01-01T00:00:00Z");
    }
}
