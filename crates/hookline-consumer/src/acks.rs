//! Settling deliveries on one channel, with one `multiple` ack per committed batch where that is safe.
//!
//! Why: RabbitMQ handles an ack per frame; a batch of 32 committed deliveries acked one by one costs 32 frames and
//! 32 quorum-queue commands, acked with `multiple` it costs one. But `basic.ack(tag, multiple = true)` settles
//! *every* outstanding delivery of the channel up to `tag`, and batches run concurrently on one channel and commit
//! in any order: a batch that commits while an earlier delivery is still being processed (or backing off) must not
//! ack it — if the worker then crashed, that event's acknowledgement would have preceded its effect.
//!
//! So every settlement (ack, reject, requeue) of a channel goes through one [`Acks`], which knows the tags
//! received and not yet settled. A committed batch is acked with `multiple` up to its highest tag only when no
//! lower tag is outstanding; otherwise each of its deliveries is acked on its own, exactly as before. The decision
//! and the frame are made under one lock, so no tag is ever settled twice (which RabbitMQ answers by closing the
//! channel: `PRECONDITION_FAILED - unknown delivery tag`).
//!
//! Every settle frame is bounded by [`SETTLE_TIMEOUT`] (see [`hookline_bus::settle`]): lapin can leave a frame
//! queued on a connection the broker is closing unresolved forever (amqp-rs/lapin#409), and a batch task stuck
//! there would keep its concurrency permit (shared by every session of the consumer) and this tracker's lock.
//! A settle that times out counts as not sent: the delivery is redelivered on the next session and the processed
//! marker makes it a no-op.
//!
//! `ack` and `reject` below are the tracker's calls as the apply paths make them: a frame that could not be sent
//! is logged, never an error (the broker redelivers what was not settled).

use std::collections::BTreeSet;

use hookline_bus::settle;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicRejectOptions};
use tokio::sync::Mutex;

/// Metric names.
pub mod metric {
    /// Counter: ack frames sent, by `mode` (`multiple`: one frame for a committed batch; `single`).
    pub const ACK_FRAMES: &str = "hookline_worker_ack_frames_total";
}

/// How a committed batch is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckPlan {
    /// One `basic.ack(max, multiple = true)`: every tag up to `max` is settled or in this batch.
    Multiple(u64),
    /// One `basic.ack` per delivery: a lower tag is still outstanding.
    Each,
}

/// The plan for a committed batch with `tags`, given the tags still outstanding once the batch's own are removed.
pub fn plan(outstanding: &BTreeSet<u64>, tags: &[u64]) -> AckPlan {
    let Some(&max) = tags.iter().max() else {
        return AckPlan::Each;
    };
    if tags.len() > 1 && outstanding.first().is_none_or(|&low| low > max) {
        AckPlan::Multiple(max)
    } else {
        AckPlan::Each
    }
}

/// The settlements of one channel (one consumer session). Deliveries of another channel must not be settled here.
#[derive(Debug, Default)]
pub struct Acks {
    outstanding: Mutex<BTreeSet<u64>>,
}

impl Acks {
    /// Records deliveries taken from the consumer, before any of them can be settled.
    pub async fn received(&self, deliveries: &[Delivery]) {
        let mut outstanding = self.outstanding.lock().await;
        outstanding.extend(deliveries.iter().map(|d| d.delivery_tag));
    }

    /// Acknowledges the deliveries of a committed batch: one `multiple` ack when every lower tag is settled,
    /// otherwise one ack each. Returns the tags whose ack could not be sent (channel closed: they will be
    /// redelivered, and the processed markers make that a no-op).
    pub async fn ack_committed(&self, deliveries: &[&Delivery]) -> Vec<u64> {
        let mut outstanding = self.outstanding.lock().await;
        let tags: Vec<u64> = deliveries.iter().map(|d| d.delivery_tag).collect();
        for tag in &tags {
            outstanding.remove(tag);
        }
        match plan(&outstanding, &tags) {
            AckPlan::Multiple(max) => {
                let Some(last) = deliveries.iter().find(|d| d.delivery_tag == max) else {
                    return tags;
                };
                metrics::counter!(metric::ACK_FRAMES, "mode" => "multiple").increment(1);
                if settle(last.acker.ack(BasicAckOptions { multiple: true })).await {
                    Vec::new()
                } else {
                    tags
                }
            }
            AckPlan::Each => {
                let mut failed = Vec::new();
                for d in deliveries {
                    metrics::counter!(metric::ACK_FRAMES, "mode" => "single").increment(1);
                    if !settle(d.acker.ack(BasicAckOptions::default())).await {
                        failed.push(d.delivery_tag);
                    }
                }
                failed
            }
        }
    }

    /// Acknowledges one delivery. False when the ack could not be sent.
    pub async fn ack(&self, delivery: &Delivery) -> bool {
        self.ack_committed(&[delivery]).await.is_empty()
    }

    /// Rejects one delivery without requeueing it (to the dead-letter queue). False when it could not be sent.
    pub async fn reject(&self, delivery: &Delivery) -> bool {
        let mut outstanding = self.outstanding.lock().await;
        outstanding.remove(&delivery.delivery_tag);
        settle(delivery.acker.reject(BasicRejectOptions { requeue: false })).await
    }

    /// Returns one delivery to the queue (counted against its delivery limit).
    pub async fn requeue(&self, delivery: &Delivery) {
        let mut outstanding = self.outstanding.lock().await;
        outstanding.remove(&delivery.delivery_tag);
        hookline_bus::requeue(&delivery.acker).await;
    }
}

/// Acknowledges one applied delivery; an ack that could not be sent is logged (the event is redelivered and its
/// processed marker makes that a no-op).
pub(crate) async fn ack(acks: &Acks, delivery: &Delivery, event_id: i64) {
    if !acks.ack(delivery).await {
        // The channel is closed or recovering: the ack was not sent. The message will be redelivered and the
        // processed marker makes that a no-op.
        tracing::warn!(
            event_id,
            delivery_tag = delivery.delivery_tag,
            "ack not delivered (channel closed); the event will be redelivered and deduplicated"
        );
    }
}

/// Rejects one delivery to the dead-letter queue; a reject that could not be sent is logged.
pub(crate) async fn reject(acks: &Acks, delivery: &Delivery) {
    if !acks.reject(delivery).await {
        tracing::warn!(
            delivery_tag = delivery.delivery_tag,
            "reject not delivered (channel closed); the message will be redelivered"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tags: &[u64]) -> BTreeSet<u64> {
        tags.iter().copied().collect()
    }

    #[test]
    fn a_batch_with_nothing_lower_outstanding_is_acked_once_up_to_its_highest_tag() {
        assert_eq!(plan(&set(&[]), &[3, 1, 2]), AckPlan::Multiple(3));
        // Higher tags still outstanding (later batches in flight) do not matter.
        assert_eq!(plan(&set(&[7, 8]), &[4, 5, 6]), AckPlan::Multiple(6));
    }

    #[test]
    fn a_lower_outstanding_tag_forces_one_ack_per_delivery() {
        // Delivery 2 is still being processed: a multiple ack of 6 would acknowledge it before its effect.
        assert_eq!(plan(&set(&[2]), &[4, 5, 6]), AckPlan::Each);
        // A tag between the batch's own tags counts as lower too.
        assert_eq!(plan(&set(&[5]), &[4, 6]), AckPlan::Each);
    }

    #[test]
    fn a_single_delivery_or_an_empty_batch_is_acked_on_its_own() {
        assert_eq!(plan(&set(&[]), &[9]), AckPlan::Each);
        assert_eq!(plan(&set(&[]), &[]), AckPlan::Each);
    }
}
