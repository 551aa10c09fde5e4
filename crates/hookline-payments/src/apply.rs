//! Applying payment facts inside the worker's transaction: the payment state machine.
//!
//! Owns the payment-side tables (`payments`, `payment_transitions`, `refunds`, `disputes`,
//! `subscription_charges`, `pending_fetches`) and decides when money moves; what a movement writes to the ledger
//! is [`crate::ledger`]'s business, reached through its one constructor per kind of posting.
//!
//! This file is the worker's [`Handler`]: it normalizes an event into facts and hands each to the module that
//! owns its rules — payment statuses (`payments`: the state machine, set-based; one event's status fact is a
//! batch of one), refunds (`refunds`), disputes (`disputes`), paid invoices (`invoices`).
//!
//! Every transition row-locks its payment (`SELECT … FOR UPDATE`), so concurrent events for one payment apply
//! one after the other. Statuses only move up their rank, postings are unique by constraint, and refunds or
//! disputes that arrive before their payment succeeded are parked and applied by the transaction that makes it
//! succeed — so the final state and ledger do not depend on arrival order.
//!
//! Each change that the merchant's systems care about also writes its domain event here, in the same
//! transaction ([`crate::facts`]), and moves the payment's `version` up.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use hookline_core::ProviderConfig;
use hookline_signature::Scheme;
use sqlx::PgConnection;

use crate::intents::ChargeFinal;
use crate::model::PaymentFact;
use crate::normalize::{
    normalize, pagarme_v5_object, pagarme_v5_object_resource, payment_resource,
};
use hookline_core::handler::{
    BatchError, EventRef, HandleError, Handler, Outcome, OutcomeKind, Prepared, StoredEvent,
};

mod disputes;
mod invoices;
mod payments;
mod refunds;
mod row;

pub use disputes::dispute_status;
pub use payments::payment_state;
use payments::PaymentItem;

/// Per-provider settings the payments effect needs.
#[derive(Debug, Clone)]
struct ProviderRule {
    scheme: Scheme,
    fee_bps: i64,
    fee_fixed: i64,
    /// The provider's API, when `api_base` is configured (Mercado Pago payments and Pagar.me v5 charges are read
    /// from it).
    api: Option<Arc<dyn ProviderRead>>,
}

/// The one read the payments effect may need from a provider's API, before its transaction (in
/// [`Handler::prepare`]: no row locked, no pooled connection held, no side effect — a `GET` that may run several
/// times for one event). A seam: the API clients live in `hookline-gateways`, which stands above this crate
/// (`hookline_gateways::fetch` implements it for the provider's one client); the bytes returned are bounded by
/// the reader, and its errors are already classified (transient: retried in-process; permanent: dead-lettered).
pub trait ProviderRead: Send + Sync + std::fmt::Debug {
    /// Mercado Pago: the payment `payment_id` (from signed material), as the API answers it.
    fn mercadopago_payment<'a>(
        &'a self,
        payment_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, HandleError>>;
    /// Pagar.me v5: the charge (`ch_…`) or order (`or_…`) the webhook's key names.
    fn pagarme_object<'a>(&'a self, object: &'a str)
        -> BoxFuture<'a, Result<Vec<u8>, HandleError>>;
}

/// The payments effect.
#[derive(Debug, Clone)]
pub struct PaymentsHandler {
    providers: HashMap<String, ProviderRule>,
    /// What a subscription cycle's charge completed here does in the same transaction (billing's dunning).
    charge_final: Arc<dyn ChargeFinal>,
}

/// Consumer name of the payments effect (processed markers, dead letters); named once, in
/// `hookline_core::consumers`.
pub const CONSUMER: &str = hookline_core::consumers::PAYMENTS;

/// Per provider, the refunds and lost disputes waiting for their payment to succeed now (what is really parked:
/// a processed marker says `parked` for ever, while the transaction that makes the payment succeed applies what
/// waited). Providers with nothing waiting are absent.
pub async fn parked_by_provider<'c>(
    conn: impl sqlx::PgExecutor<'c>,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT provider, count(*)::bigint FROM (
             SELECT provider FROM refunds WHERE status = 'parked'
             UNION ALL
             SELECT provider FROM disputes WHERE status = 'lost' AND NOT posted
         ) waiting GROUP BY provider ORDER BY provider",
    )
    .fetch_all(conn)
    .await
}

impl PaymentsHandler {
    /// Builds the handler from the configured providers (their scheme selects the normaliser, their fee rate
    /// the ledger split), the reader of each provider's API (`read`: `None` where no `api_base` is configured)
    /// and billing's reaction to a subscription's charge reaching a final status. The composition every process
    /// uses is `hookline_billing::payments_handler`.
    pub fn new<'a>(
        providers: impl IntoIterator<Item = &'a ProviderConfig>,
        read: impl Fn(&ProviderConfig) -> Option<Arc<dyn ProviderRead>>,
        charge_final: Arc<dyn ChargeFinal>,
    ) -> PaymentsHandler {
        PaymentsHandler {
            charge_final,
            providers: providers
                .into_iter()
                .map(|p| {
                    (
                        p.name.clone(),
                        ProviderRule {
                            scheme: p.scheme,
                            fee_bps: p.fee_bps,
                            fee_fixed: p.fee_fixed,
                            api: read(p),
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

    /// Mercado Pago notifications only name a payment (by the signed `data.id`, part of the dedupe key), and
    /// Pagar.me v5 webhooks are not signed at all (their key names the charge or order): with `api_base`
    /// configured, the object is read from the API here, before the transaction. Everything else needs nothing.
    async fn prepare(&self, event: EventRef<'_>) -> Result<Option<Prepared>, HandleError> {
        let Some(rule) = self.providers.get(event.provider) else {
            return Ok(None); // `handle` says so, with the reason
        };
        if let (Scheme::PagarmeV5, Some(api)) = (rule.scheme, &rule.api) {
            let Some(object) = pagarme_v5_object(event.provider_event_id) else {
                return Ok(None); // names nothing to read: recorded as ignored
            };
            let body = api.pagarme_object(object).await?;
            return Ok(Some(Prepared {
                key: event.provider_event_id.to_owned(),
                body,
            }));
        }
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
    /// far — is applied with a constant number of statements (see `payments::apply_payments`). Anything else
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
            if event.prepared.is_some()
                || matches!(rule.scheme, Scheme::MercadoPago | Scheme::PagarmeV5)
            {
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
                        failure,
                    } => items.push(PaymentItem {
                        index,
                        event_id: event.id,
                        provider: &event.provider,
                        rule,
                        payment_ref,
                        status,
                        amount,
                        failure,
                        traceparent: event.traceparent.clone(),
                    }),
                    PaymentFact::Ignored { reason } => ignored[index].push(reason),
                    _ => return None,
                }
            }
        }
        let mut details: Vec<Vec<String>> = vec![Vec::new(); events.len()];
        if let Err(e) =
            payments::apply_payments(tx, &items, &mut details, &*self.charge_final).await
        {
            return Some(Err(e));
        }
        let mut applied = vec![false; events.len()];
        for item in &items {
            applied[item.index] = true;
        }
        let outcomes = details
            .into_iter()
            .zip(ignored)
            .zip(applied)
            .map(|((mut d, ignored), applied)| {
                let kind = if applied {
                    OutcomeKind::Applied
                } else {
                    d.extend(ignored);
                    OutcomeKind::Ignored
                };
                Outcome {
                    kind,
                    detail: (!d.is_empty()).then(|| d.join("; ")),
                }
            })
            .collect();
        Some(Ok(outcomes))
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
        let resource_error = |e| {
            HandleError::Permanent(
                anyhow::Error::new(e).context("invalid payment resource from the API"),
            )
        };
        let facts = match (
            &event.prepared,
            mercadopago_signed_id(&event.provider_event_id),
            pagarme_v5_object(&event.provider_event_id),
        ) {
            // The effect comes from the resource read by its signed id, never from the unsigned notification.
            (Some(prepared), Some(payment_id), _) if rule.scheme == Scheme::MercadoPago => {
                payment_resource(&prepared.body, payment_id).map_err(resource_error)?
            }
            // Pagar.me v5 signs nothing: the effect is what the API says of the object the key names.
            (Some(prepared), _, Some(object)) if rule.scheme == Scheme::PagarmeV5 => {
                pagarme_v5_object_resource(&prepared.body, object).map_err(resource_error)?
            }
            // Not read (no `api_base`): kept visible as a fetch to do, never applied from the body.
            (None, _, Some(object)) if rule.scheme == Scheme::PagarmeV5 => {
                vec![PaymentFact::NeedsFetch {
                    resource: if object.starts_with("ch_") {
                        "charge"
                    } else {
                        "order"
                    }
                    .to_owned(),
                    resource_id: object.to_owned(),
                }]
            }
            _ => normalize(rule.scheme, event.event_type.as_deref(), &event.body).map_err(|e| {
                HandleError::Permanent(anyhow::Error::new(e).context("invalid payload"))
            })?,
        };
        let mut kinds = Vec::with_capacity(facts.len());
        let mut details = Vec::new();
        for fact in facts {
            let (kind, detail) = apply_fact(
                tx,
                &event.provider,
                rule,
                event.id,
                fact,
                &*self.charge_final,
            )
            .await?;
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

/// What applying one fact did: its outcome and a detail for operators.
type Applied = (OutcomeKind, Option<String>);

/// Applies one fact of an event through the module that owns its rules.
async fn apply_fact(
    tx: &mut PgConnection,
    provider: &str,
    rule: &ProviderRule,
    event_id: i64,
    fact: PaymentFact,
    charge_final: &dyn ChargeFinal,
) -> Result<Applied, HandleError> {
    match fact {
        PaymentFact::Payment {
            payment_ref,
            status,
            amount,
            failure,
        } => {
            let item = PaymentItem {
                index: 0,
                event_id,
                provider,
                rule,
                payment_ref,
                status,
                amount,
                failure,
                // The per-event path runs inside the event's span (`worker.apply` or `worker.effects`).
                traceparent: hookline_core::telemetry::current_traceparent(),
            };
            payments::apply_payment(tx, item, charge_final).await
        }
        PaymentFact::Refund {
            refund_ref,
            payment_ref,
            amount,
        } => {
            refunds::apply_refund_fact(tx, provider, event_id, &refund_ref, &payment_ref, &amount)
                .await
        }
        PaymentFact::Dispute {
            dispute_ref,
            payment_ref,
            amount,
            status,
        } => {
            let item = disputes::DisputeItem {
                event_id,
                provider,
                dispute_ref: &dispute_ref,
                payment_ref: &payment_ref,
                amount: &amount,
                status,
            };
            disputes::apply_dispute_fact(tx, &item).await
        }
        PaymentFact::RefundedTotal { payment_ref, total } => {
            refunds::apply_refund_total(tx, provider, event_id, &payment_ref, &total).await
        }
        PaymentFact::ChargebackReversed {
            dispute_ref,
            payment_ref,
        } => {
            disputes::apply_chargeback_reversed(tx, provider, event_id, &dispute_ref, &payment_ref)
                .await
        }
        PaymentFact::InvoicePaid {
            invoice_ref,
            subscription_id,
            billing_cycle,
            amount,
        } => {
            let item = invoices::InvoiceItem {
                event_id,
                provider,
                invoice_ref: &invoice_ref,
                subscription_id: &subscription_id,
                billing_cycle: &billing_cycle,
                amount: &amount,
            };
            invoices::apply_invoice_paid(tx, &item).await
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
