//! `processed_events`: the processed markers, one per `(consumer, stored event)` whose effect was applied (or
//! deliberately ignored, parked, left to fetch). This module owns the table's SQL; the purge deletes markers
//! together with their raw events (`retention`).
//!
//! The marker is inserted FIRST in the effect's transaction ([`begin`]): a concurrent duplicate blocks on the
//! primary key until the first transaction ends, then inserts nothing and applies nothing.

use sqlx::{PgConnection, PgExecutor};

/// The stored event a new marker was inserted for, read in the same statement.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    /// Configured provider name.
    pub provider: String,
    /// The stored dedupe key.
    pub provider_event_id: String,
    /// Event type.
    pub event_type: Option<String>,
    /// Raw body.
    pub body: Vec<u8>,
}

/// Inserts the marker of `(consumer, event_id)` inside the caller's transaction and, only when it is new,
/// resolves the event's dead letter of that consumer (a redrive that now applies: `resolution = 'applied'`)
/// and reads the stored event — one round trip for the three. `None`: the marker existed (a duplicate) or the
/// event does not exist ([`crate::events::exists`] tells which).
///
/// It is [`begin_many`] with one id: one statement decides a marker, whatever the batch size.
pub async fn begin(
    tx: &mut PgConnection,
    consumer: &str,
    event_id: i64,
) -> Result<Option<Claimed>, sqlx::Error> {
    let claimed = begin_many(tx, consumer, std::slice::from_ref(&event_id)).await?;
    Ok(claimed.into_iter().next().map(|c| c.event))
}

/// A new marker of a batch, with its stored event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedMany {
    /// `webhook_events.id`.
    pub event_id: i64,
    /// The stored event.
    #[sqlx(flatten)]
    pub event: Claimed,
}

/// Claims a whole batch in ONE statement ([`begin`] is this with one id): inserts the markers of `(consumer, id)` for every id (in id
/// order, so concurrent batches take the key locks in the same order and cannot deadlock on them), resolves
/// the dead letters of the new ones and reads their stored events. Returns only the ids whose marker is new and
/// whose event exists; an id given twice is claimed once.
///
/// Every table is reached through `= ANY ($2)` on an index, besides the join: sqlx prepares statements, and a
/// *generic* plan (made once, without the array, assuming 10 elements and the table as small as it was then)
/// may otherwise hash-join the array with a sequential scan of the whole table and keep doing so as it grows —
/// what made the payments lock cost 37 ms per batch at 150 k rows (PROFILING.md).
pub async fn begin_many(
    tx: &mut PgConnection,
    consumer: &str,
    event_ids: &[i64],
) -> Result<Vec<ClaimedMany>, sqlx::Error> {
    sqlx::query_as(
        "WITH marker AS (
             INSERT INTO processed_events (consumer, event_id)
             SELECT $1, id FROM (SELECT DISTINCT unnest($2::bigint[]) AS id) ids ORDER BY id
             ON CONFLICT ON CONSTRAINT processed_events_pkey DO NOTHING
             RETURNING event_id),
         resolved AS (
             UPDATE dead_letters SET resolved_at = now(), resolution = 'applied'
             WHERE consumer = $1 AND event_id = ANY ($2) AND event_id IN (SELECT event_id FROM marker)
               AND resolved_at IS NULL)
         SELECT marker.event_id, e.provider, e.provider_event_id, e.event_type, e.body
         FROM marker JOIN webhook_events e ON e.id = marker.event_id AND e.id = ANY ($2)",
    )
    .bind(consumer)
    .bind(event_ids)
    .fetch_all(&mut *tx)
    .await
}

/// Records several non-`applied` outcomes in one statement (`(event_id, outcome, detail)`).
pub async fn record_outcomes<'c>(
    conn: impl PgExecutor<'c>,
    consumer: &str,
    outcomes: &[(i64, &str, Option<&str>)],
) -> Result<(), sqlx::Error> {
    if outcomes.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = outcomes.iter().map(|o| o.0).collect();
    let kinds: Vec<&str> = outcomes.iter().map(|o| o.1).collect();
    let details: Vec<Option<&str>> = outcomes.iter().map(|o| o.2).collect();
    sqlx::query(
        "UPDATE processed_events p SET outcome = o.outcome, detail = o.detail
           FROM unnest($2::bigint[], $3::text[], $4::text[]) AS o(event_id, outcome, detail)
          WHERE p.consumer = $1 AND p.event_id = ANY ($2) AND p.event_id = o.event_id",
    )
    .bind(consumer)
    .bind(&ids)
    .bind(&kinds)
    .bind(&details)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records a non-`applied` outcome (ignored, parked, needs_fetch) and its detail on the marker.
pub async fn record_outcome<'c>(
    conn: impl PgExecutor<'c>,
    consumer: &str,
    event_id: i64,
    outcome: &str,
    detail: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE processed_events SET outcome = $3, detail = $4 WHERE consumer = $1 AND event_id = $2",
    )
    .bind(consumer)
    .bind(event_id)
    .bind(outcome)
    .bind(detail)
    .execute(conn)
    .await?;
    Ok(())
}

/// Which of `event_ids` have a marker of `consumer`.
pub async fn processed_among<'c>(
    conn: impl PgExecutor<'c>,
    consumer: &str,
    event_ids: &[i64],
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT event_id FROM processed_events WHERE consumer = $1 AND event_id = ANY($2)",
    )
    .bind(consumer)
    .bind(event_ids)
    .fetch_all(conn)
    .await
}

/// A processed marker as operators see it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Marker {
    /// Which consumer.
    pub consumer: String,
    /// `applied`, `ignored`, `parked`, `needs_fetch`.
    pub outcome: String,
    /// Why (for outcomes other than applied).
    pub detail: Option<String>,
    /// When.
    pub processed_at: time::OffsetDateTime,
}

/// The markers of stored event `event_id`, one per consumer of `consumers` that processed it.
pub async fn of_event<'c>(
    conn: impl PgExecutor<'c>,
    consumers: &[&str],
    event_id: i64,
) -> Result<Vec<Marker>, sqlx::Error> {
    sqlx::query_as(
        "SELECT consumer, outcome, detail, processed_at FROM processed_events
         WHERE consumer = ANY($1) AND event_id = $2 ORDER BY consumer",
    )
    .bind(consumers)
    .bind(event_id)
    .fetch_all(conn)
    .await
}
