//! `hookline billing status` and the console's Billing page: which subscriptions are behind, and which cycles
//! are being retried — read from the database, never from a process's memory.

use serde::Serialize;
use sqlx::PgConnection;

use super::claims::{self, Claim, ClaimStatus};
use super::subscriptions::{self, Subscription, SubscriptionStatus};

/// Where billing stands.
#[derive(Debug, Clone, Serialize)]
pub struct BillingStatus {
    /// Subscriptions whose cycle declined every attempt (parked until the method is updated).
    pub past_due: Vec<Subscription>,
    /// Subscriptions whose payment method the gateway called unusable (parked until it is updated).
    pub needs_payment_method: Vec<Subscription>,
    /// Cycles whose last charge was declined and that will be charged again (`next_attempt_at`).
    pub in_retry: Vec<Claim>,
    /// Cycles with a charge in flight (the dispatcher retries the gateway with the same key; an unknown
    /// outcome is looked up).
    pub charging: Vec<Claim>,
    /// Unpaid cycles: past due or waiting for a payment method.
    pub unpaid_cycles: Vec<Claim>,
}

impl BillingStatus {
    /// Whether any subscription is behind.
    pub fn anything_behind(&self) -> bool {
        !(self.past_due.is_empty() && self.needs_payment_method.is_empty())
    }
}

/// Reads it.
pub async fn status(conn: &mut PgConnection) -> Result<BillingStatus, sqlx::Error> {
    let parked = subscriptions::with_status(
        conn,
        &[
            SubscriptionStatus::PastDue,
            SubscriptionStatus::NeedsPaymentMethod,
        ],
    )
    .await?;
    let (past_due, needs_payment_method) = parked
        .into_iter()
        .partition(|s| s.status == SubscriptionStatus::PastDue);
    let open = claims::with_status(
        conn,
        &[
            ClaimStatus::RetryScheduled,
            ClaimStatus::Charging,
            ClaimStatus::PastDue,
            ClaimStatus::NeedsPaymentMethod,
        ],
    )
    .await?;
    let mut status = BillingStatus {
        past_due,
        needs_payment_method,
        in_retry: Vec::new(),
        charging: Vec::new(),
        unpaid_cycles: Vec::new(),
    };
    for claim in open {
        match claim.status {
            ClaimStatus::RetryScheduled => status.in_retry.push(claim),
            ClaimStatus::Charging => status.charging.push(claim),
            _ => status.unpaid_cycles.push(claim),
        }
    }
    Ok(status)
}
