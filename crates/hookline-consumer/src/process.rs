//! Exactly-once processing of one stored event, independent of how it was delivered.
//!
//! ONE transaction: insert the processed marker first, then apply the effects, then commit. The caller
//! acknowledges the delivery only after this returns `Ok`.
//!
//! Inserting the marker *first* (the "pessimistic" inbox) is what makes concurrent duplicates safe: a second
//! worker processing the same event blocks on the marker's primary key until the first commits, then inserts
//! nothing and applies nothing. If the first rolls back, the second proceeds.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;

use anyhow::Context;
use futures::FutureExt;
use sqlx::{PgConnection, PgPool};
use tracing::Instrument;

use hookline_core::{dead_letters, events, markers};

use hookline_core::handler::{HandleError, Handler, Outcome, Prepared, StoredEvent};

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
    /// [`hookline_core::handler::reason_text`]).
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
    // The caller's span (the worker's `worker.apply`) is the event's place in its trace.
    let traceparent = hookline_core::telemetry::current_traceparent();
    match apply_in_tx(&mut tx, handler, event_id, prepared, traceparent).await {
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
    let items = event_ids
        .iter()
        .map(|&event_id| BatchItem {
            event_id,
            prepared: None,
            traceparent: None,
        })
        .collect();
    process_batch_prepared(pool, handler, items).await
}

/// One event of a batch given to [`process_batch_prepared`].
#[derive(Debug, Clone)]
pub struct BatchItem {
    /// `webhook_events.id`.
    pub event_id: i64,
    /// What [`Handler::prepare`] read for it.
    pub prepared: Option<Prepared>,
    /// The `traceparent` of the span applying it ([`StoredEvent::traceparent`]).
    pub traceparent: Option<String>,
}

/// [`process_batch`] with what [`Handler::prepare`] read for each event.
pub async fn process_batch_prepared<H: Handler>(
    pool: &PgPool,
    handler: &H,
    items: Vec<BatchItem>,
) -> Result<Vec<Processed>, BatchFailed> {
    let whole = |error| BatchFailed { index: None, error };
    // Index plans only: the batch's statements join arrays with growing tables (see `begin_without_seqscan`).
    let mut tx = hookline_core::db::begin_without_seqscan(pool)
        .await
        .map_err(db_error("begin transaction"))
        .map_err(whole)?;
    match apply_batch_in_tx(&mut tx, handler, items).await {
        Ok(results) => {
            #[cfg(feature = "failpoints")]
            fail::fail_point!("worker.before_commit");
            tx.commit()
                .await
                .map_err(db_error("commit"))
                .map_err(whole)?;
            Ok(results)
        }
        Err(failed) => {
            tx.rollback().await.ok();
            Err(failed)
        }
    }
}

/// The batch inside the caller's transaction, with a constant number of statements around the handler: the
/// markers of every event (and their stored events) in one statement, the handler's set-based
/// [`Handler::handle_many`] (or its one-by-one [`Handler::handle`] when it declines), the non-`applied`
/// outcomes in one statement.
async fn apply_batch_in_tx<H: Handler>(
    tx: &mut PgConnection,
    handler: &H,
    items: Vec<BatchItem>,
) -> Result<Vec<Processed>, BatchFailed> {
    let whole = |error| BatchFailed { index: None, error };
    let at = |index: usize, error| BatchFailed {
        index: Some(index),
        error,
    };
    let ids: Vec<i64> = items.iter().map(|i| i.event_id).collect();
    // Marker first, for the whole batch: a concurrent duplicate blocks on its key until the other ends.
    let mut claimed: HashMap<i64, markers::Claimed> =
        markers::begin_many(tx, handler.consumer(), &ids)
            .await
            .map_err(db_error("insert processed markers"))
            .map_err(whole)?
            .into_iter()
            .map(|c| (c.event_id, c.event))
            .collect();
    let unclaimed: Vec<i64> = ids
        .iter()
        .filter(|id| !claimed.contains_key(id))
        .copied()
        .collect();
    let existing: HashSet<i64> = if unclaimed.is_empty() {
        HashSet::new()
    } else {
        events::existing_among(&mut *tx, &unclaimed)
            .await
            .map_err(db_error("look up stored events"))
            .map_err(whole)?
            .into_iter()
            .collect()
    };
    let mut results: Vec<Option<Processed>> = vec![None; items.len()];
    let mut stored = Vec::with_capacity(items.len());
    let mut positions = Vec::with_capacity(items.len());
    let mut taken = HashSet::new();
    for (index, item) in items.into_iter().enumerate() {
        let BatchItem {
            event_id,
            prepared,
            traceparent,
        } = item;
        let Some(c) = claimed.remove(&event_id) else {
            if taken.contains(&event_id) || existing.contains(&event_id) {
                // The marker existed (or an earlier delivery in this batch claimed it): change nothing.
                results[index] = Some(Processed::Duplicate);
                continue;
            }
            return Err(at(
                index,
                ProcessError::Permanent(anyhow::anyhow!(
                    "stored event {event_id} does not exist (purged, or published from another database)"
                )),
            ));
        };
        taken.insert(event_id);
        let event = checked_event(event_id, c, prepared, traceparent).map_err(|e| at(index, e))?;
        stored.push(event);
        positions.push(index);
    }
    if !stored.is_empty() {
        let outcomes = match AssertUnwindSafe(handler.handle_many(&mut *tx, &stored))
            .catch_unwind()
            .await
        {
            Ok(Some(Ok(outcomes))) if outcomes.len() == stored.len() => outcomes,
            Ok(Some(Ok(outcomes))) => {
                return Err(whole(ProcessError::Permanent(anyhow::anyhow!(
                    "handler returned {} outcomes for {} events",
                    outcomes.len(),
                    stored.len()
                ))))
            }
            Ok(Some(Err(e))) => {
                return Err(BatchFailed {
                    index: e.index.and_then(|i| positions.get(i).copied()),
                    error: e.error.into(),
                })
            }
            // A panic in a set-based batch blames no single event: the worker retries them one by one.
            Err(panic) => return Err(whole(ProcessError::Panicked(panic_message(panic)))),
            Ok(None) => {
                let mut outcomes = Vec::with_capacity(stored.len());
                for (k, event) in stored.iter().enumerate() {
                    // Each event's effects in its own trace (facts recorded here take this span's context).
                    let span = tracing::info_span!("worker.effects", event_id = event.id);
                    hookline_core::telemetry::set_parent(&span, event.traceparent.as_deref());
                    let outcome = handle_one(tx, handler, event)
                        .instrument(span)
                        .await
                        .map_err(|e| at(positions[k], e))?;
                    outcomes.push(outcome);
                }
                outcomes
            }
        };
        let notable: Vec<(i64, &str, Option<&str>)> = stored
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| **o != Outcome::applied())
            .map(|(e, o)| (e.id, o.kind.as_str(), o.detail.as_deref()))
            .collect();
        markers::record_outcomes(&mut *tx, handler.consumer(), &notable)
            .await
            .map_err(db_error("record outcomes"))
            .map_err(whole)?;
        for (k, outcome) in outcomes.into_iter().enumerate() {
            results[positions[k]] = Some(Processed::Applied(outcome));
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or(Processed::Duplicate))
        .collect())
}

/// The stored event as the handler sees it, after the checks every event passes (storage bounds, the
/// prepared data's key).
fn checked_event(
    event_id: i64,
    claimed: markers::Claimed,
    prepared: Option<Prepared>,
    traceparent: Option<String>,
) -> Result<StoredEvent, ProcessError> {
    let markers::Claimed {
        provider,
        provider_event_id,
        event_type,
        body,
    } = claimed;
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
    Ok(StoredEvent {
        id: event_id,
        provider,
        provider_event_id,
        event_type,
        body,
        prepared,
        traceparent,
    })
}

/// One event's effects with a panic contained to it.
async fn handle_one<H: Handler>(
    tx: &mut PgConnection,
    handler: &H,
    event: &StoredEvent,
) -> Result<Outcome, ProcessError> {
    match AssertUnwindSafe(handler.handle(&mut *tx, event))
        .catch_unwind()
        .await
    {
        Ok(result) => Ok(result?),
        Err(panic) => Err(ProcessError::Panicked(panic_message(panic))),
    }
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// Marker first, then the effects, inside the caller's transaction (which the caller commits or rolls back).
async fn apply_in_tx<H: Handler>(
    tx: &mut PgConnection,
    handler: &H,
    event_id: i64,
    prepared: Option<Prepared>,
    traceparent: Option<String>,
) -> Result<Processed, ProcessError> {
    // Marker first (one round trip: marker, dead-letter resolution, event read). A concurrent duplicate blocks
    // on the marker's key here until the other transaction ends.
    let claimed = markers::begin(tx, handler.consumer(), event_id)
        .await
        .map_err(db_error("insert processed marker"))?;
    let Some(claimed) = claimed else {
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
    let event = checked_event(event_id, claimed, prepared, traceparent)?;
    let outcome = handle_one(tx, handler, &event).await?;
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
