//! The one way a hookline HTTP listener is built, so that every public port keeps the same defences: request
//! headers must arrive within `client_request_timeout` (slowloris: 408 otherwise), a closing client gets 1 s,
//! a graceful stop waits `shutdown_timeout` for in-flight requests, and actix's own signal handling is off
//! (it treats SIGINT as a forced stop; every hookline process handles SIGTERM and SIGINT as graceful itself).

use std::net::TcpListener;
use std::time::Duration;

use actix_http::{Request, Response};
use actix_service::{IntoServiceFactory, ServiceFactory};
use actix_web::body::MessageBody;
use actix_web::dev::{AppConfig, Server};
use actix_web::{Error, HttpServer};

/// How a listener treats its clients; the edge's `[edge]` settings for every listener that faces the outside.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time for a client to send the request head.
    pub client_request_timeout: Duration,
    /// Time a graceful stop waits for in-flight requests.
    pub shutdown_timeout: Duration,
    /// Worker threads; 0 keeps actix's default (one per core).
    pub workers: usize,
}

impl Limits {
    /// The `[edge]` settings, which every listener facing the outside shares (the providers' edge, the
    /// merchant API, the console).
    pub fn of_edge(edge: &crate::EdgeConfig) -> Limits {
        Limits {
            client_request_timeout: edge.client_request_timeout,
            shutdown_timeout: edge.shutdown_timeout,
            workers: edge.workers,
        }
    }
}

/// Binds `factory`'s application to `listener` with `limits`, and starts it (the returned server runs once
/// awaited or spawned; stop it through its handle).
pub fn serve<F, I, S, B>(
    factory: F,
    listener: TcpListener,
    limits: Limits,
) -> std::io::Result<Server>
where
    F: Fn() -> I + Send + Clone + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<Error> + 'static,
    S::InitError: std::fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    B: MessageBody + 'static,
{
    let mut server = HttpServer::new(factory)
        .client_request_timeout(limits.client_request_timeout)
        .client_disconnect_timeout(Duration::from_secs(1))
        .shutdown_timeout(limits.shutdown_timeout.as_secs())
        .disable_signals()
        .listen(listener)?;
    if limits.workers > 0 {
        server = server.workers(limits.workers);
    }
    Ok(server.run())
}
