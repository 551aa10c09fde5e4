//! `destinations`, `domain_deliveries`, `domain_delivery_attempts`: where facts go over HTTP, and how each
//! delivery is doing. This module owns those tables' SQL.
//!
//! - The configuration's `[[destinations]]` are written to `destinations` at start ([`sync`]); the fan-out in
//!   [`hookline_core::domain_events::record`] reads that table. Their secrets are never stored here: they stay in
//!   the configuration.
//! - The webhook endpoints merchants make through the API are rows of the same table with a `client` (their
//!   secrets live here: no configuration holds them): [`create_endpoint`] and its siblings, every statement scoped
//!   to the owning client. The fan-out gives such an endpoint only the facts its client may see.
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
/// process that delivers or records facts calls it at start. Only the operator's rows (`client IS NULL`) are
/// touched: the endpoints merchants made through the API are not in the configuration, and a configured name that
/// happens to equal an API endpoint's id leaves that endpoint alone.
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
              WHERE destinations.client IS NULL
                AND (destinations.url IS DISTINCT FROM EXCLUDED.url
                     OR destinations.events IS DISTINCT FROM EXCLUDED.events
                     OR destinations.removed_at IS NOT NULL)",
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
          WHERE removed_at IS NULL AND client IS NULL AND NOT (name = ANY ($1))",
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
    /// The API client owning it (a webhook endpoint made through the API), `None` for the operator's.
    pub client: Option<String>,
}

/// Every known destination's figures, by name.
pub async fn status<'c>(conn: impl PgExecutor<'c>) -> Result<Vec<Status>, sqlx::Error> {
    sqlx::query_as(
        "SELECT d.name, d.url, d.events, d.disabled_at, d.disabled_reason, d.removed_at,
                coalesce(c.pending, 0) AS pending, coalesce(c.failing, 0) AS failing,
                coalesce(c.dead, 0) AS dead, coalesce(c.delivered, 0) AS delivered,
                coalesce(c.oldest_pending_secs, 0) AS oldest_pending_secs,
                c.last_success_at, f.at AS last_failure_at, f.http_status AS last_failure_status,
                f.error AS last_failure_error, d.client
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

/// Which deliveries `hookline events redeliver` selects (an API client's endpoint only ever gets the facts its
/// client may see: the fan-out's rule).
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
                       AND (d.client IS NULL OR d.all_events OR d.client = e.client)
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

// --- The endpoints merchants manage through the API -----------------------------------------------------------
//
// Rows of `destinations` with `client` set (migration 20261206000026): the same fan-out, outbox, loops and retry
// rules as the operator's. Every statement below is scoped to the owning client (`client = $…`): another client's
// endpoint is simply not found. A deleted endpoint keeps its row (its delivery history) with `removed_at` set, its
// slot freed and its secrets wiped.

/// How the id of an endpoint made through the API starts (`we_` + 32 hex); refused as a configured name.
pub const ENDPOINT_ID_PREFIX: &str = "we_";

/// Most live endpoints one API client may have (the `slot` column's range).
pub const MAX_ENDPOINTS_PER_CLIENT: i16 = 16;

/// The columns an [`Endpoint`] is read from.
const ENDPOINT_COLUMNS: &str =
    "name, client, url, events, description, disabled_at, disabled_reason, created_at,
    previous_secret_expires_at";

/// An endpoint made through the API, as its client sees it (never with its secrets).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Endpoint {
    /// Its public id (`we_…`), the row's `name`.
    pub name: String,
    /// The owning API client.
    pub client: Option<String>,
    /// Where facts are POSTed.
    pub url: String,
    /// Subscribed types; `*` = all.
    pub events: Vec<String>,
    /// The merchant's note.
    pub description: Option<String>,
    /// Disabled since (by its client, an operator or a 410 Gone).
    pub disabled_at: Option<OffsetDateTime>,
    /// Why.
    pub disabled_reason: Option<String>,
    /// When it was made.
    pub created_at: OffsetDateTime,
    /// Until when the secret before the last rotation still signs (as a second signature).
    pub previous_secret_expires_at: Option<OffsetDateTime>,
}

/// A new endpoint, validated by the caller (the URL's address policy included).
#[derive(Clone)]
pub struct NewEndpoint<'a> {
    /// Public id (`we_…`, fits the name's CHECK).
    pub id: &'a str,
    /// The owning API client.
    pub client: &'a str,
    /// Where facts go.
    pub url: &'a str,
    /// Subscribed types; `*` = all.
    pub events: &'a [String],
    /// The merchant's note.
    pub description: Option<&'a str>,
    /// `whsec_…`.
    pub secret: &'a str,
    /// The client's `all_events`.
    pub all_events: bool,
    /// `[api] allow_private_webhook_urls` as the API sees it.
    pub allow_private: bool,
}

impl std::fmt::Debug for NewEndpoint<'_> {
    // By hand: never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewEndpoint")
            .field("id", &self.id)
            .field("client", &self.client)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// Makes an endpoint in the lowest free slot of its client; `None` when the client already has
/// [`MAX_ENDPOINTS_PER_CLIENT`] live ones. The bound is decided by `destinations_client_slot` in the INSERT itself:
/// two requests that picked the same free slot at once cannot both insert (the loser's `ON CONFLICT … DO NOTHING`
/// inserts nothing and it tries the next free slot).
pub async fn create_endpoint(
    conn: &mut PgConnection,
    new: &NewEndpoint<'_>,
) -> Result<Option<Endpoint>, sqlx::Error> {
    for _ in 0..MAX_ENDPOINTS_PER_CLIENT {
        let made: Option<Endpoint> = sqlx::query_as(&format!(
            "INSERT INTO destinations
                 (name, url, events, client, all_events, description, secret, allow_private, slot)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, s::smallint
               FROM generate_series(1, {MAX_ENDPOINTS_PER_CLIENT}) s
              WHERE NOT EXISTS (SELECT 1 FROM destinations WHERE client = $4 AND slot = s)
              ORDER BY s LIMIT 1
             ON CONFLICT ON CONSTRAINT destinations_client_slot DO NOTHING
             RETURNING {ENDPOINT_COLUMNS}"
        ))
        .bind(new.id)
        .bind(new.url)
        .bind(new.events)
        .bind(new.client)
        .bind(new.all_events)
        .bind(new.description)
        .bind(new.secret)
        .bind(new.allow_private)
        .fetch_optional(&mut *conn)
        .await?;
        if made.is_some() {
            return Ok(made);
        }
        // Nothing inserted: every slot taken, or another request took the one this statement picked.
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM destinations WHERE client = $1 AND slot IS NOT NULL",
        )
        .bind(new.client)
        .fetch_one(&mut *conn)
        .await?;
        if live >= i64::from(MAX_ENDPOINTS_PER_CLIENT) {
            return Ok(None);
        }
    }
    Ok(None)
}

/// A client's live endpoint `id`.
pub async fn get_endpoint<'c>(
    conn: impl PgExecutor<'c>,
    client: &str,
    id: &str,
) -> Result<Option<Endpoint>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {ENDPOINT_COLUMNS} FROM destinations
          WHERE name = $1 AND client = $2 AND removed_at IS NULL"
    ))
    .bind(id)
    .bind(client)
    .fetch_optional(conn)
    .await
}

/// A client's live endpoints, newest first (at most [`MAX_ENDPOINTS_PER_CLIENT`], so the caller pages in memory).
pub async fn list_endpoints<'c>(
    conn: impl PgExecutor<'c>,
    client: &str,
) -> Result<Vec<Endpoint>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {ENDPOINT_COLUMNS} FROM destinations
          WHERE client = $1 AND removed_at IS NULL
          ORDER BY created_at DESC, name DESC"
    ))
    .bind(client)
    .fetch_all(conn)
    .await
}

/// What an update changes (`None`: unchanged).
#[derive(Debug, Clone, Default)]
pub struct EndpointChange<'a> {
    /// A new URL (validated by the caller).
    pub url: Option<&'a str>,
    /// New subscribed types.
    pub events: Option<&'a [String]>,
    /// A new description (`Some(None)` clears it).
    pub description: Option<Option<&'a str>>,
    /// Disable (`true`) or enable (`false`; also lifts a 410's or an operator's disabling).
    pub disabled: Option<bool>,
}

/// Why the client disabled its endpoint (`disabled_reason`).
pub const DISABLED_BY_CLIENT: &str = "disabled through the API";

/// Changes a client's live endpoint in one statement, refreshing its `all_events` and `allow_private`; `None`
/// when it is not one of the client's.
pub async fn update_endpoint<'c>(
    conn: impl PgExecutor<'c>,
    client: &str,
    id: &str,
    change: &EndpointChange<'_>,
    all_events: bool,
    allow_private: bool,
) -> Result<Option<Endpoint>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE destinations
            SET url = coalesce($3, url), events = coalesce($4, events),
                description = CASE WHEN $5 THEN $6 ELSE description END,
                disabled_at = CASE WHEN $7 IS NULL THEN disabled_at
                                   WHEN $7 THEN coalesce(disabled_at, now()) ELSE NULL END,
                disabled_reason = CASE WHEN $7 IS NULL THEN disabled_reason
                                       WHEN $7 THEN coalesce(disabled_reason, $8) ELSE NULL END,
                all_events = $9, allow_private = $10, updated_at = now()
          WHERE name = $1 AND client = $2 AND removed_at IS NULL
         RETURNING {ENDPOINT_COLUMNS}"
    ))
    .bind(id)
    .bind(client)
    .bind(change.url)
    .bind(change.events)
    .bind(change.description.is_some())
    .bind(change.description.flatten())
    .bind(change.disabled)
    .bind(DISABLED_BY_CLIENT)
    .bind(all_events)
    .bind(allow_private)
    .fetch_optional(conn)
    .await
}

/// Rotates a client's endpoint's secret to `secret`: the current one becomes the previous one, which keeps
/// signing (a second signature) for `overlap`; a previous one still in its overlap is dropped. One statement.
pub async fn rotate_endpoint_secret<'c>(
    conn: impl PgExecutor<'c>,
    client: &str,
    id: &str,
    secret: &str,
    overlap: Duration,
) -> Result<Option<Endpoint>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE destinations
            SET previous_secret = secret, previous_secret_expires_at = now() + make_interval(secs => $4),
                secret = $3, updated_at = now()
          WHERE name = $1 AND client = $2 AND removed_at IS NULL
         RETURNING {ENDPOINT_COLUMNS}"
    ))
    .bind(id)
    .bind(client)
    .bind(secret)
    .bind(overlap.as_secs_f64())
    .fetch_optional(conn)
    .await
}

/// Deletes a client's endpoint: it gets no new facts (`removed_at`), its slot is freed and its secrets wiped; the
/// row and its deliveries stay (history). Returns whether it was one of the client's live endpoints.
pub async fn delete_endpoint<'c>(
    conn: impl PgExecutor<'c>,
    client: &str,
    id: &str,
) -> Result<bool, sqlx::Error> {
    let n = sqlx::query(
        "UPDATE destinations
            SET removed_at = now(), slot = NULL, secret = NULL, previous_secret = NULL,
                previous_secret_expires_at = NULL, updated_at = now()
          WHERE name = $1 AND client = $2 AND removed_at IS NULL",
    )
    .bind(id)
    .bind(client)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(n > 0)
}

/// Sets every API endpoint's `all_events` from its client's configuration (`all_events_clients`: the clients
/// configured with `all_events = true`) and `allow_private` from `[api] allow_private_webhook_urls`: run when the
/// API starts, so a changed configuration applies to the endpoints made before it. One statement.
pub async fn refresh_endpoints<'c>(
    conn: impl PgExecutor<'c>,
    all_events_clients: &[String],
    allow_private: bool,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "UPDATE destinations
            SET all_events = (client = ANY ($1)), allow_private = $2, updated_at = now()
          WHERE client IS NOT NULL AND removed_at IS NULL
            AND (all_events IS DISTINCT FROM (client = ANY ($1)) OR allow_private IS DISTINCT FROM $2)",
    )
    .bind(all_events_clients)
    .bind(allow_private)
    .execute(conn)
    .await?
    .rows_affected())
}

/// One fact's delivery to an endpoint, as its client sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EndpointDelivery {
    /// The fact's id (`evt_…`, the `webhook-id`).
    pub event_id: String,
    /// The fact's type.
    pub event_type: String,
    /// `pending`, `delivered` or `dead`.
    pub status: String,
    /// Attempts made.
    pub attempts: i32,
    /// The last answer's HTTP status.
    pub last_status: Option<i16>,
    /// The last failure (transport error or `HTTP nnn`), without the URL.
    pub last_error: Option<String>,
    /// When the next attempt is due (pending only).
    pub next_attempt_at: Option<OffsetDateTime>,
    /// When it was delivered.
    pub delivered_at: Option<OffsetDateTime>,
    /// When it was queued.
    pub created_at: OffsetDateTime,
}

/// A page of an endpoint's deliveries.
#[derive(Debug, Clone)]
pub enum DeliveryPage {
    /// Not one of the client's live endpoints.
    NoEndpoint,
    /// `starting_after` is not a fact delivered to this endpoint.
    UnknownCursor,
    /// Newest fact first; `has_more` when older ones follow.
    Page {
        /// The deliveries.
        deliveries: Vec<EndpointDelivery>,
        /// Whether more follow.
        has_more: bool,
    },
}

/// A client's endpoint's deliveries, newest fact first, `limit` at a time after the fact `starting_after`. Reads
/// only: a page reflects the moment it was read.
pub async fn endpoint_deliveries(
    conn: &mut PgConnection,
    client: &str,
    id: &str,
    starting_after: Option<&str>,
    limit: i64,
) -> Result<DeliveryPage, sqlx::Error> {
    if get_endpoint(&mut *conn, client, id).await?.is_none() {
        return Ok(DeliveryPage::NoEndpoint);
    }
    let before = match starting_after {
        None => i64::MAX,
        Some(cursor) => {
            let seq: Option<i64> = sqlx::query_scalar(
                "SELECT d.event_seq FROM domain_deliveries d JOIN domain_events e ON e.seq = d.event_seq
                  WHERE d.destination = $1 AND e.id = $2",
            )
            .bind(id)
            .bind(cursor)
            .fetch_optional(&mut *conn)
            .await?;
            match seq {
                Some(seq) => seq,
                None => return Ok(DeliveryPage::UnknownCursor),
            }
        }
    };
    let mut deliveries: Vec<EndpointDelivery> = sqlx::query_as(
        "SELECT e.id AS event_id, e.type AS event_type, d.status, d.attempts, d.last_status, d.last_error,
                CASE WHEN d.status = 'pending' THEN d.next_attempt_at END AS next_attempt_at,
                d.delivered_at, d.created_at
           FROM domain_deliveries d JOIN domain_events e ON e.seq = d.event_seq
          WHERE d.destination = $1 AND d.event_seq < $2
          ORDER BY d.event_seq DESC LIMIT $3",
    )
    .bind(id)
    .bind(before)
    .bind(limit + 1)
    .fetch_all(&mut *conn)
    .await?;
    let has_more = deliveries.len() as i64 > limit;
    deliveries.truncate(usize::try_from(limit).unwrap_or(0));
    Ok(DeliveryPage::Page {
        deliveries,
        has_more,
    })
}

/// What a resend came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// Not one of the client's live endpoints.
    NoEndpoint,
    /// No fact the client may see has this id.
    NoEvent,
    /// Queued again (or already waiting for its next attempt).
    Queued,
}

/// Queues the fact `event_id` to the client's endpoint `id` again — same fact, so the same `webhook-id` — if the
/// client may see it (it owns it, or `all_events`): a delivered or dead delivery goes back to `pending` with a new
/// retry window, a missing one is made, a pending one is left to its loop. One statement decides and writes.
pub async fn resend<'c>(
    conn: impl PgExecutor<'c>,
    client: &str,
    all_events: bool,
    id: &str,
    event_id: &str,
) -> Result<Resend, sqlx::Error> {
    let (endpoint, event): (bool, bool) = sqlx::query_as(
        "WITH ep AS (SELECT name FROM destinations WHERE name = $1 AND client = $2 AND removed_at IS NULL),
              ev AS (SELECT seq FROM domain_events WHERE id = $3 AND (client = $2 OR $4)),
              queued AS (
                  INSERT INTO domain_deliveries (destination, event_seq)
                  SELECT ep.name, ev.seq FROM ep, ev
                  ON CONFLICT ON CONSTRAINT domain_deliveries_pkey DO UPDATE
                     SET status = 'pending', attempts = 0, next_attempt_at = now(), window_start = now(),
                         lease_until = NULL, dead_reason = NULL, updated_at = now()
                   WHERE domain_deliveries.status <> 'pending'
                  RETURNING 1)
         SELECT EXISTS (SELECT 1 FROM ep), EXISTS (SELECT 1 FROM ev)",
    )
    .bind(id)
    .bind(client)
    .bind(event_id)
    .bind(all_events)
    .fetch_one(conn)
    .await?;
    Ok(match (endpoint, event) {
        (false, _) => Resend::NoEndpoint,
        (true, false) => Resend::NoEvent,
        (true, true) => Resend::Queued,
    })
}

/// The names of the live API endpoints (the delivery discovers them here).
pub async fn live_endpoints<'c>(conn: impl PgExecutor<'c>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT name FROM destinations WHERE client IS NOT NULL AND removed_at IS NULL ORDER BY name",
    )
    .fetch_all(conn)
    .await
}

/// What the delivery loop of an API endpoint needs for one round, read fresh each round (its URL and secrets may
/// change through the API at any time).
#[derive(Clone, sqlx::FromRow)]
pub struct EndpointTarget {
    /// Where to POST.
    pub url: String,
    /// The current secret (`whsec_…`); `None` once the endpoint is deleted.
    pub secret: Option<String>,
    /// The previous secret while its overlap lasts (the database's clock decides).
    pub previous_secret: Option<String>,
    /// Whether non-public addresses may be reached.
    pub allow_private: bool,
    /// Disabled (by its client, an operator or a 410).
    pub disabled: bool,
    /// Deleted.
    pub removed: bool,
}

impl std::fmt::Debug for EndpointTarget {
    // By hand: never the secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointTarget")
            .field("allow_private", &self.allow_private)
            .field("disabled", &self.disabled)
            .field("removed", &self.removed)
            .finish_non_exhaustive()
    }
}

/// The API endpoint `name`'s target, if it is one.
pub async fn endpoint_target<'c>(
    conn: impl PgExecutor<'c>,
    name: &str,
) -> Result<Option<EndpointTarget>, sqlx::Error> {
    sqlx::query_as(
        "SELECT url, secret,
                CASE WHEN previous_secret_expires_at > now() THEN previous_secret END AS previous_secret,
                allow_private, disabled_at IS NOT NULL AS disabled, removed_at IS NOT NULL AS removed
           FROM destinations WHERE name = $1 AND client IS NOT NULL",
    )
    .bind(name)
    .fetch_optional(conn)
    .await
}
