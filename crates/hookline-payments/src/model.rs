//! Provider-neutral payment facts, produced by [`crate::normalize`] from raw provider events.
//!
//! Events are *state transitions*, not commands: each fact says what the provider observed ("payment pi_1 is
//! succeeded for 1000 BRL"), so applying the same facts in any order converges to the same state.

use hookline_core::domain_events::EventType;
use hookline_core::handler::HandleError;

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
    /// Being processed (waiting for payment, for the customer, for the bank).
    Processing,
    /// Authorized, not captured (a manual capture): no money moved yet — the capture makes it `Succeeded`, a void or
    /// the authorization's expiry `Canceled`.
    Authorized,
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
            PaymentStatus::Authorized => "authorized",
            PaymentStatus::Failed => "failed",
            PaymentStatus::Canceled => "canceled",
            PaymentStatus::Succeeded => "succeeded",
        }
    }

    /// Parses the database spelling; anything else is refused, never read as a default (an unknown status read
    /// as `Created` would let a forward-only state machine move a payment "forward" from the wrong place).
    pub fn parse(s: &str) -> Result<PaymentStatus, UnknownStatus> {
        Ok(match s {
            "created" => PaymentStatus::Created,
            "processing" => PaymentStatus::Processing,
            "authorized" => PaymentStatus::Authorized,
            "failed" => PaymentStatus::Failed,
            "canceled" => PaymentStatus::Canceled,
            "succeeded" => PaymentStatus::Succeeded,
            _ => return Err(UnknownStatus::new("payment", s)),
        })
    }

    /// The domain event announcing that a payment reached this status, for the statuses the merchant's systems
    /// are told about (the final ones).
    pub fn fact(self) -> Option<EventType> {
        match self {
            PaymentStatus::Succeeded => Some(EventType::PaymentSucceeded),
            PaymentStatus::Failed => Some(EventType::PaymentFailed),
            PaymentStatus::Canceled => Some(EventType::PaymentCanceled),
            PaymentStatus::Created | PaymentStatus::Processing | PaymentStatus::Authorized => None,
        }
    }

    /// The status a payment intent linked to this payment follows to: success succeeds the intent, a failure
    /// fails it, a cancellation (a void, an expired authorization or Pix) cancels it, an authorization waits for
    /// its capture (`requires_capture`, the customer's part done).
    pub fn intent_status(self) -> Option<IntentStatus> {
        match self {
            PaymentStatus::Succeeded => Some(IntentStatus::Succeeded),
            PaymentStatus::Failed => Some(IntentStatus::Failed),
            PaymentStatus::Canceled => Some(IntentStatus::Canceled),
            PaymentStatus::Authorized => Some(IntentStatus::RequiresCapture),
            PaymentStatus::Created | PaymentStatus::Processing => None,
        }
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

    /// Parses the database spelling; anything else is refused, never read as `Open`.
    pub fn parse(s: &str) -> Result<DisputeStatus, UnknownStatus> {
        Ok(match s {
            "open" => DisputeStatus::Open,
            "won" => DisputeStatus::Won,
            "lost" => DisputeStatus::Lost,
            _ => return Err(UnknownStatus::new("dispute", s)),
        })
    }

    /// The domain event announcing that a dispute reached this status.
    pub fn fact(self) -> EventType {
        match self {
            DisputeStatus::Open => EventType::DisputeOpened,
            DisputeStatus::Won => EventType::DisputeWon,
            DisputeStatus::Lost => EventType::DisputeLost,
        }
    }
}

/// Status of a payment intent (`payment_intents.status`): what the merchant asked hookline to charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntentStatus {
    /// Created with `confirm: false` when the checkout was built; nothing is sent until it is confirmed.
    RequiresConfirmation,
    /// Waiting for the dispatcher to send the charge.
    RequiresDispatch,
    /// The gateway wants the customer first (3-D Secure, a Pix QR code to pay): `next_action` says what; the
    /// provider's webhook completes it.
    RequiresAction,
    /// `capture_method: manual`: the gateway authorized the amount and holds it; `POST …/capture` takes it (all or
    /// less), `POST …/cancel` releases it (the void). No money moved yet.
    RequiresCapture,
    /// The gateway accepted the charge; its outcome is not known yet.
    Processing,
    /// Captured; final.
    Succeeded,
    /// Declined or failed at the gateway (`failure_code`, `failure_message`); final.
    Failed,
    /// Canceled — before its charge was sent, or at the gateway (a 3-D Secure or Pix abandoned, an authorization
    /// voided or expired) — by the merchant, by hookline when nobody completed it in time, or by the gateway
    /// (`cancellation_reason`); final. It holds its order and billing cycle no more.
    Canceled,
    /// hookline's own problem (its configuration, an answer it cannot interpret): an operator must look.
    NeedsAttention,
}

string_enum_schema!(IntentStatus, IntentStatus::ALL);

impl IntentStatus {
    /// Every status, in the order of an intent's life (filters and documentation list them so).
    pub const ALL: [IntentStatus; 9] = [
        IntentStatus::RequiresConfirmation,
        IntentStatus::RequiresDispatch,
        IntentStatus::RequiresAction,
        IntentStatus::RequiresCapture,
        IntentStatus::Processing,
        IntentStatus::Succeeded,
        IntentStatus::Failed,
        IntentStatus::Canceled,
        IntentStatus::NeedsAttention,
    ];

    /// Database spelling (the `payment_intents.status` CHECK).
    pub fn as_str(&self) -> &'static str {
        match self {
            IntentStatus::RequiresConfirmation => "requires_confirmation",
            IntentStatus::RequiresDispatch => "requires_dispatch",
            IntentStatus::RequiresAction => "requires_action",
            IntentStatus::RequiresCapture => "requires_capture",
            IntentStatus::Processing => "processing",
            IntentStatus::Succeeded => "succeeded",
            IntentStatus::Failed => "failed",
            IntentStatus::Canceled => "canceled",
            IntentStatus::NeedsAttention => "needs_attention",
        }
    }

    /// Parses the database spelling; anything else is refused.
    pub fn parse(s: &str) -> Result<IntentStatus, UnknownStatus> {
        Ok(match s {
            "requires_confirmation" => IntentStatus::RequiresConfirmation,
            "requires_dispatch" => IntentStatus::RequiresDispatch,
            "requires_action" => IntentStatus::RequiresAction,
            "requires_capture" => IntentStatus::RequiresCapture,
            "processing" => IntentStatus::Processing,
            "succeeded" => IntentStatus::Succeeded,
            "failed" => IntentStatus::Failed,
            "canceled" => IntentStatus::Canceled,
            "needs_attention" => IntentStatus::NeedsAttention,
            _ => return Err(UnknownStatus::new("payment intent", s)),
        })
    }

    /// Whether nothing moves the intent any more (success, failure or cancelation).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            IntentStatus::Succeeded | IntentStatus::Failed | IntentStatus::Canceled
        )
    }
}

/// A stored status that is none of its enum's values (a row written by a newer or foreign writer, a manual
/// edit): refused where it is read, so it cannot silently rank as the lowest status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored {kind} status {value:?} is not a known {kind} status")]
pub struct UnknownStatus {
    /// Which status (`payment`, `dispute`, `payment intent`).
    pub kind: &'static str,
    /// The value as stored (bounded, so a long garbage value cannot flood a log line).
    pub value: String,
}

impl UnknownStatus {
    pub fn new(kind: &'static str, value: &str) -> UnknownStatus {
        UnknownStatus {
            kind,
            value: value.chars().take(64).collect(),
        }
    }
}

impl From<UnknownStatus> for HandleError {
    /// Retrying reads the same row again: permanent, with the value named.
    fn from(e: UnknownStatus) -> Self {
        HandleError::Permanent(anyhow::Error::new(e))
    }
}

/// The OpenAPI schema of a status kept as text: a string restricted to every spelling of `$all`, so the merchant
/// API's document lists exactly the values the code can produce (`hookline-api`'s `openapi`).
#[macro_export]
macro_rules! string_enum_schema {
    ($ty:ty, $all:expr) => {
        impl utoipa::PartialSchema for $ty {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some($all.iter().map(|s| s.as_str())))
                    .into()
            }
        }

        impl utoipa::ToSchema for $ty {}
    };
}
pub use string_enum_schema;

/// Statuses travel as their enums across the SQL boundary: they decode from `TEXT` through `parse` (an unknown
/// value is a decode error naming it, never a default) and encode as their database spelling.
#[macro_export]
#[doc(hidden)]
macro_rules! text_status {
    ($ty:ty) => {
        impl sqlx::Type<sqlx::Postgres> for $ty {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::Type<sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $ty {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&str as sqlx::Decode<'r, sqlx::Postgres>>::decode(value)?;
                Ok(<$ty>::parse(text)?)
            }
        }

        impl sqlx::Encode<'_, sqlx::Postgres> for $ty {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<'_, sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }

        /// As its database spelling (the API and the console show that).
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// Compared with its database spelling (`status == "succeeded"`).
        impl PartialEq<&str> for $ty {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

/// Also used by the crates that own other status columns (`hookline-billing`).
pub use crate::text_status;

text_status!(PaymentStatus);
text_status!(DisputeStatus);
text_status!(IntentStatus);

/// The provider's reason for a failed payment (a decline, a failed 3-D Secure challenge, an expired Pix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The provider's code (`card_declined`, `payment_intent_authentication_failure`, `expired`), at most 200
    /// characters.
    pub code: String,
    /// The provider's message, at most 1000 characters.
    pub message: Option<String>,
}

impl Failure {
    /// A failure from the provider's texts, cut to the columns' bounds (`payment_intents.failure_*`).
    pub fn new(code: &str, message: Option<&str>) -> Failure {
        Failure {
            code: code.chars().take(200).collect(),
            message: message.map(|m| m.chars().take(1000).collect()),
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
        /// Why it failed, when the provider says (Stripe `last_payment_error`, Mercado Pago `status_detail`):
        /// the intent it completes shows it as `failure_code` / `failure_message`.
        failure: Option<Failure>,
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
    /// The provider says payment `payment_ref` has `total` refunded in all, and gives its refunds no ids of their
    /// own (Pagar.me's `canceled_amount`): whatever of `total` hookline does not hold yet is one refund, keyed by
    /// the total.
    RefundedTotal {
        /// The refunded payment.
        payment_ref: String,
        /// Refunded in all (> 0).
        total: Money,
    },
    /// The provider no longer shows a chargeback on payment `payment_ref` (Pagar.me: a `chargedback` charge
    /// `paid` again): the dispute `dispute_ref`, if hookline knows it open, was won. Nothing otherwise.
    ChargebackReversed {
        /// The dispute's key (`cb_{charge}`).
        dispute_ref: String,
        /// The payment.
        payment_ref: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_parses_back_from_its_database_spelling() {
        use PaymentStatus::*;
        for s in [Created, Processing, Authorized, Failed, Canceled, Succeeded] {
            assert_eq!(PaymentStatus::parse(s.as_str()), Ok(s));
        }
        for s in [DisputeStatus::Open, DisputeStatus::Won, DisputeStatus::Lost] {
            assert_eq!(DisputeStatus::parse(s.as_str()), Ok(s));
        }
        for s in IntentStatus::ALL {
            assert_eq!(IntentStatus::parse(s.as_str()), Ok(s));
        }
    }

    #[test]
    fn an_unknown_stored_status_is_refused_naming_the_value_never_defaulted() {
        let e = PaymentStatus::parse("refunded").expect_err("not a payment status");
        assert_eq!(e.value, "refunded");
        assert_eq!(
            e.to_string(),
            "stored payment status \"refunded\" is not a known payment status"
        );
        // Case matters: the database spelling is exact.
        assert!(PaymentStatus::parse("Created").is_err());
        assert!(PaymentStatus::parse("").is_err());
        let e = DisputeStatus::parse("closed").expect_err("not a dispute status");
        assert!(e.to_string().contains("\"closed\""), "{e}");
        assert!(IntentStatus::parse("cancelled").is_err());
        // In the worker it is a permanent failure (dead-lettered with the reason), not a retry.
        match HandleError::from(e) {
            HandleError::Permanent(e) => assert!(e.to_string().contains("closed"), "{e}"),
            other => panic!("expected a permanent error, got {other:?}"),
        }
    }

    #[test]
    fn final_payment_statuses_map_once_to_their_fact_and_intent_status() {
        use PaymentStatus::*;
        let table = [
            (Created, None, None),
            (Processing, None, None),
            (Authorized, None, Some(IntentStatus::RequiresCapture)),
            (
                Failed,
                Some(EventType::PaymentFailed),
                Some(IntentStatus::Failed),
            ),
            (
                Canceled,
                Some(EventType::PaymentCanceled),
                Some(IntentStatus::Canceled),
            ),
            (
                Succeeded,
                Some(EventType::PaymentSucceeded),
                Some(IntentStatus::Succeeded),
            ),
        ];
        for (status, fact, intent) in table {
            assert_eq!(status.fact(), fact, "{status:?}");
            assert_eq!(status.intent_status(), intent, "{status:?}");
        }
    }
}
