//! The operators' reads of `webhook_events`: the selections of replays and redrives (resumable, stored in the
//! audit row), the status counts per provider, and the console's listings and detail.

use sqlx::PgExecutor;

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
    /// The trace the event was received in: a replay continues it.
    pub traceparent: Option<String>,
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
                END AS state, e.traceparent
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

/// The providers that have stored events, as an array: a loose index scan of the UNIQUE `(provider,
/// provider_event_id)` key, one descent per provider (PostgreSQL 15 has no skip scan). A search by the provider's
/// event id alone then asks that key once per provider instead of needing an index of its own, which every stored
/// event would pay for (migration `20261205000021`). Exact, not the configured providers: events of a provider
/// since removed from the configuration are still found.
const PROVIDERS_PRESENT: &str = "ARRAY(WITH RECURSIVE present(p) AS (
        SELECT min(provider) FROM webhook_events
        UNION ALL
        SELECT (SELECT min(w.provider) FROM webhook_events w WHERE w.provider > present.p)
          FROM present WHERE present.p IS NOT NULL)
     SELECT p FROM present WHERE p IS NOT NULL)";

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
/// query can use the index that fits it (`webhook_events_provider_id_idx`, `…_type_id_idx`, the UNIQUE key for
/// a search, the received_at index, the unresolved dead letters).
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
                    .push(" OR (e.provider = ANY(")
                    .push(PROVIDERS_PRESENT)
                    .push(") AND e.provider_event_id = ")
                    .push_bind(s.clone())
                    .push("))");
            }
            Err(_) => {
                q.push(" AND e.provider = ANY(")
                    .push(PROVIDERS_PRESENT)
                    .push(") AND e.provider_event_id = ")
                    .push_bind(s.clone());
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
    /// The trace it was received in (W3C `traceparent`), when it has one.
    pub traceparent: Option<String>,
}

/// Reads every column of stored event `id`, if it still exists.
pub async fn get_full<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
) -> Result<Option<FullRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT e.id, e.provider, e.provider_event_id, e.event_type, e.received_at, e.signed_at,
                o.enqueued_at AS unpublished_since, e.source, e.headers, e.query, e.body, e.traceparent
         FROM webhook_events e LEFT JOIN event_outbox o ON o.event_id = e.id
         WHERE e.id = $1",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}
