//! Mercado Pago operations: validation (before execution, saving nothing under the idempotency key), payment
//! creation with its outcome, refunds (never beyond what was captured: executed under the state lock), status
//! changes from the control API, and the notifications each change sends. Card tokens are [`super::tokens`],
//! customers and saved cards [`super::customers`], a recurring charge's `point_of_interaction` [`super::poi`].

use std::time::Instant;

use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use url::Url;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::book::{MpPayment, MpRefund, SavedCardRef, AUTHORIZATION_LIFETIME};
use super::customers::{self, NewCustomer};
use super::errors;
use super::poi;
use super::tokens::{self, NewToken};
use crate::clock;
use crate::pix::{pix_code, QR_PNG};
use crate::reply::Reply;
use crate::scripts::SUCCEED;
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
    /// `payer.id` when `payer.type` is `customer` (a saved card's payment names its customer).
    payer_customer: Option<String>,
    /// A recurring charge's `{"type": "SUBSCRIPTIONS", "transaction_data": {…}}`, echoed in the payment.
    point_of_interaction: Option<Value>,
    /// `"capture": false`: an approved card payment is only authorized (`authorized`/`pending_capture`).
    capture: bool,
}

/// What `PUT /v1/payments/{id}` asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PaymentUpdate {
    /// `{"capture": true, "transaction_amount"?}`: capture an authorized payment, all of it or less.
    Capture { amount: Option<i64> },
    /// `{"status": "cancelled"}`.
    Cancel,
}

/// A validated request, ready to execute.
pub(crate) enum Request {
    CreatePayment(NewPayment),
    Refund {
        payment_id: u64,
        amount: Option<i64>,
        metadata: Value,
    },
    CreateCardToken(NewToken),
    CreateCustomer(NewCustomer),
    SaveCard {
        customer_id: String,
        token: String,
    },
    Update {
        payment_id: u64,
        update: PaymentUpdate,
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
    // A reservation that expired meanwhile is cancelled first.
    expire_authorizations(state, edge_url, p);
    match request {
        Request::CreatePayment(new) => create_payment(state, edge_url, p, new, key),
        Request::Update { payment_id, update } => {
            update_by_merchant(state, edge_url, p, payment_id, update)
        }
        Request::Refund {
            payment_id,
            amount,
            metadata,
        } => refund(state, edge_url, p, payment_id, amount, metadata, key),
        Request::CreateCardToken(new) => tokens::create_token(state, p, new),
        Request::CreateCustomer(new) => customers::create_customer(state, p, new),
        Request::SaveCard { customer_id, token } => {
            customers::save_card(state, p, &customer_id, &token)
        }
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
    let (payer, payer_customer) = validate_payer(&body)?;
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
    let point_of_interaction = match body.get("point_of_interaction") {
        None | Some(Value::Null) => None,
        Some(p) => Some(poi::validate(p)?),
    };
    let capture = match body.get("capture") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(errors::bad_request(json!(1), "capture must be a boolean")),
    };
    Ok(NewPayment {
        capture,
        token,
        issuer_id,
        payer_customer,
        point_of_interaction,
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

/// The payer, and its customer id when it is a customer (`{"type": "customer", "id": "…"}`, what a payment with
/// a saved card's token sends: <https://www.mercadopago.com.br/developers/en/docs/automatic-payments/recurring-charges>).
/// Anyone else needs `payer.email` (400 cause 4050).
fn validate_payer(body: &Value) -> Result<(Value, Option<String>), Reply> {
    let payer = body.get("payer").cloned().unwrap_or(Value::Null);
    let kind = match payer.get("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if matches!(t.as_str(), "customer" | "registered" | "guest") => {
            Some(t.as_str())
        }
        Some(_) => return Err(errors::bad_request(json!(1), "payer.type is invalid")),
    };
    if kind == Some("customer") {
        let id = payer
            .get("id")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|id| !id.is_empty() && id.len() <= 64)
            .ok_or_else(|| errors::bad_request(json!(2002), "Customer not found"))?
            .to_owned();
        return Ok((payer, Some(id)));
    }
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
    Ok((payer, None))
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

/// The outcome of a new payment: the saved card's script ([`crate::SandboxControl::script_payment_method`]), else
/// forced by the control API, else the card token's holder name (a test card's), else by payment method (a card
/// approved, Pix and boletos pending).
fn outcome(
    state: &mut State,
    p: usize,
    new: &NewPayment,
    holder: Option<&str>,
    saved: Option<&SavedCardRef>,
) -> (String, String) {
    // Every payment executed with a saved card's token is one use of that card (a replay never gets here).
    let scripted = saved.and_then(|s| state.providers[p].scripts.next_use(&s.card_id));
    if let Some(outcome) = scripted {
        return if outcome == SUCCEED {
            ("approved".into(), "accredited".into())
        } else {
            ("rejected".into(), outcome)
        };
    }
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

/// What a payment's card token gives it: holder name, `card` object, saved card.
type TokenUse = (Option<String>, Option<Value>, Option<SavedCardRef>);

/// What a payment's card token gives it: the holder name (a test card's outcome), the payment's `card`, the
/// saved card it is a token of. A card token is single use and lives 7 days
/// (https://www.mercadopago.com.br/developers/en/docs/checkout-api/integration-configuration/card/integrate-via-cardform):
/// an unknown, used or stale one is refused (error 2006 "Card Token not found"). A saved card's token charges
/// that card for its customer only: the payer must be `{"type": "customer", "id": <the card's customer>}`
/// (400 cause 2034 "Invalid users involved" otherwise); the token is used up only when the payment is made.
fn use_token(state: &mut State, p: usize, new: &NewPayment) -> Result<TokenUse, Reply> {
    let book = &mut state.providers[p].mp;
    if let Some(customer) = &new.payer_customer {
        if !book.customers.contains_key(customer) {
            return Err(errors::bad_request(json!(2002), "Customer not found"));
        }
    }
    let Some(token) = &new.token else {
        return Ok((None, None, None));
    };
    let now = clock::now();
    let t = match book.card_tokens.get_mut(token) {
        Some(t) if !t.used && now - t.date_created < time::Duration::days(7) => t,
        _ => return Err(errors::bad_request(json!(2006), "Card Token not found")),
    };
    if let Some(saved) = &t.saved {
        if new.payer_customer.as_deref() != Some(saved.customer_id.as_str()) {
            return Err(errors::bad_request(json!(2034), "Invalid users involved"));
        }
    }
    t.used = true;
    Ok((
        Some(t.holder_name.clone()),
        Some(t.card_json()),
        t.saved.clone(),
    ))
}

/// Pix: the QR code the payer scans (copy-and-paste text and PNG) and the payment page, valid 24 hours by
/// default (https://www.mercadopago.com.br/developers/en/docs/checkout-api/integration-configuration/integrate-pix).
fn pix_point_of_interaction(user_id: u64, id: u64, amount: i64) -> Value {
    json!({
        "type": "PIX",
        "sub_type": null,
        "application_data": {"name": null, "version": null},
        "transaction_data": {
            "qr_code": pix_code(&format!("sandbox-{id}"), &format!("mpqr{id}"), amount),
            "qr_code_base64": STANDARD.encode(QR_PNG),
            "ticket_url": format!("https://www.mercadopago.com.br/payments/{id}/ticket?caller_id={user_id}&hash=sandbox"),
            "transaction_id": null,
            "bank_transfer_id": null,
            "financial_institution": null,
            "bank_info": {"payer": {}, "collector": {"account_holder_name": "Sandbox"}},
        },
    })
}

fn create_payment(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    new: NewPayment,
    key: Option<&str>,
) -> Reply {
    let (holder, card, saved) = match use_token(state, p, &new) {
        Ok(used) => used,
        Err(reply) => return reply,
    };
    let now = clock::now();
    let (status, status_detail) = outcome(state, p, &new, holder.as_deref(), saved.as_ref());
    let mut id = state.rng.between(10_000_000_000, 99_999_999_999);
    while state.providers[p].mp.payments.contains_key(&id) {
        id = state.rng.between(10_000_000_000, 99_999_999_999);
    }
    // `"capture": false`: an approved card is only authorized, its amount reserved on the card
    // (https://www.mercadopago.com.br/developers/en/docs/checkout-api/payment-management/capture-authorized-payment).
    let authorize_only = !new.capture && status == "approved" && is_card(&new.payment_method_id);
    let (status, status_detail) = if authorize_only {
        ("authorized".to_owned(), "pending_capture".to_owned())
    } else {
        (status, status_detail)
    };
    let pix = new.payment_method_id == "pix" && status == "pending";
    let point_of_interaction = if pix {
        Some(pix_point_of_interaction(
            state.providers[p].mp.user_id,
            id,
            new.amount,
        ))
    } else {
        new.point_of_interaction
    };
    let authorized_at = authorize_only.then(|| state.clock.now());
    let payment = MpPayment {
        captured: !authorize_only,
        authorized_at,
        date_of_expiration: pix.then(|| now + time::Duration::hours(24)),
        point_of_interaction,
        card,
        card_id: saved.map(|s| s.card_id),
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

/// The body of `PUT /v1/payments/{id}`
/// (<https://www.mercadopago.com.br/developers/en/reference/payments/_payments_id/put>): a capture
/// `{"capture": true, "transaction_amount"?}` or a cancellation `{"status": "cancelled"}`; anything else is 400
/// naming what is wrong (the sandbox plays no other update).
pub(crate) fn validate_update(bytes: &[u8]) -> Result<PaymentUpdate, Reply> {
    let body: Value = serde_json::from_slice(bytes)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| errors::bad_request(json!(1), "Params Error"))?;
    let fields = body.as_object().map(|o| o.len()).unwrap_or(0);
    let capture = body.get("capture");
    let status = body.get("status");
    match (capture, status) {
        (Some(_), Some(_)) => Err(errors::bad_request(
            json!(1),
            "capture and status cannot be updated together",
        )),
        (Some(Value::Bool(true)), None) => {
            let amount = match body.get("transaction_amount") {
                None | Some(Value::Null) => None,
                Some(v) => Some(cents(v).ok_or_else(|| {
                    errors::bad_request(json!(4037), "Invalid transaction_amount")
                })?),
            };
            let known = 1 + usize::from(body.get("transaction_amount").is_some());
            if fields > known {
                return Err(unsupported_update(
                    &body,
                    &["capture", "transaction_amount"],
                ));
            }
            Ok(PaymentUpdate::Capture { amount })
        }
        (Some(Value::Bool(false)), None) => Err(errors::bad_request(
            json!(1),
            "capture can only be set to true (to capture an authorized payment)",
        )),
        (Some(_), None) => Err(errors::bad_request(json!(1), "capture must be a boolean")),
        (None, Some(Value::String(s))) if s == "cancelled" => {
            if fields > 1 {
                return Err(unsupported_update(&body, &["status"]));
            }
            Ok(PaymentUpdate::Cancel)
        }
        (None, Some(_)) => Err(errors::bad_request(
            json!(1),
            "Invalid status: a payment can only be updated to cancelled",
        )),
        (None, None) if body.get("transaction_amount").is_some() => Err(errors::bad_request(
            json!(1),
            "transaction_amount can only be updated with capture: true",
        )),
        (None, None) => Err(unsupported_update(&body, &[])),
    }
}

/// 400 naming the first field of `body` the sandbox's `PUT /v1/payments/{id}` does not take.
fn unsupported_update(body: &Value, known: &[&str]) -> Reply {
    let field = body
        .as_object()
        .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())).cloned())
        .unwrap_or_else(|| "body".to_owned());
    let field: String = field.chars().take(64).collect();
    errors::bad_request(
        json!(1),
        &format!("Invalid parameter '{field}': a payment update takes capture (with transaction_amount) or status"),
    )
}

/// 400 cause 2063, what Mercado Pago answers an action its payment's state does not allow.
fn invalid_for_state() -> Reply {
    errors::bad_request(
        json!(2063),
        "The action requested is not valid for the current payment state",
    )
}

/// `PUT /v1/payments/{id}` by the merchant: the capture of an `authorized` payment (all of it, or
/// `transaction_amount` ≤ the authorized amount: more is 400 cause 2017 "Invalid transaction_amount for
/// update") → `approved`/`accredited`, `captured: true`, `transaction_amount` the amount captured; or the
/// cancellation of an `authorized`, `pending` or `in_process` payment → `cancelled`/`by_collector`. Any other
/// status: 400 cause 2063. 200 with the payment, and `payment.updated`.
fn update_by_merchant(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    payment_id: u64,
    update: PaymentUpdate,
) -> Reply {
    let book = &mut state.providers[p];
    let collector = book.mp.user_id;
    let Some(payment) = book.mp.payments.get_mut(&payment_id) else {
        return errors::payment_not_found();
    };
    let now = clock::now();
    match update {
        PaymentUpdate::Capture { amount } => {
            if payment.status != "authorized" {
                return invalid_for_state();
            }
            let amount = amount.unwrap_or(payment.amount);
            if amount > payment.amount {
                return errors::bad_request(json!(2017), "Invalid transaction_amount for update");
            }
            payment.amount = amount;
            payment.status = "approved".into();
            payment.status_detail = "accredited".into();
            payment.captured = true;
            payment.authorized_at = None;
            payment.date_approved = Some(now);
        }
        PaymentUpdate::Cancel => {
            if !matches!(
                payment.status.as_str(),
                "authorized" | "pending" | "in_process"
            ) {
                return invalid_for_state();
            }
            payment.status = "cancelled".into();
            payment.status_detail = "by_collector".into();
            payment.authorized_at = None;
        }
    }
    payment.date_last_updated = now;
    let body = payment.json(collector);
    notify(state, edge_url, p, payment_id, "payment.updated");
    Reply::json(200, &body)
}

/// Cancels every authorized payment of provider `p` left uncaptured for [`AUTHORIZATION_LIFETIME`] on the sandbox
/// clock: `cancelled`/`expired`, `payment.updated`. Runs when the sandbox clock moves and before each request to
/// the provider is answered.
pub(crate) fn expire_authorizations(state: &mut State, edge_url: &Url, p: usize) {
    let now = state.clock.now();
    let due: Vec<u64> = state.providers[p]
        .mp
        .payments
        .values()
        .filter(|m| m.status == "authorized")
        .filter(|m| {
            m.authorized_at
                .is_some_and(|t| t + AUTHORIZATION_LIFETIME <= now)
        })
        .map(|m| m.id)
        .collect();
    for id in due {
        if let Some(payment) = state.providers[p].mp.payments.get_mut(&id) {
            payment.status = "cancelled".into();
            payment.status_detail = "expired".into();
            payment.authorized_at = None;
            payment.date_last_updated = clock::now();
        }
        notify(state, edge_url, p, id, "payment.updated");
    }
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
