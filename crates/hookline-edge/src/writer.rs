//! Group commit for the edge: concurrent requests' rows are written together in one multi-row
//! `INSERT … ON CONFLICT DO NOTHING RETURNING`, and each request is answered only after that statement — and so
//! its row — is committed.
//!
//! Why: a commit costs a WAL flush, and one row per commit caps ingest at the disk's flush rate. While a batch
//! is being written, new requests queue up; the next batch takes all of them (up to `batch_max`), so the number
//! of rows per commit grows with the load and latency stays one round trip at low load.

use std::sync::Arc;

use hookline_core::events::{self, OwnedEvent, StoreOutcome};
use hookline_core::supervisor::Supervisor;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

type Reply = oneshot::Sender<Result<StoreOutcome, Arc<sqlx::Error>>>;

/// Handle used by request handlers to store an event through the batch writer.
#[derive(Clone, Debug)]
pub struct BatchWriter {
    tx: mpsc::Sender<(OwnedEvent, Reply)>,
}

/// Why a store did not complete.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The database rejected or failed the batch.
    #[error("storing the batch failed")]
    Database(#[source] Arc<sqlx::Error>),
    /// The writer is gone (shutting down).
    #[error("the batch writer stopped")]
    Closed,
}

impl BatchWriter {
    /// Starts the writer: at most `writers` batches in flight at once, each of at most `batch_max` rows.
    ///
    /// The batching loop runs under `supervisor` (task `batch_writer`): a panic is contained and the loop
    /// restarted with the same queue; a loop that keeps failing is declared dead, which fails liveness.
    pub fn start(
        pool: PgPool,
        batch_max: usize,
        writers: usize,
        supervisor: Supervisor,
    ) -> BatchWriter {
        let (tx, rx) = mpsc::channel(batch_max * writers * 4);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let slots = Arc::new(Semaphore::new(writers));
        tokio::spawn(async move {
            supervisor
                .run(TASK, CancellationToken::new(), |_| {
                    let (rx, pool, slots) = (rx.clone(), pool.clone(), slots.clone());
                    async move {
                        let mut rx = rx.lock().await;
                        run(&mut rx, pool, batch_max, slots).await;
                        Ok(())
                    }
                })
                .await
        });
        BatchWriter { tx }
    }

    /// Stores one event; resolves after the batch holding it committed (or failed).
    pub async fn store(&self, event: OwnedEvent) -> Result<StoreOutcome, WriteError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((event, reply))
            .await
            .map_err(|_| WriteError::Closed)?;
        match answer.await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(e)) => Err(WriteError::Database(e)),
            Err(_) => Err(WriteError::Closed),
        }
    }
}

/// Name of the batching loop for the supervisor.
pub const TASK: &str = "batch_writer";

/// Returns when every sender is gone (the edge is shutting down).
async fn run(
    rx: &mut mpsc::Receiver<(OwnedEvent, Reply)>,
    pool: PgPool,
    batch_max: usize,
    slots: Arc<Semaphore>,
) {
    loop {
        // Take a writer slot first: while every slot is busy, requests accumulate and form the next batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        // A request that already gave up (answered 503 after its time budget) is not written: the provider
        // will retry it, and writing it now would only lengthen the queue behind a slow database.
        let mut batch = Vec::with_capacity(batch_max);
        if !first.1.is_closed() {
            batch.push(first);
        }
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(item) if item.1.is_closed() => {}
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let pool = pool.clone();
        tokio::spawn(async move {
            write(&pool, batch).await;
            drop(slot);
        });
    }
}

async fn write(pool: &PgPool, batch: Vec<(OwnedEvent, Reply)>) {
    let (events, replies): (Vec<OwnedEvent>, Vec<Reply>) = batch.into_iter().unzip();
    metrics::histogram!("hookline_edge_batch_rows").record(events.len() as f64);
    // Replies whose request already gave up (timed out) are dropped receivers: nothing to do for them; the row
    // is still stored, and the provider's retry will be answered as a duplicate.
    match insert_with_retry(pool, &events).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Err(e) if events.len() > 1 && !hookline_core::db::is_transient(&e) => {
            // One row can fail the whole statement (a value PostgreSQL refuses, an index row over its limit),
            // and nothing of the batch was written. Its neighbours must not pay for it: write each row on its
            // own, so the bad one is answered alone and the others are stored and answered normally.
            metrics::counter!("hookline_edge_batch_isolations_total").increment(1);
            tracing::warn!(
                rows = events.len(),
                error.message = %e,
                "group commit refused; storing the batch's rows one by one"
            );
            for (event, reply) in events.into_iter().zip(replies) {
                let single = std::slice::from_ref(&event);
                let result = insert_with_retry(pool, single)
                    .await
                    .map(|mut o| o.pop().unwrap_or(StoreOutcome::Duplicate(None)));
                let _ = reply.send(result.map_err(Arc::new));
            }
        }
        Err(e) => {
            let e = Arc::new(e);
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// One multi-row INSERT, retried once on a deadlock (should not happen with key-ordered inserts).
async fn insert_with_retry(
    pool: &PgPool,
    events: &[OwnedEvent],
) -> Result<Vec<StoreOutcome>, sqlx::Error> {
    match events::insert_events_batch(pool, events).await {
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("40P01") => {
            events::insert_events_batch(pool, events).await
        }
        other => other,
    }
}
