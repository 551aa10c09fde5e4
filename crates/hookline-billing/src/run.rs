//! The billing run: charges each subscription's due cycle, and each cycle whose dunning retry is due, **at most
//! once per cycle** however often it runs, in parallel or after being killed midway.
//!
//! Each subscription's cycle is decided in ONE transaction ([`bill`]):
//! 1. the subscription row is locked (`FOR UPDATE`): runs for one subscription go one at a time, and a
//!    cancellation or a completing charge waits for the decision (or the decision for them);
//! 2. the cycle's claim is read (locked) and [`decide`] says what to do: a new cycle is charged, a scheduled
//!    retry that is due is charged again, anything else is left alone;
//! 3. **the run looks again at the moment of charging**: a live charge of the cycle made through another channel
//!    (a merchant API checkout paying the same subscription and cycle) is followed instead of charging again;
//! 4. the charge (a new intent and its outbound request) is inserted under the partial UNIQUE index
//!    `payment_intents_live_cycle` — the database, not the read above, decides that a cycle has at most one live
//!    charge — and the claim is written (`billing_claims_cycle_key` for a new cycle).
//!
//! The dispatcher sends the charge later (inside `hookline-worker`, or `hookline dispatch`) with the intent's
//! key; its outcome decides the cycle's dunning ([`crate::claims::on_charge_final`]).

use hookline_core::ProviderConfig;
use hookline_signature::Scheme;
use sqlx::{PgConnection, PgPool};
use time::OffsetDateTime;

use crate::claims::{self, Claim, ClaimStatus};
use crate::period::{self, Cycle};
use crate::subscriptions::{self, charge_params, Subscription, SubscriptionStatus};
use hookline_payments::intents::{self, CycleRef, NewIntent};
use tracing::Instrument;

/// What billing needs of a provider: its scheme (the charge's parameters depend on it) and its dunning
/// schedule (copied onto each cycle it claims).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderBilling {
    /// The provider's scheme (stripe, mercadopago or pagarme-v5).
    pub scheme: Scheme,
    /// Seconds to wait after the 1st, 2nd, … decline of a cycle.
    pub retry_schedule_secs: Vec<i32>,
}

impl ProviderBilling {
    /// From `[providers.NAME]` (the config bounds the schedule: at most 60 days per step).
    pub fn from_config(provider: &ProviderConfig) -> ProviderBilling {
        ProviderBilling {
            scheme: provider.scheme,
            retry_schedule_secs: provider
                .dunning_retry
                .iter()
                .map(|d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX))
                .collect(),
        }
    }
}

/// What billing one subscription for one cycle did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Billed {
    /// A new cycle was claimed and charged: the intent's public id (empty in a dry run).
    Charged(String),
    /// A scheduled retry was due and charged again: the new intent's public id (empty in a dry run).
    Retried(String),
    /// The cycle is claimed and nothing is due (in flight, paid, retry later, parked, canceled).
    AlreadyClaimed(ClaimStatus),
    /// The cycle's period has not started yet.
    NotDue,
    /// Not one of the subscription's cycles (before its anchor; a yearly one in another month).
    NotItsCycle,
    /// The cycle has a live charge made through another channel (its public id): followed, not charged again.
    PaidElsewhere(String),
    /// The subscription is past due or needs a payment method: no new cycle is charged.
    Parked(SubscriptionStatus),
    /// The subscription is canceled (or gone).
    Canceled,
    /// The subscription was set to cancel at period end and its period ended: canceled now, not charged.
    CanceledAtPeriodEnd,
    /// Its provider is not configured for charges (no scheme that charges, no `api_base`).
    ProviderNotConfigured,
    /// Its currency is not one its provider charges in ([`hookline_payments::currency::check`]; a row of an older version,
    /// e.g. a `pagarme-v5` subscription in `usd`): never charged, listed by `hookline billing status`.
    CurrencyNotAccepted(String),
}

/// What to do for one subscription and cycle, from what the database holds (pure; [`bill`] and the dry run
/// share it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Charge a new cycle.
    Charge,
    /// Charge a due retry.
    Retry,
    /// Nothing to do: why.
    Skip(Billed),
}

/// The rule of the run (see the module documentation). `claim` is the cycle's claim, if any.
pub fn decide(
    sub: &Subscription,
    claim: Option<&Claim>,
    cycle: Cycle,
    now: OffsetDateTime,
) -> Decision {
    if sub.status == SubscriptionStatus::Canceled {
        return Decision::Skip(Billed::Canceled);
    }
    let Some(start) = period::period_start(sub.anchor, sub.interval, cycle) else {
        return Decision::Skip(Billed::NotItsCycle);
    };
    // Never a period that ended before the subscription existed (an anchor set in the past).
    if period::ended_before(sub.anchor, sub.interval, cycle, sub.created_at) {
        return Decision::Skip(Billed::NotItsCycle);
    }
    if start > now {
        return Decision::Skip(Billed::NotDue);
    }
    match claim {
        Some(c)
            if c.status == ClaimStatus::RetryScheduled
                && c.next_attempt_at.is_some_and(|t| t <= now) =>
        {
            Decision::Retry
        }
        Some(c) => Decision::Skip(Billed::AlreadyClaimed(c.status)),
        None if sub.status.is_parked() => Decision::Skip(Billed::Parked(sub.status)),
        None if sub.cancel_at_period_end => Decision::Skip(Billed::CanceledAtPeriodEnd),
        None => Decision::Charge,
    }
}

/// The cycle to bill a subscription (its anchor and interval) for: the one named, else the one whose period is
/// running at `now`. [`bill`], the dry run and [`run`]'s first pass all ask this.
fn cycle_for(
    anchor: OffsetDateTime,
    interval: period::Interval,
    cycle: Option<Cycle>,
    now: OffsetDateTime,
) -> Option<Cycle> {
    cycle.or_else(|| period::current_cycle(anchor, interval, now))
}

/// Bills subscription `subscription_id` for `cycle` (its running period's cycle when `None`) in ONE transaction
/// (see the module documentation). `provider_of` names what billing needs of a configured provider.
pub async fn bill(
    pool: &PgPool,
    subscription_id: i64,
    cycle: Option<Cycle>,
    provider_of: &(dyn Fn(&str) -> Option<ProviderBilling> + Sync),
    now: OffsetDateTime,
) -> Result<Billed, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let Some(sub) = subscriptions::lock(&mut tx, subscription_id).await? else {
        return Ok(Billed::Canceled);
    };
    let Some(cycle) = cycle_for(sub.anchor, sub.interval, cycle, now) else {
        return Ok(Billed::NotDue);
    };
    let billed = bill_locked(&mut tx, &sub, cycle, provider_of, now).await?;
    tx.commit().await?;
    Ok(billed)
}

/// Bills `sub` — locked by the caller's transaction `tx` — for `cycle`, and, when its scheduler pointer names that
/// cycle, moves the pointer past it once the cycle is decided (charged, retried, claimed before, paid elsewhere). The caller commits (the
/// one exception: [`Billed::AlreadyClaimed`] after an insert that lost a race, which [`bill`] rolls back).
pub async fn bill_locked(
    tx: &mut PgConnection,
    sub: &Subscription,
    cycle: Cycle,
    provider_of: &(dyn Fn(&str) -> Option<ProviderBilling> + Sync),
    now: OffsetDateTime,
) -> Result<Billed, sqlx::Error> {
    let billed = charge_locked(tx, sub, cycle, provider_of, now).await?;
    if matches!(
        billed,
        Billed::Charged(_)
            | Billed::Retried(_)
            | Billed::AlreadyClaimed(_)
            | Billed::PaidElsewhere(_)
    ) {
        let next = cycle.next(sub.interval);
        if let Some(starts) = period::period_start(sub.anchor, sub.interval, next) {
            subscriptions::advance_past(tx, sub.id, cycle, next, starts).await?;
        }
    }
    Ok(billed)
}

async fn charge_locked(
    tx: &mut PgConnection,
    sub: &Subscription,
    cycle: Cycle,
    provider_of: &(dyn Fn(&str) -> Option<ProviderBilling> + Sync),
    now: OffsetDateTime,
) -> Result<Billed, sqlx::Error> {
    let cycle_text = cycle.to_string();
    let claim = claims::lock(tx, sub.id, &cycle_text).await?;
    let decision = decide(sub, claim.as_ref(), cycle, now);
    let retry = match decision {
        Decision::Skip(Billed::CanceledAtPeriodEnd) => {
            subscriptions::set_status(
                tx,
                sub.id,
                SubscriptionStatus::Canceled,
                Some("canceled at period end"),
            )
            .await?;
            claims::cancel_open(tx, sub.id).await?;
            // The merchant hears that it ended (its `subscription.updated` said it would).
            if let Some(now_canceled) = subscriptions::get(tx, sub.id).await? {
                crate::manage::record_canceled(tx, &now_canceled).await?;
            }
            return Ok(Billed::CanceledAtPeriodEnd);
        }
        Decision::Skip(billed) => return Ok(billed),
        Decision::Retry => true,
        Decision::Charge => false,
    };
    let Some(provider) = provider_of(&sub.provider) else {
        return Ok(Billed::ProviderNotConfigured);
    };
    if let Err(e) =
        hookline_payments::currency::check(provider.scheme, &sub.provider, &sub.currency)
    {
        tracing::warn!(subscription_id = sub.id, error = %e, "billing: not charged");
        return Ok(Billed::CurrencyNotAccepted(sub.currency.clone()));
    }
    let cycle_ref = CycleRef {
        subscription_id: sub.id,
        billing_cycle: &cycle_text,
    };
    // Look again at the moment of charging: a charge of this cycle made through another channel is followed.
    if let Some(live) = intents::live_for_cycle(tx, cycle_ref).await? {
        return follow(tx, sub, &cycle_text, &live, &provider).await;
    }
    let attempt = claim.as_ref().map_or(1, |c| c.attempts + 1);
    let description = format!(
        "subscription {} {cycle_text} (attempt {attempt})",
        sub.public_id
    );
    let params = charge_params(provider.scheme, sub);
    let new = NewIntent {
        provider: &sub.provider,
        amount: sub.amount,
        currency: &sub.currency,
        customer: Some(&sub.customer),
        description: Some(&description),
        order_reference: None,
        payment_params: params.as_ref(),
        confirm: true,
        cycle: Some(cycle_ref),
        capture_method: Default::default(),
    };
    // The charge belongs to the subscription's client: it reads the intent and receives its facts.
    let Some(intent) = intents::create_cycle_intent(tx, sub.client.as_deref(), &new).await? else {
        // Another channel's charge of the cycle committed between the read above and the insert: the index
        // decided. Follow it (it is visible now that its transaction committed).
        return match intents::live_for_cycle(tx, cycle_ref).await? {
            Some(live) => follow(tx, sub, &cycle_text, &live, &provider).await,
            None => Ok(Billed::AlreadyClaimed(ClaimStatus::Charging)),
        };
    };
    if retry {
        claims::start_attempt(tx, sub.id, &cycle_text, intent.id).await?;
    } else if !claims::insert(
        tx,
        sub.id,
        &cycle_text,
        intent.id,
        ClaimStatus::Charging,
        &provider.retry_schedule_secs,
    )
    .await?
    {
        // Claimed meanwhile: impossible under the subscription's lock; the constraint is the guard. The intent
        // must not exist: an error rolls the caller's transaction back.
        return Err(sqlx::Error::Protocol(format!(
            "subscription {} cycle {cycle_text} was claimed under its lock",
            sub.id
        )));
    }
    Ok(if retry {
        Billed::Retried(intent.public_id)
    } else {
        Billed::Charged(intent.public_id)
    })
}

/// The cycle has a live charge made elsewhere: the claim follows it (with the provider's schedule, should that
/// charge be declined); nothing is charged.
async fn follow(
    tx: &mut PgConnection,
    sub: &Subscription,
    cycle: &str,
    live: &intents::Intent,
    provider: &ProviderBilling,
) -> Result<Billed, sqlx::Error> {
    let paid = live.status == hookline_payments::model::IntentStatus::Succeeded;
    claims::follow_other_channel(
        tx,
        sub.id,
        cycle,
        live.id,
        paid,
        &provider.retry_schedule_secs,
    )
    .await?;
    Ok(Billed::PaidElsewhere(live.public_id.clone()))
}

/// What a dry run says [`bill`] would do (nothing is written or locked).
pub async fn would_bill(
    conn: &mut PgConnection,
    subscription_id: i64,
    cycle: Option<Cycle>,
    provider_of: &(dyn Fn(&str) -> Option<ProviderBilling> + Sync),
    now: OffsetDateTime,
) -> Result<Billed, sqlx::Error> {
    let Some(sub) = subscriptions::get(conn, subscription_id).await? else {
        return Ok(Billed::Canceled);
    };
    let Some(cycle) = cycle_for(sub.anchor, sub.interval, cycle, now) else {
        return Ok(Billed::NotDue);
    };
    let cycle_text = cycle.to_string();
    let claim = claims::get(conn, sub.id, &cycle_text).await?;
    let provider = provider_of(&sub.provider);
    Ok(match decide(&sub, claim.as_ref(), cycle, now) {
        Decision::Skip(billed) => billed,
        _ if provider.is_none() => Billed::ProviderNotConfigured,
        _ if provider.is_some_and(|p| {
            hookline_payments::currency::check(p.scheme, &sub.provider, &sub.currency).is_err()
        }) =>
        {
            Billed::CurrencyNotAccepted(sub.currency.clone())
        }
        Decision::Retry => Billed::Retried(String::new()),
        Decision::Charge => Billed::Charged(String::new()),
    })
}

/// The totals of a billing run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    /// The cycle named (`None`: each subscription's running period).
    pub cycle: Option<String>,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// New cycles charged by this run (or that would be, dry).
    pub charged: u64,
    /// Scheduled retries charged.
    pub retried: u64,
    /// Cycles already claimed with nothing due.
    pub already_claimed: u64,
    /// Cycles paid (or being paid) through another channel.
    pub paid_elsewhere: u64,
    /// Subscriptions whose cycle has not started, or is not theirs.
    pub not_due: u64,
    /// Subscriptions past due or needing a payment method (not charged).
    pub parked: u64,
    /// Canceled subscriptions skipped.
    pub canceled_skipped: u64,
    /// Subscriptions canceled at the end of their period by this run.
    pub canceled_at_period_end: u64,
    /// Subscriptions that could not be billed, with the reason (needs attention).
    pub errors: Vec<String>,
    /// Public ids of the intents created.
    pub intents: Vec<String>,
}

impl RunSummary {
    fn count(&mut self, subscription_id: i64, billed: Result<Billed, sqlx::Error>) {
        match billed {
            Ok(Billed::Charged(id)) => {
                self.charged += 1;
                self.intents.extend((!id.is_empty()).then_some(id));
            }
            Ok(Billed::Retried(id)) => {
                self.retried += 1;
                self.intents.extend((!id.is_empty()).then_some(id));
            }
            Ok(Billed::AlreadyClaimed(_)) => self.already_claimed += 1,
            Ok(Billed::PaidElsewhere(_)) => self.paid_elsewhere += 1,
            Ok(Billed::NotDue | Billed::NotItsCycle) => self.not_due += 1,
            Ok(Billed::Parked(_)) => self.parked += 1,
            Ok(Billed::Canceled) => self.canceled_skipped += 1,
            Ok(Billed::CanceledAtPeriodEnd) => self.canceled_at_period_end += 1,
            Ok(Billed::ProviderNotConfigured) => self.errors.push(format!(
                "subscription {subscription_id}: its provider is not configured for charges"
            )),
            Ok(Billed::CurrencyNotAccepted(currency)) => self.errors.push(format!(
                "subscription {subscription_id}: its provider does not charge in {currency:?}; not charged \
                 (see hookline billing status)"
            )),
            Err(e) => self
                .errors
                .push(format!("subscription {subscription_id}: {e}")),
        }
    }
}

/// Most due retries one run charges (the rest are due for the next run).
pub const MAX_RETRIES_PER_RUN: i64 = 100_000;

/// Bills every subscription that is not canceled for `cycle` (each one's running period when `None`), then
/// every cycle whose scheduled retry is due at `now` — each in its own transaction ([`bill`]). `progress` is
/// called after each one with `(done, total)`.
pub async fn run(
    pool: &PgPool,
    cycle: Option<Cycle>,
    dry_run: bool,
    provider_of: &(dyn Fn(&str) -> Option<ProviderBilling> + Sync),
    now: OffsetDateTime,
    mut progress: impl FnMut(u64, u64),
) -> Result<RunSummary, sqlx::Error> {
    let (periods, due) = {
        let mut conn = pool.acquire().await?;
        let periods = subscriptions::billable_periods(&mut conn).await?;
        let due = claims::due(&mut conn, now, MAX_RETRIES_PER_RUN).await?;
        (periods, due)
    };
    let mut summary = RunSummary {
        cycle: cycle.map(|c| c.to_string()),
        dry_run,
        ..RunSummary::default()
    };
    // First pass: each subscription's cycle — the one named, else its running period's (the same rule `bill`
    // applies; anchor and interval never change).
    let first: Vec<(i64, Option<Cycle>)> = periods
        .iter()
        .map(|(id, anchor, interval)| (*id, cycle_for(*anchor, *interval, cycle, now)))
        .collect();
    // Second pass: due retries, except those of a cycle the first pass billed (counted once, billed once).
    let billed: std::collections::HashSet<(i64, Cycle)> = first
        .iter()
        .filter_map(|(id, c)| c.map(|c| (*id, c)))
        .collect();
    let due: Vec<(i64, Option<Cycle>)> = due
        .into_iter()
        .filter_map(|(id, c)| Cycle::parse(&c).map(|c| (id, c)))
        .filter(|pair| !billed.contains(pair))
        .map(|(id, c)| (id, Some(c)))
        .collect();
    let total = (first.len() + due.len()) as u64;
    for (i, (id, cycle)) in first.into_iter().chain(due).enumerate() {
        // A subscription with no running period yet (anchored in the future) is not due.
        if cycle.is_none() {
            summary.count(id, Ok(Billed::NotDue));
            progress(i as u64 + 1, total);
            continue;
        }
        let billed = if dry_run {
            let mut conn = pool.acquire().await?;
            would_bill(&mut conn, id, cycle, provider_of, now).await
        } else {
            // Each subscription's charge is its own trace: the dispatcher's attempts and the completing webhook
            // join it (the queued charge is stored in this span's trace).
            bill(pool, id, cycle, provider_of, now)
                .instrument(tracing::info_span!("billing.charge", subscription_id = id))
                .await
        };
        summary.count(id, billed);
        progress(i as u64 + 1, total);
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::period::Interval;
    use time::macros::datetime;

    fn sub(status: SubscriptionStatus, cancel_at_period_end: bool) -> Subscription {
        Subscription {
            id: 1,
            provider: "st".into(),
            customer: "cus_1".into(),
            payment_method: Some("pm_1".into()),
            amount: 1000,
            currency: "brl".into(),
            interval: Interval::Month,
            anchor: datetime!(2026-10-10 00:00 UTC),
            status,
            status_reason: None,
            cancel_at_period_end,
            created_at: datetime!(2026-10-10 00:00 UTC),
            canceled_at: None,
            public_id: "sub_hl_1".into(),
            client: None,
            next_cycle: "2026-10".into(),
            next_period_at: datetime!(2026-10-10 00:00 UTC),
        }
    }

    fn claim(status: ClaimStatus, next: Option<OffsetDateTime>) -> Claim {
        Claim {
            subscription_id: 1,
            billing_cycle: "2026-11".into(),
            intent_id: 1,
            intent: "pi_hl_1".into(),
            status,
            attempts: 1,
            next_attempt_at: next,
            retry_schedule_secs: vec![60],
            last_failure_code: None,
            last_failure_message: None,
            claimed_at: datetime!(2026-11-10 00:00 UTC),
            updated_at: datetime!(2026-11-10 00:00 UTC),
        }
    }

    #[test]
    fn the_run_charges_new_due_cycles_and_due_retries_only() {
        let now = datetime!(2026-12-03 12:00 UTC);
        let nov = Cycle::parse("2026-11").unwrap();
        let dec = Cycle::parse("2026-12").unwrap();
        let active = sub(SubscriptionStatus::Active, false);
        assert_eq!(decide(&active, None, nov, now), Decision::Charge);
        assert_eq!(
            decide(&active, None, dec, now),
            Decision::Skip(Billed::NotDue)
        );
        assert_eq!(
            decide(&active, None, Cycle::parse("2026-09").unwrap(), now),
            Decision::Skip(Billed::NotItsCycle)
        );
        let due = claim(ClaimStatus::RetryScheduled, Some(now));
        assert_eq!(decide(&active, Some(&due), nov, now), Decision::Retry);
        let later = claim(
            ClaimStatus::RetryScheduled,
            Some(now + time::Duration::HOUR),
        );
        assert_eq!(
            decide(&active, Some(&later), nov, now),
            Decision::Skip(Billed::AlreadyClaimed(ClaimStatus::RetryScheduled))
        );
        for status in [
            ClaimStatus::Charging,
            ClaimStatus::Paid,
            ClaimStatus::PastDue,
        ] {
            assert_eq!(
                decide(&active, Some(&claim(status, None)), nov, now),
                Decision::Skip(Billed::AlreadyClaimed(status))
            );
        }
        let parked = sub(SubscriptionStatus::PastDue, false);
        assert_eq!(
            decide(&parked, None, nov, now),
            Decision::Skip(Billed::Parked(SubscriptionStatus::PastDue))
        );
        // A parked subscription whose method was updated: its cycle's retry is due.
        assert_eq!(decide(&parked, Some(&due), nov, now), Decision::Retry);
        let ending = sub(SubscriptionStatus::Active, true);
        assert_eq!(
            decide(&ending, None, nov, now),
            Decision::Skip(Billed::CanceledAtPeriodEnd)
        );
        assert_eq!(decide(&ending, Some(&due), nov, now), Decision::Retry);
        assert_eq!(
            decide(&sub(SubscriptionStatus::Canceled, false), None, nov, now),
            Decision::Skip(Billed::Canceled)
        );
    }
}
