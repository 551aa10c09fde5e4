//! The consumer: its settings, what its stages share, its metric names, and its outer loop — broker sessions one
//! after another until a stop, then the wait for in-flight deliveries.
//!
//! Why here: this is the crate's face (what the worker binary builds and runs) and the one place that holds a
//! consumer's lifetime; each stage of a delivery lives in a file of its own: `consuming.rs` (one AMQP session),
//! `gather.rs` (batches), `apply_single.rs` and `apply_batch.rs` (the transaction), `bundles.rs`, `acks.rs` and
//! `dead_letter.rs` (settling), `delivery.rs` (what a delivery's headers say). Loops beside the consumer (such as
//! [`crate::dlq::run_periodic`]) are spawned by the process that runs it.

use std::sync::Arc;

use anyhow::Context;
use hookline_core::retry::Backoff;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::consuming::consume_session;
use crate::context::Ctx;
pub use crate::context::{metric, ConsumerSettings};
use crate::splitter::Splitter;
use hookline_core::handler::Handler;

/// A consumer: consumes its queue and applies each event once through its handler.
pub struct Consumer<H: Handler> {
    pool: PgPool,
    handler: Arc<H>,
    settings: ConsumerSettings,
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
