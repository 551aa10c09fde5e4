//! `dead_letters`: what a consumer gave up on, with the reason. This module owns the table's SQL.
//!
//! A dead letter is written by ONE function, [`record`], in two modes: the worker's own failure
//! ([`Source::Worker`]: the reason is replaced and the attempt counted, a resolved letter reopens), and the
//! reconciliation of the dead-letter queue ([`Source::Reconciliation`]: a message RabbitMQ dead-lettered with no
//! reason recorded gets one, and a reason the worker recorded is never overwritten). It is resolved by the
//! worker's marker-first statement when a redrive finally applies the event (`resolution = 'applied'`, see
//! `markers::begin`), or by an operator with [`discard`] (`'discarded'`).

use sqlx::PgExecutor;
use time::OffsetDateTime;

/// Who records a dead letter, which decides what an existing row becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The worker failed the event for good: the new reason replaces the old one, `attempts` counts one more
    /// failure, a resolved letter is unresolved again.
    Worker,
    /// Reconciliation found the message in the dead-letter queue: recorded only if no row exists yet.
    Reconciliation,
}

/// One dead letter, with what is known of its stored event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeadLetter {
    /// The consumer that gave up.
    pub consumer: String,
    /// `webhook_events.id`.
    pub event_id: i64,
    /// The event's provider (`None` once the raw event is purged).
    pub provider: Option<String>,
    /// The event's type.
    pub event_type: Option<String>,
    /// The failure, cause chain one cause per line.
    pub reason: String,
    /// Failures recorded.
    pub attempts: i32,
    /// First failure.
    pub first_failed_at: OffsetDateTime,
    /// Latest failure.
    pub last_failed_at: OffsetDateTime,
    /// When it was resolved (applied or discarded).
    pub resolved_at: Option<OffsetDateTime>,
    /// `applied` or `discarded` once resolved.
    pub resolution: Option<String>,
}

/// Records a dead letter of `consumer` for `event_id`; returns whether a row was written.
pub async fn record<'c>(
    conn: impl PgExecutor<'c>,
    source: Source,
    consumer: &str,
    event_id: i64,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let sql = match source {
        Source::Worker => {
            "INSERT INTO dead_letters (consumer, event_id, reason) VALUES ($1, $2, $3)
             ON CONFLICT ON CONSTRAINT dead_letters_pkey DO UPDATE
               SET reason = EXCLUDED.reason, attempts = dead_letters.attempts + 1,
                   last_failed_at = now(), resolved_at = NULL, resolution = NULL"
        }
        Source::Reconciliation => {
            "INSERT INTO dead_letters (consumer, event_id, reason) VALUES ($1, $2, $3)
             ON CONFLICT ON CONSTRAINT dead_letters_pkey DO NOTHING"
        }
    };
    let written = sqlx::query(sql)
        .bind(consumer)
        .bind(event_id)
        .bind(reason)
        .execute(conn)
        .await?
        .rows_affected();
    Ok(written > 0)
}

const SELECT: &str =
    "SELECT d.consumer, d.event_id, e.provider, e.event_type, d.reason, d.attempts,
        d.first_failed_at, d.last_failed_at, d.resolved_at, d.resolution
     FROM dead_letters d LEFT JOIN webhook_events e ON e.id = d.event_id";

/// Dead letters of `consumers` (unresolved only unless `include_resolved`), oldest first.
pub async fn list<'c>(
    conn: impl PgExecutor<'c>,
    consumers: &[&str],
    include_resolved: bool,
) -> Result<Vec<DeadLetter>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{SELECT} WHERE d.consumer = ANY($1) AND ($2 OR d.resolved_at IS NULL)
         ORDER BY d.first_failed_at, d.event_id, d.consumer"
    ))
    .bind(consumers)
    .bind(include_resolved)
    .fetch_all(conn)
    .await
}

/// The dead letters of one event (one per consumer that gave up on it).
pub async fn of_event<'c>(
    conn: impl PgExecutor<'c>,
    consumers: &[&str],
    event_id: i64,
) -> Result<Vec<DeadLetter>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{SELECT} WHERE d.consumer = ANY($1) AND d.event_id = $2 ORDER BY d.consumer"
    ))
    .bind(consumers)
    .bind(event_id)
    .fetch_all(conn)
    .await
}

/// Resolves the unresolved dead letters of `event_ids` as discarded (never applied); returns the event ids
/// that had one.
pub async fn discard<'c>(
    conn: impl PgExecutor<'c>,
    consumers: &[&str],
    event_ids: &[i64],
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "UPDATE dead_letters SET resolved_at = now(), resolution = 'discarded'
         WHERE consumer = ANY($1) AND resolved_at IS NULL AND event_id = ANY($2)
         RETURNING event_id",
    )
    .bind(consumers)
    .bind(event_ids)
    .fetch_all(conn)
    .await
}

/// Dead letters not resolved yet, all consumers together (the `hookline_dead_letters_unresolved` gauge).
pub async fn unresolved_count<'c>(conn: impl PgExecutor<'c>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL")
        .fetch_one(conn)
        .await
}

/// The `limit` oldest unresolved dead letters of `consumers` (the console's page: bounded whatever the backlog).
pub async fn oldest_unresolved<'c>(
    conn: impl PgExecutor<'c>,
    consumers: &[&str],
    limit: i64,
) -> Result<Vec<DeadLetter>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{SELECT} WHERE d.consumer = ANY($1) AND d.resolved_at IS NULL
         ORDER BY d.first_failed_at, d.event_id, d.consumer LIMIT $2"
    ))
    .bind(consumers)
    .bind(limit)
    .fetch_all(conn)
    .await
}
