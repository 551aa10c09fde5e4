//! Confirming a payment intent as Stripe does (<https://docs.stripe.com/api/payment_intents/confirm>): which
//! payment method is charged and whether it may be (its customer; off session, only a method saved to the
//! intent's customer), what the charge gives (a script of the saved method, a forced outcome, or the test card),
//! and the charge itself with its events. Also the control API's end of a 3-D Secure challenge.

use serde_json::{json, Map, Value};
use url::Url;

use super::book::{
    self, payment_method_json, test_card, CardBehaviour, Charge, PaymentIntent, TestCard,
};
use super::emit::{emit, now_unix};
use super::errors::{self, StripeError};
use super::request::{At, Confirmation};
use crate::reply::Reply;
use crate::state::State;

/// A payment method as the sandbox resolves it: its id on the charge, the test card behind it, and the customer
/// it is attached to.
pub(super) struct ResolvedMethod {
    id: String,
    card: TestCard,
    customer: Option<String>,
    /// Whether it is a saved `pm_…` (a test id is minted into a fresh one for each charge): only a saved
    /// method has a script and counted uses.
    saved: bool,
}

/// Stripe's 400 `resource_missing` for a payment method it does not know (`No such PaymentMethod: 'pm_…'`).
pub(super) fn no_such_payment_method(id: &str) -> StripeError {
    errors::invalid(
        "resource_missing",
        format!("No such PaymentMethod: '{id}'"),
        Some("payment_method"),
    )
}

/// A test id (`pm_card_visa`, `tok_visa`, …; each charge gets a fresh `pm_…`, as Stripe mints one) or a saved
/// `pm_…`; anything else is Stripe's 400 `resource_missing`.
pub(super) fn resolve_method(
    state: &mut State,
    p: usize,
    id: &str,
) -> Result<ResolvedMethod, StripeError> {
    if let Some(card) = test_card(id) {
        return Ok(ResolvedMethod {
            id: state.rng.id("pm", 24),
            card,
            customer: None,
            saved: false,
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
            saved: true,
        })
        .ok_or_else(|| no_such_payment_method(id))
}

/// Stripe refuses a payment method attached to one customer on a payment intent of another (or of none): it
/// may only be charged for the customer it is saved to.
pub(super) fn check_owner(
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

/// A merchant-initiated (`off_session`) charge needs the customer and a payment method saved to it: Stripe
/// charges a saved card off session (<https://docs.stripe.com/payments/save-and-reuse>), and a card that is not
/// attached to the customer — a bare test id such as `pm_card_visa` is attached to nobody — is refused with
/// Stripe's 400 `invalid_request_error` naming `payment_method` (its wording for a method missing from the
/// customer; uncoded, as the refusal of another customer's method).
pub(super) fn check_off_session(
    method: &ResolvedMethod,
    given: &str,
    customer: Option<&str>,
) -> Result<(), StripeError> {
    let Some(c) = customer else {
        return Err(off_session_without_customer(given));
    };
    if method.customer.is_none() {
        return Err(errors::invalid_uncoded(
            format!(
                "The customer does not have a payment method with the ID {given}. The payment method must be attached to the customer."
            ),
            Some("payment_method"),
        ));
    }
    check_owner(method, given, Some(c))
}

/// The refusal of an off-session charge of an intent without a customer (also at creation, before anything
/// executes).
pub(crate) fn off_session_without_customer(given: &str) -> StripeError {
    errors::invalid_uncoded(
        format!(
            "The PaymentMethod {given} cannot be charged off session without a customer: an off-session payment charges a payment method attached to the `customer` given with it."
        ),
        Some("payment_method"),
    )
}

/// How one confirmation ends.
enum Attempt {
    Succeeded,
    /// A decline: `(code, decline_code, message)`.
    Declined(&'static str, String, String),
    /// 3-D Secure is needed and the customer is there to do it.
    RequiresAction,
}

/// The decline of `decline_code` with the error code and message Stripe pairs with it ([`book::decline`]); an
/// unknown code (a forced outcome's free text) is a `card_declined`.
fn declined(decline_code: &str) -> Attempt {
    match book::decline(decline_code) {
        Some(d) => Attempt::Declined(d.code, d.decline_code.to_owned(), d.message.to_owned()),
        None => Attempt::Declined(
            "card_declined",
            decline_code.to_owned(),
            "Your card was declined.".to_owned(),
        ),
    }
}

/// What a card-use script's outcome gives ([`crate::SandboxControl::script_payment_method`]):
/// `authentication_required` is a 3-D Secure challenge on session and a decline off session, as the card that
/// requires it behaves.
fn scripted(outcome: &str, off_session: bool) -> Attempt {
    match outcome {
        "succeed" => Attempt::Succeeded,
        "authentication_required" if !off_session => Attempt::RequiresAction,
        code => declined(code),
    }
}

/// Confirms the intent as Stripe does (<https://docs.stripe.com/api/payment_intents/confirm>): without a payment
/// method, 400 `payment_intent_unexpected_state`; an unknown one, 400 `resource_missing`; another customer's,
/// or (off session) one not saved to the intent's customer, 400 naming `payment_method`; then the saved
/// method's script ([`crate::SandboxControl::script_payment_method`]), a forced outcome
/// ([`crate::SandboxControl::push_outcome`]) or the test card decides: success (a `ch_…`), a decline (402
/// `card_error` with the intent, a failed `ch_…`), or 3-D Secure — `requires_action` with `next_action` on
/// session, 402 `authentication_required` off session (https://docs.stripe.com/testing#regulatory-cards).
pub(super) fn confirm(
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
    if confirmation.off_session {
        check_off_session(&method, &given, customer.as_deref())?;
    }
    check_owner(&method, &given, customer.as_deref())?;
    // Every confirmation that reaches a saved card is one use of it (a replay never gets here).
    let script = if method.saved {
        state.providers[p].scripts.next_use(&method.id)
    } else {
        None
    };
    let off_session = confirmation.off_session;
    let attempt = match script {
        Some(outcome) => scripted(&outcome, off_session),
        None => match state.providers[p].outcomes.pop_front() {
            Some(forced) if forced.status == "declined" => {
                declined(forced.status_detail.as_deref().unwrap_or("generic_decline"))
            }
            Some(_) => Attempt::Succeeded,
            None => match method.card.behaviour {
                CardBehaviour::Succeeds => Attempt::Succeeded,
                CardBehaviour::Declines(code) => declined(code),
                CardBehaviour::Authenticates if off_session => declined("authentication_required"),
                CardBehaviour::Authenticates => Attempt::RequiresAction,
            },
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
/// message)`; moves the intent to `succeeded` (`requires_capture` with `capture_method: manual`: the card
/// authorized, nothing captured; `payment_intent.amount_capturable_updated`) or `requires_payment_method` and
/// emits the charge's and the intent's events. Returns the intent's JSON, and the `last_payment_error` of a decline.
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
    let authorized_at = state.clock.now();
    let book = &mut state.providers[p].stripe;
    let intent = book
        .intents
        .get_mut(id)
        .ok_or_else(|| errors::missing("payment_intent", id, "intent"))?;
    let success = decline.is_none();
    // A manual intent's card is only authorized: the charge succeeds uncaptured, the intent waits for a capture.
    let authorize_only = success && intent.capture_method == "manual";
    let captured = success && !authorize_only;
    let charge = Charge {
        id: charge_id.clone(),
        payment_intent: id.to_owned(),
        amount: intent.amount,
        amount_captured: if captured { intent.amount } else { 0 },
        amount_refunded: 0,
        currency: intent.currency.clone(),
        succeeded: success,
        created: now_unix(),
        payment_method: method.id.clone(),
        customer: intent.customer.clone(),
        description: intent.description.clone(),
        metadata: intent.metadata.clone(),
        decline_code: decline.map(|(_, d, _)| d.to_owned()),
        failure: decline.map(|(code, _, message)| (code.to_owned(), message.to_owned())),
        balance_transaction: captured.then_some(txn),
        disputed: false,
        captured,
        released: 0,
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
    } else if authorize_only {
        intent.status = "requires_capture";
        intent.amount_capturable = intent.amount;
        intent.authorized_at = Some(authorized_at);
        intent.last_payment_error = None;
    } else {
        intent.status = "succeeded";
        intent.amount_received = intent.amount;
        intent.last_payment_error = None;
    }
    let intent_json = intent.json();
    let charge_json = charge.json();
    book.charges.insert(charge_id.clone(), charge);
    state.providers[p].created(at.key(), &charge_id, true);
    let (charge_event, intent_event) = if authorize_only {
        (
            "charge.succeeded",
            "payment_intent.amount_capturable_updated",
        )
    } else if success {
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
        saved: false,
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
