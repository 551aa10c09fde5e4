//! `replay_runs`: the audit trail of operator runs. Every replay, dead-letter redrive and discard — from the CLI
//! or the console — writes its row here, through these functions: who, why, which selection, how many, and the
//! cursor that makes an interrupted run resumable. Purges are audited in `purge_runs`, owned by
//! `hookline_ops::retention`.

use sqlx::PgExecutor;
use time::OffsetDateTime;

use crate::events::Selection;

/// Opens an audit row for a replay or redrive (`kind` is `replay` or `dlq_redrive`); returns its id.
pub async fn insert_run<'c>(
    conn: impl PgExecutor<'c>,
    kind: &str,
    operator: &str,
    reason: &str,
    selection: &Selection,
    selected: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO replay_runs (kind, operator, reason, filter, selected)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(kind)
    .bind(operator)
    .bind(reason)
    .bind(sqlx::types::Json(selection))
    .bind(selected)
    .fetch_one(conn)
    .await
}

/// Records a finished discard of dead letters (`kind = 'dlq_discard'`); returns its id.
pub async fn insert_discard<'c>(
    conn: impl PgExecutor<'c>,
    operator: &str,
    reason: &str,
    filter: &serde_json::Value,
    discarded: i64,
    last_event_id: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO replay_runs (kind, operator, reason, filter, selected, published, last_event_id, finished_at)
         VALUES ('dlq_discard', $1, $2, $3, $4, 0, $5, now()) RETURNING id",
    )
    .bind(operator)
    .bind(reason)
    .bind(filter)
    .bind(discarded)
    .bind(last_event_id)
    .fetch_one(conn)
    .await
}

/// Records a finished redelivery of domain events (`kind = 'domain_redeliver'`, `hookline events redeliver`):
/// how many (destination, fact) pairs the filter selected and how many were queued; returns its id.
pub async fn insert_redelivery<'c>(
    conn: impl PgExecutor<'c>,
    operator: &str,
    reason: &str,
    filter: &serde_json::Value,
    selected: i64,
    queued: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO replay_runs (kind, operator, reason, filter, selected, published, finished_at)
         VALUES ('domain_redeliver', $1, $2, $3, $4, $5, now()) RETURNING id",
    )
    .bind(operator)
    .bind(reason)
    .bind(filter)
    .bind(selected)
    .bind(queued)
    .fetch_one(conn)
    .await
}

/// A resumable run as saved: kind, selection, cursor, published count, finish time.
pub type SavedRun = (
    String,
    sqlx::types::Json<Selection>,
    i64,
    i64,
    Option<OffsetDateTime>,
);

/// Reads replay or redrive run `id` (not dry runs, not discards) to resume it.
pub async fn saved_run<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
) -> Result<Option<SavedRun>, sqlx::Error> {
    sqlx::query_as(
        "SELECT kind, filter, last_event_id, published, finished_at
         FROM replay_runs WHERE id = $1 AND kind IN ('replay', 'dlq_redrive') AND NOT dry_run",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Advances a run's cursor once RabbitMQ confirmed every event up to `cursor`.
pub async fn advance<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
    cursor: i64,
    published: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE replay_runs SET last_event_id = $2, published = $3, updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(cursor)
    .bind(published)
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks a run finished.
pub async fn finish<'c>(conn: impl PgExecutor<'c>, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE replay_runs SET finished_at = now(), updated_at = now() WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// One audited operator run, as the console lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunRow {
    /// `replay_runs.id`.
    pub id: i64,
    /// `replay`, `dlq_redrive` or `dlq_discard`.
    pub kind: String,
    /// Who.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// The selection, as JSON text.
    pub filter: String,
    /// Events selected when it started.
    pub selected: Option<i64>,
    /// Events re-delivered so far.
    pub published: i64,
    /// Cursor.
    pub last_event_id: i64,
    /// Start.
    pub started_at: OffsetDateTime,
    /// End (None while running or interrupted: resumable).
    pub finished_at: Option<OffsetDateTime>,
}

/// The most recent runs, newest first, before `before` (keyset on the id; `i64::MAX` for the first page).
pub async fn recent_runs<'c>(
    conn: impl PgExecutor<'c>,
    before: i64,
    limit: i64,
) -> Result<Vec<RunRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, kind, operator, reason, filter::text AS filter, selected, published, last_event_id,
                started_at, finished_at
         FROM replay_runs WHERE id < $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(before)
    .bind(limit)
    .fetch_all(conn)
    .await
}
