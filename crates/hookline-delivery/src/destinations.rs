//! `destinations`, `domain_deliveries`, `domain_delivery_attempts`: where facts go over HTTP, and how each
//! delivery is doing. This module owns those tables' SQL.
//!
//! - The configuration's `[[destinations]]` are written to `destinations` at start ([`sync`]); the fan-out in
//!   [`hookline_core::domain_events::record`] reads that table. Secrets are never stored here: they stay in the
//!   configuration.
//! - One `domain_deliveries` row per (destination, fact) carries its own status, attempts and schedule: a slow
//!   or failing destination only delays its own rows. Delivery loops claim due rows with a lease
//!   ([`claim_due`], `FOR UPDATE SKIP LOCKED`), send, and record the outcome ([`record_attempt`]) only if the
//!   lease is still theirs (the attempt number matches): a loop that lost its lease cannot overwrite a newer
//!   attempt's result.
//! - [`redeliver`] is the operators' way back: it re-queues dead or delivered rows and creates missing ones
//!   (a destination added after the fact), in one statement.

use std::time::Duration;

use sqlx::{PgConnection, PgExecutor, PgPool};
use time::OffsetDateTime;

/// A destination as the configuration declares it (without its secrets).
#[derive(Debug, Clone)]
pub struct Declared<'a> {
    /// Unique name (`[A-Za-z0-9_-]{1,64}`).
    pub name: &'a str,
    /// Where facts are POSTed.
    pub url: &'a str,
    /// Subscribed types; `*` = all.
    pub events: &'a [String],
}

/// Makes the `destinations` table match the configuration: declared ones are inserted or updated (and
/// un-removed), the others are marked removed (they get no new facts; their queued deliveries stay visible).
/// A destination disabled by a 410 stays disabled until `hookline destinations enable`. Idempotent; every
/// process that delivers or records facts calls it at start.
pub async fn sync(pool: &PgPool, declared: &[Declared<'_>]) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    // One writer at a time: two processes starting together with different configurations serialise here.
    sqlx::query("LOCK TABLE destinations IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    for d in declared {
        sqlx::query(
            "INSERT INTO destinations (name, url, events) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE
                SET url = EXCLUDED.url, events = EXCLUDED.events, removed_at = NULL, updated_at = now()
              WHERE destinations.url IS DISTINCT FROM EXCLUDED.url
                 OR destinations.events IS DISTINCT FROM EXCLUDED.events
                 OR destinations.removed_at IS NOT NULL",
        )
        .bind(d.name)
        .bind(d.url)
        .bind(d.events)
        .execute(&mut *tx)
        .await?;
    }
    let names: Vec<&str> = declared.iter().map(|d| d.name).collect();
    sqlx::query(
        "UPDATE destinations SET removed_at = now(), updated_at = now()
          WHERE removed_at IS NULL AND NOT (name = ANY ($1))",
    )
    .bind(&names)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// A destination's state as the database holds it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct State {
    /// Name.
    pub name: String,
    /// URL.
    pub url: String,
    /// Subscribed types.
    pub events: Vec<String>,
    /// When a 410 (or an operator) disabled it.
    pub disabled_at: Option<OffsetDateTime>,
    /// Why.
    pub disabled_reason: Option<String>,
    /// When it left the configuration.
    pub removed_at: Option<OffsetDateTime>,
}

/// One destination's state, if known.
pub async fn get<'c>(conn: impl PgExecutor<'c>, name: &str) -> Result<Option<State>, sqlx::Error> {
    sqlx::query_as(
        "SELECT name, url, events, disabled_at, disabled_reason, removed_at FROM destinations WHERE name = $1",
    )
    .bind(name)
    .fetch_optional(conn)
    .await
}

/// Disables (`Some(reason)`) or re-enables (`None`) a destination. Returns whether it exists.
pub async fn set_disabled<'c>(
    conn: impl PgExecutor<'c>,
    name: &str,
    reason: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let n = sqlx::query(
        "UPDATE destinations
            SET disabled_at = CASE WHEN $2::text IS NULL THEN NULL ELSE now() END,
                disabled_reason = $2, updated_at = now()
          WHERE name = $1",
    )
    .bind(name)
    .bind(reason)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(n > 0)
}

/// A delivery claimed for sending.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Due {
    /// `domain_events.seq`.
    pub event_seq: i64,
    /// The fact's id (`evt_…`): sent as `webhook-id` on every attempt.
    pub event_id: String,
    /// The fact's type.
    pub event_type: String,
    /// The exact body.
    pub body: Vec<u8>,
    /// This attempt's number (1 for the first).
    pub attempt: i32,
    /// Start of the retry window.
    pub window_start: OffsetDateTime,
    /// The trace the fact was decided in: each attempt is its child and sends its own `traceparent`.
    pub traceparent: Option<String>,
}

/// Claims up to `limit` due deliveries of `destination` for `lease` (the attempt counter moves up now, so a
/// crash mid-send still counts the attempt). Rows leased by another loop are skipped, not waited for.
pub async fn claim_due<'c>(
    conn: impl PgExecutor<'c>,
    destination: &str,
    limit: i64,
    lease: Duration,
) -> Result<Vec<Due>, sqlx::Error> {
    claim(
        conn,
        destination,
        limit,
        lease,
        "next_attempt_at, event_seq",
    )
    .await
}

/// Claims the circuit breaker's half-open trial: the due delivery of the OLDEST fact (lowest `event_seq`), not
/// the one due longest. A fact queued during the outage is due since it was queued, before every retry; a
/// receiver that fails the first attempt of each message would fail every such trial and keep the breaker open
/// (its cooldown doubling) while retries that it would accept wait. The oldest fact is the one that most needs
/// to get through, and usually already has an attempt behind it. Sorts the destination's due rows (one query
/// per cooldown, at most).
pub async fn claim_trial<'c>(
    conn: impl PgExecutor<'c>,
    destination: &str,
    lease: Duration,
) -> Result<Vec<Due>, sqlx::Error> {
    claim(conn, destination, 1, lease, "event_seq").await
}

async fn claim<'c>(
    conn: impl PgExecutor<'c>,
    destination: &str,
    limit: i64,
    lease: Duration,
    order: &'static str,
) -> Result<Vec<Due>, sqlx::Error> {
    // `order` is one of the two constant orders above, never input.
    let sql = format!(
        "WITH due AS (
             SELECT destination, event_seq FROM domain_deliveries
              WHERE destination = $1 AND status = 'pending' AND next_attempt_at <= now()
                AND (lease_until IS NULL OR lease_until < now())
              ORDER BY {order}
              LIMIT $2 FOR UPDATE SKIP LOCKED)
         UPDATE domain_deliveries d
            SET lease_until = now() + make_interval(secs => $3), attempts = d.attempts + 1, updated_at = now()
           FROM due, domain_events e
          WHERE d.destination = due.destination AND d.event_seq = due.event_seq AND e.seq = d.event_seq
         RETURNING d.event_seq, e.id AS event_id, e.type AS event_type, e.body, d.attempts AS attempt,
                   d.window_start, e.traceparent"
    );
    sqlx::query_as(&sql)
        .bind(destination)
        .bind(limit)
        .bind(lease.as_secs_f64())
        .fetch_all(conn)
        .await
}

/// What one attempt came to.
#[derive(Debug, Clone)]
pub enum AttemptOutcome {
    /// 2xx: done.
    Delivered,
    /// Failed; try again at `next_attempt_at`.
    Retry {
        /// When.
        next_attempt_at: OffsetDateTime,
    },
    /// 410 Gone: the destination is disabled (its deliveries wait for `destinations enable`); this one is
    /// retried once it is enabled again.
    Gone,
    /// The retry window is exhausted: dead-lettered with `reason`, until `hookline events redeliver`.
    Dead {
        /// Why (last status or error, attempts, window).
        reason: String,
    },
}

impl AttemptOutcome {
    /// Database and metrics spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::Retry { .. } => "retry",
            AttemptOutcome::Gone => "gone",
            AttemptOutcome::Dead { .. } => "dead",
        }
    }
}

/// What the destination answered (or why there was no answer).
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// HTTP status, if a response arrived.
    pub http_status: Option<u16>,
    /// Time to the answer (or the failure).
    pub latency: Duration,
    /// Transport error (timeout, connection refused, …), already bounded and free of secrets.
    pub error: Option<String>,
    /// The first bytes of the response body, as text.
    pub response: Option<String>,
}

/// Most characters kept of an error or a response body.
pub const MAX_RECORDED_CHARS: usize = 1024;

fn bounded(s: Option<&str>) -> Option<String> {
    s.map(|s| s.chars().take(MAX_RECORDED_CHARS).collect())
}

/// Records attempt `attempt` of (`destination`, `event_seq`) and moves the delivery on, if the attempt is still
/// the delivery's latest (a loop whose lease expired and was overtaken records nothing and gets `false`).
/// A `Gone` outcome also disables the destination.
pub async fn record_attempt(
    pool: &PgPool,
    destination: &str,
    event_seq: i64,
    attempt: i32,
    answer: &Answer,
    outcome: &AttemptOutcome,
) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let last_error = match (&answer.error, answer.http_status) {
        (Some(e), _) => Some(e.clone()),
        (None, Some(s)) if !(200..300).contains(&s) => Some(format!("HTTP {s}")),
        _ => None,
    };
    let (status, next_at, dead_reason): (&str, Option<OffsetDateTime>, Option<&str>) = match outcome
    {
        AttemptOutcome::Delivered => ("delivered", None, None),
        AttemptOutcome::Retry { next_attempt_at } => ("pending", Some(*next_attempt_at), None),
        AttemptOutcome::Gone => ("pending", None, None),
        AttemptOutcome::Dead { reason } => ("dead", None, Some(reason.as_str())),
    };
    let updated = sqlx::query(
        "UPDATE domain_deliveries
            SET status = $4, next_attempt_at = coalesce($5, now()), lease_until = NULL,
                last_status = $6, last_error = $7, dead_reason = $8,
                delivered_at = CASE WHEN $4 = 'delivered' THEN now() ELSE delivered_at END,
                updated_at = now()
          WHERE destination = $1 AND event_seq = $2 AND attempts = $3 AND status = 'pending'",
    )
    .bind(destination)
    .bind(event_seq)
    .bind(attempt)
    .bind(status)
    .bind(next_at)
    .bind(answer.http_status.map(|s| s as i16))
    .bind(bounded(last_error.as_deref()))
    .bind(bounded(dead_reason))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query(
        "INSERT INTO domain_delivery_attempts
             (destination, event_seq, attempt, http_status, latency_ms, outcome, error, response)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(destination)
    .bind(event_seq)
    .bind(attempt)
    .bind(answer.http_status.map(|s| s as i16))
    .bind(i32::try_from(answer.latency.as_millis()).unwrap_or(i32::MAX))
    .bind(outcome.as_str())
    .bind(bounded(answer.error.as_deref()))
    .bind(bounded(answer.response.as_deref()))
    .execute(&mut *tx)
    .await?;
    if matches!(outcome, AttemptOutcome::Gone) {
        set_disabled(
            &mut *tx,
            destination,
            Some("the destination answered 410 Gone"),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(updated > 0)
}

/// One destination's figures for `hookline destinations status`, `/metrics` and the console.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Status {
    /// Name.
    pub name: String,
    /// URL.
    pub url: String,
    /// Subscribed types.
    pub events: Vec<String>,
    /// Disabled since, and why.
    pub disabled_at: Option<OffsetDateTime>,
    /// Why it is disabled.
    pub disabled_reason: Option<String>,
    /// No longer configured since.
    pub removed_at: Option<OffsetDateTime>,
    /// Deliveries waiting (due or scheduled).
    pub pending: i64,
    /// Of those, how many have failed at least once.
    pub failing: i64,
    /// Dead-lettered deliveries.
    pub dead: i64,
    /// Delivered (all time).
    pub delivered: i64,
    /// Age in seconds of the oldest pending delivery (0 when none).
    pub oldest_pending_secs: f64,
    /// Last 2xx.
    pub last_success_at: Option<OffsetDateTime>,
    /// Last failed attempt, with its status and error.
    pub last_failure_at: Option<OffsetDateTime>,
    /// HTTP status of the last failed attempt.
    pub last_failure_status: Option<i16>,
    /// Error of the last failed attempt.
    pub last_failure_error: Option<String>,
}

/// Every known destination's figures, by name.
pub async fn status<'c>(conn: impl PgExecutor<'c>) -> Result<Vec<Status>, sqlx::Error> {
    sqlx::query_as(
        "SELECT d.name, d.url, d.events, d.disabled_at, d.disabled_reason, d.removed_at,
                coalesce(c.pending, 0) AS pending, coalesce(c.failing, 0) AS failing,
                coalesce(c.dead, 0) AS dead, coalesce(c.delivered, 0) AS delivered,
                coalesce(c.oldest_pending_secs, 0) AS oldest_pending_secs,
                c.last_success_at, f.at AS last_failure_at, f.http_status AS last_failure_status,
                f.error AS last_failure_error
           FROM destinations d
           LEFT JOIN LATERAL (
               SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
                      count(*) FILTER (WHERE status = 'pending' AND attempts > 0) AS failing,
                      count(*) FILTER (WHERE status = 'dead') AS dead,
                      count(*) FILTER (WHERE status = 'delivered') AS delivered,
                      extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8
                          AS oldest_pending_secs,
                      max(delivered_at) AS last_success_at
                 FROM domain_deliveries WHERE destination = d.name) c ON true
           LEFT JOIN LATERAL (
               SELECT at, http_status, error FROM domain_delivery_attempts
                WHERE destination = d.name AND outcome <> 'delivered'
                ORDER BY id DESC LIMIT 1) f ON true
          ORDER BY d.name",
    )
    .fetch_all(conn)
    .await
}

/// One recorded attempt (for `hookline destinations status --attempts` and the console).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Attempt {
    /// The destination.
    pub destination: String,
    /// The fact.
    pub event_seq: i64,
    /// The fact's id.
    pub event_id: String,
    /// Attempt number.
    pub attempt: i32,
    /// HTTP status.
    pub http_status: Option<i16>,
    /// Latency in milliseconds.
    pub latency_ms: i32,
    /// `delivered`, `retry`, `gone` or `dead`.
    pub outcome: String,
    /// Transport error.
    pub error: Option<String>,
    /// First bytes of the answer.
    pub response: Option<String>,
    /// When.
    pub at: OffsetDateTime,
}

/// The latest `limit` attempts to `destination`, newest first.
pub async fn recent_attempts<'c>(
    conn: impl PgExecutor<'c>,
    destination: &str,
    limit: i64,
) -> Result<Vec<Attempt>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.destination, a.event_seq, e.id AS event_id, a.attempt, a.http_status, a.latency_ms,
                a.outcome, a.error, a.response, a.at
           FROM domain_delivery_attempts a JOIN domain_events e ON e.seq = a.event_seq
          WHERE a.destination = $1 ORDER BY a.id DESC LIMIT $2",
    )
    .bind(destination)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The first `limit` attempts per destination to deliver the facts `seqs`, oldest first: one index range of
/// `domain_delivery_attempts_delivery_idx` per known destination, so the cost is bounded by the destinations
/// and `limit`, not by the table.
pub async fn attempts_of_facts<'c>(
    conn: impl PgExecutor<'c>,
    seqs: &[i64],
    limit: i64,
) -> Result<Vec<Attempt>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.destination, a.event_seq, e.id AS event_id, a.attempt, a.http_status, a.latency_ms,
                a.outcome, a.error, a.response, a.at
           FROM destinations d
           CROSS JOIN LATERAL (
               SELECT * FROM domain_delivery_attempts
                WHERE destination = d.name AND event_seq = ANY ($1)
                ORDER BY id LIMIT $2) a
           JOIN domain_events e ON e.seq = a.event_seq
          ORDER BY a.id",
    )
    .bind(seqs)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Which deliveries `hookline events redeliver` selects.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RedeliverFilter {
    /// Only this destination (else every configured destination subscribed to the fact's type).
    pub destination: Option<String>,
    /// Only facts of this type.
    pub event_type: Option<String>,
    /// Only facts recorded at or after this time.
    #[serde(with = "time::serde::rfc3339::option")]
    pub since: Option<OffsetDateTime>,
    /// Only these facts (`evt_…`).
    pub ids: Vec<String>,
}

const REDELIVER_SELECTION: &str = "
    FROM domain_events e
    JOIN destinations d ON d.removed_at IS NULL AND (e.type = ANY (d.events) OR '*' = ANY (d.events))
   WHERE ($1::text IS NULL OR d.name = $1)
     AND ($2::text IS NULL OR e.type = $2)
     AND ($3::timestamptz IS NULL OR e.created_at >= $3)
     AND (cardinality($4::text[]) = 0 OR e.id = ANY ($4))";

/// How many (destination, fact) pairs the filter selects (the dry run).
pub async fn redeliver_count<'c>(
    conn: impl PgExecutor<'c>,
    f: &RedeliverFilter,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(&format!("SELECT count(*) {REDELIVER_SELECTION}"))
        .bind(f.destination.as_deref())
        .bind(f.event_type.as_deref())
        .bind(f.since)
        .bind(&f.ids)
        .fetch_one(conn)
        .await
}

/// Queues every selected (destination, fact) pair again: dead or delivered rows go back to `pending` with a
/// new retry window, missing rows are created, rows still pending are left alone (a loop may be sending them).
/// The receiver gets the same `webhook-id` as before and deduplicates. In the same transaction the run is
/// audited in `replay_runs` (kind `domain_redeliver`, through [`hookline_core::audit`]: who, why, which filter, how
/// many). Returns the audit
/// row's id and how many deliveries were queued.
pub async fn redeliver(
    tx: &mut PgConnection,
    f: &RedeliverFilter,
    operator: &str,
    reason: &str,
) -> Result<(i64, u64), sqlx::Error> {
    let selected = redeliver_count(&mut *tx, f).await?;
    let queued = sqlx::query(&format!(
        "INSERT INTO domain_deliveries (destination, event_seq)
         SELECT d.name, e.seq {REDELIVER_SELECTION}
         ON CONFLICT ON CONSTRAINT domain_deliveries_pkey DO UPDATE
            SET status = 'pending', attempts = 0, next_attempt_at = now(), window_start = now(),
                lease_until = NULL, dead_reason = NULL, updated_at = now()
          WHERE domain_deliveries.status <> 'pending'"
    ))
    .bind(f.destination.as_deref())
    .bind(f.event_type.as_deref())
    .bind(f.since)
    .bind(&f.ids)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let filter = serde_json::to_value(f).unwrap_or(serde_json::Value::Null);
    let run = hookline_core::audit::insert_redelivery(
        &mut *tx,
        operator,
        reason,
        &filter,
        selected,
        queued as i64,
    )
    .await?;
    Ok((run, queued))
}
