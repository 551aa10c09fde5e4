//! What the consumer's stages share: its settings, its metric names and the context every stage of a delivery
//! holds for the consumer's whole run. A file of its own, below every stage, so that the stages and the consumer's
//! outer loop ([`crate::consumer`]) all import it and none imports the other back.

use std::sync::Arc;
use std::time::Duration;

use hookline_bus::Topology;
use hookline_core::config::AmqpEndpoints;
use hookline_core::handler::Handler;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::splitter::Splitter;

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

/// What every stage of a delivery shares, for the consumer's whole run.
pub(crate) struct Ctx<H: Handler> {
    pub(crate) pool: PgPool,
    pub(crate) handler: Arc<H>,
    pub(crate) cancel: CancellationToken,
    pub(crate) delivery_limit: u32,
    pub(crate) splitter: Splitter,
}
