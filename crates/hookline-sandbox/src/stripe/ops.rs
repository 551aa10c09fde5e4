//! Stripe operations: the validated requests ([`super::validate`] turns forms into them; nothing is saved under the
//! idempotency key when validation fails, as Stripe documents) and their execution (under the state lock, so
//! concurrent requests are serialised and a refund can never exceed what was captured). Confirming a payment
//! intent — payment methods, off-session rules, outcomes, charges — is [`super::confirm`].

use serde_json::Value;
use url::Url;

use super::book::{
    money, test_card, Customer, Dispute, PaymentIntent, PaymentMethod, Refund,
    AUTHORIZATION_LIFETIME,
};
use super::confirm::{
    check_off_session, check_owner, confirm, no_such_payment_method, resolve_method,
};
use super::errors::{self, StripeError};
use crate::reply::Reply;
use crate::state::State;

use super::emit::{emit, now_unix};
pub(crate) use super::request::*;
pub(crate) use super::validate::*;

/// Executes a validated request. Everything returned here has begun executing: it is saved under the key.
pub(crate) fn execute(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    request: Request,
    ctx: &Ctx,
) -> Reply {
    // An authorization that expired meanwhile is canceled first (its events carry no request).
    expire_authorizations(state, edge_url, p);
    let at = At {
        edge_url,
        p,
        ctx: Some(ctx),
    };
    let result = match request {
        Request::CreateIntent(new) => create_intent(state, at, new),
        Request::ConfirmIntent { id, confirmation } => {
            confirmable(state, p, &id).and_then(|()| confirm(state, at, &id, confirmation))
        }
        Request::CancelIntent { id, reason } => cancel_intent(state, at, &id, reason),
        Request::CaptureIntent {
            id,
            amount,
            metadata,
        } => capture_intent(state, at, &id, amount, metadata),
        Request::CreateRefund(new) => create_refund(state, at, new),
        Request::CreateCustomer(new) => create_customer(state, at, new),
        Request::AttachPaymentMethod { id, customer } => {
            attach(state, p, &id, &customer).map(|pm| Reply::json(200, &pm))
        }
    };
    result.unwrap_or_else(|e| e.reply())
}

fn create_intent(state: &mut State, at: At<'_>, new: NewIntent) -> Result<Reply, StripeError> {
    let p = at.p;
    // Refused before anything is created: an unknown customer or payment method, a method of another customer or
    // (off session) not saved to the intent's customer.
    if let Some(c) = &new.customer {
        if !state.providers[p].stripe.customers.contains_key(c) {
            return Err(errors::invalid(
                "resource_missing",
                format!("No such customer: '{c}'"),
                Some("customer"),
            ));
        }
    }
    if let Some(pm) = &new.payment_method {
        let method = resolve_method(state, p, pm)?;
        if new.off_session {
            check_off_session(&method, pm, new.customer.as_deref())?;
        }
        check_owner(&method, pm, new.customer.as_deref())?;
    }
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
        next_action: None,
        return_url: new.return_url.clone(),
        canceled: None,
        capture_method: new.capture_method,
        amount_capturable: 0,
        authorized_at: None,
    };
    let snapshot = intent.json();
    let book = &mut state.providers[p];
    book.stripe.intents.insert(id.clone(), intent);
    book.stripe.intent_order.push(id.clone());
    book.created(at.key(), &id, false);
    emit(state, at, "payment_intent.created", snapshot, &id);
    if new.confirm {
        let confirmation = Confirmation {
            payment_method: new.payment_method,
            off_session: new.off_session,
            return_url: new.return_url,
        };
        return confirm(state, at, &id, confirmation);
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

/// `POST /v1/payment_intents/{id}/confirm` applies only to an existing intent that has not yet succeeded (nor
/// been authorized, canceled): 400 `payment_intent_unexpected_state` with the intent otherwise.
fn confirmable(state: &State, p: usize, id: &str) -> Result<(), StripeError> {
    let intent = state.providers[p]
        .stripe
        .intents
        .get(id)
        .ok_or_else(|| errors::missing("payment_intent", id, "intent"))?;
    let message = match intent.status {
        "succeeded" => "You cannot confirm this PaymentIntent because it has already succeeded after being previously confirmed.".to_owned(),
        "canceled" | "requires_capture" => format!(
            "You cannot confirm this PaymentIntent because it has a status of {}.",
            intent.status
        ),
        _ => return Ok(()),
    };
    Err(errors::unexpected_state(message, intent.json()))
}

/// The statuses Stripe cancels a PaymentIntent from (<https://docs.stripe.com/api/payment_intents/cancel>).
const CANCELABLE: [&str; 5] = [
    "requires_payment_method",
    "requires_capture",
    "requires_confirmation",
    "requires_action",
    "processing",
];

/// `POST /v1/payment_intents/{id}/cancel`: `canceled` with `canceled_at` and the reason, and a
/// `payment_intent.canceled` event; a succeeded or already canceled intent is refused as Stripe refuses it (400
/// `payment_intent_unexpected_state`, the intent in the error), nothing changed. Canceling a `requires_capture`
/// intent is the void: its authorization is released (`amount_capturable` 0, the charge's whole amount in
/// `amount_refunded`, nothing captured).
fn cancel_intent(
    state: &mut State,
    at: At<'_>,
    id: &str,
    reason: Option<String>,
) -> Result<Reply, StripeError> {
    let intent = state.providers[at.p]
        .stripe
        .intents
        .get(id)
        .ok_or_else(|| errors::missing("payment_intent", id, "intent"))?;
    if !CANCELABLE.contains(&intent.status) {
        return Err(errors::unexpected_state(
            format!(
                "You cannot cancel this PaymentIntent because it has a status of {}. Only a PaymentIntent with one \
                 of the following statuses may be canceled: {}.",
                intent.status,
                CANCELABLE.join(", ")
            ),
            intent.json(),
        ));
    }
    let snapshot = cancel(state, at.p, id, now_unix(), reason);
    emit(state, at, "payment_intent.canceled", snapshot.clone(), id);
    Ok(Reply::json(200, &snapshot))
}

/// Cancels intent `id` at `at_unix` (a check that it may be is the caller's): an authorization is released. The
/// intent's JSON.
fn cancel(state: &mut State, p: usize, id: &str, at_unix: i64, reason: Option<String>) -> Value {
    let book = &mut state.providers[p].stripe;
    let Some(intent) = book.intents.get_mut(id) else {
        return Value::Null;
    };
    if intent.status == "requires_capture" {
        if let Some(charge) = intent
            .latest_charge
            .as_ref()
            .and_then(|c| book.charges.get_mut(c))
        {
            charge.released = charge.amount;
            charge.amount_refunded = charge.amount;
        }
    }
    intent.status = "canceled";
    intent.next_action = None;
    intent.amount_capturable = 0;
    intent.authorized_at = None;
    intent.canceled = Some((at_unix, reason));
    intent.json()
}

/// Cancels every authorization of provider `p` left uncaptured for [`AUTHORIZATION_LIFETIME`] on the sandbox
/// clock, as Stripe does: `canceled`, `cancellation_reason: "automatic"`, `payment_intent.canceled` (an event of
/// no request). Runs when the sandbox clock moves and before each request to the provider is answered.
pub(crate) fn expire_authorizations(state: &mut State, edge_url: &Url, p: usize) {
    let now = state.clock.now();
    let book = &state.providers[p].stripe;
    let mut due: Vec<(time::OffsetDateTime, String)> = book
        .intents
        .values()
        .filter(|i| i.status == "requires_capture")
        .filter_map(|i| {
            let expires = i.authorized_at? + AUTHORIZATION_LIFETIME;
            (expires <= now).then(|| (expires, i.id.clone()))
        })
        .collect();
    if due.is_empty() {
        return;
    }
    due.sort();
    let at = At {
        edge_url,
        p,
        ctx: None,
    };
    for (expires, id) in due {
        let snapshot = cancel(
            state,
            p,
            &id,
            expires.unix_timestamp(),
            Some("automatic".to_owned()),
        );
        emit(state, at, "payment_intent.canceled", snapshot, &id);
    }
}

/// `POST /v1/payment_intents/{id}/capture` (<https://docs.stripe.com/api/payment_intents/capture>): only a
/// `requires_capture` intent (else 400 `payment_intent_unexpected_state` with the intent); `amount_to_capture`
/// at most `amount_capturable` (else 400 `amount_too_large` naming it). The intent `succeeded` with
/// `amount_received` the amount captured; its charge captured, the uncaptured rest released (shown in the
/// charge's `amount_refunded`, as Stripe does); `charge.captured` and `payment_intent.succeeded`.
fn capture_intent(
    state: &mut State,
    at: At<'_>,
    id: &str,
    amount: Option<i64>,
    metadata: std::collections::BTreeMap<String, String>,
) -> Result<Reply, StripeError> {
    let txn = state.rng.id("txn", 24);
    let book = &mut state.providers[at.p].stripe;
    let intent = book
        .intents
        .get_mut(id)
        .ok_or_else(|| errors::missing("payment_intent", id, "intent"))?;
    if intent.status != "requires_capture" {
        return Err(errors::unexpected_state(
            format!(
                "This PaymentIntent could not be captured because it has a status of {}. Only a PaymentIntent with \
                 one of the following statuses may be captured: requires_capture.",
                intent.status
            ),
            intent.json(),
        ));
    }
    let capturable = intent.amount_capturable;
    let amount = amount.unwrap_or(capturable);
    if amount > capturable {
        return Err(errors::invalid(
            "amount_too_large",
            format!(
                "The amount to capture ({}) is greater than the amount capturable on this PaymentIntent ({}).",
                money(amount, &intent.currency),
                money(capturable, &intent.currency)
            ),
            Some("amount_to_capture"),
        ));
    }
    let charge_id = intent.latest_charge.clone().unwrap_or_default();
    let charge = book
        .charges
        .get_mut(&charge_id)
        .ok_or_else(|| errors::missing("charge", &charge_id, "charge"))?;
    charge.captured = true;
    charge.amount_captured = amount;
    charge.released = charge.amount - amount;
    charge.amount_refunded = charge.released;
    charge.balance_transaction = Some(txn);
    let charge_json = charge.json();
    intent.status = "succeeded";
    intent.amount_received = amount;
    intent.amount_capturable = 0;
    intent.authorized_at = None;
    intent.metadata.extend(metadata);
    let intent_json = intent.json();
    emit(state, at, "charge.captured", charge_json, &charge_id);
    emit(
        state,
        at,
        "payment_intent.succeeded",
        intent_json.clone(),
        id,
    );
    Ok(Reply::json(200, &intent_json))
}

fn create_customer(state: &mut State, at: At<'_>, new: NewCustomer) -> Result<Reply, StripeError> {
    let p = at.p;
    let id = state.rng.id("cus", 14);
    state.providers[p].stripe.customers.insert(
        id.clone(),
        Customer {
            id: id.clone(),
            email: new.email,
            name: new.name,
            description: new.description,
            metadata: new.metadata,
            created: now_unix(),
        },
    );
    if let Some(pm) = new.payment_method {
        if let Err(e) = attach(state, p, &pm, &id) {
            state.providers[p].stripe.customers.remove(&id);
            return Err(e);
        }
    }
    state.providers[p].created(at.key(), &id, false);
    let body = state.providers[p]
        .stripe
        .customers
        .get(&id)
        .map(Customer::json);
    Ok(Reply::json(200, &body.unwrap_or(Value::Null)))
}

/// Attaches a payment method to a customer: a test id is minted into a new `pm_…` saved to the customer (what
/// Stripe does with `pm_card_visa`); a saved one attached to another customer is refused.
fn attach(state: &mut State, p: usize, id: &str, customer: &str) -> Result<Value, StripeError> {
    if !state.providers[p].stripe.customers.contains_key(customer) {
        return Err(errors::invalid(
            "resource_missing",
            format!("No such customer: '{customer}'"),
            Some("customer"),
        ));
    }
    if let Some(card) = test_card(id) {
        let new_id = state.rng.id("pm", 24);
        let pm = PaymentMethod {
            id: new_id.clone(),
            card,
            customer: Some(customer.to_owned()),
            created: now_unix(),
        };
        let body = pm.json();
        state.providers[p].stripe.payment_methods.insert(new_id, pm);
        return Ok(body);
    }
    let pm = state.providers[p]
        .stripe
        .payment_methods
        .get_mut(id)
        .ok_or_else(|| no_such_payment_method(id))?;
    match &pm.customer {
        Some(owner) if owner != customer => Err(errors::invalid_uncoded(
            "The payment method you provided has already been attached to a customer.",
            Some("payment_method"),
        )),
        _ => {
            pm.customer = Some(customer.to_owned());
            Ok(pm.json())
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
    // An authorization is released by canceling its PaymentIntent, not refunded (the sandbox's refusal).
    if !charge.captured {
        return Err(errors::invalid_uncoded(
            format!(
                "Charge {charge_id} has not been captured: cancel its PaymentIntent ({}) to release the authorization.",
                charge.payment_intent
            ),
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
    book.refund_order.push(refund_id.clone());
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
    if !charge.succeeded || !charge.captured || charge.disputed {
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
