//! The message published for each stored event.

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
