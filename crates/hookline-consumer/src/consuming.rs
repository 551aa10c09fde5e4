//! Consuming: one broker session of the consumer — connect (to any node of the cluster), declare, `basic.qos`,
//! `basic.consume` on the queue it was given, then the loop that takes deliveries, watches the connection, and
//! hands what arrived to [`crate::gather`]; on a stop, `basic.cancel` and a graceful close once in-flight
//! deliveries have acked.
//!
//! Why apart: this is the only code that talks to the AMQP consumer itself; what happens to a delivery once
//! taken (batching, applying, settling) lives in the other stages, and a session can end and start again
//! ([`crate::Consumer::run`] reconnects) without any of them noticing.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::{FutureExt, StreamExt};
use hookline_core::handler::Handler;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::acks::Acks;
use crate::context::{ConsumerSettings, Ctx};
use crate::gather::{spawn_batch, start_ready, take_batch, StartReady};

/// One connection's lifetime: connect (to any node of the cluster, the next one after a loss), declare,
/// qos, consume until cancel or failure. Every set-up step is bounded in time: a node whose queue has lost its
/// majority may accept the connection but never answer the declare or the consume.
pub(crate) async fn consume_session<H: Handler>(
    s: &ConsumerSettings,
    ctx: &Arc<Ctx<H>>,
    permits: &Arc<Semaphore>,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    // A broker that accepts the TCP connection and never answers holds the connect for up to its timeout
    // (15 s per node): a stop asked meanwhile must not wait for it (nothing is in flight yet).
    let connection = tokio::select! {
        connection = hookline_bus::connect(&s.amqp_urls, "hookline-worker") => connection?,
        _ = cancel.cancelled() => return Ok(()),
    };
    let result = session_on(s, &connection, ctx, permits, cancel).await;
    if result.is_err() {
        // Never leave it open: a consumer registered on a forgotten channel keeps its prefetch window.
        hookline_bus::abandon(connection, "worker session failed").await;
    }
    result
}

/// The session on one connection: declare, qos, consume until cancel (then close it) or failure (the caller
/// closes it).
async fn session_on<H: Handler>(
    s: &ConsumerSettings,
    connection: &lapin::Connection,
    ctx: &Arc<Ctx<H>>,
    permits: &Arc<Semaphore>,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let (channel, mut consumer) = open_consumer(connection, s).await?;
    let tag = consumer.tag();
    // Every settlement of this channel's deliveries goes through one tracker (one `multiple` ack per batch).
    let acks = Arc::new(Acks::default());
    tracing::info!(
        messaging.system = "rabbitmq",
        queue = %s.queue,
        prefetch = s.prefetch,
        concurrency = s.concurrency,
        "worker consuming"
    );
    // A consumer may stop yielding without an error when the connection dies (lapin #389): watch the status.
    let mut health = tokio::time::interval(Duration::from_secs(2));
    let mut last_delivery = std::time::Instant::now();
    // Deliveries taken from the consumer and not yet in a batch: they gather while earlier batches are in
    // flight, and start when one finishes (`start_ready`). Bounded by the prefetch window.
    let mut pending: Vec<Delivery> = Vec::new();
    // Woken by every batch that finishes, so that what gathered meanwhile starts.
    let finished = Arc::new(Notify::new());
    let mut pending_since: Option<tokio::time::Instant> = None;
    let result = loop {
        // Wakes the loop when the oldest gathered delivery has waited `batch_linger` — only while a slot is
        // free: with every slot busy, only a finished batch can start the next one (the timer would spin).
        let linger_until = pending_since
            .filter(|_| permits.available_permits() > 0)
            .map(|t| t + s.batch_linger);
        tokio::select! {
            _ = cancel.cancelled() => {
                let cancel_consumer = channel.basic_cancel(tag.clone(), BasicCancelOptions::default());
                tokio::time::timeout(hookline_bus::SETTLE_TIMEOUT, cancel_consumer).await.ok();
                break Ok(());
            }
            _ = health.tick() => {
                let idle = pending.is_empty() && permits.available_permits() == s.concurrency;
                if let Err(e) = check_health(connection, s, idle, &mut last_delivery).await {
                    break Err(e);
                }
            }
            _ = finished.notified() => {}
            _ = tokio::time::sleep_until(linger_until.unwrap_or_else(tokio::time::Instant::now)),
                if linger_until.is_some() => {}
            next = consumer.next() => match next {
                Some(Ok(delivery)) => {
                    last_delivery = std::time::Instant::now();
                    pending_since.get_or_insert_with(tokio::time::Instant::now);
                    pending.push(delivery);
                    if let Some(e) = take_arrived(&mut consumer, &mut pending, s.batch_max) {
                        break Err(anyhow::Error::new(e).context("consumer failed"));
                    }
                }
                Some(Err(e)) => break Err(anyhow::Error::new(e).context("consumer failed")),
                None => break Err(anyhow::anyhow!("consumer stream ended")),
            }
        }
        start_ready(StartReady {
            pending: &mut pending,
            pending_since: &mut pending_since,
            permits,
            settings: s,
            ctx,
            acks: &acks,
            finished: &finished,
        })
        .await;
    };
    // What was taken and not started yet is handled like the rest (its acks may fail on a dead channel: then
    // it is redelivered, and its markers make that a no-op).
    while !pending.is_empty() {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .context("semaphore closed")?;
        let batch = take_batch(&mut pending, s.batch_max);
        spawn_batch(ctx, &acks, &finished, batch, permit).await;
    }
    if result.is_ok() {
        close_gracefully(s, connection, &channel, permits).await?;
    }
    result
}

/// After a stop: waits for in-flight deliveries to ack on this channel, then closes the channel and the
/// connection.
async fn close_gracefully(
    s: &ConsumerSettings,
    connection: &lapin::Connection,
    channel: &lapin::Channel,
    permits: &Semaphore,
) -> anyhow::Result<()> {
    let _all = permits
        .acquire_many(s.concurrency as u32)
        .await
        .context("wait for in-flight deliveries")?;
    // Bounded like every other frame (lapin#409): a broker going away must not hold the shutdown.
    let bounded = hookline_bus::SETTLE_TIMEOUT;
    tokio::time::timeout(bounded, channel.close(200, "worker stopping".into()))
        .await
        .ok();
    tokio::time::timeout(bounded, connection.close(200, "worker stopping".into()))
        .await
        .ok();
    Ok(())
}

/// The session's periodic check: the connection is still up (a consumer may stop yielding without an error when
/// the connection dies, lapin #389), and a consumer `idle` (nothing gathered, nothing in flight) for
/// [`IDLE_CHECK`] is still served. `Err` ends the session (the caller registers the consumer again).
async fn check_health(
    connection: &lapin::Connection,
    s: &ConsumerSettings,
    idle: bool,
    last_delivery: &mut std::time::Instant,
) -> anyhow::Result<()> {
    if !connection.status().connected() {
        return Err(anyhow::anyhow!("connection to RabbitMQ lost"));
    }
    if idle && last_delivery.elapsed() >= IDLE_CHECK {
        *last_delivery = std::time::Instant::now();
        if let Some(ready) = ready_messages(connection, &s.queue).await {
            if ready > 0 {
                return Err(anyhow::anyhow!(
                    "no delivery for {IDLE_CHECK:?} with nothing in flight while {ready} messages \
                     are ready: the consumer is not served; registering it again"
                ));
            }
        }
    }
    Ok(())
}

/// Declares the topology and registers a consumer on a new channel of `connection`, every step bounded in time
/// (a node whose queue lost its majority may accept the connection but never answer the declare or the consume).
async fn open_consumer(
    connection: &lapin::Connection,
    s: &ConsumerSettings,
) -> anyhow::Result<(lapin::Channel, lapin::Consumer)> {
    s.topology.declare(connection).await?;
    let channel =
        hookline_bus::within_setup_timeout("open channel", connection.create_channel()).await?;
    // lapin's recovery does not re-issue basic.qos, and a new channel starts unlimited: always set it here.
    hookline_bus::within_setup_timeout(
        "basic.qos",
        channel.basic_qos(s.prefetch, BasicQosOptions { global: false }),
    )
    .await?;
    let consumer = hookline_bus::within_setup_timeout(
        "basic.consume",
        channel.basic_consume(
            s.queue.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(), // manual acks
            FieldTable::default(),
        ),
    )
    .await?;
    Ok((channel, consumer))
}

/// Takes what the consumer has already received (without waiting) until `pending` holds `max`. Returns the
/// consumer's error if one came (what was taken is still handled; the session then ends).
fn take_arrived(
    consumer: &mut lapin::Consumer,
    pending: &mut Vec<Delivery>,
    max: usize,
) -> Option<lapin::Error> {
    while pending.len() < max {
        match consumer.next().now_or_never() {
            Some(Some(Ok(d))) => pending.push(d),
            Some(Some(Err(e))) => return Some(e),
            Some(None) | None => break,
        }
    }
    None
}

/// How long an idle consumer (nothing in flight) goes without a delivery before it checks whether the queue has
/// messages ready for it. Seen on RabbitMQ 3.10 when a quorum queue's leader node was killed: a consumer
/// registered during the election (or through a node restarted since) stayed registered but was never served,
/// while a new registration was.
const IDLE_CHECK: Duration = Duration::from_secs(10);

/// Ready messages of `queue` by a passive declare on a channel of its own (a failed passive declare closes its
/// channel); `None` when the broker does not answer within 5 s (e.g. the queue has no leader right now).
async fn ready_messages(connection: &lapin::Connection, queue: &str) -> Option<u32> {
    let check = async {
        let channel = connection.create_channel().await.ok()?;
        let passive = lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let declared = channel
            .queue_declare(queue.into(), passive, FieldTable::default())
            .await
            .ok()?;
        channel.close(200, "checked".into()).await.ok();
        Some(declared.message_count())
    };
    tokio::time::timeout(Duration::from_secs(5), check)
        .await
        .ok()
        .flatten()
}
