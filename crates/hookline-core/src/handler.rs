//! The seam between the delivery machinery and business effects.
//!
//! The worker owns the transaction and the processed marker; a [`Handler`] only applies its effects inside the
//! transaction it is given. New effects (notifications, analytics, …) are new handlers with their own consumer
//! name, hence their own markers: each gets exactly-once independently.
//!
//! One thing may happen outside the transaction, before it: [`Handler::prepare`], a READ from an external
//! system the effect depends on (Mercado Pago's notifications name a payment that must be fetched from its API).
//! It runs with no transaction open — an HTTP call never holds row locks or a pooled connection — and must have
//! no side effect: it can run several times for one event (redeliveries, retries), and only the transaction
//! decides, marker first, whether anything is applied.

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
    /// What [`Handler::prepare`] read for this event before the transaction, if anything.
    pub prepared: Option<Prepared>,
    /// The W3C `traceparent` of the span applying this event (the worker's `worker.apply`): a fact the
    /// effect records carries it, so the fact's deliveries join the event's trace. `None` outside a trace.
    pub traceparent: Option<String>,
}

/// What [`Handler::prepare`] read from outside for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The stored dedupe key it was read for: the transaction refuses it for any other event.
    pub key: String,
    /// The bytes read (e.g. the fetched resource's JSON), bounded by the reader.
    pub body: Vec<u8>,
}

/// The reference a delivery carries, as [`Handler::prepare`] sees it (before the stored event is read).
#[derive(Debug, Clone)]
pub struct EventRef<'a> {
    /// `webhook_events.id`.
    pub id: i64,
    /// Configured provider name.
    pub provider: &'a str,
    /// The stored dedupe key.
    pub provider_event_id: &'a str,
    /// Event type.
    pub event_type: Option<&'a str>,
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
    /// reason and no processed marker, so a redrive after a fix applies it. The error keeps its causes; it is
    /// turned into text only when stored ([`reason_text`]).
    #[error("{0}")]
    Permanent(anyhow::Error),
    /// Retrying may help (database unavailable, serialisation failure, lock timeout).
    #[error(transparent)]
    Transient(anyhow::Error),
}

impl From<sqlx::Error> for HandleError {
    /// Database errors are transient when a retry can cure them, permanent otherwise (a constraint violated by
    /// this event's data will be violated again).
    fn from(e: sqlx::Error) -> Self {
        if crate::db::is_transient(&e) {
            HandleError::Transient(anyhow::Error::new(e))
        } else {
            HandleError::Permanent(anyhow::Error::new(e).context("database rejected the effect"))
        }
    }
}

impl HandleError {
    /// A permanent failure with this message and no further cause.
    pub fn permanent(message: impl std::fmt::Display) -> HandleError {
        HandleError::Permanent(anyhow::anyhow!("{message}"))
    }
}

/// An error's cause chain as stored in `dead_letters.reason`: one cause per line, outermost first (`dlq show`
/// prints them as "caused by" lines).
pub fn reason_text(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why [`Handler::handle_many`] could not apply a batch: the event to blame (its index in the slice), when one
/// event is the cause, and the failure. The transaction is rolled back; the worker then isolates the failure.
#[derive(Debug)]
pub struct BatchError {
    /// Index of the failing event, `None` when no single event is to blame (a database error of a set-based
    /// statement).
    pub index: Option<usize>,
    /// The failure.
    pub error: HandleError,
}

impl From<HandleError> for BatchError {
    fn from(error: HandleError) -> Self {
        BatchError { index: None, error }
    }
}

impl From<sqlx::Error> for BatchError {
    fn from(e: sqlx::Error) -> Self {
        HandleError::from(e).into()
    }
}

/// A business effect applied once per stored event.
pub trait Handler: Send + Sync + 'static {
    /// Consumer name: the first half of the processed marker `(consumer, event_id)`.
    fn consumer(&self) -> &'static str;

    /// Reads what the effect needs from outside, BEFORE the transaction (none by default). Must have no side
    /// effect (it may run several times for one event). `Err(Transient)` is retried with backoff without
    /// burning the delivery limit; `Err(Permanent)` dead-letters the delivery with the reason.
    fn prepare<'a>(
        &'a self,
        event: EventRef<'a>,
    ) -> impl Future<Output = Result<Option<Prepared>, HandleError>> + Send + 'a {
        let _ = event;
        async { Ok(None) }
    }

    /// Applies several events at once, set-based (a constant number of statements for the whole batch), using
    /// `tx`, the open transaction in which their markers were just inserted. The result must be the one applying
    /// them one by one in this order would give. `None` (the default): not a batch this handler applies
    /// set-based; the worker then calls [`Handler::handle`] for each, in order, in the same transaction.
    fn handle_many<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        events: &'a [StoredEvent],
    ) -> impl Future<Output = Option<Result<Vec<Outcome>, BatchError>>> + Send + 'a {
        let _ = (tx, events);
        async { None }
    }

    /// Applies the event's effects using `tx`, the open transaction in which the marker was just inserted.
    /// Must not commit or roll back; must not have effects outside the database (they would not be
    /// exactly-once).
    fn handle<'a>(
        &'a self,
        tx: &'a mut PgConnection,
        event: &'a StoredEvent,
    ) -> impl Future<Output = Result<Outcome, HandleError>> + Send + 'a;
}

impl From<crate::domain_events::RecordError> for HandleError {
    /// A fact that cannot be written fails its effect's transaction the way the database error (or the encoding
    /// bug) would: the effect and its fact commit together or not at all.
    fn from(e: crate::domain_events::RecordError) -> Self {
        match e {
            crate::domain_events::RecordError::Database(e) => e.into(),
            other => HandleError::Permanent(anyhow::Error::new(other)),
        }
    }
}
