//! Liveness, readiness and metrics.

use actix_web::{web, HttpResponse};

use crate::AppState;

/// Liveness: the process and every supervised loop in it (relay, batch writer) are alive. Never touches the
/// database, so it answers during an outage: an outage is what readiness is for, and restarting the process
/// would not cure it. A loop declared dead (it kept failing after restarts) makes this 503, so the
/// orchestrator restarts the process — which is also shutting itself down with an error.
pub async fn healthz(state: web::Data<AppState>) -> HttpResponse {
    match state.liveness.health() {
        (true, body) => HttpResponse::Ok().json(body),
        (false, body) => HttpResponse::ServiceUnavailable().json(body),
    }
}

/// Ready to accept webhooks: the database answers within the edge's budget.
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let check = tokio::time::timeout(
        state.edge.db_timeout,
        sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&state.pool),
    )
    .await;
    match check {
        Ok(Ok(_)) => {
            HttpResponse::Ok().json(serde_json::json!({ "status": "ready", "database": "ok" }))
        }
        Ok(Err(e)) => {
            tracing::warn!(error.message = %e, "readiness check failed");
            HttpResponse::ServiceUnavailable()
                .json(serde_json::json!({ "status": "not_ready", "database": "unreachable" }))
        }
        Err(_) => HttpResponse::ServiceUnavailable()
            .json(serde_json::json!({ "status": "not_ready", "database": "timeout" })),
    }
}

/// Prometheus text exposition. The outbox gauges are read from the table at scrape time (within the edge's
/// database budget), so they tell the truth even when the relay is dead or runs in another process; when the
/// database does not answer they keep their last value and readiness reports the outage.
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    match tokio::time::timeout(
        state.edge.db_timeout,
        hookline_core::event_outbox::backlog(&state.pool),
    )
    .await
    {
        Ok(Ok(backlog)) => backlog.report(),
        Ok(Err(e)) => {
            tracing::warn!(error.message = %e, "cannot read the outbox backlog for /metrics")
        }
        Err(_) => tracing::warn!("reading the outbox backlog for /metrics timed out"),
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}
