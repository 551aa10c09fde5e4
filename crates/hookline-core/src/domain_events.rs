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
//!
//! A fact names its owner (`client`, [`Owner`]): the merchant API client that owns what it is about. The events
//! feed (`GET /v1/events`) reads a client's own facts, or every fact for a back office ([`list_for_client`],
//! [`get_for_client`]). Facts are never deleted (the retention purge leaves this table alone), so the feed lists
//! every fact ever recorded.

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
    /// A subscription was created (merchant API or CLI), once per subscription.
    SubscriptionCreated,
    /// A subscription was changed: a new payment method, a new amount, or set to cancel at its period's end
    /// (once per change).
    SubscriptionUpdated,
    /// A subscription was canceled (once per subscription).
    SubscriptionCanceled,
}

impl EventType {
    /// Every type, for validation of subscriptions and for documentation.
    pub const ALL: [EventType; 17] = [
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
        EventType::SubscriptionCreated,
        EventType::SubscriptionUpdated,
        EventType::SubscriptionCanceled,
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
            EventType::SubscriptionCreated => "subscription.created",
            EventType::SubscriptionUpdated => "subscription.updated",
            EventType::SubscriptionCanceled => "subscription.canceled",
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

/// Who may read a fact in the events feed (`domain_events.client`): the merchant API client that owns what the
/// fact is about. A client configured with `all_events` (a back office) reads every fact whatever its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner<'a> {
    /// No API client owns it (a subscription, hookline's own billing): only a back office reads it.
    Nobody,
    /// The API client of this name (`[[api.clients]] name`: the intent's `client`).
    Client(&'a str),
    /// Whoever owns the payment intent whose gateway payment this is (`payment_intents` by provider and provider
    /// payment id), looked up by the statement that records the fact; nobody when no intent has that payment (it
    /// arrived only by webhook).
    PaymentOf {
        /// Configured provider name.
        provider: &'a str,
        /// The provider's payment id.
        payment_ref: &'a str,
    },
}

impl<'a> Owner<'a> {
    /// The client of something that may have none (an intent of hookline's own has no `client`).
    pub fn client(client: Option<&'a str>) -> Owner<'a> {
        client.map_or(Owner::Nobody, Owner::Client)
    }
}

/// Writes the fact `ty` about `subject` with `data`, owned by `owner`, in the caller's transaction, and queues it
/// for every destination subscribed to `ty` (one statement). Returns the fact's id and whether this call created
/// it (`false`: the same fact was already recorded, nothing changed).
///
/// It is [`record_many`] with one fact, so one statement owns the insert and its fan-out.
pub async fn record<D: Serialize>(
    tx: &mut PgConnection,
    ty: EventType,
    subject: &str,
    data: &D,
    owner: Owner<'_>,
) -> Result<(String, bool), RecordError> {
    // The fact joins the trace of the span recording it (the worker's apply, the dispatcher's attempt).
    let traceparent = crate::telemetry::current_traceparent();
    let created = record_many(tx, &[(ty, subject.to_owned(), data, traceparent, owner)]).await?;
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
/// `(type, subject, data, traceparent, owner)` each — the trace is the one the fact was decided in, its
/// deliveries' parent; the owner is who reads it in the events feed — each queued for every destination
/// subscribed to its type. Returns how many were new.
pub async fn record_many<D: Serialize>(
    tx: &mut PgConnection,
    facts: &[(EventType, String, D, Option<String>, Owner<'_>)],
) -> Result<u64, RecordError> {
    if facts.is_empty() {
        return Ok(0);
    }
    let mut ids = Vec::with_capacity(facts.len());
    let mut types = Vec::with_capacity(facts.len());
    let mut bodies = Vec::with_capacity(facts.len());
    let mut traceparents = Vec::with_capacity(facts.len());
    let mut clients = Vec::with_capacity(facts.len());
    let mut owning_providers = Vec::with_capacity(facts.len());
    let mut owning_payments = Vec::with_capacity(facts.len());
    for (ty, subject, data, traceparent, owner) in facts {
        let (id, body) = encode(*ty, subject, data)?;
        ids.push(id);
        types.push(ty.as_str());
        bodies.push(body);
        // Only what hookline itself wrote (a span's context) ever gets here; the bound is the column's.
        traceparents.push(traceparent.as_deref().filter(|t| t.len() <= 64));
        let (client, payment) = match *owner {
            Owner::Nobody => (None, None),
            Owner::Client(name) => (Some(name), None),
            Owner::PaymentOf {
                provider,
                payment_ref,
            } => (None, Some((provider, payment_ref))),
        };
        clients.push(client);
        owning_providers.push(payment.map(|p| p.0));
        owning_payments.push(payment.map(|p| p.1));
    }
    // A payment's owner is read here rather than by the caller: the worker's batch would otherwise need a round
    // trip to learn it, and this is one probe of `payment_intents_provider_payment_key` per fact, in the statement
    // that writes it. (`payment_intents` is the intents module's table; this reads one column of it, nothing more.)
    let created: i64 = sqlx::query_scalar(
        "WITH ev AS (
             INSERT INTO domain_events (id, type, body, traceparent, client)
             SELECT u.id, u.type, u.body, u.traceparent,
                    coalesce(u.client, (SELECT p.client FROM payment_intents p
                                         WHERE p.provider = u.provider AND p.provider_payment_id = u.payment_ref))
               FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::text[], $7::text[])
                    AS u(id, type, body, traceparent, client, provider, payment_ref)
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
    .bind(&clients)
    .bind(&owning_providers)
    .bind(&owning_payments)
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

/// Largest page of the events feed (`limit`).
pub const MAX_FEED_LIMIT: i64 = 100;

/// Who reads the events feed (`GET /v1/events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader<'a> {
    /// An API client: the facts it owns ([`Owner`]) and nothing else.
    Client(&'a str),
    /// A back office (`all_events = true`): every fact, owned by a client or by nobody.
    Everything,
}

/// What a page of the feed selects besides its reader (each filter optional; all of them must hold).
#[derive(Debug, Clone, Copy, Default)]
pub struct FeedFilter {
    /// Only facts of this type.
    pub ty: Option<EventType>,
    /// Only facts recorded at or after this instant (the `created_at` column: when the recording transaction
    /// began, at most a few milliseconds before the body's `created_at`).
    pub created_from: Option<OffsetDateTime>,
}

/// One page of the feed, newest first.
#[derive(Debug)]
pub struct FeedPage {
    /// The facts' exact bodies, as every destination received them.
    pub bodies: Vec<Vec<u8>>,
    /// Older facts lie beyond the page.
    pub has_more: bool,
}

/// Why a page of the feed could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The cursor is not a fact the reader may see (another client's is the same as none).
    #[error("the cursor is not an event this reader can see")]
    UnknownCursor,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A page of the feed: its cursor fact (when given) must be visible, its rows are the newest `limit` older than
/// it. `$1` reader, `$2` type, `$3` from, `$4` cursor id, `$5` rows to fetch. `$visible` is the reader's clause,
/// written out per reader rather than `$1 IS NULL OR client = $1`, and the cursor is a bound on `seq` even when
/// absent (`below`: the largest `seq` then), never `$4 IS NULL OR seq < …`: so a prepared statement's generic
/// plan walks `domain_events_client_seq_idx` (a client) or the primary key (a back office) backwards from the
/// cursor and stops after a page, however deep the cursor is. A cursor the reader may not see reads nothing.
macro_rules! feed_page {
    ($visible:literal) => {
        concat!(
            "WITH c AS (SELECT seq FROM domain_events WHERE id = $4 AND ",
            $visible,
            "),
                  k AS (SELECT $4::text IS NULL OR EXISTS (SELECT 1 FROM c) AS known,
                               coalesce((SELECT seq FROM c), 9223372036854775807) AS below)
             SELECT k.known, e.body
               FROM k LEFT JOIN LATERAL (
                   SELECT seq, body FROM domain_events
                    WHERE ",
            $visible,
            "       AND k.known AND seq < k.below
                      AND ($2::text IS NULL OR type = $2)
                      AND ($3::timestamptz IS NULL OR created_at >= $3)
                    ORDER BY seq DESC LIMIT $5) e ON true
              ORDER BY e.seq DESC"
        )
    };
}

/// The page of the facts `reader` may see that `filter` selects, newest first (by `seq`, the order they were
/// recorded in), older than the fact `starting_after` when given: at most `limit` (clamped to
/// 1..=[`MAX_FEED_LIMIT`]). One statement; a cursor the reader may not see is [`FeedError::UnknownCursor`].
///
/// Pages are keyed by `seq`, never an offset: facts recorded while a reader pages do not shift its pages.
pub async fn list_for_client<'c>(
    conn: impl PgExecutor<'c>,
    reader: Reader<'_>,
    filter: &FeedFilter,
    starting_after: Option<&str>,
    limit: i64,
) -> Result<FeedPage, FeedError> {
    let limit = limit.clamp(1, MAX_FEED_LIMIT);
    let (sql, client) = match reader {
        Reader::Client(name) => (feed_page!("client = $1"), Some(name)),
        // `$1` is NULL here; naming it keeps its type known to the statement.
        Reader::Everything => (feed_page!("$1::text IS NULL"), None),
    };
    // One more than the page: whether it exists is `has_more`.
    let rows: Vec<(bool, Option<Vec<u8>>)> = sqlx::query_as(sql)
        .bind(client)
        .bind(filter.ty.map(EventType::as_str))
        .bind(filter.created_from)
        .bind(starting_after)
        .bind(limit + 1)
        .fetch_all(conn)
        .await?;
    if rows.first().is_some_and(|(known, _)| !known) {
        return Err(FeedError::UnknownCursor);
    }
    let mut bodies: Vec<Vec<u8>> = rows.into_iter().filter_map(|(_, body)| body).collect();
    let has_more = bodies.len() as i64 > limit;
    bodies.truncate(limit as usize);
    Ok(FeedPage { bodies, has_more })
}

/// The body of the fact `id` if `reader` may see it (another client's is the same as none).
pub async fn get_for_client<'c>(
    conn: impl PgExecutor<'c>,
    reader: Reader<'_>,
    id: &str,
) -> Result<Option<Vec<u8>>, sqlx::Error> {
    match reader {
        Reader::Client(name) => {
            sqlx::query_scalar("SELECT body FROM domain_events WHERE id = $1 AND client = $2")
                .bind(id)
                .bind(name)
                .fetch_optional(conn)
                .await
        }
        Reader::Everything => {
            sqlx::query_scalar("SELECT body FROM domain_events WHERE id = $1")
                .bind(id)
                .fetch_optional(conn)
                .await
        }
    }
}

/// Whether `id` has the shape of a fact's id ([`fact_id`]: `evt_` and 32 lowercase hex digits); any other text
/// names no fact, and needs no query to say so.
pub fn is_fact_id(id: &str) -> bool {
    id.strip_prefix("evt_").is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
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

    #[test]
    fn only_the_shape_of_a_fact_id_is_a_fact_id() {
        assert!(is_fact_id(&fact_id(EventType::RefundApplied, "st/re_1")));
        for not in [
            "",
            "evt_",
            "evt_0123456789abcdef0123456789abcde",
            "evt_0123456789abcdef0123456789abcdef0",
            "evt_0123456789ABCDEF0123456789ABCDEF",
            "evt_0123456789abcdef0123456789abcdeg",
            "pi_0123456789abcdef0123456789abcdef",
            "evt_0123456789abcdef0123456789abcd\u{e9}",
        ] {
            assert!(!is_fact_id(not), "{not:?}");
        }
    }

    #[test]
    fn an_owner_of_nothing_is_nobody() {
        assert_eq!(Owner::client(None), Owner::Nobody);
        assert_eq!(Owner::client(Some("shop")), Owner::Client("shop"));
    }
}
