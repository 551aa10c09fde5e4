//! The payment row as every effect sees it: locked (created first when an early refund or dispute makes the
//! payment known), and read with an unknown stored status refused. Shared by the payment, refund and dispute
//! effects, which import this and never each other's row handling.

use sqlx::PgConnection;

use hookline_core::handler::HandleError;

use crate::model::PaymentStatus;

/// A database error while reading stored state: a status that is not a known value is permanent (the row says
/// the same on every retry) and says so; anything else is classified as usual.
pub(super) fn read_error(e: sqlx::Error) -> HandleError {
    match e {
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => HandleError::Permanent(
            anyhow::Error::new(e).context("a stored row cannot be read (unknown status?)"),
        ),
        other => other.into(),
    }
}

/// A locked payment row.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct PaymentRow {
    pub(super) id: i64,
    pub(super) status: PaymentStatus,
    pub(super) amount: Option<i64>,
    pub(super) currency: Option<String>,
    pub(super) amount_refunded: i64,
}

/// Locks the payment (`SELECT … FOR UPDATE`), creating it first if unknown (an early refund or dispute makes
/// its payment known).
pub(super) async fn lock_payment(
    tx: &mut PgConnection,
    provider: &str,
    payment_ref: &str,
) -> Result<PaymentRow, HandleError> {
    const LOCK: &str = "SELECT id, status, amount, currency, amount_refunded FROM payments
                        WHERE provider = $1 AND provider_payment_id = $2 FOR UPDATE";
    if let Some(row) = sqlx::query_as::<_, PaymentRow>(LOCK)
        .bind(provider)
        .bind(payment_ref)
        .fetch_optional(&mut *tx)
        .await
        .map_err(read_error)?
    {
        return Ok(row);
    }
    // Unknown: create it. The new row is ours (locked) until we commit; a concurrent creator blocks on the key
    // and, once we commit, takes the conflict path below.
    let created = sqlx::query_as::<_, PaymentRow>(
        "INSERT INTO payments (provider, provider_payment_id, status) VALUES ($1, $2, 'created')
         ON CONFLICT ON CONSTRAINT payments_provider_payment_id_key DO NOTHING
         RETURNING id, status, amount, currency, amount_refunded",
    )
    .bind(provider)
    .bind(payment_ref)
    .fetch_optional(&mut *tx)
    .await
    .map_err(read_error)?;
    match created {
        Some(row) => Ok(row),
        None => Ok(sqlx::query_as::<_, PaymentRow>(LOCK)
            .bind(provider)
            .bind(payment_ref)
            .fetch_one(&mut *tx)
            .await
            .map_err(read_error)?),
    }
}
