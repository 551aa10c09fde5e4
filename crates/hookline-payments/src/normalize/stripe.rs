//! Stripe events (JSON, `type` plus `data.object`) → payment facts.
//!
//! Owns the Stripe mapping: which event types move a payment, refund, dispute or subscription charge, which
//! amount field counts (`amount_received`, `amount_captured`), and the API-version differences (refund lists no
//! longer embedded, `parent.subscription_details`). Field access and its error messages come from
//! [`super::json::Obj`].

use super::json::{parse_json_object, Obj};
use super::{check_event_type, excerpt, field_error, ignored, quoted};
use crate::model::{DisputeStatus, Failure, Money, PaymentFact, PaymentStatus, PermanentError};

pub(super) fn normalize(
    event_type: Option<&str>,
    body: &[u8],
) -> Result<Vec<PaymentFact>, PermanentError> {
    let map = parse_json_object(body)?;
    let root = Obj::root(&map);
    let ty = root.text("type")?;
    check_event_type(event_type, "type", ty)?;
    // The object is fetched per arm, after the type is known, so an unhandled type is ignored even when its
    // `data` has a shape we would reject.
    let object = || data_object(&root);
    match ty {
        "payment_intent.created" => payment_intent(ty, &object()?, PaymentStatus::Created),
        "payment_intent.processing" | "payment_intent.requires_action" => {
            payment_intent(ty, &object()?, PaymentStatus::Processing)
        }
        // A manual capture's authorization: nothing moved until `payment_intent.succeeded` (the capture).
        "payment_intent.amount_capturable_updated" => {
            payment_intent(ty, &object()?, PaymentStatus::Authorized)
        }
        "payment_intent.succeeded" => payment_intent(ty, &object()?, PaymentStatus::Succeeded),
        "payment_intent.payment_failed" => payment_intent(ty, &object()?, PaymentStatus::Failed),
        "payment_intent.canceled" => payment_intent(ty, &object()?, PaymentStatus::Canceled),
        "charge.succeeded" => charge_succeeded(ty, &object()?),
        // `refund.failed` moves no money, but routing it here gives the ignore a precise reason
        // ("refund re_… is failed") instead of "unhandled".
        "refund.created" | "refund.updated" | "refund.failed" | "charge.refund.updated" => {
            refund(ty, &object()?)
        }
        "charge.refunded" => charge_refunded(ty, &object()?),
        "charge.dispute.created" | "charge.dispute.updated" | "charge.dispute.funds_withdrawn" => {
            dispute(ty, &object()?, false)
        }
        "charge.dispute.closed" => dispute(ty, &object()?, true),
        "invoice.paid" | "invoice.payment_succeeded" => invoice_paid(ty, &object()?),
        _ => Ok(vec![ignored(format!(
            "unhandled stripe event type {}",
            excerpt(ty)
        ))]),
    }
}

fn data_object<'a>(root: &Obj<'a>) -> Result<Obj<'a>, PermanentError> {
    root.object("data")?.object("object")
}

/// Checks `object.object` when present. Real events always carry it; hand-written fixtures may not, and
/// the mapping only needs the fields it reads.
fn expect_kind(ty: &str, object: &Obj<'_>, kind: &str) -> Result<(), PermanentError> {
    match object.opt_text("object")? {
        Some(actual) if actual != kind => Err(field_error(
            &object.path_of("object"),
            format!(
                "{} is not a {kind}, as event type {} requires",
                quoted(actual),
                excerpt(ty)
            ),
        )),
        _ => Ok(()),
    }
}

/// The payment a charge-like object (charge, refund, dispute) belongs to: its payment intent when it has
/// one, so that facts from `payment_intent.*` and `charge.*` events converge on the same `pi_…` key;
/// legacy charges created without a payment intent fall back to `fallback_key` (the charge id).
fn owning_payment(object: &Obj<'_>, fallback_key: &str) -> Result<String, PermanentError> {
    match object.opt_id("payment_intent")? {
        Some(pi) => Ok(pi),
        None => object.id(fallback_key),
    }
}

fn payment_intent(
    ty: &str,
    object: &Obj<'_>,
    status: PaymentStatus,
) -> Result<Vec<PaymentFact>, PermanentError> {
    expect_kind(ty, object, "payment_intent")?;
    let payment_ref = object.id("id")?;
    let amount = if status == PaymentStatus::Succeeded {
        // `amount_received` is what was captured (it differs from `amount` after a partial capture).
        let key = if object.has("amount_received") {
            "amount_received"
        } else {
            "amount"
        };
        Some(object.money(key, "currency")?)
    } else {
        object.opt_money("amount", "currency")?
    };
    // A failed or canceled intent's reason: the issuer's `decline_code`, else Stripe's `code`
    // (`payment_intent_authentication_failure` for a failed 3-D Secure challenge), as the dispatcher reads a 402.
    let failure = match object.opt_object("last_payment_error")? {
        Some(e) if matches!(status, PaymentStatus::Failed | PaymentStatus::Canceled) => {
            let code = match e.opt_text("decline_code")? {
                Some(c) => Some(c),
                None => e.opt_text("code")?,
            };
            match code {
                Some(code) => Some(Failure::new(code, e.opt_text("message")?)),
                None => None,
            }
        }
        _ => None,
    };
    Ok(vec![PaymentFact::Payment {
        payment_ref,
        status,
        amount,
        failure,
    }])
}

fn charge_succeeded(ty: &str, object: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
    expect_kind(ty, object, "charge")?;
    let payment_ref = owning_payment(object, "id")?;
    // With manual capture Stripe sends `charge.succeeded` when the card is *authorised* (`captured: false`,
    // `amount_captured: 0`). No money has moved yet, so that is Authorized; the capture later brings
    // `payment_intent.succeeded` with the captured amount. Older payloads without `captured` are captured.
    if object.opt_bool("captured")? == Some(false) {
        return Ok(vec![PaymentFact::Payment {
            payment_ref,
            status: PaymentStatus::Authorized,
            amount: object.opt_money("amount", "currency")?,
            failure: None,
        }]);
    }
    let key = if object.has("amount_captured") {
        "amount_captured"
    } else {
        "amount"
    };
    Ok(vec![PaymentFact::Payment {
        payment_ref,
        status: PaymentStatus::Succeeded,
        amount: Some(object.money(key, "currency")?),
        failure: None,
    }])
}

/// Whether a refund in this status has moved (or is committed to move) money. Pending refunds count: Stripe
/// has accepted them and most complete; failed and canceled ones never moved money.
fn refund_counts(status: &str) -> bool {
    matches!(status, "succeeded" | "pending")
}

fn refund(ty: &str, object: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
    expect_kind(ty, object, "refund")?;
    let refund_ref = object.id("id")?;
    let status = object.text("status")?;
    if !refund_counts(status) {
        return Ok(vec![ignored(format!(
            "refund {refund_ref} is {}, not succeeded or pending",
            excerpt(status)
        ))]);
    }
    Ok(vec![PaymentFact::Refund {
        payment_ref: owning_payment(object, "charge")?,
        amount: object.money("amount", "currency")?,
        refund_ref,
    }])
}

fn charge_refunded(ty: &str, object: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
    expect_kind(ty, object, "charge")?;
    let charge_id = object.id("id")?;
    let payment_ref = owning_payment(object, "id")?;
    let listed = match object.opt_object("refunds")? {
        Some(refunds) => refunds.opt_array("data")?.unwrap_or_default(),
        None => Vec::new(),
    };
    if !listed.is_empty() {
        let mut facts = Vec::new();
        let mut skipped = Vec::new();
        for refund in listed {
            let refund_ref = refund.id("id")?;
            let status = refund.text("status")?;
            if refund_counts(status) {
                facts.push(PaymentFact::Refund {
                    refund_ref,
                    payment_ref: payment_ref.clone(),
                    amount: refund.money("amount", "currency")?,
                });
            } else {
                skipped.push(format!("{refund_ref} is {}", excerpt(status)));
            }
        }
        if facts.is_empty() {
            return Ok(vec![ignored(format!(
                "charge {charge_id} lists no succeeded or pending refund ({})",
                skipped.join(", ")
            ))]);
        }
        return Ok(facts);
    }
    // Since API version 2022-11-15 the charge no longer embeds its refunds: only the cumulative
    // `amount_refunded` is known, not which refund (`re_…`) it adds. Every refund also arrives as its own
    // `refund.*` event carrying its real id, which is the key the ledger posts under; deriving a second key
    // here would post the same money twice. So this event only records that it was seen.
    let refunded = object.amount_or_zero("amount_refunded")?;
    Ok(vec![ignored(format!(
        "charge {charge_id} embeds no refund list (amount_refunded {refunded}); refunds are applied from refund.* events"
    ))])
}

fn dispute(ty: &str, object: &Obj<'_>, closed: bool) -> Result<Vec<PaymentFact>, PermanentError> {
    expect_kind(ty, object, "dispute")?;
    let dispute_ref = object.id("id")?;
    let stripe_status = if closed {
        Some(object.text("status")?)
    } else {
        object.opt_text("status")?
    };
    // A decided status wins over the event type: `charge.dispute.updated` can be delivered after (or
    // instead of) `charge.dispute.closed`, and dispute statuses only move forward anyway. `warning_closed`
    // is an inquiry closed without becoming a chargeback: no money lost, so Won.
    let status = match stripe_status {
        Some("won" | "warning_closed") => DisputeStatus::Won,
        Some("lost") => DisputeStatus::Lost,
        _ if !closed => DisputeStatus::Open,
        other => {
            // A closed dispute whose outcome we cannot read must not be guessed: dead-letter it.
            return Err(field_error(
                &object.path_of("status"),
                format!(
                    "{} is not a final dispute status (won, lost, warning_closed)",
                    other.map(quoted).unwrap_or_default()
                ),
            ));
        }
    };
    Ok(vec![PaymentFact::Dispute {
        dispute_ref,
        payment_ref: owning_payment(object, "charge")?,
        amount: object.money("amount", "currency")?,
        status,
    }])
}

fn invoice_paid(ty: &str, object: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
    expect_kind(ty, object, "invoice")?;
    let invoice_ref = object.id("id")?;
    // `subscription` moved to `parent.subscription_details.subscription` in API version 2025-03-31.
    let subscription_id = match object.opt_id("subscription")? {
        Some(id) => Some(id),
        None => match object.opt_object("parent")? {
            Some(parent) => match parent.opt_object("subscription_details")? {
                Some(details) => details.opt_id("subscription")?,
                None => None,
            },
            None => None,
        },
    };
    let Some(subscription_id) = subscription_id else {
        return Ok(vec![ignored("one-off invoice".to_owned())]);
    };
    let amount_paid = object.amount_or_zero("amount_paid")?;
    if amount_paid == 0 {
        // Trials and 100 % coupons produce paid invoices of 0: nothing to charge or post.
        return Ok(vec![ignored("zero-amount invoice".to_owned())]);
    }
    Ok(vec![PaymentFact::InvoicePaid {
        billing_cycle: billing_cycle(object)?,
        invoice_ref,
        subscription_id,
        amount: Money {
            amount: amount_paid,
            currency: object.currency("currency")?,
        },
    }])
}

/// The start of the service period the invoice bills, as decimal unix seconds.
///
/// This is the invoice's `period_end`, not its `period_start`: Stripe documents that the invoice period
/// "looks back one period for a subscription invoice". The first invoice of a subscription started at t0
/// has period t0..t0 and bills t0..t1; the first renewal has period t0..t1 and bills t1..t2. Keyed on
/// `period_start`, both would be cycle t0 and the renewal would be dropped as a duplicate; `period_end`
/// (t0, then t1, …) is the start of the billed period (the subscription line's `period.start`) and is
/// distinct per cycle. Without `period_end`, the first line's `period.start` is used.
fn billing_cycle(object: &Obj<'_>) -> Result<String, PermanentError> {
    if let Some(end) = object.opt_timestamp("period_end")? {
        return Ok(end.to_string());
    }
    let first_line = match object.opt_object("lines")? {
        Some(lines) => lines
            .opt_array("data")?
            .unwrap_or_default()
            .into_iter()
            .next(),
        None => None,
    };
    match first_line {
        Some(line) => Ok(line.object("period")?.timestamp("start")?.to_string()),
        None => Err(field_error(
            &object.path_of("period_end"),
            "missing, and there is no lines.data[0].period.start to take the billing cycle from",
        )),
    }
}
