//! The seam between the delivery machinery and business effects.
//!
//! The worker owns the transaction and the processed marker; a [`Handler`] only applies its effects inside the
//! transaction it is given. New effects (notifications, analytics, …) are new handlers with their own consumer
//! name, hence their own markers: each gets exactly-once independently.

use std::future::Future;

use sqlx::PgConnection;

/// A stored raw event, as the edge committed it.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    /// `webhook_events.id`.
    pub id: i64,
    /// Configured provider name.
    pub provider: String,
    /// Provider's event id.
    pub provider_event_id: String,
    /// Event type extracted at ingest.
    pub event_type: Option<String>,
    /// Raw body, byte-exact.
    pub body: Vec<u8>,
}

/// How an event ended, recorded on its processed marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// Effects applied.
    Applied,
    /// Nothing to do for this event (unknown type, …); acknowledged.
    Ignored,
    /// Kept for later: e.g. a refund for a payment that has not succeeded yet.
    Parked,
    /// The payload is only a hint; the resource must be fetched from the provider.
    NeedsFetch,
}

impl OutcomeKind {
    /// Database spelling (`processed_events.outcome`).
    pub fn as_str(&self) -> &'static str {
        match self {
            OutcomeKind::Applied => "applied",
            OutcomeKind::Ignored => "ignored",
            OutcomeKind::Parked => "parked",
            OutcomeKind::NeedsFetch => "needs_fetch",
        }
    }
}

/// A handler's result for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// What happened.
    pub kind: OutcomeKind,
    /// Human-readable detail for operators (why ignored, what was parked).
    pub detail: Option<String>,
}

impl Outcome {
    /// Effects applied, nothing to add.
    pub fn applied() -> Outcome {
        Outcome {
            kind: OutcomeKind::Applied,
            detail: None,
        }
    }
}

/// Why a handler could not apply an event.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// Retrying cannot help (unparseable payload, invalid amount): the delivery is dead-lettered with this
    /// reason and no processed marker, so a redrive after a fix applies it.
    #[error("{0}")]
    Permanent(String),
    /// Retrying may help (database unavailable, serialisation failure, lock timeout).
    #[error(transparent)]
    Transient(anyhow::Error),
}

impl From<sqlx::Error> for HandleError {
    /// Database errors are transient when a retry can cure them, permanent otherwise (a constraint violated by
    /// this event's data will be violated again).
    fn from(e: sqlx::Error) -> Self {
        if hookline_core::db::is_transient(&e) {
            HandleError::Transient(anyhow::Error::new(e))
        } else {
            HandleError::Permanent(format!("database rejected the effect: {e}"))
        }
    }
}

/// A business effect applied once per stored event.
pub trait Handler: Send + Sync + 'static {
    /// Consumer name: the first half of the processed marker `(consumer, event_id)`.
    fn consumer(&self) -> &'static str;

    /// Applies the event's effects using `tx`, the open transaction in which the marker was just inserted.
    /// Must not commit or roll back; must not have effects outside the database (they would not be
    /// exactly-once).
    fn handle<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        event: &'a StoredEvent,
    ) -> impl Future<Output = Result<Outcome, HandleError>> + Send + 'a;
}
