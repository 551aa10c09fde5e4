//! Exactly-once processing of one stored event, independent of how it was delivered.
//!
//! ONE transaction: insert the processed marker first, then apply the effects, then commit. The caller
//! acknowledges the delivery only after this returns `Ok`.
//!
//! Inserting the marker *first* (the "pessimistic" inbox) is what makes concurrent duplicates safe: a second
//! worker processing the same event blocks on the marker's primary key until the first commits, then inserts
//! nothing and applies nothing. If the first rolls back, the second proceeds.

use std::panic::AssertUnwindSafe;

use anyhow::Context;
use futures::FutureExt;
use sqlx::{PgConnection, PgPool};

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
    /// The handler panicked (a bug, or a payload it cannot survive). Whether a retry helps is unknown: the
    /// delivery is requeued and the queue's delivery limit eventually dead-letters it.
    #[error("handler panicked: {0}")]
    Panicked(String),
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
    match apply_in_tx(&mut tx, handler, event_id).await {
        Ok(Processed::Applied(outcome)) => {
            #[cfg(feature = "failpoints")]
            fail::fail_point!("worker.before_commit");
            tx.commit().await.map_err(db_error("commit"))?;
            Ok(Processed::Applied(outcome))
        }
        other => {
            // Duplicate (nothing written) or failure: end the transaction without effect.
            tx.rollback().await.ok();
            other
        }
    }
}

/// Processes several events in ONE transaction, each inside its own savepoint: one commit for the batch, while
/// each event keeps its own marker-first exactly-once guarantee and its own failure isolation (a failing event
/// is rolled back to its savepoint; the others commit).
///
/// Returns one result per id, in order, valid only if the batch committed; `Err` means nothing committed.
pub async fn process_batch<H: Handler>(
    pool: &PgPool,
    handler: &H,
    event_ids: &[i64],
) -> Result<Vec<Result<Processed, ProcessError>>, ProcessError> {
    let mut tx = pool.begin().await.map_err(db_error("begin transaction"))?;
    let mut results = Vec::with_capacity(event_ids.len());
    for &id in event_ids {
        sqlx::query("SAVEPOINT event")
            .execute(&mut *tx)
            .await
            .map_err(db_error("savepoint"))?;
        let result = apply_in_tx(&mut tx, handler, id).await;
        let end = if result.is_ok() {
            "RELEASE SAVEPOINT event"
        } else {
            "ROLLBACK TO SAVEPOINT event"
        };
        sqlx::query(end)
            .execute(&mut *tx)
            .await
            .map_err(db_error("end savepoint"))?;
        results.push(result);
    }
    #[cfg(feature = "failpoints")]
    fail::fail_point!("worker.before_commit");
    tx.commit().await.map_err(db_error("commit"))?;
    Ok(results)
}

/// Marker first, then the effects, inside the caller's transaction (which the caller commits or rolls back).
async fn apply_in_tx<H: Handler>(
    tx: &mut PgConnection,
    handler: &H,
    event_id: i64,
) -> Result<Processed, ProcessError> {
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
        // Already processed (possibly by a concurrent worker that just committed): change nothing.
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
    // A panic is contained to this event (in a batch, the others still commit).
    let outcome = match AssertUnwindSafe(handler.handle(&mut *tx, &event))
        .catch_unwind()
        .await
    {
        Ok(result) => result?,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            return Err(ProcessError::Panicked(msg));
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
