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
        }
    }
}

impl EventMessage {
    /// Routing key on the events exchange: `{provider}.{event_type}`, so future consumers can bind selectively.
    pub fn routing_key(&self) -> String {
        format!(
            "{}.{}",
            self.provider,
            self.event_type.as_deref().unwrap_or("unknown")
        )
    }

    /// The AMQP `message_id`: stable across republishes, so duplicates are recognisable on the wire too.
    pub fn message_id(&self) -> String {
        format!("{}:{}", self.provider, self.provider_event_id)
    }
}
