//! The RabbitMQ consumer: manual acks, explicit prefetch, bounded concurrency, reconnection, graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::future::join_all;
use futures::{FutureExt, StreamExt};
use hookline_bus::publisher::traceparent_of;
use hookline_bus::{message, EventMessage, Packing, Publisher, Topology};
use hookline_core::config::AmqpEndpoints;
use hookline_core::retry::Backoff;
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use hookline_core::telemetry;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable};
use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::acks::Acks;
use crate::process::{
    process_batch_prepared, process_prepared, record_dead_letter, BatchFailed, BatchItem,
    ProcessError, Processed,
};
use hookline_core::handler::{reason_text, EventRef, Handler};

/// Metric names of the worker.
pub mod metric {
    /// Counter: events delivered, by `consumer` and `outcome` (applied, ignored, parked, needs_fetch, duplicate,
    /// dead_lettered, requeued; `split`: a bundle republished as single messages, counted once per bundle).
    pub const DELIVERIES: &str = "hookline_worker_deliveries_total";
    /// Counter: transient failures retried in-process.
    pub const RETRIES: &str = "hookline_worker_transient_retries_total";
    /// Histogram: seconds to process one delivery (transaction included).
    pub const PROCESS_SECONDS: &str = "hookline_worker_process_seconds";
    /// Histogram (summary): events taken into one transaction (a bundle counts its events).
    pub const BATCH_SIZE: &str = "hookline_worker_batch_size";
}

/// How often a worker reconciles the dead-letter queue with the `dead_letters` table.
const DLQ_RECONCILE_INTERVAL: Duration = Duration::from_secs(30);

/// Settings of one worker process.
#[derive(Clone)]
pub struct WorkerSettings {
    /// Broker endpoints (the nodes of a cluster, tried in turn on every (re)connection).
    pub amqp_urls: AmqpEndpoints,
    /// Queue names.
    pub topology: Topology,
    /// `basic.qos` prefetch, re-applied on every (re)connection.
    pub prefetch: u16,
    /// Deliveries processed at once.
    pub concurrency: usize,
    /// Most deliveries applied in one transaction (1 = one transaction per delivery).
    pub batch_max: usize,
    /// While earlier batches are in flight, the longest a batch that is not full gathers more deliveries before
    /// it starts anyway (zero: it starts with what has arrived). With nothing in flight it starts at once.
    pub batch_linger: Duration,
}

/// A worker: consumes the payments queue and applies each event once through its handler.
pub struct Worker<H: Handler> {
    pool: PgPool,
    handler: Arc<H>,
    settings: WorkerSettings,
}

struct Ctx<H: Handler> {
    pool: PgPool,
    handler: Arc<H>,
    cancel: CancellationToken,
    delivery_limit: u32,
    splitter: Splitter,
}

impl<H: Handler> Worker<H> {
    /// A worker over `pool` applying `handler`.
    pub fn new(pool: PgPool, handler: H, settings: WorkerSettings) -> Worker<H> {
        Worker {
            pool,
            handler: Arc::new(handler),
            settings,
        }
    }

    /// The worker's database pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Consumes until `cancel`, reconnecting after any broker failure. On cancel: stops consuming
    /// (`basic.cancel`), lets in-flight deliveries finish (commit and ack), then closes the connection.
    /// Background loops run under a supervisor of their own (see [`Worker::run_with`]).
    pub async fn run(self, cancel: CancellationToken) -> anyhow::Result<()> {
        let supervisor = Supervisor::new(Liveness::new(), RestartPolicy::default());
        self.run_with(cancel, supervisor).await
    }

    /// [`Worker::run`], with the background loops (dead-letter reconciliation) supervised by `supervisor`: a
    /// loop that keeps failing is declared dead on its [`Liveness`], which the process watches.
    pub async fn run_with(
        self,
        cancel: CancellationToken,
        supervisor: Supervisor,
    ) -> anyhow::Result<()> {
        let permits = Arc::new(Semaphore::new(self.settings.concurrency));
        let ctx = Arc::new(Ctx {
            pool: self.pool.clone(),
            handler: self.handler.clone(),
            cancel: cancel.clone(),
            delivery_limit: self.settings.topology.delivery_limit,
            splitter: Splitter {
                amqp_urls: self.settings.amqp_urls.clone(),
                topology: self.settings.topology.clone(),
                publisher: tokio::sync::Mutex::new(None),
            },
        });
        // Keep the dead-letter table in step with the DLQ (messages dead-lettered by the delivery limit after
        // crashes carry no recorded reason otherwise).
        let consumer = self.handler.consumer();
        let reconcile = supervisor.spawn(
            "dlq_reconcile",
            &cancel,
            (
                self.pool.clone(),
                self.settings.amqp_urls.clone(),
                self.settings.topology.clone(),
            ),
            move |(pool, url, topology), cancel| async move {
                let mut tick = tokio::time::interval(DLQ_RECONCILE_INTERVAL);
                tick.tick().await; // the first tick is immediate: start one interval from now
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return Ok(()),
                        _ = tick.tick() => {}
                    }
                    // Bounded: a broker that stops answering mid-pass must not stop every later pass.
                    let pass = hookline_bus::dead_letters::reconcile(&pool, &url, &topology, consumer, 1_000);
                    match tokio::time::timeout(DLQ_RECONCILE_INTERVAL, pass).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => tracing::warn!(error.message = %format!("{e:#}"), "dead-letter reconciliation failed; will retry"),
                        Err(_) => tracing::warn!(timeout_ms = DLQ_RECONCILE_INTERVAL.as_millis() as u64, "dead-letter reconciliation did not finish in time; will retry"),
                    }
                }
            },
        );
        let mut backoff = Backoff::reconnect();
        while !cancel.is_cancelled() {
            match self.consume_session(&ctx, &permits, &cancel).await {
                Ok(()) => backoff.reset(),
                Err(e) => {
                    let wait = backoff.failed();
                    tracing::warn!(
                        messaging.system = "rabbitmq",
                        error.cause_chain = %format!("{e:#}"),
                        retry_in_ms = wait.as_millis() as u64,
                        "consumer session ended; reconnecting"
                    );
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        // Wait for in-flight deliveries: each finishes its transaction and its ack.
        let _all = permits
            .acquire_many(self.settings.concurrency as u32)
            .await
            .context("wait for in-flight deliveries")?;
        reconcile.await.ok();
        ctx.splitter.close().await;
        tracing::info!("worker stopped");
        Ok(())
    }

    /// One connection's lifetime: connect (to any node of the cluster, the next one after a loss), declare,
    /// qos, consume until cancel or failure. Every set-up step is bounded in time: a node whose queue has lost its
    /// majority may accept the connection but never answer the declare or the consume.
    async fn consume_session(
        &self,
        ctx: &Arc<Ctx<H>>,
        permits: &Arc<Semaphore>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        // A broker that accepts the TCP connection and never answers holds the connect for up to its timeout
        // (15 s per node): a stop asked meanwhile must not wait for it (nothing is in flight yet).
        let connection = tokio::select! {
            connection = hookline_bus::connect(&self.settings.amqp_urls, "hookline-worker") => connection?,
            _ = cancel.cancelled() => return Ok(()),
        };
        let result = self.session_on(&connection, ctx, permits, cancel).await;
        if result.is_err() {
            // Never leave it open: a consumer registered on a forgotten channel keeps its prefetch window.
            hookline_bus::abandon(connection, "worker session failed").await;
        }
        result
    }

    /// The session on one connection: declare, qos, consume until cancel (then close it) or failure (the caller
    /// closes it).
    async fn session_on(
        &self,
        connection: &lapin::Connection,
        ctx: &Arc<Ctx<H>>,
        permits: &Arc<Semaphore>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        let s = &self.settings;
        let (channel, mut consumer) = open_consumer(connection, s).await?;
        let tag = consumer.tag();
        // Every settlement of this channel's deliveries goes through one tracker (one `multiple` ack per batch).
        let acks = Arc::new(Acks::default());
        tracing::info!(
            messaging.system = "rabbitmq",
            queue = %s.topology.payments_queue,
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
                    if !connection.status().connected() {
                        break Err(anyhow::anyhow!("connection to RabbitMQ lost"));
                    }
                    if last_delivery.elapsed() >= IDLE_CHECK
                        && permits.available_permits() == s.concurrency
                        && pending.is_empty()
                    {
                        last_delivery = std::time::Instant::now();
                        if let Some(ready) = ready_messages(connection, &s.topology.payments_queue).await {
                            if ready > 0 {
                                break Err(anyhow::anyhow!(
                                    "no delivery for {IDLE_CHECK:?} with nothing in flight while {ready} messages \
                                     are ready: the consumer is not served; registering it again"
                                ));
                            }
                        }
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
            // Graceful: wait for in-flight deliveries to ack on this channel before closing it.
            let _all = permits
                .acquire_many(self.settings.concurrency as u32)
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
        }
        result
    }
}

/// Declares the topology and registers a consumer on a new channel of `connection`, every step bounded in time
/// (a node whose queue lost its majority may accept the connection but never answer the declare or the consume).
async fn open_consumer(
    connection: &lapin::Connection,
    s: &WorkerSettings,
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
            s.topology.payments_queue.as_str().into(),
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

/// What [`start_ready`] needs from the session.
struct StartReady<'a, H: Handler> {
    pending: &'a mut Vec<Delivery>,
    /// When the oldest of `pending` arrived.
    pending_since: &'a mut Option<tokio::time::Instant>,
    permits: &'a Arc<Semaphore>,
    settings: &'a WorkerSettings,
    ctx: &'a Arc<Ctx<H>>,
    acks: &'a Arc<Acks>,
    finished: &'a Arc<Notify>,
}

/// Starts the batches that are ready. Batches fill by themselves: while an earlier batch is in flight, what
/// arrives waits in `pending` until a batch finishes, `pending` holds a full batch (`batch_max`), or its oldest
/// delivery has waited `batch_linger`; with nothing in flight, what has arrived starts at once. So a moderate
/// rate pays a transaction's statements for as many deliveries as arrived during the previous one, an idle
/// worker adds no wait, and a batch that is stuck (a row lock, a slow fetch) delays the next by `batch_linger`
/// at most — the deliveries behind it are not held until it ends.
async fn start_ready<H: Handler>(r: StartReady<'_, H>) {
    let s = r.settings;
    while !r.pending.is_empty() {
        let in_flight = s.concurrency.saturating_sub(r.permits.available_permits());
        let waited = r
            .pending_since
            .is_none_or(|t| t.elapsed() >= s.batch_linger);
        let full = r.pending.iter().map(weight).sum::<usize>() >= s.batch_max;
        if in_flight > 0 && !full && !waited {
            break;
        }
        let Ok(permit) = r.permits.clone().try_acquire_owned() else {
            break;
        };
        let batch = take_batch(r.pending, s.batch_max);
        spawn_batch(r.ctx, r.acks, r.finished, batch, permit).await;
        // What is left arrived after the batch's first delivery; counting from now errs toward starting later
        // by at most one linger, never toward holding a delivery longer than the previous batch took.
        *r.pending_since = (!r.pending.is_empty()).then(tokio::time::Instant::now);
    }
}

/// Takes the oldest deliveries of `pending` that make a batch of at most `batch_max` events (a bundle counts its
/// events, see [`weight`]), at least one delivery.
fn take_batch(pending: &mut Vec<Delivery>, batch_max: usize) -> Vec<Delivery> {
    let mut events = 0;
    let n = pending
        .iter()
        .take_while(|d| {
            events += weight(d);
            events <= batch_max
        })
        .count()
        .max(1)
        .min(pending.len());
    pending.drain(..n).collect()
}

/// Records `batch` with the ack tracker and handles it on its own task, which frees its slot and wakes the
/// session when done.
async fn spawn_batch<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Arc<Acks>,
    finished: &Arc<Notify>,
    batch: Vec<Delivery>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    metrics::histogram!(metric::BATCH_SIZE).record(batch.iter().map(weight).sum::<usize>() as f64);
    acks.received(&batch).await;
    let (ctx, acks, finished) = (ctx.clone(), acks.clone(), finished.clone());
    tokio::spawn(async move {
        handle_batch(&ctx, &acks, batch).await;
        drop(permit);
        finished.notify_one();
    });
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

/// What a handler's `prepare` sees of a delivery.
fn event_ref(msg: &EventMessage) -> EventRef<'_> {
    EventRef {
        id: msg.id,
        provider: &msg.provider,
        provider_event_id: &msg.provider_event_id,
        event_type: msg.event_type.as_deref(),
    }
}

/// RabbitMQ's count of earlier deliveries of this message (`x-delivery-count`: how often it was returned).
fn broker_delivery_count(delivery: &Delivery) -> u32 {
    header_count(delivery, "x-delivery-count")
}

/// Attempts an event has had: RabbitMQ's count for this message plus what a bundle it was split from had used
/// ([`hookline_bus::message::PRIOR_DELIVERIES_HEADER`]). This is what the delivery limit is judged by.
fn delivery_count(delivery: &Delivery) -> u32 {
    broker_delivery_count(delivery).saturating_add(prior_deliveries(delivery))
}

fn prior_deliveries(delivery: &Delivery) -> u32 {
    header_count(delivery, message::PRIOR_DELIVERIES_HEADER).min(MAX_PRIOR_DELIVERIES)
}

/// A bound on a header that only a worker writes, so that a hand-made one cannot overflow a count.
const MAX_PRIOR_DELIVERIES: u32 = 1_000;

fn header_count(delivery: &Delivery, name: &str) -> u32 {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(name).cloned())
        .and_then(|v| match v {
            AMQPValue::LongLongInt(n) => u32::try_from(n).ok(),
            AMQPValue::LongInt(n) => u32::try_from(n).ok(),
            AMQPValue::LongUInt(n) => Some(n),
            AMQPValue::ShortInt(n) => u32::try_from(n).ok(),
            AMQPValue::ShortUInt(n) => Some(u32::from(n)),
            _ => None,
        })
        .unwrap_or(0)
}

fn content_type(delivery: &Delivery) -> Option<&str> {
    delivery
        .properties
        .content_type()
        .as_ref()
        .map(|c| c.as_str())
}

/// How many events a delivery carries, as far as batching is concerned: a bundle's `x-hookline-events`
/// (bounded), 1 for anything else. Read before parsing, to size batches by events rather than by messages.
fn weight(delivery: &Delivery) -> usize {
    if message::is_bundle(content_type(delivery)) {
        (header_count(delivery, message::EVENTS_HEADER) as usize).clamp(1, message::BUNDLE_MAX)
    } else {
        1
    }
}

/// The span of one event's apply: a child of the span that published it (for a single message its
/// `traceparent` header, for an event of a bundle the bundle's entry — the relay's publish, in the event's own
/// trace), whatever process, batch or redelivery it arrives in.
fn apply_span(
    consumer: &str,
    delivery: &Delivery,
    event_id: i64,
    batch_size: usize,
    parent: Option<&str>,
) -> tracing::Span {
    let span = tracing::info_span!(
        "worker.apply",
        otel.kind = "consumer",
        messaging.system = "rabbitmq",
        consumer,
        event_id,
        redelivered = delivery.redelivered,
        delivery_count = delivery_count(delivery),
        batch_size,
        outcome = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    telemetry::set_parent(&span, parent);
    telemetry::record_trace_id(&span);
    span
}

/// Applies one parsed delivery in its `worker.apply` span (the batch path's fallbacks come here with the message
/// and span they already have): retries transient failures in-process, dead-letters permanent ones, requeues a
/// panic, acks after the commit.
async fn apply_delivery<H: Handler>(
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
        // Run the transaction in its own task so a panicking handler is contained and the delivery requeued.
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
        let result = match task.await {
            Ok(Err(ProcessError::Panicked(p))) => Err(format!("handler panicked: {p}")),
            Ok(r) => Ok(r),
            Err(join) => Err(format!("handler panicked: {join}")),
        };
        let result = match result {
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
                // Mapped to a requeue above; kept as a requeue here too rather than a panic on the delivery path.
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

/// Requeues a delivery whose handler panicked. The quorum queue counts it against the delivery limit, so a
/// message that always panics ends in the DLQ. A quorum queue dead-letters a message returned more than `limit`
/// times, i.e. on the return of delivery number limit+1, whose x-delivery-count is `limit`: record it then (for a
/// message split from a bundle, whose count includes the bundle's attempts, reject it then).
async fn requeue_panicked<H: Handler>(
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

/// One delivery of a batch and the events it carries (one, or a bundle's), each with its apply span.
struct Unit {
    delivery: Delivery,
    bundle: bool,
    events: Vec<(EventMessage, tracing::Span)>,
}

/// Processes several deliveries in one transaction (see [`process_batch`]) and acks each after the commit.
///
/// Bundles (several events in one message, see [`hookline_bus::message`]) take part only on their first
/// delivery: a redelivered bundle (a crash, a lost connection) is split into single messages before anything is
/// applied, and so is every bundle of a batch that failed — a bundle is settled as a whole, and a poison event
/// must be retried and dead-lettered alone, exactly as a single message is, with the attempts the bundle used
/// counted ([`split`]).
///
/// If the batch fails, the single delivery that failed is handled according to its failure without running it
/// again (a panic is requeued, a permanent failure dead-lettered — so a poison message costs one attempt per
/// delivery, batch or not), and every other single delivery goes through the one-by-one path, which applies it
/// or backs off.
async fn handle_batch<H: Handler>(ctx: &Arc<Ctx<H>>, acks: &Acks, deliveries: Vec<Delivery>) {
    let consumer = ctx.handler.consumer();
    let started = std::time::Instant::now();
    let batch_size: usize = deliveries.iter().map(weight).sum();
    let mut units: Vec<Unit> = Vec::with_capacity(deliveries.len());
    for d in deliveries {
        let bundle = message::is_bundle(content_type(&d));
        let events = match message::decode(content_type(&d), &d.data) {
            Ok(events) => events,
            Err(e) => {
                // Not even an event reference: nothing to record against; the DLQ keeps the bytes.
                tracing::error!(
                    messaging.system = "rabbitmq",
                    delivery_tag = d.delivery_tag,
                    error.message = %e,
                    "unparseable message; dead-lettering"
                );
                reject(acks, &d).await;
                metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => "dead_lettered")
                    .increment(1);
                continue;
            }
        };
        if bundle && (d.redelivered || broker_delivery_count(&d) > 0) {
            // Delivered before and not settled: whatever happened to it may happen again. Its events go on alone.
            let prior = delivery_count(&d);
            split(ctx, acks, d, events, prior).await;
            continue;
        }
        if !bundle && delivery_count(&d) > ctx.delivery_limit {
            // Split from a bundle, and returned since more often than the limit allows in all: what RabbitMQ
            // does with a message returned that often (its own count restarted at the split).
            if let Some(m) = events.first() {
                let reason = format!(
                    "dead-lettered by the worker (delivery_limit, {} attempts in all, split from a bundle) with no \
                     failure recorded by a worker: the delivery limit was reached through worker crashes or lost \
                     connections; redrive it",
                    delivery_count(&d)
                );
                dead_letter(ctx, acks, &d, m, &reason).await;
            }
            continue;
        }
        let header_parent = (!bundle).then(|| traceparent_of(&d.properties)).flatten();
        let events = events
            .into_iter()
            .map(|m| {
                let parent = if bundle {
                    m.traceparent.clone()
                } else {
                    header_parent.clone()
                };
                let span = apply_span(consumer, &d, m.id, batch_size, parent.as_deref());
                (m, span)
            })
            .collect();
        units.push(Unit {
            delivery: d,
            bundle,
            events,
        });
    }
    if units.len() == 1 && !units[0].bundle {
        // One event: the one-by-one path (its own transaction, retries in-process).
        let Some(unit) = units.pop() else { return };
        if let Some((msg, span)) = unit.events.into_iter().next() {
            apply_delivery(ctx, acks, unit.delivery, msg, span).await;
        }
        return;
    }
    // The batch's own span, linked to each event's apply: one transaction serves several traces.
    let batch_span = tracing::info_span!("worker.batch", consumer, batch_size);
    for (_, span) in units.iter().flat_map(|u| &u.events) {
        telemetry::add_link(&batch_span, telemetry::traceparent(span).as_deref());
    }
    // Prepare every event first, outside the transaction (concurrently: for most handlers a no-op). A single
    // delivery whose event cannot be prepared takes the one-by-one path, which backs off or dead-letters it; a
    // bundle with such an event is split.
    let prepared = join_all(
        units
            .iter()
            .flat_map(|u| &u.events)
            .map(|(m, span)| ctx.handler.prepare(event_ref(m)).instrument(span.clone())),
    )
    .await;
    let mut prepared = prepared.into_iter();
    let mut items = Vec::new();
    let mut ready: Vec<Unit> = Vec::with_capacity(units.len());
    for unit in units {
        let preps: Vec<_> = prepared.by_ref().take(unit.events.len()).collect();
        if preps.iter().all(Result::is_ok) {
            for ((m, span), p) in unit.events.iter().zip(preps.into_iter().flatten()) {
                items.push(BatchItem {
                    event_id: m.id,
                    prepared: p,
                    traceparent: telemetry::traceparent(span),
                });
            }
            ready.push(unit);
        } else if unit.bundle {
            let prior = delivery_count(&unit.delivery);
            split_unit(ctx, acks, unit, prior).await;
        } else if let Some((msg, span)) = unit.events.into_iter().next() {
            apply_delivery(ctx, acks, unit.delivery, msg, span).await;
        }
    }
    if ready.is_empty() {
        return;
    }
    let task = {
        let ctx = ctx.clone();
        tokio::spawn(
            async move { process_batch_prepared(&ctx.pool, ctx.handler.as_ref(), items).await }
                .instrument(batch_span),
        )
    };
    let failed = match task.await {
        Ok(Ok(results)) => {
            #[cfg(feature = "failpoints")]
            fail::fail_point!("worker.after_commit");
            // After the commit: one `multiple` ack for the batch where no earlier delivery is outstanding.
            let delivered: Vec<&Delivery> = ready.iter().map(|u| &u.delivery).collect();
            for tag in acks.ack_committed(&delivered).await {
                tracing::warn!(
                    delivery_tag = tag,
                    "ack not delivered (channel closed); the event will be redelivered and deduplicated"
                );
            }
            for ((_, span), processed) in ready.iter().flat_map(|u| &u.events).zip(results) {
                let outcome = match &processed {
                    Processed::Applied(o) => o.kind.as_str(),
                    Processed::Duplicate => "duplicate",
                };
                span.record("outcome", outcome);
                metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => outcome)
                    .increment(1);
            }
            metrics::histogram!(metric::PROCESS_SECONDS, "consumer" => consumer)
                .record(started.elapsed().as_secs_f64());
            return;
        }
        Ok(Err(failed)) => failed,
        Err(join) => BatchFailed {
            index: None,
            error: ProcessError::Panicked(join.to_string()),
        },
    };
    if failed.index.is_none() {
        tracing::warn!(error.message = ?failed.error.to_string(), "batch did not commit; processing one by one");
    }
    // Which unit the failing event belongs to (items were pushed unit by unit, in order).
    let mut first = 0;
    let mut rest = Vec::with_capacity(ready.len());
    for unit in ready {
        let n = unit.events.len();
        let failing = failed
            .index
            .is_some_and(|i| (first..first + n).contains(&i));
        first += n;
        if unit.bundle {
            // An attempt of the failing event was used (a panic or a permanent failure is its own doing).
            let used = failing && !matches!(failed.error, ProcessError::Transient(_));
            let prior = delivery_count(&unit.delivery) + u32::from(used);
            split_unit(ctx, acks, unit, prior).await;
            continue;
        }
        let Some((msg, span)) = unit.events.into_iter().next() else {
            continue;
        };
        let delivery = unit.delivery;
        if !failing {
            rest.push((delivery, msg, span));
            continue;
        }
        match &failed.error {
            ProcessError::Panicked(p) => {
                requeue_panicked(
                    ctx,
                    acks,
                    &delivery,
                    msg.id,
                    &format!("handler panicked: {p}"),
                )
                .await
            }
            ProcessError::Permanent(e) => {
                if dead_letter(ctx, acks, &delivery, &msg, &reason_text(e)).await {
                    span.record("outcome", "dead_lettered");
                } else {
                    rest.push((delivery, msg, span));
                }
            }
            ProcessError::Transient(_) => rest.push((delivery, msg, span)),
        }
    }
    for (d, msg, span) in rest {
        apply_delivery(ctx, acks, d, msg, span).await;
    }
}

async fn split_unit<H: Handler>(ctx: &Arc<Ctx<H>>, acks: &Acks, unit: Unit, prior: u32) {
    let events = unit.events.into_iter().map(|(m, _)| m).collect();
    split(ctx, acks, unit.delivery, events, prior).await
}

/// Republishes each event of a bundle as a single message (carrying `prior`, the attempts the bundle used, in
/// [`hookline_bus::message::PRIOR_DELIVERIES_HEADER`]), then acks the bundle. Until RabbitMQ has confirmed every
/// single message the bundle is neither acked nor requeued: the split is retried in-process with a backoff, and
/// a crash meanwhile returns the bundle, which is split again (its events then arrive twice; their markers make
/// the second a duplicate).
async fn split<H: Handler>(
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
struct Splitter {
    amqp_urls: AmqpEndpoints,
    topology: Topology,
    publisher: tokio::sync::Mutex<Option<Publisher>>,
}

impl Splitter {
    /// How long a split's publishes and confirms may take.
    const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

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

    async fn close(&self) {
        if let Some(p) = self.publisher.lock().await.take() {
            p.close().await;
        }
    }
}

/// Records the reason and rejects the delivery to the dead-letter queue. False when the reason could not be
/// recorded (the delivery is then left for a retry rather than dead-lettered without a reason).
async fn dead_letter<H: Handler>(
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

async fn ack(acks: &Acks, delivery: &Delivery, event_id: i64) {
    if !acks.ack(delivery).await {
        // The channel is closed or recovering: the ack was not sent. The message will be redelivered and the
        // processed marker makes that a no-op.
        tracing::warn!(
            event_id,
            delivery_tag = delivery.delivery_tag,
            "ack not delivered (channel closed); the event will be redelivered and deduplicated"
        );
    }
}

async fn reject(acks: &Acks, delivery: &Delivery) {
    if !acks.reject(delivery).await {
        tracing::warn!(
            delivery_tag = delivery.delivery_tag,
            "reject not delivered (channel closed); the message will be redelivered"
        );
    }
}
