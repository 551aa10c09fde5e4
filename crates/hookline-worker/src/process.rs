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

use hookline_core::{dead_letters, events, markers};

use crate::handler::{HandleError, Handler, Outcome, Prepared, StoredEvent};

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
    /// Will never succeed as is: dead-letter with this reason (its causes kept; stored as text by
    /// [`crate::handler::reason_text`]).
    #[error("{0}")]
    Permanent(anyhow::Error),
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
        HandleError::Permanent(r) => ProcessError::Permanent(r.context(context)),
    }
}

/// Processes stored event `event_id` with `handler`, exactly once per `(handler.consumer(), event_id)`, with
/// nothing prepared (see [`process_prepared`]).
pub async fn process_event<H: Handler>(
    pool: &PgPool,
    handler: &H,
    event_id: i64,
) -> Result<Processed, ProcessError> {
    process_prepared(pool, handler, event_id, None).await
}

/// [`process_event`] with what [`Handler::prepare`] read for the event before the transaction.
pub async fn process_prepared<H: Handler>(
    pool: &PgPool,
    handler: &H,
    event_id: i64,
    prepared: Option<Prepared>,
) -> Result<Processed, ProcessError> {
    let mut tx = pool.begin().await.map_err(db_error("begin transaction"))?;
    match apply_in_tx(&mut tx, handler, event_id, prepared).await {
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

/// Why a batch did not commit: the position of the event that failed, and how. Nothing of the batch was
/// committed; the other events are neither applied nor known to fail.
#[derive(Debug)]
pub struct BatchFailed {
    /// Index of the failing event in the batch, when one event caused it (`None`: the transaction itself
    /// failed, e.g. at BEGIN or COMMIT).
    pub index: Option<usize>,
    /// The failure.
    pub error: ProcessError,
}

/// Processes several events in ONE transaction: one commit for the batch, while each event keeps its own
/// marker-first exactly-once guarantee (a duplicate inside the batch finds the marker the batch just inserted).
///
/// Optimistic: the common case (every event applies) costs no savepoints. If any event fails, the whole batch
/// rolls back and the caller learns which event failed; it then handles that one according to its failure and
/// processes the others on their own — so a failure never prevents the others from applying.
pub async fn process_batch<H: Handler>(
    pool: &PgPool,
    handler: &H,
    event_ids: &[i64],
) -> Result<Vec<Processed>, BatchFailed> {
    let items = event_ids.iter().map(|&id| (id, None)).collect();
    process_batch_prepared(pool, handler, items).await
}

/// [`process_batch`] with what [`Handler::prepare`] read for each event.
pub async fn process_batch_prepared<H: Handler>(
    pool: &PgPool,
    handler: &H,
    items: Vec<(i64, Option<Prepared>)>,
) -> Result<Vec<Processed>, BatchFailed> {
    let whole = |error| BatchFailed { index: None, error };
    let mut tx = pool
        .begin()
        .await
        .map_err(db_error("begin transaction"))
        .map_err(whole)?;
    let mut results = Vec::with_capacity(items.len());
    for (index, (id, prepared)) in items.into_iter().enumerate() {
        match apply_in_tx(&mut tx, handler, id, prepared).await {
            Ok(p) => results.push(p),
            Err(error) => {
                tx.rollback().await.ok();
                return Err(BatchFailed {
                    index: Some(index),
                    error,
                });
            }
        }
    }
    #[cfg(feature = "failpoints")]
    fail::fail_point!("worker.before_commit");
    tx.commit()
        .await
        .map_err(db_error("commit"))
        .map_err(whole)?;
    Ok(results)
}

/// Marker first, then the effects, inside the caller's transaction (which the caller commits or rolls back).
async fn apply_in_tx<H: Handler>(
    tx: &mut PgConnection,
    handler: &H,
    event_id: i64,
    prepared: Option<Prepared>,
) -> Result<Processed, ProcessError> {
    // Marker first (one round trip: marker, dead-letter resolution, event read). A concurrent duplicate blocks
    // on the marker's key here until the other transaction ends.
    let claimed = markers::begin(tx, handler.consumer(), event_id)
        .await
        .map_err(db_error("insert processed marker"))?;
    let Some(markers::Claimed {
        provider,
        provider_event_id,
        event_type,
        body,
    }) = claimed
    else {
        // Either the marker already existed (a duplicate: change nothing) or the event is gone.
        let exists = events::exists(&mut *tx, event_id)
            .await
            .map_err(db_error("look up stored event"))?;
        return if exists {
            Ok(Processed::Duplicate)
        } else {
            Err(ProcessError::Permanent(anyhow::anyhow!(
                "stored event {event_id} does not exist (purged, or published from another database)"
            )))
        };
    };
    // The edge bounds these before storing; a row written by an older version or by hand may not respect the
    // bounds. It stops here, dead-lettered with the reason, instead of travelling into keys and logs.
    if let Err(e) = events::check_event_fields(&provider_event_id, event_type.as_deref()) {
        let code = e.code();
        return Err(ProcessError::Permanent(anyhow::Error::new(e).context(
            format!("stored event {event_id} breaks a storage bound ({code})"),
        )));
    }
    if let Some(p) = &prepared {
        if p.key != provider_event_id {
            return Err(ProcessError::Permanent(anyhow::anyhow!(
                "what was prepared for event key {:?} was handed to stored event {event_id} ({:?})",
                p.key,
                provider_event_id
            )));
        }
    }
    let event = StoredEvent {
        id: event_id,
        provider,
        provider_event_id,
        event_type,
        body,
        prepared,
    };
    // A panic is contained to this event.
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
        markers::record_outcome(
            &mut *tx,
            handler.consumer(),
            event_id,
            outcome.kind.as_str(),
            outcome.detail.as_deref(),
        )
        .await
        .map_err(db_error("record outcome"))?;
    }
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
    dead_letters::record(
        pool,
        dead_letters::Source::Worker,
        consumer,
        event_id,
        reason,
    )
    .await
    .context("record dead letter")?;
    Ok(())
}
