//! The consumer: its settings, what its stages share, its metric names, and its outer loop — broker sessions one
//! after another until a stop, then the wait for in-flight deliveries.
//!
//! Why here: this is the crate's face (what the worker binary builds and runs) and the one place that holds a
//! consumer's lifetime; each stage of a delivery lives in a file of its own: `consuming.rs` (one AMQP session),
//! `gather.rs` (batches), `apply_single.rs` and `apply_batch.rs` (the transaction), `bundles.rs`, `acks.rs` and
//! `dead_letter.rs` (settling), `delivery.rs` (what a delivery's headers say). Loops beside the consumer (such as
//! [`crate::dlq::run_periodic`]) are spawned by the process that runs it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hookline_bus::Topology;
use hookline_core::config::AmqpEndpoints;
use hookline_core::retry::Backoff;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::bundles::Splitter;
use crate::consuming::consume_session;
use hookline_core::handler::Handler;

/// Metric names of the consumer.
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

/// Settings of one consumer.
#[derive(Clone)]
pub struct ConsumerSettings {
    /// Broker endpoints (the nodes of a cluster, tried in turn on every (re)connection).
    pub amqp_urls: AmqpEndpoints,
    /// The queue consumed (the worker passes the topology's payments queue).
    pub queue: String,
    /// Queue names and limits: declared on every (re)connection; its delivery limit is what a message split from
    /// a bundle is judged by, and bundles are split through it.
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

/// A consumer: consumes its queue and applies each event once through its handler.
pub struct Consumer<H: Handler> {
    pool: PgPool,
    handler: Arc<H>,
    settings: ConsumerSettings,
}

/// What every stage of a delivery shares, for the consumer's whole run.
pub(crate) struct Ctx<H: Handler> {
    pub(crate) pool: PgPool,
    pub(crate) handler: Arc<H>,
    pub(crate) cancel: CancellationToken,
    pub(crate) delivery_limit: u32,
    pub(crate) splitter: Splitter,
}

impl<H: Handler> Consumer<H> {
    /// A consumer over `pool` applying `handler`.
    pub fn new(pool: PgPool, handler: H, settings: ConsumerSettings) -> Consumer<H> {
        Consumer {
            pool,
            handler: Arc::new(handler),
            settings,
        }
    }

    /// The consumer's database pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The consumer's name (its handler's: the first half of the processed marker).
    pub fn name(&self) -> &'static str {
        self.handler.consumer()
    }

    /// The consumer's settings.
    pub fn settings(&self) -> &ConsumerSettings {
        &self.settings
    }

    /// Consumes until `cancel`, reconnecting after any broker failure. On cancel: stops consuming
    /// (`basic.cancel`), lets in-flight deliveries finish (commit and ack), then closes the connection.
    pub async fn run(self, cancel: CancellationToken) -> anyhow::Result<()> {
        let permits = Arc::new(Semaphore::new(self.settings.concurrency));
        let ctx = Arc::new(Ctx {
            pool: self.pool.clone(),
            handler: self.handler.clone(),
            cancel: cancel.clone(),
            delivery_limit: self.settings.topology.delivery_limit,
            splitter: Splitter::new(
                self.settings.amqp_urls.clone(),
                self.settings.topology.clone(),
            ),
        });
        let mut backoff = Backoff::reconnect();
        while !cancel.is_cancelled() {
            match consume_session(&self.settings, &ctx, &permits, &cancel).await {
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
        ctx.splitter.close().await;
        tracing::info!("worker stopped");
        Ok(())
    }
}
