//! `hookline-bus`: everything hookline does with RabbitMQ except consuming — the topology (declared by every
//! process that touches the broker) and the transactional-outbox relay that publishes committed events.
//!
//! It also holds the operator engines that publish — the replay/redrive engine ([`replay`]) and the pipeline
//! report ([`status`]) — so that the CLI and the operator console share one implementation of each.
//!
//! It is its own crate so that `hookline-core` stays free of AMQP and the three binaries that publish or declare
//! (edge, worker, `hookline relay`) share one implementation.

pub mod dead_letters;
pub mod domain;
pub mod inspect;
pub mod message;
pub mod relay;
pub mod replay;
pub mod status;
pub mod topology;

pub use message::EventMessage;
pub use relay::{Publisher, Relay, RelayHandle};
pub use topology::Topology;

use anyhow::Context;
use lapin::{Connection, ConnectionProperties};
use secrecy::{ExposeSecret, SecretString};

/// Opens a connection named `name` (shown in the RabbitMQ management UI and `rabbitmqctl list_connections`).
///
/// lapin's automatic recovery is not enabled: its edge cases are still being fixed upstream (see
/// `reliability-scenarios.md` §c), and every caller here already rebuilds its connection in an outer loop.
pub async fn connect(url: &SecretString, name: &str) -> anyhow::Result<Connection> {
    let props = ConnectionProperties::default().with_connection_name(name.into());
    Connection::connect(url.expose_secret(), props)
        .await
        .with_context(|| format!("cannot connect to RabbitMQ as {name}"))
}

/// Returns a delivery to its queue (`basic.nack` with requeue). An error means the channel is already gone,
/// which returns the delivery to the queue all the same, so it is ignored.
pub async fn requeue(acker: &lapin::Acker) {
    acker
        .nack(lapin::options::BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .ok();
}
