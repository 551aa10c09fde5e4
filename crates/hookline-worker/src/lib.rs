//! `hookline-worker`: the second stage of hookline, as a composition — the consumer engine
//! ([`hookline_consumer`]) with the payments effect ([`hookline_payments::PaymentsHandler`]), beside the
//! supervised loops that run in the same process: dead-letter reconciliation ([`hookline_consumer::dlq`]), the
//! periodic purge ([`hookline_ops::purge_loop`]), reconciliation and the outbound dispatcher
//! ([`hookline_gateways`], composed with billing's dunning by [`hookline_billing`]), and the way facts leave ([`hookline_delivery::spawn`]). `/healthz` and `/metrics`
//! are [`health`].
//!
//! It must never: hold a rule of its own — every rule lives in the crate that owns it; this crate only wires them.

pub mod config;
pub mod health;

pub use config::WorkerConfig;

/// Re-exported for the tests and tools that start a worker: the signal handling every process shares.
pub use hookline_core::supervisor::shutdown_signal;

use hookline_consumer::{Consumer, ConsumerSettings};
use hookline_core::config::{Env, ProcessEnv};
use hookline_core::db::{self, PoolSettings};
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use hookline_core::{Config, ConfigError};
use hookline_delivery::{DeliveryConfig, DestinationConfig};
use hookline_gateways::config::{DispatcherConfig, ReconcileConfig};
use hookline_gateways::{dispatch, reconcile};
use hookline_ops::config::RetentionConfig;
use hookline_payments::PaymentsHandler;

/// The sections of the file the worker process composes beyond core's, each parsed and validated by the crate
/// that owns it: built once at start-up, so that a bad section stops the process before anything runs, naming
/// the key (as `Config::load` did when core validated every section).
#[derive(Debug, Clone)]
pub struct Sections {
    /// `[worker]` (this crate).
    pub worker: WorkerConfig,
    /// `[retention]` (`hookline-ops`): the periodic purge.
    pub retention: RetentionConfig,
    /// `[delivery]` (`hookline-delivery`): whether facts leave from this process, and how.
    pub delivery: DeliveryConfig,
    /// `[[destinations]]` (`hookline-delivery`).
    pub destinations: Vec<DestinationConfig>,
    /// `[dispatcher]` (`hookline-gateways`): whether the dispatcher runs here, and how.
    pub dispatcher: DispatcherConfig,
    /// `[reconcile]` (`hookline-gateways`): the periodic reconciliation.
    pub reconcile: ReconcileConfig,
    /// `[billing]` (`hookline-billing`): the billing scheduler.
    pub billing: hookline_billing::BillingConfig,
}

impl Sections {
    /// Parses and validates every section the worker composes; `env` resolves `env:NAME` references.
    pub fn from_config(config: &Config, env: &dyn Env) -> Result<Sections, ConfigError> {
        Ok(Sections {
            worker: WorkerConfig::from_config(config)?,
            retention: RetentionConfig::from_config(config)?,
            delivery: DeliveryConfig::from_config(config)?,
            destinations: hookline_delivery::destinations_from_config(config, env)?,
            dispatcher: DispatcherConfig::from_config(config, env)?,
            reconcile: ReconcileConfig::from_config(config)?,
            billing: hookline_billing::BillingConfig::from_config(config)?,
        })
    }
}

/// Builds the payments consumer from the shared configuration: it consumes the topology's payments queue.
pub fn payments_consumer(config: &Config) -> anyhow::Result<Consumer<PaymentsHandler>> {
    let settings = WorkerConfig::from_config(config)?;
    let pool = db::lazy_pool(
        &config.database_url,
        &PoolSettings::worker(settings.db_max_connections),
    )?;
    let topology = hookline_bus::Topology::from_config(&config.amqp);
    Ok(Consumer::new(
        pool,
        hookline_billing::payments_handler(config.providers.values()),
        ConsumerSettings {
            amqp_urls: config.amqp_urls.clone(),
            queue: topology.payments_queue.clone(),
            topology,
            prefetch: settings.prefetch,
            concurrency: settings.concurrency,
            batch_max: settings.batch_max,
            batch_linger: settings.batch_linger,
        },
    ))
}

/// Runs the worker process: the consumer, the supervised background loops (dead-letter reconciliation, periodic
/// purge, reconciliation, the outbound dispatcher, the way facts leave) and, when `worker.listen` is set,
/// `/healthz` and `/metrics`. Returns when SIGTERM/SIGINT asked it to stop (after in-flight work finished), or
/// with an error when the consumer failed or a supervised loop was declared dead — so the process exits non-zero
/// and its supervisor restarts it.
pub async fn run(config: Config) -> anyhow::Result<()> {
    // Every section this process composes, validated before anything starts.
    let sections = Sections::from_config(&config, &ProcessEnv)?;
    // The recorder first: supervised loops report their state as soon as they start.
    hookline_core::telemetry::metrics_handle();
    let consumer = payments_consumer(&config)?;
    let cancel = shutdown_signal();
    let liveness = Liveness::new();
    let supervisor = Supervisor::new(liveness.clone(), RestartPolicy::default());
    // Keep the dead-letter table in step with the DLQ (messages dead-lettered by the delivery limit after
    // crashes carry no recorded reason otherwise).
    let dlq_reconcile = supervisor.spawn(
        "dlq_reconcile",
        &cancel,
        (
            consumer.pool().clone(),
            consumer.settings().amqp_urls.clone(),
            consumer.settings().topology.clone(),
            consumer.name(),
        ),
        |(pool, amqp_urls, topology, name), cancel| {
            hookline_consumer::dlq::run_periodic(pool, amqp_urls, topology, name, cancel)
        },
    );
    // Retention runs beside the consumer when [retention] auto_purge_older_than_days is set.
    let purge_pool = db::lazy_pool(&config.database_url, &PoolSettings::cli())?;
    let purge = supervisor.spawn(
        "purge",
        &cancel,
        (purge_pool, sections.retention.clone()),
        |(pool, retention), cancel| async move {
            hookline_ops::purge_loop::run_periodic(pool, retention, cancel).await;
            Ok(())
        },
    );
    let reconcile = supervisor.spawn(
        "reconcile",
        &cancel,
        (
            consumer.pool().clone(),
            config.clone(),
            sections.reconcile.clone(),
        ),
        |(pool, config, settings), cancel| reconcile::run_periodic(pool, config, settings, cancel),
    );
    // Facts fan out to the destinations in the table when they are recorded (domain_events::record): the table
    // must match the configuration before the consumer or the dispatcher records the first fact, or a
    // destination declared in this start would miss it.
    if sections.delivery.enabled {
        sync_destinations_before_start(consumer.pool(), &sections.destinations, &cancel).await;
    }
    // The outbound dispatcher (charges and refunds to the gateways) runs beside the consumer unless
    // [dispatcher] enabled = false.
    let dispatcher = sections.dispatcher.enabled.then(|| {
        let dispatcher = hookline_billing::dispatcher(
            consumer.pool().clone(),
            &config,
            dispatch::DispatchSettings::from_config(&sections.dispatcher),
        );
        supervisor.spawn("dispatcher", &cancel, dispatcher, |d, cancel| async move {
            d.run(cancel).await
        })
    });
    // The billing scheduler: due periods and due dunning retries, every [billing] schedule_secs, unless
    // [billing] enabled = false.
    let billing = sections.billing.enabled.then(|| {
        supervisor.spawn(
            "billing",
            &cancel,
            (
                consumer.pool().clone(),
                hookline_billing::providers(&config),
                sections.billing.schedule,
            ),
            |(pool, providers, every), cancel| {
                hookline_billing::schedule::run_periodic(pool, providers, every, cancel)
            },
        )
    });
    // Domain events out (the RabbitMQ domain relay and the HTTP destinations) unless [delivery] enabled = false.
    let delivery = if sections.delivery.enabled {
        hookline_delivery::spawn(&config, consumer.pool().clone(), &supervisor, &cancel)?
    } else {
        Vec::new()
    };
    let server = match sections.worker.listen {
        Some(addr) => Some(health::serve(
            addr,
            consumer.pool().clone(),
            liveness.clone(),
        )?),
        None => None,
    };
    let consuming = consumer.run(cancel.clone());
    let result = tokio::select! {
        r = consuming => r,
        _ = liveness.fatal() => {
            cancel.cancel();
            Err(anyhow::anyhow!(
                "stopped because supervised task(s) {} died",
                liveness.dead_tasks().join(", ")
            ))
        }
    };
    cancel.cancel();
    dlq_reconcile.await.ok();
    purge.await.ok();
    reconcile.await.ok();
    if let Some(dispatcher) = dispatcher {
        dispatcher.await.ok();
    }
    if let Some(billing) = billing {
        billing.await.ok();
    }
    for task in delivery {
        task.await.ok();
    }
    if let Some(server) = server {
        server.stop(true).await;
    }
    result
}

/// Writes `[[destinations]]` to the database before anything records a fact; the database may not be up yet
/// (the worker starts anyway and waits for it, as its consumer does): retried with backoff until it succeeds or
/// the process is asked to stop.
async fn sync_destinations_before_start(
    pool: &sqlx::PgPool,
    destinations: &[DestinationConfig],
    cancel: &tokio_util::sync::CancellationToken,
) {
    let mut attempt = 0;
    loop {
        match hookline_delivery::deliver::sync_destinations(pool, destinations).await {
            Ok(()) => return,
            Err(e) => {
                attempt += 1;
                let wait = hookline_core::retry::jittered_backoff(
                    std::time::Duration::from_millis(200),
                    std::time::Duration::from_secs(10),
                    attempt,
                    attempt as u64,
                );
                tracing::warn!(error.message = %e, attempt, "cannot write [[destinations]] yet; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = cancel.cancelled() => return,
                }
            }
        }
    }
}
