//! The middleware around the provider APIs that applies the armed faults ([`crate::faults`]) to matching requests
//! and logs every request, plus the connection hooks that let a fault close a connection without an answer.

use std::any::Any;
use std::time::{Duration, Instant};

use actix_web::dev::{Extensions, Service, ServiceRequest, ServiceResponse};
use actix_web::{web, HttpRequest, HttpResponse};
use futures::future::LocalBoxFuture;

use crate::auth;
use crate::clock;
use crate::faults::FaultAction;
use crate::mercadopago;
use crate::pagarme_v5;
use crate::reply::Reply;
use crate::settings::Scheme;
use crate::state::{RequestRecord, Shared, State};
use crate::stripe;

/// A duplicate of the connection's socket, kept so that a fault can close the connection from a handler.
#[derive(Clone)]
pub(crate) struct Connection(std::sync::Arc<std::net::TcpStream>);

/// `HttpServer::on_connect` hook: remembers each TCP connection's socket.
pub(crate) fn on_connect(connection: &dyn Any, extensions: &mut Extensions) {
    #[cfg(unix)]
    if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        use std::os::fd::AsFd;
        match tcp.as_fd().try_clone_to_owned() {
            Ok(fd) => {
                extensions.insert(Connection(std::sync::Arc::new(std::net::TcpStream::from(
                    fd,
                ))));
            }
            Err(e) => {
                tracing::warn!(error.message = %e, "cannot duplicate a connection's socket; drop faults will not close it")
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (connection, extensions);
}

/// Closes the request's connection at once (zero linger: a reset), without an answer.
pub(crate) fn abort(req: &HttpRequest) {
    match req.conn_data::<Connection>() {
        Some(Connection(socket)) => {
            let _ = socket2::SockRef::from(&**socket).set_linger(Some(Duration::ZERO));
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
        None => tracing::warn!("no socket recorded for this connection; cannot drop it"),
    }
}

/// The provider-format answer of a `status` fault.
fn status_reply(family: Option<Scheme>, status: u16, retry_after: Option<u64>) -> Reply {
    let reply = match family {
        Some(Scheme::MercadoPago) => mercadopago::errors::status(status),
        Some(Scheme::PagarmeV5) => pagarme_v5::errors::status(status),
        _ => {
            let mut error = if status == 429 {
                stripe::errors::rate_limited()
            } else {
                stripe::errors::api_error()
            };
            error.status = status;
            error.reply()
        }
    };
    match retry_after.or((status == 429).then_some(1)) {
        Some(secs) => reply.header("Retry-After", secs.to_string()),
        None => reply,
    }
}

/// The fault to apply to the request, if one is armed for it, and the scheme whose format its answer takes.
fn decide(state: &mut State, req: &ServiceRequest) -> Option<(FaultAction, Scheme)> {
    let method = req.method().as_str().to_owned();
    let path = req.path().to_owned();
    let family = auth::scheme_of(state, &path, req.headers())?;
    let provider = if state.faults.needs_provider() {
        let credential = auth::credential(req.headers());
        auth::resolve(state, family, credential.as_deref())
            .ok()
            .map(|i| state.providers[i].config.name.clone())
    } else {
        None
    };
    let State { faults, rng, .. } = state;
    faults
        .take(rng, &method, &path, provider.as_deref())
        .map(|action| (action, family))
}

fn record(
    shared: &Shared,
    req: &HttpRequest,
    status: u16,
    replayed: bool,
    fault: Option<&FaultAction>,
    started: Instant,
) {
    let key = req
        .headers()
        .get("idempotency-key")
        .or_else(|| req.headers().get("x-idempotency-key"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    shared.lock().log_request(RequestRecord {
        at_ms: clock::unix_ms(clock::now()),
        method: req.method().as_str().to_owned(),
        path: req.path().to_owned(),
        query: req.query_string().to_owned(),
        status,
        idempotency_key: key,
        replayed,
        fault: fault.map(FaultAction::name),
        latency_ms: started.elapsed().as_millis() as u64,
    });
}

/// The middleware around the provider APIs: applies armed faults and logs every request.
pub(crate) fn middleware<S>(
    req: ServiceRequest,
    service: &S,
) -> LocalBoxFuture<'static, Result<ServiceResponse, actix_web::Error>>
where
    S: Service<ServiceRequest, Response = ServiceResponse, Error = actix_web::Error>,
    S::Future: 'static,
{
    let started = Instant::now();
    let Some(shared) = req.app_data::<web::Data<Shared>>().cloned() else {
        let fut = service.call(req);
        return Box::pin(fut);
    };
    let decided = decide(&mut shared.lock(), &req);
    let family = decided.as_ref().map(|(_, scheme)| *scheme);
    let action = decided.map(|(action, _)| action);
    match action {
        Some(FaultAction::Reset) => {
            // Logged before the socket closes: a client that sees the close must find the entry.
            record(&shared, req.request(), 0, false, action.as_ref(), started);
            abort(req.request());
            let response = req.into_response(HttpResponse::InternalServerError().finish());
            Box::pin(futures::future::ready(Ok(response)))
        }
        Some(FaultAction::Status {
            status,
            retry_after_secs,
        }) => {
            record(
                &shared,
                req.request(),
                status,
                false,
                action.as_ref(),
                started,
            );
            let reply = status_reply(family, status, retry_after_secs);
            let response = req.into_response(reply.into_response());
            Box::pin(futures::future::ready(Ok(response)))
        }
        _ => {
            let fut = service.call(req);
            Box::pin(async move {
                let response = fut.await?;
                let status = response.status().as_u16();
                let replayed = response.headers().contains_key("idempotent-replayed");
                if let Some(FaultAction::Delay { delay_ms }) = &action {
                    tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                }
                // Logged before a dropped answer closes the socket: the client that sees the close
                // may ask the log at once, and must find this request in it.
                record(
                    &shared,
                    response.request(),
                    status,
                    replayed,
                    action.as_ref(),
                    started,
                );
                if let Some(FaultAction::DropResponse) = &action {
                    abort(response.request());
                }
                Ok(response)
            })
        }
    }
}
