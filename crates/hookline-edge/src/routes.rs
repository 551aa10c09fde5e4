//! HTTP routes of the edge.

mod health;
mod webhook;

use actix_web::web;

/// Registers every route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/webhooks/{provider}", web::post().to(webhook::receive))
        .route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route("/metrics", web::get().to(health::metrics));
}
