//! The stored raw event and its repository functions.

use sqlx::types::Json;
use sqlx::PgExecutor;

/// Longest event id (dedupe key) stored, in bytes. Every real provider's id fits with room to spare (Stripe
/// `evt_` + 24, Svix `msg_` + 27, GitHub and Shopify UUIDs, Adyen's and Pagar.me's composite keys, the Mercado
/// Pago key built from signed fields); and every downstream can carry it: the AMQP `message_id` short string
/// (`{provider}:{id}` ≤ 255 bytes with a provider name of at most [`MAX_PROVIDER_NAME_BYTES`]), the btree
/// index row of the UNIQUE constraint (limit ~2.7 KB), a log line.
pub const MAX_EVENT_ID_BYTES: usize = 200;

/// Longest event type stored, in bytes (Stripe's longest types are ~50). Bounded so that the routing key
/// `{provider}.{type}` stays an AMQP short string.
pub const MAX_EVENT_TYPE_BYTES: usize = 128;

/// Longest configured provider name (it is part of the dedupe key, the routing key and the message id).
pub const MAX_PROVIDER_NAME_BYTES: usize = 48;

/// Most header and query bytes stored with one event (names + values + query), outside `max_body_bytes`. Real
/// providers send 1–3 KB; a request above this is refused rather than stored.
pub const MAX_STORED_HEADER_BYTES: usize = 16 * 1024;

/// Header names that are credentials of the sender's HTTP client (or of a proxy in front of us), never
/// stored: matched exactly, after lower-casing.
const UNSTORED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-csrf-token",
    "x-xsrf-token",
];

/// Fragments that make any header name look like a credential (`x-api-key`, `x-auth-token`,
/// `x-amz-security-token`, `x-client-secret`, `x-session-id`, …): such headers are dropped too. Signature
/// headers (`stripe-signature`, `x-hub-signature-256`, `webhook-signature`, …) contain none of these and are kept,
/// because they are needed to re-verify a stored event.
const CREDENTIAL_FRAGMENTS: &[&str] = &[
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "apikey",
    "api_key",
    "session",
    "credential",
    "cookie",
    "private",
];

/// True when a header of this name must never be stored (nor logged, nor shown): it may carry a credential.
pub fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    UNSTORED_HEADERS.contains(&name.as_str())
        || CREDENTIAL_FRAGMENTS.iter().any(|f| name.contains(f))
}

/// Why a verified event cannot be stored as it is. Decided before the INSERT, so that no data error can reach
/// the database and fail a whole group-commit batch; each is answered 400 (retrying will not fix it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unstorable {
    /// The event id is empty.
    #[error("the event id is empty")]
    EmptyEventId,
    /// The event id is longer than [`MAX_EVENT_ID_BYTES`].
    #[error("the event id is {0} bytes long; at most {MAX_EVENT_ID_BYTES} are accepted")]
    EventIdTooLong(usize),
    /// The event id holds a control character (NUL cannot be stored in PostgreSQL text at all).
    #[error("the event id contains a control character")]
    EventIdControlChar,
    /// The event type is longer than [`MAX_EVENT_TYPE_BYTES`].
    #[error("the event type is {0} bytes long; at most {MAX_EVENT_TYPE_BYTES} are accepted")]
    EventTypeTooLong(usize),
    /// The event type holds a control character.
    #[error("the event type contains a control character")]
    EventTypeControlChar,
    /// Stored headers and query together exceed [`MAX_STORED_HEADER_BYTES`].
    #[error("headers and query take {0} bytes; at most {MAX_STORED_HEADER_BYTES} are stored")]
    HeadersTooLarge(usize),
    /// The query string holds a NUL or control character.
    #[error("the query string contains a control character")]
    QueryControlChar,
}

impl Unstorable {
    /// Stable machine-readable code (JSON error bodies, logs, metrics labels).
    pub fn code(&self) -> &'static str {
        match self {
            Unstorable::EmptyEventId => "missing_event_id",
            Unstorable::EventIdTooLong(_) => "event_id_too_long",
            Unstorable::EventIdControlChar => "invalid_event_id",
            Unstorable::EventTypeTooLong(_) => "event_type_too_long",
            Unstorable::EventTypeControlChar => "invalid_event_type",
            Unstorable::HeadersTooLarge(_) => "headers_too_large",
            Unstorable::QueryControlChar => "invalid_query",
        }
    }
}

/// Checks the parts of an event that become text columns, keys and AMQP fields. The edge runs it before
/// storing; the worker runs it again on what it reads (rows written by an older version or by hand), so a row
/// that slipped in is dead-lettered with this reason instead of travelling further.
pub fn check_event_fields(
    provider_event_id: &str,
    event_type: Option<&str>,
) -> Result<(), Unstorable> {
    if provider_event_id.is_empty() {
        return Err(Unstorable::EmptyEventId);
    }
    if provider_event_id.len() > MAX_EVENT_ID_BYTES {
        return Err(Unstorable::EventIdTooLong(provider_event_id.len()));
    }
    if provider_event_id.chars().any(char::is_control) {
        return Err(Unstorable::EventIdControlChar);
    }
    if let Some(t) = event_type {
        if t.len() > MAX_EVENT_TYPE_BYTES {
            return Err(Unstorable::EventTypeTooLong(t.len()));
        }
        if t.chars().any(char::is_control) {
            return Err(Unstorable::EventTypeControlChar);
        }
    }
    Ok(())
}

impl OwnedEvent {
    /// Every bound [`check_event_fields`] checks, plus the stored header and query size.
    pub fn check_storable(&self) -> Result<(), Unstorable> {
        check_event_fields(&self.provider_event_id, self.event_type.as_deref())?;
        if self.query.chars().any(char::is_control) {
            return Err(Unstorable::QueryControlChar);
        }
        let header_bytes: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum::<usize>()
            + self.query.len();
        if header_bytes > MAX_STORED_HEADER_BYTES {
            return Err(Unstorable::HeadersTooLarge(header_bytes));
        }
        Ok(())
    }
}

/// A verified event the edge is about to store.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    /// Configured provider name.
    pub provider: &'a str,
    /// The provider's event id (or the stable key chosen for providers without one).
    pub provider_event_id: &'a str,
    /// Event type, when the payload carries one.
    pub event_type: Option<&'a str>,
    /// The signed timestamp, unix seconds, when the scheme signs one.
    pub signed_at: Option<i64>,
    /// Request headers, `(name, value)` in arrival order.
    pub headers: Vec<(String, String)>,
    /// Raw query string.
    pub query: &'a str,
    /// Raw body, byte-exact.
    pub body: &'a [u8],
}

/// What storing an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    /// A new row was committed with this id.
    Inserted(i64),
    /// The constraint found the event already stored (or being stored by a concurrent request that committed);
    /// carries the existing row's id when it could be read.
    Duplicate(Option<i64>),
}

/// Keeps the headers worth storing (drops every [credential header](is_credential_header)), with values made UTF-8 (lossily: non-UTF-8 header bytes are rare and the
/// headers are kept for operators, not for re-verification of the body).
pub fn storable_headers<'h>(
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(name, _)| !is_credential_header(name))
        .map(|(name, value)| {
            (
                name.to_ascii_lowercase(),
                String::from_utf8_lossy(value).replace('\0', ""),
            )
        })
        .collect()
}

/// Stores the event once. The UNIQUE constraint decides: a concurrent insert of the same key waits for the
/// first transaction and then inserts nothing (Read Committed), so exactly one caller sees `Inserted`.
///
/// The statement runs outside an explicit transaction: it commits when it returns, so an `Inserted` answer
/// means the row is durable.
pub async fn insert_event<'c>(
    conn: impl PgExecutor<'c> + Copy,
    ev: &NewEvent<'_>,
) -> Result<StoreOutcome, sqlx::Error> {
    let inserted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO webhook_events
             (provider, provider_event_id, event_type, signed_at, headers, query, body)
         VALUES ($1, $2, $3, to_timestamp($4), $5, $6, $7)
         ON CONFLICT ON CONSTRAINT webhook_events_provider_event_id_key DO NOTHING
         RETURNING id",
    )
    .bind(ev.provider)
    .bind(ev.provider_event_id)
    .bind(ev.event_type)
    .bind(ev.signed_at.map(|t| t as f64))
    .bind(Json(&ev.headers))
    .bind(ev.query)
    .bind(ev.body)
    .fetch_optional(conn)
    .await?;
    if let Some(id) = inserted {
        return Ok(StoreOutcome::Inserted(id));
    }
    // Duplicate. A separate statement (new snapshot) sees the row the conflicting transaction committed.
    let existing: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM webhook_events WHERE provider = $1 AND provider_event_id = $2",
    )
    .bind(ev.provider)
    .bind(ev.provider_event_id)
    .fetch_optional(conn)
    .await?;
    Ok(StoreOutcome::Duplicate(existing))
}

/// An event owned by a batch (the batch writer outlives the request that produced it).
#[derive(Debug, Clone)]
pub struct OwnedEvent {
    /// Configured provider name.
    pub provider: String,
    /// The provider's event id.
    pub provider_event_id: String,
    /// Event type.
    pub event_type: Option<String>,
    /// Signed timestamp, unix seconds.
    pub signed_at: Option<i64>,
    /// Storable headers.
    pub headers: Vec<(String, String)>,
    /// Raw query string.
    pub query: String,
    /// Raw body.
    pub body: bytes::Bytes,
}

/// Stores many events with ONE multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING` (one commit for all), and
/// returns one outcome per input, in input order.
///
/// The constraint still decides every duplicate, including duplicates inside the batch: for each key exactly one
/// input can be `Inserted` (the first one), the others are `Duplicate` with the same id. Rows are inserted in key
/// order so that two concurrent batches sharing keys take their index locks in the same order and cannot
/// deadlock.
pub async fn insert_events_batch(
    pool: &sqlx::PgPool,
    events: &[OwnedEvent],
) -> Result<Vec<StoreOutcome>, sqlx::Error> {
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by(|&a, &b| {
        (&events[a].provider, &events[a].provider_event_id)
            .cmp(&(&events[b].provider, &events[b].provider_event_id))
    });
    let mut providers = Vec::with_capacity(events.len());
    let mut ids = Vec::with_capacity(events.len());
    let mut types = Vec::with_capacity(events.len());
    let mut signed = Vec::with_capacity(events.len());
    let mut headers = Vec::with_capacity(events.len());
    let mut queries = Vec::with_capacity(events.len());
    let mut bodies: Vec<&[u8]> = Vec::with_capacity(events.len());
    for &i in &order {
        let e = &events[i];
        providers.push(e.provider.as_str());
        ids.push(e.provider_event_id.as_str());
        types.push(e.event_type.as_deref());
        signed.push(e.signed_at.map(|t| t as f64));
        headers.push(serde_json::to_string(&e.headers).unwrap_or_else(|_| "[]".into()));
        queries.push(e.query.as_str());
        bodies.push(&e.body);
    }
    let inserted: Vec<(i64, String, String)> = sqlx::query_as(
        "INSERT INTO webhook_events
             (provider, provider_event_id, event_type, signed_at, headers, query, body)
         SELECT p, i, t, to_timestamp(s), h::jsonb, q, b
         FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[], $6::text[], $7::bytea[])
              AS u(p, i, t, s, h, q, b)
         ON CONFLICT ON CONSTRAINT webhook_events_provider_event_id_key DO NOTHING
         RETURNING id, provider, provider_event_id",
    )
    .bind(&providers)
    .bind(&ids)
    .bind(&types)
    .bind(&signed)
    .bind(&headers)
    .bind(&queries)
    .bind(&bodies)
    .fetch_all(pool)
    .await?;
    let mut fresh: std::collections::HashMap<(String, String), i64> = inserted
        .into_iter()
        .map(|(id, p, e)| ((p, e), id))
        .collect();
    let mut known: std::collections::HashMap<(String, String), i64> = Default::default();
    let mut outcomes = vec![StoreOutcome::Duplicate(None); events.len()];
    let mut missing = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let key = (e.provider.clone(), e.provider_event_id.clone());
        if let Some(id) = fresh.remove(&key) {
            known.insert(key, id);
            outcomes[i] = StoreOutcome::Inserted(id);
        } else if let Some(id) = known.get(&key) {
            outcomes[i] = StoreOutcome::Duplicate(Some(*id));
        } else {
            missing.push(i);
        }
    }
    if !missing.is_empty() {
        // Stored before this batch (or by a concurrent one that committed first): a new statement sees them.
        let (ps, es): (Vec<&str>, Vec<&str>) = missing
            .iter()
            .map(|&i| {
                (
                    events[i].provider.as_str(),
                    events[i].provider_event_id.as_str(),
                )
            })
            .unzip();
        let existing: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT w.id, w.provider, w.provider_event_id FROM webhook_events w
             JOIN unnest($1::text[], $2::text[]) AS k(p, i) ON w.provider = k.p AND w.provider_event_id = k.i",
        )
        .bind(&ps)
        .bind(&es)
        .fetch_all(pool)
        .await?;
        let existing: std::collections::HashMap<(String, String), i64> = existing
            .into_iter()
            .map(|(id, p, e)| ((p, e), id))
            .collect();
        for i in missing {
            let key = (
                events[i].provider.clone(),
                events[i].provider_event_id.clone(),
            );
            outcomes[i] = StoreOutcome::Duplicate(existing.get(&key).copied());
        }
    }
    Ok(outcomes)
}

/// The outbox as the database sees it: committed events not yet confirmed by RabbitMQ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnpublishedBacklog {
    /// Rows with `published_at IS NULL`.
    pub count: i64,
    /// Age in seconds of the oldest of them (0 when there are none).
    pub oldest_secs: f64,
}

impl UnpublishedBacklog {
    /// Sets `hookline_relay_backlog` and `hookline_relay_oldest_unpublished_seconds`.
    pub fn report(&self) {
        metrics::gauge!("hookline_relay_backlog").set(self.count as f64);
        metrics::gauge!("hookline_relay_oldest_unpublished_seconds").set(self.oldest_secs);
    }
}

/// Reads the outbox backlog from the table (the partial index on unpublished rows keeps it proportional to the
/// backlog). Health and metrics use this, never a counter kept in memory: a dead relay cannot keep it at 0.
pub async fn unpublished_backlog<'c>(
    conn: impl PgExecutor<'c>,
) -> Result<UnpublishedBacklog, sqlx::Error> {
    let (count, oldest): (i64, Option<f64>) = sqlx::query_as(
        "SELECT count(*), extract(epoch FROM now() - min(received_at))::float8
         FROM webhook_events WHERE published_at IS NULL",
    )
    .fetch_one(conn)
    .await?;
    Ok(UnpublishedBacklog {
        count,
        oldest_secs: oldest.unwrap_or(0.0).max(0.0),
    })
}
