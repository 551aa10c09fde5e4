//! The stored raw event and its repository functions.

use sqlx::types::Json;
use sqlx::PgExecutor;

/// Header names never stored: credentials of the sender's HTTP client, irrelevant to verification or replay.
const UNSTORED_HEADERS: &[&str] = &["authorization", "cookie", "proxy-authorization"];

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

/// Keeps the headers worth storing, with values made UTF-8 (lossily: non-UTF-8 header bytes are rare and the
/// headers are kept for operators, not for re-verification of the body).
pub fn storable_headers<'h>(
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(name, _)| !UNSTORED_HEADERS.contains(&name.to_ascii_lowercase().as_str()))
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
