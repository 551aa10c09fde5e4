//! Applying payment facts inside the worker's transaction: the payment state machine.
//!
//! Owns the payment-side tables (`payments`, `payment_transitions`, `refunds`, `disputes`,
//! `subscription_charges`, `pending_fetches`) and decides when money moves; what a movement writes to the ledger
//! is [`super::ledger`]'s business, reached through `ledger::post`.
//!
//! Every transition row-locks its payment (`SELECT … FOR UPDATE`), so concurrent events for one payment apply
//! one after the other. Statuses only move up their rank, postings are unique by constraint, and refunds or
//! disputes that arrive before their payment succeeded are parked and applied by the transaction that makes it
//! succeed — so the final state and ledger do not depend on arrival order.
//!
//! Each change that the merchant's systems care about also writes its domain event here, in the same
//! transaction ([`super::facts`]), and moves the payment's `version` up.

use std::collections::HashMap;

use hookline_core::ProviderConfig;
use hookline_signature::Scheme;
use sqlx::PgConnection;

use super::facts;
use super::fetch::ApiClient;
use super::ledger::{self, account, Posting, PostingKind};
use super::model::{DisputeStatus, Money, PaymentFact, PaymentStatus};
use super::normalize::{normalize, payment_resource};
use crate::handler::{EventRef, HandleError, Handler, Outcome, OutcomeKind, Prepared, StoredEvent};
use hookline_core::domain_events::EventType;

/// Per-provider settings the payments effect needs.
#[derive(Debug, Clone)]
struct ProviderRule {
    scheme: Scheme,
    fee_bps: i64,
    fee_fixed: i64,
    /// The provider's API, when `api_base` is configured (Mercado Pago payments are read from it).
    api: Option<ApiClient>,
}

/// The payments effect.
#[derive(Debug, Clone)]
pub struct PaymentsHandler {
    providers: HashMap<String, ProviderRule>,
}

/// Consumer name of the payments effect (processed markers, dead letters); named once, in
/// `hookline_core::consumers`.
pub const CONSUMER: &str = hookline_core::consumers::PAYMENTS;

impl PaymentsHandler {
    /// Builds the handler from the configured providers (their scheme selects the normaliser, their fee rate
    /// the ledger split).
    pub fn new<'a>(providers: impl IntoIterator<Item = &'a ProviderConfig>) -> PaymentsHandler {
        PaymentsHandler {
            providers: providers
                .into_iter()
                .map(|p| {
                    (
                        p.name.clone(),
                        ProviderRule {
                            scheme: p.scheme,
                            fee_bps: p.fee_bps,
                            fee_fixed: p.fee_fixed,
                            api: p
                                .api_base
                                .clone()
                                .map(|base| ApiClient::new(&p.name, base, p.api_token.clone())),
                        },
                    )
                })
                .collect(),
        }
    }
}

impl Handler for PaymentsHandler {
    fn consumer(&self) -> &'static str {
        CONSUMER
    }

    /// Mercado Pago notifications only name a payment (by the signed `data.id`, part of the dedupe key): with
    /// `api_base` configured, the payment is read from the API here, before the transaction. Everything else
    /// needs nothing.
    async fn prepare(&self, event: EventRef<'_>) -> Result<Option<Prepared>, HandleError> {
        let Some(rule) = self.providers.get(event.provider) else {
            return Ok(None); // `handle` says so, with the reason
        };
        let (Scheme::MercadoPago, Some(api)) = (rule.scheme, &rule.api) else {
            return Ok(None);
        };
        if !is_payment_notification(event.event_type) {
            return Ok(None);
        }
        let Some(payment_id) = mercadopago_signed_id(event.provider_event_id) else {
            return Ok(None); // a key from before signed keys: recorded as needs_fetch, as it was
        };
        let body = api.mercadopago_payment(payment_id).await?;
        Ok(Some(Prepared {
            key: event.provider_event_id.to_owned(),
            body,
        }))
    }

    async fn handle(
        &self,
        tx: &mut PgConnection,
        event: &StoredEvent,
    ) -> Result<Outcome, HandleError> {
        let rule = self.providers.get(&event.provider).ok_or_else(|| {
            HandleError::permanent(format!(
                "provider '{}' is not configured in this worker",
                event.provider
            ))
        })?;
        let facts = match (
            &event.prepared,
            mercadopago_signed_id(&event.provider_event_id),
        ) {
            // The effect comes from the resource read by its signed id, never from the unsigned notification.
            (Some(prepared), Some(payment_id)) if rule.scheme == Scheme::MercadoPago => {
                payment_resource(&prepared.body, payment_id).map_err(|e| {
                    HandleError::Permanent(
                        anyhow::Error::new(e).context("invalid payment resource from the API"),
                    )
                })?
            }
            _ => normalize(rule.scheme, event.event_type.as_deref(), &event.body).map_err(|e| {
                HandleError::Permanent(anyhow::Error::new(e).context("invalid payload"))
            })?,
        };
        let mut kinds = Vec::with_capacity(facts.len());
        let mut details = Vec::new();
        for fact in facts {
            let (kind, detail) = apply_fact(tx, &event.provider, rule, event.id, fact).await?;
            kinds.push(kind);
            details.extend(detail);
        }
        // The event's overall outcome: anything parked matters most to an operator, then fetches, then work.
        let kind = [
            OutcomeKind::Parked,
            OutcomeKind::NeedsFetch,
            OutcomeKind::Applied,
        ]
        .into_iter()
        .find(|k| kinds.contains(k))
        .unwrap_or(OutcomeKind::Ignored);
        Ok(Outcome {
            kind,
            detail: (!details.is_empty()).then(|| details.join("; ")),
        })
    }
}

/// The payment id a Mercado Pago dedupe key names (`mp:{data.id}:…`, built by the edge from the signed
/// manifest; see `hookline_signature::Verified::dedupe_key`).
fn mercadopago_signed_id(key: &str) -> Option<&str> {
    key.strip_prefix("mp:")?
        .split(':')
        .next()
        .filter(|id| !id.is_empty())
}

/// Whether a Mercado Pago notification is about a payment (its `type`, else `action`: `payment`,
/// `payment.created`, `payment.updated`). Other resources (merchant orders, …) stay recorded as needs_fetch.
fn is_payment_notification(event_type: Option<&str>) -> bool {
    event_type.is_some_and(|t| t == "payment" || t.starts_with("payment."))
}

/// What the ledger side knows of a payment: its status and how much was refunded (reconciliation compares
/// it with the provider's view). `None` when the payment is unknown.
pub async fn payment_state<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    provider: &str,
    payment_ref: &str,
) -> Result<Option<(PaymentStatus, i64)>, sqlx::Error> {
    let row: Option<(String, i64)> = sqlx::query_as(
        "SELECT status, amount_refunded FROM payments WHERE provider = $1 AND provider_payment_id = $2",
    )
    .bind(provider)
    .bind(payment_ref)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(status, refunded)| {
        (
            PaymentStatus::parse(&status).unwrap_or(PaymentStatus::Created),
            refunded,
        )
    }))
}

/// A locked payment row.
#[derive(Debug, sqlx::FromRow)]
struct PaymentRow {
    id: i64,
    status: String,
    amount: Option<i64>,
    currency: Option<String>,
    amount_refunded: i64,
}

impl PaymentRow {
    fn status(&self) -> PaymentStatus {
        PaymentStatus::parse(&self.status).unwrap_or(PaymentStatus::Created)
    }
}

/// Locks the payment (`SELECT … FOR UPDATE`), creating it first if unknown (an early refund makes its payment
/// known). The boolean is true when this call created it — then nothing can be parked on it yet.
async fn lock_payment(
    tx: &mut PgConnection,
    provider: &str,
    payment_ref: &str,
) -> Result<(PaymentRow, bool), HandleError> {
    const LOCK: &str = "SELECT id, status, amount, currency, amount_refunded FROM payments
                        WHERE provider = $1 AND provider_payment_id = $2 FOR UPDATE";
    if let Some(row) = sqlx::query_as::<_, PaymentRow>(LOCK)
        .bind(provider)
        .bind(payment_ref)
        .fetch_optional(&mut *tx)
        .await?
    {
        return Ok((row, false));
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
    .await?;
    match created {
        Some(row) => Ok((row, true)),
        None => Ok((
            sqlx::query_as::<_, PaymentRow>(LOCK)
                .bind(provider)
                .bind(payment_ref)
                .fetch_one(&mut *tx)
                .await?,
            false,
        )),
    }
}

type Applied = (OutcomeKind, Option<String>);

async fn apply_fact(
    tx: &mut PgConnection,
    provider: &str,
    rule: &ProviderRule,
    event_id: i64,
    fact: PaymentFact,
) -> Result<Applied, HandleError> {
    match fact {
        PaymentFact::Payment {
            payment_ref,
            status,
            amount,
        } => apply_payment(tx, provider, rule, event_id, &payment_ref, status, amount).await,
        PaymentFact::Refund {
            refund_ref,
            payment_ref,
            amount,
        } => {
            let (payment, _) = lock_payment(tx, provider, &payment_ref).await?;
            let inserted: Option<i64> = sqlx::query_scalar(
                "INSERT INTO refunds (provider, provider_refund_id, payment_id, amount, currency, status, event_id)
                 VALUES ($1, $2, $3, $4, $5, 'parked', $6)
                 ON CONFLICT ON CONSTRAINT refunds_provider_refund_id_key DO NOTHING
                 RETURNING id",
            )
            .bind(provider)
            .bind(&refund_ref)
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
            if payment.status() == PaymentStatus::Succeeded {
                let detail =
                    apply_refund(tx, provider, &payment_ref, payment.id, refund_id).await?;
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
        PaymentFact::Dispute {
            dispute_ref,
            payment_ref,
            amount,
            status,
        } => {
            let (payment, _) = lock_payment(tx, provider, &payment_ref).await?;
            let opened = sqlx::query(
                "INSERT INTO disputes (provider, provider_dispute_id, payment_id, amount, currency, status, event_id)
                 VALUES ($1, $2, $3, $4, $5, 'open', $6)
                 ON CONFLICT ON CONSTRAINT disputes_provider_dispute_id_key DO NOTHING",
            )
            .bind(provider)
            .bind(&dispute_ref)
            .bind(payment.id)
            .bind(amount.amount)
            .bind(&amount.currency)
            .bind(event_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                > 0;
            let (dispute_id, current, posted, disputed, currency): (
                i64,
                String,
                bool,
                i64,
                String,
            ) = sqlx::query_as(
                "SELECT id, status, posted, amount, currency FROM disputes
                 WHERE provider = $1 AND provider_dispute_id = $2 FOR UPDATE",
            )
            .bind(provider)
            .bind(&dispute_ref)
            .fetch_one(&mut *tx)
            .await?;
            let current = match current.as_str() {
                "won" => DisputeStatus::Won,
                "lost" => DisputeStatus::Lost,
                _ => DisputeStatus::Open,
            };
            let new = current.max(status);
            if new != current {
                sqlx::query("UPDATE disputes SET status = $2, updated_at = now() WHERE id = $1")
                    .bind(dispute_id)
                    .bind(new.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            // The facts: opened when the dispute became known, then its final word (each once per dispute).
            let mut announce = Vec::new();
            if opened {
                announce.push((EventType::DisputeOpened, "open"));
            }
            match new {
                _ if new == current => {}
                DisputeStatus::Won => announce.push((EventType::DisputeWon, "won")),
                DisputeStatus::Lost => announce.push((EventType::DisputeLost, "lost")),
                DisputeStatus::Open => {}
            }
            if !announce.is_empty() {
                let payment_version = bump_version(tx, payment.id).await?;
                for (ty, status) in announce {
                    facts::dispute(
                        tx,
                        ty,
                        &facts::DisputeFact {
                            dispute_id,
                            provider,
                            provider_dispute_id: &dispute_ref,
                            payment_id: payment.id,
                            provider_payment_id: &payment_ref,
                            status,
                            amount: disputed,
                            currency: &currency,
                            payment_version,
                            webhook_event_id: event_id,
                        },
                    )
                    .await?;
                }
            }
            if new == DisputeStatus::Lost && !posted {
                if payment.status() == PaymentStatus::Succeeded {
                    post_dispute_loss(tx, provider, payment.id, dispute_id).await?;
                } else {
                    return Ok((
                        OutcomeKind::Parked,
                        Some(format!(
                            "lost dispute {dispute_ref} parked until payment {payment_ref} succeeds"
                        )),
                    ));
                }
            }
            Ok((OutcomeKind::Applied, None))
        }
        PaymentFact::InvoicePaid {
            invoice_ref,
            subscription_id,
            billing_cycle,
            amount,
        } => {
            let inserted = sqlx::query(
                "INSERT INTO subscription_charges
                     (provider, subscription_id, billing_cycle, invoice_id, amount, currency, event_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT ON CONSTRAINT subscription_charges_cycle_key DO NOTHING",
            )
            .bind(provider)
            .bind(&subscription_id)
            .bind(&billing_cycle)
            .bind(&invoice_ref)
            .bind(amount.amount)
            .bind(&amount.currency)
            .bind(event_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted > 0 {
                facts::subscription_charged(
                    tx,
                    &facts::SubscriptionFact {
                        provider,
                        subscription_id: &subscription_id,
                        billing_cycle: &billing_cycle,
                        invoice_id: &invoice_ref,
                        amount: amount.amount,
                        currency: &amount.currency,
                        webhook_event_id: event_id,
                    },
                )
                .await?;
            }
            let detail = (inserted == 0).then(|| {
                format!("subscription {subscription_id} cycle {billing_cycle} already charged")
            });
            Ok((OutcomeKind::Applied, detail))
        }
        PaymentFact::NeedsFetch {
            resource,
            resource_id,
        } => {
            sqlx::query(
                "INSERT INTO pending_fetches (provider, resource, resource_id, event_id)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT ON CONSTRAINT pending_fetches_resource_key DO NOTHING",
            )
            .bind(provider)
            .bind(&resource)
            .bind(&resource_id)
            .bind(event_id)
            .execute(&mut *tx)
            .await?;
            Ok((
                OutcomeKind::NeedsFetch,
                Some(format!("{resource} {resource_id} must be fetched")),
            ))
        }
        PaymentFact::Ignored { reason } => Ok((OutcomeKind::Ignored, Some(reason))),
    }
}

async fn apply_payment(
    tx: &mut PgConnection,
    provider: &str,
    rule: &ProviderRule,
    event_id: i64,
    payment_ref: &str,
    status: PaymentStatus,
    amount: Option<Money>,
) -> Result<Applied, HandleError> {
    let (payment, created) = lock_payment(tx, provider, payment_ref).await?;
    let current = payment.status();
    if let (Some(m), Some(cur)) = (&amount, &payment.currency) {
        if &m.currency != cur {
            return Err(HandleError::permanent(format!(
                "payment {payment_ref}: currency {} differs from the recorded {cur}",
                m.currency
            )));
        }
    }
    if status <= current {
        // A late or repeated event: the payment is already at or past this status. Keep the first known amount.
        if payment.amount.is_none() && current != PaymentStatus::Succeeded {
            if let Some(m) = &amount {
                set_amount(tx, payment.id, m).await?;
            }
        }
        return Ok((
            OutcomeKind::Applied,
            (status < current).then(|| {
                format!(
                    "payment {payment_ref} already {}; {} changes nothing",
                    current.as_str(),
                    status.as_str()
                )
            }),
        ));
    }
    // Moving forward. Success fixes the captured amount; other statuses only fill an unknown amount.
    let new_amount = match (status, &amount, payment.amount) {
        (PaymentStatus::Succeeded, Some(m), _) => Some(m.clone()),
        (_, Some(m), None) => Some(m.clone()),
        _ => None,
    };
    // One statement: the transition, its audit row and the new version.
    let (payment_version, amount_now, currency_now): (i64, Option<i64>, Option<String>) =
        sqlx::query_as(
            "WITH moved AS (
             UPDATE payments SET status = $2, amount = coalesce($3, amount),
                                 currency = coalesce($4, currency), version = version + 1,
                                 updated_at = now()
             WHERE id = $1 RETURNING id, version, amount, currency),
         audit AS (
             INSERT INTO payment_transitions (payment_id, event_id, from_status, to_status)
             SELECT id, $5, $6, $2 FROM moved)
         SELECT version, amount, currency FROM moved",
        )
        .bind(payment.id)
        .bind(status.as_str())
        .bind(new_amount.as_ref().map(|m| m.amount))
        .bind(new_amount.as_ref().map(|m| m.currency.as_str()))
        .bind(event_id)
        .bind(current.as_str())
        .fetch_one(&mut *tx)
        .await?;
    let announced = match status {
        PaymentStatus::Succeeded => Some(EventType::PaymentSucceeded),
        PaymentStatus::Failed => Some(EventType::PaymentFailed),
        PaymentStatus::Canceled => Some(EventType::PaymentCanceled),
        _ => None,
    };
    if let Some(ty) = announced {
        facts::payment(
            tx,
            ty,
            &facts::PaymentFact {
                payment_id: payment.id,
                provider,
                provider_payment_id: payment_ref,
                status: status.as_str(),
                amount: amount_now,
                currency: currency_now.as_deref(),
                amount_refunded: payment.amount_refunded,
                payment_version,
                webhook_event_id: event_id,
            },
        )
        .await?;
    }
    // A payment intent hookline dispatched (linked by the gateway's payment id) follows the final status.
    let intent_status = match status {
        PaymentStatus::Succeeded => Some("succeeded"),
        PaymentStatus::Failed | PaymentStatus::Canceled => Some("failed"),
        _ => None,
    };
    if let Some(intent_status) = intent_status {
        hookline_core::intents::complete_from_payment(tx, provider, payment_ref, intent_status)
            .await?;
    }
    if status != PaymentStatus::Succeeded {
        return Ok((OutcomeKind::Applied, None));
    }
    let captured = match (&new_amount, payment.amount, &payment.currency) {
        (Some(m), _, _) => m.clone(),
        (None, Some(a), Some(c)) => Money {
            amount: a,
            currency: c.clone(),
        },
        _ => {
            return Err(HandleError::permanent(format!(
                "payment {payment_ref} succeeded but no amount is known"
            )))
        }
    };
    let fee = ledger::fee(captured.amount, rule.fee_bps, rule.fee_fixed);
    ledger::post(
        tx,
        &Posting {
            provider,
            kind: PostingKind::Payment,
            reference: payment_ref,
            payment_id: payment.id,
            event_id,
            currency: &captured.currency,
            legs: &[
                (account::RECEIVABLE, captured.amount - fee),
                (account::FEES, fee),
                (account::REVENUE, -captured.amount),
            ],
        },
    )
    .await?;
    if created {
        // Created by this very event: nothing can have been parked on it.
        return Ok((OutcomeKind::Applied, None));
    }
    // Apply what was waiting for this success, in a deterministic order: refunds, then lost disputes.
    let waiting: Vec<(String, i64)> = sqlx::query_as(
        "SELECT kind, id FROM (
             SELECT 'refund' AS kind, id, provider_refund_id AS reference FROM refunds
             WHERE payment_id = $1 AND status = 'parked'
             UNION ALL
             SELECT 'dispute', id, provider_dispute_id FROM disputes
             WHERE payment_id = $1 AND status = 'lost' AND NOT posted) w
         ORDER BY kind DESC, reference",
    )
    .bind(payment.id)
    .fetch_all(&mut *tx)
    .await?;
    let mut details = Vec::new();
    for (kind, id) in waiting {
        if kind == "refund" {
            details.extend(apply_refund(tx, provider, payment_ref, payment.id, id).await?);
        } else {
            post_dispute_loss(tx, provider, payment.id, id).await?;
        }
    }
    Ok((
        OutcomeKind::Applied,
        (!details.is_empty()).then(|| details.join("; ")),
    ))
}

async fn set_amount(tx: &mut PgConnection, payment_id: i64, m: &Money) -> Result<(), HandleError> {
    sqlx::query("UPDATE payments SET amount = $2, currency = $3, updated_at = now() WHERE id = $1")
        .bind(payment_id)
        .bind(m.amount)
        .bind(&m.currency)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Applies a recorded refund to a succeeded payment that this transaction has locked: its own ledger
/// transaction keyed by the refund id, never more than was captured. Returns a detail when it is rejected.
async fn apply_refund(
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
    .await?;
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
    ledger::post(
        tx,
        &Posting {
            provider,
            kind: PostingKind::Refund,
            reference: &refund_ref,
            payment_id: payment.id,
            event_id,
            currency: &currency,
            legs: &[(account::REVENUE, amount), (account::RECEIVABLE, -amount)],
        },
    )
    .await?;
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

/// Moves a payment's version up for a change that does not touch its own columns (a dispute) and returns it.
async fn bump_version(tx: &mut PgConnection, payment_id: i64) -> Result<i64, HandleError> {
    Ok(sqlx::query_scalar(
        "UPDATE payments SET version = version + 1, updated_at = now() WHERE id = $1 RETURNING version",
    )
    .bind(payment_id)
    .fetch_one(&mut *tx)
    .await?)
}

async fn post_dispute_loss(
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
    ledger::post(
        tx,
        &Posting {
            provider,
            kind: PostingKind::Dispute,
            reference: &dispute_ref,
            payment_id,
            event_id,
            currency: &currency,
            legs: &[
                (account::DISPUTE_LOSSES, amount),
                (account::RECEIVABLE, -amount),
            ],
        },
    )
    .await?;
    sqlx::query("UPDATE disputes SET posted = true, updated_at = now() WHERE id = $1")
        .bind(dispute_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}
