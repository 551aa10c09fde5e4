//! `hookline-worker`: the second stage of hookline.
//!
//! Consumes event references from RabbitMQ with manual acks and, for each, runs ONE database transaction that
//! inserts the processed marker first and then applies the effects ([`process::process_event`]); it acks only
//! after the commit. A redelivery finds the marker and changes nothing.

pub mod consumer;
pub mod dlq;
pub mod handler;
pub mod payments;
pub mod process;
pub mod retention;

pub use consumer::{Worker, WorkerSettings};
pub use handler::{HandleError, Handler, Outcome, OutcomeKind, StoredEvent};
pub use payments::PaymentsHandler;
pub use process::{process_batch, process_event, ProcessError, Processed};

use hookline_core::db::{self, PoolSettings};
use hookline_core::Config;
use tokio_util::sync::CancellationToken;

/// Builds the payments worker from the shared configuration.
pub fn payments_worker(config: &Config) -> anyhow::Result<Worker<PaymentsHandler>> {
    let pool = db::lazy_pool(
        &config.database_url,
        &PoolSettings::worker(config.worker.db_max_connections),
    )?;
    Ok(Worker::new(
        pool,
        PaymentsHandler::new(config.providers.values()),
        WorkerSettings {
            amqp_url: config.amqp_url.clone(),
            topology: hookline_bus::Topology::new(&config.amqp.prefix, config.amqp.delivery_limit),
            prefetch: config.worker.prefetch,
            concurrency: config.worker.concurrency,
            batch_max: config.worker.batch_max,
        },
    ))
}

/// A token cancelled by SIGTERM or SIGINT (Ctrl-C).
pub fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("install SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c().await.ok();
        tracing::info!("shutdown requested; finishing in-flight work");
        t.cancel();
    });
    token
}
