//! What a delivery says about itself: its attempts so far, its content type, how many events it weighs in a
//! batch, the event reference a handler sees, and the `worker.apply` span of each of its events.
//!
//! Why here: every stage reads these (gathering sizes batches by [`weight`], the apply paths judge the delivery
//! limit by [`delivery_count`], bundles carry their attempts on in a header), and they must read them one way:
//! a count read two ways would dead-letter an event at two different totals of attempts.

use hookline_bus::{message, EventMessage};
use hookline_core::handler::EventRef;
use hookline_core::telemetry;
use lapin::message::Delivery;
use lapin::types::AMQPValue;

/// What a handler's `prepare` sees of a delivery.
pub(crate) fn event_ref(msg: &EventMessage) -> EventRef<'_> {
    EventRef {
        id: msg.id,
        provider: &msg.provider,
        provider_event_id: &msg.provider_event_id,
        event_type: msg.event_type.as_deref(),
    }
}

/// RabbitMQ's count of earlier deliveries of this message (`x-delivery-count`: how often it was returned).
pub(crate) fn broker_delivery_count(delivery: &Delivery) -> u32 {
    header_count(delivery, "x-delivery-count")
}

/// Attempts an event has had: RabbitMQ's count for this message plus what a bundle it was split from had used
/// ([`hookline_bus::message::PRIOR_DELIVERIES_HEADER`]). This is what the delivery limit is judged by.
pub(crate) fn delivery_count(delivery: &Delivery) -> u32 {
    broker_delivery_count(delivery).saturating_add(prior_deliveries(delivery))
}

pub(crate) fn prior_deliveries(delivery: &Delivery) -> u32 {
    header_count(delivery, message::PRIOR_DELIVERIES_HEADER).min(MAX_PRIOR_DELIVERIES)
}

/// A bound on a header that only a worker writes, so that a hand-made one cannot overflow a count.
const MAX_PRIOR_DELIVERIES: u32 = 1_000;

fn header_count(delivery: &Delivery, name: &str) -> u32 {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(name).cloned())
        .and_then(|v| match v {
            AMQPValue::LongLongInt(n) => u32::try_from(n).ok(),
            AMQPValue::LongInt(n) => u32::try_from(n).ok(),
            AMQPValue::LongUInt(n) => Some(n),
            AMQPValue::ShortInt(n) => u32::try_from(n).ok(),
            AMQPValue::ShortUInt(n) => Some(u32::from(n)),
            _ => None,
        })
        .unwrap_or(0)
}

pub(crate) fn content_type(delivery: &Delivery) -> Option<&str> {
    delivery
        .properties
        .content_type()
        .as_ref()
        .map(|c| c.as_str())
}

/// How many events a delivery carries, as far as batching is concerned: a bundle's `x-hookline-events`
/// (bounded), 1 for anything else. Read before parsing, to size batches by events rather than by messages.
pub(crate) fn weight(delivery: &Delivery) -> usize {
    if message::is_bundle(content_type(delivery)) {
        (header_count(delivery, message::EVENTS_HEADER) as usize).clamp(1, message::BUNDLE_MAX)
    } else {
        1
    }
}

/// The span of one event's apply: a child of the span that published it (for a single message its
/// `traceparent` header, for an event of a bundle the bundle's entry — the relay's publish, in the event's own
/// trace), whatever process, batch or redelivery it arrives in.
pub(crate) fn apply_span(
    consumer: &str,
    delivery: &Delivery,
    event_id: i64,
    batch_size: usize,
    parent: Option<&str>,
) -> tracing::Span {
    let span = tracing::info_span!(
        "worker.apply",
        otel.kind = "consumer",
        messaging.system = "rabbitmq",
        consumer,
        event_id,
        redelivered = delivery.redelivered,
        delivery_count = delivery_count(delivery),
        batch_size,
        outcome = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    telemetry::set_parent(&span, parent);
    telemetry::record_trace_id(&span);
    span
}
