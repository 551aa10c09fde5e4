//! `event_outbox`: the stored webhook events RabbitMQ has not confirmed yet. This module owns the table's SQL.
//!
//! A row is written by a trigger in the transaction that stores the event (migration
//! `20261201000009_event_outbox.sql`: whoever inserts into `webhook_events`, the event is in the outbox when the
//! insert commits). The relay then, in one transaction per batch:
//!
//! 1. claims rows ([`claim`] for the ids the edge handed over, [`claim_due`] for the sweeper): `DELETE …
//!    RETURNING` over rows selected `FOR UPDATE SKIP LOCKED`, so a row another relay (or this relay's other path)
//!    is publishing is skipped, never published twice at the same time;
//! 2. publishes the claimed events with confirms;
//! 3. [`put_back`]s the ones RabbitMQ did not confirm, and commits.
//!
//! A crash or a lost connection before the commit undoes the claim: the rows are still here and the sweeper
//! publishes them again (at least once; the worker deduplicates). The stored event itself is never updated —
//! the reason for this table: marking `webhook_events` rewrote a large row and its eight index entries per event.

use sqlx::{PgConnection, PgExecutor};
use time::OffsetDateTime;

/// A claimed outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Claimed {
    /// `webhook_events.id`.
    pub event_id: i64,
    /// When it entered the outbox (kept when it is put back).
    pub enqueued_at: OffsetDateTime,
}

/// A claimed row with the stored event's fields its message carries.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimedEvent {
    /// `webhook_events.id`.
    pub event_id: i64,
    /// When it entered the outbox.
    pub enqueued_at: OffsetDateTime,
    /// Configured provider name.
    pub provider: String,
    /// The provider's event id.
    pub provider_event_id: String,
    /// Event type, when known.
    pub event_type: Option<String>,
    /// The trace the event was received in (`webhook_events.traceparent`).
    pub traceparent: Option<String>,
}

impl ClaimedEvent {
    /// The outbox row alone.
    pub fn claimed(&self) -> Claimed {
        Claimed {
            event_id: self.event_id,
            enqueued_at: self.enqueued_at,
        }
    }
}

/// Claims those of `ids` that are still in the outbox and not claimed by another transaction, in id order.
/// Ids already published (by the sweeper, or by another relay) are simply not returned.
pub async fn claim(tx: &mut PgConnection, ids: &[i64]) -> Result<Vec<Claimed>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "DELETE FROM event_outbox o
         USING (SELECT event_id FROM event_outbox WHERE event_id = ANY ($1)
                ORDER BY event_id FOR UPDATE SKIP LOCKED) c
         WHERE o.event_id = c.event_id
         RETURNING o.event_id, o.enqueued_at",
    )
    .bind(ids)
    .fetch_all(&mut *tx)
    .await
}

/// Claims up to `limit` rows that entered the outbox at least `min_age_secs` ago and that no other transaction
/// holds, lowest id first, with their events' fields. A row whose event no longer exists (deleted by hand) is
/// claimed and not returned: committing drops it.
pub async fn claim_due(
    tx: &mut PgConnection,
    min_age_secs: f64,
    limit: i64,
) -> Result<Vec<ClaimedEvent>, sqlx::Error> {
    sqlx::query_as(
        "WITH c AS (
             DELETE FROM event_outbox o
             USING (SELECT event_id FROM event_outbox
                    WHERE enqueued_at <= now() - make_interval(secs => $1)
                    ORDER BY event_id LIMIT $2 FOR UPDATE SKIP LOCKED) d
             WHERE o.event_id = d.event_id
             RETURNING o.event_id, o.enqueued_at)
         SELECT c.event_id, c.enqueued_at, e.provider, e.provider_event_id, e.event_type, e.traceparent
         FROM c JOIN webhook_events e ON e.id = c.event_id
         ORDER BY c.event_id",
    )
    .bind(min_age_secs)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await
}

/// Returns claimed rows to the outbox (their publish was not confirmed), with their original enqueue time so
/// the sweeper's age and the backlog's oldest age stay true.
pub async fn put_back(tx: &mut PgConnection, rows: &[Claimed]) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.event_id).collect();
    let at: Vec<OffsetDateTime> = rows.iter().map(|r| r.enqueued_at).collect();
    sqlx::query(
        "INSERT INTO event_outbox (event_id, enqueued_at)
         SELECT * FROM unnest($1::int8[], $2::timestamptz[])
         ON CONFLICT ON CONSTRAINT event_outbox_pkey DO NOTHING",
    )
    .bind(&ids)
    .bind(&at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The outbox as the database sees it: committed events not yet confirmed by RabbitMQ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    /// Rows in the outbox.
    pub count: i64,
    /// Age in seconds of the oldest of them (0 when there are none).
    pub oldest_secs: f64,
}

impl Backlog {
    /// Sets `hookline_relay_backlog` and `hookline_relay_oldest_unpublished_seconds`.
    pub fn report(&self) {
        metrics::gauge!("hookline_relay_backlog").set(self.count as f64);
        metrics::gauge!("hookline_relay_oldest_unpublished_seconds").set(self.oldest_secs);
    }
}

/// Reads the backlog from the table (it holds only what is unpublished, so this is proportional to the
/// backlog). Health and metrics use this, never a counter kept in memory: a dead relay cannot keep it at 0.
pub async fn backlog<'c>(conn: impl PgExecutor<'c>) -> Result<Backlog, sqlx::Error> {
    let (count, oldest): (i64, Option<f64>) = sqlx::query_as(
        "SELECT count(*), extract(epoch FROM now() - min(enqueued_at))::float8 FROM event_outbox",
    )
    .fetch_one(conn)
    .await?;
    Ok(Backlog {
        count,
        oldest_secs: oldest.unwrap_or(0.0).max(0.0),
    })
}
