//! `billing_claims`: one row per `(subscription, cycle)` — the business key of a billing run
//! (`billing_claims_cycle_key`) — and the cycle's dunning state. This module owns the table's SQL, and decides
//! what a cycle's final charge means ([`on_charge_final`]): paid, retried later, past due, or waiting for a new
//! payment method, with the subscription's facts, in the transaction that completes the charge.
//!
//! Dunning (issue 28), and why:
//!
//! | the cycle's charge | the cycle | the subscription | facts |
//! |---|---|---|---|
//! | succeeded (any channel) | `paid` | `active` again if nothing else is parked | `subscription.charged` |
//! | declined, the method unusable ([`crate::declines::method_unusable`]) | `needs_payment_method` | `needs_payment_method` | `subscription.payment_failed` (no next attempt) |
//! | declined, a retry left in the cycle's schedule | `retry_scheduled` at now + the delay | unchanged | `subscription.payment_failed` (with `next_attempt_at`) |
//! | declined, no retry left | `past_due` | `past_due` | `subscription.payment_failed`, `subscription.past_due` |
//! | the gateway down, the outcome unknown | `charging` (unchanged) | unchanged | none: the dispatcher retries the SAME key inside its lifetime, then looks it up |
//!
//! The schedule is copied from `providers.NAME.dunning_retry_secs` when the cycle is claimed
//! (`retry_schedule_secs`), so whichever process completes the charge (the worker from a webhook, the dispatcher
//! from the gateway's answer) decides the next attempt without the configuration.
//!
//! Locks: the subscription row first, then the claim (the billing run takes them in the same order), so a run and
//! a completing charge never wait on each other in a circle.

use hookline_core::domain_events::{self, EventType, Owner, RecordError};
use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

pub use hookline_payments::intents::FinalCharge;

use crate::declines::method_unusable;
use crate::subscriptions::{self, SubscriptionStatus};
use hookline_payments::model::UnknownStatus;

/// Where a claimed cycle stands (the column's CHECK lists the same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStatus {
    /// A charge is in flight (or needs an operator: the dispatcher's own states say which).
    Charging,
    /// The last charge was declined; the next attempt is due at `next_attempt_at`.
    RetryScheduled,
    /// Paid (by this run's charge or through another channel).
    Paid,
    /// Every attempt declined.
    PastDue,
    /// The gateway called the payment method unusable.
    NeedsPaymentMethod,
    /// The subscription was canceled while the cycle was unpaid.
    Canceled,
}

impl ClaimStatus {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimStatus::Charging => "charging",
            ClaimStatus::RetryScheduled => "retry_scheduled",
            ClaimStatus::Paid => "paid",
            ClaimStatus::PastDue => "past_due",
            ClaimStatus::NeedsPaymentMethod => "needs_payment_method",
            ClaimStatus::Canceled => "canceled",
        }
    }

    /// Parses the database spelling; anything else is refused.
    pub fn parse(s: &str) -> Result<ClaimStatus, UnknownStatus> {
        Ok(match s {
            "charging" => ClaimStatus::Charging,
            "retry_scheduled" => ClaimStatus::RetryScheduled,
            "paid" => ClaimStatus::Paid,
            "past_due" => ClaimStatus::PastDue,
            "needs_payment_method" => ClaimStatus::NeedsPaymentMethod,
            "canceled" => ClaimStatus::Canceled,
            _ => return Err(UnknownStatus::new("billing cycle", s)),
        })
    }
}

hookline_payments::model::text_status!(ClaimStatus);

/// A claimed cycle.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct Claim {
    /// The subscription.
    pub subscription_id: i64,
    /// `YYYY-MM`.
    pub billing_cycle: String,
    /// The internal id of its latest charge.
    #[serde(skip)]
    pub intent_id: i64,
    /// The latest charge's public id.
    pub intent: String,
    /// Where it stands.
    pub status: ClaimStatus,
    /// Charges made for it (by billing runs).
    pub attempts: i32,
    /// When the next attempt is due (`retry_scheduled`).
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_attempt_at: Option<OffsetDateTime>,
    /// Seconds to wait after the 1st, 2nd, … decline.
    pub retry_schedule_secs: Vec<i32>,
    /// The last decline's code.
    pub last_failure_code: Option<String>,
    /// The last decline's message.
    pub last_failure_message: Option<String>,
    /// When the cycle was first claimed.
    #[serde(with = "time::serde::rfc3339")]
    pub claimed_at: OffsetDateTime,
    /// When it last changed.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// `sqlx::query_as!` of the [`Claim`]s that `$where` selects (the text after `WHERE`, on `billing_claims b`
/// joined to its intent `p`): the columns, named and typed once here, for every statement returning a claim
/// (sqlx joins `+`-separated literals before it checks the statement).
macro_rules! claim_query {
    ($where:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Claim,
            r#"SELECT b.subscription_id, b.billing_cycle, b.intent_id, p.public_id AS intent,
                b.status AS "status: ClaimStatus", b.attempts, b.next_attempt_at, b.retry_schedule_secs,
                b.last_failure_code, b.last_failure_message, b.claimed_at, b.updated_at
           FROM billing_claims b JOIN payment_intents p ON p.id = b.intent_id
          WHERE "# + $where
            $(, $arg)*
        )
    };
}

/// The claim of a cycle, locked (`FOR UPDATE`) until the caller's transaction ends.
pub async fn lock(
    conn: &mut PgConnection,
    subscription_id: i64,
    cycle: &str,
) -> Result<Option<Claim>, sqlx::Error> {
    claim_query!(
        r#"b.subscription_id = $1 AND b.billing_cycle = $2 FOR UPDATE OF b"#,
        subscription_id,
        cycle,
    )
    .fetch_optional(conn)
    .await
}

/// A subscription's latest claim (its newest cycle), with its charge's public id: what the merchant API shows as
/// `latest_charge`. The index of `billing_claims_cycle_key` serves it.
pub async fn latest(
    conn: &mut PgConnection,
    subscription_id: i64,
) -> Result<Option<Claim>, sqlx::Error> {
    claim_query!(
        r#"b.subscription_id = $1 ORDER BY b.billing_cycle DESC LIMIT 1"#,
        subscription_id,
    )
    .fetch_optional(conn)
    .await
}

/// The latest claim of each of `subscription_ids` (a list page's, at most a hundred) in one statement.
pub async fn latest_of(
    conn: &mut PgConnection,
    subscription_ids: &[i64],
) -> Result<Vec<Claim>, sqlx::Error> {
    // DISTINCT ON keeps each subscription's first row in the order: its newest cycle.
    sqlx::query_as!(
        Claim,
        r#"SELECT DISTINCT ON (b.subscription_id)
                b.subscription_id, b.billing_cycle, b.intent_id, p.public_id AS intent,
                b.status AS "status: ClaimStatus", b.attempts, b.next_attempt_at, b.retry_schedule_secs,
                b.last_failure_code, b.last_failure_message, b.claimed_at, b.updated_at
           FROM billing_claims b JOIN payment_intents p ON p.id = b.intent_id
          WHERE b.subscription_id = ANY($1)
          ORDER BY b.subscription_id, b.billing_cycle DESC"#,
        subscription_ids,
    )
    .fetch_all(conn)
    .await
}

/// The claim of a cycle, if any.
pub async fn get(
    conn: &mut PgConnection,
    subscription_id: i64,
    cycle: &str,
) -> Result<Option<Claim>, sqlx::Error> {
    claim_query!(
        r#"b.subscription_id = $1 AND b.billing_cycle = $2"#,
        subscription_id,
        cycle,
    )
    .fetch_optional(conn)
    .await
}

/// Claims a new cycle for its first charge `intent_id`, with the provider's retry schedule. `false` when the
/// cycle was claimed already (`billing_claims_cycle_key` decides; a concurrent claim waits for the first).
pub async fn insert(
    conn: &mut PgConnection,
    subscription_id: i64,
    cycle: &str,
    intent_id: i64,
    status: ClaimStatus,
    retry_schedule_secs: &[i32],
) -> Result<bool, sqlx::Error> {
    let claimed: Option<i64> = sqlx::query_scalar!(
        "INSERT INTO billing_claims (subscription_id, billing_cycle, intent_id, status, retry_schedule_secs)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT ON CONSTRAINT billing_claims_cycle_key DO NOTHING
         RETURNING subscription_id",
        subscription_id,
        cycle,
        intent_id,
        status.as_str(),
        retry_schedule_secs,
    )
    .fetch_optional(conn)
    .await?;
    Ok(claimed.is_some())
}

/// Records the next attempt of a claimed cycle (a retry): its new charge, one more attempt.
pub async fn start_attempt(
    conn: &mut PgConnection,
    subscription_id: i64,
    cycle: &str,
    intent_id: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE billing_claims
            SET intent_id = $3, status = $4, attempts = attempts + 1, next_attempt_at = NULL,
                updated_at = now()
          WHERE subscription_id = $1 AND billing_cycle = $2",
        subscription_id,
        cycle,
        intent_id,
        ClaimStatus::Charging.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The cycle is being paid (or was paid) through another channel, by `intent_id`: the claim follows it
/// (created if the cycle had none, with the provider's `retry_schedule_secs`), without counting an attempt.
///
/// A claim created here while the other channel's charge is in flight becomes that charge's cycle: if it is
/// declined, [`on_charge_final`] decides the cycle's dunning from this schedule — without it (an empty schedule)
/// a declined checkout would make the cycle and the subscription `past_due` at once, with no billing attempt. An
/// existing claim keeps the schedule it was claimed with.
pub async fn follow_other_channel(
    conn: &mut PgConnection,
    subscription_id: i64,
    cycle: &str,
    intent_id: i64,
    paid: bool,
    retry_schedule_secs: &[i32],
) -> Result<(), sqlx::Error> {
    let status = if paid {
        ClaimStatus::Paid
    } else {
        ClaimStatus::Charging
    };
    sqlx::query!(
        "INSERT INTO billing_claims (subscription_id, billing_cycle, intent_id, status, retry_schedule_secs)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT ON CONSTRAINT billing_claims_cycle_key
         DO UPDATE SET intent_id = EXCLUDED.intent_id, status = EXCLUDED.status, next_attempt_at = NULL,
                       updated_at = now()",
        subscription_id,
        cycle,
        intent_id,
        status.as_str(),
        retry_schedule_secs,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The cycles whose next attempt is due at `now`, oldest due first: `(subscription_id, billing_cycle)`.
pub async fn due(
    conn: &mut PgConnection,
    now: OffsetDateTime,
    limit: i64,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    // `status = 'retry_scheduled'` stays literal: it is the predicate of the partial index
    // `billing_claims_due_idx`, which a prepared statement's generic plan can only use when the value is in the
    // text.
    let due = sqlx::query!(
        "SELECT subscription_id, billing_cycle FROM billing_claims
          WHERE status = 'retry_scheduled' AND next_attempt_at <= $1
          ORDER BY next_attempt_at, subscription_id LIMIT $2",
        now,
        limit,
    )
    .fetch_all(conn)
    .await?;
    Ok(due
        .into_iter()
        .map(|r| (r.subscription_id, r.billing_cycle))
        .collect())
}

/// How many cycles' retries are due at `now`, and the oldest one's due time (the partial index
/// `billing_claims_due_idx`).
pub async fn due_retries(
    conn: &mut PgConnection,
    now: OffsetDateTime,
) -> Result<(i64, Option<OffsetDateTime>), sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT count(*) AS "count!", min(next_attempt_at) AS oldest FROM billing_claims
          WHERE status = 'retry_scheduled' AND next_attempt_at <= $1"#,
        now,
    )
    .fetch_one(conn)
    .await?;
    Ok((row.count, row.oldest))
}

/// The first `limit` claims in `status`, by subscription and cycle.
pub async fn with_status(
    conn: &mut PgConnection,
    status: ClaimStatus,
    limit: i64,
) -> Result<Vec<Claim>, sqlx::Error> {
    claim_query!(
        r#"b.status = $1 ORDER BY b.subscription_id, b.billing_cycle LIMIT $2"#,
        status.as_str(),
        limit,
    )
    .fetch_all(conn)
    .await
}

/// How many claims are in each status other than `paid` (the open ones; the index `billing_claims_open_idx`
/// and the due index cover most of them, a scan of the charging ones is bounded by what is in flight).
pub async fn count_open(conn: &mut PgConnection) -> Result<Vec<(ClaimStatus, i64)>, sqlx::Error> {
    // `count(*)` is never NULL; PostgreSQL's inference cannot tell (`!`).
    let counts = sqlx::query!(
        r#"SELECT status AS "status: ClaimStatus", count(*) AS "count!" FROM billing_claims
            WHERE status NOT IN ($1, $2) GROUP BY status"#,
        ClaimStatus::Paid.as_str(),
        ClaimStatus::Canceled.as_str(),
    )
    .fetch_all(conn)
    .await?;
    Ok(counts.into_iter().map(|r| (r.status, r.count)).collect())
}

/// A canceled subscription's unpaid cycles stop: scheduled retries and parked cycles become `canceled` (a
/// charge in flight is left to finish: the gateway may already have it).
pub async fn cancel_open(
    conn: &mut PgConnection,
    subscription_id: i64,
) -> Result<u64, sqlx::Error> {
    // The statuses in the WHERE clause stay literal: they are the predicate of the partial index
    // `billing_claims_open_idx`, which a prepared statement's generic plan can only use when the values are in
    // the text. The status written is a bind.
    Ok(sqlx::query!(
        "UPDATE billing_claims SET status = $2, next_attempt_at = NULL, updated_at = now()
          WHERE subscription_id = $1 AND status IN ('retry_scheduled', 'past_due', 'needs_payment_method')",
        subscription_id,
        ClaimStatus::Canceled.as_str(),
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// A subscription got a new payment method: its parked cycles are due again now (one attempt each; a decline
/// is judged again — unusable: waiting for a method; otherwise past due, the schedule being spent).
pub async fn retry_parked_now(
    conn: &mut PgConnection,
    subscription_id: i64,
) -> Result<u64, sqlx::Error> {
    // The statuses in the WHERE clause stay literal: a subset of the partial index `billing_claims_open_idx`'s
    // predicate, provable only when the values are in the text. The status written is a bind.
    Ok(sqlx::query!(
        "UPDATE billing_claims SET status = $2, next_attempt_at = now(), updated_at = now()
          WHERE subscription_id = $1 AND status IN ('past_due', 'needs_payment_method')",
        subscription_id,
        ClaimStatus::RetryScheduled.as_str(),
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// What the dunning does after the `attempts`-th charge of a cycle was declined with `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDecline {
    /// Try again after this many seconds.
    RetryIn(i32),
    /// No retry left: past due.
    PastDue,
    /// The method cannot be charged: wait for a new one.
    NeedsPaymentMethod,
}

/// The dunning rule (see the module documentation): `attempts` counts every charge of the cycle so far,
/// including the declined one; `schedule[n]` is the wait after the (n+1)-th decline.
pub fn after_decline(attempts: i32, schedule: &[i32], code: Option<&str>) -> AfterDecline {
    if code.is_some_and(method_unusable) {
        return AfterDecline::NeedsPaymentMethod;
    }
    let index = usize::try_from(attempts.max(1) - 1).unwrap_or(usize::MAX);
    match schedule.get(index) {
        Some(&secs) => AfterDecline::RetryIn(secs.max(1)),
        None => AfterDecline::PastDue,
    }
}

/// `subscription.charged`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChargedFact<'a> {
    billed_by: &'static str,
    /// The subscription's public id (`sub_hl_…`), what the merchant API shows.
    subscription: &'a str,
    /// The subscription's internal id (the operator's CLI).
    subscription_id: String,
    billing_cycle: &'a str,
    provider: &'a str,
    amount: i64,
    currency: &'a str,
    intent_id: &'a str,
    provider_payment_id: Option<&'a str>,
    attempt: i32,
}

/// `subscription.payment_failed`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PaymentFailedFact<'a> {
    /// The subscription's public id (`sub_hl_…`), what the merchant API shows.
    subscription: &'a str,
    /// The subscription's internal id (the operator's CLI).
    subscription_id: String,
    billing_cycle: &'a str,
    provider: &'a str,
    amount: i64,
    currency: &'a str,
    intent_id: &'a str,
    attempt: i32,
    failure_code: Option<&'a str>,
    failure_message: Option<&'a str>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    next_attempt_at: Option<OffsetDateTime>,
    subscription_status: SubscriptionStatus,
}

/// `subscription.past_due`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PastDueFact<'a> {
    /// The subscription's public id (`sub_hl_…`), what the merchant API shows.
    subscription: &'a str,
    /// The subscription's internal id (the operator's CLI).
    subscription_id: String,
    billing_cycle: &'a str,
    provider: &'a str,
    amount: i64,
    currency: &'a str,
    attempts: i32,
    failure_code: Option<&'a str>,
    failure_message: Option<&'a str>,
}

/// The subject of a hookline subscription's facts: distinct from the `sub_…` subjects of Stripe's own
/// subscriptions (`invoice.paid` also yields `subscription.charged`).
fn subject(subscription_id: i64, cycle: &str) -> String {
    format!("hookline/{subscription_id}/{cycle}")
}

/// The dunning decision for a cycle's charge that reached a final status (see the module documentation), with
/// its facts, in the caller's transaction. A failed charge that is not the cycle's current one (a merchant's
/// own checkout for the cycle, declined) decides nothing: the cycle keeps its own schedule.
pub async fn on_charge_final(
    conn: &mut PgConnection,
    charge: &FinalCharge<'_>,
) -> Result<(), RecordError> {
    // The subscription first, then the claim: the billing run's order.
    let Some(sub) = subscriptions::lock(conn, charge.subscription_id).await? else {
        return Ok(());
    };
    let cycle = charge.billing_cycle;
    if charge.succeeded {
        // Paid: no schedule is ever read again (an existing claim keeps its own).
        follow_other_channel(conn, sub.id, cycle, charge.intent_id, true, &[]).await?;
        let attempts = lock(conn, sub.id, cycle).await?.map_or(1, |c| c.attempts);
        subscriptions::reactivate_if_clear(conn, sub.id).await?;
        domain_events::record(
            conn,
            EventType::SubscriptionCharged,
            &subject(sub.id, cycle),
            &ChargedFact {
                billed_by: "hookline",
                subscription: &sub.public_id,
                subscription_id: sub.id.to_string(),
                billing_cycle: cycle,
                provider: charge.provider,
                amount: charge.amount,
                currency: charge.currency,
                intent_id: charge.public_id,
                provider_payment_id: charge.provider_payment_id,
                attempt: attempts,
            },
            // The subscription's client reads it (an operator's subscription: only a back office).
            Owner::client(sub.client.as_deref()),
        )
        .await?;
        return Ok(());
    }
    let Some(claim) = lock(conn, sub.id, cycle).await? else {
        return Ok(());
    };
    if claim.intent_id != charge.intent_id || claim.status != ClaimStatus::Charging {
        return Ok(());
    }
    let schedule = claim.retry_schedule_secs.as_slice();
    let decision = if sub.status == SubscriptionStatus::Canceled {
        None
    } else {
        Some(after_decline(claim.attempts, schedule, charge.failure_code))
    };
    let (status, next_attempt_at, sub_status) = match decision {
        None => (ClaimStatus::Canceled, None, SubscriptionStatus::Canceled),
        Some(AfterDecline::RetryIn(secs)) => (
            ClaimStatus::RetryScheduled,
            Some(OffsetDateTime::now_utc() + time::Duration::seconds(i64::from(secs))),
            sub.status,
        ),
        Some(AfterDecline::PastDue) => (ClaimStatus::PastDue, None, SubscriptionStatus::PastDue),
        Some(AfterDecline::NeedsPaymentMethod) => (
            ClaimStatus::NeedsPaymentMethod,
            None,
            SubscriptionStatus::NeedsPaymentMethod,
        ),
    };
    let outcome = match status {
        ClaimStatus::RetryScheduled => "retry",
        ClaimStatus::PastDue => "past_due",
        ClaimStatus::NeedsPaymentMethod => "needs_payment_method",
        _ => "canceled",
    };
    metrics::counter!(crate::metric::DECLINES, "outcome" => outcome).increment(1);
    let cut = |s: Option<&str>, max: usize| s.map(|s| s.chars().take(max).collect::<String>());
    sqlx::query!(
        "UPDATE billing_claims
            SET status = $3, next_attempt_at = $4, last_failure_code = $5, last_failure_message = $6,
                updated_at = now()
          WHERE subscription_id = $1 AND billing_cycle = $2",
        sub.id,
        cycle,
        status.as_str(),
        next_attempt_at,
        cut(charge.failure_code, 200),
        cut(charge.failure_message, 1000),
    )
    .execute(&mut *conn)
    .await?;
    if sub_status != sub.status {
        let reason = format!(
            "cycle {cycle}: {}",
            charge
                .failure_message
                .or(charge.failure_code)
                .unwrap_or("declined")
        );
        subscriptions::set_status(conn, sub.id, sub_status, Some(&reason)).await?;
    }
    let subject_id = subject(sub.id, cycle);
    domain_events::record(
        conn,
        EventType::SubscriptionPaymentFailed,
        &format!("{subject_id}/{}", charge.public_id),
        &PaymentFailedFact {
            subscription: &sub.public_id,
            subscription_id: sub.id.to_string(),
            billing_cycle: cycle,
            provider: charge.provider,
            amount: charge.amount,
            currency: charge.currency,
            intent_id: charge.public_id,
            attempt: claim.attempts,
            failure_code: charge.failure_code,
            failure_message: charge.failure_message,
            next_attempt_at,
            subscription_status: sub_status,
        },
        Owner::client(sub.client.as_deref()),
    )
    .await?;
    if status == ClaimStatus::PastDue {
        domain_events::record(
            conn,
            EventType::SubscriptionPastDue,
            // Per attempt count: a cycle past due again after its method was updated is a new fact.
            &format!("{subject_id}/{}", claim.attempts),
            &PastDueFact {
                subscription: &sub.public_id,
                subscription_id: sub.id.to_string(),
                billing_cycle: cycle,
                provider: charge.provider,
                amount: charge.amount,
                currency: charge.currency,
                attempts: claim.attempts,
                failure_code: charge.failure_code,
                failure_message: charge.failure_message,
            },
            Owner::client(sub.client.as_deref()),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declines_are_retried_on_the_schedule_then_past_due() {
        let schedule = [86_400, 259_200];
        let soft = Some("insufficient_funds");
        assert_eq!(
            after_decline(1, &schedule, soft),
            AfterDecline::RetryIn(86_400)
        );
        assert_eq!(
            after_decline(2, &schedule, soft),
            AfterDecline::RetryIn(259_200)
        );
        assert_eq!(after_decline(3, &schedule, soft), AfterDecline::PastDue);
        assert_eq!(after_decline(1, &[], None), AfterDecline::PastDue);
        assert_eq!(
            after_decline(1, &schedule, Some("expired_card")),
            AfterDecline::NeedsPaymentMethod
        );
        assert_eq!(
            after_decline(0, &schedule, soft),
            AfterDecline::RetryIn(86_400)
        );
    }
}
