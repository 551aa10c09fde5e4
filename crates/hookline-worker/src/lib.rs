//! `hookline-worker`: the second stage of hookline.
//!
//! Consumes event references from RabbitMQ with manual acks and, for each, runs ONE database transaction that
//! inserts the processed marker first and then applies the effects ([`process::process_event`]); it acks only
//! after the commit. A redelivery finds the marker and changes nothing.

pub mod acks;
pub mod consumer;
pub mod deliver;
pub mod dispatch;
pub mod handler;
pub mod health;
pub mod http;
pub mod payments;
pub mod process;
pub mod reconcile;
pub mod retention;

pub use consumer::{Worker, WorkerSettings};
pub use handler::{
    reason_text, BatchError, EventRef, HandleError, Handler, Outcome, OutcomeKind, Prepared,
    StoredEvent,
};
/// Re-exported for the tests and tools that start a worker: the signal handling every process shares.
pub use hookline_core::supervisor::shutdown_signal;
pub use payments::PaymentsHandler;
pub use process::{
    process_batch, process_batch_prepared, process_event, process_prepared, ProcessError, Processed,
};

use hookline_core::db::{self, PoolSettings};
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use hookline_core::Config;

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
            amqp_urls: config.amqp_urls.clone(),
            topology: hookline_bus::Topology::from_config(&config.amqp),
            prefetch: config.worker.prefetch,
            concurrency: config.worker.concurrency,
            batch_max: config.worker.batch_max,
            batch_linger: config.worker.batch_linger,
        },
    ))
}

/// Runs the worker process: the consumer, the supervised background loops (dead-letter reconciliation,
/// periodic purge) and, when `worker.listen` is set, `/healthz` and `/metrics`. Returns when SIGTERM/SIGINT
/// asked it to stop (after in-flight work finished), or with an error when the consumer failed or a supervised
/// loop was declared dead — so the process exits non-zero and its supervisor restarts it.
pub async fn run(config: Config) -> anyhow::Result<()> {
    // The recorder first: supervised loops report their state as soon as they start.
    hookline_core::telemetry::metrics_handle();
    let worker = payments_worker(&config)?;
    let cancel = shutdown_signal();
    let liveness = Liveness::new();
    let supervisor = Supervisor::new(liveness.clone(), RestartPolicy::default());
    // Retention runs beside the consumer when [retention] auto_purge_older_than_days is set.
    let purge_pool = db::lazy_pool(&config.database_url, &PoolSettings::cli())?;
    let purge = {
        let (supervisor, retention, cancel) =
            (supervisor.clone(), config.retention.clone(), cancel.clone());
        tokio::spawn(async move {
            supervisor
                .run("purge", cancel.clone(), |_| {
                    let (pool, retention, cancel) =
                        (purge_pool.clone(), retention.clone(), cancel.clone());
                    async move {
                        retention::run_periodic(pool, retention, cancel).await;
                        Ok(())
                    }
                })
                .await
        })
    };
    let reconcile = {
        let (supervisor, config, cancel) = (supervisor.clone(), config.clone(), cancel.clone());
        let pool = worker.pool().clone();
        tokio::spawn(async move {
            supervisor
                .run("reconcile", cancel.clone(), |_| {
                    reconcile::run_periodic(pool.clone(), config.clone(), cancel.clone())
                })
                .await
        })
    };
    // The outbound dispatcher (charges and refunds to the gateways) runs beside the consumer unless
    // [dispatcher] enabled = false.
    let dispatcher = config.dispatcher.enabled.then(|| {
        let (supervisor, cancel) = (supervisor.clone(), cancel.clone());
        let dispatcher = dispatch::Dispatcher::from_config(
            worker.pool().clone(),
            &config,
            dispatch::DispatchSettings::from_config(&config.dispatcher),
        );
        tokio::spawn(async move {
            supervisor
                .run("dispatcher", cancel.clone(), |_| {
                    let (dispatcher, cancel) = (dispatcher.clone(), cancel.clone());
                    async move { dispatcher.run(cancel).await }
                })
                .await
        })
    });
    // Domain events out (the RabbitMQ domain relay and the HTTP destinations) unless [delivery] enabled = false.
    let delivery = if config.delivery.enabled {
        spawn_delivery(&config, worker.pool().clone(), &supervisor, &cancel)?
    } else {
        Vec::new()
    };
    let server = match config.worker.listen {
        Some(addr) => Some(health::serve(
            addr,
            worker.pool().clone(),
            liveness.clone(),
        )?),
        None => None,
    };
    let consumer = worker.run_with(cancel.clone(), supervisor);
    let result = tokio::select! {
        r = consumer => r,
        _ = liveness.fatal() => {
            cancel.cancel();
            Err(anyhow::anyhow!(
                "stopped because supervised task(s) {} died",
                liveness.dead_tasks().join(", ")
            ))
        }
    };
    cancel.cancel();
    purge.await.ok();
    reconcile.await.ok();
    if let Some(dispatcher) = dispatcher {
        dispatcher.await.ok();
    }
    for task in delivery {
        task.await.ok();
    }
    if let Some(server) = server {
        server.stop(true).await;
    }
    result
}

/// Starts, under `supervisor`, the two ways domain events leave: the domain relay (RabbitMQ `{prefix}.domain`,
/// task `domain_relay`) and the HTTP delivery to `[[destinations]]` (task `delivery`). Used by the worker and by
/// `hookline deliver`; stop them with `cancel` and await the handles.
pub fn spawn_delivery(
    config: &Config,
    pool: sqlx::PgPool,
    supervisor: &Supervisor,
    cancel: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let relay = std::sync::Arc::new(hookline_bus::domain::DomainRelay::new(
        pool.clone(),
        config.amqp_urls.clone(),
        hookline_bus::Topology::new(&config.amqp.prefix, config.amqp.delivery_limit),
        config.delivery.poll_interval,
        "hookline-domain-relay",
    ));
    let delivery = deliver::Delivery::from_config(pool, config)?;
    let relay_task = {
        let (supervisor, cancel) = (supervisor.clone(), cancel.clone());
        tokio::spawn(async move {
            supervisor
                .run(hookline_bus::domain::TASK, cancel.clone(), |_| {
                    let (relay, cancel) = (relay.clone(), cancel.clone());
                    async move { relay.run(cancel).await }
                })
                .await
        })
    };
    let delivery_task = {
        let (supervisor, cancel) = (supervisor.clone(), cancel.clone());
        tokio::spawn(async move {
            supervisor
                .run(deliver::TASK, cancel.clone(), |_| {
                    let (delivery, cancel) = (delivery.clone(), cancel.clone());
                    async move { delivery.run(cancel).await }
                })
                .await
        })
    };
    Ok(vec![relay_task, delivery_task])
}
