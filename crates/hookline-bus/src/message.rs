//! The messages published for stored events: one event per message, or a *bundle* of several.
//!
//! Why bundles: RabbitMQ's cost on the events queue is per message, not per byte — a quorum-queue log entry, a
//! confirm, a delivery and an ack each — and it was 23 % of the CPU the whole pipeline spent per event
//! (`PROFILING.md`, performance third round). The relay therefore publishes the events of one round that share a
//! routing key as one message of up to `relay.events_per_message` references (`application/vnd.hookline.events+json`,
//! the count in the `x-hookline-events` header). A bundle is only a way of carrying references: the worker applies
//! its events in one transaction on its first delivery, and on anything else — a failure of one of its events, a
//! redelivery after a crash — splits it into single messages first (see `hookline-consumer`), so that a poison
//! event is retried and dead-lettered alone, with the attempts the bundle already used counted
//! ([`PRIOR_DELIVERIES_HEADER`]). The dead-letter queue's tools read both shapes ([`event_ids`]).

use serde::{Deserialize, Serialize};

/// A reference to a stored event. The message carries ids only: the raw body stays in PostgreSQL, the source of
/// truth, and the worker reads it inside its transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventMessage {
    /// `webhook_events.id`.
    pub id: i64,
    /// Configured provider name.
    pub provider: String,
    /// The provider's event id.
    pub provider_event_id: String,
    /// Event type, when known.
    pub event_type: Option<String>,
    /// The W3C `traceparent` the relay continues (the edge's request span, stored with the event). Not in the
    /// body: on the wire the message carries its own `traceparent` header (the relay's publish span), which
    /// the worker reads from the AMQP headers.
    #[serde(skip)]
    pub traceparent: Option<String>,
}

/// Content type of a message carrying several events ([`encode_bundle`]). A single event keeps
/// `application/json` and the [`EventMessage`] body of earlier versions.
pub const BUNDLE_CONTENT_TYPE: &str = "application/vnd.hookline.events+json";

/// Header of a bundle: how many events it carries (lets the worker size its batches before parsing).
pub const EVENTS_HEADER: &str = "x-hookline-events";

/// Header of a message split out of a bundle: how many delivery attempts the bundle had used for its events.
/// The worker adds it to RabbitMQ's own `x-delivery-count`, so that splitting never gives a poison event more
/// attempts than the delivery limit allows.
pub const PRIOR_DELIVERIES_HEADER: &str = "x-hookline-prior-deliveries";

/// Most events a bundle may carry: a message claiming more is not read (it is dead-lettered as unparseable).
pub const BUNDLE_MAX: usize = 1024;

/// One event of a bundle on the wire: the reference and, since the message's single `traceparent` header cannot
/// name several spans, the trace context of the span that published this event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct BundledEvent {
    id: i64,
    provider: String,
    provider_event_id: String,
    event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Bundle {
    events: Vec<BundledEvent>,
}

/// The body of a bundle of `events`, each with the `traceparent` of the span that published it (its
/// [`EventMessage::traceparent`] here).
pub fn encode_bundle(events: &[EventMessage]) -> Result<Vec<u8>, serde_json::Error> {
    let bundle = Bundle {
        events: events
            .iter()
            .map(|m| BundledEvent {
                id: m.id,
                provider: m.provider.clone(),
                provider_event_id: m.provider_event_id.clone(),
                event_type: m.event_type.clone(),
                traceparent: m.traceparent.clone(),
            })
            .collect(),
    };
    serde_json::to_vec(&bundle)
}

/// Why a delivered body is not a reference to stored events.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON of the expected shape.
    #[error("not an event reference: {0}")]
    Json(#[from] serde_json::Error),
    /// A bundle with no event, or more than [`BUNDLE_MAX`].
    #[error("a bundle must carry 1 to {BUNDLE_MAX} events, this one carries {0}")]
    Size(usize),
}

/// Whether `content_type` names a bundle.
pub fn is_bundle(content_type: Option<&str>) -> bool {
    content_type == Some(BUNDLE_CONTENT_TYPE)
}

/// The events a delivered body refers to, in the order published: one for a single message (its `traceparent`
/// is `None`: the caller reads the header), each with its own bounded `traceparent` for a bundle.
pub fn decode(content_type: Option<&str>, body: &[u8]) -> Result<Vec<EventMessage>, DecodeError> {
    if !is_bundle(content_type) {
        return Ok(vec![serde_json::from_slice::<EventMessage>(body)?]);
    }
    let bundle: Bundle = serde_json::from_slice(body)?;
    let n = bundle.events.len();
    if n == 0 || n > BUNDLE_MAX {
        return Err(DecodeError::Size(n));
    }
    Ok(bundle
        .events
        .into_iter()
        .map(|e| EventMessage {
            id: e.id,
            provider: e.provider,
            provider_event_id: e.provider_event_id,
            event_type: e.event_type,
            traceparent: e
                .traceparent
                .filter(|t| t.len() <= hookline_core::telemetry::MAX_TRACEPARENT_BYTES),
        })
        .collect())
}

/// The stored event ids a message (single or bundle) refers to; empty when it is not an event reference.
pub fn event_ids(content_type: Option<&str>, body: &[u8]) -> Vec<i64> {
    decode(content_type, body)
        .map(|events| events.iter().map(|e| e.id).collect())
        .unwrap_or_default()
}

/// A `(id, provider, provider_event_id, event_type)` row, as selected from `webhook_events`.
pub type EventRow = (i64, String, String, Option<String>);

impl From<EventRow> for EventMessage {
    fn from((id, provider, provider_event_id, event_type): EventRow) -> Self {
        EventMessage {
            id,
            provider,
            provider_event_id,
            event_type,
            traceparent: None,
        }
    }
}

/// Longest AMQP short string (routing keys, `message_id`): 255 bytes. lapin panics converting a longer one, so
/// every such field is built by a function of this module that bounds it.
pub const AMQP_SHORT_STRING_MAX: usize = 255;

impl EventMessage {
    /// Routing key on the events exchange: `{provider}.{event_type}`, so future consumers can bind selectively.
    ///
    /// Always a valid short string, whatever the stored row holds (rows written before the edge bounded event
    /// types, or by hand): a longer type is cut at a character boundary. Only routing depends on it, and every
    /// queue of ours binds `#`.
    pub fn routing_key(&self) -> String {
        let key = format!(
            "{}.{}",
            self.provider,
            self.event_type.as_deref().unwrap_or("unknown")
        );
        truncate_at_char_boundary(key, AMQP_SHORT_STRING_MAX)
    }

    /// The AMQP `message_id`: stable across republishes, so duplicates are recognisable on the wire too.
    ///
    /// `{provider}:{provider_event_id}`, or `{provider}:sha256:{hex of the id}` when that would not fit a short
    /// string: still stable and distinct per event, never a panic.
    pub fn message_id(&self) -> String {
        let id = format!("{}:{}", self.provider, self.provider_event_id);
        if id.len() <= AMQP_SHORT_STRING_MAX {
            return id;
        }
        use sha2::Digest;
        let digest = hex::encode(sha2::Sha256::digest(self.provider_event_id.as_bytes()));
        truncate_at_char_boundary(
            format!("{}:sha256:{digest}", self.provider),
            AMQP_SHORT_STRING_MAX,
        )
    }
}

fn truncate_at_char_boundary(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a row holds, the AMQP fields are short strings and the message id stays distinct per id.
        #[test]
        fn amqp_fields_are_always_short_strings(
            provider in "[a-z_-]{1,300}",
            id in any::<String>(),
            event_type in proptest::option::of(any::<String>()),
            long in 0usize..5000,
        ) {
            let provider_event_id = format!("{id}{}", "é".repeat(long));
            let m = EventMessage { id: 1, provider, provider_event_id, event_type, traceparent: None };
            prop_assert!(m.routing_key().len() <= AMQP_SHORT_STRING_MAX);
            prop_assert!(m.message_id().len() <= AMQP_SHORT_STRING_MAX);
        }
    }

    proptest! {
        /// A bundle reads back as the events it was made of, traceparents included; any other bytes under the
        /// bundle's content type are an error, never a panic.
        #[test]
        fn bundles_read_back_and_garbage_is_an_error(
            ids in proptest::collection::vec(any::<i64>(), 1..50),
            tp in proptest::option::of("[0-9a-f-]{0,60}"),
            garbage in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let events: Vec<EventMessage> = ids.iter().map(|&id| EventMessage {
                id,
                provider: "stripe".into(),
                provider_event_id: format!("evt_{id}"),
                event_type: Some("payment_intent.succeeded".into()),
                traceparent: tp.clone(),
            }).collect();
            let body = encode_bundle(&events).unwrap();
            prop_assert_eq!(decode(Some(BUNDLE_CONTENT_TYPE), &body).unwrap(), events);
            prop_assert_eq!(event_ids(Some(BUNDLE_CONTENT_TYPE), &body), ids);
            let _ = decode(Some(BUNDLE_CONTENT_TYPE), &garbage);
            let _ = decode(Some("application/json"), &garbage);
        }
    }

    #[test]
    fn a_bundle_is_bounded_and_a_single_message_reads_as_before() {
        let one = |id| EventMessage {
            id,
            provider: "stripe".into(),
            provider_event_id: format!("evt_{id}"),
            event_type: None,
            traceparent: None,
        };
        assert!(matches!(
            decode(Some(BUNDLE_CONTENT_TYPE), br#"{"events":[]}"#),
            Err(DecodeError::Size(0))
        ));
        let many: Vec<EventMessage> = (0..=BUNDLE_MAX as i64).map(one).collect();
        let body = encode_bundle(&many).unwrap();
        assert!(matches!(
            decode(Some(BUNDLE_CONTENT_TYPE), &body),
            Err(DecodeError::Size(n)) if n == BUNDLE_MAX + 1
        ));
        let single = serde_json::to_vec(&one(7)).unwrap();
        assert_eq!(
            decode(Some("application/json"), &single).unwrap(),
            vec![one(7)]
        );
        assert_eq!(decode(None, &single).unwrap(), vec![one(7)]);
        // A traceparent longer than any valid one is dropped, not carried on.
        let mut long = one(8);
        long.traceparent = Some("0".repeat(2000));
        let body = encode_bundle(&[long]).unwrap();
        assert_eq!(
            decode(Some(BUNDLE_CONTENT_TYPE), &body).unwrap(),
            vec![one(8)]
        );
    }

    #[test]
    fn long_ids_get_distinct_hashed_message_ids() {
        let m = |id: &str| EventMessage {
            id: 1,
            provider: "stripe".into(),
            provider_event_id: id.into(),
            event_type: Some("x".repeat(400)),
            traceparent: None,
        };
        let a = m(&format!("evt_{}", "L".repeat(300)));
        let b = m(&format!("evt_{}M", "L".repeat(300)));
        assert_ne!(a.message_id(), b.message_id());
        assert!(a.message_id().starts_with("stripe:sha256:"));
        assert_eq!(m("evt_1").message_id(), "stripe:evt_1");
        assert_eq!(a.routing_key().len(), AMQP_SHORT_STRING_MAX);
    }
}
