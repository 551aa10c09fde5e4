//! Bundles (several events in one message, see [`hookline_bus::message`]) taken apart: each event republished
//! as a single message that carries the attempts the bundle used, then the bundle acked.
//!
//! Why: a bundle is settled as a whole, but a poison event must be retried and dead-lettered alone, exactly as a
//! single message is. So a bundle takes part in a batch only on its first delivery; a redelivered bundle, or one
//! in a batch that failed, is split here, and the delivery limit keeps counting across the split
//! ([`hookline_bus::message::PRIOR_DELIVERIES_HEADER`]).

use std::sync::Arc;
use std::time::Duration;

use hookline_bus::{EventMessage, Packing, Publisher, Topology};
use hookline_core::config::AmqpEndpoints;
use hookline_core::handler::Handler;
use lapin::message::Delivery;

use crate::acks::{ack, Acks};
use crate::consumer::{metric, Ctx};

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

/// The worker's publisher for splitting bundles: opened on first use (most workers never split), replaced after
/// any failure.
pub(crate) struct Splitter {
    amqp_urls: AmqpEndpoints,
    topology: Topology,
    publisher: tokio::sync::Mutex<Option<Publisher>>,
}

impl Splitter {
    /// How long a split's publishes and confirms may take.
    const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

    /// A splitter publishing through `topology` on the brokers of `amqp_urls`; it connects on first use.
    pub(crate) fn new(amqp_urls: AmqpEndpoints, topology: Topology) -> Splitter {
        Splitter {
            amqp_urls,
            topology,
            publisher: tokio::sync::Mutex::new(None),
        }
    }

    /// Publishes `events` one per message with `prior` attempts; `Ok` only when RabbitMQ confirmed them all.
    async fn publish(&self, events: &[EventMessage], prior: u32) -> anyhow::Result<()> {
        let mut guard = self.publisher.lock().await;
        if guard.as_ref().is_some_and(|p| !p.is_open()) {
            if let Some(p) = guard.take() {
                tokio::spawn(p.close());
            }
        }
        if guard.is_none() {
            *guard = Some(
                Publisher::open(&self.amqp_urls, &self.topology, "hookline-worker-split").await?,
            );
        }
        let Some(publisher) = guard.as_ref() else {
            anyhow::bail!("no publisher");
        };
        let packing = Packing {
            per_message: 1,
            prior_deliveries: prior,
        };
        let result = publisher
            .publish_packed(&self.topology, events, packing, Self::CONFIRM_TIMEOUT)
            .await;
        match result {
            Ok(published) if published.acked.len() == events.len() => Ok(()),
            other => {
                if let Some(p) = guard.take() {
                    tokio::spawn(p.close());
                }
                match other {
                    Err(e) => Err(e),
                    Ok(p) => Err(anyhow::anyhow!(
                        "{} of {} single messages confirmed",
                        p.acked.len(),
                        events.len()
                    )),
                }
            }
        }
    }

    pub(crate) async fn close(&self) {
        if let Some(p) = self.publisher.lock().await.take() {
            p.close().await;
        }
    }
}
