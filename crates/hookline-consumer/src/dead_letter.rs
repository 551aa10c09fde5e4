//! Where a delivery goes when it cannot be applied: to the dead-letter queue with its reason recorded first
//! ([`dead_letter`]), or back to the queue after its handler panicked ([`requeue_panicked`]) until the delivery
//! limit sends it to the dead-letter queue too.
//!
//! Why apart: both apply paths (single and batch) and the bundle path end here, and the rule they share is
//! subtle — a reason is recorded before the reject (or the delivery is kept for a retry), and a message split
//! from a bundle is dead-lettered by the consumer itself at the same total of attempts RabbitMQ would allow.

use std::sync::Arc;

use hookline_bus::EventMessage;
use hookline_core::handler::Handler;
use lapin::message::Delivery;

use crate::acks::{reject, Acks};
use crate::context::{metric, Ctx};
use crate::delivery::{delivery_count, prior_deliveries};
use crate::process::record_dead_letter;

/// Records the reason and rejects the delivery to the dead-letter queue. False when the reason could not be
/// recorded (the delivery is then left for a retry rather than dead-lettered without a reason).
pub(crate) async fn dead_letter<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    delivery: &Delivery,
    msg: &EventMessage,
    reason: &str,
) -> bool {
    let consumer = ctx.handler.consumer();
    tracing::error!(
        event_id = msg.id,
        provider = ?msg.provider,
        provider_event_id = ?msg.provider_event_id,
        error.message = ?reason,
        "permanent failure; dead-lettering"
    );
    if let Err(e) = record_dead_letter(&ctx.pool, consumer, msg.id, reason).await {
        tracing::warn!(event_id = msg.id, error.cause_chain = ?e, "cannot record dead letter; retrying");
        return false;
    }
    reject(acks, delivery).await;
    metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => "dead_lettered")
        .increment(1);
    true
}

/// Requeues a delivery whose handler panicked. The quorum queue counts it against the delivery limit, so a
/// message that always panics ends in the DLQ. A quorum queue dead-letters a message returned more than `limit`
/// times, i.e. on the return of delivery number limit+1, whose x-delivery-count is `limit`: record it then (for a
/// message split from a bundle, whose count includes the bundle's attempts, reject it then).
pub(crate) async fn requeue_panicked<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    delivery: &Delivery,
    event_id: i64,
    reason: &str,
) {
    let consumer = ctx.handler.consumer();
    tracing::error!(event_id, error.message = ?reason, "requeueing");
    if delivery_count(delivery) >= ctx.delivery_limit {
        record_dead_letter(&ctx.pool, consumer, event_id, reason)
            .await
            .ok();
        if prior_deliveries(delivery) > 0 {
            // Split from a bundle: RabbitMQ's own count restarted at the split and would return it again, so
            // the worker dead-letters it itself, at the same total of attempts.
            reject(acks, delivery).await;
            metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => "dead_lettered")
                .increment(1);
            return;
        }
    }
    acks.requeue(delivery).await;
    metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => "requeued")
        .increment(1);
}
