//! Exactly-once processing of one stored event, independent of how it was delivered.
//!
//! ONE transaction: insert the processed marker first, then apply the effects, then commit. The caller
//! acknowledges the delivery only after this returns `Ok`.
//!
//! Inserting the marker *first* (the "pessimistic" inbox) is what makes concurrent duplicates safe: a second
//! worker processing the same event blocks on the marker's primary key until the first commits, then inserts
//! nothing and applies nothing. If the first rolls back, the second proceeds.

use anyhow::Context;
use sqlx::PgPool;

use crate::handler::{HandleError, Handler, Outcome, StoredEvent};

/// Result of a processing attempt that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// This attempt applied the event (marker inserted, effects committed).
    Applied(Outcome),
    /// A marker already existed: the effect was applied before. Nothing was changed.
    Duplicate,
}

/// Result of a failed attempt.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// Retry later (in-process backoff): the database is unavailable or a transaction conflicted.
    #[error("transient failure")]
    Transient(#[source] anyhow::Error),
    /// Will never succeed as is: dead-letter with this reason.
    #[error("{0}")]
    Permanent(String),
}

impl From<HandleError> for ProcessError {
    fn from(e: HandleError) -> Self {
        match e {
            HandleError::Permanent(r) => ProcessError::Permanent(r),
            HandleError::Transient(e) => ProcessError::Transient(e),
        }
    }
}

fn db_error(context: &'static str) -> impl FnOnce(sqlx::Error) -> ProcessError {
    move |e| match HandleError::from(e) {
        HandleError::Transient(e) => ProcessError::Transient(e.context(context)),
        HandleError::Permanent(r) => ProcessError::Permanent(format!("{context}: {r}")),
    }
}

/// Processes stored event `event_id` with `handler`, exactly once per `(handler.consumer(), event_id)`.
pub async fn process_event<H: Handler>(
    pool: &PgPool,
    handler: &H,
    event_id: i64,
) -> Result<Processed, ProcessError> {
    let mut tx = pool.begin().await.map_err(db_error("begin transaction"))?;
    let inserted = sqlx::query(
        "INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2)
         ON CONFLICT ON CONSTRAINT processed_events_pkey DO NOTHING",
    )
    .bind(handler.consumer())
    .bind(event_id)
    .execute(&mut *tx)
    .await
    .map_err(db_error("insert processed marker"))?
    .rows_affected();
    if inserted == 0 {
        // Already processed (possibly by a concurrent worker that just committed): commit nothing.
        tx.rollback().await.ok();
        return Ok(Processed::Duplicate);
    }
    let row: Option<(String, String, Option<String>, Vec<u8>)> = sqlx::query_as(
        "SELECT provider, provider_event_id, event_type, body FROM webhook_events WHERE id = $1",
    )
    .bind(event_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error("load stored event"))?;
    let Some((provider, provider_event_id, event_type, body)) = row else {
        tx.rollback().await.ok();
        return Err(ProcessError::Permanent(format!(
            "stored event {event_id} does not exist (purged, or published from another database)"
        )));
    };
    let event = StoredEvent {
        id: event_id,
        provider,
        provider_event_id,
        event_type,
        body,
    };
    let outcome = match handler.handle(&mut tx, &event).await {
        Ok(o) => o,
        Err(e) => {
            tx.rollback().await.ok();
            return Err(e.into());
        }
    };
    if outcome != Outcome::applied() {
        sqlx::query(
            "UPDATE processed_events SET outcome = $3, detail = $4 WHERE consumer = $1 AND event_id = $2",
        )
        .bind(handler.consumer())
        .bind(event_id)
        .bind(outcome.kind.as_str())
        .bind(&outcome.detail)
        .execute(&mut *tx)
        .await
        .map_err(db_error("record outcome"))?;
    }
    // A redriven dead letter that now applies is resolved in the same transaction.
    sqlx::query(
        "UPDATE dead_letters SET resolved_at = now()
         WHERE consumer = $1 AND event_id = $2 AND resolved_at IS NULL",
    )
    .bind(handler.consumer())
    .bind(event_id)
    .execute(&mut *tx)
    .await
    .map_err(db_error("resolve dead letter"))?;
    #[cfg(feature = "failpoints")]
    fail::fail_point!("worker.before_commit");
    tx.commit().await.map_err(db_error("commit"))?;
    Ok(Processed::Applied(outcome))
}

/// Records a dead letter (or one more failure of a known one). Its own short transaction: the effect's
/// transaction was rolled back.
pub async fn record_dead_letter(
    pool: &PgPool,
    consumer: &str,
    event_id: i64,
    reason: &str,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO dead_letters (consumer, event_id, reason) VALUES ($1, $2, $3)
         ON CONFLICT ON CONSTRAINT dead_letters_pkey DO UPDATE
           SET reason = EXCLUDED.reason, attempts = dead_letters.attempts + 1,
               last_failed_at = now(), resolved_at = NULL",
    )
    .bind(consumer)
    .bind(event_id)
    .bind(reason)
    .execute(pool)
    .await
    .context("record dead letter")?;
    Ok(())
}
