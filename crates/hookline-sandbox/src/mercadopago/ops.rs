//! Mercado Pago operations: validation (before execution, saving nothing under the idempotency key), payment
//! creation with its outcome, refunds (never beyond what was captured: executed under the state lock), status
//! changes from the control API, and the notifications each change sends.

use std::time::Instant;

use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use url::Url;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::book::{CardToken, MpPayment, MpRefund};
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
    token: Option<String>,
    issuer_id: Option<String>,
}

/// A card to tokenise (`POST /v1/card_tokens`).
pub(crate) struct NewCardToken {
    card_number: String,
    expiration_month: u64,
    expiration_year: u64,
    security_code_length: usize,
    holder_name: String,
    holder_identification: Value,
}

/// A validated request, ready to execute.
pub(crate) enum Request {
    CreatePayment(NewPayment),
    Refund {
        payment_id: u64,
        amount: Option<i64>,
        metadata: Value,
    },
    CreateCardToken(NewCardToken),
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
        Request::Refund {
            payment_id,
            amount,
            metadata,
        } => refund(state, edge_url, p, payment_id, amount, metadata, key),
        Request::CreateCardToken(new) => create_card_token(state, p, new),
    }
}

/// Mercado Pago's test-card holder names (`cardholder.name` of the card token) and the outcome each stands for
/// (<https://www.mercadopago.com.br/developers/en/docs/checkout-bricks/integration-test/test-cards>).
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
            .filter(|n| (1..=48).contains(n))
            .ok_or_else(|| errors::bad_request(json!(1), "Params Error"))?,
    };
    if payment_method_id.len() > 64 {
        return Err(errors::bad_request(
            json!(3028),
            "Invalid payment_method_id",
        ));
    }
    // A card payment needs the card token the card form made (a card's data never reaches the merchant's
    // server); Mercado Pago refuses one without it
    // (https://www.mercadopago.com.br/developers/en/reference/payments/_payments/post: `token` is required for
    // card payments; error 3003 "Invalid card_token_id").
    let token = optional_text(&body, "token").filter(|t| !t.trim().is_empty());
    if is_card(&payment_method_id) && token.is_none() {
        return Err(errors::bad_request(json!(3003), "Invalid card_token_id"));
    }
    if token.as_ref().is_some_and(|t| t.len() > 64) {
        return Err(errors::bad_request(json!(3003), "Invalid card_token_id"));
    }
    let issuer_id = match body.get("issuer_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() <= 32 => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => return Err(errors::bad_request(json!(1), "Params Error")),
    };
    for field in [
        "description",
        "external_reference",
        "statement_descriptor",
        "notification_url",
    ] {
        if optional_text(&body, field).is_some_and(|v| v.chars().count() > 600) {
            return Err(errors::bad_request(json!(1), "Params Error"));
        }
    }
    Ok(NewPayment {
        token,
        issuer_id,
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
#[cfg(test)]
fn validate_refund(bytes: &[u8]) -> Result<Option<i64>, Reply> {
    validate_refund_body(bytes).map(|(amount, _)| amount)
}

/// Longest `metadata` object (serialised) the sandbox stores on a refund.
const MAX_METADATA_BYTES: usize = 4096;

/// The optional `amount` and `metadata` (an object, echoed in the refund) of a refund.
pub(crate) fn validate_refund_body(bytes: &[u8]) -> Result<(Option<i64>, Value), Reply> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok((None, json!({})));
    }
    let body: Value = serde_json::from_slice(bytes)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| errors::bad_request(json!(1), "Params Error"))?;
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => json!({}),
        Some(m @ Value::Object(_)) if m.to_string().len() <= MAX_METADATA_BYTES => m.clone(),
        Some(_) => return Err(errors::bad_request(json!(1), "Params Error")),
    };
    refund_amount(&body).map(|amount| (amount, metadata))
}

fn refund_amount(body: &Value) -> Result<Option<i64>, Reply> {
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

/// Whether a payment method id is a card brand, paid with a card token.
pub(crate) fn is_card(method: &str) -> bool {
    matches!(payment_type(method), "credit_card" | "debit_card")
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

/// The outcome of a new payment: forced by the control API, else the card token's holder name (a test card's),
/// else by payment method (a card approved, Pix and boletos pending).
fn outcome(
    state: &mut State,
    p: usize,
    new: &NewPayment,
    holder: Option<&str>,
) -> (String, String) {
    if let Some(forced) = state.providers[p].outcomes.pop_front() {
        let detail = forced
            .status_detail
            .or_else(|| default_detail(&forced.status).map(str::to_owned))
            .unwrap_or_default();
        return (forced.status, detail);
    }
    let holder = holder.map(|h| h.trim().to_ascii_uppercase());
    for (name, status, detail) in TEST_OUTCOMES {
        if holder.as_deref() == Some(*name) {
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
    // A card token is single use and lives 7 days
    // (https://www.mercadopago.com.br/developers/en/docs/checkout-api/integration-configuration/card/integrate-via-cardform):
    // an unknown, used or stale one is refused (error 2006 "Card Token not found").
    let now = clock::now();
    let (holder, card) = match &new.token {
        None => (None, None),
        Some(token) => match state.providers[p].mp.card_tokens.get_mut(token) {
            Some(t) if !t.used && now - t.date_created < time::Duration::days(7) => {
                t.used = true;
                (Some(t.holder_name.clone()), Some(t.card_json()))
            }
            _ => return errors::bad_request(json!(2006), "Card Token not found"),
        },
    };
    let (status, status_detail) = outcome(state, p, &new, holder.as_deref());
    let mut id = state.rng.between(10_000_000_000, 99_999_999_999);
    while state.providers[p].mp.payments.contains_key(&id) {
        id = state.rng.between(10_000_000_000, 99_999_999_999);
    }
    let pix = new.payment_method_id == "pix" && status == "pending";
    // Pix: the QR code the payer scans (copy-and-paste text and PNG) and the payment page, valid 24 hours by
    // default (https://www.mercadopago.com.br/developers/en/docs/checkout-api/integration-configuration/integrate-pix).
    let point_of_interaction = pix.then(|| {
        let qr_code = pix_code(id, new.amount);
        json!({
            "type": "PIX",
            "sub_type": null,
            "application_data": {"name": null, "version": null},
            "transaction_data": {
                "qr_code": qr_code,
                "qr_code_base64": STANDARD.encode(QR_PNG),
                "ticket_url": format!("https://www.mercadopago.com.br/payments/{id}/ticket?caller_id={}&hash=sandbox", state.providers[p].mp.user_id),
                "transaction_id": null,
                "bank_transfer_id": null,
                "financial_institution": null,
                "bank_info": {"payer": {}, "collector": {"account_holder_name": "Sandbox"}},
            },
        })
    });
    let payment = MpPayment {
        date_of_expiration: pix.then(|| now + time::Duration::hours(24)),
        point_of_interaction,
        card,
        issuer_id: new.issuer_id,
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
    metadata: Value,
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
        metadata,
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

/// A 1×1 PNG: what `qr_code_base64` decodes to (a real one is the QR code's image; no client here reads it).
const QR_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x00, 0x02, 0x00,
    0x00, 0x05, 0x00, 0x01, 0x7a, 0x5e, 0xab, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44,
    0xae, 0x42, 0x60, 0x82,
];

/// A Pix "copia e cola" code in the EMV layout Brazil's Pix uses (`000201…6304` + CRC), naming the payment and
/// amount. Not a payable code: nothing outside the sandbox can pay it.
fn pix_code(id: u64, cents: i64) -> String {
    let amount = format!("{}.{:02}", cents / 100, cents % 100);
    let field = |tag: &str, value: &str| format!("{tag}{:02}{value}", value.len());
    let account = field("00", "br.gov.bcb.pix") + &field("01", &format!("sandbox-{id}"));
    let body = field("00", "01")
        + &field("26", &account)
        + &field("52", "0000")
        + &field("53", "986")
        + &field("54", &amount)
        + &field("58", "BR")
        + &field("59", "SANDBOX")
        + &field("60", "SAO PAULO")
        + &field("62", &field("05", &format!("mpqr{id}")))
        + "6304";
    format!("{body}{:04X}", crc16_ccitt(body.as_bytes()))
}

/// CRC-16/CCITT-FALSE, the checksum that ends a Pix code.
fn crc16_ccitt(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0xffff;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// `POST /v1/card_tokens` — what the official SDKs' `card_token().create` and the card form call
/// (<https://www.mercadopago.com.br/developers/en/docs/checkout-api/integration-configuration/card/integrate-via-cardform>):
/// `card_number` (13–19 digits), `expiration_month`, `expiration_year`, `security_code` (3–4 digits),
/// `cardholder: {name, identification: {type, number}}`. Errors as Mercado Pago's card-token API answers them
/// (400 with cause codes `E301` card number, `E302` security code, `325`/`326` month/year, `221` holder name).
pub(crate) fn validate_card_token(bytes: &[u8]) -> Result<NewCardToken, Reply> {
    let body: Value = serde_json::from_slice(bytes)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| errors::bad_request(json!(1), "Params Error"))?;
    let number = |name: &str| -> Option<u64> {
        match body.get(name)? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    };
    let card_number = optional_text(&body, "card_number")
        .map(|c| c.replace([' ', '-'], ""))
        .filter(|c| (13..=19).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| errors::bad_request(json!("E301"), "invalid card_number"))?;
    let expiration_month = number("expiration_month")
        .filter(|m| (1..=12).contains(m))
        .ok_or_else(|| errors::bad_request(json!(325), "invalid expiration_month"))?;
    let expiration_year = number("expiration_year")
        .filter(|y| (2000..=2100).contains(y))
        .ok_or_else(|| errors::bad_request(json!(326), "invalid expiration_year"))?;
    let security_code_length = match body.get("security_code") {
        None | Some(Value::Null) => 3,
        Some(v) => v
            .as_str()
            .map(str::to_owned)
            .or_else(|| v.as_u64().map(|n| n.to_string()))
            .filter(|c| (3..=4).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_digit()))
            .map(|c| c.len())
            .ok_or_else(|| errors::bad_request(json!("E302"), "invalid security_code"))?,
    };
    let cardholder = body.get("cardholder").cloned().unwrap_or(Value::Null);
    let holder_name = cardholder
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.chars().count() <= 100)
        .ok_or_else(|| {
            errors::bad_request(
                json!(221),
                "parameter cardholder.name can not be null/empty",
            )
        })?
        .to_owned();
    let holder_identification = match cardholder.get("identification") {
        Some(id @ Value::Object(_)) if id.to_string().len() <= 200 => id.clone(),
        _ => json!({"number": null, "type": null}),
    };
    Ok(NewCardToken {
        card_number,
        expiration_month,
        expiration_year,
        security_code_length,
        holder_name,
        holder_identification,
    })
}

fn create_card_token(state: &mut State, p: usize, new: NewCardToken) -> Reply {
    let id = format!(
        "{:016x}{:016x}",
        state.rng.between(0, u64::MAX - 1),
        state.rng.between(0, u64::MAX - 1)
    );
    let n = new.card_number.len();
    let token = CardToken {
        id: id.clone(),
        first_six: new.card_number[..6].to_owned(),
        last_four: new.card_number[n - 4..].to_owned(),
        expiration_month: new.expiration_month,
        expiration_year: new.expiration_year,
        security_code_length: new.security_code_length,
        card_number_length: n,
        holder_name: new.holder_name,
        holder_identification: new.holder_identification,
        date_created: clock::now(),
        used: false,
    };
    let body = token.json();
    state.providers[p].mp.card_tokens.insert(id, token);
    Reply::json(201, &body)
}

/// The control API's end of a pending Pix: paid (`approved`/`accredited`) or expired unpaid
/// (`cancelled`/`expired`, what Mercado Pago does at `date_of_expiration`); the notification follows.
pub(crate) fn settle_pix(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: &str,
    paid: bool,
) -> Result<Value, String> {
    let id = parse_id(id)?;
    update_payment(state, edge_url, p, id, |payment| {
        if payment.payment_method_id != "pix" || payment.status != "pending" {
            return Err(format!(
                "payment {id} is a {} payment in status {}, not a pending Pix",
                payment.payment_method_id, payment.status
            ));
        }
        let now = clock::now();
        if paid {
            payment.status = "approved".into();
            payment.status_detail = "accredited".into();
            payment.date_approved = Some(now);
        } else {
            payment.status = "cancelled".into();
            payment.status_detail = "expired".into();
        }
        payment.date_last_updated = now;
        Ok(())
    })
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
    fn pix_codes_end_with_their_checksum() {
        let code = pix_code(123, 1050);
        assert!(code.starts_with("000201"), "{code}");
        assert!(code.contains("540510.50"), "{code}");
        let (body, crc) = code.split_at(code.len() - 4);
        assert_eq!(format!("{:04X}", crc16_ccitt(body.as_bytes())), crc);
        // The reference check value of CRC-16/CCITT-FALSE.
        assert_eq!(crc16_ccitt(b"123456789"), 0x29B1);
    }

    #[test]
    fn card_tokens_need_a_card_and_a_holder() {
        let ok = validate_card_token(
            br#"{"card_number":"4235647728025682","expiration_month":11,"expiration_year":2030,"security_code":"123","cardholder":{"name":"APRO"}}"#,
        );
        assert!(ok.is_ok());
        for bad in [
            r#"{"card_number":"42","expiration_month":11,"expiration_year":2030,"cardholder":{"name":"APRO"}}"#,
            r#"{"card_number":"4235647728025682","expiration_month":13,"expiration_year":2030,"cardholder":{"name":"APRO"}}"#,
            r#"{"card_number":"4235647728025682","expiration_month":11,"expiration_year":2030,"cardholder":{}}"#,
            r#"{"card_number":"4235647728025682","expiration_month":11,"expiration_year":2030,"security_code":"12345","cardholder":{"name":"A"}}"#,
        ] {
            assert!(validate_card_token(bad.as_bytes()).is_err(), "{bad}");
        }
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
