//! Refund facts: `refunds` rows, parked until their payment succeeded, then applied once — never above what
//! was captured, never in another currency — with their ledger posting and `refund.applied` fact.

use sqlx::PgConnection;

use hookline_core::handler::{HandleError, OutcomeKind};

use super::row::{lock_payment, read_error, PaymentRow};
use super::Applied;
use crate::facts;
use crate::ledger::{self, Posting};
use crate::model::{Money, PaymentStatus};

/// Records a refund the provider reported and applies it when its payment has succeeded; otherwise it is
/// parked, and the transaction that makes the payment succeed applies it.
pub(super) async fn apply_refund_fact(
    tx: &mut PgConnection,
    provider: &str,
    event_id: i64,
    refund_ref: &str,
    payment_ref: &str,
    amount: &Money,
) -> Result<Applied, HandleError> {
    let payment = lock_payment(tx, provider, payment_ref).await?;
    let inserted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO refunds (provider, provider_refund_id, payment_id, amount, currency, status, event_id)
         VALUES ($1, $2, $3, $4, $5, 'parked', $6)
         ON CONFLICT ON CONSTRAINT refunds_provider_refund_id_key DO NOTHING
         RETURNING id",
    )
    .bind(provider)
    .bind(refund_ref)
    .bind(payment.id)
    .bind(amount.amount)
    .bind(&amount.currency)
    .bind(event_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(refund_id) = inserted else {
        // Another event already reported this refund (refund.created then charge.refunded, …).
        return Ok((
            OutcomeKind::Applied,
            Some(format!("refund {refund_ref} already recorded")),
        ));
    };
    if payment.status == PaymentStatus::Succeeded {
        let detail = apply_refund(tx, provider, payment_ref, payment.id, refund_id).await?;
        Ok((OutcomeKind::Applied, detail))
    } else {
        Ok((
            OutcomeKind::Parked,
            Some(format!(
                "refund {refund_ref} parked until payment {payment_ref} succeeds"
            )),
        ))
    }
}

/// Applies a recorded refund to a succeeded payment that this transaction has locked: its own ledger
/// transaction keyed by the refund id, never more than was captured. Returns a detail when it is rejected.
pub(super) async fn apply_refund(
    tx: &mut PgConnection,
    provider: &str,
    payment_ref: &str,
    payment_id: i64,
    refund_id: i64,
) -> Result<Option<String>, HandleError> {
    // Re-read under the lock: an earlier refund in this same transaction may have changed amount_refunded.
    let payment = sqlx::query_as::<_, PaymentRow>(
        "SELECT id, status, amount, currency, amount_refunded FROM payments WHERE id = $1",
    )
    .bind(payment_id)
    .fetch_one(&mut *tx)
    .await
    .map_err(read_error)?;
    let (refund_ref, amount, currency, event_id): (String, i64, String, i64) = sqlx::query_as(
        "SELECT provider_refund_id, amount, currency, event_id FROM refunds WHERE id = $1 FOR UPDATE",
    )
    .bind(refund_id)
    .fetch_one(&mut *tx)
    .await?;
    let captured = payment.amount.unwrap_or(0);
    let rejection = if payment.currency.as_deref() != Some(currency.as_str()) {
        Some(format!(
            "refund {refund_ref} rejected: currency {currency} differs from the payment's {}",
            payment.currency.as_deref().unwrap_or("(unknown)")
        ))
    } else if payment.amount_refunded + amount > captured {
        Some(format!(
            "refund {refund_ref} rejected: {amount} would exceed the captured {captured} (already refunded {})",
            payment.amount_refunded
        ))
    } else {
        None
    };
    if let Some(reason) = rejection {
        sqlx::query("UPDATE refunds SET status = 'rejected', reason = $2 WHERE id = $1")
            .bind(refund_id)
            .bind(&reason)
            .execute(&mut *tx)
            .await?;
        tracing::warn!(provider, refund = %refund_ref, reason = %reason, "refund rejected");
        return Ok(Some(reason));
    }
    let posting = Posting::refund(
        provider,
        &refund_ref,
        payment.id,
        event_id,
        currency.clone(),
        amount,
    );
    ledger::post(tx, &posting).await?;
    sqlx::query("UPDATE refunds SET status = 'applied' WHERE id = $1")
        .bind(refund_id)
        .execute(&mut *tx)
        .await?;
    let (payment_amount_refunded, payment_version): (i64, i64) = sqlx::query_as(
        "UPDATE payments SET amount_refunded = amount_refunded + $2, version = version + 1,
                             updated_at = now()
          WHERE id = $1 RETURNING amount_refunded, version",
    )
    .bind(payment.id)
    .bind(amount)
    .fetch_one(&mut *tx)
    .await?;
    facts::refund(
        tx,
        &facts::RefundFact {
            refund_id,
            provider,
            provider_refund_id: &refund_ref,
            payment_id: payment.id,
            provider_payment_id: payment_ref,
            amount,
            currency: &currency,
            payment_amount_refunded,
            payment_version,
            webhook_event_id: event_id,
        },
    )
    .await?;
    Ok(None)
}

/// A running refund total from a provider that gives refunds no ids (Pagar.me's `canceled_amount`): what of
/// `total` the payment's refunds do not hold yet (rejected ones aside) is one refund, keyed by the total
/// (`{payment}-refunded-{total}`), applied like any other. Under the payment's row lock, so two events reporting
/// the same total record it once, and totals read in any order end at the latest total.
pub(super) async fn apply_refund_total(
    tx: &mut PgConnection,
    provider: &str,
    event_id: i64,
    payment_ref: &str,
    total: &Money,
) -> Result<Applied, HandleError> {
    let payment = lock_payment(tx, provider, payment_ref).await?;
    let held: i64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(amount), 0)::bigint FROM refunds
          WHERE payment_id = $1 AND status <> 'rejected'",
    )
    .bind(payment.id)
    .fetch_one(&mut *tx)
    .await?;
    if total.amount <= held {
        return Ok((
            OutcomeKind::Applied,
            Some(format!(
                "refunds of {payment_ref} up to {} already recorded",
                total.amount
            )),
        ));
    }
    let refund_ref = format!("{payment_ref}-refunded-{}", total.amount);
    let amount = Money {
        amount: total.amount - held,
        currency: total.currency.clone(),
    };
    apply_refund_fact(tx, provider, event_id, &refund_ref, payment_ref, &amount).await
}
