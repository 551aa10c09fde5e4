//! The operator console: a small server-rendered web application in its own process (`hookline console
//! serve`, [`serve`]) on its own listener (`[console] listen`, loopback by default), never on the providers'
//! listener: a provider-facing port must not expose operator pages, and the console can be firewalled or
//! tunnelled on its own.
//!
//! Why its own process, not a listener of the edge: whatever reaches the console (a flood of logins, each an
//! Argon2 check by design; a heavy page; a memory spike) must never slow a webhook acknowledgement, and in one
//! process it shared the edge's CPU, memory and runtime. The console needs only the configuration (providers
//! and their secrets, to re-verify signatures) and its own small pool. The edge's acknowledgement percentiles
//! on the overview are read from the edge's `/metrics` (see [`edge_metrics_url`]).
//!
//! It reuses what the CLI uses rather than re-implementing it:
//!
//! * the overview is [`hookline_ops::status::report`], the figures of `hookline status`;
//! * the Billing page is [`hookline_billing::status`], what `hookline billing status` prints;
//! * replays and dead-letter redrives go through [`hookline_ops::replay`], the engine of `hookline replay` and
//!   `hookline dlq redrive`, and are audited in the same `replay_runs` rows (operator `console:NAME`);
//! * signatures are re-verified with [`hookline_signature::Verifier`], as the edge and `hookline verify` do;
//! * every table is read through the hookline-core module that owns it.
//!
//! Pages are plain HTML rendered on the server with `maud` (every interpolation is HTML-escaped by the
//! template engine), one small stylesheet and one small script (live refresh of the overview), both served from
//! the binary: no build step, nothing downloaded. Responses carry a strict Content-Security-Policy (no inline
//! script, no third-party origin), `no-store` caching and anti-framing headers.
//!
//! Authentication and CSRF: [`auth`]. Stable element ids for tools and browser tests: `#login`, `#events`,
//! `#event-detail`, `#replay`, `#replay-reason`, `#audit` (plus `#overview`, `#dead-letters`, `#payments`,
//! `#balances`, `#intents`, `#signature`, `#billing-summary`, `#past-due`, `#needs-payment-method`, `#in-retry`,
//! `#charging`, `#unpaid-cycles`, `#billing-attention`).

mod auth;
pub mod charts;
pub mod config;
pub mod history;
mod pages;
mod views;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::dev::{Server, ServerHandle};
use actix_web::http::{header, StatusCode};
use actix_web::{web, App, HttpResponse, ResponseError};
use anyhow::Context;
use hookline_core::db::{self, PoolSettings};
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use hookline_core::Config;
use hookline_web::EdgeConfig;
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub use auth::{LOGIN_COOKIE, SESSION_COOKIE};
pub use config::{ConsoleConfig, ConsoleOperator, DEFAULT_CONSOLE_LISTEN, MAX_OPERATOR_NAME_BYTES};

/// Largest accepted form body: every POST handler reads its body through the console's `Form` extractor
/// ([`hookline_web::body::read_bounded`]), which answers 413 past it (and 408 for a body trickled past
/// `[edge] body_read_timeout_ms`). Any other body extractor is bounded to the same size by the app's
/// `PayloadConfig`.
pub const MAX_FORM_BYTES: usize = 16 * 1024;

/// Longest accepted replay reason (it is stored in the audit row).
pub const MAX_REASON_CHARS: usize = 500;

/// How old the overview's figures may be before a request triggers a refresh.
pub const OVERVIEW_MAX_AGE: Duration = Duration::from_secs(5);

/// Errors of the console's handlers: each maps to a status and a short page; internal causes are logged,
/// never shown.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No live session: the browser is sent to the login page.
    #[error("login required")]
    LoginRequired,
    /// A POST without the session's CSRF token.
    #[error("the form's CSRF token is missing or wrong; reload the page and try again")]
    Csrf,
    /// Input that cannot be used.
    #[error("{0}")]
    BadRequest(String),
    /// No such thing.
    #[error("not found")]
    NotFound,
    /// A form body past [`MAX_FORM_BYTES`].
    #[error("the form is larger than {MAX_FORM_BYTES} bytes")]
    TooLarge,
    /// A form body not received within the edge's body read timeout.
    #[error("the form was not received in time")]
    Timeout,
    /// The action no longer matches what the operator confirmed (a replay's selection changed since its dry
    /// run): nothing was done.
    #[error("{0}")]
    Conflict(String),
    /// An action was recorded but could not complete (RabbitMQ unreachable, no confirm): 503 with what to do.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (database, broker): 500 with an opaque page.
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl From<sqlx::Error> for ConsoleError {
    fn from(e: sqlx::Error) -> Self {
        ConsoleError::Internal(anyhow::Error::new(e))
    }
}

impl From<hookline_core::input::InputError> for ConsoleError {
    fn from(e: hookline_core::input::InputError) -> Self {
        ConsoleError::BadRequest(e.to_string())
    }
}

impl From<hookline_web::body::BodyError> for ConsoleError {
    fn from(e: hookline_web::body::BodyError) -> Self {
        match e {
            hookline_web::body::BodyError::TooLarge { .. } => ConsoleError::TooLarge,
            hookline_web::body::BodyError::Timeout(_) => ConsoleError::Timeout,
            hookline_web::body::BodyError::Read(_) => {
                ConsoleError::BadRequest("the form could not be read".into())
            }
        }
    }
}

impl ResponseError for ConsoleError {
    fn status_code(&self) -> StatusCode {
        match self {
            ConsoleError::LoginRequired => StatusCode::SEE_OTHER,
            ConsoleError::Csrf => StatusCode::FORBIDDEN,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ConsoleError::Timeout => StatusCode::REQUEST_TIMEOUT,
            ConsoleError::Conflict(_) => StatusCode::CONFLICT,
            ConsoleError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ConsoleError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let ConsoleError::LoginRequired = self {
            return HttpResponse::SeeOther()
                .insert_header((header::LOCATION, "/login"))
                .finish();
        }
        if let ConsoleError::Internal(e) = self {
            // The cause chain goes to the log, escaped by `?`; the page says nothing about it.
            tracing::error!(error.cause_chain = ?format!("{e:#}"), "console request failed");
        }
        let body = views::error_page(self.status_code(), &self.to_string());
        secure(HttpResponse::build(self.status_code()))
            .content_type("text/html; charset=utf-8")
            .body(body.into_string())
    }
}

/// Adds the headers every console response carries.
fn secure(mut res: actix_web::HttpResponseBuilder) -> actix_web::HttpResponseBuilder {
    res.insert_header((
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ))
    .insert_header((header::X_FRAME_OPTIONS, "DENY"))
    .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
    .insert_header((header::REFERRER_POLICY, "no-referrer"))
    .insert_header((header::CACHE_CONTROL, "no-store"));
    res
}

/// An HTML page with the console's headers.
fn html(markup: maud::Markup) -> HttpResponse {
    secure(HttpResponse::Ok())
        .content_type("text/html; charset=utf-8")
        .body(markup.into_string())
}

/// Name of the supervised loop that refreshes the overview's figures in the background.
pub const OVERVIEW_TASK: &str = "console_overview";

/// How long the overview waits for the edge's `/metrics` (loopback; a slow edge must not hold the refresh).
const EDGE_METRICS_TIMEOUT: Duration = Duration::from_secs(2);

/// The overview's last figures and when they were read.
struct Snapshot {
    at: Instant,
    read_at: time::OffsetDateTime,
    result: Result<Arc<hookline_ops::status::Report>, String>,
    /// The edge's `/metrics` text (for its acknowledgement percentiles), or why it could not be read.
    edge_metrics: Result<String, String>,
    /// How many subscriptions are behind (the overview's line linking to the Billing page), or why it could not
    /// be read.
    billing: Result<BillingBehind, String>,
}

/// Subscriptions parked by the dunning, counted for the overview.
#[derive(Debug, Clone, Copy, Default)]
struct BillingBehind {
    past_due: usize,
    needs_payment_method: usize,
}

/// Where the console reads the edge's `/metrics`: `http://{edge.listen}/metrics`, an edge listening on every
/// interface being reached on loopback.
pub fn edge_metrics_url(edge: &EdgeConfig) -> String {
    let listen = edge.listen;
    let ip = match listen.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
        }
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        }
        ip => ip,
    };
    format!(
        "http://{}/metrics",
        std::net::SocketAddr::new(ip, listen.port())
    )
}

/// Shared state of the console's handlers.
pub struct ConsoleState {
    pool: PgPool,
    config: Config,
    console: ConsoleConfig,
    /// `[edge]` (`hookline-web`'s): its body-read timeout and limits are the console's too.
    edge: EdgeConfig,
    /// `[relay]` (`hookline-bus`'s): its confirm timeout bounds the console's replays, as the CLI's.
    relay: hookline_bus::RelayConfig,
    auth: auth::Auth,
    metrics: PrometheusHandle,
    overview: Mutex<Option<Arc<Snapshot>>>,
    refreshing: AtomicBool,
    /// Wakes the supervised overview loop ([`OVERVIEW_TASK`]) when a request found the snapshot stale.
    refresh_wanted: tokio::sync::Notify,
    /// Reads the edge's `/metrics` (no redirects, short timeouts).
    http: reqwest::Client,
    /// [`edge_metrics_url`].
    edge_metrics_url: String,
    /// The overview's last day, one sample a minute of the figures it read ([`history`]).
    history: Mutex<history::History>,
    /// What the supervised loops report; `/healthz` answers from it.
    liveness: Liveness,
    /// Cancelled when the console stops: background replays stop at a page boundary (resumable).
    runs: CancellationToken,
}

impl ConsoleState {
    /// The overview's figures: the last snapshot when it is fresh; otherwise a refresh is started in the
    /// background and the previous snapshot is returned at once (the page says how old it is). Only the very
    /// first request waits for the database. The status query aggregates the whole events table, so serving it
    /// from a snapshot at most [`OVERVIEW_MAX_AGE`] old keeps the page fast on millions of rows and the
    /// database load independent of how many browsers are open.
    async fn overview(self: &Arc<Self>) -> Arc<Snapshot> {
        let current = self
            .overview
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match current {
            Some(s) if s.at.elapsed() < OVERVIEW_MAX_AGE => s,
            Some(s) => {
                // The refresh runs in the supervised overview loop, not in a detached task: a refresh that
                // panics is counted and restarted, and one that keeps failing stops the process (non-zero).
                if !self.refreshing.swap(true, Ordering::AcqRel) {
                    self.refresh_wanted.notify_one();
                }
                s
            }
            None => self.refresh_overview().await,
        }
    }

    async fn refresh_overview(&self) -> Arc<Snapshot> {
        let result =
            hookline_ops::status::report(&self.pool, &self.config, None, "hookline-console")
                .await
                .map(Arc::new)
                .map_err(|e| {
                    tracing::warn!(error.cause_chain = ?format!("{e:#}"), "console overview: cannot read the figures");
                    "cannot read the figures from the database (see the console's log)".to_string()
                });
        let edge_metrics = self.read_edge_metrics().await;
        let billing = self.read_billing_behind().await.map_err(|e| {
            tracing::warn!(error.cause_chain = ?format!("{e:#}"), "console overview: cannot read the billing status");
            "cannot read the billing status from the database (see the console's log)".to_string()
        });
        let snapshot = Arc::new(Snapshot {
            at: Instant::now(),
            read_at: time::OffsetDateTime::now_utc(),
            result,
            edge_metrics,
            billing,
        });
        *self.overview.lock().unwrap_or_else(|e| e.into_inner()) = Some(snapshot.clone());
        self.sample_history(&snapshot).await;
        snapshot
    }

    /// Keeps a [`history::Sample`] of `snap` when the last one is `history_sample_secs` old (a twelfth less:
    /// the loop's tick and a browser's refresh do not line up), with the destinations' backlog read for it.
    async fn sample_history(&self, snap: &Snapshot) {
        let every = self.console.history_sample;
        let due = {
            let h = self.history.lock().unwrap_or_else(|e| e.into_inner());
            h.last_at()
                .is_none_or(|t| snap.read_at - t >= every.saturating_sub(every / 12))
        };
        if !due {
            return;
        }
        let backlog = match hookline_delivery::destinations::status(&self.pool).await {
            Ok(rows) => Some(rows.into_iter().map(|d| (d.name, d.pending)).collect()),
            Err(e) => {
                tracing::warn!(error.message = %e, "console overview: cannot read the destinations' backlog");
                None
            }
        };
        let report = snap.result.as_ref().ok();
        let sample = history::Sample {
            at: Some(snap.read_at),
            received: report.map(|r| r.totals.received),
            processed: report.map(|r| r.totals.processed),
            dead_lettered: report.map(|r| r.totals.dead_lettered),
            ack_buckets: snap
                .edge_metrics
                .as_ref()
                .ok()
                .map(|text| views::histogram_buckets(text, pages::ACK_METRIC)),
            relay_lag_secs: report.map(|r| r.totals.oldest_unpublished_secs.unwrap_or(0.0)),
            backlog,
        };
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sample);
    }

    /// The subscriptions past due or waiting for a payment method. Only the parked subscriptions are read (not
    /// every open cycle, as the Billing page does): the overview needs whether anything is behind, and it is
    /// refreshed every few seconds while a browser shows it.
    async fn read_billing_behind(&self) -> anyhow::Result<BillingBehind> {
        let mut conn = self.pool.acquire().await.context("acquire a connection")?;
        let totals = hookline_billing::totals(&mut conn)
            .await
            .context("count the parked subscriptions")?;
        Ok(BillingBehind {
            past_due: usize::try_from(totals.past_due).unwrap_or(usize::MAX),
            needs_payment_method: usize::try_from(totals.needs_payment_method)
                .unwrap_or(usize::MAX),
        })
    }

    /// The edge's `/metrics` text, or a short reason shown on the overview (the edge is another process).
    async fn read_edge_metrics(&self) -> Result<String, String> {
        let res = self
            .http
            .get(&self.edge_metrics_url)
            .send()
            .await
            .and_then(|r| r.error_for_status());
        match res {
            Ok(r) => r.text().await.map_err(|e| {
                tracing::warn!(error.message = %e, "console overview: cannot read the edge's /metrics");
                format!("cannot read {}", self.edge_metrics_url)
            }),
            Err(e) => {
                tracing::warn!(error.message = %e, "console overview: cannot read the edge's /metrics");
                Err(format!("the edge does not answer at {}", self.edge_metrics_url))
            }
        }
    }

    /// The supervised overview loop: one refresh each time a request found the snapshot stale, and one each
    /// `[console] history_sample_secs` when nobody looks, so that the overview's history has its minutes.
    async fn overview_loop(self: Arc<Self>, cancel: CancellationToken) -> anyhow::Result<()> {
        // A refresh that panicked left the flag set: clear it, or no request would ask again.
        self.refreshing.store(false, Ordering::Release);
        // The first tick one interval from now, not at once: the first overview request reads the database
        // itself (a snapshot taken at start would be served, stale, for its first seconds).
        let every = self.console.history_sample;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                _ = self.refresh_wanted.notified() => {}
                _ = tick.tick() => {}
            }
            self.refresh_overview().await;
            self.refreshing.store(false, Ordering::Release);
        }
    }
}

/// `GET /healthz`: 200 when every supervised loop is alive and the database answers within 2 s; 503 otherwise,
/// the body saying which (`status`: `ok`/`dead` with `dead_tasks`; `database`: `ok`, `unreachable`, `timeout`).
/// The console can do nothing without its database, so an outage is reported here rather than on a separate
/// readiness endpoint.
async fn healthz(state: web::Data<ConsoleState>) -> HttpResponse {
    let (alive, mut body) = state.liveness.health();
    let database = match tokio::time::timeout(
        Duration::from_secs(2),
        sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&state.pool),
    )
    .await
    {
        Ok(Ok(_)) => "ok",
        Ok(Err(e)) => {
            tracing::warn!(error.message = %e, "console health: the database does not answer");
            "unreachable"
        }
        Err(_) => "timeout",
    };
    body["database"] = serde_json::Value::from(database);
    if alive && database == "ok" {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// `GET /metrics`: the console process's own metrics (logins, password checks, supervisor), Prometheus text.
async fn metrics(state: web::Data<ConsoleState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// Registers the console's routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/metrics", web::get().to(metrics))
        .route("/", web::get().to(pages::overview))
        .route("/overview/figures", web::get().to(pages::overview_figures))
        .route("/console.css", web::get().to(views::stylesheet))
        .route("/console.js", web::get().to(views::script))
        .route("/favicon.ico", web::get().to(HttpResponse::NoContent))
        .route("/login", web::get().to(pages::login_form))
        .route("/login", web::post().to(pages::login))
        .route("/logout", web::post().to(pages::logout))
        .route("/events", web::get().to(pages::events))
        .route("/events/{id}", web::get().to(pages::event_detail))
        .route("/events/{id}/body", web::get().to(pages::event_body))
        .route("/events/{id}/replay", web::post().to(pages::replay_one))
        .route("/replay", web::post().to(pages::replay_set))
        .route("/dead-letters", web::get().to(pages::dead_letters))
        .route("/dead-letters/redrive", web::post().to(pages::redrive))
        .route("/payments", web::get().to(pages::payments))
        .route("/payments/{id}", web::get().to(pages::payment_detail))
        .route("/audit", web::get().to(pages::audit))
        .route("/intents", web::get().to(pages::intents))
        .route("/billing", web::get().to(pages::billing))
        .route("/deliveries", web::get().to(pages::deliveries))
        .route("/deliveries/redeliver", web::post().to(pages::redeliver))
        .default_service(web::to(pages::not_found));
}

/// The bound, not yet awaited, console server.
pub struct ConsoleServer {
    /// The bound port.
    pub port: u16,
    server: Server,
    handle: ServerHandle,
    /// Stops background replays (at a page boundary; they stay resumable) and the overview loop.
    runs: CancellationToken,
    liveness: Liveness,
    overview_loop: tokio::task::JoinHandle<()>,
    pool: PgPool,
}

/// Binds `[console] listen` and starts the console on its own small pool, with the supervised overview loop.
/// Must be called inside a Tokio runtime; serve it with [`ConsoleServer::run_until_stopped`].
pub fn start(
    config: &Config,
    console: &ConsoleConfig,
    metrics: PrometheusHandle,
) -> anyhow::Result<ConsoleServer> {
    let edge = EdgeConfig::from_config(config)?;
    let pool = db::lazy_pool(
        &config.database_url,
        &PoolSettings {
            application_name: "hookline-console",
            max_connections: 4,
            acquire_timeout: Duration::from_secs(5),
            // Counting a large replay selection or the status aggregate on millions of rows takes seconds.
            statement_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(5),
        },
    )?;
    let listener = TcpListener::bind(console.listen)
        .with_context(|| format!("cannot listen on {} (console.listen)", console.listen))?;
    let port = listener.local_addr()?.port();
    let runs = CancellationToken::new();
    let liveness = Liveness::new();
    let supervisor = Supervisor::new(liveness.clone(), RestartPolicy::default());
    let state = Arc::new(ConsoleState {
        pool: pool.clone(),
        config: config.clone(),
        console: console.clone(),
        edge: edge.clone(),
        relay: hookline_bus::RelayConfig::from_config(config)?,
        auth: auth::Auth::new(console)?,
        metrics,
        overview: Mutex::new(None),
        refreshing: AtomicBool::new(false),
        refresh_wanted: tokio::sync::Notify::new(),
        history: Mutex::new(history::History::default()),
        http: hookline_core::http::client(EDGE_METRICS_TIMEOUT, EDGE_METRICS_TIMEOUT)?,
        edge_metrics_url: edge_metrics_url(&edge),
        liveness: liveness.clone(),
        runs: runs.clone(),
    });
    let overview_loop = {
        let (state, cancel) = (state.clone(), runs.clone());
        tokio::spawn(async move {
            supervisor
                .run(OVERVIEW_TASK, cancel.clone(), |_| {
                    state.clone().overview_loop(cancel.clone())
                })
                .await
        })
    };
    let data = web::Data::from(state);
    // SIGTERM and SIGINT are both graceful here (see `run_until_stopped`); the builder turns actix's own off.
    // Two workers: the console is for a few operators, and its Argon2 checks run on their own pool.
    let server = hookline_web::serve(
        move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(MAX_FORM_BYTES))
                .configure(configure)
        },
        listener,
        hookline_web::Limits {
            workers: 2,
            ..hookline_web::Limits::of_edge(&edge)
        },
    )?;
    let handle = server.handle();
    tracing::info!(listen = %console.listen, port, operators = console.operators.len(), "operator console listening");
    Ok(ConsoleServer {
        port,
        server,
        handle,
        runs,
        liveness,
        overview_loop,
        pool,
    })
}

impl ConsoleServer {
    /// Serves until SIGTERM/SIGINT (in-flight requests finish within `edge.shutdown_timeout`, background
    /// replays stop at a page boundary and stay resumable), then closes the pool. When a supervised loop is
    /// declared dead the server stops the same way and this returns an error naming it, so the process exits
    /// non-zero and its supervisor restarts it.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let (handle, runs, liveness) = (
            self.handle.clone(),
            self.runs.clone(),
            self.liveness.clone(),
        );
        let stopper = tokio::spawn(async move {
            tokio::select! {
                _ = hookline_core::supervisor::wait_for_shutdown_signal() => {
                    tracing::info!("shutdown requested; finishing in-flight console requests");
                }
                _ = liveness.fatal() => {
                    tracing::error!(dead_tasks = ?liveness.dead_tasks(), "a supervised task is dead; stopping the console");
                }
            }
            runs.cancel();
            handle.stop(true).await;
        });
        let mut result = self.server.await.context("console server failed");
        stopper.abort();
        self.runs.cancel();
        self.overview_loop.await.ok();
        self.pool.close().await;
        let dead = self.liveness.dead_tasks();
        if result.is_ok() && !dead.is_empty() {
            result = Err(anyhow::anyhow!(
                "stopped because supervised task(s) {} died",
                dead.join(", ")
            ));
        }
        tracing::info!("console stopped");
        result
    }
}

/// The console process (`hookline console serve`): its own metrics recorder, pool, supervisor and listener,
/// until SIGTERM/SIGINT; an error when `[console]` is missing, the listener cannot be bound or a supervised
/// loop died.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let console = ConsoleConfig::from_config(&config, &hookline_core::config::ProcessEnv)?.context(
        "no [console] section in the configuration: add [console] with at least one [[console.operators]]",
    )?;
    let metrics = hookline_core::telemetry::metrics_handle();
    start(&config, &console, metrics)?.run_until_stopped().await
}
