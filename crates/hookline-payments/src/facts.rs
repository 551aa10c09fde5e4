//! The domain events the payments effect writes, and what each carries.
//!
//! Each function is called by [`crate::apply`] at the exact point where its state change is made, inside the
//! same transaction (`hookline_core::domain_events::record`), so a fact exists if and only if its change
//! committed. The subject of a fact — what makes it unique — is the business id it is about (the provider's
//! payment, refund or dispute id; the subscription cycle), never the webhook that told us: two different
//! webhooks reporting the same success produce one `payment.succeeded`.
//!
//! Every payment-related fact carries `payment_version`, the payment row's version after the change: a
//! receiver that keeps the payment's state ignores a fact whose version is not above the one it holds.

use hookline_core::domain_events::{self, EventType, Owner};
use serde::Serialize;
use sqlx::PgConnection;

use hookline_core::handler::HandleError;

/// A payment reached a final status (`succeeded`, `failed`, `canceled`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PaymentFact<'a> {
    /// Our payment id.
    pub payment_id: i64,
    /// Configured provider name.
    pub provider: &'a str,
    /// The provider's payment id.
    pub provider_payment_id: &'a str,
    /// The new status.
    pub status: &'a str,
    /// Amount in minor units, when known.
    pub amount: Option<i64>,
    /// ISO 4217 currency, lower case, when known.
    pub currency: Option<&'a str>,
    /// Refunded so far, minor units.
    pub amount_refunded: i64,
    /// The payment's version after this change.
    pub payment_version: i64,
    /// The stored webhook (`webhook_events.id`) whose processing made the change.
    pub webhook_event_id: i64,
}

/// The subject of the facts about one of `provider`'s objects — a payment, a refund, a dispute: `{provider}/{id}`.
/// One rule for whoever records those facts (here, and the set-based apply) and whoever looks them up by their
/// ids ([`ids_about`]).
pub fn subject(provider: &str, id: &str) -> String {
    format!("{provider}/{id}")
}

/// What a fact is about, for [`ids_about`]: the provider's id of a payment, a refund or a dispute.
#[derive(Debug, Clone, Copy)]
pub enum About<'a> {
    /// A payment: `payment.succeeded`, `payment.failed`, `payment.canceled`.
    Payment(&'a str),
    /// A refund: `refund.applied`.
    Refund(&'a str),
    /// A dispute: `dispute.opened`, `dispute.won`, `dispute.lost`.
    Dispute(&'a str),
}

/// The ids every fact about `about` at `provider` has if it was recorded ([`domain_events::fact_id`] of each
/// type that can be told about it and its [`subject`]): how the console finds them without scanning.
pub fn ids_about(provider: &str, about: About<'_>) -> Vec<String> {
    let (id, types): (&str, &[EventType]) = match about {
        About::Payment(id) => (
            id,
            &[
                EventType::PaymentSucceeded,
                EventType::PaymentFailed,
                EventType::PaymentCanceled,
            ],
        ),
        About::Refund(id) => (id, &[EventType::RefundApplied]),
        About::Dispute(id) => (
            id,
            &[
                EventType::DisputeOpened,
                EventType::DisputeWon,
                EventType::DisputeLost,
            ],
        ),
    };
    let subject = subject(provider, id);
    types
        .iter()
        .map(|ty| domain_events::fact_id(*ty, &subject))
        .collect()
}

/// Records `payment.succeeded` / `payment.failed` / `payment.canceled`.
pub async fn payment(
    tx: &mut PgConnection,
    ty: EventType,
    fact: &PaymentFact<'_>,
) -> Result<(), HandleError> {
    let subject = subject(fact.provider, fact.provider_payment_id);
    let owner = Owner::PaymentOf {
        provider: fact.provider,
        payment_ref: fact.provider_payment_id,
    };
    domain_events::record(tx, ty, &subject, fact, owner).await?;
    Ok(())
}

/// A refund was applied to a succeeded payment.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RefundFact<'a> {
    /// Our refund id.
    pub refund_id: i64,
    /// Configured provider name.
    pub provider: &'a str,
    /// The provider's refund id.
    pub provider_refund_id: &'a str,
    /// Our payment id.
    pub payment_id: i64,
    /// The provider's payment id.
    pub provider_payment_id: &'a str,
    /// Refunded amount, minor units.
    pub amount: i64,
    /// Currency.
    pub currency: &'a str,
    /// The payment's refunded total after this refund.
    pub payment_amount_refunded: i64,
    /// The payment's version after this change.
    pub payment_version: i64,
    /// The stored webhook that reported the refund.
    pub webhook_event_id: i64,
}

/// Records `refund.applied`.
pub async fn refund(tx: &mut PgConnection, fact: &RefundFact<'_>) -> Result<(), HandleError> {
    let subject = subject(fact.provider, fact.provider_refund_id);
    // A refund is its payment's client's, as the payment is.
    let owner = Owner::PaymentOf {
        provider: fact.provider,
        payment_ref: fact.provider_payment_id,
    };
    domain_events::record(tx, EventType::RefundApplied, &subject, fact, owner).await?;
    Ok(())
}

/// A dispute was opened, won or lost.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DisputeFact<'a> {
    /// Our dispute id.
    pub dispute_id: i64,
    /// Configured provider name.
    pub provider: &'a str,
    /// The provider's dispute id.
    pub provider_dispute_id: &'a str,
    /// Our payment id.
    pub payment_id: i64,
    /// The provider's payment id.
    pub provider_payment_id: &'a str,
    /// `open`, `won` or `lost`.
    pub status: &'a str,
    /// Disputed amount, minor units.
    pub amount: i64,
    /// Currency.
    pub currency: &'a str,
    /// The payment's version after this change.
    pub payment_version: i64,
    /// The stored webhook that reported it.
    pub webhook_event_id: i64,
}

/// Records `dispute.opened` / `dispute.won` / `dispute.lost`.
pub async fn dispute(
    tx: &mut PgConnection,
    ty: EventType,
    fact: &DisputeFact<'_>,
) -> Result<(), HandleError> {
    let subject = subject(fact.provider, fact.provider_dispute_id);
    // A dispute is about its payment: the client whose intent it paid sees it, as it sees the payment.
    let owner = Owner::PaymentOf {
        provider: fact.provider,
        payment_ref: fact.provider_payment_id,
    };
    domain_events::record(tx, ty, &subject, fact, owner).await?;
    Ok(())
}

/// A subscription's billing cycle was charged.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SubscriptionFact<'a> {
    /// Configured provider name.
    pub provider: &'a str,
    /// The provider's subscription id.
    pub subscription_id: &'a str,
    /// The cycle (`YYYY-MM` or the provider's period key).
    pub billing_cycle: &'a str,
    /// The provider's invoice id.
    pub invoice_id: &'a str,
    /// Charged amount, minor units.
    pub amount: i64,
    /// Currency.
    pub currency: &'a str,
    /// The stored webhook that reported it.
    pub webhook_event_id: i64,
}

/// Records `subscription.charged`; the subject is the business key `(subscription_id, billing_cycle)`.
pub async fn subscription_charged(
    tx: &mut PgConnection,
    fact: &SubscriptionFact<'_>,
) -> Result<(), HandleError> {
    let subject = format!("{}/{}", fact.subscription_id, fact.billing_cycle);
    // Subscriptions belong to no API client yet: a back office sees their facts.
    domain_events::record(
        tx,
        EventType::SubscriptionCharged,
        &subject,
        fact,
        Owner::Nobody,
    )
    .await?;
    Ok(())
}
