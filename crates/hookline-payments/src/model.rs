//! Provider-neutral payment facts, produced by [`crate::normalize`] from raw provider events.
//!
//! Events are *state transitions*, not commands: each fact says what the provider observed ("payment pi_1 is
//! succeeded for 1000 BRL"), so applying the same facts in any order converges to the same state.

/// Money in integer minor units (cents) of an ISO 4217 currency (lower-case, 3 letters). Never floats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Money {
    /// Minor units; always > 0 for amounts that move money.
    pub amount: i64,
    /// Lower-case ISO 4217 code, e.g. "brl", "usd".
    pub currency: String,
}

/// A payment's lifecycle status. The derived order is the *rank*: a payment only ever moves to a higher rank,
/// so the final status is the maximum over all events seen, whatever their arrival order.
///
/// `Failed` ranks below `Canceled` and `Succeeded` because a failed attempt can be followed by a successful
/// retry (Stripe payment intents) or a cancellation; nothing follows success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PaymentStatus {
    /// Created, nothing attempted.
    Created,
    /// Being processed (includes authorised, waiting for payment).
    Processing,
    /// The last attempt failed (may still be retried).
    Failed,
    /// Canceled; terminal unless it had succeeded.
    Canceled,
    /// Money captured; terminal.
    Succeeded,
}

impl PaymentStatus {
    /// Database spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            PaymentStatus::Created => "created",
            PaymentStatus::Processing => "processing",
            PaymentStatus::Failed => "failed",
            PaymentStatus::Canceled => "canceled",
            PaymentStatus::Succeeded => "succeeded",
        }
    }

    /// Parses the database spelling.
    pub fn parse(s: &str) -> Option<PaymentStatus> {
        Some(match s {
            "created" => PaymentStatus::Created,
            "processing" => PaymentStatus::Processing,
            "failed" => PaymentStatus::Failed,
            "canceled" => PaymentStatus::Canceled,
            "succeeded" => PaymentStatus::Succeeded,
            _ => return None,
        })
    }
}

/// Status of a dispute (chargeback). Ordered like [`PaymentStatus`]: only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DisputeStatus {
    /// Opened, not decided.
    Open,
    /// Decided in the merchant's favour: no money lost.
    Won,
    /// Decided against the merchant: the amount is lost (posted to the ledger once).
    Lost,
}

impl DisputeStatus {
    /// Database spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            DisputeStatus::Open => "open",
            DisputeStatus::Won => "won",
            DisputeStatus::Lost => "lost",
        }
    }
}

/// What one provider event means for payments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentFact {
    /// The payment `payment_ref` is (at least) in `status`. `amount` is the captured amount for `Succeeded`
    /// (Stripe `amount_received`, Pagar.me `paid_amount`), else the requested amount when known.
    Payment {
        /// Provider's payment id (Stripe `pi_…`, Pagar.me transaction id).
        payment_ref: String,
        /// Observed status.
        status: PaymentStatus,
        /// Amount, when the event carries it.
        amount: Option<Money>,
    },
    /// A refund with its own provider id, for `amount` of payment `payment_ref`.
    Refund {
        /// Provider's refund id (Stripe `re_…`); for providers without one, a stable derived key.
        refund_ref: String,
        /// The refunded payment.
        payment_ref: String,
        /// Refunded amount (> 0).
        amount: Money,
    },
    /// A dispute on payment `payment_ref`.
    Dispute {
        /// Provider's dispute id (Stripe `dp_…`).
        dispute_ref: String,
        /// The disputed payment.
        payment_ref: String,
        /// Disputed amount (> 0).
        amount: Money,
        /// Observed status.
        status: DisputeStatus,
    },
    /// A paid subscription invoice: charge once per `(subscription_id, billing_cycle)`.
    InvoicePaid {
        /// Provider's invoice id.
        invoice_ref: String,
        /// Provider's subscription id.
        subscription_id: String,
        /// The billing cycle, as a stable string: the start of the period being billed, unix seconds, as
        /// decimal text. For Stripe that is the invoice's `period_end` (a subscription invoice's `period_*`
        /// looks back one period, so the signup invoice and the first renewal share `period_start`).
        billing_cycle: String,
        /// Amount paid (> 0).
        amount: Money,
    },
    /// The event only notifies; the resource must be fetched from the provider's API (Mercado Pago).
    NeedsFetch {
        /// Resource kind, e.g. "payment".
        resource: String,
        /// Resource id.
        resource_id: String,
    },
    /// A type we do not act on; recorded as ignored and acknowledged.
    Ignored {
        /// Why (e.g. "unhandled event type customer.created").
        reason: String,
    },
}

/// A payload that can never be applied, whatever the retries: goes to the dead-letter queue with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PermanentError(pub String);
