//! Canceling a payment intent — by its merchant (`POST /v1/payment_intents/{id}/cancel`) or by hookline when nobody
//! confirmed or completed it in time ([`expire_unconfirmed`], [`expire_awaiting_customer`]) — and capturing an
//! authorization ([`capture`]).
//!
//! **The dispatcher's claim and the cancel are decided on one row.** A confirmed intent's charge is an
//! `outbound_requests` row; the dispatcher's claim stamps `key_first_sent_at` on it in the statement that leases
//! it, before anything is sent. The cancel is one statement too: it moves that row to `canceled` only while it is
//! `pending` with no `key_first_sent_at` — and the intent with it. Both take the row's lock, so one of them waits
//! for the other and re-reads the row: either the claim came first (the cancel finds the charge on its way and
//! answers "in flight"), or the cancel did (the claim never sees the row again). Never `canceled` while the gateway
//! may hold money, never a charge sent after `canceled`.
//!
//! **A charge already sent and still open at the gateway** (`requires_action`: 3-D Secure, a Pix or boleto waiting;
//! `requires_capture`: an authorization, whose cancel is the void) is canceled AT the gateway: one statement marks
//! the intent's `pending_operation = 'cancel'` (only from none: a capture asked first wins, and a second cancel
//! finds the first) and the cancel is queued as an outbound request of its own ([`Kind::Cancel`], key
//! [`Operation::key`]), sent by the dispatcher under the key-lifetime rules of every request. The intent is
//! `canceled` when the gateway confirms — or `succeeded` when the gateway says the payment completed first (the
//! customer finished 3-D Secure a second before): its fact says so, never a silent loss. `processing` (the outcome
//! is the gateway's, unknown yet) and a charge the dispatcher has claimed are answered "in flight".
//!
//! `canceled` is final and releases the intent's order and billing cycle (the partial UNIQUE indexes leave canceled
//! intents out); `payment_intent.canceled` is written once, in the same transaction.

use sqlx::types::Json;
use sqlx::PgConnection;

use hookline_core::domain_events::RecordError;

use super::{announce_if_completed, ChargeFinal, Intent, Moved};
use crate::model::IntentStatus;
use crate::outbound_requests::{Kind, RequestStatus};
use crate::params::PaymentParams;

/// Why an intent was canceled (`payment_intents.cancellation_reason`): the merchant's reasons (Stripe's), or
/// hookline's own when nobody confirmed it in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancellationReason {
    /// The customer paid (or will pay) the order another way.
    Duplicate,
    /// The merchant suspects fraud.
    Fraudulent,
    /// The customer asked.
    RequestedByCustomer,
    /// The customer left the checkout.
    Abandoned,
    /// Nobody confirmed it, or the customer did not complete it, within `[api] intent_expiry_secs` (hookline's own;
    /// a merchant cannot give it).
    Expired,
    /// The gateway canceled it by itself (an authorization it let expire, a Pix that expired, its dashboard).
    Automatic,
}

impl CancellationReason {
    /// The reasons a merchant may give, in the API's spelling.
    pub const MERCHANT: [CancellationReason; 4] = [
        CancellationReason::Duplicate,
        CancellationReason::Fraudulent,
        CancellationReason::RequestedByCustomer,
        CancellationReason::Abandoned,
    ];

    /// Database and API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CancellationReason::Duplicate => "duplicate",
            CancellationReason::Fraudulent => "fraudulent",
            CancellationReason::RequestedByCustomer => "requested_by_customer",
            CancellationReason::Abandoned => "abandoned",
            CancellationReason::Expired => "expired",
            CancellationReason::Automatic => "automatic",
        }
    }

    /// A reason a merchant may give, by its spelling.
    pub fn merchant(s: &str) -> Option<CancellationReason> {
        CancellationReason::MERCHANT
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// What a cancel found.
#[derive(Debug)]
pub enum CancelOutcome {
    /// Canceled now; its fact is written in the caller's transaction.
    Canceled(Intent),
    /// Its charge is open at the gateway: the cancel is asked of the gateway (queued now, or asked before).
    Requested(Intent),
    /// Its charge was sent, or is being sent: its outcome comes from the gateway (the intent as it is).
    InFlight(Intent),
    /// Already `succeeded`, `failed` or `canceled` (the intent as it is).
    Final(Intent),
}

/// Cancels `intent` (read under `FOR UPDATE` in the caller's transaction: [`super::lock_for_client`]) with
/// `reason`: at once when its charge was not sent (`requires_confirmation`, or `requires_dispatch` whose charge
/// request the dispatcher has not claimed: see the module's text for the race), at the gateway when its charge is
/// open there (`requires_action`, `requires_capture`). Anything else is answered as it stands.
pub async fn cancel(
    tx: &mut PgConnection,
    intent: Intent,
    reason: CancellationReason,
    charge_final: &dyn ChargeFinal,
) -> Result<CancelOutcome, RecordError> {
    let previous = intent.status;
    let canceled: Option<Intent> = match previous {
        IntentStatus::Succeeded | IntentStatus::Failed | IntentStatus::Canceled => {
            return Ok(CancelOutcome::Final(intent))
        }
        IntentStatus::RequiresAction | IntentStatus::RequiresCapture => {
            return request_at_gateway(tx, intent, reason).await
        }
        IntentStatus::Processing | IntentStatus::NeedsAttention => {
            return Ok(CancelOutcome::InFlight(intent))
        }
        IntentStatus::RequiresConfirmation => {
            intent_query!(
                r#"UPDATE payment_intents
                      SET status = $2, canceled_at = now(), cancellation_reason = $3, next_action = NULL,
                          updated_at = now()
                    WHERE id = $1 AND status = $4
                RETURNING "#,
                "",
                intent.id,
                IntentStatus::Canceled.as_str(),
                reason.as_str(),
                IntentStatus::RequiresConfirmation.as_str(),
            )
            .fetch_optional(&mut *tx)
            .await?
        }
        IntentStatus::RequiresDispatch => {
            // One statement: the charge request leaves `pending` only if no claim stamped it (nothing was sent),
            // and the intent is canceled only with it.
            intent_query!(
                r#"WITH request AS (
                       UPDATE outbound_requests
                          SET status = $5, lease_until = NULL, updated_at = now(),
                              last_error = 'canceled before it was sent'
                        WHERE intent_id = $1 AND kind = $6 AND status = $7 AND key_first_sent_at IS NULL
                          AND EXISTS (SELECT 1 FROM payment_intents WHERE id = $1 AND status = $4)
                    RETURNING intent_id)
                   UPDATE payment_intents
                      SET status = $2, canceled_at = now(), cancellation_reason = $3, updated_at = now()
                     FROM request
                    WHERE id = request.intent_id AND status = $4
                RETURNING "#,
                "",
                intent.id,
                IntentStatus::Canceled.as_str(),
                reason.as_str(),
                IntentStatus::RequiresDispatch.as_str(),
                RequestStatus::Canceled.as_str(),
                Kind::Charge.as_str(),
                RequestStatus::Pending.as_str(),
            )
            .fetch_optional(&mut *tx)
            .await?
        }
    };
    let Some(canceled) = canceled else {
        // The dispatcher claimed the charge first (or the intent moved under a lock the caller did not take).
        return Ok(CancelOutcome::InFlight(intent));
    };
    let moved = Moved {
        intent: canceled,
        previous,
        intent_traceparent: None,
    };
    announce_if_completed(tx, &moved, charge_final).await?;
    Ok(CancelOutcome::Canceled(moved.intent))
}

/// Asks the gateway to cancel `intent` (open there: `requires_action` or `requires_capture`), in the caller's
/// transaction: one statement sets `pending_operation` from none, and the cancel request is queued with it. A
/// cancel already asked is answered as such; a capture asked first, as in flight.
async fn request_at_gateway(
    tx: &mut PgConnection,
    intent: Intent,
    reason: CancellationReason,
) -> Result<CancelOutcome, RecordError> {
    match intent.pending_operation.as_deref() {
        Some("cancel") => return Ok(CancelOutcome::Requested(intent)),
        Some(_) => return Ok(CancelOutcome::InFlight(intent)),
        None => {}
    }
    let asked: Option<Intent> = intent_query!(
        r#"UPDATE payment_intents
              SET pending_operation = $2, cancellation_reason = $3, updated_at = now()
            WHERE id = $1 AND status IN ($4, $5) AND pending_operation IS NULL
              AND provider_payment_id IS NOT NULL
        RETURNING "#,
        "",
        intent.id,
        Operation::Cancel.as_str(),
        reason.as_str(),
        IntentStatus::RequiresAction.as_str(),
        IntentStatus::RequiresCapture.as_str(),
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(asked) = asked else {
        return Ok(CancelOutcome::InFlight(intent));
    };
    Operation::Cancel
        .queue(tx, asked.id, &asked.provider)
        .await?;
    Ok(CancelOutcome::Requested(asked))
}

/// An operation asked of the gateway on a sent charge (`payment_intents.pending_operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Cancel it (a void for an authorization).
    Cancel,
    /// Capture an authorization.
    Capture,
}

impl Operation {
    /// Database spelling (`pending_operation`), the same as its outbound request's kind.
    pub fn as_str(self) -> &'static str {
        self.kind().as_str()
    }

    /// The outbound request that carries it to the gateway.
    pub fn kind(self) -> Kind {
        match self {
            Operation::Cancel => Kind::Cancel,
            Operation::Capture => Kind::Capture,
        }
    }

    /// The operation an outbound request of `kind` is, if it is one.
    pub fn of_kind(kind: Kind) -> Option<Operation> {
        match kind {
            Kind::Cancel => Some(Operation::Cancel),
            Kind::Capture => Some(Operation::Capture),
            Kind::Charge | Kind::Refund => None,
        }
    }

    /// The gateway idempotency key of this operation on intent `intent_id`: derived, one per intent
    /// (`hookline-cancel-{id}`, `hookline-capture-{id}`) — a double click or a retry can never ask twice.
    pub fn key(self, intent_id: i64) -> String {
        format!("hookline-{}-{intent_id}", self.as_str())
    }

    /// The status the intent reaches when the gateway makes it: `canceled`, `succeeded`.
    pub fn done(self) -> IntentStatus {
        match self {
            Operation::Cancel => IntentStatus::Canceled,
            Operation::Capture => IntentStatus::Succeeded,
        }
    }

    /// Queues this operation's outbound request for intent `intent_id` under [`Operation::key`], in the caller's
    /// transaction (the statement that set `pending_operation` decided it; the key's UNIQUE is the second guard).
    async fn queue(
        self,
        tx: &mut PgConnection,
        intent_id: i64,
        provider: &str,
    ) -> Result<bool, sqlx::Error> {
        crate::outbound_requests::enqueue(
            tx,
            self.kind(),
            intent_id,
            None,
            provider,
            &self.key(intent_id),
        )
        .await
    }
}

/// What a capture found.
#[derive(Debug)]
pub enum CaptureOutcome {
    /// The capture is asked of the gateway (queued now).
    Requested(Intent),
    /// Not `requires_capture`, or another operation (a capture with another key, a cancel) was asked first: the
    /// intent as it is.
    Refused(Intent),
}

/// Asks the gateway to capture `amount` (≤ the authorized amount, checked by the caller; `None`: all) of `intent`
/// (read under `FOR UPDATE` in the caller's transaction), in that transaction: one statement moves
/// `pending_operation` from none to `capture` — two captures, or a capture and a cancel, never both — and the
/// capture request is queued under [`Operation::key`] (one per intent).
pub async fn capture(
    tx: &mut PgConnection,
    intent: Intent,
    amount: Option<i64>,
) -> Result<CaptureOutcome, RecordError> {
    let asked: Option<Intent> = intent_query!(
        r#"UPDATE payment_intents
              SET pending_operation = $2, amount_to_capture = $3, updated_at = now()
            WHERE id = $1 AND status = $4 AND pending_operation IS NULL AND provider_payment_id IS NOT NULL
              AND ($3::bigint IS NULL OR $3 <= amount)
        RETURNING "#,
        "",
        intent.id,
        Operation::Capture.as_str(),
        amount,
        IntentStatus::RequiresCapture.as_str(),
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(asked) = asked else {
        return Ok(CaptureOutcome::Refused(intent));
    };
    Operation::Capture
        .queue(tx, asked.id, &asked.provider)
        .await?;
    Ok(CaptureOutcome::Requested(asked))
}

/// Cancels, as `expired`, up to `limit` intents still `requires_confirmation` that were created `expiry_secs` ago
/// or earlier, oldest first, each with its fact, in the caller's transaction; returns how many. Several sweeps at
/// once (every edge runs one) never cancel one intent twice: each row is taken by one statement (`SKIP LOCKED`),
/// and a confirm that got there first has moved it out of `requires_confirmation`.
pub async fn expire_unconfirmed(
    tx: &mut PgConnection,
    expiry_secs: f64,
    limit: i64,
    charge_final: &dyn ChargeFinal,
) -> Result<usize, RecordError> {
    // `status = 'requires_confirmation'` stays literal in the inner SELECT: the predicate of the partial index
    // `payment_intents_unconfirmed_idx`, which a generic plan can only use when the value is in the text.
    let expired: Vec<Intent> = intent_query!(
        r#"UPDATE payment_intents
              SET status = $2, canceled_at = now(), cancellation_reason = $3, updated_at = now()
            WHERE id IN (SELECT id FROM payment_intents
                          WHERE status = 'requires_confirmation'
                            AND created_at <= now() - make_interval(secs => $1)
                          ORDER BY created_at LIMIT $4
                          FOR UPDATE SKIP LOCKED)
        RETURNING "#,
        "",
        expiry_secs,
        IntentStatus::Canceled.as_str(),
        CancellationReason::Expired.as_str(),
        limit,
    )
    .fetch_all(&mut *tx)
    .await?;
    let n = expired.len();
    for intent in expired {
        let moved = Moved {
            intent,
            previous: IntentStatus::RequiresConfirmation,
            intent_traceparent: None,
        };
        announce_if_completed(tx, &moved, charge_final).await?;
    }
    Ok(n)
}

/// Asks the gateway to cancel, as `expired`, up to `limit` intents still waiting on their customer
/// (`requires_action`: a 3-D Secure challenge, a Pix or boleto not paid) that were created `expiry_secs` ago or
/// earlier, oldest first, in the caller's transaction; returns how many. Each is taken by one statement (`SKIP
/// LOCKED`, `pending_operation` from none) and its cancel queued as the merchant's would be: `canceled` when the
/// gateway confirms, `succeeded` if the customer paid first.
pub async fn expire_awaiting_customer(
    tx: &mut PgConnection,
    expiry_secs: f64,
    limit: i64,
) -> Result<usize, RecordError> {
    // The inner SELECT's conditions stay literal: the predicate of the partial index
    // `payment_intents_awaiting_customer_idx`.
    let asked = sqlx::query!(
        r#"UPDATE payment_intents
              SET pending_operation = $2, cancellation_reason = $3, updated_at = now()
            WHERE id IN (SELECT id FROM payment_intents
                          WHERE status = 'requires_action' AND pending_operation IS NULL
                            AND provider_payment_id IS NOT NULL
                            AND created_at <= now() - make_interval(secs => $1)
                          ORDER BY created_at LIMIT $4
                          FOR UPDATE SKIP LOCKED)
        RETURNING id, provider"#,
        expiry_secs,
        Operation::Cancel.as_str(),
        CancellationReason::Expired.as_str(),
        limit,
    )
    .fetch_all(&mut *tx)
    .await?;
    for row in &asked {
        Operation::Cancel.queue(tx, row.id, &row.provider).await?;
    }
    Ok(asked.len())
}

/// Ends intent `intent_id`'s pending cancel or capture without a change of state, in the caller's transaction:
/// the request could not be sent or was refused for hookline's own reason (its `last_error` says why; the
/// payment is as it was at the gateway). A cancel's reason goes with it unless the intent is canceled.
pub async fn end_operation(conn: &mut PgConnection, intent_id: i64) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE payment_intents
            SET pending_operation = NULL,
                cancellation_reason = CASE WHEN status = $2 THEN cancellation_reason END,
                updated_at = now()
          WHERE id = $1 AND pending_operation IS NOT NULL",
        intent_id,
        IntentStatus::Canceled.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(())
}
