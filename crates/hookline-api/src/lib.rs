//! The merchant-facing API, served on its own listener (`[api] listen`), never on the providers' one:
//!
//! * `POST /v1/payment_intents` — create a payment intent with what its gateway needs to charge (the provider
//!   object, [`params`]) and, in the same transaction, its outbound charge; with `"confirm": false` it waits
//!   (`requires_confirmation`) for
//! * `POST /v1/payment_intents/{id}/confirm` — the checkout's submit: queue the charge once, however many
//!   times it is confirmed (a second confirm answers the intent's current state);
//! * `GET /v1/payment_intents/{id}` — read one;
//! * `POST /v1/payment_intents/{id}/refunds` — request a refund, never beyond what was captured;
//! * `GET /v1/payment_intents` (the list), `POST …/{id}/cancel`, `POST …/{id}/capture` — the intent's lifecycle;
//! * `POST /v1/subscriptions`, `GET /v1/subscriptions`, `GET|POST /v1/subscriptions/{id}`,
//!   `POST /v1/subscriptions/{id}/cancel` — subscriptions charged every cycle with a saved method
//!   ([`subscriptions`]; the rules are `hookline_billing::manage`'s, the CLI's too);
//! * `GET /v1/events`, `GET /v1/events/{id}` — the facts the client may see ([`events`]);
//! * `/v1/webhook_endpoints…`, `POST /v1/events/{id}/resend` — the endpoints the client manages ([`endpoints`]);
//! * `GET /v1/openapi.json` — the OpenAPI 3.1 document of all of it, without a key ([`openapi`]).
//!
//! Every request carries `Authorization: Bearer KEY`, a key of one `[[api.clients]]` entry (or of the legacy
//! `[api] keys`, the client `default`); the request acts as that client's NAME: it sees and refunds only that
//! client's intents (another's is 404, as if it did not exist). Creates and refunds carry an `Idempotency-Key`
//! whose first response is stored under (client name, key) and replayed (see [`idempotency`]); a confirm may
//! (it is idempotent by the intent's status). An intent's `order_reference` allows one live intent per order
//! and client (409 `order_reference_in_use` names it), whatever keys a front end sends. Every path id, header
//! and JSON string goes through [`hookline_core::input`] before SQL. Errors follow [`error::ApiError`].

mod auth;
pub mod config;
mod endpoints;
mod error;
mod events;
mod idempotency;
mod intents;
mod list;
pub mod openapi;
mod operation;
mod params;
mod schema;
mod subscription_view;
mod subscriptions;
mod webhook_view;

use std::collections::HashMap;
use std::future::Future;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use actix_web::dev::{Server, ServerHandle};
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, ResponseError};
use anyhow::Context;
use bytes::BytesMut;
use hookline_core::config::ProviderConfig;
use hookline_core::db::{self, PoolSettings};
use hookline_core::supervisor::Supervisor;
use hookline_web::EdgeConfig;
use secrecy::SecretString;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub use config::{ApiClient, ApiConfig, LEGACY_API_CLIENT, MAX_API_CLIENT_NAME_BYTES};
pub use error::ApiError;
use hookline_web::body::BodyError;

/// Metric names (fixed).
pub mod metric {
    /// Counter: API requests by `route` and `outcome` (`created`, `ok`, `replayed` or an error code).
    pub const REQUESTS: &str = "hookline_api_requests_total";
    /// Histogram: seconds from request start to the answer, by `route` and `outcome`.
    pub const SECONDS: &str = "hookline_api_seconds";
    /// Counter: expired idempotency keys deleted.
    pub const KEYS_PRUNED: &str = "hookline_api_idempotency_keys_pruned_total";
    /// Counter: intents expired (nobody confirmed or completed them within `api.intent_expiry_secs`): canceled, or their
    /// cancel asked of the gateway.
    pub const INTENTS_EXPIRED: &str = "hookline_api_intents_expired_total";
}

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Name of the supervised loop that prunes expired idempotency keys.
pub const PRUNE_TASK: &str = "api_idempotency_prune";
/// Name of the supervised loop that cancels the intents nobody confirmed in time.
pub const EXPIRY_TASK: &str = "api_intent_expiry";

/// Shared, read-only state of the API handlers.
pub struct ApiState {
    pool: PgPool,
    keys: auth::Keys,
    providers: HashMap<String, ProviderConfig>,
    window: Duration,
    db_timeout: Duration,
    body_read_timeout: Duration,
    /// How long a cancel or capture waits for the gateway's answer (`api.gateway_wait_ms`).
    gateway_wait: Duration,
    /// `[api] allow_private_webhook_urls`: webhook endpoints may point at non-public addresses.
    allow_private_webhook_urls: bool,
}

impl ApiState {
    /// A connection of the API's pool for a read; a database that cannot give one is 503 (retry).
    async fn conn(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, ApiError> {
        self.pool
            .acquire()
            .await
            .map_err(|e| ApiError::database(e, "acquire a connection"))
    }

    /// Bounds the database part of a request: past the budget the client gets 503 and retries (with the same
    /// idempotency key, a retry after a commit we could not report is a replay).
    async fn within_budget<T>(
        &self,
        work: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        // Acquire, the key's lock wait and the statements each have their own bound; this caps the sum.
        let budget = self.db_timeout * 3 + idempotency::KEY_LOCK_TIMEOUT;
        tokio::time::timeout(budget, work).await.map_err(|_| {
            ApiError::Unavailable(anyhow::anyhow!("the request took longer than {budget:?}"))
        })?
    }
}

/// A response to send (and, for writes, to store on the idempotency key).
pub struct Reply {
    status: StatusCode,
    body: Vec<u8>,
    replayed: bool,
}

impl Reply {
    fn json(status: StatusCode, value: &impl serde::Serialize) -> Result<Reply, ApiError> {
        Ok(Reply {
            status,
            body: serde_json::to_vec(value).context("serialize the response")?,
            replayed: false,
        })
    }
}

/// Route label of the metrics (bounded).
#[derive(Clone, Copy)]
enum Route {
    CreateIntent,
    ConfirmIntent,
    CancelIntent,
    /// `POST /v1/payment_intents/{id}/capture`.
    CaptureIntent,
    GetIntent,
    ListIntents,
    CreateRefund,
    ListEvents,
    GetEvent,
    Unknown,
    CreateWebhookEndpoint,
    GetWebhookEndpoint,
    ListWebhookEndpoints,
    UpdateWebhookEndpoint,
    DeleteWebhookEndpoint,
    RotateWebhookEndpointSecret,
    ListWebhookDeliveries,
    ResendEvent,
    CreateSubscription,
    GetSubscription,
    ListSubscriptions,
    UpdateSubscription,
    CancelSubscription,
}

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::CreateIntent => "create_payment_intent",
            Route::ConfirmIntent => "confirm_payment_intent",
            Route::CancelIntent => "cancel_payment_intent",
            Route::CaptureIntent => "capture_payment_intent",
            Route::GetIntent => "get_payment_intent",
            Route::ListIntents => "list_payment_intents",
            Route::CreateRefund => "create_refund",
            Route::ListEvents => "list_events",
            Route::GetEvent => "get_event",
            Route::Unknown => "unknown",
            Route::CreateWebhookEndpoint => "create_webhook_endpoint",
            Route::GetWebhookEndpoint => "get_webhook_endpoint",
            Route::ListWebhookEndpoints => "list_webhook_endpoints",
            Route::UpdateWebhookEndpoint => "update_webhook_endpoint",
            Route::DeleteWebhookEndpoint => "delete_webhook_endpoint",
            Route::RotateWebhookEndpointSecret => "rotate_webhook_endpoint_secret",
            Route::ListWebhookDeliveries => "list_webhook_deliveries",
            Route::ResendEvent => "resend_event",
            Route::CreateSubscription => "create_subscription",
            Route::GetSubscription => "get_subscription",
            Route::ListSubscriptions => "list_subscriptions",
            Route::UpdateSubscription => "update_subscription",
            Route::CancelSubscription => "cancel_subscription",
        }
    }
}

/// Runs a handler's work, records its metrics and log line, and turns its result into the response.
async fn serve(route: Route, work: impl Future<Output = Result<Reply, ApiError>>) -> HttpResponse {
    let started = Instant::now();
    let result = work.await;
    let outcome = match &result {
        Ok(r) if r.replayed => "replayed",
        Ok(r) if r.status == StatusCode::CREATED => "created",
        Ok(_) => "ok",
        Err(e) => e.code(),
    };
    metrics::counter!(metric::REQUESTS, "route" => route.label(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!(metric::SECONDS, "route" => route.label(), "outcome" => outcome)
        .record(started.elapsed().as_secs_f64());
    match result {
        Ok(reply) => {
            let mut res = HttpResponse::build(reply.status);
            res.content_type("application/json");
            if reply.replayed {
                res.insert_header(("Idempotent-Replayed", "true"));
            }
            res.body(reply.body)
        }
        Err(e) => {
            if e.is_internal() {
                // The cause chain, escaped (`?`) and bounded; never a body or a key.
                tracing::error!(
                    route = route.label(),
                    error.code = e.code(),
                    error.cause_chain = ?hookline_core::input::log_text(&format!("{e:?}")),
                    "API request failed"
                );
            } else {
                tracing::info!(
                    route = route.label(),
                    error.code = e.code(),
                    "API request refused"
                );
            }
            e.error_response()
        }
    }
}

/// Unknown routes: still authenticated first (an unauthenticated caller learns nothing about the routes).
async fn not_found(req: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    serve(Route::Unknown, async {
        state.keys.authenticate(&req)?;
        Err(ApiError::NotFound)
    })
    .await
}

/// An object's id from a path or a body: one no object can have (empty, longer than `max` bytes) is `missing`
/// (404, as an id of another client's); a NUL or a control character is 400 naming `field`
/// ([`hookline_core::input::line`]). Every id the API looks up goes through here before SQL.
pub(crate) fn object_id(
    field: &'static str,
    id: &str,
    max: usize,
    missing: ApiError,
) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > max {
        return Err(missing);
    }
    hookline_core::input::line(field, id, max)?;
    Ok(())
}

/// Reads the body, refusing to buffer past [`MAX_BODY_BYTES`] and to wait past `edge.body_read_timeout`.
async fn read_body(
    req: &HttpRequest,
    payload: web::Payload,
    state: &ApiState,
) -> Result<BytesMut, ApiError> {
    hookline_web::body::read_bounded(req, payload, MAX_BODY_BYTES, state.body_read_timeout)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge { limit } => ApiError::PayloadTooLarge { limit },
            BodyError::Timeout(t) => ApiError::BodyTimeout(t),
            BodyError::Read(e) => ApiError::BodyRead(e),
        })
}

/// Every API request in an `api.request` span: the root of an outbound intent's trace, or the child of the
/// merchant's own span when the request carries a W3C `traceparent` (parsed and bounded; a malformed one only
/// means a new trace). The intent's queued charge is stored in this trace, so the dispatcher's attempts join it.
async fn trace_request(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    use tracing::Instrument;
    let span = tracing::info_span!(
        "api.request",
        otel.kind = "server",
        http.request.method = %req.method(),
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    let caller = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    hookline_core::telemetry::set_parent(&span, caller);
    hookline_core::telemetry::record_trace_id(&span);
    let res = next.call(req).instrument(span.clone()).await?;
    // The route's pattern (`/v1/payment_intents/{id}`), never the raw path: bounded, and no caller's text.
    if let Some(route) = res.request().match_pattern() {
        span.record("http.route", route.as_str());
    }
    span.record("http.response.status_code", res.status().as_u16());
    Ok(res)
}

/// Registers the API's routes (and nothing else: no `/webhooks`). A known path asked with a method it does not
/// take is 405 with `Allow` (after authentication, like an unknown path's 404).
pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::http::Method;
    let resource = |path: &'static str, allowed: &'static [Method]| {
        web::resource(path).default_service(web::to(
            move |req: HttpRequest, state: web::Data<ApiState>| {
                method_not_allowed(req, state, allowed)
            },
        ))
    };
    cfg.service(
        resource(openapi::PATH, &[Method::GET]).route(web::get().to(openapi::openapi_json)),
    )
    .service(
        resource("/v1/payment_intents", &[Method::GET, Method::POST])
            .route(web::post().to(intents::create))
            .route(web::get().to(list::list)),
    )
    .service(
        resource("/v1/payment_intents/{id}", &[Method::GET]).route(web::get().to(intents::get)),
    )
    .service(
        resource("/v1/payment_intents/{id}/confirm", &[Method::POST])
            .route(web::post().to(intents::confirm)),
    )
    .service(
        resource("/v1/payment_intents/{id}/cancel", &[Method::POST])
            .route(web::post().to(intents::cancel)),
    )
    .service(
        resource("/v1/payment_intents/{id}/capture", &[Method::POST])
            .route(web::post().to(intents::capture)),
    )
    .service(
        resource("/v1/payment_intents/{id}/refunds", &[Method::POST])
            .route(web::post().to(intents::refund)),
    )
    .service(
        resource("/v1/subscriptions", &[Method::GET, Method::POST])
            .route(web::post().to(subscriptions::create))
            .route(web::get().to(subscriptions::list)),
    )
    .service(
        resource("/v1/subscriptions/{id}", &[Method::GET, Method::POST])
            .route(web::get().to(subscriptions::get))
            .route(web::post().to(subscriptions::update)),
    )
    .service(
        resource("/v1/subscriptions/{id}/cancel", &[Method::POST])
            .route(web::post().to(subscriptions::cancel)),
    )
    .service(resource("/v1/events", &[Method::GET]).route(web::get().to(events::list)))
    .service(resource("/v1/events/{id}", &[Method::GET]).route(web::get().to(events::get)))
    .service(
        resource("/v1/events/{id}/resend", &[Method::POST])
            .route(web::post().to(endpoints::resend)),
    )
    .service(
        resource("/v1/webhook_endpoints", &[Method::GET, Method::POST])
            .route(web::post().to(endpoints::create))
            .route(web::get().to(endpoints::list)),
    )
    .service(
        resource(
            "/v1/webhook_endpoints/{id}",
            &[Method::GET, Method::POST, Method::DELETE],
        )
        .route(web::get().to(endpoints::get))
        .route(web::post().to(endpoints::update))
        .route(web::delete().to(endpoints::delete)),
    )
    .service(
        resource("/v1/webhook_endpoints/{id}/rotate_secret", &[Method::POST])
            .route(web::post().to(endpoints::rotate_secret)),
    )
    .service(
        resource("/v1/webhook_endpoints/{id}/deliveries", &[Method::GET])
            .route(web::get().to(endpoints::deliveries)),
    )
    .default_service(web::to(not_found));
}

/// A known path with a method it does not take: 405 naming the methods it does (`Allow`).
async fn method_not_allowed(
    req: HttpRequest,
    state: web::Data<ApiState>,
    allowed: &'static [actix_web::http::Method],
) -> HttpResponse {
    serve(Route::Unknown, async {
        // The document is public; every other path tells an unauthenticated caller nothing.
        if req.path() != openapi::PATH {
            state.keys.authenticate(&req)?;
        }
        Err(ApiError::MethodNotAllowed { allowed })
    })
    .await
}

/// The bound, not yet awaited, API server.
pub struct ApiServer {
    /// The bound port.
    pub port: u16,
    /// The running server (a future that ends when it stops).
    pub server: Server,
    /// Stops it.
    pub handle: ServerHandle,
    /// Stops the key pruning loop.
    pub prune: CancellationToken,
}

/// Binds `[api] listen` and starts the API server on its own pool (API traffic never takes the connections
/// the webhook path needs), plus the supervised loop that prunes expired idempotency keys.
pub fn start(
    api: &ApiConfig,
    edge: &EdgeConfig,
    database_url: &SecretString,
    providers: HashMap<String, ProviderConfig>,
    supervisor: &Supervisor,
) -> anyhow::Result<ApiServer> {
    let pool = db::lazy_pool(
        database_url,
        &PoolSettings {
            application_name: "hookline-api",
            ..PoolSettings::edge(edge.db_max_connections, edge.db_timeout)
        },
    )?;
    let listener = TcpListener::bind(api.listen)
        .with_context(|| format!("cannot listen on {} (api.listen)", api.listen))?;
    let port = listener.local_addr()?.port();
    let keys = auth::Keys::new(&api.clients);
    // The endpoints' `all_events` follow the configuration (refreshed once at start, below).
    let all_events_clients = keys.all_events_clients().to_vec();
    let state = web::Data::new(ApiState {
        pool: pool.clone(),
        keys,
        providers,
        window: api.idempotency_window,
        db_timeout: edge.db_timeout,
        body_read_timeout: edge.body_read_timeout,
        gateway_wait: api.gateway_wait,
        allow_private_webhook_urls: api.allow_private_webhook_urls,
    });
    let server = hookline_web::serve(
        move || {
            App::new()
                .app_data(state.clone())
                .wrap(actix_web::middleware::from_fn(trace_request))
                .configure(configure)
        },
        listener,
        hookline_web::Limits::of_edge(edge),
    )?;
    let handle = server.handle();
    let prune = CancellationToken::new();
    spawn_pruning(pool.clone(), api.idempotency_window, supervisor, &prune);
    spawn_expiry(pool.clone(), api.intent_expiry, supervisor, &prune);
    endpoints::spawn_refresh(
        pool,
        all_events_clients,
        api.allow_private_webhook_urls,
        supervisor,
        &prune,
    );
    tracing::info!(listen = %api.listen, port, clients = api.clients.len(), "merchant API listening");
    Ok(ApiServer {
        port,
        server,
        handle,
        prune,
    })
}

/// Cancels, as `expired`, the intents still `requires_confirmation` `expiry` after their creation, and asks the
/// gateway to cancel those still waiting on their customer (`requires_action`: 3-D Secure, a Pix or boleto), every
/// tenth of `expiry` (between 1 second and 1 minute), a bounded batch at a time. Every edge runs it: each intent is
/// taken by one statement ([`hookline_payments::intents::expire_unconfirmed`],
/// [`hookline_payments::intents::expire_awaiting_customer`]), so it is canceled, and announced, once.
fn spawn_expiry(
    pool: PgPool,
    expiry: Duration,
    supervisor: &Supervisor,
    cancel: &CancellationToken,
) {
    let every = (expiry / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let sweep = Sweep {
        task: EXPIRY_TASK,
        every,
        counter: metric::INTENTS_EXPIRED,
        done: "expired payment intents nobody confirmed or completed in time",
    };
    sweep.spawn(pool, supervisor, cancel, move |pool| async move {
        let mut tx = pool.begin().await?;
        let mut n = hookline_payments::intents::expire_unconfirmed(
            &mut tx,
            expiry.as_secs_f64(),
            500,
            &hookline_billing::Dunning,
        )
        .await?;
        // Those waiting on their customer are canceled at the gateway: their cancel is queued here.
        n += hookline_payments::intents::expire_awaiting_customer(
            &mut tx,
            expiry.as_secs_f64(),
            500,
        )
        .await?;
        tx.commit().await?;
        anyhow::Ok(n as u64)
    });
}

/// Deletes keys older than the window, every `window / 4` (between 1 minute and 1 hour).
fn spawn_pruning(
    pool: PgPool,
    window: Duration,
    supervisor: &Supervisor,
    cancel: &CancellationToken,
) {
    let sweep = Sweep {
        task: PRUNE_TASK,
        every: (window / 4).clamp(Duration::from_secs(60), Duration::from_secs(3600)),
        counter: metric::KEYS_PRUNED,
        done: "pruned expired idempotency keys",
    };
    sweep.spawn(pool, supervisor, cancel, move |pool| async move {
        Ok(hookline_payments::intents::prune_idempotency_keys(&pool, window, 1000).await?)
    });
}

/// A periodic database sweep every edge runs: supervised, one batch every `every`, what it did counted in
/// `counter`. A failed run (the database is down) is logged and retried next time: an outage must not take the
/// edge down.
#[derive(Clone, Copy)]
struct Sweep {
    task: &'static str,
    every: Duration,
    counter: &'static str,
    /// What a run that did something did, for the log.
    done: &'static str,
}

impl Sweep {
    fn spawn<F, Fut>(
        self,
        pool: PgPool,
        supervisor: &Supervisor,
        cancel: &CancellationToken,
        run: F,
    ) where
        F: Fn(PgPool) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = anyhow::Result<u64>> + Send + 'static,
    {
        // The handle is not kept: the loop ends with `cancel` (ApiServer::stop).
        drop(supervisor.spawn(self.task, cancel, pool, move |pool, _| {
            let run = run.clone();
            async move {
                loop {
                    tokio::time::sleep(self.every).await;
                    match run(pool.clone()).await {
                        Ok(n) => {
                            metrics::counter!(self.counter).increment(n);
                            if n > 0 {
                                tracing::info!(task = self.task, count = n, "{}", self.done);
                            }
                        }
                        Err(e) => tracing::warn!(task = self.task, error.message = %e,
                            "a periodic sweep failed; retrying later"),
                    }
                }
            }
        }));
    }
}
