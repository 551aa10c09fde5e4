//! Stripe's objects as the sandbox keeps them, and their JSON as the API renders them.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

/// The API version the sandbox's payloads follow (`Stripe-Version`, `event.api_version`).
pub(crate) const API_VERSION: &str = "2024-06-20";

pub(crate) struct PaymentIntent {
    pub(crate) id: String,
    pub(crate) amount: i64,
    pub(crate) amount_received: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) status: &'static str,
    pub(crate) payment_method: Option<String>,
    pub(crate) created: i64,
    pub(crate) latest_charge: Option<String>,
    pub(crate) client_secret: String,
    pub(crate) last_payment_error: Option<Value>,
    /// What the customer must do (3-D Secure) while the status is `requires_action`.
    pub(crate) next_action: Option<Value>,
    /// The `return_url` given at creation or confirmation (3-D Secure redirects back to it).
    pub(crate) return_url: Option<String>,
    /// When it was canceled (Unix seconds), with the reason given.
    pub(crate) canceled: Option<(i64, Option<String>)>,
    /// `automatic` (the default), `automatic_async` (played as `automatic`) or `manual`: a manual intent whose
    /// card authorizes stops at `requires_capture` until `POST /v1/payment_intents/{id}/capture`.
    pub(crate) capture_method: &'static str,
    /// What can still be captured: the amount while `requires_capture`, else 0.
    pub(crate) amount_capturable: i64,
    /// When its authorization was made, on the sandbox clock (a manual intent in `requires_capture`): the
    /// authorization expires [`AUTHORIZATION_LIFETIME`] later.
    pub(crate) authorized_at: Option<time::OffsetDateTime>,
}

/// How long an uncaptured authorization lasts before Stripe cancels its PaymentIntent (7 days for online card
/// payments, <https://docs.stripe.com/payments/place-a-hold-on-a-payment-method>).
pub(crate) const AUTHORIZATION_LIFETIME: time::Duration = time::Duration::days(7);

impl PaymentIntent {
    pub(crate) fn json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "payment_intent",
            "amount": self.amount,
            "amount_capturable": self.amount_capturable,
            "amount_details": {"tip": {}},
            "amount_received": self.amount_received,
            "application": null,
            "application_fee_amount": null,
            "automatic_payment_methods": null,
            "canceled_at": self.canceled.as_ref().map(|(at, _)| *at),
            "cancellation_reason": self.canceled.as_ref().and_then(|(_, r)| r.clone()),
            "capture_method": self.capture_method,
            "client_secret": self.client_secret,
            "confirmation_method": "automatic",
            "created": self.created,
            "currency": self.currency,
            "customer": self.customer,
            "description": self.description,
            "invoice": null,
            "last_payment_error": self.last_payment_error,
            "latest_charge": self.latest_charge,
            "livemode": false,
            "metadata": self.metadata,
            "next_action": self.next_action,
            "on_behalf_of": null,
            "payment_method": self.payment_method,
            "payment_method_options": {},
            "payment_method_types": ["card"],
            "processing": null,
            "receipt_email": null,
            "review": null,
            "setup_future_usage": null,
            "shipping": null,
            "statement_descriptor": null,
            "statement_descriptor_suffix": null,
            "status": self.status,
            "transfer_data": null,
            "transfer_group": null,
        })
    }
}

pub(crate) struct Charge {
    pub(crate) id: String,
    pub(crate) payment_intent: String,
    pub(crate) amount: i64,
    pub(crate) amount_captured: i64,
    pub(crate) amount_refunded: i64,
    pub(crate) currency: String,
    pub(crate) succeeded: bool,
    pub(crate) created: i64,
    pub(crate) payment_method: String,
    pub(crate) customer: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) decline_code: Option<String>,
    /// A failed charge's `(failure_code, failure_message)`: the error's code (`card_declined`,
    /// `expired_card`, `authentication_required`, …) and message.
    pub(crate) failure: Option<(String, String)>,
    pub(crate) balance_transaction: Option<String>,
    pub(crate) disputed: bool,
    /// Whether the money was taken: at once (automatic capture), or when the intent was captured. A manual
    /// intent's charge is `succeeded` (authorized) but not captured until then.
    pub(crate) captured: bool,
    /// What was authorized and never captured: the rest of a partial capture, or everything of a canceled (or
    /// expired) authorization. Stripe shows it in `amount_refunded`; it is not refundable again.
    pub(crate) released: i64,
}

impl Charge {
    /// What can still be refunded: what was captured less what refunds gave back.
    pub(crate) fn remaining(&self) -> i64 {
        self.amount_captured - (self.amount_refunded - self.released)
    }

    pub(crate) fn json(&self) -> Value {
        let outcome = if self.succeeded {
            json!({"network_status": "approved_by_network", "reason": null, "risk_level": "normal",
                   "seller_message": "Payment complete.", "type": "authorized"})
        } else {
            json!({"network_status": "declined_by_network", "reason": self.decline_code, "risk_level": "normal",
                   "seller_message": "The bank did not return any further details with this decline.",
                   "type": "issuer_declined"})
        };
        json!({
            "id": self.id,
            "object": "charge",
            "amount": self.amount,
            "amount_captured": self.amount_captured,
            "amount_refunded": self.amount_refunded,
            "balance_transaction": self.balance_transaction,
            "billing_details": {"address": null, "email": null, "name": null, "phone": null},
            "captured": self.succeeded && self.captured,
            "created": self.created,
            "currency": self.currency,
            "customer": self.customer,
            "description": self.description,
            "disputed": self.disputed,
            "failure_code": self.failure.as_ref().map(|(code, _)| code),
            "failure_message": self.failure.as_ref().map(|(_, message)| message),
            "livemode": false,
            "metadata": self.metadata,
            "outcome": outcome,
            "paid": self.succeeded,
            "payment_intent": self.payment_intent,
            "payment_method": self.payment_method,
            "refunded": self.succeeded && self.amount_refunded >= self.amount,
            "status": if self.succeeded { "succeeded" } else { "failed" },
        })
    }
}

pub(crate) struct Refund {
    pub(crate) id: String,
    pub(crate) payment_intent: String,
    pub(crate) charge: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) created: i64,
    pub(crate) reason: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) balance_transaction: String,
}

impl Refund {
    pub(crate) fn json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "refund",
            "amount": self.amount,
            "balance_transaction": self.balance_transaction,
            "charge": self.charge,
            "created": self.created,
            "currency": self.currency,
            "destination_details": {"card": {"reference_status": "pending", "type": "refund"}, "type": "card"},
            "metadata": self.metadata,
            "payment_intent": self.payment_intent,
            "reason": self.reason,
            "receipt_number": null,
            "source_transfer_reversal": null,
            "status": "succeeded",
            "transfer_reversal": null,
        })
    }
}

pub(crate) struct Dispute {
    pub(crate) id: String,
    pub(crate) charge: String,
    pub(crate) payment_intent: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) status: String,
    pub(crate) created: i64,
}

impl Dispute {
    pub(crate) fn json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "dispute",
            "amount": self.amount,
            "balance_transactions": [],
            "charge": self.charge,
            "created": self.created,
            "currency": self.currency,
            "is_charge_refundable": false,
            "livemode": false,
            "metadata": {},
            "payment_intent": self.payment_intent,
            "reason": "fraudulent",
            "status": self.status,
        })
    }
}

pub(crate) struct Event {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) created: i64,
    pub(crate) object: Value,
    pub(crate) request_id: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) delivered: bool,
}

impl Event {
    pub(crate) fn json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "event",
            "api_version": API_VERSION,
            "created": self.created,
            "data": {"object": self.object},
            "livemode": false,
            "pending_webhooks": if self.delivered { 0 } else { 1 },
            "request": {"id": self.request_id, "idempotency_key": self.idempotency_key},
            "type": self.kind,
        })
    }
}

/// A customer (`POST /v1/customers`).
pub(crate) struct Customer {
    pub(crate) id: String,
    pub(crate) email: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) created: i64,
}

impl Customer {
    pub(crate) fn json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "customer",
            "address": null,
            "balance": 0,
            "created": self.created,
            "currency": null,
            "default_source": null,
            "delinquent": false,
            "description": self.description,
            "email": self.email,
            "invoice_prefix": self.id.trim_start_matches("cus_").chars().take(8).collect::<String>().to_ascii_uppercase(),
            "invoice_settings": {"custom_fields": null, "default_payment_method": null, "footer": null, "rendering_options": null},
            "livemode": false,
            "metadata": self.metadata,
            "name": self.name,
            "phone": null,
            "preferred_locales": [],
            "shipping": null,
            "tax_exempt": "none",
        })
    }
}

/// What a test card does when charged, as Stripe's test payment methods document
/// (<https://docs.stripe.com/testing>).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CardBehaviour {
    /// Charges succeed.
    Succeeds,
    /// Charges are declined with this decline code.
    Declines(&'static str),
    /// Every charge needs 3-D Secure: `requires_action` on session, `authentication_required` off session.
    Authenticates,
}

/// A test card: what Stripe's `pm_card_…` (and `tok_…`) ids stand for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TestCard {
    pub(crate) brand: &'static str,
    pub(crate) last4: &'static str,
    pub(crate) behaviour: CardBehaviour,
}

/// The test card a Stripe test payment method id stands for, if it is one (<https://docs.stripe.com/testing>).
pub(crate) fn test_card(id: &str) -> Option<TestCard> {
    use CardBehaviour::*;
    let card = |brand, last4, behaviour| {
        Some(TestCard {
            brand,
            last4,
            behaviour,
        })
    };
    match id {
        "pm_card_visa" | "tok_visa" => card("visa", "4242", Succeeds),
        "pm_card_visa_debit" | "tok_visa_debit" => card("visa", "5556", Succeeds),
        "pm_card_mastercard" | "tok_mastercard" => card("mastercard", "4444", Succeeds),
        "pm_card_amex" | "tok_amex" => card("amex", "8431", Succeeds),
        "pm_card_br" | "tok_br" => card("visa", "0002", Succeeds),
        "pm_card_chargeDeclined" | "pm_card_visa_chargeDeclined" | "tok_chargeDeclined" => {
            card("visa", "0002", Declines("generic_decline"))
        }
        "pm_card_chargeDeclinedInsufficientFunds" | "tok_chargeDeclinedInsufficientFunds" => {
            card("visa", "9995", Declines("insufficient_funds"))
        }
        "pm_card_chargeDeclinedFraudulent" | "tok_chargeDeclinedFraudulent" => {
            card("visa", "0019", Declines("fraudulent"))
        }
        "pm_card_chargeDeclinedLostCard" | "tok_chargeDeclinedLostCard" => {
            card("visa", "9987", Declines("lost_card"))
        }
        "pm_card_chargeDeclinedStolenCard" | "tok_chargeDeclinedStolenCard" => {
            card("visa", "9979", Declines("stolen_card"))
        }
        "pm_card_threeDSecure2Required" | "tok_threeDSecure2Required" => {
            card("visa", "3220", Authenticates)
        }
        "pm_card_authenticationRequired" | "tok_authenticationRequired" => {
            card("visa", "3184", Authenticates)
        }
        // Attaches to a customer, then every charge is declined (4000000000000341).
        "pm_card_chargeCustomerFail" | "tok_chargeCustomerFail" => {
            card("visa", "0341", Declines("generic_decline"))
        }
        _ => None,
    }
}

/// A decline as Stripe reports it: the error's `code`, its `decline_code` and its `message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decline {
    pub(crate) code: &'static str,
    pub(crate) decline_code: &'static str,
    pub(crate) message: &'static str,
}

/// Stripe's decline codes the sandbox knows (<https://docs.stripe.com/declines/codes>) and the error code and
/// message each comes with (<https://docs.stripe.com/testing#declined-payments>): most are `card_declined`;
/// an expired card, a wrong number or CVC, a processing error and a required authentication have their own code.
const DECLINES: &[(&str, &str, &str)] = &[
    ("generic_decline", "card_declined", "Your card was declined."),
    ("insufficient_funds", "card_declined", "Your card has insufficient funds."),
    ("lost_card", "card_declined", "Your card has been declined."),
    ("stolen_card", "card_declined", "Your card has been declined."),
    ("fraudulent", "card_declined", "Your card was declined."),
    ("do_not_honor", "card_declined", "Your card was declined."),
    ("do_not_try_again", "card_declined", "Your card was declined."),
    ("try_again_later", "card_declined", "Your card was declined."),
    ("call_issuer", "card_declined", "Your card was declined."),
    ("pickup_card", "card_declined", "Your card was declined."),
    ("restricted_card", "card_declined", "Your card was declined."),
    ("security_violation", "card_declined", "Your card was declined."),
    ("service_not_allowed", "card_declined", "Your card was declined."),
    ("transaction_not_allowed", "card_declined", "Your card was declined."),
    ("not_permitted", "card_declined", "Your card was declined."),
    ("invalid_account", "card_declined", "Your card was declined."),
    ("invalid_amount", "card_declined", "Your card was declined."),
    ("card_not_supported", "card_declined", "Your card does not support this type of purchase."),
    ("currency_not_supported", "card_declined", "Your card does not support this currency."),
    ("card_velocity_exceeded", "card_declined", "Your card was declined for making repeated attempts too frequently or exceeding its amount limit."),
    ("withdrawal_count_limit_exceeded", "card_declined", "Your card was declined."),
    ("new_account_information_available", "card_declined", "Your card was declined."),
    ("revocation_of_all_authorizations", "card_declined", "Your card was declined."),
    ("revocation_of_authorization", "card_declined", "Your card was declined."),
    ("stop_payment_order", "card_declined", "Your card was declined."),
    ("issuer_not_available", "card_declined", "Your card was declined."),
    ("reenter_transaction", "card_declined", "Your card was declined."),
    ("no_action_taken", "card_declined", "Your card was declined."),
    ("duplicate_transaction", "card_declined", "Your card was declined."),
    ("merchant_blacklist", "card_declined", "Your card was declined."),
    ("approve_with_id", "card_declined", "Your card was declined."),
    ("testmode_decline", "card_declined", "Your card was declined."),
    ("expired_card", "expired_card", "Your card has expired."),
    ("incorrect_cvc", "incorrect_cvc", "Your card's security code is incorrect."),
    ("incorrect_number", "incorrect_number", "Your card number is incorrect."),
    ("processing_error", "processing_error", "An error occurred while processing your card. Try again in a little bit."),
    ("authentication_required", "authentication_required", "Your card was declined. This transaction requires authentication."),
];

/// The decline Stripe reports for `decline_code`, if the sandbox knows it.
pub(crate) fn decline(decline_code: &str) -> Option<Decline> {
    DECLINES
        .iter()
        .find(|(d, _, _)| *d == decline_code)
        .map(|&(decline_code, code, message)| Decline {
            code,
            decline_code,
            message,
        })
}

/// The decline codes [`decline`] knows, for error messages.
pub(crate) fn decline_codes() -> impl Iterator<Item = &'static str> {
    DECLINES.iter().map(|(d, _, _)| *d)
}

/// A saved payment method: a test card minted into a `pm_…` of its own when attached to a customer, as Stripe
/// does.
pub(crate) struct PaymentMethod {
    pub(crate) id: String,
    pub(crate) card: TestCard,
    pub(crate) customer: Option<String>,
    pub(crate) created: i64,
}

impl PaymentMethod {
    pub(crate) fn json(&self) -> Value {
        payment_method_json(&self.id, &self.card, self.customer.as_deref(), self.created)
    }
}

/// A PaymentMethod object as Stripe renders it.
pub(crate) fn payment_method_json(
    id: &str,
    card: &TestCard,
    customer: Option<&str>,
    created: i64,
) -> Value {
    json!({
        "id": id,
        "object": "payment_method",
        "allow_redisplay": "unspecified",
        "billing_details": {"address": null, "email": null, "name": null, "phone": null},
        "card": {
            "brand": card.brand,
            "checks": {"address_line1_check": null, "address_postal_code_check": null, "cvc_check": "unchecked"},
            "country": "US",
            "exp_month": 12,
            "exp_year": 2034,
            "funding": "credit",
            "last4": card.last4,
            "networks": {"available": [card.brand], "preferred": null},
            "three_d_secure_usage": {"supported": true},
            "wallet": null,
        },
        "created": created,
        "customer": customer,
        "livemode": false,
        "metadata": {},
        "type": "card",
    })
}

/// One Stripe account's objects.
#[derive(Default)]
pub(crate) struct StripeBook {
    pub(crate) intents: HashMap<String, PaymentIntent>,
    /// Payment intent ids in creation order (lists and search show them newest first).
    pub(crate) intent_order: Vec<String>,
    /// Refund ids in creation order.
    pub(crate) refund_order: Vec<String>,
    pub(crate) customers: HashMap<String, Customer>,
    pub(crate) payment_methods: HashMap<String, PaymentMethod>,
    pub(crate) charges: HashMap<String, Charge>,
    pub(crate) refunds: HashMap<String, Refund>,
    pub(crate) disputes: HashMap<String, Dispute>,
    /// In creation order (the list endpoint reverses it).
    pub(crate) events: Vec<Event>,
    event_index: HashMap<String, usize>,
}

impl StripeBook {
    pub(crate) fn push_event(&mut self, event: Event) {
        self.event_index.insert(event.id.clone(), self.events.len());
        self.events.push(event);
    }

    pub(crate) fn event(&self, id: &str) -> Option<&Event> {
        self.event_index.get(id).and_then(|&i| self.events.get(i))
    }

    pub(crate) fn event_position(&self, id: &str) -> Option<usize> {
        self.event_index.get(id).copied()
    }

    pub(crate) fn mark_delivered(&mut self, id: &str) {
        if let Some(&i) = self.event_index.get(id) {
            if let Some(e) = self.events.get_mut(i) {
                e.delivered = true;
            }
        }
    }
}

/// `R$10.00`, `$10.00`, `€10.00`, else `10.00 XYZ`: how Stripe writes amounts in error messages.
pub(crate) fn money(amount: i64, currency: &str) -> String {
    let major = format!("{}.{:02}", amount / 100, amount % 100);
    match currency {
        "brl" => format!("R${major}"),
        "usd" => format!("${major}"),
        "eur" => format!("€{major}"),
        "gbp" => format!("£{major}"),
        other => format!("{major} {}", other.to_ascii_uppercase()),
    }
}
