//! Stripe operations: parameter validation (before execution: nothing is saved under the idempotency key when it
//! fails, as Stripe documents) and execution (under the state lock, so concurrent requests are serialised and a
//! refund can never exceed what was captured).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{json, Map, Value};
use url::Url;

use super::book::{money, Charge, Dispute, Event, PaymentIntent, Refund};
use super::errors::{self, StripeError};
use super::form::Form;
use crate::clock;
use crate::reply::Reply;
use crate::state::State;
use crate::webhooks::{self, NewDelivery};

/// The request being executed: its `Request-Id` and `Idempotency-Key`, echoed in the events it creates.
pub(crate) struct Ctx {
    pub(crate) request_id: String,
    pub(crate) idempotency_key: Option<String>,
}

/// Where an operation executes: provider `p`, the edge its webhooks go to, and the request it executes for
/// (`None`: a change made through the control API).
#[derive(Clone, Copy)]
struct At<'a> {
    edge_url: &'a Url,
    p: usize,
    ctx: Option<&'a Ctx>,
}

impl At<'_> {
    /// The idempotency key the objects it creates are counted under.
    fn key(&self) -> Option<&str> {
        self.ctx.and_then(|c| c.idempotency_key.as_deref())
    }
}

pub(crate) struct NewIntent {
    amount: i64,
    currency: String,
    customer: Option<String>,
    description: Option<String>,
    metadata: BTreeMap<String, String>,
    confirm: bool,
    payment_method: Option<String>,
}

pub(crate) enum RefundTarget {
    Intent(String),
    Charge(String),
}

pub(crate) struct NewRefund {
    target: RefundTarget,
    amount: Option<i64>,
    reason: Option<String>,
    metadata: BTreeMap<String, String>,
}

/// A validated request, ready to execute.
pub(crate) enum Request {
    CreateIntent(NewIntent),
    ConfirmIntent {
        id: String,
        payment_method: Option<String>,
    },
    CreateRefund(NewRefund),
}

const MIN_AMOUNT: i64 = 50;
const MAX_AMOUNT: i64 = 99_999_999;

/// The parameters of `POST /v1/payment_intents/{id}/confirm`, which creating an intent takes as well.
const CONFIRM_PARAMS: &[&str] = &[
    "expand",
    "off_session",
    "payment_method",
    "payment_method_types",
    "receipt_email",
    "return_url",
    "setup_future_usage",
];

fn text(form: &Form, name: &str) -> Option<String> {
    form.get(name)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

pub(crate) fn validate_create_intent(form: &Form) -> Result<Request, StripeError> {
    let creation_only = [
        "amount",
        "automatic_payment_methods",
        "capture_method",
        "confirm",
        "currency",
        "customer",
        "description",
        "metadata",
        "statement_descriptor",
        "statement_descriptor_suffix",
    ];
    form.check_known(&[&creation_only[..], CONFIRM_PARAMS].concat())?;
    let amount = form.amount("amount")?.ok_or_else(|| {
        errors::invalid(
            "parameter_missing",
            "Missing required param: amount.",
            Some("amount"),
        )
    })?;
    let currency = text(form, "currency").ok_or_else(|| {
        errors::invalid(
            "parameter_missing",
            "Missing required param: currency.",
            Some("currency"),
        )
    })?;
    if currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(errors::invalid_uncoded(
            format!("Invalid currency: {}.", currency.to_ascii_lowercase()),
            Some("currency"),
        ));
    }
    let currency = currency.to_ascii_lowercase();
    if amount < MIN_AMOUNT {
        return Err(errors::invalid(
            "amount_too_small",
            format!("Amount must be at least {}", money(MIN_AMOUNT, &currency)),
            Some("amount"),
        ));
    }
    if amount > MAX_AMOUNT {
        return Err(errors::invalid(
            "amount_too_large",
            format!(
                "Amount must be no more than {}",
                money(MAX_AMOUNT, &currency)
            ),
            Some("amount"),
        ));
    }
    if let Some(method) = form.get("capture_method") {
        if !matches!(method, "automatic" | "automatic_async") {
            return Err(errors::invalid_uncoded(
                format!(
                    "The sandbox supports only automatic capture, not capture_method={method}."
                ),
                Some("capture_method"),
            ));
        }
    }
    Ok(Request::CreateIntent(NewIntent {
        amount,
        currency,
        customer: text(form, "customer"),
        description: form.get("description").map(str::to_owned),
        metadata: form.metadata(),
        confirm: form.boolean("confirm")?.unwrap_or(false),
        payment_method: text(form, "payment_method"),
    }))
}

pub(crate) fn validate_confirm(id: &str, form: &Form) -> Result<Request, StripeError> {
    form.check_known(CONFIRM_PARAMS)?;
    Ok(Request::ConfirmIntent {
        id: id.to_owned(),
        payment_method: text(form, "payment_method"),
    })
}

pub(crate) fn validate_refund(form: &Form) -> Result<Request, StripeError> {
    form.check_known(&[
        "amount",
        "charge",
        "expand",
        "instructions_email",
        "metadata",
        "payment_intent",
        "reason",
        "refund_application_fee",
        "reverse_transfer",
    ])?;
    let target = match (text(form, "payment_intent"), text(form, "charge")) {
        (Some(pi), None) => RefundTarget::Intent(pi),
        (None, Some(ch)) => RefundTarget::Charge(ch),
        (Some(_), Some(_)) => {
            return Err(errors::invalid_uncoded(
                "You can only specify one of these parameters: charge, payment_intent.",
                None,
            ))
        }
        (None, None) => {
            return Err(errors::invalid(
                "parameter_missing",
                "One of the following params should be provided for this request: payment_intent or charge.",
                None,
            ))
        }
    };
    let reason = text(form, "reason");
    if let Some(r) = &reason {
        if !matches!(
            r.as_str(),
            "duplicate" | "fraudulent" | "requested_by_customer"
        ) {
            return Err(errors::invalid_uncoded(
                format!("Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer (it is '{r}')"),
                Some("reason"),
            ));
        }
    }
    Ok(Request::CreateRefund(NewRefund {
        target,
        amount: form.amount("amount")?,
        reason,
        metadata: form.metadata(),
    }))
}

/// Executes a validated request. Everything returned here has begun executing: it is saved under the key.
pub(crate) fn execute(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    request: Request,
    ctx: &Ctx,
) -> Reply {
    let at = At {
        edge_url,
        p,
        ctx: Some(ctx),
    };
    let result = match request {
        Request::CreateIntent(new) => create_intent(state, at, new),
        Request::ConfirmIntent { id, payment_method } => {
            confirmable(state, p, &id).and_then(|()| confirm(state, at, &id, payment_method))
        }
        Request::CreateRefund(new) => create_refund(state, at, new),
    };
    result.unwrap_or_else(|e| e.reply())
}

fn now_unix() -> i64 {
    clock::now().unix_timestamp()
}

/// Records an event and queues its webhook.
fn emit(state: &mut State, at: At<'_>, kind: &str, object: Value, resource_id: &str) {
    let At { edge_url, p, ctx } = at;
    let event = Event {
        id: state.rng.id("evt", 24),
        kind: kind.to_owned(),
        created: now_unix(),
        object,
        request_id: ctx.map(|c| c.request_id.clone()),
        idempotency_key: ctx.and_then(|c| c.idempotency_key.clone()),
        delivered: false,
    };
    let body = serde_json::to_string_pretty(&event.json()).unwrap_or_default();
    let new = NewDelivery {
        provider: p,
        event_id: event.id.clone(),
        event_type: event.kind.clone(),
        resource_id: resource_id.to_owned(),
        body,
        request_id: None,
        data_id: None,
    };
    state.providers[p].stripe.push_event(event);
    webhooks::enqueue(state, edge_url, new, Instant::now());
}

fn create_intent(state: &mut State, at: At<'_>, new: NewIntent) -> Result<Reply, StripeError> {
    let p = at.p;
    let id = state.rng.id("pi", 24);
    let secret = state.rng.id("secret", 24);
    let intent = PaymentIntent {
        client_secret: format!("{id}_{secret}"),
        id: id.clone(),
        amount: new.amount,
        amount_received: 0,
        currency: new.currency,
        customer: new.customer,
        description: new.description,
        metadata: new.metadata,
        status: if new.payment_method.is_some() {
            "requires_confirmation"
        } else {
            "requires_payment_method"
        },
        payment_method: None,
        created: now_unix(),
        latest_charge: None,
        last_payment_error: None,
    };
    let snapshot = intent.json();
    let book = &mut state.providers[p];
    book.stripe.intents.insert(id.clone(), intent);
    book.created(at.key(), &id, false);
    emit(state, at, "payment_intent.created", snapshot, &id);
    if new.confirm {
        return confirm(state, at, &id, new.payment_method);
    }
    if let Some(pm) = new.payment_method {
        if let Some(intent) = state.providers[p].stripe.intents.get_mut(&id) {
            intent.payment_method = Some(pm);
        }
    }
    let body = state.providers[p]
        .stripe
        .intents
        .get(&id)
        .map(PaymentIntent::json);
    Ok(Reply::json(200, &body.unwrap_or(Value::Null)))
}

/// `POST /v1/payment_intents/{id}/confirm` applies only to an existing intent that has not yet succeeded.
fn confirmable(state: &State, p: usize, id: &str) -> Result<(), StripeError> {
    let intent = state.providers[p]
        .stripe
        .intents
        .get(id)
        .ok_or_else(|| errors::missing("payment_intent", id, "intent"))?;
    if intent.status == "succeeded" {
        return Err(errors::invalid(
            "payment_intent_unexpected_state",
            "You cannot confirm this PaymentIntent because it has already succeeded after being previously confirmed.",
            None,
        ));
    }
    Ok(())
}

/// The decline a Stripe test payment method stands for.
fn test_decline(payment_method: &str) -> Option<&'static str> {
    match payment_method {
        "pm_card_chargeDeclined" | "pm_card_visa_chargeDeclined" | "tok_chargeDeclined" => {
            Some("generic_decline")
        }
        "pm_card_chargeDeclinedInsufficientFunds" | "tok_chargeDeclinedInsufficientFunds" => {
            Some("insufficient_funds")
        }
        "pm_card_chargeDeclinedFraudulent" | "tok_chargeDeclinedFraudulent" => Some("fraudulent"),
        "pm_card_chargeDeclinedLostCard" | "tok_chargeDeclinedLostCard" => Some("lost_card"),
        "pm_card_chargeDeclinedStolenCard" | "tok_chargeDeclinedStolenCard" => Some("stolen_card"),
        _ => None,
    }
}

fn decline_message(code: &str) -> &'static str {
    match code {
        "insufficient_funds" => "Your card has insufficient funds.",
        _ => "Your card was declined.",
    }
}

/// Charges the intent: one `ch_…` (succeeded or failed), the intent's new status, and their events.
fn confirm(
    state: &mut State,
    at: At<'_>,
    id: &str,
    payment_method: Option<String>,
) -> Result<Reply, StripeError> {
    let p = at.p;
    let existing_pm = state.providers[p]
        .stripe
        .intents
        .get(id)
        .and_then(|i| i.payment_method.clone());
    // Deviation: Stripe refuses to confirm without a payment method; the sandbox charges a test Visa.
    let token = payment_method
        .or(existing_pm)
        .unwrap_or_else(|| "pm_card_visa".to_owned());
    let decline = match state.providers[p].outcomes.pop_front() {
        Some(forced) if forced.status == "declined" => Some(
            forced
                .status_detail
                .unwrap_or_else(|| "generic_decline".to_owned()),
        ),
        Some(_) => None,
        None => test_decline(&token).map(str::to_owned),
    };
    let pm_id = if token.starts_with("pm_card_") || token.starts_with("tok_") {
        state.rng.id("pm", 24)
    } else {
        token
    };
    let charge_id = state.rng.id("ch", 24);
    let txn = state.rng.id("txn", 24);
    let book = &mut state.providers[p].stripe;
    let intent = book
        .intents
        .get_mut(id)
        .ok_or_else(|| errors::missing("payment_intent", id, "intent"))?;
    let success = decline.is_none();
    let charge = Charge {
        id: charge_id.clone(),
        payment_intent: id.to_owned(),
        amount: intent.amount,
        amount_captured: if success { intent.amount } else { 0 },
        amount_refunded: 0,
        currency: intent.currency.clone(),
        succeeded: success,
        created: now_unix(),
        payment_method: pm_id.clone(),
        customer: intent.customer.clone(),
        description: intent.description.clone(),
        metadata: intent.metadata.clone(),
        decline_code: decline.clone(),
        balance_transaction: success.then_some(txn),
        disputed: false,
    };
    intent.payment_method = Some(pm_id.clone());
    intent.latest_charge = Some(charge_id.clone());
    let mut card_error = None;
    if let Some(code) = &decline {
        let mut error = Map::new();
        error.insert("charge".into(), json!(charge_id));
        error.insert("code".into(), json!("card_declined"));
        error.insert("decline_code".into(), json!(code));
        error.insert(
            "doc_url".into(),
            json!("https://stripe.com/docs/error-codes/card-declined"),
        );
        error.insert("message".into(), json!(decline_message(code)));
        error.insert(
            "payment_method".into(),
            json!({"id": pm_id, "object": "payment_method", "type": "card"}),
        );
        error.insert("type".into(), json!("card_error"));
        intent.status = "requires_payment_method";
        intent.last_payment_error = Some(Value::Object(error.clone()));
        card_error = Some(error);
    } else {
        intent.status = "succeeded";
        intent.amount_received = intent.amount;
        intent.last_payment_error = None;
    }
    let intent_json = intent.json();
    let charge_json = charge.json();
    book.charges.insert(charge_id.clone(), charge);
    state.providers[p].created(at.key(), &charge_id, true);
    let (charge_event, intent_event) = if success {
        ("charge.succeeded", "payment_intent.succeeded")
    } else {
        ("charge.failed", "payment_intent.payment_failed")
    };
    emit(state, at, charge_event, charge_json, &charge_id);
    emit(state, at, intent_event, intent_json.clone(), id);
    match card_error {
        None => Ok(Reply::json(200, &intent_json)),
        Some(mut error) => {
            error.insert("payment_intent".into(), intent_json);
            Ok(Reply::json(402, &json!({ "error": error })))
        }
    }
}

fn create_refund(state: &mut State, at: At<'_>, new: NewRefund) -> Result<Reply, StripeError> {
    let p = at.p;
    let refund_id = state.rng.id("re", 24);
    let txn = state.rng.id("txn", 24);
    let book = &mut state.providers[p].stripe;
    let charge_id = match &new.target {
        RefundTarget::Intent(pi) => {
            let intent = book
                .intents
                .get(pi)
                .ok_or_else(|| errors::missing("payment_intent", pi, "payment_intent"))?;
            match (&intent.latest_charge, intent.status) {
                (Some(ch), "succeeded") => ch.clone(),
                _ => {
                    return Err(errors::invalid_uncoded(
                        format!(
                        "This PaymentIntent ({pi}) does not have a successful charge to refund."
                    ),
                        Some("payment_intent"),
                    ))
                }
            }
        }
        RefundTarget::Charge(ch) => ch.clone(),
    };
    let charge = book
        .charges
        .get_mut(&charge_id)
        .ok_or_else(|| errors::missing("charge", &charge_id, "charge"))?;
    if !charge.succeeded {
        return Err(errors::invalid_uncoded(
            format!("Charge {charge_id} has not succeeded and cannot be refunded."),
            Some("charge"),
        ));
    }
    let remaining = charge.remaining();
    if remaining <= 0 {
        return Err(errors::invalid(
            "charge_already_refunded",
            format!("Charge {charge_id} has already been refunded."),
            None,
        ));
    }
    let amount = new.amount.unwrap_or(remaining);
    if amount > remaining {
        return Err(errors::invalid(
            "amount_too_large",
            format!(
                "Refund amount ({}) is greater than unrefunded amount on charge ({})",
                money(amount, &charge.currency),
                money(remaining, &charge.currency)
            ),
            Some("amount"),
        ));
    }
    charge.amount_refunded += amount;
    let refund = Refund {
        id: refund_id.clone(),
        payment_intent: charge.payment_intent.clone(),
        charge: charge_id.clone(),
        amount,
        currency: charge.currency.clone(),
        created: now_unix(),
        reason: new.reason,
        metadata: new.metadata,
        balance_transaction: txn,
    };
    let charge_json = charge.json();
    let refund_json = refund.json();
    book.refunds.insert(refund_id.clone(), refund);
    state.providers[p].created(at.key(), &refund_id, false);
    emit(state, at, "refund.created", refund_json.clone(), &refund_id);
    emit(state, at, "charge.refunded", charge_json, &charge_id);
    Ok(Reply::json(200, &refund_json))
}

/// Opens a dispute on a payment intent's (or a charge's) successful charge — and closes it when `status` is
/// `won` or `lost` — with the `charge.dispute.*` events.
pub(crate) fn chargeback(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: &str,
    status: Option<&str>,
) -> Result<Value, String> {
    let final_status = match status {
        None | Some("needs_response") | Some("warning_needs_response") => None,
        Some(s @ ("won" | "lost")) => Some(s.to_owned()),
        Some(other) => {
            return Err(format!(
                "unknown dispute status '{other}' (needs_response, won, lost)"
            ))
        }
    };
    let at = At {
        edge_url,
        p,
        ctx: None,
    };
    let dispute_id = state.rng.id("dp", 24);
    let book = &mut state.providers[p].stripe;
    let charge_id = if id.starts_with("pi_") {
        book.intents
            .get(id)
            .and_then(|i| i.latest_charge.clone())
            .ok_or_else(|| format!("payment intent {id} does not exist or has no charge"))?
    } else {
        id.to_owned()
    };
    let charge = book
        .charges
        .get_mut(&charge_id)
        .ok_or_else(|| format!("charge {charge_id} does not exist"))?;
    if !charge.succeeded || charge.disputed {
        return Err(format!(
            "charge {charge_id} is not a successful, undisputed charge"
        ));
    }
    charge.disputed = true;
    let mut dispute = Dispute {
        id: dispute_id.clone(),
        charge: charge_id,
        payment_intent: charge.payment_intent.clone(),
        amount: charge.amount_captured,
        currency: charge.currency.clone(),
        status: "needs_response".into(),
        created: now_unix(),
    };
    let opened = dispute.json();
    let closed = final_status.map(|s| {
        dispute.status = s;
        dispute.json()
    });
    let current = dispute.json();
    book.disputes.insert(dispute_id.clone(), dispute);
    emit(state, at, "charge.dispute.created", opened, &dispute_id);
    if let Some(closed) = closed {
        emit(state, at, "charge.dispute.closed", closed, &dispute_id);
    }
    Ok(current)
}
