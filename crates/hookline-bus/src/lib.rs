//! `hookline-bus`: the AMQP transport — connections, the topology (declared by every process that touches the
//! broker), the publisher with confirms, the transactional-outbox relay that publishes committed events
//! ([`relay`]), the event message, settling deliveries and the dead-letter queue's side ([`dead_letters`]).
//!
//! It is its own crate so that `hookline-core` stays free of AMQP and every process that publishes or declares
//! (edge, worker, CLI) shares one implementation. It must never: know a business effect (payments, facts) or an
//! operator feature; those crates use it, not the other way round.

pub mod config;
pub mod dead_letters;
pub mod message;
pub mod metric;
pub mod publisher;
pub mod relay;
pub mod topology;

pub use config::{RelayConfig, EVENTS_PER_MESSAGE_MAX};
pub use message::EventMessage;
pub use publisher::{Packing, Published, Publisher};
pub use relay::{Relay, RelayHandle};
pub use topology::Topology;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use hookline_core::config::AmqpEndpoints;
use lapin::{Connection, ConnectionProperties};
use secrecy::ExposeSecret;

/// How long one node may take to accept a connection (TCP + AMQP handshake) before the next one is tried: a node
/// that is down refuses at once, but a frozen one would otherwise hold the caller forever. Generous, because a
/// healthy broker on a loaded machine can take seconds to finish a handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How long declaring the topology (or any other set-up step on a fresh channel) may take. A quorum queue without
/// a majority of its members never answers a declare; the caller drops the connection and tries again later.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(15);

/// The endpoint the next connection of this process tries first. It starts at the first node listed (the order
/// is the operator's: list the nodes in another order on another host to spread the load) and moves past every
/// node a connection was made to, so that a reconnection after a loss starts with another node.
fn cursor() -> &'static AtomicUsize {
    static NEXT: OnceLock<AtomicUsize> = OnceLock::new();
    NEXT.get_or_init(|| AtomicUsize::new(0))
}

/// Connects to the broker: the one place where hookline opens an AMQP connection. Tries every endpoint of
/// `endpoints` once, in order, starting with the node after the one this process connected to last (the first
/// node at the first connection), and returns the first
/// that accepts within [`CONNECT_TIMEOUT`]. The connection is named `name` (shown by `rabbitmqctl
/// list_connections`); the node it went to is logged as `host:port`, never with credentials.
///
/// lapin's automatic recovery is not enabled: its edge cases are still being fixed upstream (see
/// `reliability-scenarios.md` §c), and every caller here already rebuilds its connection (and re-declares its
/// topology, re-applies its prefetch) in an outer loop, which calls this again and so moves to another node.
pub async fn connect(endpoints: &AmqpEndpoints, name: &str) -> anyhow::Result<Connection> {
    let list = endpoints.endpoints();
    let start = cursor().load(Ordering::Relaxed);
    let mut failures = Vec::with_capacity(list.len());
    for k in 0..list.len() {
        let i = (start + k) % list.len();
        let endpoint = &list[i];
        let props = ConnectionProperties::default().with_connection_name(name.into());
        let attempt = tokio::time::timeout(
            CONNECT_TIMEOUT,
            Connection::connect(endpoint.url.expose_secret(), props),
        )
        .await;
        match attempt {
            Ok(Ok(conn)) => {
                cursor().store(i + 1, Ordering::Relaxed);
                tracing::info!(
                    messaging.system = "rabbitmq",
                    messaging.broker = %endpoint.label,
                    connection = name,
                    "connected to RabbitMQ"
                );
                return Ok(conn);
            }
            // lapin's errors do not quote the URL.
            Ok(Err(e)) => failures.push(format!("{}: {e}", endpoint.label)),
            Err(_) => failures.push(format!(
                "{}: no answer within {CONNECT_TIMEOUT:?}",
                endpoint.label
            )),
        }
    }
    Err(anyhow::anyhow!("{}", failures.join("; "))).with_context(|| {
        format!(
            "cannot connect to RabbitMQ as {name} (tried {} node(s))",
            list.len()
        )
    })
}

/// Closes a connection its owner gives up on (a failed or timed-out set-up step, a broken session), waiting at
/// most 5 s for the broker's answer. Dropping a lapin `Connection` does not close it: a connection left behind
/// after a `basic.consume` that timed out (the queue had no majority) stayed open, RabbitMQ registered the
/// consumer once the majority was back, and a prefetch window of deliveries sat unacknowledged in a stream nobody
/// read until the process exited.
pub async fn abandon(connection: Connection, reason: &str) {
    tokio::time::timeout(Duration::from_secs(5), connection.close(200, reason.into()))
        .await
        .ok();
}

/// Runs one set-up step (declare, qos, consume, confirm.select) with [`SETUP_TIMEOUT`].
pub async fn within_setup_timeout<T, E>(
    what: &str,
    step: impl std::future::Future<Output = Result<T, E>>,
) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(SETUP_TIMEOUT, step).await {
        Ok(r) => r.with_context(|| what.to_string()),
        Err(_) => Err(anyhow::anyhow!(
            "{what}: no answer from RabbitMQ within {SETUP_TIMEOUT:?}"
        )),
    }
}

/// How long one settle frame (ack, nack, reject) may take to be written.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends one settle frame, bounded by [`SETTLE_TIMEOUT`]; true only when lapin reports it sent. lapin can leave a
/// frame queued on a connection the broker is closing unresolved forever (amqp-rs/lapin#409); a settle that is
/// not sent in time is treated like one on a closed channel: RabbitMQ redelivers the message.
pub async fn settle(frame: impl std::future::Future<Output = Result<bool, lapin::Error>>) -> bool {
    matches!(
        tokio::time::timeout(SETTLE_TIMEOUT, frame).await,
        Ok(Ok(true))
    )
}

/// Returns a delivery to its queue (`basic.nack` with requeue). A failure means the channel is already gone,
/// which returns the delivery to the queue all the same, so it is ignored.
pub async fn requeue(acker: &lapin::Acker) {
    settle(acker.nack(lapin::options::BasicNackOptions {
        requeue: true,
        ..Default::default()
    }))
    .await;
}
