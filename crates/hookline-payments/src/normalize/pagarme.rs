//! Pagar.me v4 postbacks (form-urlencoded, `event=transaction_status_changed`) → payment facts.
//!
//! Owns the Pagar.me mapping: which `current_status` means what, which amount field counts (`paid_amount`,
//! `refunded_amount`, else `amount`) and the stable keys derived for refunds and chargebacks, which Pagar.me
//! does not identify. Decoding the body is [`super::form::Form`]'s job.

use super::form::Form;
use super::{check_event_type, check_id, excerpt, field_error, ignored, quoted};
use crate::model::{DisputeStatus, Money, PaymentFact, PaymentStatus, PermanentError};

/// Pagar.me v4 only settles in reais.
const CURRENCY: &str = "brl";

fn brl(amount: i64) -> Money {
    Money {
        amount,
        currency: CURRENCY.to_owned(),
    }
}

pub(super) fn normalize(
    event_type: Option<&str>,
    body: &[u8],
) -> Result<Vec<PaymentFact>, PermanentError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        PermanentError(format!(
            "body: not valid UTF-8 form data (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    let form = Form::parse(text);
    let event = form.required("event")?;
    check_event_type(event_type, "event", event)?;
    if event != "transaction_status_changed" {
        return Ok(vec![ignored(format!(
            "unhandled pagar.me event {}",
            excerpt(event)
        ))]);
    }
    // v4 postbacks always say `object=transaction`; an absent field is tolerated because the event name
    // already says which object changed.
    if let Some(object) = form.get("object")? {
        if object != "transaction" {
            return Ok(vec![ignored(format!(
                "unhandled pagar.me object {}",
                excerpt(object)
            ))]);
        }
    }
    let id = check_id("id", form.required("id")?)?;
    if let Some(nested) = form.get("transaction[id]")? {
        if nested != id {
            return Err(field_error(
                "transaction[id]",
                format!("{} differs from id {}", quoted(nested), quoted(&id)),
            ));
        }
    }
    let status = form.required("current_status")?;

    let requested = || form.amount("transaction[amount]");
    // A paid, refunded or charged-back transaction moved money, so its amount is required.
    let paid = || -> Result<Money, PermanentError> {
        match form.amount("transaction[paid_amount]")? {
            Some(amount) => Ok(brl(amount)),
            None => requested()?.map(brl).ok_or_else(|| {
                field_error(
                    "transaction[paid_amount]",
                    "missing, and so is transaction[amount]",
                )
            }),
        }
    };
    let payment = |status: PaymentStatus, amount: Option<Money>| PaymentFact::Payment {
        payment_ref: id.clone(),
        status,
        amount,
        failure: None,
    };

    Ok(match status {
        // `analyzing` and `pending_review` are the antifraud stages: still in flight.
        "processing" | "waiting_payment" | "authorized" | "analyzing" | "pending_review" => {
            vec![payment(PaymentStatus::Processing, requested()?.map(brl))]
        }
        "paid" => vec![payment(PaymentStatus::Succeeded, Some(paid()?))],
        "refused" => vec![payment(PaymentStatus::Failed, requested()?.map(brl))],
        "pending_refund" => vec![ignored(format!(
            "pagar.me transaction {id} is pending_refund: refund not final"
        ))],
        // A transaction only reaches `refunded` or `chargedback` after being paid, and the `paid` postback
        // may have been lost or may arrive later, so the payment fact is repeated here; facts converge.
        "refunded" => {
            let refunded = match form.amount("transaction[refunded_amount]")? {
                Some(amount) => amount,
                None => requested()?.ok_or_else(|| {
                    field_error(
                        "transaction[refunded_amount]",
                        "missing, and so is transaction[amount]",
                    )
                })?,
            };
            vec![
                payment(PaymentStatus::Succeeded, Some(paid()?)),
                // Pagar.me postbacks carry no refund id. A transaction reaches `refunded` once, so the id
                // plus the refunded total is a stable key: a redelivery of this postback maps to the same
                // refund.
                PaymentFact::Refund {
                    refund_ref: format!("{id}:refund:{refunded}"),
                    payment_ref: id.clone(),
                    amount: brl(refunded),
                },
            ]
        }
        "chargedback" => {
            let paid = paid()?;
            vec![
                payment(PaymentStatus::Succeeded, Some(paid.clone())),
                // No dispute id either, and a transaction is charged back at most once.
                PaymentFact::Dispute {
                    dispute_ref: format!("{id}:chargeback"),
                    payment_ref: id.clone(),
                    amount: paid,
                    status: DisputeStatus::Lost,
                },
            ]
        }
        other => vec![ignored(format!(
            "unhandled pagar.me transaction status {}",
            excerpt(other)
        ))],
    })
}
