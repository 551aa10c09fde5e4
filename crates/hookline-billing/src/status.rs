//! `hookline billing status` and the console's Billing page: which subscriptions are behind, and which cycles
//! are being retried — read from the database, never from a process's memory. Each list is bounded (the caller
//! says how many rows); the totals are counted in full.

use serde::Serialize;
use sqlx::PgConnection;

use crate::claims::{self, Claim, ClaimStatus};
use crate::subscriptions::{self, Subscription, SubscriptionStatus};

/// How many of each there are in all (the lists may be cut).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Subscriptions past due.
    pub past_due: i64,
    /// Subscriptions waiting for a payment method.
    pub needs_payment_method: i64,
    /// Cycles waiting for their next attempt.
    pub in_retry: i64,
    /// Cycles with a charge in flight.
    pub charging: i64,
    /// Cycles past due or waiting for a payment method.
    pub unpaid_cycles: i64,
    /// Subscriptions whose currency their provider does not charge in (never charged; see
    /// [`BillingStatus::currency_not_accepted`]). Counted by [`status`]; [`totals`] leaves it 0.
    pub currency_not_accepted: i64,
}

/// What the workers' scheduler has to do at a moment, and what is behind: the figures of its metrics
/// ([`crate::metric`]), of `hookline status` and of the console's Billing page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScheduleGauges {
    /// Active subscriptions whose next period has started and is not charged yet.
    pub due_periods: i64,
    /// Declined cycles whose retry is due.
    pub due_retries: i64,
    /// Age in seconds of the oldest due period or due retry (0 when none): a scheduler that stopped makes it grow.
    pub oldest_due_secs: i64,
    /// Declined cycles waiting for their scheduled retry.
    pub in_retry: i64,
    /// Subscriptions past due.
    pub past_due: i64,
    /// Subscriptions waiting for a new payment method.
    pub needs_payment_method: i64,
}

/// The scheduler's figures at `now` (two index reads and the status counts).
pub async fn schedule_gauges(
    conn: &mut PgConnection,
    now: time::OffsetDateTime,
) -> Result<ScheduleGauges, sqlx::Error> {
    let (due_periods, oldest_period) = subscriptions::due_periods(conn, now).await?;
    let (due_retries, oldest_retry) = claims::due_retries(conn, now).await?;
    let oldest = [oldest_period, oldest_retry].into_iter().flatten().min();
    let totals = totals(conn).await?;
    Ok(ScheduleGauges {
        due_periods,
        due_retries,
        oldest_due_secs: oldest.map_or(0, |t| (now - t).whole_seconds().max(0)),
        in_retry: totals.in_retry,
        past_due: totals.past_due,
        needs_payment_method: totals.needs_payment_method,
    })
}

/// Where billing stands.
#[derive(Debug, Clone, Serialize)]
pub struct BillingStatus {
    /// The counts, in full.
    pub totals: Totals,
    /// What the scheduler has due now.
    pub schedule: ScheduleGauges,
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
    /// Subscriptions (not canceled) whose currency is not one their provider charges in — rows of an older
    /// version, e.g. a `pagarme-v5` subscription in `usd`: billing runs never charge them; fix the row or
    /// cancel the subscription.
    pub currency_not_accepted: Vec<Subscription>,
}

impl BillingStatus {
    /// Whether any subscription is behind.
    pub fn anything_behind(&self) -> bool {
        self.totals.past_due + self.totals.needs_payment_method + self.totals.currency_not_accepted
            > 0
    }
}

/// The totals alone (the console's overview asks every few seconds).
pub async fn totals(conn: &mut PgConnection) -> Result<Totals, sqlx::Error> {
    let mut totals = Totals::default();
    for (status, n) in subscriptions::count_by_status(conn).await? {
        match status {
            SubscriptionStatus::PastDue => totals.past_due = n,
            SubscriptionStatus::NeedsPaymentMethod => totals.needs_payment_method = n,
            SubscriptionStatus::Active | SubscriptionStatus::Canceled => {}
        }
    }
    for (status, n) in claims::count_open(conn).await? {
        match status {
            ClaimStatus::RetryScheduled => totals.in_retry = n,
            ClaimStatus::Charging => totals.charging = n,
            ClaimStatus::PastDue | ClaimStatus::NeedsPaymentMethod => totals.unpaid_cycles += n,
            ClaimStatus::Paid | ClaimStatus::Canceled => {}
        }
    }
    Ok(totals)
}

/// Reads it, each list cut to its first `limit` rows. `accepted`: what the configured providers charge in
/// ([`hookline_payments::currency::ProviderCurrencies`]), for [`BillingStatus::currency_not_accepted`].
pub async fn status(
    conn: &mut PgConnection,
    limit: i64,
    accepted: &hookline_payments::currency::ProviderCurrencies,
) -> Result<BillingStatus, sqlx::Error> {
    let schedule = schedule_gauges(conn, time::OffsetDateTime::now_utc()).await?;
    let mut totals = totals(conn).await?;
    let (wrong_currency, currency_not_accepted) =
        subscriptions::with_currency_not_accepted(conn, accepted, limit).await?;
    totals.currency_not_accepted = wrong_currency;
    let past_due = subscriptions::with_status(conn, &[SubscriptionStatus::PastDue], limit).await?;
    let needs_payment_method =
        subscriptions::with_status(conn, &[SubscriptionStatus::NeedsPaymentMethod], limit).await?;
    let in_retry = claims::with_status(conn, ClaimStatus::RetryScheduled, limit).await?;
    let charging = claims::with_status(conn, ClaimStatus::Charging, limit).await?;
    let mut unpaid_cycles = claims::with_status(conn, ClaimStatus::PastDue, limit).await?;
    let rest = usize::try_from(limit)
        .unwrap_or(0)
        .saturating_sub(unpaid_cycles.len());
    unpaid_cycles.extend(
        claims::with_status(conn, ClaimStatus::NeedsPaymentMethod, limit)
            .await?
            .into_iter()
            .take(rest),
    );
    Ok(BillingStatus {
        totals,
        schedule,
        past_due,
        needs_payment_method,
        in_retry,
        charging,
        unpaid_cycles,
        currency_not_accepted,
    })
}
