//! Gathering deliveries into batches: when what has arrived starts, how much of it goes into one batch, and the
//! task that applies a batch and frees its slot.
//!
//! Why apart from the consume loop: this is the latency/throughput trade (a batch fills while the previous one
//! is in flight, and starts by `batch_linger` at the latest), a policy of its own that the loop only calls; and
//! every batch is recorded with the ack tracker here, before any of it can be settled.

use std::sync::Arc;

use hookline_core::handler::Handler;
use lapin::message::Delivery;
use tokio::sync::{Notify, Semaphore};

use crate::acks::Acks;
use crate::apply_batch::handle_batch;
use crate::context::{metric, ConsumerSettings, Ctx};
use crate::delivery::weight;

/// What [`start_ready`] needs from the session.
pub(crate) struct StartReady<'a, H: Handler> {
    pub(crate) pending: &'a mut Vec<Delivery>,
    /// When the oldest of `pending` arrived.
    pub(crate) pending_since: &'a mut Option<tokio::time::Instant>,
    pub(crate) permits: &'a Arc<Semaphore>,
    pub(crate) settings: &'a ConsumerSettings,
    pub(crate) ctx: &'a Arc<Ctx<H>>,
    pub(crate) acks: &'a Arc<Acks>,
    pub(crate) finished: &'a Arc<Notify>,
}

/// Starts the batches that are ready. Batches fill by themselves: while an earlier batch is in flight, what
/// arrives waits in `pending` until a batch finishes, `pending` holds a full batch (`batch_max`), or its oldest
/// delivery has waited `batch_linger`; with nothing in flight, what has arrived starts at once. So a moderate
/// rate pays a transaction's statements for as many deliveries as arrived during the previous one, an idle
/// worker adds no wait, and a batch that is stuck (a row lock, a slow fetch) delays the next by `batch_linger`
/// at most — the deliveries behind it are not held until it ends.
pub(crate) async fn start_ready<H: Handler>(r: StartReady<'_, H>) {
    let s = r.settings;
    while !r.pending.is_empty() {
        let in_flight = s.concurrency.saturating_sub(r.permits.available_permits());
        let waited = r
            .pending_since
            .is_none_or(|t| t.elapsed() >= s.batch_linger);
        let full = r.pending.iter().map(weight).sum::<usize>() >= s.batch_max;
        if in_flight > 0 && !full && !waited {
            break;
        }
        let Ok(permit) = r.permits.clone().try_acquire_owned() else {
            break;
        };
        let batch = take_batch(r.pending, s.batch_max);
        spawn_batch(r.ctx, r.acks, r.finished, batch, permit).await;
        // What is left arrived after the batch's first delivery; counting from now errs toward starting later
        // by at most one linger, never toward holding a delivery longer than the previous batch took.
        *r.pending_since = (!r.pending.is_empty()).then(tokio::time::Instant::now);
    }
}

/// Takes the oldest deliveries of `pending` that make a batch of at most `batch_max` events (a bundle counts its
/// events, see [`weight`]), at least one delivery.
pub(crate) fn take_batch(pending: &mut Vec<Delivery>, batch_max: usize) -> Vec<Delivery> {
    let mut events = 0;
    let n = pending
        .iter()
        .take_while(|d| {
            events += weight(d);
            events <= batch_max
        })
        .count()
        .max(1)
        .min(pending.len());
    pending.drain(..n).collect()
}

/// Records `batch` with the ack tracker and handles it on its own task, which frees its slot and wakes the
/// session when done.
pub(crate) async fn spawn_batch<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Arc<Acks>,
    finished: &Arc<Notify>,
    batch: Vec<Delivery>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    metrics::histogram!(metric::BATCH_SIZE).record(batch.iter().map(weight).sum::<usize>() as f64);
    acks.received(&batch).await;
    let (ctx, acks, finished) = (ctx.clone(), acks.clone(), finished.clone());
    tokio::spawn(async move {
        handle_batch(&ctx, &acks, batch).await;
        drop(permit);
        finished.notify_one();
    });
}
