//! `webhook_events`: the stored raw event, its storage bounds and every statement on the table (the edge's
//! group-commit insert, operator selections, status counts; the relay's outbox is `event_outbox`, in
//! [`crate::event_outbox`]). One table, one owner, in three files: the bounds a row must keep ([`bounds`]),
//! storing and reading one event (here), and the operators' selections and listings ([`select`]).

mod bounds;
mod select;

pub use bounds::*;
pub use select::*;

use sqlx::PgExecutor;

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
    /// The W3C `traceparent` of the span that received it (see [`crate::telemetry`]): stored with the row, so
    /// the relay, a republish after a crash and a replay continue its trace.
    pub traceparent: Option<String>,
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
    let mut traceparents = Vec::with_capacity(events.len());
    for &i in &order {
        let e = &events[i];
        providers.push(e.provider.as_str());
        ids.push(e.provider_event_id.as_str());
        types.push(e.event_type.as_deref());
        signed.push(e.signed_at.map(|t| t as f64));
        headers.push(serde_json::to_string(&e.headers).unwrap_or_else(|_| "[]".into()));
        queries.push(e.query.as_str());
        bodies.push(&e.body);
        traceparents.push(e.traceparent.as_deref());
    }
    let inserted: Vec<(i64, String, String)> = sqlx::query_as(
        "INSERT INTO webhook_events
             (provider, provider_event_id, event_type, signed_at, headers, query, body, source, traceparent)
         SELECT p, i, t, to_timestamp(s), h::jsonb, q, b, $8, tp
         FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[], $6::text[], $7::bytea[],
                     $9::text[])
              AS u(p, i, t, s, h, q, b, tp)
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
    .bind(&traceparents)
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
