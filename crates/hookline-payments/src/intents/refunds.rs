//! `outbound_refunds`: refunds requested through hookline (the API, the CLI), their own records and keys,
//! never "undo the payment". A refund reserves its amount on the intent when requested, so concurrent requests
//! never exceed what was captured; one the gateway refused or failed releases it again, in the transaction that
//! records the refusal ([`record_refund_answer`]).

use super::*;

/// Where a refund stands (`outbound_refunds.status`; the column's CHECK lists the same values): the one spelling
/// the statements bind. [`RefundRequested::status`] and [`get_refund`] keep the text as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundStatus {
    /// Waiting for the dispatcher; its amount is held on the intent.
    RequiresDispatch,
    /// Made at the gateway; its amount stays held.
    Succeeded,
    /// The gateway failed it: nothing moved, the amount is released.
    Failed,
    /// Refused (hookline's own problem): nothing moved, the amount is released.
    NeedsAttention,
}

impl RefundStatus {
    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RefundStatus::RequiresDispatch => "requires_dispatch",
            RefundStatus::Succeeded => "succeeded",
            RefundStatus::Failed => "failed",
            RefundStatus::NeedsAttention => "needs_attention",
        }
    }
}

/// Why a refund cannot be requested.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    /// No such intent.
    #[error("no payment intent {0}")]
    UnknownIntent(String),
    /// The intent has not succeeded (nothing captured yet).
    #[error("payment intent {0} has not succeeded; nothing to refund")]
    NotCaptured(String),
    /// The amount would take the refunds beyond what was captured.
    #[error("refunding {amount} would exceed what is left ({left})")]
    AboveCaptured {
        /// Requested.
        amount: i64,
        /// Still refundable.
        left: i64,
    },
    /// The request key was already used for another refund of this intent (another amount or reason): the
    /// same key must mean the same refund.
    #[error(
        "the idempotency key was already used for refund {refund} of this intent with another amount or \
         reason ({amount}); a different refund needs a new key"
    )]
    KeyReused {
        /// The existing refund (`re_hl_N`).
        refund: String,
        /// Its amount.
        amount: i64,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Requests a refund of `amount` on intent `public_id` (any intent: the operator's `hookline refund`), in the
/// caller's transaction: the refund record, the intent's `refunded` counter (the database refuses going above
/// the amount, also under concurrent requests: the UPDATE's condition and the CHECK decide) and the outbound
/// request.
pub async fn request_refund(
    tx: &mut PgConnection,
    public_id: &str,
    amount: i64,
    reason: &str,
) -> Result<i64, RefundError> {
    refund(tx, None, public_id, amount, reason).await
}

/// [`request_refund`] for the merchant API: only an intent of `client`; another client's intent (or one of
/// hookline's own) is [`RefundError::UnknownIntent`].
pub async fn request_refund_for_client(
    tx: &mut PgConnection,
    client: &str,
    public_id: &str,
    amount: i64,
    reason: &str,
) -> Result<i64, RefundError> {
    refund(tx, Some(client), public_id, amount, reason).await
}

/// A refund asked for under a request key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRequested {
    /// `outbound_refunds.id` (shown as [`refund_public_id`]).
    pub id: i64,
    /// `false`: the key's refund already existed (the same command ran before); nothing was written.
    pub created: bool,
    /// The refund's status now.
    pub status: String,
}

/// [`request_refund`] under the operator's request key (`hookline refund --idempotency-key`): the same key on
/// the same intent is the same refund, however often (or however concurrently) it is asked for.
///
/// The refund row is inserted FIRST, `ON CONFLICT ON CONSTRAINT outbound_refunds_request_key DO NOTHING`: a
/// concurrent request with the same key waits on the UNIQUE index until the first commits, then finds its
/// refund and reserves nothing. Only the inserting request reserves the amount and queues the gateway request;
/// when the reservation is refused, the caller's rollback removes the row (and frees the key). The same key with
/// another amount or reason is [`RefundError::KeyReused`].
pub async fn request_refund_with_key(
    tx: &mut PgConnection,
    public_id: &str,
    amount: i64,
    reason: &str,
    request_key: &str,
) -> Result<RefundRequested, RefundError> {
    let intent_id: Option<i64> = sqlx::query_scalar!(
        "SELECT id FROM payment_intents WHERE public_id = $1",
        public_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(intent_id) = intent_id else {
        return Err(RefundError::UnknownIntent(public_id.to_owned()));
    };
    let inserted: Option<i64> = sqlx::query_scalar!(
        "INSERT INTO outbound_refunds (intent_id, amount, reason, request_key) VALUES ($1, $2, $3, $4)
         ON CONFLICT ON CONSTRAINT outbound_refunds_request_key DO NOTHING
         RETURNING id",
        intent_id,
        amount,
        reason,
        request_key,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(refund_id) = inserted else {
        // The conflicting row is committed (an uncommitted one is waited for): it is read here.
        let stored = sqlx::query!(
            "SELECT id, amount, reason, status FROM outbound_refunds
              WHERE intent_id = $1 AND request_key = $2",
            intent_id,
            request_key,
        )
        .fetch_one(&mut *tx)
        .await?;
        let (id, stored_amount, stored_reason, status) =
            (stored.id, stored.amount, stored.reason, stored.status);
        if stored_amount != amount || stored_reason != reason {
            return Err(RefundError::KeyReused {
                refund: refund_public_id(id),
                amount: stored_amount,
            });
        }
        return Ok(RefundRequested {
            id,
            created: false,
            status,
        });
    };
    let (intent_id, provider) = reserve(tx, None, public_id, amount).await?;
    crate::outbound_requests::enqueue(
        &mut *tx,
        crate::outbound_requests::Kind::Refund,
        intent_id,
        Some(refund_id),
        &provider,
        &refund_key(refund_id),
    )
    .await?;
    Ok(RefundRequested {
        id: refund_id,
        created: true,
        status: RefundStatus::RequiresDispatch.as_str().to_owned(),
    })
}

/// Reserves `amount` on the intent (`refunded`), never beyond what was captured: the UPDATE's condition and
/// the CHECK decide, also under concurrent requests. Returns the intent's id and provider.
async fn reserve(
    tx: &mut PgConnection,
    client: Option<&str>,
    public_id: &str,
    amount: i64,
) -> Result<(i64, String), RefundError> {
    let row = sqlx::query!(
        "UPDATE payment_intents SET refunded = refunded + $2, updated_at = now()
          WHERE public_id = $1 AND status = $4 AND refunded + $2 <= coalesce(amount_captured, amount)
            AND ($3::text IS NULL OR client = $3)
          RETURNING id, provider",
        public_id,
        amount,
        client,
        IntentStatus::Succeeded.as_str(),
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(reserved) = row {
        return Ok((reserved.id, reserved.provider));
    }
    let intent = sqlx::query!(
        r#"SELECT status AS "status: IntentStatus", coalesce(amount_captured, amount) AS "amount!", refunded
             FROM payment_intents
          WHERE public_id = $1 AND ($2::text IS NULL OR client = $2)"#,
        public_id,
        client,
    )
    .fetch_optional(&mut *tx)
    .await?;
    Err(match intent {
        None => RefundError::UnknownIntent(public_id.to_owned()),
        Some(i) if i.status != IntentStatus::Succeeded => {
            RefundError::NotCaptured(public_id.to_owned())
        }
        Some(i) => RefundError::AboveCaptured {
            amount,
            left: i.amount - i.refunded,
        },
    })
}

async fn refund(
    tx: &mut PgConnection,
    client: Option<&str>,
    public_id: &str,
    amount: i64,
    reason: &str,
) -> Result<i64, RefundError> {
    let (intent_id, provider) = reserve(tx, client, public_id, amount).await?;
    let refund_id: i64 = sqlx::query_scalar!(
        "INSERT INTO outbound_refunds (intent_id, amount, reason) VALUES ($1, $2, $3) RETURNING id",
        intent_id,
        amount,
        reason,
    )
    .fetch_one(&mut *tx)
    .await?;
    crate::outbound_requests::enqueue(
        &mut *tx,
        crate::outbound_requests::Kind::Refund,
        intent_id,
        Some(refund_id),
        &provider,
        &refund_key(refund_id),
    )
    .await?;
    Ok(refund_id)
}

/// What the dispatcher needs of a refund: `(intent_id, amount, status)`.
pub async fn get_refund(
    conn: &mut PgConnection,
    refund_id: i64,
) -> Result<Option<(i64, i64, String)>, sqlx::Error> {
    let row = sqlx::query!(
        "SELECT intent_id, amount, status FROM outbound_refunds WHERE id = $1",
        refund_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.intent_id, r.amount, r.status)))
}

/// Records the gateway's answer to a refund: its refund id (kept once known) and the refund's status
/// (`succeeded`, `failed` or `needs_attention`), and moves the intent's `refunded` reservation with it, in the
/// caller's transaction (one statement).
///
/// A refund holds its amount on the intent while it is `requires_dispatch` or `succeeded`; a refused
/// (`needs_attention`) or `failed` refund moved nothing at the gateway and releases it, so a corrected refund
/// fits (issue 25, finding 5). The release happens once: recording the same refusal again changes nothing, and
/// a refund that later turns out to have succeeded takes its amount back (the intent's CHECK still bounds the
/// sum by what was captured).
pub async fn record_refund_answer(
    conn: &mut PgConnection,
    refund_id: i64,
    provider_refund_id: Option<&str>,
    status: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "WITH old AS (
              SELECT id, intent_id, amount, status FROM outbound_refunds WHERE id = $1 FOR UPDATE),
          moved AS (
              UPDATE outbound_refunds r
                 SET provider_refund_id = coalesce(r.provider_refund_id, $2), status = $3, updated_at = now()
                FROM old
               WHERE r.id = old.id
              RETURNING old.intent_id, old.amount,
                        (CASE WHEN r.status IN ($4, $5) THEN 1 ELSE 0 END)
                      - (CASE WHEN old.status IN ($4, $5) THEN 1 ELSE 0 END) AS held)
         UPDATE payment_intents p
            SET refunded = p.refunded + moved.held * moved.amount, updated_at = now()
           FROM moved
          WHERE p.id = moved.intent_id AND moved.held <> 0",
        refund_id,
        provider_refund_id,
        status,
        // The statuses that hold the amount.
        RefundStatus::RequiresDispatch.as_str(),
        RefundStatus::Succeeded.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The public id of a refund (`re_hl_N`): what the API and the CLI show, and what the dispatcher sends with
/// the refund (Stripe `metadata[hookline_refund]`) so a lookup finds it by hookline's own reference.
pub fn refund_public_id(refund_id: i64) -> String {
    format!("re_hl_{refund_id}")
}

/// The amount of the refunds of `intent_id` (other than `except`) the gateway confirmed as made (`succeeded`): what a
/// Pagar.me charge's `canceled_amount` surely covers besides a refund whose key expired and which is looked up.
/// Only confirmed ones: counting one the gateway has not made yet could make a refund that was made look absent.
pub async fn recorded_refund_amount<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    intent_id: i64,
    except: i64,
) -> Result<i64, sqlx::Error> {
    // `coalesce(…)` is never NULL; PostgreSQL's inference cannot tell (`!`).
    sqlx::query_scalar!(
        r#"SELECT coalesce(sum(amount), 0)::bigint AS "total!" FROM outbound_refunds
          WHERE intent_id = $1 AND id <> $2 AND provider_refund_id IS NOT NULL AND status = $3"#,
        intent_id,
        except,
        RefundStatus::Succeeded.as_str(),
    )
    .fetch_one(conn)
    .await
}

/// The gateway refund ids already linked to refunds of `intent_id` (other than `except`): a gateway refund without
/// hookline's reference that already belongs to another refund of the intent does not make a lookup ambiguous.
pub async fn linked_refund_ids<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    intent_id: i64,
    except: i64,
) -> Result<Vec<String>, sqlx::Error> {
    // The column is nullable, the WHERE clause excludes NULL (`!`).
    sqlx::query_scalar!(
        r#"SELECT provider_refund_id AS "provider_refund_id!" FROM outbound_refunds
          WHERE intent_id = $1 AND id <> $2 AND provider_refund_id IS NOT NULL"#,
        intent_id,
        except,
    )
    .fetch_all(conn)
    .await
}
