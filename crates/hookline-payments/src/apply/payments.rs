//! Payment status facts: the forward-only state machine of `payments` (and its audit rows in
//! `payment_transitions`), written once, set-based.
//!
//! [`apply_payments`] applies a batch of status facts with a constant number of statements; the per-event path
//! ([`apply_payment`]) is the same function with one fact, so the currency check, the forward-only rule, the
//! amount rule, the announced facts and the capture posting exist once.

use std::collections::{HashMap, HashSet};

use sqlx::PgConnection;

use hookline_core::domain_events::{EventType, Owner};
use hookline_core::handler::{BatchError, HandleError, OutcomeKind};

use super::row::read_error;
use super::{disputes, refunds, Applied, ProviderRule};
use crate::facts;
use crate::intents::ChargeFinal;
use crate::ledger::{self, Posting};
use crate::model::{Money, PaymentStatus};

/// What the ledger side knows of a payment: its status and how much was refunded (reconciliation compares
/// it with the provider's view). `None` when the payment is unknown; an unknown stored status is an error
/// (a decode error naming the value), never a default.
pub async fn payment_state<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    provider: &str,
    payment_ref: &str,
) -> Result<Option<(PaymentStatus, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, amount_refunded FROM payments WHERE provider = $1 AND provider_payment_id = $2",
    )
    .bind(provider)
    .bind(payment_ref)
    .fetch_optional(conn)
    .await
}

/// One payment status fact.
pub(super) struct PaymentItem<'a> {
    /// Index of its event in the batch (0 on the per-event path).
    pub(super) index: usize,
    pub(super) event_id: i64,
    pub(super) provider: &'a str,
    pub(super) rule: &'a ProviderRule,
    pub(super) payment_ref: String,
    pub(super) status: PaymentStatus,
    pub(super) amount: Option<Money>,
    /// The provider's reason, when it failed.
    pub(super) failure: Option<crate::model::Failure>,
    /// The trace of the event's apply: its facts carry it, and the intent it completes is linked to it.
    pub(super) traceparent: Option<String>,
}

/// Applies one payment status fact of an event: [`apply_payments`] with one item.
pub(super) async fn apply_payment(
    tx: &mut PgConnection,
    item: PaymentItem<'_>,
    charge_final: &dyn ChargeFinal,
) -> Result<Applied, HandleError> {
    let mut details = vec![Vec::new()];
    let item = PaymentItem { index: 0, ..item };
    apply_payments(tx, std::slice::from_ref(&item), &mut details, charge_final)
        .await
        .map_err(|e| e.error)?;
    let details: Vec<String> = details.into_iter().flatten().collect();
    Ok((
        OutcomeKind::Applied,
        (!details.is_empty()).then(|| details.join("; ")),
    ))
}

/// A payment of a batch, locked, as the batch moves it in memory.
#[derive(Debug, sqlx::FromRow)]
struct Locked {
    id: i64,
    provider: String,
    provider_payment_id: String,
    status: PaymentStatus,
    amount: Option<i64>,
    currency: Option<String>,
    amount_refunded: i64,
    version: i64,
    /// Created by this batch: nothing can have been parked on it.
    #[sqlx(skip)]
    created: bool,
    /// Changed in memory: written back.
    #[sqlx(skip)]
    dirty: bool,
}

type Payments = HashMap<(String, String), Locked>;

/// What a batch writes once it has been applied in memory.
#[derive(Default)]
struct Changes<'a> {
    /// `(payment id, event id, from, to)`.
    transitions: Vec<(i64, i64, PaymentStatus, PaymentStatus)>,
    /// The payment facts (`payment.succeeded`, …), in event order, with their event's trace.
    /// Each is owned by the client of the intent whose payment it is (looked up when it is recorded).
    facts: Vec<(
        EventType,
        String,
        serde_json::Value,
        Option<String>,
        Owner<'a>,
    )>,
    /// Intents to complete.
    completed: Vec<crate::intents::Completed<'a>>,
    /// Captures to post.
    postings: Vec<Posting<'a>>,
    /// Payments that succeeded in this batch and existed before it: `(payment id, index, provider, ref)`.
    newly_succeeded: Vec<(i64, usize, &'a str, &'a str)>,
}

/// Applies payment status facts with a constant number of statements, in event order, with the result of
/// applying them one by one:
///
/// 1. unknown payments created and every payment of the batch locked ([`lock_all`]);
/// 2. the facts applied in memory, in order ([`step`]: several facts of one payment move it step by step);
/// 3. the changes written ([`write`]): payments, transitions, facts, completed intents, postings (one statement
///    each), then what was parked on a payment that succeeded now (refunds, lost disputes; rare).
///
/// Details for operators go to `details[item.index]`.
pub(super) async fn apply_payments(
    tx: &mut PgConnection,
    items: &[PaymentItem<'_>],
    details: &mut [Vec<String>],
    charge_final: &dyn ChargeFinal,
) -> Result<(), BatchError> {
    if items.is_empty() {
        return Ok(());
    }
    let mut payments = lock_all(tx, items).await?;
    let mut changes = Changes::default();
    for item in items {
        step(item, &mut payments, &mut changes, details)?;
    }
    write(tx, &payments, changes, details, charge_final).await
}

/// Creates the unknown payments (one `INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING`, keys sorted) and
/// locks every payment of the batch (one statement, in key order: concurrent batches lock in the same order,
/// so they cannot deadlock).
async fn lock_all(
    tx: &mut PgConnection,
    items: &[PaymentItem<'_>],
) -> Result<Payments, BatchError> {
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
    // One index lookup per key, locked in key order. The LATERAL form leaves the planner no hash join with a
    // sequential scan of `payments` to choose — a generic plan made while the table was small did exactly that,
    // and kept it as the table grew (37 ms per batch at 150 k payments; PROFILING.md).
    let locked: Vec<Locked> = sqlx::query_as(
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
    .await
    .map_err(read_error)?;
    Ok(locked
        .into_iter()
        .map(|mut p| {
            p.created = created.contains(&p.id);
            ((p.provider.clone(), p.provider_payment_id.clone()), p)
        })
        .collect())
}

/// Applies one status fact to its locked payment, in memory: the rules of the state machine, in one place.
fn step<'a>(
    item: &'a PaymentItem<'a>,
    payments: &mut Payments,
    changes: &mut Changes<'a>,
    details: &mut [Vec<String>],
) -> Result<(), BatchError> {
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
    let current = p.status;
    if let (Some(m), Some(cur)) = (&item.amount, &p.currency) {
        if &m.currency != cur {
            return Err(blame(format!(
                "payment {}: currency {} differs from the recorded {cur}",
                item.payment_ref, m.currency
            )));
        }
    }
    if item.status <= current {
        // A late or repeated event: the payment is already at or past this status. Keep the first known amount.
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
        return Ok(());
    }
    // Moving forward. In the event's trace (a child of its `worker.apply`): which payment moved, from what to
    // what, and whether a capture is posted — what the trace of a "stuck" payment is read for.
    let span = item.traceparent.as_deref().map(|tp| {
        let span = tracing::info_span!(
            "payment.transition",
            payment_id = p.id,
            provider = %item.provider,
            from = current.as_str(),
            to = item.status.as_str(),
            posting = tracing::field::Empty,
        );
        hookline_core::telemetry::set_parent(&span, Some(tp));
        span
    });
    // Success fixes the captured amount; other statuses only fill an unknown amount.
    match (item.status, &item.amount, p.amount) {
        (PaymentStatus::Succeeded, Some(m), _) | (_, Some(m), None) => {
            p.amount = Some(m.amount);
            p.currency = Some(m.currency.clone());
        }
        _ => {}
    }
    p.status = item.status;
    p.version += 1;
    p.dirty = true;
    changes
        .transitions
        .push((p.id, item.event_id, current, item.status));
    if let Some(ty) = item.status.fact() {
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
        let subject = crate::facts::subject(item.provider, &item.payment_ref);
        let owner = Owner::PaymentOf {
            provider: item.provider,
            payment_ref: &item.payment_ref,
        };
        changes
            .facts
            .push((ty, subject, data, item.traceparent.clone(), owner));
    }
    // A payment intent hookline dispatched (linked by the gateway's payment id) follows the final status.
    if let Some(intent) = item.status.intent_status() {
        changes.completed.push(crate::intents::Completed {
            provider: item.provider,
            payment_ref: &item.payment_ref,
            status: intent,
            failure: item.failure.as_ref(),
            traceparent: item.traceparent.as_deref(),
        });
    }
    if item.status != PaymentStatus::Succeeded {
        return Ok(());
    }
    let (Some(amount), Some(currency)) = (p.amount, p.currency.clone()) else {
        return Err(blame(format!(
            "payment {} succeeded but no amount is known",
            item.payment_ref
        )));
    };
    let fee = ledger::fee(amount, item.rule.fee_bps, item.rule.fee_fixed);
    if let Some(span) = &span {
        span.record("posting", "payment");
    }
    changes.postings.push(Posting::payment(
        item.provider,
        &item.payment_ref,
        p.id,
        item.event_id,
        currency,
        amount,
        fee,
    ));
    if !p.created {
        changes
            .newly_succeeded
            .push((p.id, item.index, item.provider, &item.payment_ref));
    }
    Ok(())
}

/// Writes what [`step`] decided, one statement per kind of change, in the order the facts must appear (a
/// payment's fact before its intent's fact before its refunds' facts).
async fn write(
    tx: &mut PgConnection,
    payments: &Payments,
    changes: Changes<'_>,
    details: &mut [Vec<String>],
    charge_final: &dyn ChargeFinal,
) -> Result<(), BatchError> {
    let dirty: Vec<&Locked> = payments.values().filter(|p| p.dirty).collect();
    if !dirty.is_empty() {
        let ids: Vec<i64> = dirty.iter().map(|p| p.id).collect();
        let statuses: Vec<&str> = dirty.iter().map(|p| p.status.as_str()).collect();
        let amounts: Vec<Option<i64>> = dirty.iter().map(|p| p.amount).collect();
        let currencies: Vec<Option<&str>> = dirty.iter().map(|p| p.currency.as_deref()).collect();
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
    if !changes.transitions.is_empty() {
        let t = &changes.transitions;
        let ids: Vec<i64> = t.iter().map(|t| t.0).collect();
        let events: Vec<i64> = t.iter().map(|t| t.1).collect();
        let from: Vec<&str> = t.iter().map(|t| t.2.as_str()).collect();
        let to: Vec<&str> = t.iter().map(|t| t.3.as_str()).collect();
        sqlx::query(
            "INSERT INTO payment_transitions (payment_id, event_id, from_status, to_status)
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[])",
        )
        .bind(&ids)
        .bind(&events)
        .bind(&from)
        .bind(&to)
        .execute(&mut *tx)
        .await?;
    }
    hookline_core::domain_events::record_many(tx, &changes.facts)
        .await
        .map_err(HandleError::from)?;
    crate::intents::complete_from_payments(tx, &changes.completed, charge_final)
        .await
        .map_err(HandleError::from)?;
    ledger::post_many(tx, &changes.postings).await?;
    if !changes.newly_succeeded.is_empty() {
        apply_waiting(tx, &changes.newly_succeeded, details).await?;
    }
    Ok(())
}

/// Applies what was parked on payments that succeeded now (refunds, lost disputes), in a deterministic order
/// (per payment: refunds, then lost disputes, each by reference): one query finds them all (usually none).
async fn apply_waiting(
    tx: &mut PgConnection,
    succeeded: &[(i64, usize, &str, &str)],
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
        let Some(&(_, index, provider, payment_ref)) = succeeded.iter().find(|s| s.0 == payment_id)
        else {
            continue;
        };
        let blame = |error: HandleError| BatchError {
            index: Some(index),
            error,
        };
        if kind == "refund" {
            let detail = refunds::apply_refund(tx, provider, payment_ref, payment_id, id)
                .await
                .map_err(blame)?;
            details[index].extend(detail);
        } else {
            disputes::post_dispute_loss(tx, provider, payment_id, id)
                .await
                .map_err(blame)?;
        }
    }
    Ok(())
}
