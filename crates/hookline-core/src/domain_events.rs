//! `domain_events`: the facts hookline committed, as the merchant's systems receive them. This module owns the
//! table's SQL.
//!
//! A fact is written by [`record`] in the transaction that commits the effect (the worker's payment transaction,
//! the dispatcher's intent update), never afterwards: if the effect commits, the fact exists; if it rolls back,
//! so does the fact. Its id is derived from the fact itself ([`fact_id`]: its type and the business ids it is
//! about), and `domain_events_id_key` keeps one row per id — a replay, a redelivery or a second worker deriving
//! the same fact writes nothing new. The same statement fans the fact out to every subscribed destination
//! (`domain_deliveries`, see `hookline_delivery::destinations`), reading the `destinations` table: the database decides,
//! so two workers with different memories cannot disagree.
//!
//! Two ways out read this outbox and nothing else: the domain relay (RabbitMQ `{prefix}.domain`;
//! `hookline-delivery`'s `relay` module) and the HTTP delivery loop (`domain_deliveries`). The relay's side is
//! owned here too: it locks the cursor ([`lock_cursor`]), reads the facts past it whose transactions have ended
//! ([`read_after`]: why that is enough is in migration 20), claims what earlier rounds could not publish from
//! `domain_outbox` ([`claim_unpublished`]), publishes, puts what RabbitMQ did not confirm in `domain_outbox`
//! ([`put_back`]), moves the cursor ([`move_cursor`]) and commits. A fact's row is never updated: recording one
//! writes that row and its index entries, nothing else.

use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgExecutor};
use time::OffsetDateTime;

/// Largest body a fact may have; the table refuses more (`CHECK`). Facts are built from bounded values (ids of
/// at most 200 bytes, amounts, currencies), so a real one is a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 65_536;

/// The kinds of facts hookline hands on. The string forms are the event types on the wire (routing keys,
/// `type` field, subscription filters): they are a contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A payment reached `succeeded` (captured; its ledger posting is committed with it).
    PaymentSucceeded,
    /// A payment reached `failed`.
    PaymentFailed,
    /// A payment reached `canceled`.
    PaymentCanceled,
    /// A refund was applied to a succeeded payment (its ledger posting is committed with it).
    RefundApplied,
    /// A dispute was opened on a payment.
    DisputeOpened,
    /// A dispute was won.
    DisputeWon,
    /// A dispute was lost (its loss is posted once the payment has succeeded).
    DisputeLost,
    /// A subscription's billing cycle was charged (once per `(subscription_id, billing_cycle)`).
    SubscriptionCharged,
    /// A charge of a subscription's billing cycle was declined (once per attempt): the reason, and the next
    /// attempt if dunning retries it.
    SubscriptionPaymentFailed,
    /// Every attempt of a billing cycle was declined: the subscription is past due (once per cycle).
    SubscriptionPastDue,
    /// A payment intent created through hookline's API succeeded.
    PaymentIntentSucceeded,
    /// A payment intent created through hookline's API failed.
    PaymentIntentFailed,
    /// A payment intent was canceled: before its charge was sent, or at the gateway (by the merchant, expired,
    /// or by the gateway itself: `cancellation_reason`).
    PaymentIntentCanceled,
    /// A `capture_method: manual` intent was authorized: `amount_capturable` can be captured (once per intent).
    PaymentIntentAmountCapturableUpdated,
}

impl EventType {
    /// Every type, for validation of subscriptions and for documentation.
    pub const ALL: [EventType; 14] = [
        EventType::PaymentSucceeded,
        EventType::PaymentFailed,
        EventType::PaymentCanceled,
        EventType::RefundApplied,
        EventType::DisputeOpened,
        EventType::DisputeWon,
        EventType::DisputeLost,
        EventType::SubscriptionCharged,
        EventType::SubscriptionPaymentFailed,
        EventType::SubscriptionPastDue,
        EventType::PaymentIntentSucceeded,
        EventType::PaymentIntentFailed,
        EventType::PaymentIntentCanceled,
        EventType::PaymentIntentAmountCapturableUpdated,
    ];

    /// The wire name (`payment.succeeded`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::PaymentSucceeded => "payment.succeeded",
            EventType::PaymentFailed => "payment.failed",
            EventType::PaymentCanceled => "payment.canceled",
            EventType::RefundApplied => "refund.applied",
            EventType::DisputeOpened => "dispute.opened",
            EventType::DisputeWon => "dispute.won",
            EventType::DisputeLost => "dispute.lost",
            EventType::SubscriptionCharged => "subscription.charged",
            EventType::SubscriptionPaymentFailed => "subscription.payment_failed",
            EventType::SubscriptionPastDue => "subscription.past_due",
            EventType::PaymentIntentSucceeded => "payment_intent.succeeded",
            EventType::PaymentIntentFailed => "payment_intent.failed",
            EventType::PaymentIntentCanceled => "payment_intent.canceled",
            EventType::PaymentIntentAmountCapturableUpdated => {
                "payment_intent.amount_capturable_updated"
            }
        }
    }

    /// The type named `s`, if it is one.
    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// The id of the fact of type `ty` about `subject` (the business ids that make it unique, e.g.
/// `stripe/pi_123` for a payment, `stripe/re_9` for a refund): `evt_` and 32 hex digits of SHA-256. The same
/// fact always gets the same id — it is what a receiver deduplicates by (`webhook-id`, AMQP `message_id`).
pub fn fact_id(ty: EventType, subject: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"hookline.domain.v1\0");
    h.update(ty.as_str().as_bytes());
    h.update(b"\0");
    h.update(subject.as_bytes());
    let digest = h.finalize();
    format!("evt_{}", &hex::encode(digest)[..32])
}

/// The envelope every destination receives: `{"id", "type", "created_at", "data"}`.
#[derive(Debug, Serialize)]
struct Envelope<'a, D: Serialize> {
    id: &'a str,
    #[serde(rename = "type")]
    ty: &'static str,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    data: &'a D,
}

/// Why a fact could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The data could not be serialised, or is larger than [`MAX_BODY_BYTES`] (a bug: facts are built from
    /// bounded values).
    #[error("domain event {ty} cannot be encoded: {message}")]
    Encode {
        /// The event type.
        ty: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The database refused or failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl From<RecordError> for sqlx::Error {
    /// For callers whose boundary speaks `sqlx::Error` (the dispatcher): an encoding failure is an encode error.
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::Database(e) => e,
            other => sqlx::Error::Encode(Box::new(other)),
        }
    }
}

/// Writes the fact `ty` about `subject` with `data`, in the caller's transaction, and queues it for every
/// destination subscribed to `ty` (one statement). Returns the fact's id and whether this call created it
/// (`false`: the same fact was already recorded, nothing changed).
///
/// It is [`record_many`] with one fact, so one statement owns the insert and its fan-out.
pub async fn record<D: Serialize>(
    tx: &mut PgConnection,
    ty: EventType,
    subject: &str,
    data: &D,
) -> Result<(String, bool), RecordError> {
    // The fact joins the trace of the span recording it (the worker's apply, the dispatcher's attempt).
    let traceparent = crate::telemetry::current_traceparent();
    let created = record_many(tx, &[(ty, subject.to_owned(), data, traceparent)]).await?;
    Ok((fact_id(ty, subject), created > 0))
}

/// A fact's id and the exact bytes of its body.
fn encode<D: Serialize>(
    ty: EventType,
    subject: &str,
    data: &D,
) -> Result<(String, Vec<u8>), RecordError> {
    let id = fact_id(ty, subject);
    let body = serde_json::to_vec(&Envelope {
        id: &id,
        ty: ty.as_str(),
        created_at: OffsetDateTime::now_utc(),
        data,
    })
    .map_err(|e| RecordError::Encode {
        ty: ty.as_str(),
        message: e.to_string(),
    })?;
    if body.len() > MAX_BODY_BYTES {
        return Err(RecordError::Encode {
            ty: ty.as_str(),
            message: format!("{} bytes is above {MAX_BODY_BYTES}", body.len()),
        });
    }
    Ok((id, body))
}

/// Writes several facts in ONE statement (the set-based worker path; [`record`] is this with one fact):
/// `(type, subject, data, traceparent)` each — the trace is the one the fact was decided in, its deliveries'
/// parent — each queued for every destination subscribed to its type. Returns how many were new.
pub async fn record_many<D: Serialize>(
    tx: &mut PgConnection,
    facts: &[(EventType, String, D, Option<String>)],
) -> Result<u64, RecordError> {
    if facts.is_empty() {
        return Ok(0);
    }
    let mut ids = Vec::with_capacity(facts.len());
    let mut types = Vec::with_capacity(facts.len());
    let mut bodies = Vec::with_capacity(facts.len());
    let mut traceparents = Vec::with_capacity(facts.len());
    for (ty, subject, data, traceparent) in facts {
        let (id, body) = encode(*ty, subject, data)?;
        ids.push(id);
        types.push(ty.as_str());
        bodies.push(body);
        // Only what hookline itself wrote (a span's context) ever gets here; the bound is the column's.
        traceparents.push(traceparent.as_deref().filter(|t| t.len() <= 64));
    }
    let created: i64 = sqlx::query_scalar(
        "WITH ev AS (
             INSERT INTO domain_events (id, type, body, traceparent)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[])
             ON CONFLICT ON CONSTRAINT domain_events_id_key DO NOTHING
             RETURNING seq, type, client),
         fanout AS (
             INSERT INTO domain_deliveries (destination, event_seq)
             SELECT d.name, ev.seq FROM ev JOIN destinations d
                 ON d.removed_at IS NULL AND (ev.type = ANY (d.events) OR '*' = ANY (d.events))
                -- The operator's destinations get every subscribed fact; an API client's endpoint only what its
                -- client may see (its own facts, or all of them for a back office: `all_events`).
                AND (d.client IS NULL OR d.all_events OR d.client = ev.client))
         SELECT count(*) FROM ev",
    )
    .bind(&ids)
    .bind(&types)
    .bind(&bodies)
    .bind(&traceparents)
    .fetch_one(&mut *tx)
    .await?;
    Ok(created as u64)
}

/// A fact not yet confirmed by RabbitMQ: past the cursor, or claimed from `domain_outbox`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Unpublished {
    /// `domain_events.seq`.
    pub seq: i64,
    /// The transaction that recorded it, for a fact read past the cursor (`None`: claimed from the outbox).
    pub xid: Option<i64>,
    /// When it was recorded, or entered the outbox (kept when it is put back).
    pub enqueued_at: OffsetDateTime,
    /// The fact's id (`evt_…`), sent as the AMQP `message_id`.
    pub id: String,
    /// The event type, the routing key.
    #[sqlx(rename = "type")]
    pub ty: String,
    /// The exact JSON body.
    pub body: Vec<u8>,
    /// The trace the fact was decided in.
    pub traceparent: Option<String>,
}

/// Whether any fact waits for the domain relay (past the cursor — one index probe — or in the outbox; no
/// transaction): the relay's idle check, so an idle relay costs one statement per poll and never sits in an open
/// transaction. A fact of a transaction still running counts: the round that follows finds nothing yet.
pub async fn any_unpublished<'c>(conn: impl PgExecutor<'c>) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM domain_relay_cursor c, LATERAL (
                            SELECT 1 FROM domain_events e WHERE (e.xid, e.seq) > (c.xid, c.seq) LIMIT 1) f)
             OR EXISTS (SELECT 1 FROM domain_outbox)",
    )
    .fetch_one(conn)
    .await
}

/// How far the domain relay has published: every fact at or below `(xid, seq)` was published or put in
/// `domain_outbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// A transaction id (`xid8`, as a number).
    pub xid: i64,
    /// A `seq` of that transaction's facts.
    pub seq: i64,
}

/// Locks the cursor for this transaction, or `None` when another relay holds it (`SKIP LOCKED`: that one
/// publishes the new facts; this one may still retry the outbox).
pub async fn lock_cursor(tx: &mut PgConnection) -> Result<Option<Cursor>, sqlx::Error> {
    let row: Option<(i64, i64)> = sqlx::query_as(
        "SELECT xid::text::int8, seq FROM domain_relay_cursor FOR UPDATE SKIP LOCKED",
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|(xid, seq)| Cursor { xid, seq }))
}

/// Up to `limit` facts past `cursor` whose transactions have ended, in `(xid, seq)` order: those below the
/// horizon, read in the same statement (same snapshot), so every one of them is visible and none can appear
/// below it later (migration 20 says why a cursor over `seq` alone would skip facts). One index range scan
/// (`domain_events_xid_idx`).
///
/// The horizon is the oldest transaction still running that could write a fact, or the snapshot's `xmax` when
/// none is. The snapshot's running transactions are the whole cluster's; those `pg_stat_activity` shows in
/// another database cannot write here and do not count — so a long transaction of another application on the
/// same PostgreSQL does not hold the facts back (seen in the test suite, where every test has its database).
/// Every race errs toward holding back: a transaction that ended between the snapshot and the read of
/// `pg_stat_activity` is not shown there, so it counts.
pub async fn read_after(
    tx: &mut PgConnection,
    cursor: Cursor,
    limit: i64,
) -> Result<Vec<Unpublished>, sqlx::Error> {
    sqlx::query_as(
        "WITH s AS (SELECT pg_current_snapshot() AS snap),
              h AS (SELECT coalesce(
                        (SELECT min(x) FROM s, pg_snapshot_xip(s.snap) AS x
                          WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                                             WHERE a.backend_xid = x::xid
                                               AND a.datname IS DISTINCT FROM current_database())),
                        (SELECT pg_snapshot_xmax(snap) FROM s)) AS horizon)
         SELECT e.seq, e.xid::text::int8 AS xid, e.created_at AS enqueued_at, e.id, e.type, e.body, e.traceparent
           FROM domain_events e, h
          WHERE (e.xid, e.seq) > ($1::text::xid8, $2)
            AND e.xid < h.horizon
          ORDER BY e.xid, e.seq
          LIMIT $3",
    )
    .bind(cursor.xid.to_string())
    .bind(cursor.seq)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await
}

/// Moves the cursor (locked by [`lock_cursor`] in this transaction) to `to`.
pub async fn move_cursor(tx: &mut PgConnection, to: Cursor) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE domain_relay_cursor SET xid = $1::text::xid8, seq = $2, moved_at = now()")
        .bind(to.xid.to_string())
        .bind(to.seq)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Claims up to `limit` outbox rows in `seq` order (`FOR UPDATE SKIP LOCKED`: several relays share the work
/// without publishing one fact twice at the same time) with their facts. The claim deletes the rows: commit
/// once the publish is confirmed, after [`put_back`] of what was not; a rollback undoes the claim.
pub async fn claim_unpublished(
    tx: &mut PgConnection,
    limit: i64,
) -> Result<Vec<Unpublished>, sqlx::Error> {
    // One key lookup per claimed row (LIMIT 1 keeps the planner from turning it into a merge join that walks
    // `domain_events` from its first row).
    sqlx::query_as(
        "WITH c AS (
             DELETE FROM domain_outbox o
             USING (SELECT seq FROM domain_outbox ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED) d
             WHERE o.seq = d.seq
             RETURNING o.seq, o.enqueued_at)
         SELECT c.seq, NULL::int8 AS xid, c.enqueued_at, f.id, f.type, f.body, f.traceparent
         FROM c CROSS JOIN LATERAL (SELECT id, type, body, traceparent FROM domain_events e
                                    WHERE e.seq = c.seq LIMIT 1) f
         ORDER BY c.seq",
    )
    .bind(limit)
    .fetch_all(&mut *tx)
    .await
}

/// Puts facts RabbitMQ did not confirm in the outbox (claimed ones back, ones read past the cursor for the first
/// time), with their original enqueue or record time.
pub async fn put_back(tx: &mut PgConnection, facts: &[&Unpublished]) -> Result<(), sqlx::Error> {
    if facts.is_empty() {
        return Ok(());
    }
    let seqs: Vec<i64> = facts.iter().map(|f| f.seq).collect();
    let at: Vec<OffsetDateTime> = facts.iter().map(|f| f.enqueued_at).collect();
    sqlx::query(
        "INSERT INTO domain_outbox (seq, enqueued_at)
         SELECT * FROM unnest($1::int8[], $2::timestamptz[])
         ON CONFLICT ON CONSTRAINT domain_outbox_pkey DO NOTHING",
    )
    .bind(&seqs)
    .bind(&at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Facts not yet published to RabbitMQ (past the cursor, or in the outbox) and the age in seconds of the oldest
/// (0 when none): read at scrape time for `/metrics` and by `hookline destinations status`. A horizon held back by
/// a long transaction shows here as a growing age.
pub async fn unpublished_backlog<'c>(conn: impl PgExecutor<'c>) -> Result<(i64, f64), sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*), coalesce(extract(epoch FROM now() - min(at))::float8, 0)
           FROM (SELECT e.created_at AS at FROM domain_relay_cursor c
                   JOIN domain_events e ON (e.xid, e.seq) > (c.xid, c.seq)
                 UNION ALL
                 SELECT enqueued_at FROM domain_outbox) u",
    )
    .fetch_one(conn)
    .await
}

/// A fact as `hookline events list` shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Listed {
    /// `domain_events.seq`.
    pub seq: i64,
    /// The fact's id.
    pub id: String,
    /// Its type.
    #[sqlx(rename = "type")]
    pub ty: String,
    /// When it was recorded.
    pub created_at: OffsetDateTime,
    /// Confirmed by RabbitMQ (at or below the relay's cursor, and not in `domain_outbox`).
    pub published: bool,
}

/// The newest `limit` facts, of `event_type` only when given.
pub async fn list<'c>(
    conn: impl PgExecutor<'c>,
    event_type: Option<&str>,
    limit: u32,
) -> Result<Vec<Listed>, sqlx::Error> {
    sqlx::query_as(
        "SELECT e.seq, e.id, e.type, e.created_at,
                NOT EXISTS (SELECT 1 FROM domain_outbox o WHERE o.seq = e.seq)
                AND (e.xid IS NULL OR (e.xid, e.seq) <= (c.xid, c.seq)) AS published
         FROM domain_events e CROSS JOIN domain_relay_cursor c
         WHERE ($1::text IS NULL OR e.type = $1) ORDER BY e.seq DESC LIMIT $2",
    )
    .bind(event_type)
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await
}

/// A fact as the console's timelines show it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Recorded {
    /// `domain_events.seq`.
    pub seq: i64,
    /// The fact's id.
    pub id: String,
    /// Its type.
    #[sqlx(rename = "type")]
    pub ty: String,
    /// When it was recorded (in the transaction of the change it tells).
    pub created_at: OffsetDateTime,
    /// The stored webhook whose processing recorded it (`data.webhook_event_id` of its body), when one did.
    pub webhook_event_id: Option<i64>,
}

/// The facts among `ids` that exist (each found by the `domain_events_id_key` index), oldest first. The
/// console computes the ids a payment's facts would have ([`fact_id`]) and reads them here.
pub async fn by_ids<'c>(
    conn: impl PgExecutor<'c>,
    ids: &[String],
) -> Result<Vec<Recorded>, sqlx::Error> {
    sqlx::query_as(
        "SELECT seq, id, type, created_at,
                CASE WHEN jsonb_typeof(convert_from(body, 'UTF8')::jsonb #> '{data,webhook_event_id}') = 'number'
                     THEN (convert_from(body, 'UTF8')::jsonb #>> '{data,webhook_event_id}')::bigint END
                    AS webhook_event_id
           FROM domain_events WHERE id = ANY ($1) ORDER BY seq",
    )
    .bind(ids)
    .fetch_all(conn)
    .await
}

/// Number of facts recorded (all time); the replay tests compare it before and after.
pub async fn count<'c>(conn: impl PgExecutor<'c>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM domain_events")
        .fetch_one(conn)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fact_ids_are_deterministic_and_distinguish_type_and_subject() {
        let a = fact_id(EventType::PaymentSucceeded, "stripe/pi_1");
        assert_eq!(a, fact_id(EventType::PaymentSucceeded, "stripe/pi_1"));
        assert_ne!(a, fact_id(EventType::PaymentFailed, "stripe/pi_1"));
        assert_ne!(a, fact_id(EventType::PaymentSucceeded, "stripe/pi_2"));
        assert!(a.starts_with("evt_") && a.len() == 36, "{a}");
        assert!(a[4..].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn every_type_parses_back_and_matches_the_database_check() {
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.as_str()), Some(t));
            let (a, b) = t.as_str().split_once('.').expect("dotted");
            assert!(a
                .bytes()
                .chain(b.bytes())
                .all(|c| c.is_ascii_lowercase() || c == b'_'));
        }
        assert_eq!(EventType::parse("payment.refunded"), None);
    }
}
