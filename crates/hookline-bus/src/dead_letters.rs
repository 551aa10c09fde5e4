//! The dead-letter queue (RabbitMQ side) and its reconciliation with the `dead_letters` table
//! (`hookline_core::dead_letters`, which owns the table's SQL).
//!
//! The worker records a reason for what it dead-letters itself (permanent failures, panics at the limit). But on
//! RabbitMQ 3.10 every requeue — including the ones caused by a worker crash or a lost connection — counts
//! against the quorum queue's delivery limit, so a good message held by a crash-looping worker can reach the DLQ
//! with no reason recorded. Reconciliation makes every DLQ message visible in PostgreSQL (so `hookline status`,
//! `dlq list`, `dlq redrive` and `replay --dead` see it) and drops DLQ copies of events that were in fact applied.

use std::collections::HashSet;

use anyhow::Context;
use hookline_core::config::AmqpEndpoints;
use hookline_core::{dead_letters, markers};
use lapin::message::BasicGetMessage;
use lapin::options::{BasicAckOptions, BasicGetOptions};
use lapin::types::AMQPValue;
use lapin::Channel;
use sqlx::PgPool;

use crate::Topology;

/// What a reconciliation pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// Messages looked at.
    pub seen: u64,
    /// Dead letters recorded for messages that had no reason in the database.
    pub recorded: u64,
    /// DLQ copies dropped because their event had been applied after all.
    pub dropped_applied: u64,
}

/// The `x-death` reason RabbitMQ stamped on a dead-lettered message (`rejected`, `delivery_limit`, …).
pub fn death_reason(msg: &BasicGetMessage) -> Option<String> {
    let headers = msg.delivery.properties.headers().as_ref()?;
    let AMQPValue::FieldArray(deaths) = headers.inner().get("x-death")? else {
        return None;
    };
    let AMQPValue::FieldTable(first) = deaths.as_slice().first()? else {
        return None;
    };
    match first.inner().get("reason")? {
        AMQPValue::LongString(s) => Some(s.to_string()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

/// Fetches up to `max` messages of the dead-letter queue and holds them unacknowledged, so none is fetched
/// twice. The caller acks (drops) or returns each; closing the channel returns whatever is left.
async fn hold_all(
    channel: &Channel,
    topology: &Topology,
    max: u64,
) -> anyhow::Result<Vec<BasicGetMessage>> {
    let mut held = Vec::new();
    while (held.len() as u64) < max {
        let Some(msg) = channel
            .basic_get(
                topology.dead_letter_queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
            .context("basic.get from the dead-letter queue")?
        else {
            break;
        };
        held.push(msg);
    }
    Ok(held)
}

/// The stored event ids a DLQ message refers to (one, or a bundle's; see [`crate::message`]); empty when it is
/// not an event reference at all.
fn event_ids(msg: &BasicGetMessage) -> Vec<i64> {
    let content_type = msg.delivery.properties.content_type().as_ref();
    crate::message::event_ids(content_type.map(|c| c.as_str()), &msg.delivery.data)
}

/// Whether a DLQ message is a copy of any event in `ids`. A bundle (only there if splitting it failed up to the
/// delivery limit) goes with the first of its events that is redriven or discarded: every event it carries has
/// its own `dead_letters` row (reconciliation records each), which stays the operator's handle on the others.
fn copy_of(msg: &BasicGetMessage, ids: &HashSet<i64>) -> bool {
    event_ids(msg).iter().any(|id| ids.contains(id))
}

/// Removes the DLQ copies of the given events (after a discard: a discarded event is never re-published, so
/// every copy in the queue is one of its old ones) and returns how many were removed; every other message goes
/// back to the DLQ unchanged. A redrive uses [`hold`] instead.
pub async fn remove(
    amqp_urls: &AmqpEndpoints,
    topology: &Topology,
    ids: &HashSet<i64>,
) -> anyhow::Result<u64> {
    let conn = crate::connect(amqp_urls, "hookline-dlq-redrive").await?;
    let channel = conn.create_channel().await.context("open channel")?;
    let mut removed = 0;
    for msg in hold_all(&channel, topology, u64::MAX).await? {
        if copy_of(&msg, ids) {
            crate::settle(msg.delivery.acker.ack(BasicAckOptions::default())).await;
            removed += 1;
        } else {
            return_to_queue(&msg).await;
        }
    }
    close(channel, conn, "done").await;
    Ok(removed)
}

/// The DLQ copies of a redrive's events, taken out of the queue (held unacknowledged on their own channel)
/// BEFORE the events are re-published: exactly the copies that redrive replaces. A re-published event that fails
/// again at once is dead-lettered as a fresh message, which stays in the queue — removing "every copy of event
/// N" after the re-publish removed that fresh copy too, and the queue disagreed with `hookline status`.
pub struct Held {
    channel: Channel,
    conn: lapin::Connection,
    copies: Vec<BasicGetMessage>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("copies", &self.copies.len())
            .finish()
    }
}

impl Held {
    /// How many copies are held.
    pub fn len(&self) -> usize {
        self.copies.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }

    /// Drops the held copies of the events in `sent` (the redrive re-published them) and returns how many;
    /// the copies of events it did not get to (an interrupted run) go back to the queue.
    pub async fn remove_sent(self, sent: &HashSet<i64>) -> u64 {
        let mut removed = 0;
        for msg in &self.copies {
            if copy_of(msg, sent) {
                crate::settle(msg.delivery.acker.ack(BasicAckOptions::default())).await;
                removed += 1;
            } else {
                return_to_queue(msg).await;
            }
        }
        close(self.channel, self.conn, "redriven").await;
        removed
    }

    /// Puts every held copy back (the redrive failed).
    pub async fn release(self) {
        for msg in &self.copies {
            return_to_queue(msg).await;
        }
        close(self.channel, self.conn, "released").await;
    }
}

/// Takes the DLQ copies of `ids` out of the queue and holds them (see [`Held`]); every other message goes back
/// at once. Closing the connection without [`Held::remove`] returns the held copies too.
pub async fn hold(
    amqp_urls: &AmqpEndpoints,
    topology: &Topology,
    ids: &HashSet<i64>,
) -> anyhow::Result<Held> {
    let conn = crate::connect(amqp_urls, "hookline-dlq-redrive").await?;
    let channel = conn.create_channel().await.context("open channel")?;
    let mut copies = Vec::new();
    for msg in hold_all(&channel, topology, u64::MAX).await? {
        if copy_of(&msg, ids) {
            copies.push(msg);
        } else {
            return_to_queue(&msg).await;
        }
    }
    Ok(Held {
        channel,
        conn,
        copies,
    })
}

/// One pass over (at most `max`) DLQ messages: applied ones are acked (dropped), those without a recorded
/// reason get one, and the rest return to the DLQ unchanged.
pub async fn reconcile(
    pool: &PgPool,
    amqp_urls: &AmqpEndpoints,
    topology: &Topology,
    consumer: &str,
    max: u64,
) -> anyhow::Result<Reconciled> {
    let conn = crate::connect(amqp_urls, "hookline-dlq-reconcile").await?;
    let channel = conn.create_channel().await.context("open channel")?;
    let held = hold_all(&channel, topology, max).await?;
    let mut report = Reconciled {
        seen: held.len() as u64,
        ..Default::default()
    };
    let ids: Vec<i64> = held.iter().flat_map(event_ids).collect();
    let applied: HashSet<i64> = markers::processed_among(pool, consumer, &ids)
        .await
        .context("look up processed markers")?
        .into_iter()
        .collect();
    for msg in held {
        let carried = event_ids(&msg);
        if carried.is_empty() {
            return_to_queue(&msg).await;
            continue;
        }
        if carried.iter().all(|id| applied.contains(id)) {
            // Applied after all (e.g. committed, then the worker died before acking, repeatedly).
            crate::settle(msg.delivery.acker.ack(BasicAckOptions::default())).await;
            report.dropped_applied += 1;
            continue;
        }
        let death = death_reason(&msg).unwrap_or_else(|| "unknown".into());
        let reason = format!(
            "dead-lettered by RabbitMQ ({death}) with no failure recorded by a worker: the delivery \
             limit was reached through worker crashes or lost connections; redrive it"
        );
        for id in carried.into_iter().filter(|id| !applied.contains(id)) {
            let inserted = dead_letters::record(
                pool,
                dead_letters::Source::Reconciliation,
                consumer,
                id,
                &reason,
            )
            .await
            .context("record dead letter")?;
            report.recorded += u64::from(inserted);
        }
        return_to_queue(&msg).await;
    }
    close(channel, conn, "reconciled").await;
    if report.recorded > 0 || report.dropped_applied > 0 {
        tracing::warn!(
            recorded = report.recorded,
            dropped_applied = report.dropped_applied,
            "dead-letter queue reconciled"
        );
    }
    Ok(report)
}

/// Returns a held message to its queue.
async fn return_to_queue(msg: &BasicGetMessage) {
    crate::requeue(&msg.delivery.acker).await;
}

/// Closes the channel and the connection, each bounded (see [`crate::abandon`]): the broker answers a close
/// within milliseconds when it is healthy, and a close on a connection it is tearing down may never resolve.
async fn close(channel: Channel, conn: lapin::Connection, reason: &str) {
    tokio::time::timeout(crate::SETTLE_TIMEOUT, channel.close(200, reason.into()))
        .await
        .ok();
    crate::abandon(conn, reason).await;
}
