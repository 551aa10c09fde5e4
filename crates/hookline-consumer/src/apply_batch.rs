//! The batch path: several deliveries (single messages, and bundles on their first delivery) applied in ONE
//! transaction, acked after its commit — with one `multiple` ack where that is safe ([`crate::acks`]).
//!
//! Why apart from the one-by-one path: a batch pays a transaction's statements once for many events, and its
//! failure handling is its own — which delivery failed the transaction, what each of the others does next — while
//! the outcome of every event must stay what the one-by-one path ([`crate::apply_single`]) would have given it.

use std::sync::Arc;

use futures::future::join_all;
use hookline_bus::publisher::traceparent_of;
use hookline_bus::{message, EventMessage};
use hookline_core::handler::{reason_text, Handler};
use hookline_core::telemetry;
use lapin::message::Delivery;
use tracing::Instrument;

use crate::acks::{reject, Acks};
use crate::apply_single::apply_delivery;
use crate::bundles::split;
use crate::context::{metric, Ctx};
use crate::dead_letter::{dead_letter, requeue_panicked};
use crate::delivery::{
    apply_span, broker_delivery_count, content_type, delivery_count, event_ref, weight,
};
use crate::process::{process_batch_prepared, BatchFailed, BatchItem, ProcessError, Processed};

/// One delivery of a batch and the events it carries (one, or a bundle's), each with its apply span.
struct Unit {
    delivery: Delivery,
    bundle: bool,
    events: Vec<(EventMessage, tracing::Span)>,
}

/// Processes several deliveries in one transaction (see [`crate::process_batch`]) and acks each after the
/// commit.
///
/// Bundles (several events in one message, see [`hookline_bus::message`]) take part only on their first
/// delivery: a redelivered bundle (a crash, a lost connection) is split into single messages before anything is
/// applied, and so is every bundle of a batch that failed — a bundle is settled as a whole, and a poison event
/// must be retried and dead-lettered alone, exactly as a single message is, with the attempts the bundle used
/// counted ([`split`]).
///
/// If the batch fails, the single delivery that failed is handled according to its failure without running it
/// again (a panic is requeued, a permanent failure dead-lettered — so a poison message costs one attempt per
/// delivery, batch or not), and every other single delivery goes through the one-by-one path, which applies it
/// or backs off.
pub(crate) async fn handle_batch<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    deliveries: Vec<Delivery>,
) {
    let consumer = ctx.handler.consumer();
    let started = std::time::Instant::now();
    let batch_size: usize = deliveries.iter().map(weight).sum();
    let mut units = units_of(ctx, acks, deliveries, batch_size).await;
    if units.len() == 1 && !units[0].bundle {
        // One event: the one-by-one path (its own transaction, retries in-process).
        let Some(unit) = units.pop() else { return };
        if let Some((msg, span)) = unit.events.into_iter().next() {
            apply_delivery(ctx, acks, unit.delivery, msg, span).await;
        }
        return;
    }
    // The batch's own span, linked to each event's apply: one transaction serves several traces.
    let batch_span = tracing::info_span!("worker.batch", consumer, batch_size);
    for (_, span) in units.iter().flat_map(|u| &u.events) {
        telemetry::add_link(&batch_span, telemetry::traceparent(span).as_deref());
    }
    let (items, ready) = prepare(ctx, acks, units).await;
    if ready.is_empty() {
        return;
    }
    let task = {
        let ctx = ctx.clone();
        tokio::spawn(
            async move { process_batch_prepared(&ctx.pool, ctx.handler.as_ref(), items).await }
                .instrument(batch_span),
        )
    };
    let failed = match task.await {
        Ok(Ok(results)) => {
            #[cfg(feature = "failpoints")]
            fail::fail_point!("worker.after_commit");
            committed(ctx, acks, &ready, results, started).await;
            return;
        }
        Ok(Err(failed)) => failed,
        Err(join) => BatchFailed {
            index: None,
            error: ProcessError::Panicked(join.to_string()),
        },
    };
    after_failure(ctx, acks, ready, failed).await;
}

/// Decodes each delivery into the events it carries, each in its apply span. What cannot take part in the batch
/// is settled here and left out: an unparseable message (dead-lettered), a redelivered bundle (split), a single
/// message split from a bundle and returned since more often than the limit allows (dead-lettered).
async fn units_of<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    deliveries: Vec<Delivery>,
    batch_size: usize,
) -> Vec<Unit> {
    let consumer = ctx.handler.consumer();
    let mut units: Vec<Unit> = Vec::with_capacity(deliveries.len());
    for d in deliveries {
        let bundle = message::is_bundle(content_type(&d));
        let events = match message::decode(content_type(&d), &d.data) {
            Ok(events) => events,
            Err(e) => {
                // Not even an event reference: nothing to record against; the DLQ keeps the bytes.
                tracing::error!(
                    messaging.system = "rabbitmq",
                    delivery_tag = d.delivery_tag,
                    error.message = %e,
                    "unparseable message; dead-lettering"
                );
                reject(acks, &d).await;
                metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => "dead_lettered")
                    .increment(1);
                continue;
            }
        };
        if bundle && (d.redelivered || broker_delivery_count(&d) > 0) {
            // Delivered before and not settled: whatever happened to it may happen again. Its events go on alone.
            let prior = delivery_count(&d);
            split(ctx, acks, d, events, prior).await;
            continue;
        }
        if !bundle && delivery_count(&d) > ctx.delivery_limit {
            // Split from a bundle, and returned since more often than the limit allows in all: what RabbitMQ
            // does with a message returned that often (its own count restarted at the split).
            if let Some(m) = events.first() {
                let reason = format!(
                    "dead-lettered by the worker (delivery_limit, {} attempts in all, split from a bundle) with no \
                     failure recorded by a worker: the delivery limit was reached through worker crashes or lost \
                     connections; redrive it",
                    delivery_count(&d)
                );
                dead_letter(ctx, acks, &d, m, &reason).await;
            }
            continue;
        }
        let header_parent = (!bundle).then(|| traceparent_of(&d.properties)).flatten();
        let events = events
            .into_iter()
            .map(|m| {
                let parent = if bundle {
                    m.traceparent.clone()
                } else {
                    header_parent.clone()
                };
                let span = apply_span(consumer, &d, m.id, batch_size, parent.as_deref());
                (m, span)
            })
            .collect();
        units.push(Unit {
            delivery: d,
            bundle,
            events,
        });
    }
    units
}

/// Prepares every event first, outside the transaction (concurrently: for most handlers a no-op). A single
/// delivery whose event cannot be prepared takes the one-by-one path, which backs off or dead-letters it; a
/// bundle with such an event is split. Returns the batch's items and, in the same order, the units they belong
/// to.
async fn prepare<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    units: Vec<Unit>,
) -> (Vec<BatchItem>, Vec<Unit>) {
    let prepared = join_all(
        units
            .iter()
            .flat_map(|u| &u.events)
            .map(|(m, span)| ctx.handler.prepare(event_ref(m)).instrument(span.clone())),
    )
    .await;
    let mut prepared = prepared.into_iter();
    let mut items = Vec::new();
    let mut ready: Vec<Unit> = Vec::with_capacity(units.len());
    for unit in units {
        let preps: Vec<_> = prepared.by_ref().take(unit.events.len()).collect();
        if preps.iter().all(Result::is_ok) {
            for ((m, span), p) in unit.events.iter().zip(preps.into_iter().flatten()) {
                items.push(BatchItem {
                    event_id: m.id,
                    prepared: p,
                    traceparent: telemetry::traceparent(span),
                });
            }
            ready.push(unit);
        } else if unit.bundle {
            let prior = delivery_count(&unit.delivery);
            split_unit(ctx, acks, unit, prior).await;
        } else if let Some((msg, span)) = unit.events.into_iter().next() {
            apply_delivery(ctx, acks, unit.delivery, msg, span).await;
        }
    }
    (items, ready)
}

/// After the commit: one `multiple` ack for the batch where no earlier delivery is outstanding, then each
/// event's outcome recorded.
async fn committed<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    ready: &[Unit],
    results: Vec<Processed>,
    started: std::time::Instant,
) {
    let consumer = ctx.handler.consumer();
    let delivered: Vec<&Delivery> = ready.iter().map(|u| &u.delivery).collect();
    for tag in acks.ack_committed(&delivered).await {
        tracing::warn!(
            delivery_tag = tag,
            "ack not delivered (channel closed); the event will be redelivered and deduplicated"
        );
    }
    for ((_, span), processed) in ready.iter().flat_map(|u| &u.events).zip(results) {
        let outcome = match &processed {
            Processed::Applied(o) => o.kind.as_str(),
            Processed::Duplicate => "duplicate",
        };
        span.record("outcome", outcome);
        metrics::counter!(metric::DELIVERIES, "consumer" => consumer, "outcome" => outcome)
            .increment(1);
    }
    metrics::histogram!(metric::PROCESS_SECONDS, "consumer" => consumer)
        .record(started.elapsed().as_secs_f64());
}

/// After a batch that did not commit: the delivery that failed it is settled according to its failure without
/// running it again, every bundle is split, and every other single delivery takes the one-by-one path.
async fn after_failure<H: Handler>(
    ctx: &Arc<Ctx<H>>,
    acks: &Acks,
    ready: Vec<Unit>,
    failed: BatchFailed,
) {
    if failed.index.is_none() {
        tracing::warn!(error.message = ?failed.error.to_string(), "batch did not commit; processing one by one");
    }
    // Which unit the failing event belongs to (items were pushed unit by unit, in order).
    let mut first = 0;
    let mut rest = Vec::with_capacity(ready.len());
    for unit in ready {
        let n = unit.events.len();
        let failing = failed
            .index
            .is_some_and(|i| (first..first + n).contains(&i));
        first += n;
        if unit.bundle {
            // An attempt of the failing event was used (a panic or a permanent failure is its own doing).
            let used = failing && !matches!(failed.error, ProcessError::Transient(_));
            let prior = delivery_count(&unit.delivery) + u32::from(used);
            split_unit(ctx, acks, unit, prior).await;
            continue;
        }
        let Some((msg, span)) = unit.events.into_iter().next() else {
            continue;
        };
        let delivery = unit.delivery;
        if !failing {
            rest.push((delivery, msg, span));
            continue;
        }
        match &failed.error {
            ProcessError::Panicked(p) => {
                requeue_panicked(
                    ctx,
                    acks,
                    &delivery,
                    msg.id,
                    &format!("handler panicked: {p}"),
                )
                .await
            }
            ProcessError::Permanent(e) => {
                if dead_letter(ctx, acks, &delivery, &msg, &reason_text(e)).await {
                    span.record("outcome", "dead_lettered");
                } else {
                    rest.push((delivery, msg, span));
                }
            }
            ProcessError::Transient(_) => rest.push((delivery, msg, span)),
        }
    }
    for (d, msg, span) in rest {
        apply_delivery(ctx, acks, d, msg, span).await;
    }
}

async fn split_unit<H: Handler>(ctx: &Arc<Ctx<H>>, acks: &Acks, unit: Unit, prior: u32) {
    let events = unit.events.into_iter().map(|(m, _)| m).collect();
    split(ctx, acks, unit.delivery, events, prior).await
}
