//! Delivery of domain events to the merchant's HTTP destinations (`[[destinations]]`), signed per the Standard
//! Webhooks specification.
//!
//! Runs supervised inside `hookline-worker` (task `delivery`; `[delivery] enabled = false` turns it off) or alone
//! with `hookline deliver`. Several processes may deliver at once: deliveries are claimed with a lease
//! (`crate::destinations::claim_due`, `FOR UPDATE SKIP LOCKED`). No transaction is open during an HTTP
//! call; the answer is recorded afterwards, and only if the lease is still ours.
//!
//! Why it is shaped this way:
//! - **One loop per destination**, each with its own concurrency limit (`max_in_flight`) and circuit breaker:
//!   a destination that is slow or down only delays its own deliveries. The breaker hears whole rounds (see
//!   [`Breaker`]): one failed burst opens it once, and only failed half-open trials lengthen the cooldown.
//! - **Same `webhook-id` on every attempt** (the fact's id, derived from the fact): the receiver deduplicates;
//!   the timestamp and signatures are fresh per attempt, as the specification wants. Every configured secret
//!   signs (space-separated `v1,…` signatures), so a receiver may hold either secret during a rotation.
//! - **Retries** with exponential backoff and jitter (`backoff_base` doubling up to `backoff_max`), a
//!   `Retry-After` honoured up to `backoff_max`, for `retry_window` from when the delivery was queued; then the
//!   delivery is dead (`hookline events redeliver` brings it back). Any non-2xx answer is retried (a receiver's
//!   4xx is often a deploy in progress), except 410 Gone, which disables the destination until an operator
//!   enables it again — its deliveries wait, nothing is dropped.
//! - **Bounded**: the whole attempt has `timeout`, redirects are not followed (the URL is the contract), at
//!   most `max_response_bytes` of an answer are read and 1 KiB recorded. Transport errors are recorded without
//!   the URL (it may carry a token).
//! - **The merchant's own endpoints** (made through the API: rows of `destinations` with a `client`) get the
//!   same loops, found in the table every few seconds ([`Delivery::run`]); each round reads the endpoint's URL
//!   and secrets afresh (they change through the API), the previous secret signing too while its rotation
//!   overlap lasts. Unless the endpoint's row allows private addresses, its requests go through a client whose
//!   resolver drops every non-public address ([`crate::address`]) and a literal address is checked before
//!   sending: the address actually connected to is the one judged.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::address::{self, GuardedResolver, Lookups, SystemLookups};
use crate::config::{destinations_from_config, DeliveryConfig, DestinationConfig};
use crate::destinations::{self, Answer, AttemptOutcome, Declared, Due};
use anyhow::Context;
use hookline_core::telemetry;
use hookline_core::Config;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;
use time::OffsetDateTime;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Metric names.
pub mod metric {
    /// Counter: attempts by `destination` and `outcome` (delivered, retry, gone, dead).
    pub const ATTEMPTS: &str = "hookline_delivery_attempts_total";
    /// Histogram: seconds per attempt, by `destination`.
    pub const SECONDS: &str = "hookline_delivery_attempt_seconds";
    /// Gauge: 1 while a destination's circuit breaker is open.
    pub const CIRCUIT_OPEN: &str = "hookline_delivery_circuit_open";
    /// Gauge (scrape time, from the database): pending deliveries, by `destination`.
    pub const BACKLOG: &str = "hookline_delivery_backlog";
    /// Gauge (scrape time): age in seconds of the oldest pending delivery, by `destination`.
    pub const OLDEST_SECONDS: &str = "hookline_delivery_oldest_pending_seconds";
    /// Gauge (scrape time): dead deliveries, by `destination`.
    pub const DEAD: &str = "hookline_delivery_dead";
    /// Gauge (scrape time): 1 when the destination is disabled (410 Gone or an operator).
    pub const DISABLED: &str = "hookline_delivery_disabled";
    /// Gauge (scrape time): facts not yet published to RabbitMQ.
    pub const DOMAIN_UNPUBLISHED: &str = "hookline_domain_unpublished";
    /// Gauge (scrape time): age in seconds of the oldest unpublished fact.
    pub const DOMAIN_OLDEST_SECONDS: &str = "hookline_domain_oldest_unpublished_seconds";
}

/// Name of the loop for the supervisor.
pub const TASK: &str = "delivery";

/// Characters of an answer kept in `domain_delivery_attempts`.
const RECORDED_CHARS: usize = 1024;

/// The delivery of domain events to every configured destination and every endpoint made through the API.
#[derive(Clone)]
pub struct Delivery {
    pool: PgPool,
    http: reqwest::Client,
    /// For API endpoints whose row does not allow private addresses: resolves through [`GuardedResolver`].
    guarded: reqwest::Client,
    settings: DeliveryConfig,
    destinations: Arc<HashMap<String, DestinationConfig>>,
}

/// What one loop delivers to.
#[derive(Clone)]
enum Source {
    /// An operator's `[[destinations]]` entry: URL and secrets from the configuration.
    Configured(DestinationConfig),
    /// An endpoint made through the API: URL and secrets read from its row each round.
    Api,
}

/// Where one round sends, and how it signs.
struct Target {
    url: url::Url,
    /// Newest first; each signs every request.
    secrets: Vec<SecretString>,
    /// The address policy applies (an API endpoint made without `allow_private_webhook_urls`).
    guarded: bool,
}

/// What a round tells its loop.
enum Next {
    /// Pause this long.
    Pause(Duration),
    /// Go on at once: there may be more due.
    Now,
    /// The endpoint was deleted: the loop ends (its queued deliveries stay, as history).
    Stop,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field(
                "destinations",
                &self.destinations.keys().collect::<Vec<_>>(),
            )
            .field("settings", &self.settings)
            .finish()
    }
}

impl Delivery {
    /// Delivery on `pool` for the configured destinations.
    pub fn from_config(pool: PgPool, config: &Config) -> anyhow::Result<Delivery> {
        let settings = DeliveryConfig::from_config(config)?;
        let http = hookline_core::http::client(
            settings.timeout.min(Duration::from_secs(10)),
            settings.timeout,
        )
        .context("build the delivery HTTP client")?;
        let guarded = guarded_client(&settings, Arc::new(SystemLookups))?;
        Ok(Delivery {
            pool,
            http,
            guarded,
            settings,
            destinations: Arc::new(
                destinations_from_config(config, &hookline_core::config::ProcessEnv)?
                    .into_iter()
                    .map(|d| (d.name.clone(), d))
                    .collect(),
            ),
        })
    }

    /// The same delivery, the API endpoints' names resolved through `lookups` (tests play a DNS answer that changes
    /// after an endpoint was validated).
    pub fn with_lookups(mut self, lookups: Arc<dyn Lookups>) -> anyhow::Result<Delivery> {
        self.guarded = guarded_client(&self.settings, lookups)?;
        Ok(self)
    }

    /// Writes the configured destinations to the `destinations` table (the fan-out reads it).
    pub async fn sync(&self) -> Result<(), sqlx::Error> {
        sync_destinations(&self.pool, self.destinations.values()).await
    }

    /// A claimed delivery's lease: long enough for one attempt with its timeout, short enough that a crashed
    /// process's deliveries are taken over soon.
    fn lease(&self) -> Duration {
        self.settings.timeout * 2 + Duration::from_secs(5)
    }

    /// Runs every destination's loop until `cancel`. Returns an error (the supervisor restarts it) when the
    /// destinations cannot be synced or a loop panicked.
    /// The API endpoints made since this process started are found in the table every `discovery_interval` and get
    /// their own loop; a deleted one's loop ends.
    pub async fn run(&self, cancel: CancellationToken) -> anyhow::Result<()> {
        self.sync()
            .await
            .context("sync [[destinations]] to the database")?;
        let loops = cancel.child_token();
        let mut set = JoinSet::new();
        let mut running: HashSet<String> = HashSet::new();
        for (name, config) in self.destinations.iter() {
            let (this, name, cancel) = (self.clone(), name.clone(), loops.clone());
            running.insert(name.clone());
            let source = Source::Configured(config.clone());
            set.spawn(async move { this.destination_loop(&name, source, cancel).await });
        }
        tracing::info!(
            destinations = self.destinations.len(),
            "delivering domain events"
        );
        let mut discovery = tokio::time::interval(self.discovery_interval());
        discovery.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(joined) = set.join_next(), if !set.is_empty() => {
                    if let Err(e) = joined {
                        // A panicking loop takes the others down with it, and the supervisor restarts them all
                        // (their claimed deliveries' leases expire and are sent again with the same webhook-id).
                        loops.cancel();
                        set.shutdown().await;
                        return Err(anyhow::anyhow!("a destination loop stopped: {e}"));
                    }
                }
                _ = discovery.tick() => match destinations::live_endpoints(&self.pool).await {
                    Ok(names) => {
                        for name in names {
                            if running.insert(name.clone()) {
                                let (this, cancel) = (self.clone(), loops.clone());
                                set.spawn(async move { this.destination_loop(&name, Source::Api, cancel).await });
                            }
                        }
                    }
                    Err(e) => tracing::warn!(
                        error.cause_chain = %format!("{e:#}"),
                        "delivery: cannot list the API's webhook endpoints; retrying"
                    ),
                },
            }
        }
        while let Some(joined) = set.join_next().await {
            if let Err(e) = joined {
                return Err(anyhow::anyhow!("a destination loop stopped: {e}"));
            }
        }
        Ok(())
    }

    /// How often the table is read for new API endpoints: a few polls, between 200 ms and 5 s.
    fn discovery_interval(&self) -> Duration {
        (self.settings.poll_interval * 4).clamp(Duration::from_millis(200), Duration::from_secs(5))
    }

    async fn destination_loop(&self, name: &str, source: Source, cancel: CancellationToken) {
        let mut breaker = Breaker::new(
            self.settings.breaker_threshold,
            self.settings.breaker_cooldown,
        );
        let mut db_pause = self.settings.poll_interval;
        while !cancel.is_cancelled() {
            let pause = match self.round(name, &source, &mut breaker).await {
                Ok(Next::Pause(pause)) => {
                    db_pause = self.settings.poll_interval;
                    pause
                }
                Ok(Next::Now) => {
                    db_pause = self.settings.poll_interval;
                    continue;
                }
                Ok(Next::Stop) => {
                    tracing::info!(destination = %name, "webhook endpoint deleted: its delivery loop ends");
                    return;
                }
                Err(e) => {
                    tracing::warn!(
                        destination = %name,
                        error.cause_chain = %format!("{e:#}"),
                        "delivery: database unavailable; retrying"
                    );
                    db_pause =
                        (db_pause * 2).clamp(self.settings.poll_interval, Duration::from_secs(10));
                    db_pause
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Where this round sends, or what the loop does instead while the destination is not usable (disabled,
    /// removed).
    async fn target(&self, name: &str, source: &Source) -> anyhow::Result<Result<Target, Next>> {
        let idle = Next::Pause(self.settings.poll_interval * 4);
        match source {
            Source::Configured(config) => {
                let state = destinations::get(&self.pool, name)
                    .await
                    .context("read the destination's state")?;
                let usable = state
                    .as_ref()
                    .is_some_and(|s| s.disabled_at.is_none() && s.removed_at.is_none());
                if !usable {
                    // Disabled (410 Gone or an operator): its deliveries wait until `hookline destinations enable`.
                    return Ok(Err(idle));
                }
                Ok(Ok(Target {
                    url: config.url.clone(),
                    secrets: config.secrets.clone(),
                    guarded: false,
                }))
            }
            Source::Api => {
                let Some(t) = destinations::endpoint_target(&self.pool, name)
                    .await
                    .context("read the webhook endpoint")?
                else {
                    return Ok(Err(Next::Stop));
                };
                if t.removed {
                    return Ok(Err(Next::Stop));
                }
                // Disabled (by its client, an operator or a 410): its deliveries wait until it is enabled.
                let (false, Some(secret)) = (t.disabled, t.secret) else {
                    return Ok(Err(idle));
                };
                let Ok(url) = url::Url::parse(&t.url) else {
                    // The API validated it; a row that does not parse is left waiting, loudly.
                    tracing::warn!(destination = %name, "webhook endpoint URL does not parse; not delivering");
                    return Ok(Err(idle));
                };
                let mut secrets = vec![SecretString::from(secret)];
                secrets.extend(t.previous_secret.map(SecretString::from));
                Ok(Ok(Target {
                    url,
                    secrets,
                    guarded: !t.allow_private,
                }))
            }
        }
    }

    /// One round for one destination: what its loop does next.
    async fn round(
        &self,
        name: &str,
        source: &Source,
        breaker: &mut Breaker,
    ) -> anyhow::Result<Next> {
        let target = match self.target(name, source).await? {
            Ok(target) => target,
            Err(next) => return Ok(next),
        };
        let trial = match breaker.state(Instant::now()) {
            BreakerState::Open { wait } => {
                metrics::gauge!(metric::CIRCUIT_OPEN, "destination" => name.to_owned()).set(1.0);
                return Ok(Next::Pause(wait.min(self.settings.poll_interval * 4)));
            }
            BreakerState::HalfOpen => true,
            BreakerState::Closed => false,
        };
        metrics::gauge!(metric::CIRCUIT_OPEN, "destination" => name.to_owned()).set(0.0);
        // Half-open: one trial request (the oldest fact due) decides whether the destination is back.
        let limit = if trial {
            1
        } else {
            self.settings.max_in_flight as i64
        };
        // Fault tests: `return` stops this process from sending anything (its facts stay queued).
        #[cfg(feature = "failpoints")]
        fail::fail_point!("deliver.before_claim", |_| Ok(Next::Pause(
            self.settings.poll_interval
        )));
        let due = if trial {
            destinations::claim_trial(&self.pool, name, self.lease()).await
        } else {
            destinations::claim_due(&self.pool, name, limit, self.lease()).await
        }
        .context("claim due deliveries")?;
        if due.is_empty() {
            return Ok(Next::Pause(self.settings.poll_interval));
        }
        let claimed = due.len() as i64;
        // One span per attempt, child of the trace the fact was decided in (the event's apply, the dispatcher's
        // attempt): the merchant's endpoint receives it as `traceparent`.
        let spans: Vec<tracing::Span> = due
            .iter()
            .map(|d| {
                let span = tracing::info_span!(
                    "delivery.attempt",
                    otel.kind = "client",
                    destination = %name,
                    domain_event = %d.event_id,
                    event_type = %d.event_type,
                    attempt = d.attempt,
                    http.response.status_code = tracing::field::Empty,
                    outcome = tracing::field::Empty,
                );
                telemetry::set_parent(&span, d.traceparent.as_deref());
                span
            })
            .collect();
        let answers = futures::future::join_all(
            due.iter()
                .zip(&spans)
                .map(|(d, span)| self.attempt(&target, d).instrument(span.clone())),
        )
        .await;
        let decided: Vec<(Answer, AttemptOutcome)> = due
            .iter()
            .zip(answers)
            .map(|(d, (answer, retry_after))| {
                let outcome = self.outcome(d, &answer, retry_after);
                (answer, outcome)
            })
            .collect();
        // The breaker hears the round as one: its attempts ran at once, so "consecutive" inside it means nothing.
        let delivered = decided
            .iter()
            .filter(|(_, o)| matches!(o, AttemptOutcome::Delivered))
            .count();
        let before = breaker.state(Instant::now());
        breaker.record_round(Instant::now(), delivered, decided.len() - delivered);
        if let BreakerState::Open { wait } = breaker.state(Instant::now()) {
            if !matches!(before, BreakerState::Open { .. }) {
                tracing::warn!(
                    destination = %name,
                    failed = decided.len() - delivered,
                    cooldown_ms = wait.as_millis() as u64,
                    "delivery circuit breaker open: no attempt until the cooldown ends, then one trial"
                );
            }
        }
        for ((d, (answer, outcome)), span) in due.iter().zip(decided).zip(&spans) {
            if let Some(status) = answer.http_status {
                span.record("http.response.status_code", status);
            }
            span.record("outcome", outcome.as_str());
            #[cfg(feature = "failpoints")]
            fail::fail_point!("deliver.after_send", |_| Ok(Next::Pause(
                self.settings.poll_interval
            )));
            metrics::counter!(metric::ATTEMPTS, "destination" => name.to_owned(), "outcome" => outcome.as_str())
                .increment(1);
            metrics::histogram!(metric::SECONDS, "destination" => name.to_owned())
                .record(answer.latency.as_secs_f64());
            match &outcome {
                AttemptOutcome::Delivered => {}
                AttemptOutcome::Gone => tracing::warn!(
                    destination = %name,
                    "destination answered 410 Gone: disabled until `hookline destinations enable`"
                ),
                AttemptOutcome::Dead { reason } => tracing::error!(
                    destination = %name,
                    domain_event = %d.event_id,
                    reason = %reason,
                    "delivery dead-lettered"
                ),
                AttemptOutcome::Retry { .. } => tracing::info!(
                    destination = %name,
                    domain_event = %d.event_id,
                    attempt = d.attempt,
                    http_status = answer.http_status,
                    "delivery failed; will retry"
                ),
            }
            let recorded = destinations::record_attempt(
                &self.pool,
                name,
                d.event_seq,
                d.attempt,
                &answer,
                &outcome,
            )
            .await
            .context("record the delivery attempt")?;
            if !recorded {
                tracing::warn!(destination = %name, domain_event = %d.event_id,
                    "delivery lease was lost before the answer was recorded; another attempt owns it");
            }
        }
        // A full batch: there may be more due right now.
        Ok(if claimed < limit {
            Next::Pause(self.settings.poll_interval)
        } else {
            Next::Now
        })
    }

    /// Sends one delivery and returns what happened, with the answer's `Retry-After` (never an error: a failure
    /// is an answer to record).
    async fn attempt(&self, target: &Target, d: &Due) -> (Answer, Option<Duration>) {
        let started = Instant::now();
        let timestamp = OffsetDateTime::now_utc().unix_timestamp();
        let signatures: Vec<String> = target
            .secrets
            .iter()
            .filter_map(|s| {
                hookline_signature::sign::standard_webhooks(
                    s.expose_secret().as_bytes(),
                    &d.event_id,
                    timestamp,
                    &d.body,
                )
                .ok()
            })
            .collect();
        let http = if target.guarded {
            // A literal address is connected to without any resolver: judged here, before anything is sent.
            if let Err(refused) = address::check_url_host(&target.url) {
                let answer = Answer {
                    http_status: None,
                    latency: started.elapsed(),
                    error: Some(format!("refused: {refused}")),
                    response: None,
                };
                return (answer, None);
            }
            &self.guarded
        } else {
            &self.http
        };
        let mut request = http
            .post(target.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", &d.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signatures.join(" "));
        // W3C trace context: the merchant's own tracing continues the payment's trace. Not signed (it is not
        // part of the fact), and hookline's own value (this attempt's span), never one read from outside.
        if let Some(tp) = telemetry::current_traceparent() {
            request = request.header("traceparent", tp);
        }
        let sent = request.body(d.body.clone()).send().await;
        let mut res = match sent {
            Ok(r) => r,
            Err(e) => {
                let answer = Answer {
                    http_status: None,
                    latency: started.elapsed(),
                    error: Some(transport_error(e)),
                    response: None,
                };
                return (answer, None);
            }
        };
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(hookline_core::retry::parse_retry_after);
        let mut body = Vec::new();
        let mut error = None;
        loop {
            match res.chunk().await {
                Ok(Some(chunk)) => {
                    let room = self.settings.max_response_bytes.saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if chunk.len() >= room {
                        break; // the rest is dropped with the connection
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(format!("reading the answer: {}", transport_error(e)));
                    break;
                }
            }
        }
        let response: String = String::from_utf8_lossy(&body)
            .chars()
            .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
            .take(RECORDED_CHARS)
            .collect();
        let answer = Answer {
            http_status: Some(status),
            latency: started.elapsed(),
            // A 2xx whose body was cut is still delivered: the receiver answered.
            error: error.filter(|_| !(200..300).contains(&status)),
            response: Some(response).filter(|r| !r.is_empty()),
        };
        (answer, retry_after)
    }

    /// Decides what an answer means for the delivery.
    fn outcome(&self, d: &Due, answer: &Answer, retry_after: Option<Duration>) -> AttemptOutcome {
        match answer.http_status {
            Some(200..=299) => return AttemptOutcome::Delivered,
            Some(410) => return AttemptOutcome::Gone,
            _ => {}
        }
        let seed = (d.event_seq as u64).rotate_left(32)
            ^ (d.attempt as u64)
            ^ SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|t| t.subsec_nanos() as u64)
                .unwrap_or(0);
        let delay = match retry_after {
            Some(after) => after.min(self.settings.backoff_max),
            None => backoff(&self.settings, d.attempt, seed),
        };
        let next = OffsetDateTime::now_utc() + delay;
        let window_end = d.window_start + self.settings.retry_window;
        if next > window_end {
            let last = match (&answer.error, answer.http_status) {
                (Some(e), _) => e.clone(),
                (None, Some(s)) => format!("HTTP {s}"),
                (None, None) => "no answer".to_owned(),
            };
            AttemptOutcome::Dead {
                reason: format!(
                    "retry window of {}s exhausted after {} attempt(s); last: {last}",
                    self.settings.retry_window.as_secs(),
                    d.attempt
                ),
            }
        } else {
            AttemptOutcome::Retry {
                next_attempt_at: next,
            }
        }
    }
}

/// The client for API endpoints under the address policy: [`hookline_core::http::client`]'s settings (no redirect,
/// no proxy, timeouts) with a resolver that keeps only public addresses.
fn guarded_client(
    settings: &DeliveryConfig,
    lookups: Arc<dyn Lookups>,
) -> anyhow::Result<reqwest::Client> {
    hookline_core::http::builder(
        settings.timeout.min(Duration::from_secs(10)),
        settings.timeout,
    )
    .dns_resolver(Arc::new(GuardedResolver::new(lookups)))
    .build()
    .context("build the guarded delivery HTTP client")
}

/// Writes `destinations` to the `destinations` table.
pub async fn sync_destinations<'a>(
    pool: &PgPool,
    destinations: impl IntoIterator<Item = &'a DestinationConfig>,
) -> Result<(), sqlx::Error> {
    let declared: Vec<Declared<'_>> = destinations
        .into_iter()
        .map(|d| Declared {
            name: &d.name,
            url: d.url.as_str(),
            events: &d.events,
        })
        .collect();
    destinations::sync(pool, &declared).await
}

/// A transport error as text, without the URL (it may carry a token) and bounded.
fn transport_error(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "body error"
    } else {
        "request failed"
    };
    // The cause chain says why (DNS, refused, TLS); the URL is left out.
    let e = e.without_url();
    let mut text = format!("{kind}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text.chars().take(300).collect()
}

/// Delay before attempt `attempt + 1`: `backoff_base · 2^(attempt-1)`, capped at `backoff_max`, of which the
/// upper half is random (the dispatcher's schedule, [`hookline_core::retry::jittered_backoff`]).
pub fn backoff(settings: &DeliveryConfig, attempt: i32, seed: u64) -> Duration {
    hookline_core::retry::jittered_backoff(
        settings.backoff_base,
        settings.backoff_max,
        attempt,
        seed,
    )
}

/// Longest cooldown of an open breaker, however many trials failed.
const MAX_COOLDOWN: Duration = Duration::from_secs(600);

/// What a destination's breaker allows now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BreakerState {
    /// Rounds of up to `max_in_flight` attempts.
    Closed,
    /// Nothing is sent for `wait`.
    Open { wait: Duration },
    /// The cooldown is over: one trial attempt decides.
    HalfOpen,
}

/// A destination's circuit breaker, told of whole ROUNDS (the attempts sent at once), with the clock passed in.
///
/// - Closed: a round that delivers anything resets the failure count (the destination is up; its failures are
///   retried on their own schedule). A round that delivers nothing adds its failures; when the count reaches
///   `threshold` the breaker opens ONCE, for `cooldown`, however many attempts the round held.
/// - Open until the cooldown ends, then half-open: the next round is one trial. A delivered trial closes the
///   breaker and resets everything; a failed trial re-opens it with the cooldown doubled (up to 10 minutes).
///
/// Counting each failure inside one round instead (the old behaviour) re-opened the breaker and doubled its
/// cooldown once per in-flight attempt: one round of 8 failures shut a destination out for 30·2³ s.
#[derive(Debug)]
struct Breaker {
    threshold: u32,
    cooldown: Duration,
    failures: u32,
    open_until: Option<Instant>,
    /// Failed trials since the breaker last opened from closed: the cooldown is `cooldown · 2^failed_trials`.
    failed_trials: u32,
}

impl Breaker {
    fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker {
            threshold: threshold.max(1),
            cooldown,
            failures: 0,
            open_until: None,
            failed_trials: 0,
        }
    }

    fn state(&self, now: Instant) -> BreakerState {
        match self.open_until {
            None => BreakerState::Closed,
            Some(until) => match until.checked_duration_since(now) {
                Some(wait) if !wait.is_zero() => BreakerState::Open { wait },
                _ => BreakerState::HalfOpen,
            },
        }
    }

    fn open(&mut self, now: Instant) {
        let factor = 1u32 << self.failed_trials.min(10);
        let wait = self.cooldown.saturating_mul(factor).min(MAX_COOLDOWN);
        self.open_until = Some(now + wait);
    }

    /// Records one round's result: `delivered` attempts succeeded and `failed` did not.
    fn record_round(&mut self, now: Instant, delivered: usize, failed: usize) {
        if delivered > 0 {
            self.failures = 0;
            self.open_until = None;
            self.failed_trials = 0;
            return;
        }
        if failed == 0 {
            return; // nothing was sent: nothing learnt
        }
        match self.state(now) {
            BreakerState::Closed => {
                self.failures = self
                    .failures
                    .saturating_add(u32::try_from(failed).unwrap_or(u32::MAX));
                if self.failures >= self.threshold {
                    self.failed_trials = 0;
                    self.open(now);
                }
            }
            BreakerState::HalfOpen => {
                self.failed_trials = self.failed_trials.saturating_add(1);
                self.open(now);
            }
            // A round that was under way when the breaker opened (several rounds never overlap today): the
            // breaker already knows the destination is failing.
            BreakerState::Open { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_jitter_and_caps() {
        let s = DeliveryConfig {
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(3600),
            ..DeliveryConfig::default()
        };
        for seed in 0..200u64 {
            let d1 = backoff(&s, 1, seed);
            assert!(
                d1 >= Duration::from_millis(2500) && d1 <= Duration::from_secs(5),
                "{d1:?}"
            );
            let d4 = backoff(&s, 4, seed);
            assert!(
                d4 >= Duration::from_secs(20) && d4 <= Duration::from_secs(40),
                "{d4:?}"
            );
            let big = backoff(&s, 1000, seed);
            assert!(
                big <= Duration::from_secs(3600) && big >= Duration::from_secs(1800),
                "{big:?}"
            );
        }
    }

    const COOL: Duration = Duration::from_secs(30);

    fn wait(b: &Breaker, now: Instant) -> Duration {
        match b.state(now) {
            BreakerState::Open { wait } => wait,
            other => panic!("expected open, was {other:?}"),
        }
    }

    #[test]
    fn one_round_of_failures_opens_the_breaker_once_at_the_base_cooldown() {
        let t0 = Instant::now();
        for in_flight in [5usize, 8, 32] {
            let mut b = Breaker::new(5, COOL);
            b.record_round(t0, 0, in_flight);
            assert_eq!(wait(&b, t0), COOL, "{in_flight} failures in one round");
        }
    }

    #[test]
    fn failures_below_the_threshold_add_up_across_rounds_and_a_delivery_resets_them() {
        let t0 = Instant::now();
        let mut b = Breaker::new(5, COOL);
        b.record_round(t0, 0, 2);
        b.record_round(t0, 0, 2);
        assert_eq!(b.state(t0), BreakerState::Closed);
        b.record_round(t0, 1, 7); // a round that delivered something: the destination is up
        assert_eq!(b.state(t0), BreakerState::Closed);
        b.record_round(t0, 0, 4);
        assert_eq!(b.state(t0), BreakerState::Closed, "the count started again");
        b.record_round(t0, 0, 1);
        assert_eq!(wait(&b, t0), COOL);
    }

    #[test]
    fn the_cooldown_doubles_only_when_a_half_open_trial_fails() {
        let t0 = Instant::now();
        let mut b = Breaker::new(5, COOL);
        b.record_round(t0, 0, 8);
        assert_eq!(wait(&b, t0), COOL);
        // Still open: a late round changes nothing.
        b.record_round(t0 + Duration::from_secs(1), 0, 8);
        assert_eq!(wait(&b, t0), COOL);
        let t1 = t0 + COOL;
        assert_eq!(b.state(t1), BreakerState::HalfOpen);
        b.record_round(t1, 0, 1);
        assert_eq!(wait(&b, t1), COOL * 2);
        let t2 = t1 + COOL * 2;
        assert_eq!(b.state(t2), BreakerState::HalfOpen);
        b.record_round(t2, 0, 1);
        assert_eq!(wait(&b, t2), COOL * 4);
        // Capped.
        let mut t = t2 + COOL * 4;
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            b.record_round(t, 0, 1);
            last = wait(&b, t);
            assert!(last <= MAX_COOLDOWN, "{last:?}");
            t += last;
        }
        assert_eq!(last, MAX_COOLDOWN);
    }

    #[test]
    fn a_successful_trial_closes_the_breaker_and_resets_the_cooldown() {
        let t0 = Instant::now();
        let mut b = Breaker::new(5, COOL);
        b.record_round(t0, 0, 8);
        let t1 = t0 + COOL;
        b.record_round(t1, 0, 1); // failed trial: 60 s
        let t2 = t1 + COOL * 2;
        b.record_round(t2, 1, 0);
        assert_eq!(b.state(t2), BreakerState::Closed);
        b.record_round(t2, 0, 4);
        assert_eq!(
            b.state(t2),
            BreakerState::Closed,
            "the failure count was reset"
        );
        b.record_round(t2, 0, 8);
        assert_eq!(
            wait(&b, t2),
            COOL,
            "the cooldown starts again from the base"
        );
    }

    #[test]
    fn a_round_that_sent_nothing_changes_nothing() {
        let t0 = Instant::now();
        let mut b = Breaker::new(5, COOL);
        b.record_round(t0, 0, 8);
        let t1 = t0 + COOL;
        b.record_round(t1, 0, 0);
        assert_eq!(b.state(t1), BreakerState::HalfOpen);
    }
}
