//! Billing effects of provider events: a paid subscription invoice charges its cycle once
//! (`subscription_charges`, unique by `(provider, subscription_id, billing_cycle)`) and writes
//! `subscription.charged`.

use sqlx::PgConnection;

use hookline_core::handler::{HandleError, OutcomeKind};

use super::Applied;
use crate::facts;
use crate::model::Money;

/// A paid invoice as the provider reported it.
pub(super) struct InvoiceItem<'a> {
    pub(super) event_id: i64,
    pub(super) provider: &'a str,
    pub(super) invoice_ref: &'a str,
    pub(super) subscription_id: &'a str,
    pub(super) billing_cycle: &'a str,
    pub(super) amount: &'a Money,
}

/// Charges the invoice's cycle unless it was already charged (then only a detail says so).
pub(super) async fn apply_invoice_paid(
    tx: &mut PgConnection,
    item: &InvoiceItem<'_>,
) -> Result<Applied, HandleError> {
    let inserted = sqlx::query(
        "INSERT INTO subscription_charges
             (provider, subscription_id, billing_cycle, invoice_id, amount, currency, event_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT ON CONSTRAINT subscription_charges_cycle_key DO NOTHING",
    )
    .bind(item.provider)
    .bind(item.subscription_id)
    .bind(item.billing_cycle)
    .bind(item.invoice_ref)
    .bind(item.amount.amount)
    .bind(&item.amount.currency)
    .bind(item.event_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if inserted == 0 {
        return Ok((
            OutcomeKind::Applied,
            Some(format!(
                "subscription {} cycle {} already charged",
                item.subscription_id, item.billing_cycle
            )),
        ));
    }
    facts::subscription_charged(
        tx,
        &facts::SubscriptionFact {
            provider: item.provider,
            subscription_id: item.subscription_id,
            billing_cycle: item.billing_cycle,
            invoice_id: item.invoice_ref,
            amount: item.amount.amount,
            currency: &item.amount.currency,
            webhook_event_id: item.event_id,
        },
    )
    .await?;
    Ok((OutcomeKind::Applied, None))
}
