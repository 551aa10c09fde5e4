//! Dispute facts: `disputes` rows move forward only (open → won or lost); a lost dispute is posted to the
//! ledger once its payment has succeeded (parked until then), and each change writes its `dispute.*` fact.

use sqlx::PgConnection;

use hookline_core::handler::{HandleError, OutcomeKind};

use super::row::{lock_payment, read_error};
use super::Applied;
use crate::facts;
use crate::ledger::{self, Posting};
use crate::model::{DisputeStatus, Money, PaymentStatus};

/// The status hookline holds for dispute `dispute_ref` of `provider` (`None`: unknown to hookline).
/// Reconciliation compares it with what the provider's API says.
pub async fn dispute_status<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    provider: &str,
    dispute_ref: &str,
) -> Result<Option<DisputeStatus>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT status FROM disputes WHERE provider = $1 AND provider_dispute_id = $2",
    )
    .bind(provider)
    .bind(dispute_ref)
    .fetch_optional(conn)
    .await
}

/// One dispute fact as the provider reported it.
pub(super) struct DisputeItem<'a> {
    pub(super) event_id: i64,
    pub(super) provider: &'a str,
    pub(super) dispute_ref: &'a str,
    pub(super) payment_ref: &'a str,
    pub(super) amount: &'a Money,
    pub(super) status: DisputeStatus,
}

/// Records a dispute (opened when first seen), moves its status forward, announces each change and posts a
/// loss once the payment has succeeded.
pub(super) async fn apply_dispute_fact(
    tx: &mut PgConnection,
    item: &DisputeItem<'_>,
) -> Result<Applied, HandleError> {
    let (provider, dispute_ref, payment_ref) = (item.provider, item.dispute_ref, item.payment_ref);
    let payment = lock_payment(tx, provider, payment_ref).await?;
    let opened = sqlx::query(
        "INSERT INTO disputes (provider, provider_dispute_id, payment_id, amount, currency, status, event_id)
         VALUES ($1, $2, $3, $4, $5, 'open', $6)
         ON CONFLICT ON CONSTRAINT disputes_provider_dispute_id_key DO NOTHING",
    )
    .bind(provider)
    .bind(dispute_ref)
    .bind(payment.id)
    .bind(item.amount.amount)
    .bind(&item.amount.currency)
    .bind(item.event_id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        > 0;
    let (dispute_id, current, posted, disputed, currency): (i64, DisputeStatus, bool, i64, String) =
        sqlx::query_as(
            "SELECT id, status, posted, amount, currency FROM disputes
         WHERE provider = $1 AND provider_dispute_id = $2 FOR UPDATE",
        )
        .bind(provider)
        .bind(dispute_ref)
        .fetch_one(&mut *tx)
        .await
        .map_err(read_error)?;
    let new = current.max(item.status);
    if new != current {
        sqlx::query("UPDATE disputes SET status = $2, updated_at = now() WHERE id = $1")
            .bind(dispute_id)
            .bind(new.as_str())
            .execute(&mut *tx)
            .await?;
    }
    // The facts: opened when the dispute became known, then its final word (each once per dispute).
    let mut announce: Vec<DisputeStatus> = Vec::new();
    if opened {
        announce.push(DisputeStatus::Open);
    }
    if new != current && new != DisputeStatus::Open {
        announce.push(new);
    }
    if !announce.is_empty() {
        let payment_version = bump_version(tx, payment.id).await?;
        for status in announce {
            facts::dispute(
                tx,
                status.fact(),
                &facts::DisputeFact {
                    dispute_id,
                    provider,
                    provider_dispute_id: dispute_ref,
                    payment_id: payment.id,
                    provider_payment_id: payment_ref,
                    status: status.as_str(),
                    amount: disputed,
                    currency: &currency,
                    payment_version,
                    webhook_event_id: item.event_id,
                },
            )
            .await?;
        }
    }
    if new == DisputeStatus::Lost && !posted {
        if payment.status != PaymentStatus::Succeeded {
            return Ok((
                OutcomeKind::Parked,
                Some(format!(
                    "lost dispute {dispute_ref} parked until payment {payment_ref} succeeds"
                )),
            ));
        }
        post_dispute_loss(tx, provider, payment.id, dispute_id).await?;
    }
    Ok((OutcomeKind::Applied, None))
}

/// Moves a payment's version up for a change that does not touch its own columns (a dispute) and returns it.
async fn bump_version(tx: &mut PgConnection, payment_id: i64) -> Result<i64, HandleError> {
    Ok(sqlx::query_scalar(
        "UPDATE payments SET version = version + 1, updated_at = now() WHERE id = $1 RETURNING version",
    )
    .bind(payment_id)
    .fetch_one(&mut *tx)
    .await?)
}

/// Posts a lost dispute to the ledger (once: the posting key and `posted` say so).
pub(super) async fn post_dispute_loss(
    tx: &mut PgConnection,
    provider: &str,
    payment_id: i64,
    dispute_id: i64,
) -> Result<(), HandleError> {
    let (dispute_ref, amount, currency, event_id): (String, i64, String, i64) = sqlx::query_as(
        "SELECT provider_dispute_id, amount, currency, event_id FROM disputes WHERE id = $1",
    )
    .bind(dispute_id)
    .fetch_one(&mut *tx)
    .await?;
    let posting = Posting::dispute_loss(
        provider,
        &dispute_ref,
        payment_id,
        event_id,
        currency,
        amount,
    );
    ledger::post(tx, &posting).await?;
    sqlx::query("UPDATE disputes SET posted = true, updated_at = now() WHERE id = $1")
        .bind(dispute_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// A chargeback the provider no longer shows (Pagar.me: the charge `paid` again): the dispute, when hookline
/// holds it open, is won; a dispute it does not know, or one already decided, is left as it is.
pub(super) async fn apply_chargeback_reversed(
    tx: &mut PgConnection,
    provider: &str,
    event_id: i64,
    dispute_ref: &str,
    payment_ref: &str,
) -> Result<Applied, HandleError> {
    let known: Option<(DisputeStatus, i64, String)> = sqlx::query_as(
        "SELECT status, amount, currency FROM disputes
          WHERE provider = $1 AND provider_dispute_id = $2",
    )
    .bind(provider)
    .bind(dispute_ref)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((DisputeStatus::Open, amount, currency)) = known else {
        return Ok((OutcomeKind::Ignored, None));
    };
    let amount = Money { amount, currency };
    let item = DisputeItem {
        event_id,
        provider,
        dispute_ref,
        payment_ref,
        amount: &amount,
        status: DisputeStatus::Won,
    };
    apply_dispute_fact(tx, &item).await
}
