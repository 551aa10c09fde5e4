//! `outbound_requests`: the outbox of calls to the gateway (charges, refunds, and the cancels and captures of
//! sent charges). This module owns the table's
//! SQL. Rows are written in the transaction that creates the intent or refund ([`enqueue`]); dispatchers claim
//! due rows with a lease ([`claim_due`], `FOR UPDATE SKIP LOCKED`: several dispatchers never send one request at
//! the same time), send, and record the outcome. The idempotency key is stored with the row and sent unchanged
//! on every attempt of a key generation.
//!
//! Statuses: `pending` (to send, or to send again with the same key) → `succeeded` (the gateway's object is
//! recorded), `declined` (the gateway declined: an outcome, not an incident), `failed` (hookline's own problem:
//! configuration, an answer it cannot interpret — needs an operator), or `unknown` (retryable failures reached the
//! key's lifetime: nothing more is sent with that key; after it expired a lookup by hookline's reference decides —
//! found → `succeeded`/`declined`, not found → `pending` again under the next key generation, see [`sent_key`]).
//!
//! A Mercado Pago saved card's charge also keeps the card token minted for its current key generation
//! (`saved_card`, [`keep_saved_card`]): stored before the payment is sent, sent unchanged on every attempt of
//! that generation.

use std::time::Duration;

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use time::OffsetDateTime;

use crate::params::MintedCard;

/// What a request does at the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Create (and confirm) the charge of an intent.
    Charge,
    /// Refund part of a charged intent.
    Refund,
    /// Cancel an intent's charge still open at the gateway (3-D Secure, Pix, an authorization: the void).
    Cancel,
    /// Capture an intent's authorization.
    Capture,
}

impl Kind {
    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Charge => "charge",
            Kind::Refund => "refund",
            Kind::Cancel => "cancel",
            Kind::Capture => "capture",
        }
    }

    /// By its database spelling.
    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Charge, Kind::Refund, Kind::Cancel, Kind::Capture]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Where a request stands (`outbound_requests.status`; the column's CHECK lists the same values): the one
/// spelling the statements below bind. [`Claimed::status`] and [`RequestRow::status`] keep the text as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestStatus {
    /// To send, or to send again with the same key.
    Pending,
    /// The gateway's object is recorded.
    Succeeded,
    /// The gateway declined: an outcome, not an incident.
    Declined,
    /// Hookline's own problem: needs an operator.
    Failed,
    /// The key's lifetime ended without an answer: looked up by hookline's reference once it expired.
    Unknown,
    /// Its intent was canceled before it was sent: never sent ([`crate::intents::cancel`]).
    Canceled,
}

impl RequestStatus {
    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Succeeded => "succeeded",
            RequestStatus::Declined => "declined",
            RequestStatus::Failed => "failed",
            RequestStatus::Unknown => "unknown",
            RequestStatus::Canceled => "canceled",
        }
    }
}

/// The idempotency key sent for generation `generation` of the request whose base key is `base`: the base itself
/// for generation 0 (every request before issue 27), `{base}-g{generation}` after. Derived, never random: a
/// dispatcher that crashed after committing a generation sends the same key as the one that would have.
pub fn sent_key(base: &str, generation: i32) -> String {
    if generation <= 0 {
        base.to_owned()
    } else {
        format!("{base}-g{generation}")
    }
}

/// How long before a key's expiry the dispatcher stops sending with it: a tenth of its lifetime, at most an hour
/// (a request in flight, clock differences between hookline and the gateway).
pub fn key_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(3600))
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
    /// The base idempotency key (constant; the key SENT is [`Claimed::sent_key`]).
    pub idempotency_key: String,
    /// Attempts so far, this one included.
    pub attempts: i32,
    /// `pending` (send it) or `unknown` (its key expired without an answer: look it up, never send it).
    pub status: String,
    /// The key generation (see [`sent_key`]).
    pub key_generation: i32,
    /// When the current generation's key was first sent (claimed).
    pub key_first_sent_at: Option<OffsetDateTime>,
    /// The trace the request was queued in (the merchant's API call, a billing run): each attempt is its child.
    pub traceparent: Option<String>,
}

impl Claimed {
    /// The key sent to the gateway: the same on every attempt of this generation.
    pub fn sent_key(&self) -> String {
        sent_key(&self.idempotency_key, self.key_generation)
    }

    /// Whether this request is `unknown` (to be resolved by lookup).
    pub fn is_unknown(&self) -> bool {
        self.status == RequestStatus::Unknown.as_str()
    }
}

/// Queues a request in the caller's transaction, in the trace of the current span (the request that asked for
/// it; see [`Claimed::traceparent`]). The UNIQUE key makes a second enqueue of the same operation a no-op
/// (returns `false`).
pub async fn enqueue(
    tx: &mut PgConnection,
    kind: Kind,
    intent_id: i64,
    refund_id: Option<i64>,
    provider: &str,
    idempotency_key: &str,
) -> Result<bool, sqlx::Error> {
    let n = sqlx::query!(
        "INSERT INTO outbound_requests (kind, intent_id, refund_id, provider, idempotency_key, traceparent)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT ON CONSTRAINT outbound_requests_idempotency_key DO NOTHING",
        kind.as_str(),
        intent_id,
        refund_id,
        provider,
        idempotency_key,
        hookline_core::telemetry::current_traceparent(),
    )
    .execute(tx)
    .await?
    .rows_affected();
    Ok(n > 0)
}

/// Each provider's idempotency-key lifetime (`providers.NAME.idempotency_key_ttl_secs`), as the claiming
/// statement reads it; a provider not listed is taken to keep its keys [`DEFAULT_KEY_TTL`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyLifetimes {
    names: Vec<String>,
    secs: Vec<f64>,
}

/// The key lifetime assumed for a provider [`KeyLifetimes`] does not list: 24 h (Stripe's and Pagar.me's).
pub const DEFAULT_KEY_TTL: Duration = Duration::from_secs(86_400);

impl KeyLifetimes {
    /// The lifetimes of `providers` (`(name, ttl)`).
    pub fn new<'a>(providers: impl IntoIterator<Item = (&'a str, Duration)>) -> KeyLifetimes {
        let (names, secs) = providers
            .into_iter()
            .map(|(name, ttl)| (name.to_owned(), ttl.as_secs_f64()))
            .unzip();
        KeyLifetimes { names, secs }
    }

    /// The lifetime of `provider`'s keys.
    pub fn of(&self, provider: &str) -> Duration {
        self.names
            .iter()
            .position(|n| n == provider)
            .map_or(DEFAULT_KEY_TTL, |i| Duration::from_secs_f64(self.secs[i]))
    }
}

/// Claims up to `limit` due requests for `lease` (their lease is set and, for pending ones, their attempt
/// counted and the first send of their key generation stamped, in one statement). A request whose dispatcher died
/// is claimed again once its lease has expired — and sent with the same key, so the gateway answers the first
/// attempt's result instead of charging again. `unknown` requests are claimed for their lookup once due (never
/// before their key expired).
///
/// **No request leaves under a key the gateway may have forgotten.** The same statement checks every `pending`
/// request whose key was sent before against its provider's lifetime (`ttls`): past the key's first send + ttl −
/// [`key_margin`] on the database's clock — the dispatcher was slow, stopped for a weekend, crashed mid-send, or
/// its lease ran out while its process was dead — it is not claimed for sending but made `unknown`, due for its
/// lookup by hookline's own reference once the key has expired (and claimed for that lookup at once when it
/// already has), exactly as [`retry_later`] decides for a retry. Only requests to send or to look up are returned.
pub async fn claim_due<'c>(
    conn: impl PgExecutor<'c>,
    limit: i64,
    lease: Duration,
    ttls: &KeyLifetimes,
) -> Result<Vec<Claimed>, sqlx::Error> {
    // `o.status IN ('pending', 'unknown')` stays literal: it is the predicate of the partial index
    // `outbound_requests_due_idx`, which a prepared statement's generic plan can only use when the values are in
    // the text. The other statuses are binds ($6 pending, $7 unknown).
    sqlx::query_as!(
        Claimed,
        "WITH due AS (
              SELECT o.id, coalesce(t.ttl, $5) AS ttl
                FROM outbound_requests o
                LEFT JOIN unnest($3::text[], $4::float8[]) AS t(provider, ttl) ON t.provider = o.provider
               WHERE o.status IN ('pending', 'unknown') AND o.next_attempt_at <= now()
                 AND (o.lease_until IS NULL OR o.lease_until < now())
               ORDER BY o.next_attempt_at, o.id LIMIT $1
               FOR UPDATE OF o SKIP LOCKED),
              d AS (
              SELECT o.id,
                     o.status = $6 AND o.key_first_sent_at IS NOT NULL
                       AND now() > o.key_first_sent_at
                                   + make_interval(secs => due.ttl - least(due.ttl / 10, 3600)) AS expired,
                     o.key_first_sent_at + make_interval(secs => due.ttl) AS expires
                FROM due JOIN outbound_requests o ON o.id = due.id),
              claimed AS (
              UPDATE outbound_requests o
                 SET status = CASE WHEN d.expired THEN $7 ELSE o.status END,
                     unknown_since = CASE WHEN d.expired THEN now() ELSE o.unknown_since END,
                     next_attempt_at = CASE WHEN d.expired THEN greatest(d.expires, now())
                                            ELSE o.next_attempt_at END,
                     last_error = CASE WHEN d.expired
                         THEN 'unknown: the key''s lifetime ended before the request was sent again (the dispatcher '
                              || 'was stopped or slow); looked up after it expires; last: '
                              || coalesce(o.last_error, 'no answer recorded')
                         ELSE o.last_error END,
                     lease_until = CASE WHEN d.expired AND d.expires > now() THEN NULL
                                        ELSE now() + make_interval(secs => $2) END,
                     attempts = o.attempts
                         + CASE WHEN o.status = $6 AND NOT d.expired THEN 1 ELSE 0 END,
                     key_first_sent_at = CASE WHEN o.status = $6 AND NOT d.expired
                                              THEN coalesce(o.key_first_sent_at, now())
                                              ELSE o.key_first_sent_at END,
                     updated_at = now()
                FROM d
               WHERE o.id = d.id
              RETURNING o.id, o.kind, o.intent_id, o.refund_id, o.provider, o.idempotency_key, o.attempts,
                        o.status, o.key_generation, o.key_first_sent_at, o.traceparent,
                        NOT d.expired OR d.expires <= now() AS to_process)
         SELECT id, kind, intent_id, refund_id, provider, idempotency_key, attempts, status, key_generation,
                key_first_sent_at, traceparent
           FROM claimed WHERE to_process",
        limit,
        lease.as_secs_f64(),
        &ttls.names as &[String],
        &ttls.secs as &[f64],
        DEFAULT_KEY_TTL.as_secs_f64(),
        RequestStatus::Pending.as_str(),
        RequestStatus::Unknown.as_str(),
    )
    .fetch_all(conn)
    .await
}

/// The gateway accepted the request (its object is recorded). `status` is the HTTP status of the answer (200
/// for an object found by lookup).
pub async fn succeed(conn: &mut PgConnection, id: i64, status: u16) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE outbound_requests SET status = $3, lease_until = NULL, last_status = $2,
                last_error = NULL, unknown_since = NULL, updated_at = now()
          WHERE id = $1",
        id,
        i16::try_from(status).unwrap_or(i16::MAX),
        RequestStatus::Succeeded.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The gateway declined the request (a card decline, a rejected payment): an outcome, kept with its reason;
/// nothing for an operator to do.
pub async fn decline(
    conn: &mut PgConnection,
    id: i64,
    status: Option<u16>,
    reason: &str,
) -> Result<(), sqlx::Error> {
    end(conn, id, RequestStatus::Declined, status, reason).await
}

/// Ends request `id` in `final_status` (declined or failed) with the answer's HTTP status and the reason.
async fn end(
    conn: &mut PgConnection,
    id: i64,
    final_status: RequestStatus,
    status: Option<u16>,
    reason: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE outbound_requests SET status = $4, lease_until = NULL, last_status = $2,
                last_error = $3, unknown_since = NULL, updated_at = now()
          WHERE id = $1",
        id,
        status.and_then(|s| i16::try_from(s).ok()),
        reason,
        final_status.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// What [`retry_later`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retried {
    /// Still `pending`: the next attempt (same key) comes before the key's lifetime ends.
    Later,
    /// Now `unknown`: the next attempt would have come too close to the key's expiry; the request is looked up
    /// once the key has expired.
    Unknown,
}

/// A retryable failure (timeout, connection error, 5xx, 429, 409): try again after `after` with the same key —
/// unless that attempt would come later than the key's first send + `ttl` - [`key_margin`], when the gateway may
/// already have forgotten the key (a resend could charge twice). Then the request becomes `unknown` (nothing more
/// is sent with that key), due for its lookup when the key has expired. Decided in one statement, on the
/// database's clock (the one that stamped `key_first_sent_at`).
pub async fn retry_later<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
    after: Duration,
    ttl: Duration,
    status: Option<u16>,
    error: &str,
) -> Result<Retried, sqlx::Error> {
    let unknown: Option<bool> = sqlx::query_scalar!(
        "WITH d AS (
              SELECT id, coalesce(key_first_sent_at, now()) + make_interval(secs => $5) AS expires,
                     now() + make_interval(secs => $2)
                       > coalesce(key_first_sent_at, now()) + make_interval(secs => $5 - $6) AS too_late
                FROM outbound_requests WHERE id = $1 AND status = $7)
         UPDATE outbound_requests o
            SET lease_until = NULL,
                status = CASE WHEN d.too_late THEN $8 ELSE $7 END,
                unknown_since = CASE WHEN d.too_late THEN now() ELSE NULL END,
                next_attempt_at = CASE WHEN d.too_late THEN greatest(d.expires, now())
                                       ELSE now() + make_interval(secs => $2) END,
                last_status = $3,
                last_error = CASE WHEN d.too_late
                                  THEN 'unknown: the key''s lifetime ends before another attempt; looked up after it expires; last: ' || $4
                                  ELSE $4 END,
                updated_at = now()
           FROM d
          WHERE o.id = d.id
         RETURNING d.too_late AS \"too_late!\"",
        id,
        after.as_secs_f64(),
        status.and_then(|s| i16::try_from(s).ok()),
        error,
        ttl.as_secs_f64(),
        key_margin(ttl).as_secs_f64(),
        RequestStatus::Pending.as_str(),
        RequestStatus::Unknown.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(if unknown == Some(true) {
        Retried::Unknown
    } else {
        Retried::Later
    })
}

/// The lookup of an `unknown` request failed (the gateway did not answer, or not readably): it stays unknown
/// and is looked up again after `after`.
pub async fn retry_lookup<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
    after: Duration,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE outbound_requests SET lease_until = NULL, next_attempt_at = now() + make_interval(secs => $2),
                last_error = $3, updated_at = now()
          WHERE id = $1 AND status = $4",
        id,
        after.as_secs_f64(),
        format!("unknown: lookup failed (will retry): {error}"),
        RequestStatus::Unknown.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The lookup of an `unknown` request found nothing at the gateway after its key expired: the request is
/// `pending` again under generation `generation + 1`, committed by the caller BEFORE anything is sent under
/// the new key (so a crash cannot send two generations' keys, and the key sent is always derivable). Only from
/// `unknown` at `generation`: a concurrent resolution changes nothing. Returns whether it moved.
pub async fn next_generation<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
    generation: i32,
) -> Result<bool, sqlx::Error> {
    let n = sqlx::query!(
        "UPDATE outbound_requests
            SET status = $3, key_generation = key_generation + 1, key_first_sent_at = NULL,
                unknown_since = NULL, lease_until = NULL, next_attempt_at = now(),
                last_error = 'the key expired and the gateway has no object for it: sending under a new key',
                updated_at = now()
          WHERE id = $1 AND status = $4 AND key_generation = $2",
        id,
        generation,
        RequestStatus::Pending.as_str(),
        RequestStatus::Unknown.as_str(),
    )
    .execute(conn)
    .await?
    .rows_affected();
    Ok(n > 0)
}

/// What an operator found at the gateway for an `unknown` refund the lookup could not decide
/// ([`resolve_unknown_refund`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorFinding {
    /// The refund was made at the gateway: recorded as `succeeded`.
    Made,
    /// It never was: sent again under the next key generation (once its key has expired).
    NotMade,
}

/// Records an operator's finding on `unknown` refund request `id`, in the caller's transaction, decided by ONE
/// statement: only from `unknown`, only for a refund, never while a dispatcher holds its lease (a lookup in
/// flight), and — for [`OperatorFinding::NotMade`] — only once the key has expired (`ttl` after its first send;
/// before, a request still executing under it could complete after the new key's). `Made` → `succeeded`;
/// `NotMade` → `pending` under the next generation, as the dispatcher's own "not found" does. `note` is kept in
/// `last_error`. Returns `(refund_id, key_generation now)` when it moved; `None` when the request is not such a
/// request (the caller says why: [`get`]).
pub async fn resolve_unknown_refund(
    conn: &mut PgConnection,
    id: i64,
    finding: OperatorFinding,
    ttl: Duration,
    note: &str,
) -> Result<Option<(i64, i32)>, sqlx::Error> {
    // `refund_id IS NOT NULL` is in the WHERE clause: the returned one is never NULL (`!`).
    let moved = sqlx::query!(
        "UPDATE outbound_requests
            SET status = CASE WHEN $2 THEN $5 ELSE $6 END,
                key_generation = key_generation + CASE WHEN $2 THEN 0 ELSE 1 END,
                key_first_sent_at = CASE WHEN $2 THEN key_first_sent_at ELSE NULL END,
                unknown_since = NULL, lease_until = NULL, next_attempt_at = now(),
                last_error = $4, updated_at = now()
          WHERE id = $1 AND status = $7 AND kind = $8 AND refund_id IS NOT NULL
            AND (lease_until IS NULL OR lease_until < now())
            AND ($2 OR coalesce(key_first_sent_at, unknown_since) + make_interval(secs => $3) <= now())
         RETURNING refund_id AS \"refund_id!\", key_generation",
        id,
        finding == OperatorFinding::Made,
        ttl.as_secs_f64(),
        note,
        RequestStatus::Succeeded.as_str(),
        RequestStatus::Pending.as_str(),
        RequestStatus::Unknown.as_str(),
        Kind::Refund.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(moved.map(|m| (m.refund_id, m.key_generation)))
}

/// One request as operators see it ([`RequestRow`]), with its provider; `None` when there is no such request.
pub async fn get<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
) -> Result<Option<(RequestRow, String)>, sqlx::Error> {
    let row = sqlx::query!(
        "SELECT id, kind, intent_id, status, attempts, key_generation, unknown_since, last_status, last_error,
                next_attempt_at, updated_at, provider
         FROM outbound_requests WHERE id = $1",
        id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| {
        let request = RequestRow {
            id: r.id,
            kind: r.kind,
            intent_id: r.intent_id,
            status: r.status,
            attempts: r.attempts,
            key_generation: r.key_generation,
            unknown_since: r.unknown_since,
            last_status: r.last_status,
            last_error: r.last_error,
            next_attempt_at: r.next_attempt_at,
            updated_at: r.updated_at,
        };
        (request, r.provider)
    }))
}

/// A final failure, hookline's own problem (a refused request, a redirect, an answer it cannot interpret, a
/// missing configuration or payment parameter): the reason is kept for the operator.
pub async fn fail(
    conn: &mut PgConnection,
    id: i64,
    status: Option<u16>,
    error: &str,
) -> Result<(), sqlx::Error> {
    end(conn, id, RequestStatus::Failed, status, error).await
}

/// The card token minted for key generation `generation` of request `id` (a Mercado Pago saved card), if one
/// was stored ([`keep_saved_card`]); a token of another generation is never returned.
pub async fn saved_card<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
    generation: i32,
) -> Result<Option<MintedCard>, sqlx::Error> {
    // A stored generation always has its card (CHECK `outbound_requests_saved_card_pair`): a NULL fails the
    // decode, as before the checked macros (`!`).
    let row: Option<Json<MintedCard>> = sqlx::query_scalar!(
        r#"SELECT saved_card AS "saved_card!: Json<MintedCard>"
             FROM outbound_requests WHERE id = $1 AND saved_card_generation = $2"#,
        id,
        generation,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|j| j.0))
}

/// Stores `minted` for key generation `generation` of the pending request `id` — BEFORE the payment is sent —
/// unless a token is already stored for that generation (a dispatcher whose lease expired mid-mint): the one
/// stored first is kept and returned, so every attempt of the generation sends the same token. `None`: the
/// request is no longer pending at that generation (nothing stored; nothing must be sent).
pub async fn keep_saved_card<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
    generation: i32,
    minted: &MintedCard,
) -> Result<Option<MintedCard>, sqlx::Error> {
    let row: Option<Json<MintedCard>> = sqlx::query_scalar!(
        "UPDATE outbound_requests
            SET saved_card = CASE WHEN saved_card_generation = $2 THEN saved_card ELSE $3 END,
                saved_card_generation = $2, updated_at = now()
          WHERE id = $1 AND key_generation = $2 AND status = $4
         RETURNING saved_card AS \"saved_card!: Json<MintedCard>\"",
        id,
        generation,
        // Encoded as JSON by its Serialize (`as _`: the macro would expect a `serde_json::Value`).
        Json(minted) as _,
        RequestStatus::Pending.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|j| j.0))
}

/// The outbox at a glance, for `hookline status` and the console.
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct Summary {
    /// To send (or to send again).
    pub pending: i64,
    /// Hookline's own problem: needs an operator.
    pub failed: i64,
    /// Declined by the gateway (outcomes; informative).
    pub declined: i64,
    /// Waiting for the key to expire and the lookup to resolve them.
    pub unknown: i64,
    /// Unknown requests whose key expired more than the grace ago: the lookup should have resolved them.
    pub unknown_overdue: i64,
    /// Age of the oldest pending request.
    pub oldest_pending_secs: Option<f64>,
    /// How long the oldest unknown request has been unknown.
    pub oldest_unknown_secs: Option<f64>,
}

/// [`Summary`]. `ttls` gives each provider's key lifetime (`(provider, ttl)`; 24 h for a provider not listed);
/// an unknown request is overdue when its key expired more than `grace` ago.
pub async fn summary<'c>(
    conn: impl PgExecutor<'c>,
    ttls: &[(&str, Duration)],
    grace: Duration,
) -> Result<Summary, sqlx::Error> {
    let names: Vec<&str> = ttls.iter().map(|t| t.0).collect();
    let secs: Vec<f64> = ttls.iter().map(|t| t.1.as_secs_f64()).collect();
    // `count(*)` is never NULL; PostgreSQL's inference cannot tell (`!`).
    sqlx::query_as!(
        Summary,
        r#"SELECT count(*) FILTER (WHERE status = $4) AS "pending!",
                count(*) FILTER (WHERE status = $5) AS "failed!",
                count(*) FILTER (WHERE status = $6) AS "declined!",
                count(*) FILTER (WHERE status = $7) AS "unknown!",
                count(*) FILTER (WHERE status = $7
                    AND coalesce(key_first_sent_at, unknown_since)
                        + make_interval(secs => coalesce(t.ttl, 86400) + $3) < now()) AS "unknown_overdue!",
                extract(epoch FROM now() - min(created_at) FILTER (WHERE status = $4))::float8
                    AS oldest_pending_secs,
                extract(epoch FROM now() - min(unknown_since) FILTER (WHERE status = $7))::float8
                    AS oldest_unknown_secs
           FROM outbound_requests o
           LEFT JOIN unnest($1::text[], $2::float8[]) AS t(provider, ttl) ON t.provider = o.provider"#,
        &names as &[&str],
        &secs as &[f64],
        grace.as_secs_f64(),
        RequestStatus::Pending.as_str(),
        RequestStatus::Failed.as_str(),
        RequestStatus::Declined.as_str(),
        RequestStatus::Unknown.as_str(),
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
    // `count(*)` is never NULL; PostgreSQL's inference cannot tell (`!`). The statuses stay literal: they are the
    // predicates of the partial indexes `payment_intents_unresolved_idx` and `outbound_refunds_unresolved_idx`,
    // which a prepared statement's generic plan can only use when the values are in the text.
    sqlx::query_as!(
        Unresolved,
        r#"WITH i AS (SELECT count(*) AS n, min(updated_at) AS oldest FROM payment_intents
                     WHERE status IN ('requires_dispatch', 'processing')
                       AND updated_at < now() - make_interval(secs => $1)),
              r AS (SELECT count(*) AS n, min(updated_at) AS oldest FROM outbound_refunds
                     WHERE status = 'requires_dispatch'
                       AND updated_at < now() - make_interval(secs => $1))
         SELECT i.n AS "intents!", r.n AS "refunds!",
                extract(epoch FROM now() - least(i.oldest, r.oldest))::float8 AS oldest_secs
           FROM i, r"#,
        older_than.as_secs_f64(),
    )
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
    /// `pending`, `succeeded`, `declined`, `unknown`, `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: i32,
    /// The key generation (0: the base key).
    pub key_generation: i32,
    /// Since when it is `unknown`.
    pub unknown_since: Option<OffsetDateTime>,
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
    sqlx::query_as!(
        RequestRow,
        "SELECT id, kind, intent_id, status, attempts, key_generation, unknown_since, last_status, last_error,
                next_attempt_at, updated_at
         FROM outbound_requests WHERE intent_id = ANY($1) ORDER BY intent_id DESC, id",
        intent_ids,
    )
    .fetch_all(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sent_key_is_derived_from_the_generation() {
        assert_eq!(sent_key("hookline-intent-7", 0), "hookline-intent-7");
        assert_eq!(sent_key("hookline-intent-7", 1), "hookline-intent-7-g1");
        assert_eq!(sent_key("hookline-intent-7", 12), "hookline-intent-7-g12");
    }

    #[test]
    fn the_margin_is_a_tenth_at_most_an_hour() {
        assert_eq!(
            key_margin(Duration::from_secs(86400)),
            Duration::from_secs(3600)
        );
        assert_eq!(
            key_margin(Duration::from_secs(600)),
            Duration::from_secs(60)
        );
        assert_eq!(
            key_margin(Duration::from_secs(3)),
            Duration::from_millis(300)
        );
    }
}
