//! Building and running the edge's HTTP server.

use std::collections::HashMap;
use std::net::TcpListener;

use actix_web::dev::Server;
use actix_web::{web, App};
use anyhow::Context;
use hookline_api::ApiConfig;
use hookline_bus::{Relay, RelayConfig, RelayHandle, Topology};
use hookline_core::config::{ProcessEnv, ProviderConfig};
use hookline_core::db::{self, PoolSettings};
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use hookline_core::Config;
use hookline_web::EdgeConfig;
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::routes;

/// Shared, read-only state of the request handlers.
pub struct AppState {
    /// The edge's pool (small acquire budget).
    pub pool: PgPool,
    /// Configured providers by URL name.
    pub providers: HashMap<String, ProviderConfig>,
    /// Edge settings.
    pub edge: EdgeConfig,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// Fast path to the embedded outbox relay, when it runs in this process.
    pub relay: Option<RelayHandle>,
    /// Group-commit writer for incoming events.
    pub writer: crate::writer::BatchWriter,
    /// What the supervised loops (relay, batch writer) report; `/healthz` answers from it.
    pub liveness: Liveness,
}

/// A bound, not yet running, edge server.
pub struct Application {
    port: u16,
    server: Server,
    pool: PgPool,
    relay: Option<(CancellationToken, std::thread::JoinHandle<()>)>,
    liveness: Liveness,
    server_handle: actix_web::dev::ServerHandle,
    /// The merchant API's server, when `[api]` is configured (its own listener).
    api: Option<hookline_api::ApiServer>,
}

impl Application {
    /// Binds `edge.listen` (port 0 picks a free port, which tests use) and prepares the server.
    ///
    /// The database is not contacted here: the pool connects lazily, so the edge starts and answers `/healthz`
    /// while PostgreSQL is down, and `/readyz` reports it.
    pub async fn build(config: Config) -> anyhow::Result<Application> {
        // The sections this process composes beyond core's, each validated by the crate that owns it, before
        // anything is bound or started: a bad one stops the edge naming its key.
        let edge = EdgeConfig::from_config(&config)?;
        let relay_config = RelayConfig::from_config(&config)?;
        let api_config = ApiConfig::from_config(&config, &ProcessEnv)?;
        // The recorder first: the relay thread and the writer report their state as soon as they start.
        let metrics = hookline_core::telemetry::metrics_handle();
        let pool = db::lazy_pool(
            &config.database_url,
            &PoolSettings::edge(edge.db_max_connections, edge.db_timeout),
        )?;
        let listener = TcpListener::bind(edge.listen)
            .with_context(|| format!("cannot listen on {}", edge.listen))?;
        let port = listener.local_addr()?.port();
        let liveness = Liveness::new();
        let supervisor = Supervisor::new(liveness.clone(), RestartPolicy::default());
        let (relay_handle, relay) = if relay_config.embedded {
            let (handle, running) = start_embedded_relay(&config, relay_config, &supervisor)?;
            (Some(handle), Some(running))
        } else {
            (None, None)
        };
        let providers: HashMap<String, ProviderConfig> = config
            .providers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // The merchant API: a second listener with its own routes; the providers' listener never serves it.
        let api = match &api_config {
            Some(api) => Some(hookline_api::start(
                api,
                &edge,
                &config.database_url,
                providers.clone(),
                &supervisor,
            )?),
            None => None,
        };
        // The operator console is NOT served here, even when `[console]` is configured: it is its own process
        // (`hookline console serve`), so an operator-facing flood can never slow a webhook ack.
        let state = web::Data::new(AppState {
            pool: pool.clone(),
            providers,
            edge: edge.clone(),
            metrics,
            relay: relay_handle,
            writer: crate::writer::BatchWriter::start(
                pool.clone(),
                edge.batch_max,
                edge.batch_writers,
                supervisor.clone(),
            ),
            liveness: liveness.clone(),
        });
        // SIGTERM and SIGINT are both graceful here (below); the builder turns actix's own handling off.
        let server = hookline_web::serve(
            move || {
                App::new()
                    .app_data(state.clone())
                    .configure(routes::configure)
            },
            listener,
            hookline_web::Limits::of_edge(&edge),
        )?;
        let handle = server.handle();
        let api_handle = api.as_ref().map(|a| a.handle.clone());
        tokio::spawn(async move {
            hookline_core::supervisor::wait_for_shutdown_signal().await;
            tracing::info!("shutdown requested; finishing in-flight requests");
            futures::future::join(handle.stop(true), stop_api(api_handle)).await;
        });
        tracing::info!(
            listen = %edge.listen,
            port,
            providers = ?config.providers.keys().collect::<Vec<_>>(),
            "edge listening"
        );
        Ok(Application {
            port,
            server_handle: server.handle(),
            server,
            pool,
            relay,
            liveness,
            api,
        })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The merchant API's bound port, when `[api]` is configured.
    pub fn api_port(&self) -> Option<u16> {
        self.api.as_ref().map(|a| a.port)
    }

    /// Serves until SIGTERM/SIGINT (actix stops accepting, then lets in-flight requests finish within
    /// `edge.shutdown_timeout`), then closes the pool.
    ///
    /// When a supervised loop is declared dead, the server is stopped the same graceful way and this returns an
    /// error naming the loop, so `main` exits non-zero and the process supervisor restarts the edge.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let liveness = self.liveness.clone();
        let handle = self.server_handle.clone();
        let api_handle = self.api.as_ref().map(|a| a.handle.clone());
        let watchdog_api = api_handle.clone();
        let watchdog = tokio::spawn(async move {
            liveness.fatal().await;
            tracing::error!(dead_tasks = ?liveness.dead_tasks(), "a supervised task is dead; stopping the edge");
            futures::future::join(handle.stop(true), stop_api(watchdog_api)).await;
        });
        // Both listeners live and stop together: when one server ends, the other is stopped the same way.
        let main_handle = self.server_handle.clone();
        let main = async {
            let r = self.server.await.context("HTTP server failed");
            stop_api(api_handle).await;
            r
        };
        let api = async {
            match self.api {
                Some(api) => {
                    let r = api.server.await.context("API server failed");
                    api.prune.cancel();
                    main_handle.stop(true).await;
                    r
                }
                None => Ok(()),
            }
        };
        let (main_result, api_result) = futures::future::join(main, api).await;
        let mut result = main_result.and(api_result);
        watchdog.abort();
        let dead = self.liveness.dead_tasks();
        if result.is_ok() && !dead.is_empty() {
            result = Err(anyhow::anyhow!(
                "stopped because supervised task(s) {} died",
                dead.join(", ")
            ));
        }
        // In-flight requests are done; what the relay has not published yet stays in the outbox for the next
        // relay to sweep.
        if let Some((cancel, thread)) = self.relay {
            cancel.cancel();
            tokio::task::spawn_blocking(move || thread.join())
                .await
                .ok();
        }
        self.pool.close().await;
        tracing::info!("edge stopped");
        result
    }
}

/// Stops the API server gracefully, if there is one.
async fn stop_api(handle: Option<actix_web::dev::ServerHandle>) {
    if let Some(handle) = handle {
        handle.stop(true).await;
    }
}

/// The relay's handle (the fast path from the batch writer) and its stop token and thread.
type EmbeddedRelay = (
    RelayHandle,
    (CancellationToken, std::thread::JoinHandle<()>),
);

/// Starts the embedded relay on its own thread and runtime: whatever it waits on (a blocked broker, a slow
/// confirm) must never stall the runtime that serves requests and runs the batch writer. It runs supervised: a
/// panic is contained and restarted; a relay that cannot recover fails liveness and stops the process — never a
/// live edge with a dead relay.
fn start_embedded_relay(
    config: &Config,
    relay_config: RelayConfig,
    supervisor: &Supervisor,
) -> anyhow::Result<EmbeddedRelay> {
    let relay_pool = db::lazy_pool(&config.database_url, &PoolSettings::relay())?;
    let relay = Relay::new(
        relay_pool,
        config.amqp_urls.clone(),
        Topology::from_config(&config.amqp),
        relay_config,
        "hookline-edge-relay",
    );
    let (handle, inbox) = hookline_bus::relay::fast_path();
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    let relay_supervisor = supervisor.clone();
    let thread = std::thread::Builder::new()
        .name("hookline-relay".into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(relay.run(Some(inbox), token, &relay_supervisor)),
                Err(e) => {
                    tracing::error!(error.message = %e, "cannot start the relay runtime");
                    relay_supervisor
                        .liveness()
                        .declare_dead(hookline_bus::relay::TASK);
                }
            }
        })
        .context("start the relay thread")?;
    Ok((handle, (cancel, thread)))
}
