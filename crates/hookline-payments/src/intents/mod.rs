//! `payment_intents`, `outbound_refunds` and `api_idempotency_keys`: what the merchant asked hookline to charge
//! or refund, and the merchant API's own idempotency. This module owns the three tables' SQL.
//!
//! An intent and its outbound request are written in ONE transaction ([`create_intent`] calls
//! [`crate::outbound_requests::enqueue`] on the same connection): either both exist or neither. The gateway's idempotency key
//! is derived from the intent's id, so it is the same on every attempt and after any crash.
//!
//! The key is born with the intent, not with the click (issue 27): an intent created with `confirm: false` is
//! `requires_confirmation` and has no outbound request until [`confirm`] moves it (a conditional UPDATE decides
//! who confirms; the request's UNIQUE key is the second guard). An intent may carry the merchant's
//! `order_reference`: the partial UNIQUE index `payment_intents_live_order` keeps one live (neither failed nor canceled) intent
//! per client and order ([`create_intent_for_client`]), whatever Idempotency-Keys the front end sends.
//!
//! Intents belong to a merchant API client (`client`, its `[[api.clients]]` name): the `*_for_client`
//! functions see and refund only that client's intents, so one client never reads or refunds another's (issue
//! 25, finding 3). Intents of hookline's own (billing runs, the CLI) have no client and no API client sees them.
//!
//! A refund reserves its amount on the intent (`refunded`) when requested, so concurrent requests never exceed
//! what was captured; a refund the gateway refused or failed releases it again, in the transaction that records
//! the refusal ([`record_refund_answer`]).

use futures::future::BoxFuture;
use hookline_core::telemetry;
use sqlx::types::Json;
use sqlx::PgConnection;
use time::OffsetDateTime;
use tracing::Instrument;

use hookline_core::domain_events::{self, EventType, Owner, RecordError};

use crate::model::IntentStatus;
use crate::params::PaymentParams;

/// `sqlx::query_as!` of an [`Intent`]: the statement is `$before`, the intent's columns, then `$after` (sqlx
/// joins `+`-separated literals before it checks the statement), so every statement that reads an intent reads
/// the same columns, named and typed once here.
macro_rules! intent_query {
    ($before:tt, $after:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Intent,
            $before
                + r#"id, public_id, provider, amount, currency, customer, description, client,
                status AS "status: IntentStatus", order_reference,
                payment_params AS "payment_params: Json<PaymentParams>",
                next_action AS "next_action: Json<serde_json::Value>", failure_code, failure_message,
                provider_payment_id, refunded, subscription_id, billing_cycle, created_at, canceled_at,
                cancellation_reason, capture_method AS "capture_method: crate::intents::CaptureMethod", pending_operation,
                amount_to_capture, amount_captured,
                CASE WHEN status = 'requires_capture' THEN amount ELSE 0 END AS "amount_capturable!",
                CASE WHEN status = 'succeeded' THEN coalesce(amount_captured, amount) ELSE 0 END
                    AS "amount_received!""#
                + $after
            $(, $arg)*
        )
    };
}

/// `sqlx::query_as!` of a [`MovedRow`]: `$before`, the intent's columns as `p.…` (the updated row), then `$after`
/// (which adds `previous` and `intent_traceparent`).
macro_rules! moved_query {
    ($before:tt, $after:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            MovedRow,
            $before
                + r#"p.id, p.public_id, p.provider, p.amount, p.currency, p.customer, p.description, p.client,
                p.status AS "status: IntentStatus", p.order_reference,
                p.payment_params AS "payment_params: Json<PaymentParams>",
                p.next_action AS "next_action: Json<serde_json::Value>", p.failure_code, p.failure_message,
                p.provider_payment_id, p.refunded, p.subscription_id, p.billing_cycle, p.created_at,
                p.canceled_at, p.cancellation_reason, p.capture_method AS "capture_method: crate::intents::CaptureMethod",
                p.pending_operation, p.amount_to_capture, p.amount_captured,
                CASE WHEN p.status = 'requires_capture' THEN p.amount ELSE 0 END AS "amount_capturable!",
                CASE WHEN p.status = 'succeeded' THEN coalesce(p.amount_captured, p.amount) ELSE 0 END
                    AS "amount_received!", "#
                + $after
            $(, $arg)*
        )
    };
}

mod api_keys;
mod cancel;
mod list;
mod refunds;

pub use api_keys::*;
pub use cancel::*;
pub use list::*;
pub use refunds::*;

/// A payment intent as the API shows it (its OpenAPI schema `PaymentIntent` is derived from this struct).
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
#[schema(as = PaymentIntent)]
pub struct Intent {
    /// Internal id.
    #[serde(skip)]
    pub id: i64,
    /// `pi_hl_…`: the id the API shows.
    #[serde(rename = "id")]
    #[schema(example = "pi_hl_4f9c2a7e1b3d5f60718293a4b5c6d7e8")]
    pub public_id: String,
    /// Configured provider name.
    #[schema(example = "stripe")]
    pub provider: String,
    /// Minor units.
    #[schema(minimum = 1, example = 2000)]
    pub amount: i64,
    /// Lower-case ISO 4217.
    #[schema(example = "brl")]
    pub currency: String,
    /// The merchant's customer reference.
    pub customer: Option<String>,
    /// Free text.
    pub description: Option<String>,
    /// The API client that created it (`None`: hookline's own — billing, CLI). Not part of the API's answer.
    #[serde(skip)]
    pub client: Option<String>,
    /// `requires_confirmation`, `requires_dispatch`, `requires_action`, `processing`, `succeeded`, `failed`,
    /// `canceled`, `needs_attention`: read as the enum, so an unknown stored value is an error, never shown as text.
    pub status: IntentStatus,
    /// The merchant's order: at most one live (neither failed nor canceled) intent per client and order.
    pub order_reference: Option<String>,
    /// What the gateway needs to charge (the provider object the merchant sent); never shown by the API (a card
    /// token is a credential). `None` for intents of older versions.
    #[serde(skip)]
    pub payment_params: Option<sqlx::types::Json<PaymentParams>>,
    /// While `requires_action`: what the customer must do (Stripe's `next_action`, Pix QR data).
    #[schema(value_type = Option<Object>)]
    pub next_action: Option<sqlx::types::Json<serde_json::Value>>,
    /// The gateway's decline code when `failed`.
    pub failure_code: Option<String>,
    /// The gateway's decline message when `failed`.
    pub failure_message: Option<String>,
    /// The gateway's payment id once known.
    pub provider_payment_id: Option<String>,
    /// Refunded so far (minor units).
    pub refunded: i64,
    /// The subscription whose cycle this charge pays (with `billing_cycle`): billing runs' charges, and a
    /// merchant's checkout paying a cycle. One live charge per cycle (`payment_intents_live_cycle`).
    pub subscription_id: Option<i64>,
    /// The cycle (`YYYY-MM`) it pays.
    pub billing_cycle: Option<String>,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// When it was canceled (`canceled` only).
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub canceled_at: Option<OffsetDateTime>,
    /// Why (`canceled`, or while its cancel is asked of the gateway): the merchant's `duplicate`, `fraudulent`,
    /// `requested_by_customer`, `abandoned`, hookline's `expired`, or the gateway's own `automatic`.
    pub cancellation_reason: Option<String>,
    /// `automatic` (the gateway captures at once) or `manual` (it authorizes; `POST …/capture` takes the money).
    pub capture_method: CaptureMethod,
    /// The cancel or capture asked of the gateway and not answered yet (`cancel`, `capture`): one at a time.
    pub pending_operation: Option<String>,
    /// What the pending or last capture asked for (minor units; `None`: the whole amount).
    #[serde(skip)]
    pub amount_to_capture: Option<i64>,
    /// What was captured, once `succeeded` (the amount, or less after a partial capture); refunds are bounded by
    /// it. Shown as `amount_received`.
    #[serde(skip)]
    pub amount_captured: Option<i64>,
    /// What a capture can take now: the amount while `requires_capture`, else 0.
    pub amount_capturable: i64,
    /// What the gateway captured: the captured amount once `succeeded`, else 0.
    pub amount_received: i64,
}

/// How an intent's charge is captured (`payment_intents.capture_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMethod {
    /// The gateway captures as it authorizes (the default).
    #[default]
    Automatic,
    /// The gateway only authorizes; the capture is an operation of its own (`POST …/capture`).
    Manual,
}

crate::model::string_enum_schema!(CaptureMethod, CaptureMethod::ALL);

impl CaptureMethod {
    /// Both, as the API lists them.
    pub const ALL: [CaptureMethod; 2] = [CaptureMethod::Automatic, CaptureMethod::Manual];

    /// Database and API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CaptureMethod::Automatic => "automatic",
            CaptureMethod::Manual => "manual",
        }
    }

    /// By its spelling; anything else is refused.
    pub fn parse(s: &str) -> Result<CaptureMethod, crate::model::UnknownStatus> {
        match s {
            "automatic" => Ok(CaptureMethod::Automatic),
            "manual" => Ok(CaptureMethod::Manual),
            other => Err(crate::model::UnknownStatus::new("capture method", other)),
        }
    }
}

crate::model::text_status!(CaptureMethod);

/// The subscription cycle a charge pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleRef<'a> {
    /// The subscription.
    pub subscription_id: i64,
    /// The cycle, `YYYY-MM` (validated by the caller: the column's CHECK refuses anything else).
    pub billing_cycle: &'a str,
}

/// What a new intent charges.
#[derive(Debug, Clone)]
pub struct NewIntent<'a> {
    /// Configured provider name (its scheme must be stripe, mercadopago or pagarme-v5).
    pub provider: &'a str,
    /// Minor units (> 0).
    pub amount: i64,
    /// Lower-case ISO 4217.
    pub currency: &'a str,
    /// The merchant's customer reference.
    pub customer: Option<&'a str>,
    /// Free text.
    pub description: Option<&'a str>,
    /// The merchant's order (one live intent per client and order).
    pub order_reference: Option<&'a str>,
    /// What the gateway needs to charge.
    pub payment_params: Option<&'a PaymentParams>,
    /// Send the charge now (`true`), or wait for a confirm (`requires_confirmation`).
    pub confirm: bool,
    /// The subscription cycle it pays, if any (one live charge per cycle).
    pub cycle: Option<CycleRef<'a>>,
    /// Captured at once, or authorized only.
    pub capture_method: CaptureMethod,
}

// The column list of an intent is written out in each statement (the checked macros take literal SQL only):
// every statement returning an intent reads the columns of [`Intent`], in its order, with the same type
// overrides (`status` as the enum, the JSON columns as their types).

/// The gateway idempotency key of an intent's charge: derived, never generated per attempt.
pub fn charge_key(intent_id: i64) -> String {
    format!("hookline-intent-{intent_id}")
}

/// The gateway idempotency key of a refund.
pub fn refund_key(refund_id: i64) -> String {
    format!("hookline-refund-{refund_id}")
}

/// Why an intent of an API client was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The client's order already has a live (neither failed nor canceled) intent: its public id. The defence for a front end
    /// that makes a new Idempotency-Key per click (partial UNIQUE index `payment_intents_live_order`).
    #[error("the order already has a live payment intent, {intent}")]
    OrderReferenceInUse {
        /// The existing intent's public id.
        intent: String,
    },
    /// The subscription cycle already has a live (in flight or succeeded) charge: its public id. The defence
    /// against paying one cycle through two channels (partial UNIQUE index `payment_intents_live_cycle`).
    #[error("the billing cycle already has a live payment intent, {intent}")]
    BillingCycleInUse {
        /// The existing intent's public id.
        intent: String,
    },
    /// The order's (or the cycle's) live intent changed between the conflict and its read, twice (it failed
    /// while a new one was created): retry.
    #[error("the order's live payment intent changed while it was read; retry")]
    OrderReferenceContended,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Creates an intent of hookline's own (no API client: billing runs, the CLI, tests) and, when
/// `new.confirm`, its outbound charge request in the caller's transaction. Intents without a client never
/// collide on `order_reference` (NULL clients are distinct in the UNIQUE index).
pub async fn create_intent(
    tx: &mut PgConnection,
    new: &NewIntent<'_>,
) -> Result<Intent, sqlx::Error> {
    // Without a client and a cycle no partial UNIQUE index can match: a row always comes back.
    insert_intent(
        tx,
        None,
        &NewIntent {
            cycle: None,
            ..*new
        },
    )
    .await?
    .ok_or(sqlx::Error::RowNotFound)
}

/// Creates an intent paying the subscription cycle `new.cycle` (a billing charge), owned by the subscription's
/// API client `client` (`None`: an operator's subscription, hookline's own intent) and,
/// when `new.confirm`, its charge request, in the caller's transaction. `None` when the cycle already has a
/// live charge (partial UNIQUE index `payment_intents_live_cycle`: a concurrent one waits for the first to
/// commit): nothing was written.
pub async fn create_cycle_intent(
    tx: &mut PgConnection,
    client: Option<&str>,
    new: &NewIntent<'_>,
) -> Result<Option<Intent>, sqlx::Error> {
    debug_assert!(new.cycle.is_some(), "a cycle intent names its cycle");
    insert_intent(tx, client, new).await
}

/// The live (neither failed nor canceled) charge of a subscription cycle, whoever created it.
pub async fn live_for_cycle(
    conn: &mut PgConnection,
    cycle: CycleRef<'_>,
) -> Result<Option<Intent>, sqlx::Error> {
    // `status NOT IN ('failed', 'canceled')` stays literal: it is the predicate of the partial index
    // `payment_intents_live_cycle`, which a prepared statement's generic plan can only use when the values are in
    // the text.
    intent_query!(
        r#"SELECT "#,
        r#" FROM payment_intents
          WHERE subscription_id = $1 AND billing_cycle = $2
            AND status NOT IN ('failed', 'canceled')"#,
        cycle.subscription_id,
        cycle.billing_cycle,
    )
    .fetch_optional(conn)
    .await
}

/// Creates an intent owned by the merchant API client `client` (its `[[api.clients]]` name) and, when
/// `new.confirm`, its outbound charge request in the caller's transaction.
///
/// With an `order_reference`, the partial UNIQUE index `payment_intents_live_order` decides: a second live
/// intent for the same `(client, order_reference)` is not inserted (a concurrent one waits for the first to
/// commit), and the existing intent is named in [`CreateError::OrderReferenceInUse`]. Once that intent has
/// failed or was canceled, the order can be paid with a new one.
pub async fn create_intent_for_client(
    tx: &mut PgConnection,
    client: &str,
    new: &NewIntent<'_>,
) -> Result<Intent, CreateError> {
    // Twice at most: a second round only follows a live intent that failed between the conflict and its read.
    for _ in 0..2 {
        if let Some(intent) = insert_intent(tx, Some(client), new).await? {
            return Ok(intent);
        }
        // `status NOT IN ('failed', 'canceled')` stays literal: the partial index `payment_intents_live_order`'s
        // predicate.
        let existing: Option<String> = sqlx::query_scalar!(
            "SELECT public_id FROM payment_intents
              WHERE client = $1 AND order_reference = $2 AND status NOT IN ('failed', 'canceled')",
            client,
            new.order_reference,
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(intent) = existing {
            return Err(CreateError::OrderReferenceInUse { intent });
        }
        if let Some(cycle) = new.cycle {
            if let Some(live) = live_for_cycle(tx, cycle).await? {
                return Err(CreateError::BillingCycleInUse {
                    intent: live.public_id,
                });
            }
        }
    }
    Err(CreateError::OrderReferenceContended)
}

/// Inserts the intent (and its charge request when confirmed); `None` when `(client, order_reference)` or
/// `(subscription_id, billing_cycle)` already has a live intent. The conflict target is left out because either
/// partial UNIQUE index may be the one that conflicts (an INSERT names one arbiter at most); the only other
/// UNIQUE constraint, the random `public_id`, cannot collide in practice, and a `None` is always explained by
/// the caller's read of the live intent (else it retries, then reports contention).
async fn insert_intent(
    tx: &mut PgConnection,
    client: Option<&str>,
    new: &NewIntent<'_>,
) -> Result<Option<Intent>, sqlx::Error> {
    let status = if new.confirm {
        IntentStatus::RequiresDispatch
    } else {
        IntentStatus::RequiresConfirmation
    };
    let intent: Option<Intent> = intent_query!(
        r#"INSERT INTO payment_intents (public_id, provider, amount, currency, customer, description, client,
                                      order_reference, payment_params, status, subscription_id, billing_cycle,
                                      capture_method)
         VALUES ('pi_hl_' || replace(gen_random_uuid()::text, '-', ''), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                 $11, $12)
         ON CONFLICT DO NOTHING
         RETURNING "#,
        r#""#,
        new.provider,
        new.amount,
        new.currency,
        new.customer,
        new.description,
        client,
        new.order_reference,
        // Encoded as JSON by its Serialize; the column is jsonb (`as _`: the macro would expect a
        // `serde_json::Value`).
        new.payment_params.map(Json) as _,
        status.as_str(),
        new.cycle.map(|c| c.subscription_id),
        new.cycle.map(|c| c.billing_cycle),
        new.capture_method.as_str(),
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(intent) = intent else {
        return Ok(None);
    };
    if new.confirm {
        enqueue_charge(tx, &intent).await?;
    }
    Ok(Some(intent))
}

/// Queues the intent's charge under its derived key; the key's UNIQUE constraint makes a second enqueue a
/// no-op.
async fn enqueue_charge(tx: &mut PgConnection, intent: &Intent) -> Result<bool, sqlx::Error> {
    crate::outbound_requests::enqueue(
        &mut *tx,
        crate::outbound_requests::Kind::Charge,
        intent.id,
        None,
        &intent.provider,
        &charge_key(intent.id),
    )
    .await
}

/// The intent `public_id` of the API client `client`, locked (`FOR UPDATE`) until the caller's transaction
/// ends: a confirm decides on the row nobody else can change meanwhile (concurrent confirms wait here, then see
/// the first one's outcome).
pub async fn lock_for_client(
    tx: &mut PgConnection,
    client: &str,
    public_id: &str,
) -> Result<Option<Intent>, sqlx::Error> {
    intent_query!(
        r#"SELECT "#,
        r#" FROM payment_intents WHERE public_id = $1 AND client = $2 FOR UPDATE"#,
        public_id,
        client,
    )
    .fetch_optional(tx)
    .await
}

/// Confirms intent `intent_id` with `params` (what its gateway needs; the caller checked
/// [`PaymentParams::missing_for_confirm`]): `requires_confirmation` → `requires_dispatch` and its charge
/// queued, in the caller's transaction. The conditional UPDATE decides who confirms (`None`: the intent was not
/// `requires_confirmation` any more, nothing changed); the charge request's UNIQUE key is the second guard.
pub async fn confirm(
    tx: &mut PgConnection,
    intent_id: i64,
    params: &PaymentParams,
) -> Result<Option<Intent>, sqlx::Error> {
    let intent: Option<Intent> = intent_query!(
        r#"UPDATE payment_intents
            SET status = $3, payment_params = $2, updated_at = now()
          WHERE id = $1 AND status = $4
         RETURNING "#,
        r#""#,
        intent_id,
        // Encoded as JSON by its Serialize (`as _`: the macro would expect a `serde_json::Value`).
        Json(params) as _,
        IntentStatus::RequiresDispatch.as_str(),
        IntentStatus::RequiresConfirmation.as_str(),
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(intent) = &intent {
        enqueue_charge(tx, intent).await?;
    }
    Ok(intent)
}

/// An intent by its public id.
pub async fn get_by_public_id(
    conn: &mut PgConnection,
    public_id: &str,
) -> Result<Option<Intent>, sqlx::Error> {
    intent_query!(
        r#"SELECT "#,
        r#" FROM payment_intents WHERE public_id = $1"#,
        public_id,
    )
    .fetch_optional(conn)
    .await
}

/// An intent by its public id, if it belongs to the API client `client` (another client's intent, or one of
/// hookline's own, is `None`: the API does not confirm that it exists).
pub async fn get_for_client(
    conn: &mut PgConnection,
    client: &str,
    public_id: &str,
) -> Result<Option<Intent>, sqlx::Error> {
    intent_query!(
        r#"SELECT "#,
        r#" FROM payment_intents WHERE public_id = $1 AND client = $2"#,
        public_id,
        client,
    )
    .fetch_optional(conn)
    .await
}

/// An intent by its internal id.
pub async fn get(conn: &mut PgConnection, id: i64) -> Result<Option<Intent>, sqlx::Error> {
    intent_query!(r#"SELECT "#, r#" FROM payment_intents WHERE id = $1"#, id,)
        .fetch_optional(conn)
        .await
}

/// Records the gateway's answer to the charge: its payment id and the intent's status (forward only: a
/// `succeeded` intent is never moved back by a late `processing` answer). When this moves the intent to a final
/// status, its domain event is written in the same transaction. [`record_charge_answer`] with no next action and
/// no decline.
pub async fn record_gateway_answer(
    conn: &mut PgConnection,
    intent_id: i64,
    provider_payment_id: Option<&str>,
    status: &str,
    charge_final: &dyn ChargeFinal,
) -> Result<(), RecordError> {
    let status = IntentStatus::parse(status)
        .map_err(|e| RecordError::Database(sqlx::Error::Decode(Box::new(e))))?;
    record_charge_answer(
        conn,
        intent_id,
        &ChargeAnswer {
            provider_payment_id,
            status,
            next_action: None,
            failure_code: None,
            failure_message: None,
            ends_operation: false,
        },
        charge_final,
    )
    .await
}

/// Longest decline code stored (the column's CHECK).
pub const MAX_FAILURE_CODE_CHARS: usize = 200;
/// Longest decline message stored (the column's CHECK).
pub const MAX_FAILURE_MESSAGE_CHARS: usize = 1000;

/// What the gateway said of a charge, as the dispatcher records it ([`record_charge_answer`]).
#[derive(Debug, Clone, Copy)]
pub struct ChargeAnswer<'a> {
    /// The gateway's payment id, when the answer carried one (kept once known).
    pub provider_payment_id: Option<&'a str>,
    /// `processing`, `requires_action`, `requires_capture`, `succeeded`, `failed` (a decline), `canceled` or
    /// `needs_attention` (hookline's own problem).
    pub status: IntentStatus,
    /// While `requires_action`: what the customer must do (Stripe's `next_action`, Pix QR data).
    pub next_action: Option<&'a serde_json::Value>,
    /// The decline's code (`failed`); cut to [`MAX_FAILURE_CODE_CHARS`].
    pub failure_code: Option<&'a str>,
    /// The decline's message (`failed`); cut to [`MAX_FAILURE_MESSAGE_CHARS`].
    pub failure_message: Option<&'a str>,
    /// The answer is the gateway's word on the intent's pending cancel or capture: that operation ends.
    pub ends_operation: bool,
}

/// Records the gateway's answer to a charge, a cancel or a capture (or the object a lookup found), forward only,
/// in the caller's transaction:
/// * a final intent (`succeeded`/`failed`/`canceled`, e.g. completed by the webhook first) keeps its status; a
///   decline answer still fills its missing `failure_code`/`failure_message`;
/// * a `processing` intent is not moved back to `requires_action`/`requires_dispatch`, nor a `requires_capture`
///   one (the customer's part is done) to those or `processing`, by a late answer;
/// * `next_action` is set while the intent `requires_action` and cleared when it moves on;
/// * the pending operation (`pending_operation`) ends when `answer.ends_operation` (the gateway answered the cancel
///   or capture) or the intent is final; a cancel's reason stays only if it canceled;
/// * moving into `succeeded` fixes `amount_captured` (what the capture asked for, else the amount); into
///   `canceled` stamps `canceled_at` (reason `automatic` when nobody asked: the gateway canceled it);
/// * moving into a final status writes the intent's fact once (`payment_intent.failed` for a decline), into
///   `requires_capture` its `payment_intent.amount_capturable_updated`.
pub async fn record_charge_answer(
    conn: &mut PgConnection,
    intent_id: i64,
    answer: &ChargeAnswer<'_>,
    charge_final: &dyn ChargeFinal,
) -> Result<(), RecordError> {
    let cut = |s: Option<&str>, max: usize| s.map(|s| s.chars().take(max).collect::<String>());
    let moved: Option<MovedRow> = moved_query!(
        r#"WITH st AS (SELECT $7::text AS succeeded, $8::text AS failed, $9::text AS processing,
                              $10::text AS requires_action, $11::text AS requires_dispatch, $12::text AS canceled,
                              $13::text AS requires_capture),
                old AS (SELECT id, status AS previous FROM payment_intents WHERE id = $1 FOR UPDATE),
                n AS (SELECT old.id, old.previous,
                             CASE WHEN old.previous IN (st.succeeded, st.failed, st.canceled) THEN old.previous
                                  WHEN old.previous = st.processing
                                       AND $3 IN (st.requires_action, st.requires_dispatch) THEN old.previous
                                  WHEN old.previous = st.requires_capture
                                       AND $3 IN (st.requires_action, st.requires_dispatch, st.processing)
                                       THEN old.previous
                                  ELSE $3 END AS status
                        FROM old, st),
                e AS (SELECT n.*, $14::bool OR n.status IN (st.succeeded, st.failed, st.canceled) AS ends
                        FROM n, st)
         UPDATE payment_intents p
            SET provider_payment_id = coalesce(p.provider_payment_id, $2),
                status = e.status,
                next_action = CASE WHEN e.status = st.requires_action THEN coalesce($4, p.next_action)
                                   WHEN e.status = e.previous THEN p.next_action
                                   ELSE NULL END,
                failure_code = CASE WHEN e.status = st.failed THEN coalesce(p.failure_code, $5)
                                    ELSE p.failure_code END,
                failure_message = CASE WHEN e.status = st.failed THEN coalesce(p.failure_message, $6)
                                       ELSE p.failure_message END,
                pending_operation = CASE WHEN e.ends THEN NULL ELSE p.pending_operation END,
                amount_captured = CASE WHEN e.status = st.succeeded
                                       THEN coalesce(p.amount_captured, p.amount_to_capture, p.amount)
                                       ELSE p.amount_captured END,
                canceled_at = CASE WHEN e.status = st.canceled THEN coalesce(p.canceled_at, now())
                                   ELSE p.canceled_at END,
                cancellation_reason = CASE WHEN e.status = st.canceled THEN coalesce(p.cancellation_reason, $15)
                                           WHEN e.ends THEN NULL
                                           ELSE p.cancellation_reason END,
                updated_at = now()
           FROM e, st
          WHERE p.id = e.id
         RETURNING "#,
        r#"e.previous AS "previous!: IntentStatus", NULL::text AS "intent_traceparent?""#,
        intent_id,
        answer.provider_payment_id,
        answer.status.as_str(),
        answer.next_action.map(Json) as _,
        cut(answer.failure_code, MAX_FAILURE_CODE_CHARS),
        cut(answer.failure_message, MAX_FAILURE_MESSAGE_CHARS),
        // The statuses the rule names (`st`), in the enum's one spelling.
        IntentStatus::Succeeded.as_str(),
        IntentStatus::Failed.as_str(),
        IntentStatus::Processing.as_str(),
        IntentStatus::RequiresAction.as_str(),
        IntentStatus::RequiresDispatch.as_str(),
        IntentStatus::Canceled.as_str(),
        IntentStatus::RequiresCapture.as_str(),
        answer.ends_operation,
        CancellationReason::Automatic.as_str(),
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(m) = moved {
        announce_if_completed(conn, &Moved::from(m), charge_final).await?;
    }
    Ok(())
}

/// A payment a provider event completed, for the intent linked to it.
#[derive(Debug, Clone, Copy)]
pub struct Completed<'a> {
    /// Configured provider name.
    pub provider: &'a str,
    /// The gateway's payment id.
    pub payment_ref: &'a str,
    /// From [`crate::model::PaymentStatus::intent_status`].
    pub status: IntentStatus,
    /// The provider's reason when it failed (shown as `failure_code` / `failure_message`).
    pub failure: Option<&'a crate::model::Failure>,
    /// The trace of the webhook that completed it: the intent's own trace gets a span linked to it.
    pub traceparent: Option<&'a str>,
}

/// A provider's webhook completed the payment: the intent linked to it follows (called in the payment's
/// transaction), and its domain event is written. Returns whether an intent was linked. It is
/// [`complete_from_payments`] with one payment.
pub async fn complete_from_payment(
    conn: &mut PgConnection,
    provider: &str,
    provider_payment_id: &str,
    status: IntentStatus,
    charge_final: &dyn ChargeFinal,
) -> Result<bool, RecordError> {
    let completed = [Completed {
        provider,
        payment_ref: provider_payment_id,
        status,
        failure: None,
        traceparent: None,
    }];
    Ok(complete_from_payments(conn, &completed, charge_final).await? > 0)
}

/// Moves the intents linked to several completed payments in one statement (the worker's path; single
/// payments go through [`complete_from_payment`]). An intent already final is left alone. Its `next_action`
/// is cleared (the customer has nothing left to do: a paid Pix must not show its QR code again), and a failure
/// keeps the provider's reason (a failure code already recorded from the gateway's answer is kept). Returns
/// how many intents were completed.
pub async fn complete_from_payments(
    conn: &mut PgConnection,
    completed: &[Completed<'_>],
    charge_final: &dyn ChargeFinal,
) -> Result<usize, RecordError> {
    if completed.is_empty() {
        return Ok(0);
    }
    let providers: Vec<&str> = completed.iter().map(|c| c.provider).collect();
    let refs: Vec<&str> = completed.iter().map(|c| c.payment_ref).collect();
    let statuses: Vec<&str> = completed.iter().map(|c| c.status.as_str()).collect();
    let codes: Vec<Option<&str>> = completed
        .iter()
        .map(|c| c.failure.map(|f| f.code.as_str()))
        .collect();
    let messages: Vec<Option<&str>> = completed
        .iter()
        .map(|c| c.failure.and_then(|f| f.message.as_deref()))
        .collect();
    let moved: Vec<Moved> = moved_query!(
        r#"UPDATE payment_intents p
            SET status = old.new_status, next_action = NULL, updated_at = now(),
                failure_code = CASE WHEN old.new_status = $7
                                    THEN coalesce(p.failure_code, old.code) ELSE p.failure_code END,
                failure_message = CASE WHEN old.new_status = $7
                                       THEN coalesce(p.failure_message, old.message) ELSE p.failure_message END,
                pending_operation = CASE WHEN old.new_status IN ($7, $8, $9) THEN NULL
                                         ELSE p.pending_operation END,
                amount_captured = CASE WHEN old.new_status = $8
                                       THEN coalesce(p.amount_captured, p.amount_to_capture, p.amount)
                                       ELSE p.amount_captured END,
                canceled_at = CASE WHEN old.new_status = $9 THEN coalesce(p.canceled_at, now())
                                   ELSE p.canceled_at END,
                cancellation_reason = CASE WHEN old.new_status = $9
                                           THEN coalesce(p.cancellation_reason,
                                                         CASE WHEN old.code = $13 THEN $13 ELSE $11 END)
                                           WHEN old.new_status IN ($7, $8) THEN NULL
                                           ELSE p.cancellation_reason END
           FROM (SELECT i.id, i.status AS previous, u.status AS new_status, u.code, u.message
                   FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                                 AS u(provider, ref, status, code, message)
                          ORDER BY provider, ref) u
                   CROSS JOIN LATERAL (
                        SELECT id, status FROM payment_intents
                         WHERE provider = u.provider AND provider_payment_id = u.ref
                           AND status NOT IN ($8, $7, $9)
                           -- An authorization moves only a manual intent, and only forward (the customer's part
                           -- is done; a capture already asked stays asked).
                           AND (u.status <> $10 OR (capture_method = $12 AND status <> $10))
                         FOR UPDATE) i) old
          WHERE p.id = old.id
         RETURNING "#,
        r#"old.previous AS "previous!: IntentStatus",
                   (SELECT r.traceparent FROM outbound_requests r
                     WHERE r.intent_id = p.id AND r.kind = $6 ORDER BY r.id DESC LIMIT 1) AS "intent_traceparent?""#,
        &providers as &[&str],
        &refs as &[&str],
        &statuses as &[&str],
        &codes as &[Option<&str>],
        &messages as &[Option<&str>],
        crate::outbound_requests::Kind::Charge.as_str(),
        IntentStatus::Failed.as_str(),
        IntentStatus::Succeeded.as_str(),
        IntentStatus::Canceled.as_str(),
        IntentStatus::RequiresCapture.as_str(),
        CancellationReason::Automatic.as_str(),
        CaptureMethod::Manual.as_str(),
        // The gateway's own code for a Pix (or boleto) that expired unpaid: the intent says `expired`.
        CancellationReason::Expired.as_str(),
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(Moved::from)
    .collect();
    for m in &moved {
        let webhook = completed
            .iter()
            .find(|c| {
                c.provider == m.intent.provider
                    && m.intent.provider_payment_id.as_deref() == Some(c.payment_ref)
            })
            .and_then(|c| c.traceparent);
        let Some(webhook) = webhook else {
            // Completed by the gateway's answer: the caller's span (the dispatcher's attempt) is already in the
            // intent's trace.
            announce_if_completed(conn, m, charge_final).await?;
            continue;
        };
        // Completed by a webhook: the completion belongs to the intent's trace (the merchant's request, the
        // dispatcher's attempts), linked to the webhook's own trace; an intent without a trace stays in the
        // webhook's.
        let span = tracing::info_span!(
            "payment.intent_completed",
            intent_id = %m.intent.public_id,
            status = m.intent.status.as_str(),
        );
        if telemetry::set_parent(&span, m.intent_traceparent.as_deref()) {
            telemetry::add_link(&span, Some(webhook));
        } else {
            telemetry::set_parent(&span, Some(webhook));
        }
        announce_if_completed(conn, m, charge_final)
            .instrument(span)
            .await?;
    }
    Ok(moved.len())
}

/// An intent after an update, and its status before.
#[derive(Debug)]
struct Moved {
    intent: Intent,
    previous: IntentStatus,
    /// The trace its charge was queued in (only where the statement reads it).
    intent_traceparent: Option<String>,
}

/// [`Moved`] as the updates return it: flat, because the checked macros fill a struct field by field (no
/// `flatten`).
#[derive(Debug)]
struct MovedRow {
    id: i64,
    public_id: String,
    provider: String,
    amount: i64,
    currency: String,
    customer: Option<String>,
    description: Option<String>,
    client: Option<String>,
    status: IntentStatus,
    order_reference: Option<String>,
    payment_params: Option<Json<PaymentParams>>,
    next_action: Option<Json<serde_json::Value>>,
    failure_code: Option<String>,
    failure_message: Option<String>,
    provider_payment_id: Option<String>,
    refunded: i64,
    subscription_id: Option<i64>,
    billing_cycle: Option<String>,
    created_at: OffsetDateTime,
    canceled_at: Option<OffsetDateTime>,
    cancellation_reason: Option<String>,
    capture_method: CaptureMethod,
    pending_operation: Option<String>,
    amount_to_capture: Option<i64>,
    amount_captured: Option<i64>,
    amount_capturable: i64,
    amount_received: i64,
    previous: IntentStatus,
    intent_traceparent: Option<String>,
}

impl From<MovedRow> for Moved {
    fn from(r: MovedRow) -> Moved {
        Moved {
            intent: Intent {
                id: r.id,
                public_id: r.public_id,
                provider: r.provider,
                amount: r.amount,
                currency: r.currency,
                customer: r.customer,
                description: r.description,
                client: r.client,
                status: r.status,
                order_reference: r.order_reference,
                payment_params: r.payment_params,
                next_action: r.next_action,
                failure_code: r.failure_code,
                failure_message: r.failure_message,
                provider_payment_id: r.provider_payment_id,
                refunded: r.refunded,
                subscription_id: r.subscription_id,
                billing_cycle: r.billing_cycle,
                created_at: r.created_at,
                canceled_at: r.canceled_at,
                cancellation_reason: r.cancellation_reason,
                capture_method: r.capture_method,
                pending_operation: r.pending_operation,
                amount_to_capture: r.amount_to_capture,
                amount_captured: r.amount_captured,
                amount_capturable: r.amount_capturable,
                amount_received: r.amount_received,
            },
            previous: r.previous,
            intent_traceparent: r.intent_traceparent,
        }
    }
}

/// What `payment_intent.succeeded` / `.failed` / `.canceled` / `.amount_capturable_updated` carry (the merchant
/// API's document describes their `data` with this type).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct IntentFact<'a> {
    /// Why it was canceled (`payment_intent.canceled` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    cancellation_reason: Option<&'a str>,
    /// `automatic` or `manual`.
    capture_method: &'a str,
    /// What a capture can take (`payment_intent.amount_capturable_updated`: the authorized amount).
    amount_capturable: i64,
    /// What was captured (`payment_intent.succeeded`: the amount, or less after a partial capture).
    amount_received: i64,
    intent_id: &'a str,
    provider: &'a str,
    provider_payment_id: Option<&'a str>,
    status: &'a str,
    amount: i64,
    currency: &'a str,
    customer: Option<&'a str>,
    /// A string, as in the `subscription.*` facts (where Stripe's own `sub_…` ids also appear).
    subscription_id: Option<String>,
    billing_cycle: Option<&'a str>,
}

/// A subscription cycle's charge that just reached a final status (the intent's completion hands it to
/// [`ChargeFinal`] in its transaction).
#[derive(Debug, Clone, Copy)]
pub struct FinalCharge<'a> {
    /// The intent's internal id.
    pub intent_id: i64,
    /// Its public id.
    pub public_id: &'a str,
    /// Configured provider name.
    pub provider: &'a str,
    /// Minor units.
    pub amount: i64,
    /// Lower-case ISO 4217.
    pub currency: &'a str,
    /// The gateway's payment id.
    pub provider_payment_id: Option<&'a str>,
    /// The subscription.
    pub subscription_id: i64,
    /// The cycle.
    pub billing_cycle: &'a str,
    /// Succeeded (else failed).
    pub succeeded: bool,
    /// The decline's code.
    pub failure_code: Option<&'a str>,
    /// The decline's message.
    pub failure_message: Option<&'a str>,
}

/// What a subscription cycle's charge reaching a final status does, in the transaction that moved it: billing's
/// dunning decides — paid, retried, past due (`hookline_billing::Dunning`). A seam because billing stands above
/// this crate: whoever composes the payments effect or the dispatcher passes it in (`hookline_billing::
/// payments_handler`, `hookline_billing::dispatcher`), so an intent never calls up into billing.
pub trait ChargeFinal: Send + Sync + std::fmt::Debug {
    /// Reacts to `charge` inside the caller's transaction (`conn`); an error rolls the whole transaction back.
    fn on_charge_final<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        charge: &'a FinalCharge<'_>,
    ) -> BoxFuture<'a, Result<(), RecordError>>;
}

/// Writes the intent's completion fact when this update moved it into a final status (once per intent: the
/// status never leaves a final value, and the fact's id is derived from the intent).
async fn announce_if_completed(
    conn: &mut PgConnection,
    m: &Moved,
    charge_final: &dyn ChargeFinal,
) -> Result<(), RecordError> {
    // The status decodes as the enum: an unknown stored value already failed the statement (naming it) instead
    // of passing for "not final".
    let now = m.intent.status;
    let ty = match now {
        _ if m.previous.is_final() => return Ok(()),
        IntentStatus::Succeeded => EventType::PaymentIntentSucceeded,
        IntentStatus::Failed => EventType::PaymentIntentFailed,
        IntentStatus::Canceled => EventType::PaymentIntentCanceled,
        IntentStatus::RequiresCapture if m.previous != IntentStatus::RequiresCapture => {
            EventType::PaymentIntentAmountCapturableUpdated
        }
        IntentStatus::RequiresConfirmation
        | IntentStatus::RequiresDispatch
        | IntentStatus::RequiresAction
        | IntentStatus::RequiresCapture
        | IntentStatus::Processing
        | IntentStatus::NeedsAttention => return Ok(()),
    };
    let i = &m.intent;
    domain_events::record(
        conn,
        ty,
        &i.public_id,
        &IntentFact {
            cancellation_reason: i.cancellation_reason.as_deref(),
            capture_method: i.capture_method.as_str(),
            amount_capturable: i.amount_capturable,
            amount_received: i.amount_received,
            intent_id: &i.public_id,
            provider: &i.provider,
            provider_payment_id: i.provider_payment_id.as_deref(),
            status: i.status.as_str(),
            amount: i.amount,
            currency: &i.currency,
            customer: i.customer.as_deref(),
            subscription_id: i.subscription_id.map(|id| id.to_string()),
            billing_cycle: i.billing_cycle.as_deref(),
        },
        // The intent's client sees its facts; hookline's own intents (billing, the CLI) have none.
        Owner::client(i.client.as_deref()),
    )
    .await?;
    if !now.is_final() {
        return Ok(());
    }
    // A subscription cycle's charge: its dunning decides, in this same transaction (paid, retry, past due). A
    // canceled one moved no money: for a billing claim's own charge (a Pix that expired, an authorization the
    // gateway let go) it is an attempt that did not pay, which dunning schedules again, the reason as its code; a
    // merchant's checkout of the cycle that was canceled concerns no claim (dunning leaves it alone) and the cycle
    // is free again (the live-cycle index leaves it out).
    let failure_code = match now {
        IntentStatus::Canceled => i.cancellation_reason.as_deref().or(Some("canceled")),
        _ => i.failure_code.as_deref(),
    };
    if let (Some(subscription_id), Some(cycle)) = (i.subscription_id, i.billing_cycle.as_deref()) {
        charge_final
            .on_charge_final(
                conn,
                &FinalCharge {
                    intent_id: i.id,
                    public_id: &i.public_id,
                    provider: &i.provider,
                    amount: i.amount,
                    currency: &i.currency,
                    provider_payment_id: i.provider_payment_id.as_deref(),
                    subscription_id,
                    billing_cycle: cycle,
                    succeeded: now == IntentStatus::Succeeded,
                    failure_code,
                    failure_message: i.failure_message.as_deref(),
                },
            )
            .await?;
    }
    Ok(())
}

/// Intents, newest first, with `id < before` (keyset pagination) and, when `statuses` is not empty, one of those
/// statuses, for the operator console.
pub async fn recent<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    before: Option<i64>,
    statuses: &[IntentStatus],
    limit: i64,
) -> Result<Vec<Intent>, sqlx::Error> {
    let statuses: Vec<&str> = statuses.iter().map(IntentStatus::as_str).collect();
    intent_query!(
        r#"SELECT "#,
        r#" FROM payment_intents WHERE id < coalesce($1, 9223372036854775807)
           AND (cardinality($3::text[]) = 0 OR status = ANY($3::text[]))
         ORDER BY id DESC LIMIT $2"#,
        before,
        limit,
        &statuses as &[&str],
    )
    .fetch_all(conn)
    .await
}
