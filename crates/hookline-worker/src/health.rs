//! The worker's `/healthz` and `/metrics` (served when `worker.listen` is set).
//!
//! `/healthz` answers from the supervisor's [`Liveness`]: 503 once a supervised loop is dead (the process is
//! then stopping with an error). `/metrics` reads `hookline_dead_letters_unresolved` from the table at scrape
//! time, so an alert on growing dead letters sees what the database holds, not what this process remembers.

use std::net::SocketAddr;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpResponse, HttpServer};
use anyhow::Context;
use hookline_core::supervisor::Liveness;
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;

/// Gauge: unresolved dead letters (all consumers), read from `dead_letters` at scrape time.
pub const DEAD_LETTERS_UNRESOLVED: &str = "hookline_dead_letters_unresolved";

/// How long a scrape may wait for the database.
const SCRAPE_DB_BUDGET: Duration = Duration::from_secs(2);

struct State {
    pool: PgPool,
    liveness: Liveness,
    metrics: PrometheusHandle,
}

/// Binds `addr` and serves in the background; stop it with the returned handle.
pub fn serve(addr: SocketAddr, pool: PgPool, liveness: Liveness) -> anyhow::Result<ServerHandle> {
    let state = web::Data::new(State {
        pool,
        liveness,
        metrics: hookline_core::telemetry::metrics_handle(),
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .route("/healthz", web::get().to(healthz))
            .route("/metrics", web::get().to(metrics))
    })
    .workers(1)
    .disable_signals()
    .bind(addr)
    .with_context(|| format!("cannot listen on {addr} (worker.listen)"))?
    .run();
    let handle = server.handle();
    tokio::spawn(async move {
        if let Err(e) = server.await {
            tracing::error!(error.message = %e, "worker health server stopped");
        }
    });
    tracing::info!(listen = %addr, "worker serving /healthz and /metrics");
    Ok(handle)
}

async fn healthz(state: web::Data<State>) -> HttpResponse {
    match state.liveness.health() {
        (true, body) => HttpResponse::Ok().json(body),
        (false, body) => HttpResponse::ServiceUnavailable().json(body),
    }
}

async fn metrics(state: web::Data<State>) -> HttpResponse {
    match tokio::time::timeout(
        SCRAPE_DB_BUDGET,
        hookline_core::dead_letters::unresolved_count(&state.pool),
    )
    .await
    {
        Ok(Ok(n)) => metrics::gauge!(DEAD_LETTERS_UNRESOLVED).set(n as f64),
        Ok(Err(e)) => tracing::warn!(error.message = %e, "cannot count dead letters for /metrics"),
        Err(_) => tracing::warn!("counting dead letters for /metrics timed out"),
    }
    match tokio::time::timeout(SCRAPE_DB_BUDGET, delivery_gauges(&state.pool)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error.message = %e, "cannot read delivery figures for /metrics")
        }
        Err(_) => tracing::warn!("reading delivery figures for /metrics timed out"),
    }
    // What billing has due, read now: a scheduler that stopped (or is turned off) is seen in these, not hidden
    // behind the figures of its last round.
    match tokio::time::timeout(
        SCRAPE_DB_BUDGET,
        hookline_billing::schedule::publish_gauges(&state.pool, time::OffsetDateTime::now_utc()),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error.message = %e, "cannot read billing figures for /metrics")
        }
        Err(_) => tracing::warn!("reading billing figures for /metrics timed out"),
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// Per-destination backlog, oldest pending age, dead deliveries and disabled state, and the domain relay's
/// backlog, read from the database at scrape time.
async fn delivery_gauges(pool: &PgPool) -> Result<(), sqlx::Error> {
    use hookline_delivery::deliver::metric;
    for d in hookline_delivery::destinations::status(pool).await? {
        // The merchants' own endpoints (made through the API) are theirs to watch (their deliveries are listed by
        // the API): the operator's alerts and these labels cover the configured destinations only.
        if d.removed_at.is_some() || d.client.is_some() {
            continue;
        }
        let name = d.name;
        metrics::gauge!(metric::BACKLOG, "destination" => name.clone()).set(d.pending as f64);
        metrics::gauge!(metric::OLDEST_SECONDS, "destination" => name.clone())
            .set(d.oldest_pending_secs);
        metrics::gauge!(metric::DEAD, "destination" => name.clone()).set(d.dead as f64);
        metrics::gauge!(metric::DISABLED, "destination" => name).set(if d.disabled_at.is_some() {
            1.0
        } else {
            0.0
        });
    }
    let (unpublished, oldest) = hookline_core::domain_events::unpublished_backlog(pool).await?;
    metrics::gauge!(metric::DOMAIN_UNPUBLISHED).set(unpublished as f64);
    metrics::gauge!(metric::DOMAIN_OLDEST_SECONDS).set(oldest);
    Ok(())
}
