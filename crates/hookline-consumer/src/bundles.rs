//! Bundles (several events in one message, see [`hookline_bus::message`]) taken apart: each event republished
//! as a single message that carries the attempts the bundle used, then the bundle acked.
//!
//! Why: a bundle is settled as a whole, but a poison event must be retried and dead-lettered alone, exactly as a
//! single message is. So a bundle takes part in a batch only on its first delivery; a redelivered bundle, or one
//! in a batch that failed, is split here, and the delivery limit keeps counting across the split
//! ([`hookline_bus::message::PRIOR_DELIVERIES_HEADER`]).

use std::sync::Arc;
use std::time::Duration;

use hookline_bus::EventMessage;
use hookline_core::handler::Handler;
use lapin::message::Delivery;

use crate::acks::{ack, Acks};
use crate::context::{metric, Ctx};

/// Republishes each event of a bundle as a single message (carrying `prior`, the attempts the bundle used, in
/// [`hookline_bus::message::PRIOR_DELIVERIES_HEADER`]), then acks the bundle. Until RabbitMQ has confirmed every
/// single message the bundle is neither acked nor requeued: the split is retried in-process with a backoff, and
/// a crash meanwhile returns the bundle, which is split again (its events then arrive twice; their markers make
/// the second a duplicate).
pub(crate) async fn split<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    delivery: Delivery,
    events: Vec<EventMessage>,
    prior: u32,
) {
    let consumer = ctx.handler.consumer();
    let mut backoff = Duration::from_millis(100);
    loop {
        match ctx.splitter.publish(&events, prior).await {
            Ok(()) => {
                tracing::info!(
                    delivery_tag = delivery.delivery_tag,
                    events = events.len(),
                    prior_deliveries = prior,
                    "bundle split into single messages"
                );
                ack(acks, &delivery, events.first().map_or(0, |m| m.id)).await;
                metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => "split")
                    .increment(1);
                return;
            }
            Err(e) => tracing::warn!(
                messaging.system = "rabbitmq",
                error.cause_chain = %format!("{e:#}"),
                retry_in_ms = backoff.as_millis() as u64,
                "cannot split a bundle; retrying"
            ),
        }
        tokio::select! {
            _ = ctx.cancel.cancelled() => return, // left unacked: closing the channel returns it
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}
