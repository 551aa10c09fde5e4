//! Dead-letter reconciliation: the loop that keeps the `dead_letters` table in step with the dead-letter queue.
//!
//! Why: a message dead-lettered by the broker's delivery limit after crashes or lost connections carries no
//! reason recorded by the consumer; this pass records one for it (and drops what was in fact applied). It is a
//! loop beside the consumer, not part of it: the process that runs the consumer spawns it under its supervisor
//! like its other loops (restarts, liveness, `/healthz`).

use std::time::Duration;

use hookline_bus::Topology;
use hookline_core::config::AmqpEndpoints;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// How often the dead-letter queue is reconciled with the `dead_letters` table.
pub const INTERVAL: Duration = Duration::from_secs(30);

/// Reconciles the dead-letter queue of `topology` with the `dead_letters` table of `consumer` every
/// [`INTERVAL`] (the first pass one interval from now) until `cancel`. A pass that fails or does not finish
/// within an interval is logged and the next one runs as planned: it returns only `Ok(())`, on cancel.
pub async fn run_periodic(
    pool: PgPool,
    amqp_urls: AmqpEndpoints,
    topology: Topology,
    consumer: &'static str,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.tick().await; // the first tick is immediate: start one interval from now
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        // Bounded: a broker that stops answering mid-pass must not stop every later pass.
        let pass =
            hookline_bus::dead_letters::reconcile(&pool, &amqp_urls, &topology, consumer, 1_000);
        match tokio::time::timeout(INTERVAL, pass).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error.message = %format!("{e:#}"), "dead-letter reconciliation failed; will retry")
            }
            Err(_) => tracing::warn!(
                timeout_ms = INTERVAL.as_millis() as u64,
                "dead-letter reconciliation did not finish in time; will retry"
            ),
        }
    }
}
