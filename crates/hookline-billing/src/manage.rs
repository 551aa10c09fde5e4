//! What an operator (or the merchant's own tooling) does to a subscription, across its two tables: cancel it,
//! give it a new payment method. Each is one transaction's worth of statements, run in the caller's.

use sqlx::PgConnection;

use crate::claims;
use crate::subscriptions::{self, Subscription};

/// Cancels a subscription: now (later cycles are not charged, and its scheduled retries and parked cycles stop
/// — a charge in flight is left to finish: the gateway may already have it), or, with `at_period_end`, when its
/// running period ends (the run cancels it instead of charging the next cycle). `None` when it does not exist,
/// `Some(false)` when it was already canceled (or already set to cancel at period end).
pub async fn cancel(
    conn: &mut PgConnection,
    id: i64,
    at_period_end: bool,
) -> Result<Option<bool>, sqlx::Error> {
    let changed = subscriptions::mark_canceled(conn, id, at_period_end).await?;
    if changed == Some(true) && !at_period_end {
        claims::cancel_open(conn, id).await?;
    }
    Ok(changed)
}

/// Gives a subscription a new saved payment method: it is `active` again, and its parked cycles (past due, or
/// waiting for a method) are due again now, for the next run. `None` when it does not exist or is canceled.
pub async fn update_payment_method(
    conn: &mut PgConnection,
    id: i64,
    payment_method: &str,
) -> Result<Option<Subscription>, sqlx::Error> {
    let updated = subscriptions::set_payment_method(conn, id, payment_method).await?;
    if let Some(sub) = &updated {
        claims::retry_parked_now(conn, id).await?;
        // Periods that started while it was parked were not charged, and are not now: the scheduler resumes
        // at the running period (its unpaid cycle is the retry above).
        let now = time::OffsetDateTime::now_utc();
        if let Some(current) = crate::period::current_cycle(sub.anchor, sub.interval, now) {
            if let Some(starts) = crate::period::period_start(sub.anchor, sub.interval, current) {
                subscriptions::advance(conn, id, current, starts).await?;
            }
        }
    }
    Ok(updated)
}
