//! Periodic purge inside the worker: `retention.auto_purge_older_than` enables it.
//!
//! The purge itself is [`crate::retention::purge_with`]: the same eligibility rules, batching, row
//! locking (`FOR UPDATE SKIP LOCKED`, so several workers purging at once share the work) and audit rows as
//! `hookline purge`. Audit rows carry the operator name [`OPERATOR`].

use std::ops::ControlFlow;

use crate::config::RetentionConfig;
use crate::retention::{self, PurgeOptions};
use sqlx::PgPool;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// `purge_runs.operator` of periodic purges.
pub const OPERATOR: &str = "hookline-worker (auto_purge)";

/// Runs the purge every `retention.auto_purge_interval` (the first one interval after the start) when
/// `retention.auto_purge_older_than` is set, logging each report. Returns when `cancel` is cancelled — also
/// when the automatic purge is disabled, so it can be joined or selected beside the consumer either way.
///
/// A run in progress stops between two batches once cancelled (committed batches stay deleted and counted).
/// A failed run is logged and retried at the next interval.
pub async fn run_periodic(pool: PgPool, retention: RetentionConfig, cancel: CancellationToken) {
    let Some(older_than) = retention.auto_purge_older_than else {
        tracing::debug!("automatic purge disabled (retention.auto_purge_older_than_days not set)");
        cancel.cancelled().await;
        return;
    };
    // The configuration refuses a window below the floor; checked again so a hand-built config cannot slip by.
    if let Err(why) = retention::check_window(older_than, retention.floor, false) {
        tracing::error!("automatic purge disabled: {why}");
        cancel.cancelled().await;
        return;
    }
    let opts = PurgeOptions {
        older_than,
        floor: retention.floor,
        dry_run: false,
        batch_size: retention.batch_size,
        operator: OPERATOR.to_string(),
        forced: false,
    };
    let every = retention.auto_purge_interval;
    tracing::info!(
        older_than = %retention::format_window(older_than),
        every = %retention::format_window(every),
        "automatic purge enabled"
    );
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticks.tick() => {}
        }
        let stop = |_: &retention::PurgeReport| {
            if cancel.is_cancelled() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        match retention::purge_with(&pool, &opts, stop).await {
            Ok(r) => {
                let kept = r.kept;
                if r.events > 0 || kept.total() > 0 {
                    tracing::info!(
                        run_id = r.run_id,
                        events = r.events,
                        markers = r.markers,
                        batches = r.batches,
                        kept_unpublished = kept.unpublished,
                        kept_unprocessed = kept.unprocessed,
                        kept_dead_lettered = kept.dead_lettered,
                        interrupted = r.interrupted,
                        "periodic purge done"
                    );
                } else {
                    tracing::debug!(run_id = r.run_id, "periodic purge: nothing to delete");
                }
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "periodic purge failed; retrying next interval")
            }
        }
    }
    tracing::debug!("periodic purge stopped");
}
