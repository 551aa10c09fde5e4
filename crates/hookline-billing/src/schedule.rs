//! The workers' billing scheduler (issue 48): every `[billing] schedule_secs`, each worker charges the dunning
//! retries that are due and the periods that have started, with no command — through the same claims as
//! `hookline billing run`, so any number of workers, a run at the same moment, or a worker killed mid-round still
//! charge each `(subscription, cycle)` once.
//!
//! A round never walks every subscription: it reads the due ones through the partial index
//! `subscriptions_due_idx` (`next_period_at <= now`, active only), one at a time, each locked with `FOR UPDATE
//! SKIP LOCKED` in the transaction that decides its cycle ([`crate::run::bill_locked`]) and moves its pointer
//! (`next_cycle`) past it. Two workers' rounds therefore split the due subscriptions between them instead of
//! queueing on the same rows; a worker killed mid-transaction leaves the row unlocked and undecided, and the next
//! round (its own or another worker's) decides it. Which cycle is billed is [`crate::period::scheduled`]: the
//! pointer, never a period that ended before the subscription existed, and a worker that was down catches up the
//! previous and the current period, oldest first, each once (older ones only by the operator's `billing run
//! --cycle … --allow-cycle …`).

use std::time::{Duration, Instant};

use sqlx::PgPool;
use time::OffsetDateTime;
use tracing::Instrument;

use crate::claims;
use crate::metric;
use crate::period::{self, Cycle, Scheduled};
use crate::run::{bill, bill_locked, Billed, ProviderBilling};
use crate::status;
use crate::subscriptions;

/// Most due retries one round charges (the rest are due for the next round).
pub const MAX_RETRIES_PER_ROUND: i64 = 10_000;

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Round {
    /// New cycles charged.
    pub charged: u64,
    /// Due dunning retries charged.
    pub retried: u64,
    /// Cycles found decided already (claimed by a run, paid through a checkout): the pointer moved on.
    pub decided_elsewhere: u64,
    /// Subscriptions canceled at the end of their period.
    pub canceled_at_period_end: u64,
    /// Subscriptions whose next period has not started (their pointer moved to it).
    pub not_due: u64,
    /// Subscriptions that could not be charged (provider not configured, currency not accepted, an error): they
    /// stay due, counted by the gauges and the alert.
    pub not_charged: u64,
}

impl Round {
    fn count(&mut self, subscription_id: i64, billed: &Result<Billed, sqlx::Error>) {
        match billed {
            Ok(Billed::Charged(_)) => {
                self.charged += 1;
                metrics::counter!(metric::CHARGES, "kind" => "period").increment(1);
            }
            Ok(Billed::Retried(_)) => {
                self.retried += 1;
                metrics::counter!(metric::CHARGES, "kind" => "retry").increment(1);
            }
            Ok(Billed::AlreadyClaimed(_) | Billed::PaidElsewhere(_)) => self.decided_elsewhere += 1,
            Ok(Billed::CanceledAtPeriodEnd) => self.canceled_at_period_end += 1,
            Ok(Billed::NotDue | Billed::NotItsCycle | Billed::Parked(_) | Billed::Canceled) => {
                self.not_due += 1
            }
            Ok(Billed::ProviderNotConfigured | Billed::CurrencyNotAccepted(_)) => {
                self.not_charged += 1;
                metrics::counter!(metric::NOT_CHARGED).increment(1);
                tracing::warn!(subscription_id, outcome = ?billed, "billing: due but not charged");
            }
            Err(e) => {
                self.not_charged += 1;
                metrics::counter!(metric::NOT_CHARGED).increment(1);
                tracing::warn!(subscription_id, error.message = %e, "billing: due but not charged");
            }
        }
    }
}

/// The scheduler's start: before any period a subscription can have.
const BEFORE_ALL: OffsetDateTime = time::macros::datetime!(1900-01-01 00:00 UTC);

/// One round at `now` (see the module documentation): the due retries, oldest due first, then every due
/// period. `stop` is asked between subscriptions (a process shutting down ends the round there; what is decided
/// is committed, the rest is due for the next round).
pub async fn round(
    pool: &PgPool,
    provider_of: &(dyn Fn(&str) -> Option<ProviderBilling> + Sync),
    now: OffsetDateTime,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Round, sqlx::Error> {
    let mut round = Round::default();
    let due = {
        let mut conn = pool.acquire().await?;
        claims::due(&mut conn, now, MAX_RETRIES_PER_ROUND).await?
    };
    for (id, cycle) in due {
        if stop() {
            return Ok(round);
        }
        let Some(cycle) = Cycle::parse(&cycle) else {
            continue;
        };
        // Another worker's round may charge it first: the claim (charging) says so under the lock.
        let billed = bill(pool, id, Some(cycle), provider_of, now)
            .instrument(tracing::info_span!("billing.charge", subscription_id = id))
            .await;
        round.count(id, &billed);
    }
    let mut after = (BEFORE_ALL, 0);
    while !stop() {
        let mut tx = pool.begin().await?;
        let Some(sub) = subscriptions::lock_next_due(&mut tx, now, after).await? else {
            break;
        };
        after = (sub.next_period_at, sub.id);
        let pointer = Cycle::parse(&sub.next_cycle)
            .unwrap_or_else(|| period::first_cycle(sub.anchor, sub.interval, sub.created_at));
        let cycle = match period::scheduled(sub.anchor, sub.interval, sub.created_at, pointer, now)
        {
            Scheduled::Later(cycle, starts) => {
                subscriptions::advance(&mut tx, sub.id, cycle, starts).await?;
                tx.commit().await?;
                round.not_due += 1;
                continue;
            }
            Scheduled::Due(cycle) => cycle,
        };
        if cycle != pointer {
            // The pointer moves to the cycle billed now (what it skips is not charged by the scheduler).
            if let Some(starts) = period::period_start(sub.anchor, sub.interval, cycle) {
                subscriptions::advance(&mut tx, sub.id, cycle, starts).await?;
            }
            tracing::info!(
                subscription_id = sub.id,
                from = %pointer,
                to = %cycle,
                "billing: cycles outside the window (before its creation, or older than the previous period) \
                 are not charged by the scheduler"
            );
        }
        let billed = bill_locked(&mut tx, &sub, cycle, provider_of, now)
            .instrument(tracing::info_span!(
                "billing.charge",
                subscription_id = sub.id
            ))
            .await;
        // A worker killed here holds an uncommitted charge and the row's lock: both vanish with it, and the next
        // round decides the subscription again.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("billing.schedule.before_commit");
        match &billed {
            Ok(_) => tx.commit().await?,
            Err(_) => tx.rollback().await?,
        }
        round.count(sub.id, &billed);
    }
    Ok(round)
}

/// Sets the scheduler's gauges from what the database holds at `now`.
pub async fn publish_gauges(pool: &PgPool, now: OffsetDateTime) -> Result<(), sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let g = status::schedule_gauges(&mut conn, now).await?;
    metrics::gauge!(metric::DUE_PERIODS).set(g.due_periods as f64);
    metrics::gauge!(metric::DUE_RETRIES).set(g.due_retries as f64);
    metrics::gauge!(metric::OLDEST_DUE_SECONDS).set(g.oldest_due_secs as f64);
    metrics::gauge!(metric::IN_RETRY).set(g.in_retry as f64);
    metrics::gauge!(metric::PAST_DUE).set(g.past_due as f64);
    metrics::gauge!(metric::NEEDS_PAYMENT_METHOD).set(g.needs_payment_method as f64);
    Ok(())
}

/// The worker's scheduler loop: a round every `every`, from start-up, until `cancel`. A round that fails (the
/// database away) is logged and the next one tries again; it never ends the loop.
pub async fn run_periodic(
    pool: PgPool,
    providers: std::collections::HashMap<String, ProviderBilling>,
    every: Duration,
    cancel: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    tracing::info!(every_secs = every.as_secs(), "billing scheduler enabled");
    metrics::gauge!(metric::SCHEDULE_SECONDS).set(every.as_secs_f64());
    let provider_of = |name: &str| providers.get(name).cloned();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = ticks.tick() => {}
        }
        let started = Instant::now();
        let stop = || cancel.is_cancelled();
        match round(&pool, &provider_of, OffsetDateTime::now_utc(), &stop).await {
            Ok(r) => {
                metrics::counter!(metric::ROUNDS).increment(1);
                metrics::gauge!(metric::ROUND_SECONDS).set(started.elapsed().as_secs_f64());
                metrics::gauge!(metric::LAST_ROUND)
                    .set(OffsetDateTime::now_utc().unix_timestamp() as f64);
                if r != Round::default() {
                    tracing::info!(
                        charged = r.charged,
                        retried = r.retried,
                        decided_elsewhere = r.decided_elsewhere,
                        canceled_at_period_end = r.canceled_at_period_end,
                        not_charged = r.not_charged,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "billing round"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error.message = %e, "billing round failed; the next one tries again")
            }
        }
        if let Err(e) = publish_gauges(&pool, OffsetDateTime::now_utc()).await {
            tracing::warn!(error.message = %e, "billing gauges not read");
        }
    }
}
