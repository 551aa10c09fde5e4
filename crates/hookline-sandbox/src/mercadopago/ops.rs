//! Mercado Pago operations: validation (before execution, saving nothing under the idempotency key), payment
//! creation with its outcome, refunds (never beyond what was captured: executed under the state lock), status
//! changes from the control API, and the notifications each change sends.

use std::time::Instant;

use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use url::Url;

use super::book::{MpPayment, MpRefund};
use super::errors;
use crate::clock;
use crate::reply::Reply;
use crate::state::State;
use crate::webhooks::{self, NewDelivery};

pub(crate) struct NewPayment {
    amount: i64,
    description: Option<String>,
    payment_method_id: String,
    payer: Value,
    external_reference: Option<String>,
    installments: u64,
    metadata: Value,
    statement_descriptor: Option<String>,
    notification_url: Option<String>,
}

/// A validated request, ready to execute.
pub(crate) enum Request {
    CreatePayment(NewPayment),
    Refund {
        payment_id: u64,
        amount: Option<i64>,
    },
}

/// Executes a validated request under the idempotency key `key`, if any.
pub(crate) fn execute(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    request: Request,
    key: Option<&str>,
) -> Reply {
    match request {
        Request::CreatePayment(new) => create_payment(state, edge_url, p, new, key),
        Request::Refund { payment_id, amount } => {
            refund(state, edge_url, p, payment_id, amount, key)
        }
    }
}

/// Mercado Pago's test-card holder names, also accepted as `[NAME]` in the description or as `payer.first_name`.
const TEST_OUTCOMES: &[(&str, &str, &str)] = &[
    ("APRO", "approved", "accredited"),
    ("OTHE", "rejected", "cc_rejected_other_reason"),
    ("CONT", "pending", "pending_contingency"),
    ("CALL", "rejected", "cc_rejected_call_for_authorize"),
    ("FUND", "rejected", "cc_rejected_insufficient_amount"),
    ("SECU", "rejected", "cc_rejected_bad_filled_security_code"),
    ("EXPI", "rejected", "cc_rejected_bad_filled_date"),
    ("FORM", "rejected", "cc_rejected_bad_filled_other"),
];

/// The status detail a status gets when none is given.
pub(crate) fn default_detail(status: &str) -> Option<&'static str> {
    Some(match status {
        "approved" => "accredited",
        "pending" => "pending_contingency",
        "in_process" => "pending_review_manual",
        "rejected" => "cc_rejected_other_reason",
        "cancelled" => "by_collector",
        "charged_back" => "settled",
        _ => return None,
    })
}

/// A positive decimal with at most two places, in cents.
fn cents(value: &Value) -> Option<i64> {
    let f = value.as_f64()?;
    if !f.is_finite() || f <= 0.0 || f > 1e10 {
        return None;
    }
    let c = (f * 100.0).round();
    ((c - f * 100.0).abs() < 1e-6).then_some(c as i64)
}

fn optional_text(body: &Value, name: &str) -> Option<String> {
    body.get(name).and_then(Value::as_str).map(str::to_owned)
}

pub(crate) fn validate_payment(bytes: &[u8]) -> Result<NewPayment, Reply> {
    let body: Value = serde_json::from_slice(bytes)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| errors::bad_request(json!(1), "Params Error"))?;
    let amount = body
        .get("transaction_amount")
        .and_then(cents)
        .ok_or_else(|| errors::bad_request(json!(4037), "Invalid transaction_amount"))?;
    let payment_method_id = optional_text(&body, "payment_method_id")
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| errors::bad_request(json!(3028), "Invalid payment_method_id"))?;
    let payer = body.get("payer").cloned().unwrap_or(Value::Null);
    let email_ok = payer
        .get("email")
        .and_then(Value::as_str)
        .is_some_and(|e| e.contains('@') && !e.starts_with('@') && !e.ends_with('@'));
    if !email_ok {
        return Err(errors::bad_request(
            json!(4050),
            "payer.email must be a valid email",
        ));
    }
    let installments = match body.get("installments") {
        None | Some(Value::Null) => 1,
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .ok_or_else(|| errors::bad_request(json!(1), "Params Error"))?,
    };
    Ok(NewPayment {
        amount,
        description: optional_text(&body, "description"),
        payment_method_id,
        payer,
        external_reference: optional_text(&body, "external_reference"),
        installments,
        metadata: body.get("metadata").cloned().unwrap_or_else(|| json!({})),
        statement_descriptor: optional_text(&body, "statement_descriptor"),
        notification_url: optional_text(&body, "notification_url"),
    })
}

/// The optional `{"amount": 10.00}` of a refund (`None`: refund what remains).
pub(crate) fn validate_refund(bytes: &[u8]) -> Result<Option<i64>, Reply> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let body: Value = serde_json::from_slice(bytes)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| errors::bad_request(json!(1), "Params Error"))?;
    match body.get("amount") {
        None | Some(Value::Null) => Ok(None),
        Some(v) if !v.is_number() => Err(errors::bad_request(
            json!(4041),
            "amount attribute must be numeric",
        )),
        Some(v) => cents(v)
            .map(Some)
            .ok_or_else(|| errors::bad_request(json!(4040), "amount attribute must be positive")),
    }
}

fn payment_type(method: &str) -> &'static str {
    match method {
        "pix" => "bank_transfer",
        "bolbradesco" | "pec" | "boleto" => "ticket",
        "account_money" => "account_money",
        m if m.starts_with("deb") || m == "maestro" => "debit_card",
        _ => "credit_card",
    }
}

/// The outcome of a new payment: forced by the control API, else a test name, else by payment method.
fn outcome(state: &mut State, p: usize, new: &NewPayment) -> (String, String) {
    if let Some(forced) = state.providers[p].outcomes.pop_front() {
        let detail = forced
            .status_detail
            .or_else(|| default_detail(&forced.status).map(str::to_owned))
            .unwrap_or_default();
        return (forced.status, detail);
    }
    let first_name = new.payer.get("first_name").and_then(Value::as_str);
    let description = new.description.as_deref().unwrap_or("");
    for (name, status, detail) in TEST_OUTCOMES {
        if first_name == Some(*name) || description.contains(&format!("[{name}]")) {
            return ((*status).to_owned(), (*detail).to_owned());
        }
    }
    match payment_type(&new.payment_method_id) {
        "bank_transfer" => ("pending".into(), "pending_waiting_transfer".into()),
        "ticket" => ("pending".into(), "pending_waiting_payment".into()),
        _ => ("approved".into(), "accredited".into()),
    }
}

/// Queues the notification Mercado Pago sends for a payment change: only the resource id, to be fetched.
fn notify(state: &mut State, edge_url: &Url, p: usize, payment_id: u64, action: &str) {
    let notification_id = state.rng.between(10_000_000_000, 99_999_999_999);
    let request_id = state.rng.uuid();
    let user_id = state.providers[p].mp.user_id;
    let date = clock::now()
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default();
    let body = json!({
        "action": action,
        "api_version": "v1",
        "data": {"id": payment_id.to_string()},
        "date_created": date,
        "id": notification_id,
        "live_mode": false,
        "type": "payment",
        "user_id": user_id,
    });
    let new = NewDelivery {
        provider: p,
        event_id: notification_id.to_string(),
        event_type: action.to_owned(),
        resource_id: payment_id.to_string(),
        body: body.to_string(),
        request_id: Some(request_id),
        data_id: Some(payment_id.to_string()),
    };
    webhooks::enqueue(state, edge_url, new, Instant::now());
}

fn create_payment(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    new: NewPayment,
    key: Option<&str>,
) -> Reply {
    let (status, status_detail) = outcome(state, p, &new);
    let mut id = state.rng.between(10_000_000_000, 99_999_999_999);
    while state.providers[p].mp.payments.contains_key(&id) {
        id = state.rng.between(10_000_000_000, 99_999_999_999);
    }
    let now = clock::now();
    let payment = MpPayment {
        id,
        date_approved: (status == "approved").then_some(now),
        status,
        status_detail,
        amount: new.amount,
        refunded: 0,
        description: new.description,
        payment_type_id: payment_type(&new.payment_method_id),
        payment_method_id: new.payment_method_id,
        payer: new.payer,
        external_reference: new.external_reference,
        installments: new.installments,
        metadata: new.metadata,
        statement_descriptor: new.statement_descriptor,
        notification_url: new.notification_url,
        date_created: now,
        date_last_updated: now,
        refunds: Vec::new(),
    };
    let book = &mut state.providers[p];
    let body = payment.json(book.mp.user_id);
    book.mp.payments.insert(id, payment);
    book.created(key, &id.to_string(), true);
    notify(state, edge_url, p, id, "payment.created");
    Reply::json(201, &body)
}

fn refund(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    payment_id: u64,
    amount: Option<i64>,
    key: Option<&str>,
) -> Reply {
    let refund_id = state.rng.between(1_000_000_000, 9_999_999_999);
    let book = &mut state.providers[p];
    let collector = book.mp.user_id;
    let Some(payment) = book.mp.payments.get_mut(&payment_id) else {
        return errors::payment_not_found();
    };
    if payment.status != "approved" {
        return errors::bad_request(
            json!(2063),
            "The action requested is not valid for the current payment state",
        );
    }
    let remaining = payment.remaining();
    let amount = amount.unwrap_or(remaining);
    if amount > remaining {
        return errors::bad_request(
            json!("invalid_refund_amount"),
            "The refund amount exceeds the amount available to refund",
        );
    }
    let now = clock::now();
    let refund = MpRefund {
        id: refund_id,
        payment_id,
        amount,
        date_created: now,
    };
    let body = refund.json(collector);
    payment.refunds.push(refund);
    payment.refunded += amount;
    payment.date_last_updated = now;
    if payment.remaining() == 0 {
        payment.status = "refunded".into();
        payment.status_detail = "refunded".into();
    } else {
        payment.status_detail = "partially_refunded".into();
    }
    book.created(key, &refund_id.to_string(), false);
    notify(state, edge_url, p, payment_id, "payment.updated");
    Reply::json(201, &body)
}

fn parse_id(id: &str) -> Result<u64, String> {
    id.trim()
        .parse()
        .map_err(|_| format!("'{id}' is not a Mercado Pago payment id"))
}

/// Applies `change` to payment `id` (refused with its message when it returns one), then queues the
/// `payment.updated` notification; the payment as it now is.
fn update_payment(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: u64,
    change: impl FnOnce(&mut MpPayment) -> Result<(), String>,
) -> Result<Value, String> {
    let book = &mut state.providers[p];
    let collector = book.mp.user_id;
    let payment = book
        .mp
        .payments
        .get_mut(&id)
        .ok_or_else(|| format!("payment {id} does not exist"))?;
    change(payment)?;
    let body = payment.json(collector);
    notify(state, edge_url, p, id, "payment.updated");
    Ok(body)
}

/// Marks an approved payment `charged_back` (status detail `settled` unless given) and notifies.
pub(crate) fn chargeback(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: &str,
    detail: Option<&str>,
) -> Result<Value, String> {
    let id = parse_id(id)?;
    update_payment(state, edge_url, p, id, |payment| {
        if payment.status != "approved" {
            return Err(format!(
                "payment {id} is {}, only an approved payment can be charged back",
                payment.status
            ));
        }
        payment.status = "charged_back".into();
        payment.status_detail = detail.unwrap_or("settled").to_owned();
        payment.date_last_updated = clock::now();
        Ok(())
    })
}

/// Moves a payment to `status` (a pending payment paid or expired, a review decided, …) and notifies.
pub(crate) fn set_status(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: &str,
    status: &str,
    detail: Option<&str>,
) -> Result<Value, String> {
    let id = parse_id(id)?;
    let default = default_detail(status).ok_or_else(|| {
        format!("unknown status '{status}' (approved, pending, in_process, rejected, cancelled, charged_back; refunds go through the API)")
    })?;
    update_payment(state, edge_url, p, id, |payment| {
        let now = clock::now();
        payment.status = status.to_owned();
        payment.status_detail = detail.unwrap_or(default).to_owned();
        if status == "approved" && payment.date_approved.is_none() {
            payment.date_approved = Some(now);
        }
        payment.date_last_updated = now;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_positive_with_two_decimals_at_most() {
        assert_eq!(cents(&json!(25.0)), Some(2500));
        assert_eq!(cents(&json!(10.1)), Some(1010));
        assert_eq!(cents(&json!(7)), Some(700));
        assert_eq!(cents(&json!(0)), None);
        assert_eq!(cents(&json!(-3)), None);
        assert_eq!(cents(&json!(1.005)), None);
        assert_eq!(cents(&json!("25.00")), None);
    }

    #[test]
    fn refund_bodies() {
        assert_eq!(validate_refund(b"").ok(), Some(None));
        assert_eq!(validate_refund(b"{}").ok(), Some(None));
        assert_eq!(
            validate_refund(br#"{"amount": 10.5}"#).ok(),
            Some(Some(1050))
        );
        assert!(validate_refund(br#"{"amount": "x"}"#).is_err());
        assert!(validate_refund(br#"{"amount": 0}"#).is_err());
    }
}
