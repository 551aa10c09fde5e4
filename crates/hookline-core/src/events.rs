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
