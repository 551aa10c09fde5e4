//! `webhook_events`: the stored raw event, its storage bounds and every statement on the table (the edge's
//! group-commit insert, operator selections, status counts; the relay's outbox is `event_outbox`, in
//! [`crate::event_outbox`]). One table, one owner:
//! the file is long because everything that touches the table is here.

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

/// Fragments that make any header name look like a credential wherever they occur (`x-api-key`,
/// `x-auth-token`, `x-amz-security-token`, `x-client-secret`, `x-session-id`, `x-jwt-assertion`, …).
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
    "jwt",
    "bearer",
];

/// True when a header of this name must never be stored (nor logged, nor shown): it may carry a credential.
///
/// The rule, on the lower-cased name: an exact [`UNSTORED_HEADERS`] name, or a [`CREDENTIAL_FRAGMENTS`]
/// fragment anywhere, or a *word* (split on `-` and `_`) that is or ends with `key` (`x-access-key`,
/// `x-signature-key`, `x-signature-key-id`, `x-hookkey`, `idempotency-key` too: a header named for a key is too
/// often a credential to tell apart, and no provider signs one). Signature headers are KEPT: `stripe-signature`,
/// `x-hub-signature(-256)`, `x-signature` and `x-request-id` (Mercado Pago), `webhook-*`/`svix-*`,
/// `x-shopify-hmac-sha256` carry no secret (an HMAC of the body) and the console's "verify now" and
/// `hookline verify` re-check the stored event with them; none of their words is a key.
pub fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    UNSTORED_HEADERS.contains(&name.as_str())
        || CREDENTIAL_FRAGMENTS.iter().any(|f| name.contains(f))
        || name.split(['-', '_']).any(|word| word.ends_with("key"))
}

#[cfg(test)]
mod credential_header_tests {
    use super::is_credential_header;

    /// Names that must never be stored.
    const DROPPED: &[&str] = &[
        "authorization",
        "Authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "X-Api-Key",
        "x-apikey",
        "api_key",
        "x-signature-key",
        "X-Signature-Key",
        "x-signature-key-id",
        "x-webhook-signature-key",
        "x-access-key",
        "X-Access-Key",
        "x-secret-key",
        "x-private-key",
        "x-hookkey",
        "key",
        "x-jwt",
        "X-Jwt",
        "x-jwt-assertion",
        "jwt",
        "x-auth-token",
        "x-amz-security-token",
        "x-secret",
        "x-client-secret",
        "x-password",
        "x-passwd",
        "x-session-id",
        "x-credentials",
        "x-bearer",
        "x-csrf-token",
        "idempotency-key",
    ];

    /// Names that must be kept (signature verification and operators need them).
    const KEPT: &[&str] = &[
        "stripe-signature",
        "Stripe-Signature",
        "x-hub-signature",
        "x-hub-signature-256",
        "x-signature",
        "x-request-id",
        "content-type",
        "content-length",
        "user-agent",
        "x-github-event",
        "x-github-delivery",
        "x-shopify-hmac-sha256",
        "x-shopify-topic",
        "x-shopify-webhook-id",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "svix-id",
        "svix-timestamp",
        "svix-signature",
        "x-forwarded-for",
        "keep-alive",
        "accept",
    ];

    #[test]
    fn credential_headers_are_dropped_and_signature_headers_kept() {
        let wrongly_kept: Vec<_> = DROPPED
            .iter()
            .filter(|n| !is_credential_header(n))
            .collect();
        let wrongly_dropped: Vec<_> = KEPT.iter().filter(|n| is_credential_header(n)).collect();
        assert!(
            wrongly_kept.is_empty() && wrongly_dropped.is_empty(),
            "kept but credentials: {wrongly_kept:?}; dropped but needed: {wrongly_dropped:?}"
        );
    }

    /// Every header a signature scheme reads is kept, or the console could not re-verify a stored event.
    #[test]
    fn every_scheme_header_is_kept() {
        for name in [
            "Stripe-Signature",
            "X-Hub-Signature",
            "X-Hub-Signature-256",
            "X-GitHub-Delivery",
            "X-GitHub-Event",
            "X-Shopify-Hmac-SHA256",
            "X-Shopify-Topic",
            "X-Shopify-Webhook-Id",
            "svix-id",
            "svix-signature",
            "svix-timestamp",
            "webhook-id",
            "webhook-signature",
            "webhook-timestamp",
            "x-request-id",
            "x-signature",
        ] {
            assert!(!is_credential_header(name), "{name}");
        }
    }
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

/// A verified event to store (owned: the edge's batch writer outlives the request that produced it).
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

/// Stores one event through the same statement as the edge's group commit ([`insert_events_batch`] with one
/// row): for tools, the benchmark's baseline and tests, so that "stored as the edge does" is literally true.
pub async fn insert_one(
    pool: &sqlx::PgPool,
    event: &OwnedEvent,
) -> Result<StoreOutcome, sqlx::Error> {
    let outcomes = insert_events_batch(pool, std::slice::from_ref(event)).await?;
    Ok(outcomes
        .into_iter()
        .next()
        .unwrap_or(StoreOutcome::Duplicate(None)))
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
    insert_rows(pool, events, Source::Webhook).await
}

/// Where a stored event came from (`webhook_events.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Received by the edge, signature verified.
    Webhook,
    /// Read from the provider's API by reconciliation because its webhook never arrived.
    Reconcile,
}

impl Source {
    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Webhook => "webhook",
            Source::Reconcile => "reconcile",
        }
    }
}

/// Stores events that reconciliation read from the provider's API, through the same statement and UNIQUE key
/// as the edge (a webhook arriving later is a duplicate of it, and the other way round), marked as such.
pub async fn insert_reconciled(
    pool: &sqlx::PgPool,
    events: &[OwnedEvent],
) -> Result<Vec<StoreOutcome>, sqlx::Error> {
    insert_rows(pool, events, Source::Reconcile).await
}

async fn insert_rows(
    pool: &sqlx::PgPool,
    events: &[OwnedEvent],
    source: Source,
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
             (provider, provider_event_id, event_type, signed_at, headers, query, body, source)
         SELECT p, i, t, to_timestamp(s), h::jsonb, q, b, $8
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
    .bind(source.as_str())
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

/// Whether stored event `id` exists (it may have been purged).
pub async fn exists<'c>(conn: impl PgExecutor<'c>, id: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM webhook_events WHERE id = $1)")
        .bind(id)
        .fetch_one(conn)
        .await
}

/// Which of `ids` are stored events (one statement, for a batch).
pub async fn existing_among<'c>(
    conn: impl PgExecutor<'c>,
    ids: &[i64],
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM webhook_events WHERE id = ANY ($1)")
        .bind(ids)
        .fetch_all(conn)
        .await
}

/// A stored event as operators see it (`dlq show`, the console).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredRow {
    /// The stored dedupe key.
    pub provider_event_id: String,
    /// Raw body.
    pub body: Vec<u8>,
    /// Stored headers, `[[name, value], …]`.
    pub headers: serde_json::Value,
    /// Raw query string.
    pub query: String,
    /// When the edge stored it.
    pub received_at: time::OffsetDateTime,
}

/// Reads stored event `id`, if it still exists.
pub async fn get<'c>(conn: impl PgExecutor<'c>, id: i64) -> Result<Option<StoredRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT provider_event_id, body, headers, query, received_at FROM webhook_events WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Which stored events an operator run (replay, dead-letter redrive) selects. Stored as JSON in the run's audit
/// row, so an interrupted run resumes with exactly the same selection.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Selection {
    /// Provider name.
    pub provider: Option<String>,
    /// Event type.
    pub event_type: Option<String>,
    /// Received at or after (RFC 3339).
    #[serde(with = "time::serde::rfc3339::option")]
    pub since: Option<time::OffsetDateTime>,
    /// Received before (RFC 3339).
    #[serde(with = "time::serde::rfc3339::option")]
    pub until: Option<time::OffsetDateTime>,
    /// Explicit ids.
    pub ids: Vec<i64>,
    /// `all`, `unprocessed` (a consumer has no marker for it) or `dead` (a consumer has an unresolved dead
    /// letter for it).
    pub state: String,
}

/// One selected event, with its state over the consumers.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SelectedEvent {
    /// `webhook_events.id`.
    pub id: i64,
    /// Configured provider name.
    pub provider: String,
    /// The stored dedupe key.
    pub provider_event_id: String,
    /// Event type.
    pub event_type: Option<String>,
    /// When the edge stored it.
    pub received_at: time::OffsetDateTime,
    /// `dead`, `unprocessed`, or the markers' outcomes (`applied`, `ignored`, …; comma-separated per consumer).
    pub state: String,
}

/// The selection's FROM/WHERE; `$1` cursor (exclusive lower bound on the id), `$2`–`$7` the [`Selection`],
/// `$8` the consumers.
const SELECTION: &str = "
    FROM webhook_events e
    WHERE e.id > $1
      AND ($2::text IS NULL OR e.provider = $2)
      AND ($3::text IS NULL OR e.event_type = $3)
      AND ($4::timestamptz IS NULL OR e.received_at >= $4)
      AND ($5::timestamptz IS NULL OR e.received_at < $5)
      AND (cardinality($6::bigint[]) = 0 OR e.id = ANY($6))
      AND CASE $7::text
            WHEN 'all' THEN true
            WHEN 'unprocessed' THEN EXISTS (
                SELECT 1 FROM unnest($8::text[]) AS c(consumer)
                WHERE NOT EXISTS (SELECT 1 FROM processed_events p
                                  WHERE p.consumer = c.consumer AND p.event_id = e.id))
            WHEN 'dead' THEN EXISTS (
                SELECT 1 FROM dead_letters d
                WHERE d.consumer = ANY($8) AND d.event_id = e.id AND d.resolved_at IS NULL)
          END";

fn bind_selection<'q, O>(
    q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    sel: &'q Selection,
    consumers: &'q [&'q str],
    cursor: i64,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    q.bind(cursor)
        .bind(&sel.provider)
        .bind(&sel.event_type)
        .bind(sel.since)
        .bind(sel.until)
        .bind(&sel.ids)
        .bind(&sel.state)
        .bind(consumers)
}

/// How many events the selection holds after `cursor`.
pub async fn count_selection<'c>(
    conn: impl PgExecutor<'c>,
    sel: &Selection,
    consumers: &[&str],
    cursor: i64,
) -> Result<i64, sqlx::Error> {
    let sql = format!("SELECT count(*) {SELECTION}");
    let (n,): (i64,) = bind_selection(sqlx::query_as(&sql), sel, consumers, cursor)
        .fetch_one(conn)
        .await?;
    Ok(n)
}

/// One page of the selection after `cursor`, in id order (keyset pagination: memory stays flat).
pub async fn select_page<'c>(
    conn: impl PgExecutor<'c>,
    sel: &Selection,
    consumers: &[&str],
    cursor: i64,
    limit: u32,
) -> Result<Vec<SelectedEvent>, sqlx::Error> {
    let sql = format!(
        "SELECT e.id, e.provider, e.provider_event_id, e.event_type, e.received_at,
                CASE WHEN EXISTS (SELECT 1 FROM dead_letters d WHERE d.consumer = ANY($8)
                                  AND d.event_id = e.id AND d.resolved_at IS NULL) THEN 'dead'
                     WHEN EXISTS (SELECT 1 FROM unnest($8::text[]) AS c(consumer)
                                  WHERE NOT EXISTS (SELECT 1 FROM processed_events p
                                                    WHERE p.consumer = c.consumer AND p.event_id = e.id))
                          THEN 'unprocessed'
                     ELSE (SELECT string_agg(p.outcome, ',' ORDER BY p.consumer) FROM processed_events p
                           WHERE p.consumer = ANY($8) AND p.event_id = e.id)
                END AS state
         {SELECTION} ORDER BY e.id LIMIT {limit}"
    );
    bind_selection(sqlx::query_as(&sql), sel, consumers, cursor)
        .fetch_all(conn)
        .await
}

/// Counts of one provider's stored events as one consumer sees them (`hookline status`).
#[derive(Debug, Clone, Default, serde::Serialize, sqlx::FromRow)]
pub struct ProviderStatus {
    /// Provider name (`TOTAL` in a sum).
    pub provider: String,
    /// The consumer the processing columns are about.
    pub consumer: String,
    /// Stored events.
    pub received: i64,
    /// Not yet confirmed by RabbitMQ.
    pub unpublished: i64,
    /// Age of the oldest unpublished one.
    pub oldest_unpublished_secs: Option<f64>,
    /// With a processed marker.
    pub processed: i64,
    /// Marker outcome `applied`.
    pub applied: i64,
    /// Marker outcome `parked`.
    pub parked: i64,
    /// Marker outcome `ignored`.
    pub ignored: i64,
    /// Marker outcome `needs_fetch`.
    pub needs_fetch: i64,
    /// With an unresolved dead letter.
    pub dead_lettered: i64,
    /// Without a marker, given up on by an operator (`hookline dlq discard`): never processed, purgeable.
    pub discarded: i64,
    /// Neither processed, nor dead-lettered, nor discarded: unpublished, queued or being processed now.
    /// `received = processed + dead_lettered + discarded + in_flight` (a marker wins over a dead letter).
    pub in_flight: i64,
}

/// One row per (provider, consumer): received, unpublished and the consumer's processing counts.
pub async fn status_by_provider<'c>(
    conn: impl PgExecutor<'c>,
    consumers: &[&str],
) -> Result<Vec<ProviderStatus>, sqlx::Error> {
    sqlx::query_as(
        "SELECT e.provider, c.consumer,
                count(*) AS received,
                count(o.event_id) AS unpublished,
                extract(epoch FROM now() - min(o.enqueued_at))::float8 AS oldest_unpublished_secs,
                count(p.event_id) AS processed,
                count(*) FILTER (WHERE p.outcome = 'applied') AS applied,
                count(*) FILTER (WHERE p.outcome = 'parked') AS parked,
                count(*) FILTER (WHERE p.outcome = 'ignored') AS ignored,
                count(*) FILTER (WHERE p.outcome = 'needs_fetch') AS needs_fetch,
                count(*) FILTER (WHERE p.event_id IS NULL AND d.event_id IS NOT NULL
                                   AND d.resolved_at IS NULL) AS dead_lettered,
                count(*) FILTER (WHERE p.event_id IS NULL AND d.resolution = 'discarded') AS discarded,
                count(*) FILTER (WHERE p.event_id IS NULL
                                   AND (d.event_id IS NULL OR (d.resolved_at IS NOT NULL
                                        AND d.resolution IS DISTINCT FROM 'discarded'))) AS in_flight
         FROM webhook_events e
         LEFT JOIN event_outbox o ON o.event_id = e.id
         CROSS JOIN unnest($1::text[]) AS c(consumer)
         LEFT JOIN processed_events p ON p.consumer = c.consumer AND p.event_id = e.id
         LEFT JOIN dead_letters d ON d.consumer = c.consumer AND d.event_id = e.id
         GROUP BY e.provider, c.consumer ORDER BY e.provider, c.consumer",
    )
    .bind(consumers)
    .fetch_all(conn)
    .await
}

/// Which of `keys` (dedupe keys of `provider`) are stored already.
pub async fn stored_keys<'c>(
    conn: impl PgExecutor<'c>,
    provider: &str,
    keys: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT provider_event_id FROM webhook_events WHERE provider = $1 AND provider_event_id = ANY($2)",
    )
    .bind(provider)
    .bind(keys)
    .fetch_all(conn)
    .await
}

/// What the operator console's event list filters on. Every part is optional; present parts are ANDed.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Provider name.
    pub provider: Option<String>,
    /// Event type.
    pub event_type: Option<String>,
    /// One of [`LIST_STATES`].
    pub state: Option<String>,
    /// Received at or after.
    pub since: Option<time::OffsetDateTime>,
    /// Received before.
    pub until: Option<time::OffsetDateTime>,
    /// An exact stored id (`webhook_events.id`) or provider event id.
    pub search: Option<String>,
}

/// The states the event list can filter on: a marker outcome, no marker yet, an unresolved dead letter, or
/// not yet confirmed by RabbitMQ.
pub const LIST_STATES: &[&str] = &[
    "applied",
    "ignored",
    "parked",
    "needs_fetch",
    "unprocessed",
    "dead",
    "unpublished",
];

/// One row of the console's event list.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ListedEvent {
    /// `webhook_events.id`.
    pub id: i64,
    /// Provider name.
    pub provider: String,
    /// The stored dedupe key.
    pub provider_event_id: String,
    /// Event type.
    pub event_type: Option<String>,
    /// When the edge stored it.
    pub received_at: time::OffsetDateTime,
    /// Confirmed by RabbitMQ.
    pub published: bool,
    /// `dead`, `unprocessed`, or the markers' outcomes (comma-separated per consumer).
    pub state: String,
}

/// One page of the console's event list, newest first: events with `id < before` (keyset pagination: no
/// OFFSET, so page 10 000 costs what page 1 costs). Only the filters present become SQL conditions, so each
/// query can use the index that fits it (`webhook_events_provider_id_idx`, `…_type_id_idx`, `…_event_id_idx`,
/// the received_at index, the unresolved dead letters).
pub async fn list_page<'c>(
    conn: impl PgExecutor<'c>,
    filter: &ListFilter,
    consumers: &[&str],
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<ListedEvent>, sqlx::Error> {
    let mut q = sqlx::QueryBuilder::<sqlx::Postgres>::new(
        "SELECT e.id, e.provider, e.provider_event_id, e.event_type, e.received_at,
                NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = e.id) AS published,
                CASE WHEN EXISTS (SELECT 1 FROM dead_letters d WHERE d.consumer = ANY(",
    );
    q.push_bind(consumers.to_vec());
    q.push(
        ") AND d.event_id = e.id AND d.resolved_at IS NULL) THEN 'dead'
                     ELSE coalesce((SELECT string_agg(p.outcome, ',' ORDER BY p.consumer)
                                    FROM processed_events p WHERE p.consumer = ANY(",
    );
    q.push_bind(consumers.to_vec());
    q.push(
        ") AND p.event_id = e.id), 'unprocessed')
                END AS state
         FROM webhook_events e WHERE true",
    );
    if let Some(before) = before {
        q.push(" AND e.id < ").push_bind(before);
    }
    if let Some(p) = &filter.provider {
        q.push(" AND e.provider = ").push_bind(p.clone());
    }
    if let Some(t) = &filter.event_type {
        q.push(" AND e.event_type = ").push_bind(t.clone());
    }
    if let Some(t) = filter.since {
        q.push(" AND e.received_at >= ").push_bind(t);
    }
    if let Some(t) = filter.until {
        q.push(" AND e.received_at < ").push_bind(t);
    }
    if let Some(s) = &filter.search {
        match s.parse::<i64>() {
            Ok(id) => {
                q.push(" AND (e.id = ")
                    .push_bind(id)
                    .push(" OR e.provider_event_id = ")
                    .push_bind(s.clone())
                    .push(")");
            }
            Err(_) => {
                q.push(" AND e.provider_event_id = ").push_bind(s.clone());
            }
        }
    }
    match filter.state.as_deref() {
        Some("dead") => {
            q.push(" AND e.id IN (SELECT d.event_id FROM dead_letters d WHERE d.resolved_at IS NULL AND d.consumer = ANY(")
                .push_bind(consumers.to_vec())
                .push("))");
        }
        Some("unprocessed") => {
            q.push(" AND EXISTS (SELECT 1 FROM unnest(")
                .push_bind(consumers.to_vec())
                .push(
                    "::text[]) AS c(consumer) WHERE NOT EXISTS (SELECT 1 FROM processed_events p
                     WHERE p.consumer = c.consumer AND p.event_id = e.id))",
                );
        }
        Some("unpublished") => {
            q.push(" AND EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = e.id)");
        }
        Some(outcome) => {
            q.push(" AND EXISTS (SELECT 1 FROM processed_events p WHERE p.event_id = e.id AND p.consumer = ANY(")
                .push_bind(consumers.to_vec())
                .push(") AND p.outcome = ")
                .push_bind(outcome.to_string())
                .push(")");
        }
        None => {}
    }
    q.push(" ORDER BY e.id DESC LIMIT ")
        .push_bind(i64::from(limit));
    q.build_query_as().fetch_all(conn).await
}

/// A stored event with every column, for the console's event detail.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FullRow {
    /// `webhook_events.id`.
    pub id: i64,
    /// Provider name.
    pub provider: String,
    /// The stored dedupe key.
    pub provider_event_id: String,
    /// Event type.
    pub event_type: Option<String>,
    /// When the edge stored it.
    pub received_at: time::OffsetDateTime,
    /// The timestamp the provider signed.
    pub signed_at: Option<time::OffsetDateTime>,
    /// Since when it waits in the outbox for RabbitMQ's confirm; `None` once published.
    pub unpublished_since: Option<time::OffsetDateTime>,
    /// `webhook` or `reconcile`.
    pub source: String,
    /// Stored headers, `[[name, value], …]`.
    pub headers: serde_json::Value,
    /// Raw query string.
    pub query: String,
    /// Raw body.
    pub body: Vec<u8>,
}

/// Reads every column of stored event `id`, if it still exists.
pub async fn get_full<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
) -> Result<Option<FullRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT e.id, e.provider, e.provider_event_id, e.event_type, e.received_at, e.signed_at,
                o.enqueued_at AS unpublished_since, e.source, e.headers, e.query, e.body
         FROM webhook_events e LEFT JOIN event_outbox o ON o.event_id = e.id
         WHERE e.id = $1",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}
