//! The one-by-one path: one delivery, one event, its own transaction — retried in-process while the failure is
//! transient, dead-lettered when it is permanent, requeued when the handler panicked, acked after the commit.
//!
//! Why apart from the batch path: this is the path every doubt ends on. A delivery that arrives alone takes it,
//! and so does every delivery of a batch that did not commit (except the one that failed it): it is the slow,
//! exact path whose outcome per event the batch path must match.

use std::sync::Arc;
use std::time::Duration;

use hookline_bus::EventMessage;
use hookline_core::handler::{reason_text, Handler};
use lapin::message::Delivery;
use tracing::Instrument;

use crate::acks::{ack, Acks};
use crate::context::{metric, Ctx};
use crate::dead_letter::{dead_letter, requeue_panicked};
use crate::delivery::event_ref;
use crate::process::{process_prepared, ProcessError, Processed};

/// Applies one parsed delivery in its `worker.apply` span (the batch path's fallbacks come here with the message
/// and span they already have): retries transient failures in-process, dead-letters permanent ones, requeues a
/// panic, acks after the commit.
pub(crate) async fn apply_delivery<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    delivery: Delivery,
    msg: EventMessage,
    span: tracing::Span,
) {
    apply_delivery_in(ctx, acks, delivery, msg, span.clone())
        .instrument(span)
        .await
}

async fn apply_delivery_in<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    delivery: Delivery,
    msg: EventMessage,
    span: tracing::Span,
) {
    let consumer = ctx.handler.consumer();
    let started = std::time::Instant::now();
    let mut backoff = Duration::from_millis(100);
    loop {
        let result = match attempt(ctx, &msg, &span).await {
            Ok(r) => r,
            Err(reason) => {
                requeue_panicked(ctx, acks, &delivery, msg.id, &reason).await;
                return;
            }
        };
        match result {
            Ok(processed) => {
                #[cfg(feature = "failpoints")]
                fail::fail_point!("worker.after_commit");
                let outcome = match &processed {
                    Processed::Applied(o) => o.kind.as_str(),
                    Processed::Duplicate => "duplicate",
                };
                tracing::debug!(
                    event_id = msg.id,
                    provider = ?msg.provider,
                    provider_event_id = ?msg.provider_event_id,
                    redelivered = delivery.redelivered,
                    outcome,
                    "processed"
                );
                ack(acks, &delivery, msg.id).await;
                span.record("outcome", outcome);
                metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => outcome)
                    .increment(1);
                metrics::histogram!(metric::PROCESS_SECONDS, "consumer" => consumer)
                    .record(started.elapsed().as_secs_f64());
                return;
            }
            Err(ProcessError::Permanent(e)) => {
                if dead_letter(ctx, acks, &delivery, &msg, &reason_text(&e)).await {
                    span.record("outcome", "dead_lettered");
                    return;
                }
            }
            Err(ProcessError::Panicked(p)) => {
                // Mapped to a requeue in `attempt`; kept as a requeue here too rather than a panic on the delivery
                // path.
                requeue_panicked(
                    ctx,
                    acks,
                    &delivery,
                    msg.id,
                    &format!("handler panicked: {p}"),
                )
                .await;
                return;
            }
            Err(ProcessError::Transient(e)) => {
                tracing::warn!(
                    event_id = msg.id,
                    error.cause_chain = ?e,
                    retry_in_ms = backoff.as_millis() as u64,
                    "transient failure; retrying in-process"
                );
            }
        }
        metrics::counter!(metric::RETRIES, "consumer" => consumer).increment(1);
        // Not acked, not requeued: the message stays ours and burns no delivery attempt while we back off.
        tokio::select! {
            _ = ctx.cancel.cancelled() => {
                // Shutting down with the database away: leave it unacked; closing the channel requeues it.
                return;
            }
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// One attempt: prepare and the transaction, in a task of their own so that a panicking handler is contained.
/// `Err` is a panic's reason (the delivery is then requeued).
async fn attempt<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    msg: &EventMessage,
    span: &tracing::Span,
) -> Result<Result<Processed, ProcessError>, String> {
    let task = {
        let ctx = ctx.clone();
        let msg = msg.clone();
        tokio::spawn(
            async move {
                // Outside any transaction: a read the effect depends on (no-op for most handlers).
                let prepared = ctx
                    .handler
                    .prepare(event_ref(&msg))
                    .await
                    .map_err(ProcessError::from)?;
                process_prepared(&ctx.pool, ctx.handler.as_ref(), msg.id, prepared).await
            }
            .instrument(span.clone()),
        )
    };
    match task.await {
        Ok(Err(ProcessError::Panicked(p))) => Err(format!("handler panicked: {p}")),
        Ok(r) => Ok(r),
        Err(join) => Err(format!("handler panicked: {join}")),
    }
}
