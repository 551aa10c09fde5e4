//! Stripe operations: parameter validation (before execution: nothing is saved under the idempotency key when it
//! fails, as Stripe documents) and execution (under the state lock, so concurrent requests are serialised and a
//! refund can never exceed what was captured).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{json, Map, Value};
use url::Url;

use super::book::{
    money, payment_method_json, test_card, CardBehaviour, Charge, Customer, Dispute, Event,
    PaymentIntent, PaymentMethod, Refund, TestCard,
};
use super::errors::{self, StripeError};
use crate::clock;
use crate::reply::Reply;
use crate::state::State;
use crate::webhooks::{self, NewDelivery};

pub(crate) use super::validate::*;

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
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) confirm: bool,
    pub(crate) payment_method: Option<String>,
    pub(crate) off_session: bool,
    pub(crate) return_url: Option<String>,
}

/// The confirmation parameters of `POST /v1/payment_intents/{id}/confirm` (and of a creation with
/// `confirm=true`).
pub(crate) struct Confirmation {
    pub(crate) payment_method: Option<String>,
    pub(crate) off_session: bool,
    pub(crate) return_url: Option<String>,
}

pub(crate) struct NewCustomer {
    pub(crate) email: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) payment_method: Option<String>,
}

pub(crate) enum RefundTarget {
    Intent(String),
    Charge(String),
}

pub(crate) struct NewRefund {
    pub(crate) target: RefundTarget,
    pub(crate) amount: Option<i64>,
    pub(crate) reason: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
}

/// A validated request, ready to execute.
pub(crate) enum Request {
    CreateIntent(NewIntent),
    ConfirmIntent {
        id: String,
        confirmation: Confirmation,
    },
    CreateRefund(NewRefund),
    CreateCustomer(NewCustomer),
    AttachPaymentMethod {
        id: String,
        customer: String,
    },
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
        Request::ConfirmIntent { id, confirmation } => {
            confirmable(state, p, &id).and_then(|()| confirm(state, at, &id, confirmation))
        }
        Request::CreateRefund(new) => create_refund(state, at, new),
        Request::CreateCustomer(new) => create_customer(state, at, new),
        Request::AttachPaymentMethod { id, customer } => {
            attach(state, p, &id, &customer).map(|pm| Reply::json(200, &pm))
        }
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

/// A payment method as the sandbox resolves it: its id on the charge, the test card behind it, and the customer
/// it is attached to.
struct ResolvedMethod {
    id: String,
    card: TestCard,
    customer: Option<String>,
}

/// Stripe's 400 `resource_missing` for a payment method it does not know (`No such PaymentMethod: 'pm_…'`).
fn no_such_payment_method(id: &str) -> StripeError {
    errors::invalid(
        "resource_missing",
        format!("No such PaymentMethod: '{id}'"),
        Some("payment_method"),
    )
}

/// A test id (`pm_card_visa`, `tok_visa`, …; each charge gets a fresh `pm_…`, as Stripe mints one) or a saved
/// `pm_…`; anything else is Stripe's 400 `resource_missing`.
fn resolve_method(state: &mut State, p: usize, id: &str) -> Result<ResolvedMethod, StripeError> {
    if let Some(card) = test_card(id) {
        return Ok(ResolvedMethod {
            id: state.rng.id("pm", 24),
            card,
            customer: None,
        });
    }
    state.providers[p]
        .stripe
        .payment_methods
        .get(id)
        .map(|pm| ResolvedMethod {
            id: pm.id.clone(),
            card: pm.card,
            customer: pm.customer.clone(),
        })
        .ok_or_else(|| no_such_payment_method(id))
}

/// Stripe refuses a payment method attached to one customer on a payment intent of another (or of none): it
/// may only be charged for the customer it is saved to.
fn check_owner(
    method: &ResolvedMethod,
    given: &str,
    customer: Option<&str>,
) -> Result<(), StripeError> {
    match (&method.customer, customer) {
        (Some(owner), Some(c)) if owner != c => Err(errors::invalid_uncoded(
            format!(
                "The PaymentMethod {given} does not belong to the Customer {c}. Please use the Customer that this PaymentMethod is attached to ({owner})."
            ),
            Some("payment_method"),
        )),
        (Some(owner), None) => Err(errors::invalid_uncoded(
            format!(
                "The PaymentMethod {given} is attached to Customer {owner}: provide that customer in the `customer` parameter to use it."
            ),
            Some("customer"),
        )),
        _ => Ok(()),
    }
}

fn create_intent(state: &mut State, at: At<'_>, new: NewIntent) -> Result<Reply, StripeError> {
    let p = at.p;
    // Refused before anything is created: an unknown customer or payment method.
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

fn decline_message(code: &str) -> &'static str {
    match code {
        "insufficient_funds" => "Your card has insufficient funds.",
        "lost_card" => "Your card has been declined.",
        "stolen_card" => "Your card has been declined.",
        _ => "Your card was declined.",
    }
}

/// How one confirmation ends.
enum Attempt {
    Succeeded,
    /// A decline: `(code, decline_code, message)`.
    Declined(&'static str, String, String),
    /// 3-D Secure is needed and the customer is there to do it.
    RequiresAction,
}

/// Confirms the intent as Stripe does (<https://docs.stripe.com/api/payment_intents/confirm>): without a payment
/// method, 400 `payment_intent_unexpected_state`; an unknown one, 400 `resource_missing`; then a forced outcome
/// ([`crate::SandboxControl::push_outcome`]) or the test card decides: success (a `ch_…`), a decline (402
/// `card_error` with the intent, a failed `ch_…`), or 3-D Secure — `requires_action` with `next_action` on
/// session, 402 `authentication_required` off session (https://docs.stripe.com/testing#regulatory-cards).
fn confirm(
    state: &mut State,
    at: At<'_>,
    id: &str,
    confirmation: Confirmation,
) -> Result<Reply, StripeError> {
    let p = at.p;
    let (existing_pm, customer) = state.providers[p]
        .stripe
        .intents
        .get(id)
        .map(|i| (i.payment_method.clone(), i.customer.clone()))
        .ok_or_else(|| errors::missing("payment_intent", id, "intent"))?;
    let Some(given) = confirmation.payment_method.or(existing_pm) else {
        let intent = state.providers[p]
            .stripe
            .intents
            .get(id)
            .map(PaymentIntent::json);
        let mut e = errors::invalid(
            "payment_intent_unexpected_state",
            "You cannot confirm this PaymentIntent because it's missing a payment method. You can either update the PaymentIntent with a payment method and then confirm it again, or confirm it again directly with a payment method.",
            None,
        );
        e.extra
            .insert("payment_intent".into(), intent.unwrap_or(Value::Null));
        return Err(e);
    };
    let method = resolve_method(state, p, &given)?;
    check_owner(&method, &given, customer.as_deref())?;
    let attempt = match state.providers[p].outcomes.pop_front() {
        Some(forced) if forced.status == "declined" => {
            let code = forced
                .status_detail
                .unwrap_or_else(|| "generic_decline".to_owned());
            let message = decline_message(&code).to_owned();
            Attempt::Declined("card_declined", code, message)
        }
        Some(_) => Attempt::Succeeded,
        None => match method.card.behaviour {
            CardBehaviour::Succeeds => Attempt::Succeeded,
            CardBehaviour::Declines(code) => Attempt::Declined(
                "card_declined",
                code.to_owned(),
                decline_message(code).to_owned(),
            ),
            CardBehaviour::Authenticates if confirmation.off_session => Attempt::Declined(
                "authentication_required",
                "authentication_required".to_owned(),
                "Your card was declined. This transaction requires authentication.".to_owned(),
            ),
            CardBehaviour::Authenticates => Attempt::RequiresAction,
        },
    };
    let return_url = confirmation.return_url;
    match attempt {
        Attempt::RequiresAction => {
            let source = state.rng.id("src", 24);
            let intent = state.providers[p]
                .stripe
                .intents
                .get_mut(id)
                .ok_or_else(|| errors::missing("payment_intent", id, "intent"))?;
            if return_url.is_some() {
                intent.return_url = return_url;
            }
            let auth_url = format!(
                "https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_sandbox&payment_intent={id}&source={source}"
            );
            intent.payment_method = Some(method.id.clone());
            intent.status = "requires_action";
            intent.last_payment_error = None;
            // With a return_url Stripe redirects the customer (redirect_to_url); without one the client's
            // Stripe.js/mobile SDK handles the challenge (use_stripe_sdk)
            // (https://docs.stripe.com/api/payment_intents/object#payment_intent_object-next_action).
            intent.next_action = Some(match &intent.return_url {
                Some(back) => json!({
                    "type": "redirect_to_url",
                    "redirect_to_url": {"return_url": back, "url": auth_url},
                }),
                None => json!({
                    "type": "use_stripe_sdk",
                    "use_stripe_sdk": {
                        "type": "three_d_secure_redirect",
                        "source": source,
                        "stripe_js": auth_url,
                    },
                }),
            });
            let intent_json = intent.json();
            emit(
                state,
                at,
                "payment_intent.requires_action",
                intent_json.clone(),
                id,
            );
            Ok(Reply::json(200, &intent_json))
        }
        Attempt::Succeeded => {
            let intent_json = charge(state, at, id, &method)?;
            Ok(Reply::json(200, &intent_json))
        }
        Attempt::Declined(code, decline_code, message) => {
            let (intent_json, error) =
                decline(state, at, id, &method, code, &decline_code, &message)?;
            let mut error = error;
            error.insert("payment_intent".into(), intent_json);
            Ok(Reply::json(402, &json!({ "error": error })))
        }
    }
}

/// Creates the charge of a payment: succeeded (`decline` is `None`) or failed with `(code, decline_code,
/// message)`; moves the intent to `succeeded` or `requires_payment_method` and emits the charge's and the
/// intent's events. Returns the intent's JSON, and the `last_payment_error` of a decline.
fn charge_attempt(
    state: &mut State,
    at: At<'_>,
    id: &str,
    method: &ResolvedMethod,
    decline: Option<(&str, &str, &str)>,
) -> Result<(Value, Option<Map<String, Value>>), StripeError> {
    let p = at.p;
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
        payment_method: method.id.clone(),
        customer: intent.customer.clone(),
        description: intent.description.clone(),
        metadata: intent.metadata.clone(),
        decline_code: decline.map(|(_, d, _)| d.to_owned()),
        balance_transaction: success.then_some(txn),
        disputed: false,
    };
    intent.payment_method = Some(method.id.clone());
    intent.latest_charge = Some(charge_id.clone());
    intent.next_action = None;
    let mut card_error = None;
    if let Some((code, decline_code, message)) = decline {
        let mut error = Map::new();
        error.insert("charge".into(), json!(charge_id));
        error.insert("code".into(), json!(code));
        error.insert("decline_code".into(), json!(decline_code));
        error.insert(
            "doc_url".into(),
            json!(format!(
                "https://stripe.com/docs/error-codes/{}",
                code.replace('_', "-")
            )),
        );
        error.insert("message".into(), json!(message));
        error.insert(
            "payment_method".into(),
            payment_method_json(
                &method.id,
                &method.card,
                method.customer.as_deref(),
                now_unix(),
            ),
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
    Ok((intent_json, card_error))
}

/// A successful charge; the intent's JSON.
fn charge(
    state: &mut State,
    at: At<'_>,
    id: &str,
    method: &ResolvedMethod,
) -> Result<Value, StripeError> {
    charge_attempt(state, at, id, method, None).map(|(intent, _)| intent)
}

/// A declined charge; the intent's JSON and the error object.
fn decline(
    state: &mut State,
    at: At<'_>,
    id: &str,
    method: &ResolvedMethod,
    code: &str,
    decline_code: &str,
    message: &str,
) -> Result<(Value, Map<String, Value>), StripeError> {
    let (intent, error) =
        charge_attempt(state, at, id, method, Some((code, decline_code, message)))?;
    Ok((intent, error.unwrap_or_default()))
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

/// The control API's end of a 3-D Secure challenge on a `requires_action` intent: passed, the payment is
/// charged (`payment_intent.succeeded`); failed, the intent goes back to `requires_payment_method` with
/// Stripe's `payment_intent_authentication_failure` (`payment_intent.payment_failed`), as Stripe's test cards do
/// (https://docs.stripe.com/payments/3d-secure/authentication-flow#testing).
pub(crate) fn complete_authentication(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: &str,
    succeed: bool,
) -> Result<Value, String> {
    let at = At {
        edge_url,
        p,
        ctx: None,
    };
    let intent = state.providers[p]
        .stripe
        .intents
        .get(id)
        .ok_or_else(|| format!("payment intent {id} does not exist"))?;
    if intent.status != "requires_action" {
        return Err(format!(
            "payment intent {id} is {}, not requires_action",
            intent.status
        ));
    }
    let pm_id = intent.payment_method.clone().unwrap_or_default();
    let method = ResolvedMethod {
        id: pm_id.clone(),
        card: state.providers[p]
            .stripe
            .payment_methods
            .get(&pm_id)
            .map(|m| m.card)
            .or_else(|| test_card("pm_card_threeDSecure2Required"))
            .ok_or("no test card")?,
        customer: intent.customer.clone(),
    };
    if succeed {
        return charge(state, at, id, &method).map_err(|e| e.message);
    }
    let intent = state.providers[p]
        .stripe
        .intents
        .get_mut(id)
        .ok_or_else(|| format!("payment intent {id} does not exist"))?;
    intent.status = "requires_payment_method";
    intent.next_action = None;
    intent.last_payment_error = Some(json!({
        "code": "payment_intent_authentication_failure",
        "doc_url": "https://stripe.com/docs/error-codes/payment-intent-authentication-failure",
        "message": "The provided PaymentMethod has failed authentication. You can provide payment_method_data or a new PaymentMethod to attempt to fulfill this PaymentIntent again.",
        "payment_method": payment_method_json(&method.id, &method.card, None, now_unix()),
        "type": "invalid_request_error",
    }));
    let intent_json = intent.json();
    emit(
        state,
        at,
        "payment_intent.payment_failed",
        intent_json.clone(),
        id,
    );
    Ok(intent_json)
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
