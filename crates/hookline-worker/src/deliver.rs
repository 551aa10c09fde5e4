//! Delivery of domain events to the merchant's HTTP destinations (`[[destinations]]`), signed per the Standard
//! Webhooks specification.
//!
//! Runs supervised inside `hookline-worker` (task `delivery`; `[delivery] enabled = false` turns it off) or alone
//! with `hookline deliver`. Several processes may deliver at once: deliveries are claimed with a lease
//! (`hookline_core::destinations::claim_due`, `FOR UPDATE SKIP LOCKED`). No transaction is open during an HTTP
//! call; the answer is recorded afterwards, and only if the lease is still ours.
//!
//! Why it is shaped this way:
//! - **One loop per destination**, each with its own concurrency limit (`max_in_flight`) and circuit breaker:
//!   a destination that is slow or down only delays its own deliveries.
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use hookline_core::config::{DeliveryConfig, DestinationConfig};
use hookline_core::destinations::{self, Answer, AttemptOutcome, Declared, Due};
use hookline_core::Config;
use sqlx::PgPool;
use time::OffsetDateTime;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

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

/// The delivery of domain events to every configured destination.
#[derive(Clone)]
pub struct Delivery {
    pool: PgPool,
    http: reqwest::Client,
    settings: DeliveryConfig,
    destinations: Arc<HashMap<String, DestinationConfig>>,
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
        let settings = config.delivery.clone();
        let http = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("hookline/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("build the delivery HTTP client")?;
        Ok(Delivery {
            pool,
            http,
            settings,
            destinations: Arc::new(
                config
                    .destinations
                    .iter()
                    .map(|d| (d.name.clone(), d.clone()))
                    .collect(),
            ),
        })
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
    pub async fn run(&self, cancel: CancellationToken) -> anyhow::Result<()> {
        self.sync()
            .await
            .context("sync [[destinations]] to the database")?;
        let loops = cancel.child_token();
        let mut set = JoinSet::new();
        for name in self.destinations.keys() {
            let (this, name, cancel) = (self.clone(), name.clone(), loops.clone());
            set.spawn(async move { this.destination_loop(&name, cancel).await });
        }
        tracing::info!(
            destinations = self.destinations.len(),
            "delivering domain events"
        );
        while let Some(joined) = set.join_next().await {
            if let Err(e) = joined {
                // A panicking loop takes the others down with it, and the supervisor restarts them all (their
                // claimed deliveries' leases expire and are sent again with the same webhook-id).
                loops.cancel();
                set.shutdown().await;
                return Err(anyhow::anyhow!("a destination loop stopped: {e}"));
            }
        }
        Ok(())
    }

    async fn destination_loop(&self, name: &str, cancel: CancellationToken) {
        let Some(config) = self.destinations.get(name).cloned() else {
            return;
        };
        let mut breaker = Breaker::new(
            self.settings.breaker_threshold,
            self.settings.breaker_cooldown,
        );
        let mut db_pause = self.settings.poll_interval;
        while !cancel.is_cancelled() {
            let pause = match self.round(&config, &mut breaker).await {
                Ok(Some(pause)) => {
                    db_pause = self.settings.poll_interval;
                    pause
                }
                Ok(None) => {
                    db_pause = self.settings.poll_interval;
                    continue;
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

    /// One round for one destination: returns how long to pause (`None`: go on at once, there may be more).
    async fn round(
        &self,
        config: &DestinationConfig,
        breaker: &mut Breaker,
    ) -> anyhow::Result<Option<Duration>> {
        let name = config.name.as_str();
        let state = destinations::get(&self.pool, name)
            .await
            .context("read the destination's state")?;
        let usable = state
            .as_ref()
            .is_some_and(|s| s.disabled_at.is_none() && s.removed_at.is_none());
        if !usable {
            // Disabled (410 Gone or an operator): its deliveries wait until `hookline destinations enable`.
            return Ok(Some(self.settings.poll_interval * 4));
        }
        if let Some(wait) = breaker.wait() {
            metrics::gauge!(metric::CIRCUIT_OPEN, "destination" => name.to_owned()).set(1.0);
            return Ok(Some(wait.min(self.settings.poll_interval * 4)));
        }
        metrics::gauge!(metric::CIRCUIT_OPEN, "destination" => name.to_owned()).set(0.0);
        // Half-open: one trial request decides whether the destination is back.
        let limit = if breaker.half_open() {
            1
        } else {
            self.settings.max_in_flight as i64
        };
        // Fault tests: `return` stops this process from sending anything (its facts stay queued).
        #[cfg(feature = "failpoints")]
        fail::fail_point!("deliver.before_claim", |_| Ok(Some(
            self.settings.poll_interval
        )));
        let due = destinations::claim_due(&self.pool, name, limit, self.lease())
            .await
            .context("claim due deliveries")?;
        if due.is_empty() {
            return Ok(Some(self.settings.poll_interval));
        }
        let claimed = due.len() as i64;
        let answers = futures::future::join_all(due.iter().map(|d| self.attempt(config, d))).await;
        for (d, (answer, retry_after)) in due.iter().zip(answers) {
            #[cfg(feature = "failpoints")]
            fail::fail_point!("deliver.after_send", |_| Ok(Some(
                self.settings.poll_interval
            )));
            let outcome = self.outcome(d, &answer, retry_after);
            breaker.record(matches!(outcome, AttemptOutcome::Delivered));
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
        Ok((claimed < limit).then_some(self.settings.poll_interval))
    }

    /// Sends one delivery and returns what happened, with the answer's `Retry-After` (never an error: a failure
    /// is an answer to record).
    async fn attempt(&self, config: &DestinationConfig, d: &Due) -> (Answer, Option<Duration>) {
        let started = Instant::now();
        let timestamp = OffsetDateTime::now_utc().unix_timestamp();
        let signatures: Vec<String> = config
            .secret_bytes()
            .into_iter()
            .filter_map(|s| {
                hookline_signature::sign::standard_webhooks(s, &d.event_id, timestamp, &d.body).ok()
            })
            .collect();
        let sent = self
            .http
            .post(config.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", &d.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signatures.join(" "))
            .body(d.body.clone())
            .send()
            .await;
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
            .and_then(parse_retry_after);
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

/// `Retry-After`: delay-seconds or an HTTP date.
fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Delay before attempt `attempt + 1`: `backoff_base · 2^(attempt-1)`, capped at `backoff_max`, of which the
/// upper half is random (the dispatcher's schedule, [`crate::dispatch::jittered_backoff`]).
pub fn backoff(settings: &DeliveryConfig, attempt: i32, seed: u64) -> Duration {
    crate::dispatch::jittered_backoff(settings.backoff_base, settings.backoff_max, attempt, seed)
}

/// A destination's circuit breaker: `threshold` consecutive failures open it for `cooldown` (doubling while
/// trials keep failing, up to 10 minutes); then one trial request (half-open) closes it on success.
#[derive(Debug)]
struct Breaker {
    threshold: u32,
    cooldown: Duration,
    failures: u32,
    open_until: Option<Instant>,
    opened: u32,
}

impl Breaker {
    fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker {
            threshold,
            cooldown,
            failures: 0,
            open_until: None,
            opened: 0,
        }
    }

    /// How long to wait while open.
    fn wait(&self) -> Option<Duration> {
        self.open_until
            .and_then(|t| t.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    fn half_open(&self) -> bool {
        self.open_until.is_some()
    }

    fn record(&mut self, success: bool) {
        if success {
            self.failures = 0;
            self.open_until = None;
            self.opened = 0;
            return;
        }
        self.failures += 1;
        if self.failures >= self.threshold || self.open_until.is_some() {
            let factor = 1u32 << self.opened.min(8);
            let wait = self
                .cooldown
                .saturating_mul(factor)
                .min(Duration::from_secs(600));
            self.open_until = Some(Instant::now() + wait);
            self.opened += 1;
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

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        assert_eq!(parse_retry_after(" 120 "), Some(Duration::from_secs(120)));
        let later = SystemTime::now() + Duration::from_secs(3600);
        let d = parse_retry_after(&httpdate::fmt_http_date(later)).expect("date");
        assert!(
            d > Duration::from_secs(3500) && d <= Duration::from_secs(3600),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn breaker_opens_after_threshold_and_closes_on_success() {
        let mut b = Breaker::new(3, Duration::from_secs(30));
        b.record(false);
        b.record(false);
        assert!(b.wait().is_none());
        b.record(false);
        assert!(b.wait().is_some() && b.half_open());
        b.record(true);
        assert!(b.wait().is_none() && !b.half_open());
    }
}
