//! Liveness, readiness and metrics.

use actix_web::{web, HttpResponse};

use crate::AppState;

/// Process is alive. Never touches the database, so it answers during an outage.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
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

/// Prometheus text exposition.
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}
