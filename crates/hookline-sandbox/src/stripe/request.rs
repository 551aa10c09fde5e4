//! The validated Stripe requests ([`super::validate`] makes them, [`super::ops`] executes them) and where an
//! operation executes ([`At`]).

use std::collections::BTreeMap;

use url::Url;

/// The request being executed: its `Request-Id` and `Idempotency-Key`, echoed in the events it creates.
pub(crate) struct Ctx {
    pub(crate) request_id: String,
    pub(crate) idempotency_key: Option<String>,
}

/// Where an operation executes: provider `p`, the edge its webhooks go to, and the request it executes for
/// (`None`: a change made through the control API).
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub(super) edge_url: &'a Url,
    pub(super) p: usize,
    pub(super) ctx: Option<&'a Ctx>,
}

impl At<'_> {
    /// The idempotency key the objects it creates are counted under.
    pub(super) fn key(&self) -> Option<&str> {
        self.ctx.and_then(|c| c.idempotency_key.as_deref())
    }
}

pub(crate) struct NewIntent {
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) confirm: bool,
    pub(crate) payment_method: Option<String>,
    pub(crate) off_session: bool,
    pub(crate) return_url: Option<String>,
    /// `automatic`, `automatic_async` or `manual`.
    pub(crate) capture_method: &'static str,
}

/// The confirmation parameters of `POST /v1/payment_intents/{id}/confirm` (and of a creation with
/// `confirm=true`).
pub(crate) struct Confirmation {
    pub(crate) payment_method: Option<String>,
    pub(crate) off_session: bool,
    pub(crate) return_url: Option<String>,
}

pub(crate) struct NewCustomer {
    pub(crate) email: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) payment_method: Option<String>,
}

pub(crate) enum RefundTarget {
    Intent(String),
    Charge(String),
}

pub(crate) struct NewRefund {
    pub(crate) target: RefundTarget,
    pub(crate) amount: Option<i64>,
    pub(crate) reason: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
}

/// A validated request, ready to execute.
pub(crate) enum Request {
    CreateIntent(NewIntent),
    ConfirmIntent {
        id: String,
        confirmation: Confirmation,
    },
    CancelIntent {
        id: String,
        reason: Option<String>,
    },
    /// `POST /v1/payment_intents/{id}/capture`: `amount_to_capture` (default: all that is capturable) and
    /// `metadata[…]` merged into the intent's.
    CaptureIntent {
        id: String,
        amount: Option<i64>,
        metadata: BTreeMap<String, String>,
    },
    CreateRefund(NewRefund),
    CreateCustomer(NewCustomer),
    AttachPaymentMethod {
        id: String,
        customer: String,
    },
}
