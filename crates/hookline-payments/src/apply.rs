//! Applying payment facts inside the worker's transaction: the payment state machine.
//!
//! Owns the payment-side tables (`payments`, `payment_transitions`, `refunds`, `disputes`,
//! `subscription_charges`, `pending_fetches`) and decides when money moves; what a movement writes to the ledger
//! is [`crate::ledger`]'s business, reached through `ledger::post`.
//!
//! Every transition row-locks its payment (`SELECT … FOR UPDATE`), so concurrent events for one payment apply
//! one after the other. Statuses only move up their rank, postings are unique by constraint, and refunds or
//! disputes that arrive before their payment succeeded are parked and applied by the transaction that makes it
//! succeed — so the final state and ledger do not depend on arrival order.
//!
//! Each change that the merchant's systems care about also writes its domain event here, in the same
//! transaction ([`crate::facts`]), and moves the payment's `version` up.

use std::collections::{HashMap, HashSet};

use hookline_core::ProviderConfig;
use hookline_signature::Scheme;
use sqlx::PgConnection;

use crate::facts;
use crate::fetch::ApiClient;
use crate::ledger::{self, account, Posting, PostingKind};
use crate::model::{DisputeStatus, Money, PaymentFact, PaymentStatus};
use crate::normalize::{normalize, payment_resource};
use hookline_core::domain_events::EventType;
use hookline_core::handler::{
    BatchError, EventRef, HandleError, Handler, Outcome, OutcomeKind, Prepared, StoredEvent,
};

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

    /// The set-based path: a batch whose every event is a payment status fact (or ignored) — the common case by
    /// far — is applied with a constant number of statements (see [`apply_payment_batch`]). Anything else
    /// (refunds, disputes, invoices, Mercado Pago fetches) declines, and the worker applies the batch one
    /// event at a time.
    async fn handle_many(
        &self,
        tx: &mut PgConnection,
        events: &[StoredEvent],
    ) -> Option<Result<Vec<Outcome>, BatchError>> {
        let mut items = Vec::with_capacity(events.len());
        let mut ignored: Vec<Vec<String>> = vec![Vec::new(); events.len()];
        for (index, event) in events.iter().enumerate() {
            let rule = self.providers.get(&event.provider)?;
            if event.prepared.is_some() || rule.scheme == Scheme::MercadoPago {
                return None;
            }
            let facts = match normalize(rule.scheme, event.event_type.as_deref(), &event.body) {
                Ok(f) => f,
                Err(e) => {
                    return Some(Err(BatchError {
                        index: Some(index),
                        error: HandleError::Permanent(
                            anyhow::Error::new(e).context("invalid payload"),
                        ),
                    }))
                }
            };
            for fact in facts {
                match fact {
                    PaymentFact::Payment {
                        payment_ref,
                        status,
                        amount,
                    } => items.push(BatchItem {
                        index,
                        event_id: event.id,
                        provider: &event.provider,
                        rule,
                        payment_ref,
                        status,
                        amount,
                    }),
                    PaymentFact::Ignored { reason } => ignored[index].push(reason),
                    _ => return None,
                }
            }
        }
        Some(apply_payment_batch(tx, events.len(), items, ignored).await)
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
        crate::intents::complete_from_payment(tx, provider, payment_ref, intent_status).await?;
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

/// One payment status fact of a batch.
struct BatchItem<'a> {
    /// Index of its event in the batch.
    index: usize,
    event_id: i64,
    provider: &'a str,
    rule: &'a ProviderRule,
    payment_ref: String,
    status: PaymentStatus,
    amount: Option<Money>,
}

/// A payment of a batch, locked, as the batch moves it in memory.
#[derive(Debug, sqlx::FromRow)]
struct BatchPayment {
    id: i64,
    provider: String,
    provider_payment_id: String,
    status: String,
    amount: Option<i64>,
    currency: Option<String>,
    amount_refunded: i64,
    version: i64,
    #[sqlx(skip)]
    created: bool,
    #[sqlx(skip)]
    dirty: bool,
}

/// Applies a batch of payment status facts with a constant number of statements, with exactly the result of
/// [`apply_payment`] called for each fact in order:
///
/// 1. unknown payments created (one `INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING`, keys sorted);
/// 2. every payment of the batch locked (one `SELECT … ORDER BY id FOR UPDATE`: concurrent batches lock in the
///    same order, so they cannot deadlock);
/// 3. the facts applied in memory, in event order (several events of one payment move it step by step);
/// 4. the changes written: payments (one `UPDATE … FROM unnest`), transitions (one `INSERT`), postings and
///    their entries (one statement), completed intents (one), domain events and their deliveries (one);
/// 5. what was parked on a payment that succeeded now (refunds, lost disputes; rare) applied as usual.
async fn apply_payment_batch(
    tx: &mut PgConnection,
    events: usize,
    items: Vec<BatchItem<'_>>,
    ignored: Vec<Vec<String>>,
) -> Result<Vec<Outcome>, BatchError> {
    let mut details: Vec<Vec<String>> = vec![Vec::new(); events];
    let mut applied = vec![false; events];
    if !items.is_empty() {
        let mut keys: Vec<(&str, &str)> = items
            .iter()
            .map(|i| (i.provider, i.payment_ref.as_str()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let (providers, refs): (Vec<&str>, Vec<&str>) = keys.into_iter().unzip();
        let created: HashSet<i64> = sqlx::query_scalar(
            "INSERT INTO payments (provider, provider_payment_id, status)
             SELECT p, r, 'created' FROM unnest($1::text[], $2::text[]) AS t(p, r) ORDER BY p, r
             ON CONFLICT ON CONSTRAINT payments_provider_payment_id_key DO NOTHING
             RETURNING id",
        )
        .bind(&providers)
        .bind(&refs)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        // One index lookup per key, locked in key order (the keys are sorted: concurrent batches lock in the same
        // order and cannot deadlock). The LATERAL form leaves the planner no hash join with a sequential scan of
        // `payments` to choose — a generic plan made while the table was small did exactly that, and kept it as
        // the table grew (37 ms per batch at 150 k payments; PROFILING.md).
        let locked: Vec<BatchPayment> = sqlx::query_as(
            "SELECT x.id, x.provider, x.provider_payment_id, x.status, x.amount, x.currency, x.amount_refunded,
                    x.version
               FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(p, r, ord)
               CROSS JOIN LATERAL (
                    SELECT * FROM payments WHERE provider = t.p AND provider_payment_id = t.r FOR UPDATE) x
              ORDER BY t.ord",
        )
        .bind(&providers)
        .bind(&refs)
        .fetch_all(&mut *tx)
        .await?;
        let mut payments: HashMap<(String, String), BatchPayment> = locked
            .into_iter()
            .map(|mut p| {
                p.created = created.contains(&p.id);
                ((p.provider.clone(), p.provider_payment_id.clone()), p)
            })
            .collect();

        let mut transitions: (Vec<i64>, Vec<i64>, Vec<&str>, Vec<&str>) = Default::default();
        let mut postings: Vec<(BatchPosting, usize)> = Vec::new();
        let mut completed: Vec<(&str, &str, &str)> = Vec::new();
        let mut facts_out: Vec<(EventType, String, serde_json::Value)> = Vec::new();
        let mut newly_succeeded: Vec<(i64, usize, String, String)> = Vec::new();
        for item in &items {
            applied[item.index] = true;
            let key = (item.provider.to_owned(), item.payment_ref.clone());
            let Some(p) = payments.get_mut(&key) else {
                return Err(BatchError {
                    index: None,
                    error: HandleError::Transient(anyhow::anyhow!(
                        "payment {} was not locked by its batch",
                        item.payment_ref
                    )),
                });
            };
            let blame = |message: String| BatchError {
                index: Some(item.index),
                error: HandleError::permanent(message),
            };
            let current = PaymentStatus::parse(&p.status).unwrap_or(PaymentStatus::Created);
            if let (Some(m), Some(cur)) = (&item.amount, &p.currency) {
                if &m.currency != cur {
                    return Err(blame(format!(
                        "payment {}: currency {} differs from the recorded {cur}",
                        item.payment_ref, m.currency
                    )));
                }
            }
            if item.status <= current {
                if p.amount.is_none() && current != PaymentStatus::Succeeded {
                    if let Some(m) = &item.amount {
                        p.amount = Some(m.amount);
                        p.currency = Some(m.currency.clone());
                        p.dirty = true;
                    }
                }
                if item.status < current {
                    details[item.index].push(format!(
                        "payment {} already {}; {} changes nothing",
                        item.payment_ref,
                        current.as_str(),
                        item.status.as_str()
                    ));
                }
                continue;
            }
            let new_amount = match (item.status, &item.amount, p.amount) {
                (PaymentStatus::Succeeded, Some(m), _) => Some(m.clone()),
                (_, Some(m), None) => Some(m.clone()),
                _ => None,
            };
            if let Some(m) = &new_amount {
                p.amount = Some(m.amount);
                p.currency = Some(m.currency.clone());
            }
            p.status = item.status.as_str().to_owned();
            p.version += 1;
            p.dirty = true;
            transitions.0.push(p.id);
            transitions.1.push(item.event_id);
            transitions.2.push(current.as_str());
            transitions.3.push(item.status.as_str());
            let announced = match item.status {
                PaymentStatus::Succeeded => Some((EventType::PaymentSucceeded, "succeeded")),
                PaymentStatus::Failed => Some((EventType::PaymentFailed, "failed")),
                PaymentStatus::Canceled => Some((EventType::PaymentCanceled, "failed")),
                _ => None,
            };
            if let Some((ty, intent_status)) = announced {
                completed.push((item.provider, &item.payment_ref, intent_status));
                let data = facts::PaymentFact {
                    payment_id: p.id,
                    provider: item.provider,
                    provider_payment_id: &item.payment_ref,
                    status: item.status.as_str(),
                    amount: p.amount,
                    currency: p.currency.as_deref(),
                    amount_refunded: p.amount_refunded,
                    payment_version: p.version,
                    webhook_event_id: item.event_id,
                };
                let data = serde_json::to_value(&data).map_err(|e| BatchError {
                    index: Some(item.index),
                    error: HandleError::Permanent(anyhow::Error::new(e)),
                })?;
                facts_out.push((ty, format!("{}/{}", item.provider, item.payment_ref), data));
            }
            if item.status != PaymentStatus::Succeeded {
                continue;
            }
            let (Some(amount), Some(currency)) = (p.amount, p.currency.clone()) else {
                return Err(blame(format!(
                    "payment {} succeeded but no amount is known",
                    item.payment_ref
                )));
            };
            let fee = ledger::fee(amount, item.rule.fee_bps, item.rule.fee_fixed);
            postings.push((
                BatchPosting {
                    provider: item.provider.to_owned(),
                    reference: item.payment_ref.clone(),
                    payment_id: p.id,
                    event_id: item.event_id,
                    currency,
                    legs: [
                        (account::RECEIVABLE, amount - fee),
                        (account::FEES, fee),
                        (account::REVENUE, -amount),
                    ],
                },
                item.index,
            ));
            if !p.created {
                newly_succeeded.push((
                    p.id,
                    item.index,
                    item.provider.to_owned(),
                    item.payment_ref.clone(),
                ));
            }
        }

        let dirty: Vec<&BatchPayment> = payments.values().filter(|p| p.dirty).collect();
        if !dirty.is_empty() {
            let ids: Vec<i64> = dirty.iter().map(|p| p.id).collect();
            let statuses: Vec<&str> = dirty.iter().map(|p| p.status.as_str()).collect();
            let amounts: Vec<Option<i64>> = dirty.iter().map(|p| p.amount).collect();
            let currencies: Vec<Option<&str>> =
                dirty.iter().map(|p| p.currency.as_deref()).collect();
            let versions: Vec<i64> = dirty.iter().map(|p| p.version).collect();
            sqlx::query(
                "UPDATE payments p
                    SET status = u.status, amount = u.amount, currency = u.currency, version = u.version,
                        updated_at = now()
                   FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::bigint[])
                        AS u(id, status, amount, currency, version)
                  WHERE p.id = ANY ($1) AND p.id = u.id",
            )
            .bind(&ids)
            .bind(&statuses)
            .bind(&amounts)
            .bind(&currencies)
            .bind(&versions)
            .execute(&mut *tx)
            .await?;
        }
        if !transitions.0.is_empty() {
            sqlx::query(
                "INSERT INTO payment_transitions (payment_id, event_id, from_status, to_status)
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[])",
            )
            .bind(&transitions.0)
            .bind(&transitions.1)
            .bind(&transitions.2)
            .bind(&transitions.3)
            .execute(&mut *tx)
            .await?;
        }
        let as_postings: Vec<Posting<'_>> = postings
            .iter()
            .map(|(p, _)| Posting {
                provider: &p.provider,
                kind: PostingKind::Payment,
                reference: &p.reference,
                payment_id: p.payment_id,
                event_id: p.event_id,
                currency: &p.currency,
                legs: &p.legs,
            })
            .collect();
        ledger::post_many(tx, &as_postings).await?;
        crate::intents::complete_from_payments(tx, &completed)
            .await
            .map_err(HandleError::from)?;
        hookline_core::domain_events::record_many(tx, &facts_out)
            .await
            .map_err(HandleError::from)?;
        if !newly_succeeded.is_empty() {
            apply_waiting_many(tx, &newly_succeeded, &mut details).await?;
        }
    }
    Ok((0..events)
        .map(|i| {
            let mut d = std::mem::take(&mut details[i]);
            let kind = if applied[i] {
                OutcomeKind::Applied
            } else {
                d.extend(ignored[i].iter().cloned());
                OutcomeKind::Ignored
            };
            Outcome {
                kind,
                detail: (!d.is_empty()).then(|| d.join("; ")),
            }
        })
        .collect())
}

/// A payment posting of a batch (owned, so the batch can borrow it for [`ledger::post_many`]).
struct BatchPosting {
    provider: String,
    reference: String,
    payment_id: i64,
    event_id: i64,
    currency: String,
    legs: [(&'static str, i64); 3],
}

/// Applies what was parked on payments that succeeded in this batch (refunds, lost disputes), in the same
/// deterministic order as [`apply_payment`]: one query finds them all (usually none).
async fn apply_waiting_many(
    tx: &mut PgConnection,
    succeeded: &[(i64, usize, String, String)],
    details: &mut [Vec<String>],
) -> Result<(), BatchError> {
    let ids: Vec<i64> = succeeded.iter().map(|s| s.0).collect();
    let waiting: Vec<(i64, String, i64)> = sqlx::query_as(
        "SELECT payment_id, kind, id FROM (
             SELECT 'refund' AS kind, id, payment_id, provider_refund_id AS reference FROM refunds
             WHERE payment_id = ANY ($1) AND status = 'parked'
             UNION ALL
             SELECT 'dispute', id, payment_id, provider_dispute_id FROM disputes
             WHERE payment_id = ANY ($1) AND status = 'lost' AND NOT posted) w
         ORDER BY payment_id, kind DESC, reference",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    for (payment_id, kind, id) in waiting {
        let Some((_, index, provider, payment_ref)) = succeeded.iter().find(|s| s.0 == payment_id)
        else {
            continue;
        };
        let blame = |error: HandleError| BatchError {
            index: Some(*index),
            error,
        };
        if kind == "refund" {
            let detail = apply_refund(tx, provider, payment_ref, payment_id, id)
                .await
                .map_err(blame)?;
            details[*index].extend(detail);
        } else {
            post_dispute_loss(tx, provider, payment_id, id)
                .await
                .map_err(blame)?;
        }
    }
    Ok(())
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
