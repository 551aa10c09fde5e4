//! The publisher a bundle's split republishes through: one confirming publisher for the consumer's whole run,
//! opened on first use and replaced when it fails. Apart from the split itself ([`crate::bundles`]) because every
//! stage's shared context holds it ([`crate::context::Ctx`]) while the split reads that context.

use std::time::Duration;

use hookline_bus::{EventMessage, Packing, Publisher, Topology};
use hookline_core::config::AmqpEndpoints;

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
    pub(crate) async fn publish(&self, events: &[EventMessage], prior: u32) -> anyhow::Result<()> {
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
