//! What the sandbox records about webhook deliveries — each [`Delivery`] with its [`Attempt`]s and
//! [`DeliveryState`] — and the [`DeliveryBehaviour`] the control API sets. Data only, held by the state; queueing
//! and sending them is `webhooks`, which imports the state (never the other way round).

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// How deliveries are sent; set through the control API (`PUT /_sandbox/delivery`). Absent fields take their
/// defaults (a plain, immediate, single delivery).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliveryBehaviour {
    /// Extra copies of each delivery (0: none). Copies carry the same body and request id: the same event.
    pub duplicates: u32,
    /// Probability that a delivery gets its `duplicates` copies (seeded; default 1).
    pub duplicate_rate: f64,
    /// Copies start at the same instant (true) or 100 ms apart (false).
    pub parallel: bool,
    /// Each delivery waits this long before its first attempt.
    pub delay_ms: u64,
    /// Each delivery waits a further random 0..shuffle_ms (seeded), so deliveries arrive out of order.
    pub shuffle_ms: u64,
    /// The next N deliveries are dropped: recorded, never sent.
    pub drop_next: u32,
    /// Each delivery is dropped with this probability (seeded).
    pub drop_rate: f64,
    /// Hold every delivery; when unpaused they are released (re-shuffled over `shuffle_ms` if set).
    pub paused: bool,
}

impl Default for DeliveryBehaviour {
    fn default() -> Self {
        DeliveryBehaviour {
            duplicates: 0,
            duplicate_rate: 1.0,
            parallel: false,
            delay_ms: 0,
            shuffle_ms: 0,
            drop_next: 0,
            drop_rate: 0.0,
            paused: false,
        }
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting for its next attempt.
    Pending,
    /// An attempt is in flight.
    Sending,
    /// Answered with a 2xx.
    Delivered,
    /// Every attempt failed.
    Failed,
    /// Dropped on purpose: never sent.
    Dropped,
}

/// One attempt to deliver.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub number: u32,
    /// When it started, unix milliseconds.
    pub at_ms: i64,
    /// The receiver's status code, when it answered.
    pub status: Option<u16>,
    /// Why there is no status (timeout, connection refused, …).
    pub error: Option<String>,
    /// Time to the answer (or the error).
    pub latency_ms: u64,
}

/// One webhook delivery (a duplicate is its own delivery with `copy > 0`).
#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    /// Its id in the control API.
    pub id: u64,
    /// The hookline provider name (the edge path segment).
    pub provider: String,
    /// Stripe: the `evt_…` id; Mercado Pago: the notification `id`.
    pub event_id: String,
    /// Stripe: the event `type`; Mercado Pago: the `action` (`payment.created`, `payment.updated`).
    pub event_type: String,
    /// The object the event is about (`pi_…`, `re_…`, `ch_…`, `dp_…`, or the Mercado Pago payment id).
    pub resource_id: String,
    /// Mercado Pago's `x-request-id` (the same on every attempt and every copy).
    pub request_id: Option<String>,
    /// 0 for the original, n for the n-th duplicate.
    pub copy: u32,
    /// Where it stands.
    pub state: DeliveryState,
    /// Every attempt so far.
    pub attempts: Vec<Attempt>,
    /// Where it is sent.
    pub url: String,
    /// The exact body sent.
    pub body: String,
    #[serde(skip)]
    pub(crate) provider_index: usize,
    #[serde(skip)]
    pub(crate) due: Instant,
}
