//! `outbound_requests`: the outbox of calls to the gateway (charges and refunds). This module owns the table's
//! SQL. Rows are written in the transaction that creates the intent or refund ([`enqueue`]); dispatchers claim
//! due rows with a lease ([`claim_due`], `FOR UPDATE SKIP LOCKED`: several dispatchers never send one request at
//! the same time), send, and record the outcome. The idempotency key is stored with the row and sent unchanged
//! on every attempt.

use std::time::Duration;

use sqlx::{PgConnection, PgExecutor};
use time::OffsetDateTime;

/// What a request does at the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Create (and confirm) the charge of an intent.
    Charge,
    /// Refund part of a charged intent.
    Refund,
}

impl Kind {
    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Charge => "charge",
            Kind::Refund => "refund",
        }
    }
}

/// A claimed request.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    /// `outbound_requests.id`.
    pub id: i64,
    /// `charge` or `refund`.
    pub kind: String,
    /// The intent it charges or refunds.
    pub intent_id: i64,
    /// The refund, for `refund`.
    pub refund_id: Option<i64>,
    /// Configured provider name.
    pub provider: String,
    /// The gateway idempotency key: the same on every attempt.
    pub idempotency_key: String,
    /// Attempts so far, this one included.
    pub attempts: i32,
}

/// Queues a request in the caller's transaction. The UNIQUE key makes a second enqueue of the same operation a
/// no-op (returns `false`).
pub async fn enqueue(
    tx: &mut PgConnection,
    kind: Kind,
    intent_id: i64,
    refund_id: Option<i64>,
    provider: &str,
    idempotency_key: &str,
) -> Result<bool, sqlx::Error> {
    let n = sqlx::query(
        "INSERT INTO outbound_requests (kind, intent_id, refund_id, provider, idempotency_key)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT ON CONSTRAINT outbound_requests_idempotency_key DO NOTHING",
    )
    .bind(kind.as_str())
    .bind(intent_id)
    .bind(refund_id)
    .bind(provider)
    .bind(idempotency_key)
    .execute(tx)
    .await?
    .rows_affected();
    Ok(n > 0)
}

/// Claims up to `limit` due requests for `lease` (their lease is set and their attempt counted, in one
/// statement). A request whose dispatcher died is claimed again once its lease has expired — and sent with the
/// same key, so the gateway answers the first attempt's result instead of charging again.
pub async fn claim_due<'c>(
    conn: impl PgExecutor<'c>,
    limit: i64,
    lease: Duration,
) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE outbound_requests o
            SET lease_until = now() + make_interval(secs => $2), attempts = o.attempts + 1, updated_at = now()
          WHERE o.id IN (SELECT id FROM outbound_requests
                          WHERE status = 'pending' AND next_attempt_at <= now()
                            AND (lease_until IS NULL OR lease_until < now())
                          ORDER BY next_attempt_at, id LIMIT $1
                          FOR UPDATE SKIP LOCKED)
          RETURNING o.id, o.kind, o.intent_id, o.refund_id, o.provider, o.idempotency_key, o.attempts",
    )
    .bind(limit)
    .bind(lease.as_secs_f64())
    .fetch_all(conn)
    .await
}

/// The gateway accepted the request (2xx).
pub async fn succeed(conn: &mut PgConnection, id: i64, status: u16) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE outbound_requests SET status = 'succeeded', lease_until = NULL, last_status = $2,
                last_error = NULL, updated_at = now()
          WHERE id = $1",
    )
    .bind(id)
    .bind(i16::try_from(status).unwrap_or(i16::MAX))
    .execute(conn)
    .await?;
    Ok(())
}

/// A retryable failure (timeout, connection error, 5xx, 429): try again after `after`.
pub async fn retry_later<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
    after: Duration,
    status: Option<u16>,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE outbound_requests SET lease_until = NULL, next_attempt_at = now() + make_interval(secs => $2),
                last_status = $3, last_error = $4, updated_at = now()
          WHERE id = $1 AND status = 'pending'",
    )
    .bind(id)
    .bind(after.as_secs_f64())
    .bind(status.and_then(|s| i16::try_from(s).ok()))
    .bind(error)
    .execute(conn)
    .await?;
    Ok(())
}

/// A final failure (a 4xx other than 429): the reason is kept for the operator.
pub async fn fail(
    conn: &mut PgConnection,
    id: i64,
    status: Option<u16>,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE outbound_requests SET status = 'failed', lease_until = NULL, last_status = $2,
                last_error = $3, updated_at = now()
          WHERE id = $1",
    )
    .bind(id)
    .bind(status.and_then(|s| i16::try_from(s).ok()))
    .bind(error)
    .execute(conn)
    .await?;
    Ok(())
}

/// Pending and failed requests, for `hookline status`: `(pending, failed, oldest pending age in seconds)`.
pub async fn summary<'c>(
    conn: impl PgExecutor<'c>,
) -> Result<(i64, i64, Option<f64>), sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'pending'),
                count(*) FILTER (WHERE status = 'failed'),
                extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8
           FROM outbound_requests",
    )
    .fetch_one(conn)
    .await
}

/// Charges and refunds without the gateway's final word for longer than a threshold (see [`unresolved`]).
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct Unresolved {
    /// Payment intents still `requires_dispatch` or `processing`.
    pub intents: i64,
    /// Refunds still `requires_dispatch`.
    pub refunds: i64,
    /// Seconds since the oldest of them last changed.
    pub oldest_secs: Option<f64>,
}

/// Payment intents still `requires_dispatch` or `processing`, and refunds still `requires_dispatch`, whose
/// last change is older than `older_than`, for `hookline status`: a charge whose answer was never readable, a
/// `processing` intent whose webhook never came. Reads `payment_intents` and `outbound_refunds` (owned by
/// [`crate::intents`]) because it is the outbox's question — did every request reach a final state? — and
/// uses their partial `*_unresolved_idx` indexes.
pub async fn unresolved<'c>(
    conn: impl PgExecutor<'c>,
    older_than: Duration,
) -> Result<Unresolved, sqlx::Error> {
    sqlx::query_as(
        "WITH i AS (SELECT count(*) AS n, min(updated_at) AS oldest FROM payment_intents
                     WHERE status IN ('requires_dispatch', 'processing')
                       AND updated_at < now() - make_interval(secs => $1)),
              r AS (SELECT count(*) AS n, min(updated_at) AS oldest FROM outbound_refunds
                     WHERE status = 'requires_dispatch'
                       AND updated_at < now() - make_interval(secs => $1))
         SELECT i.n AS intents, r.n AS refunds,
                extract(epoch FROM now() - least(i.oldest, r.oldest))::float8 AS oldest_secs
           FROM i, r",
    )
    .bind(older_than.as_secs_f64())
    .fetch_one(conn)
    .await
}

/// An outbound request and its attempts so far, as operators see it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RequestRow {
    /// `outbound_requests.id`.
    pub id: i64,
    /// `charge` or `refund`.
    pub kind: String,
    /// The intent it belongs to.
    pub intent_id: i64,
    /// `pending`, `succeeded`, `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: i32,
    /// The gateway's last HTTP status.
    pub last_status: Option<i16>,
    /// The last error.
    pub last_error: Option<String>,
    /// Next attempt (pending ones).
    pub next_attempt_at: OffsetDateTime,
    /// Last change.
    pub updated_at: OffsetDateTime,
}

/// The requests of `intent_ids`.
pub async fn of_intents<'c>(
    conn: impl PgExecutor<'c>,
    intent_ids: &[i64],
) -> Result<Vec<RequestRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, kind, intent_id, status, attempts, last_status, last_error, next_attempt_at, updated_at
         FROM outbound_requests WHERE intent_id = ANY($1) ORDER BY intent_id DESC, id",
    )
    .bind(intent_ids)
    .fetch_all(conn)
    .await
}
