//! `payments::normalize`: provider payloads → payment facts.
//!
//! Fixtures are modelled on real deliveries (Stripe API 2022-11-15 and 2025-03-31 event shapes, the Pagar.me v4
//! postback from the pagarme-ruby test suite, a Mercado Pago `payment.updated` notification), trimmed to the
//! fields that matter plus enough noise to show the rest is ignored.

use hookline_payments::model::*;
use hookline_payments::normalize::{normalize, MAX_AMOUNT};
use hookline_signature::Scheme;
use proptest::prelude::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------------

/// A Stripe event envelope around `object`, as Stripe delivers it.
fn stripe_event(ty: &str, object: Value) -> String {
    json!({
        "id": "evt_3MtwBwLkdIwHu7ix0Vu2Dd1k",
        "object": "event",
        "api_version": "2022-11-15",
        "created": 1_680_064_028,
        "data": { "object": object, "previous_attributes": null },
        "livemode": false,
        "pending_webhooks": 1,
        "request": { "id": "req_9Xnd0lVQBKV6aW", "idempotency_key": "5d1c2b3a-52f4-4a1e-9d0e-6b0c1f2f9a51" },
        "type": ty
    })
    .to_string()
}

/// Normalizes a Stripe body, passing the type the edge would have extracted from it.
fn stripe(body: &str) -> Result<Vec<PaymentFact>, PermanentError> {
    let ty = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned));
    normalize(Scheme::Stripe, ty.as_deref(), body.as_bytes())
}

fn stripe_ok(ty: &str, object: Value) -> Vec<PaymentFact> {
    stripe(&stripe_event(ty, object)).expect("valid fixture")
}

fn stripe_err(ty: &str, object: Value) -> String {
    match stripe(&stripe_event(ty, object)) {
        Err(PermanentError(message)) => message,
        Ok(facts) => panic!("expected an error, got {facts:?}"),
    }
}

fn money(amount: i64, currency: &str) -> Money {
    Money {
        amount,
        currency: currency.to_owned(),
    }
}

fn payment(payment_ref: &str, status: PaymentStatus, amount: Option<Money>) -> PaymentFact {
    PaymentFact::Payment {
        payment_ref: payment_ref.to_owned(),
        status,
        amount,
        failure: None,
    }
}

fn ignored(reason: &str) -> Vec<PaymentFact> {
    vec![PaymentFact::Ignored {
        reason: reason.to_owned(),
    }]
}

fn is_ignored(facts: &[PaymentFact]) -> bool {
    matches!(facts, [PaymentFact::Ignored { .. }])
}

fn assert_err_starts(result: Result<Vec<PaymentFact>, PermanentError>, prefix: &str) {
    match result {
        Err(PermanentError(message)) => assert!(
            message.starts_with(prefix),
            "error {message:?} does not start with {prefix:?}"
        ),
        Ok(facts) => panic!("expected an error starting with {prefix:?}, got {facts:?}"),
    }
}

/// A payment intent as in `payment_intent.*` events.
fn payment_intent(status: &str, amount: i64, amount_received: i64) -> Value {
    json!({
        "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": 0,
        "amount_details": { "tip": {} },
        "amount_received": amount_received,
        "application": null,
        "automatic_payment_methods": { "enabled": true },
        "canceled_at": null,
        "capture_method": "automatic",
        "client_secret": "pi_3MtwBwLkdIwHu7ix28a3tqPa_secret_YrKJUKribcBjcG8HVhfZluoGH",
        "confirmation_method": "automatic",
        "created": 1_680_800_504,
        "currency": "usd",
        "customer": "cus_NffrFeUfNV2Hib",
        "description": null,
        "last_payment_error": null,
        "latest_charge": "ch_3MtwBwLkdIwHu7ix28mN1Yfb",
        "livemode": false,
        "metadata": { "order_id": "6735" },
        "payment_method": "pm_1MtwBwLkdIwHu7ixHr1yGwXp",
        "payment_method_types": ["card"],
        "status": status
    })
}

/// A charge as in `charge.*` events (API 2022-11-15: no embedded refunds list).
fn charge() -> Value {
    json!({
        "id": "ch_3MmlLrLkdIwHu7ix0snN0B15",
        "object": "charge",
        "amount": 1099,
        "amount_captured": 1099,
        "amount_refunded": 0,
        "balance_transaction": "txn_3MmlLrLkdIwHu7ix0uke3Ezy",
        "billing_details": { "address": { "country": "US" }, "email": null, "name": null },
        "captured": true,
        "created": 1_679_090_539,
        "currency": "usd",
        "customer": null,
        "disputed": false,
        "livemode": false,
        "metadata": {},
        "outcome": { "network_status": "approved_by_network", "risk_level": "normal", "type": "authorized" },
        "paid": true,
        "payment_intent": "pi_3MmlLrLkdIwHu7ix0bLz3k1N",
        "payment_method": "pm_1MmlLrLkdIwHu7ixIJwEWSNR",
        "refunded": false,
        "status": "succeeded"
    })
}

fn refund(id: &str, status: &str, amount: i64) -> Value {
    json!({
        "id": id,
        "object": "refund",
        "amount": amount,
        "balance_transaction": "txn_1Mr8VYLkdIwHu7ixdhY5Wq0U",
        "charge": "ch_3MmlLrLkdIwHu7ix0snN0B15",
        "created": 1_680_651_763,
        "currency": "usd",
        "metadata": {},
        "payment_intent": "pi_3MmlLrLkdIwHu7ix0bLz3k1N",
        "reason": "requested_by_customer",
        "receipt_number": null,
        "source_transfer_reversal": null,
        "status": status,
        "transfer_reversal": null
    })
}

fn dispute(status: &str) -> Value {
    json!({
        "id": "dp_1MtJUT2eZvKYlo2CNaw2HvEv",
        "object": "dispute",
        "amount": 1000,
        "balance_transactions": [],
        "charge": "ch_1AZtxr2eZvKYlo2CJDX8whov",
        "created": 1_680_651_737,
        "currency": "usd",
        "evidence": { "customer_name": null, "uncategorized_text": null },
        "evidence_details": { "due_by": 1_682_294_399, "has_evidence": false, "past_due": false, "submission_count": 0 },
        "is_charge_refundable": true,
        "livemode": false,
        "metadata": {},
        "payment_intent": "pi_1AZtxr2eZvKYlo2C7Dbvd1hI",
        "reason": "fraudulent",
        "status": status
    })
}

/// A subscription invoice as sent before API 2025-03-31 (top-level `subscription`).
fn invoice(period_start: i64, period_end: i64, amount_paid: i64) -> Value {
    json!({
        "id": "in_1MtHbELkdIwHu7ixl4OzzPMv",
        "object": "invoice",
        "account_country": "US",
        "amount_due": amount_paid,
        "amount_paid": amount_paid,
        "amount_remaining": 0,
        "attempt_count": 1,
        "attempted": true,
        "billing_reason": "subscription_cycle",
        "charge": "ch_3MtHbELkdIwHu7ix1ltxH2qy",
        "collection_method": "charge_automatically",
        "created": period_end,
        "currency": "usd",
        "customer": "cus_NeZwdNtLEOXuvB",
        "lines": {
            "object": "list",
            "data": [{
                "id": "il_1MtHbELkdIwHu7ixKAtY2QRS",
                "object": "line_item",
                "amount": amount_paid,
                "currency": "usd",
                "period": { "end": period_end + 2_592_000, "start": period_end },
                "proration": false,
                "subscription": "sub_1MtHbELkdIwHu7ixjO5GRNzY",
                "type": "subscription"
            }],
            "has_more": false,
            "url": "/v1/invoices/in_1MtHbELkdIwHu7ixl4OzzPMv/lines"
        },
        "paid": true,
        "payment_intent": "pi_3MtHbELkdIwHu7ix1KnGvsnk",
        "period_end": period_end,
        "period_start": period_start,
        "status": "paid",
        "subscription": "sub_1MtHbELkdIwHu7ixjO5GRNzY",
        "total": amount_paid
    })
}

/// A Pagar.me v4 `transaction_status_changed` postback, percent-encoded like the real sender (brackets as
/// `%5B`/`%5D`, spaces as `+`). `overrides` replace fields by name; a value of `None` drops the field.
fn pagarme_body(current_status: &str, overrides: &[(&str, Option<&str>)]) -> String {
    let mut fields: Vec<(String, String)> = [
        ("id", "406483"),
        ("fingerprint", "9e9496ef28d1154b2db9a446323db90103069330"),
        ("event", "transaction_status_changed"),
        ("old_status", "processing"),
        ("desired_status", current_status),
        ("current_status", current_status),
        ("object", "transaction"),
        ("transaction[object]", "transaction"),
        ("transaction[status]", current_status),
        ("transaction[refuse_reason]", "null"),
        ("transaction[status_reason]", "acquirer"),
        ("transaction[acquirer_name]", "pagarme"),
        ("transaction[authorization_code]", "18051"),
        ("transaction[tid]", "406483"),
        ("transaction[date_created]", "2016-03-03T19:13:31.000Z"),
        ("transaction[amount]", "1000"),
        ("transaction[authorized_amount]", "1000"),
        ("transaction[paid_amount]", "1000"),
        ("transaction[refunded_amount]", "0"),
        ("transaction[installments]", "1"),
        ("transaction[id]", "406483"),
        ("transaction[cost]", "50"),
        ("transaction[card_holder_name]", "Jose da Silva"),
        ("transaction[payment_method]", "credit_card"),
        ("transaction[subscription_id]", "null"),
        ("transaction[address][street]", "Av. Brigadeiro Faria Lima"),
        ("transaction[address][city]", "São Paulo"),
        ("transaction[customer][document_number]", "84931126235"),
        ("transaction[card][fingerprint]", "F0Y0+wH0d8DS"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (name, value) in overrides {
        fields.retain(|(k, _)| k != name);
        if let Some(value) = value {
            fields.push(((*name).to_owned(), (*value).to_owned()));
        }
    }
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

fn pagarme(body: &str) -> Result<Vec<PaymentFact>, PermanentError> {
    normalize(
        Scheme::Pagarme,
        Some("transaction_status_changed"),
        body.as_bytes(),
    )
}

fn pagarme_ok(status: &str, overrides: &[(&str, Option<&str>)]) -> Vec<PaymentFact> {
    pagarme(&pagarme_body(status, overrides)).expect("valid fixture")
}

fn brl(amount: i64) -> Money {
    money(amount, "brl")
}

// ---------------------------------------------------------------------------------------------------------------
// Stripe: payment intents and charges
// ---------------------------------------------------------------------------------------------------------------

/// Each payment_intent.* type maps to its rank, with the requested amount.
#[test]
fn stripe_payment_intent_statuses() {
    let cases = [
        (
            "payment_intent.created",
            "requires_payment_method",
            PaymentStatus::Created,
        ),
        (
            "payment_intent.processing",
            "processing",
            PaymentStatus::Processing,
        ),
        (
            "payment_intent.requires_action",
            "requires_action",
            PaymentStatus::Processing,
        ),
        (
            "payment_intent.amount_capturable_updated",
            "requires_capture",
            PaymentStatus::Authorized,
        ),
        (
            "payment_intent.payment_failed",
            "requires_payment_method",
            PaymentStatus::Failed,
        ),
        (
            "payment_intent.canceled",
            "canceled",
            PaymentStatus::Canceled,
        ),
    ];
    for (ty, status, expected) in cases {
        assert_eq!(
            stripe_ok(ty, payment_intent(status, 2000, 0)),
            vec![payment(
                "pi_3MtwBwLkdIwHu7ix28a3tqPa",
                expected,
                Some(money(2000, "usd"))
            )],
            "{ty}"
        );
    }
}

/// Succeeded carries the received amount, which is less than `amount` after a partial capture.
#[test]
fn stripe_payment_intent_succeeded_uses_amount_received() {
    assert_eq!(
        stripe_ok(
            "payment_intent.succeeded",
            payment_intent("succeeded", 2000, 1500)
        ),
        vec![payment(
            "pi_3MtwBwLkdIwHu7ix28a3tqPa",
            PaymentStatus::Succeeded,
            Some(money(1500, "usd"))
        )]
    );
}

/// Without `amount_received` (absent or null), succeeded falls back to `amount`.
#[test]
fn stripe_payment_intent_succeeded_falls_back_to_amount() {
    let mut object = payment_intent("succeeded", 2000, 0);
    object["amount_received"] = Value::Null;
    let expected = vec![payment(
        "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        PaymentStatus::Succeeded,
        Some(money(2000, "usd")),
    )];
    assert_eq!(
        stripe_ok("payment_intent.succeeded", object.clone()),
        expected
    );
    object.as_object_mut().unwrap().remove("amount_received");
    assert_eq!(stripe_ok("payment_intent.succeeded", object), expected);
}

/// Non-succeeded payments may lack an amount; currencies are lower-cased.
#[test]
fn stripe_optional_amount_and_currency_case() {
    let mut object = payment_intent("processing", 2000, 0);
    object.as_object_mut().unwrap().remove("amount");
    assert_eq!(
        stripe_ok("payment_intent.processing", object),
        vec![payment(
            "pi_3MtwBwLkdIwHu7ix28a3tqPa",
            PaymentStatus::Processing,
            None
        )]
    );
    let mut object = payment_intent("succeeded", 2000, 2000);
    object["currency"] = json!("BRL");
    assert_eq!(
        stripe_ok("payment_intent.succeeded", object),
        vec![payment(
            "pi_3MtwBwLkdIwHu7ix28a3tqPa",
            PaymentStatus::Succeeded,
            Some(money(2000, "brl"))
        )]
    );
}

/// charge.succeeded maps to the payment intent, so it converges with payment_intent.succeeded.
#[test]
fn stripe_charge_succeeded_converges_with_payment_intent() {
    let from_charge = stripe_ok("charge.succeeded", charge());
    assert_eq!(
        from_charge,
        vec![payment(
            "pi_3MmlLrLkdIwHu7ix0bLz3k1N",
            PaymentStatus::Succeeded,
            Some(money(1099, "usd"))
        )]
    );
    let mut pi = payment_intent("succeeded", 1099, 1099);
    pi["id"] = json!("pi_3MmlLrLkdIwHu7ix0bLz3k1N");
    assert_eq!(stripe_ok("payment_intent.succeeded", pi), from_charge);
}

/// A legacy charge without a payment intent is keyed by its own id; amount_captured wins over amount.
#[test]
fn stripe_charge_succeeded_without_payment_intent() {
    let mut object = charge();
    object["payment_intent"] = Value::Null;
    object["amount_captured"] = json!(900);
    assert_eq!(
        stripe_ok("charge.succeeded", object.clone()),
        vec![payment(
            "ch_3MmlLrLkdIwHu7ix0snN0B15",
            PaymentStatus::Succeeded,
            Some(money(900, "usd"))
        )]
    );
    object.as_object_mut().unwrap().remove("amount_captured");
    assert_eq!(
        stripe_ok("charge.succeeded", object),
        vec![payment(
            "ch_3MmlLrLkdIwHu7ix0snN0B15",
            PaymentStatus::Succeeded,
            Some(money(1099, "usd"))
        )]
    );
}

/// An authorised but uncaptured charge (manual capture) has moved no money: Authorized, not Succeeded.
#[test]
fn stripe_uncaptured_charge_is_authorized() {
    let mut object = charge();
    object["captured"] = json!(false);
    object["amount_captured"] = json!(0);
    assert_eq!(
        stripe_ok("charge.succeeded", object),
        vec![payment(
            "pi_3MmlLrLkdIwHu7ix0bLz3k1N",
            PaymentStatus::Authorized,
            Some(money(1099, "usd"))
        )]
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Stripe: refunds
// ---------------------------------------------------------------------------------------------------------------

/// Succeeded and pending refunds become Refund facts keyed by their re_ id.
#[test]
fn stripe_refund_events() {
    for ty in ["refund.created", "refund.updated", "charge.refund.updated"] {
        for status in ["succeeded", "pending"] {
            assert_eq!(
                stripe_ok(ty, refund("re_3MmlLrLkdIwHu7ix0oQ5vBU1", status, 500)),
                vec![PaymentFact::Refund {
                    refund_ref: "re_3MmlLrLkdIwHu7ix0oQ5vBU1".to_owned(),
                    payment_ref: "pi_3MmlLrLkdIwHu7ix0bLz3k1N".to_owned(),
                    amount: money(500, "usd"),
                }],
                "{ty} {status}"
            );
        }
    }
}

/// Failed and canceled refunds moved no money: ignored, with the reason.
#[test]
fn stripe_failed_refunds_are_ignored() {
    for status in ["failed", "canceled"] {
        assert_eq!(
            stripe_ok("refund.updated", refund("re_1", status, 500)),
            ignored(&format!(
                "refund re_1 is {status}, not succeeded or pending"
            ))
        );
    }
    assert!(is_ignored(&stripe_ok(
        "refund.failed",
        refund("re_1", "failed", 500)
    )));
}

/// A refund of a legacy charge (no payment intent) points at the charge.
#[test]
fn stripe_refund_without_payment_intent_uses_charge() {
    let mut object = refund("re_1", "succeeded", 500);
    object["payment_intent"] = Value::Null;
    assert_eq!(
        stripe_ok("refund.created", object),
        vec![PaymentFact::Refund {
            refund_ref: "re_1".to_owned(),
            payment_ref: "ch_3MmlLrLkdIwHu7ix0snN0B15".to_owned(),
            amount: money(500, "usd"),
        }]
    );
}

/// charge.refunded with an embedded list (API before 2022-11-15): one fact per counted refund.
#[test]
fn stripe_charge_refunded_with_list() {
    let mut object = charge();
    object["amount_refunded"] = json!(800);
    object["refunds"] = json!({
        "object": "list",
        "data": [
            refund("re_2", "pending", 300),
            refund("re_x", "failed", 999),
            refund("re_1", "succeeded", 500),
        ],
        "has_more": false,
        "total_count": 3,
        "url": "/v1/charges/ch_3MmlLrLkdIwHu7ix0snN0B15/refunds"
    });
    let refund_fact = |id: &str, amount| PaymentFact::Refund {
        refund_ref: id.to_owned(),
        payment_ref: "pi_3MmlLrLkdIwHu7ix0bLz3k1N".to_owned(),
        amount: money(amount, "usd"),
    };
    assert_eq!(
        stripe_ok("charge.refunded", object.clone()),
        vec![refund_fact("re_2", 300), refund_fact("re_1", 500)]
    );
    object["refunds"]["data"] = json!([refund("re_x", "canceled", 999)]);
    assert_eq!(
        stripe_ok("charge.refunded", object),
        ignored(
            "charge ch_3MmlLrLkdIwHu7ix0snN0B15 lists no succeeded or pending refund (re_x is canceled)"
        )
    );
}

/// Without a list (API 2022-11-15+) the refund's own id is unknown: the event is ignored, because each refund
/// also arrives as a `refund.*` event with its real id (a derived key would post the same money twice).
#[test]
fn stripe_charge_refunded_without_list_is_ignored() {
    let mut object = charge();
    object["amount_refunded"] = json!(1099);
    object["refunded"] = json!(true);
    assert!(is_ignored(&stripe_ok("charge.refunded", object.clone())));
    object["amount_refunded"] = json!(0);
    assert!(is_ignored(&stripe_ok("charge.refunded", object)));
}

// ---------------------------------------------------------------------------------------------------------------
// Stripe: disputes
// ---------------------------------------------------------------------------------------------------------------

fn dispute_fact(status: DisputeStatus) -> Vec<PaymentFact> {
    vec![PaymentFact::Dispute {
        dispute_ref: "dp_1MtJUT2eZvKYlo2CNaw2HvEv".to_owned(),
        payment_ref: "pi_1AZtxr2eZvKYlo2C7Dbvd1hI".to_owned(),
        amount: money(1000, "usd"),
        status,
    }]
}

/// Open disputes, unless the object already says won or lost.
#[test]
fn stripe_dispute_open_events() {
    for ty in [
        "charge.dispute.created",
        "charge.dispute.updated",
        "charge.dispute.funds_withdrawn",
    ] {
        assert_eq!(
            stripe_ok(ty, dispute("needs_response")),
            dispute_fact(DisputeStatus::Open),
            "{ty}"
        );
    }
    assert_eq!(
        stripe_ok("charge.dispute.updated", dispute("under_review")),
        dispute_fact(DisputeStatus::Open)
    );
    assert_eq!(
        stripe_ok("charge.dispute.updated", dispute("lost")),
        dispute_fact(DisputeStatus::Lost)
    );
    assert_eq!(
        stripe_ok("charge.dispute.updated", dispute("won")),
        dispute_fact(DisputeStatus::Won)
    );
}

/// Closed disputes: won, lost, and warning_closed (an inquiry that never became a chargeback) = won.
#[test]
fn stripe_dispute_closed() {
    assert_eq!(
        stripe_ok("charge.dispute.closed", dispute("won")),
        dispute_fact(DisputeStatus::Won)
    );
    assert_eq!(
        stripe_ok("charge.dispute.closed", dispute("lost")),
        dispute_fact(DisputeStatus::Lost)
    );
    assert_eq!(
        stripe_ok("charge.dispute.closed", dispute("warning_closed")),
        dispute_fact(DisputeStatus::Won)
    );
    assert_eq!(
        stripe_err("charge.dispute.closed", dispute("under_review")),
        "data.object.status: \"under_review\" is not a final dispute status (won, lost, warning_closed)"
    );
}

/// A dispute without a payment intent points at the charge.
#[test]
fn stripe_dispute_without_payment_intent_uses_charge() {
    let mut object = dispute("needs_response");
    object["payment_intent"] = Value::Null;
    assert_eq!(
        stripe_ok("charge.dispute.created", object),
        vec![PaymentFact::Dispute {
            dispute_ref: "dp_1MtJUT2eZvKYlo2CNaw2HvEv".to_owned(),
            payment_ref: "ch_1AZtxr2eZvKYlo2CJDX8whov".to_owned(),
            amount: money(1000, "usd"),
            status: DisputeStatus::Open,
        }]
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Stripe: invoices
// ---------------------------------------------------------------------------------------------------------------

/// Both invoice event types give the same fact; the billing cycle is the billed period's start (period_end).
#[test]
fn stripe_invoice_paid() {
    let expected = vec![PaymentFact::InvoicePaid {
        invoice_ref: "in_1MtHbELkdIwHu7ixl4OzzPMv".to_owned(),
        subscription_id: "sub_1MtHbELkdIwHu7ixjO5GRNzY".to_owned(),
        billing_cycle: "1682899200".to_owned(),
        amount: money(1500, "usd"),
    }];
    for ty in ["invoice.paid", "invoice.payment_succeeded"] {
        assert_eq!(
            stripe_ok(ty, invoice(1_680_307_200, 1_682_899_200, 1500)),
            expected,
            "{ty}"
        );
    }
}

/// Stripe's invoice period looks back one period: the signup invoice (t0..t0) and the first renewal (t0..t1)
/// share period_start, yet they bill different cycles and must not collapse into one.
#[test]
fn stripe_signup_and_first_renewal_are_distinct_cycles() {
    let cycle = |object: Value| match stripe_ok("invoice.paid", object).as_slice() {
        [PaymentFact::InvoicePaid { billing_cycle, .. }] => billing_cycle.clone(),
        other => panic!("expected InvoicePaid, got {other:?}"),
    };
    let t0 = 1_680_307_200;
    let t1 = 1_682_899_200;
    let mut signup = invoice(t0, t0, 1500);
    signup["id"] = json!("in_signup");
    signup["billing_reason"] = json!("subscription_create");
    let renewal = invoice(t0, t1, 1500);
    assert_eq!(cycle(signup), t0.to_string());
    assert_eq!(cycle(renewal), t1.to_string());
}

/// API 2025-03-31 moved the subscription under parent.subscription_details; without period_end the first
/// line's period.start is the cycle.
#[test]
fn stripe_invoice_new_api_shape() {
    let mut object = invoice(1_680_307_200, 1_682_899_200, 1500);
    let map = object.as_object_mut().unwrap();
    map.remove("subscription");
    map.remove("period_end");
    map.insert(
        "parent".to_owned(),
        json!({
            "quote_details": null,
            "subscription_details": { "metadata": {}, "subscription": "sub_new" },
            "type": "subscription_details"
        }),
    );
    assert_eq!(
        stripe_ok("invoice.paid", object),
        vec![PaymentFact::InvoicePaid {
            invoice_ref: "in_1MtHbELkdIwHu7ixl4OzzPMv".to_owned(),
            subscription_id: "sub_new".to_owned(),
            billing_cycle: "1682899200".to_owned(),
            amount: money(1500, "usd"),
        }]
    );
}

/// One-off and zero-amount invoices are ignored.
#[test]
fn stripe_invoice_ignores() {
    let mut object = invoice(1_680_307_200, 1_682_899_200, 1500);
    object["subscription"] = Value::Null;
    assert_eq!(
        stripe_ok("invoice.paid", object),
        ignored("one-off invoice")
    );
    assert_eq!(
        stripe_ok("invoice.paid", invoice(1_680_307_200, 1_682_899_200, 0)),
        ignored("zero-amount invoice")
    );
}

/// An invoice without any period cannot be given a billing cycle.
#[test]
fn stripe_invoice_without_period_is_an_error() {
    let mut object = invoice(1_680_307_200, 1_682_899_200, 1500);
    let map = object.as_object_mut().unwrap();
    map.remove("period_end");
    map.remove("lines");
    assert!(stripe_err("invoice.paid", object).starts_with("data.object.period_end: missing"));
}

/// Unhandled types are ignored without validating their body.
#[test]
fn stripe_unhandled_type() {
    let body = r#"{"id":"evt_1","object":"event","type":"customer.created","data":{"object":"not even an object"}}"#;
    assert_eq!(
        stripe(body).unwrap(),
        ignored("unhandled stripe event type customer.created")
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Stripe: permanent errors
// ---------------------------------------------------------------------------------------------------------------

/// Bodies that are not UTF-8 JSON objects.
#[test]
fn stripe_unparseable_bodies() {
    assert_err_starts(
        normalize(Scheme::Stripe, None, b"{\"type\":\"a\xff\"}"),
        "body: not valid UTF-8 (invalid byte at offset 10)",
    );
    assert_err_starts(
        normalize(Scheme::Stripe, None, b"{\"type\":"),
        "body: not valid JSON (",
    );
    assert_err_starts(
        normalize(Scheme::Stripe, None, b"[1,2]"),
        "body: is an array, expected a JSON object",
    );
    assert_err_starts(normalize(Scheme::Stripe, None, b""), "body: not valid JSON");
    let deep = "[".repeat(100_000);
    assert_err_starts(
        normalize(Scheme::Stripe, None, deep.as_bytes()),
        "body: not valid JSON",
    );
}

/// Missing or mistyped envelope fields and ids.
#[test]
fn stripe_missing_fields() {
    assert_err_starts(stripe(r#"{"id":"evt_1","data":{}}"#), "type: missing");
    assert_err_starts(
        stripe(r#"{"id":"evt_1","type":7}"#),
        "type: is 7, expected a string",
    );
    assert_err_starts(
        stripe(r#"{"id":"evt_1","type":"charge.succeeded"}"#),
        "data: missing",
    );
    assert_err_starts(
        stripe(r#"{"id":"evt_1","type":"charge.succeeded","data":{}}"#),
        "data.object: missing",
    );
    let mut object = payment_intent("succeeded", 100, 100);
    object.as_object_mut().unwrap().remove("id");
    assert_eq!(
        stripe_err("payment_intent.succeeded", object),
        "data.object.id: missing"
    );
    let mut object = payment_intent("succeeded", 100, 100);
    object["id"] = json!("");
    assert_eq!(
        stripe_err("payment_intent.succeeded", object),
        "data.object.id: is an empty string"
    );
    let mut object = payment_intent("succeeded", 100, 100);
    object["id"] = json!("pi 1");
    assert_eq!(
        stripe_err("payment_intent.succeeded", object),
        "data.object.id: \"pi 1\" contains whitespace or control characters"
    );
    let mut object = refund("re_1", "succeeded", 100);
    object["payment_intent"] = Value::Null;
    object["charge"] = Value::Null;
    assert_eq!(
        stripe_err("refund.created", object),
        "data.object.charge: missing"
    );
    let mut object = refund("re_1", "succeeded", 100);
    object.as_object_mut().unwrap().remove("status");
    assert_eq!(
        stripe_err("refund.created", object),
        "data.object.status: missing"
    );
}

/// Amounts must be positive integers up to 10^15: no floats, strings, negatives or zero.
#[test]
fn stripe_invalid_amounts() {
    let with = |value: Value| {
        let mut object = payment_intent("succeeded", 2000, 2000);
        object["amount_received"] = value;
        stripe_err("payment_intent.succeeded", object)
    };
    assert_eq!(
        with(json!(-5)),
        "data.object.amount_received: -5 is not a positive amount"
    );
    assert_eq!(
        with(json!(0)),
        "data.object.amount_received: 0 is not a positive amount"
    );
    assert_eq!(
        with(json!(10.5)),
        "data.object.amount_received: 10.5 is not an integer amount in minor units"
    );
    assert_eq!(
        with(json!(10.0)),
        "data.object.amount_received: 10.0 is not an integer amount in minor units"
    );
    assert_eq!(
        with(json!("2000")),
        "data.object.amount_received: the string \"2000\" is not an integer amount in minor units"
    );
    assert_eq!(
        with(json!(true)),
        "data.object.amount_received: the boolean true is not an integer amount in minor units"
    );
    assert_eq!(
        with(json!(MAX_AMOUNT + 1)),
        "data.object.amount_received: 1000000000000001 exceeds the maximum amount 1000000000000000"
    );
    assert_eq!(
        with(json!(u64::MAX)),
        "data.object.amount_received: 18446744073709551615 is too large for amount in minor units"
    );
    // Optional amounts are still validated when present.
    let mut object = payment_intent("processing", 2000, 0);
    object["amount"] = json!(-1);
    assert_eq!(
        stripe_err("payment_intent.processing", object),
        "data.object.amount: -1 is not a positive amount"
    );
    // Totals where 0 is meaningful still refuse negatives.
    let mut object = invoice(1, 2, 0);
    object["amount_paid"] = json!(-100);
    assert_eq!(
        stripe_err("invoice.paid", object),
        "data.object.amount_paid: -100 is not a positive amount"
    );
    // The maximum itself is accepted.
    let mut object = payment_intent("succeeded", 2000, MAX_AMOUNT);
    object["amount"] = json!(MAX_AMOUNT);
    assert!(stripe(&stripe_event("payment_intent.succeeded", object)).is_ok());
}

/// Currencies must be three letters.
#[test]
fn stripe_invalid_currencies() {
    let with = |value: Value| {
        let mut object = refund("re_1", "succeeded", 100);
        object["currency"] = value;
        stripe_err("refund.created", object)
    };
    assert_eq!(
        with(json!("us")),
        "data.object.currency: \"us\" is not a 3-letter currency code"
    );
    assert_eq!(
        with(json!("u5d")),
        "data.object.currency: \"u5d\" is not a 3-letter currency code"
    );
    assert_eq!(
        with(json!(840)),
        "data.object.currency: is 840, expected a string"
    );
    assert_eq!(with(Value::Null), "data.object.currency: missing");
    let mut object = payment_intent("processing", 2000, 0);
    object.as_object_mut().unwrap().remove("currency");
    assert_eq!(
        stripe_err("payment_intent.processing", object),
        "data.object.currency: missing"
    );
}

/// An object of the wrong kind for the event type, or an ingest type that disagrees with the body.
#[test]
fn stripe_inconsistent_events() {
    assert_eq!(
        stripe_err("payment_intent.succeeded", charge()),
        "data.object.object: \"charge\" is not a payment_intent, as event type payment_intent.succeeded requires"
    );
    let body = stripe_event("charge.succeeded", charge());
    assert_err_starts(
        normalize(Scheme::Stripe, Some("charge.refunded"), body.as_bytes()),
        "type: \"charge.succeeded\" differs from the event type \"charge.refunded\" recorded at ingest",
    );
    assert!(normalize(Scheme::Stripe, None, body.as_bytes()).is_ok());
}

/// A list item of the wrong type is named by index.
#[test]
fn stripe_refund_list_errors_name_the_index() {
    let mut object = charge();
    object["refunds"] =
        json!({ "object": "list", "data": [refund("re_1", "succeeded", 1), "re_2"] });
    assert_eq!(
        stripe_err("charge.refunded", object.clone()),
        "data.object.refunds.data[1]: is the string \"re_2\", expected an object"
    );
    object["refunds"]["data"] = json!([
        refund("re_1", "succeeded", 1),
        refund("re_2", "succeeded", 0)
    ]);
    assert_eq!(
        stripe_err("charge.refunded", object),
        "data.object.refunds.data[1].amount: 0 is not a positive amount"
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Pagar.me
// ---------------------------------------------------------------------------------------------------------------

/// The pagarme-ruby fixture as sent on the wire (raw brackets, unencoded spaces) is read correctly.
#[test]
fn pagarme_reference_postback() {
    let body = "id=406483&fingerprint=9e9496ef28d1154b2db9a446323db90103069330&event=transaction_status_changed&old_status=processing&desired_status=paid&current_status=paid&object=transaction&transaction[object]=transaction&transaction[status]=paid&transaction[refuse_reason]=null&transaction[amount]=1000&transaction[authorized_amount]=1000&transaction[paid_amount]=1000&transaction[refunded_amount]=0&transaction[installments]=1&transaction[id]=406483&transaction[cost]=50&transaction[card_holder_name]=Jose da Silva&transaction[address][city]=São Paulo&transaction[card][fingerprint]=F0Y0+wH0d8DS";
    assert_eq!(
        pagarme(body).unwrap(),
        vec![payment("406483", PaymentStatus::Succeeded, Some(brl(1000)))]
    );
}

/// In-flight statuses are Processing with the requested amount; refused is Failed.
#[test]
fn pagarme_in_flight_and_refused() {
    for status in ["processing", "waiting_payment", "authorized"] {
        assert_eq!(
            pagarme_ok(status, &[("transaction[paid_amount]", Some("0"))]),
            vec![payment(
                "406483",
                PaymentStatus::Processing,
                Some(brl(1000))
            )],
            "{status}"
        );
    }
    assert_eq!(
        pagarme_ok("refused", &[("transaction[paid_amount]", Some("0"))]),
        vec![payment("406483", PaymentStatus::Failed, Some(brl(1000)))]
    );
    assert_eq!(
        pagarme_ok("refused", &[("transaction[amount]", None)]),
        vec![payment("406483", PaymentStatus::Failed, None)]
    );
}

/// Paid uses paid_amount, falling back to amount.
#[test]
fn pagarme_paid() {
    assert_eq!(
        pagarme_ok("paid", &[("transaction[paid_amount]", Some("950"))]),
        vec![payment("406483", PaymentStatus::Succeeded, Some(brl(950)))]
    );
    assert_eq!(
        pagarme_ok("paid", &[("transaction[paid_amount]", None)]),
        vec![payment("406483", PaymentStatus::Succeeded, Some(brl(1000)))]
    );
    assert_eq!(
        pagarme_ok("paid", &[("transaction[paid_amount]", Some("null"))]),
        vec![payment("406483", PaymentStatus::Succeeded, Some(brl(1000)))]
    );
}

/// Refunded yields the (necessarily earlier) payment and a refund with a derived key.
#[test]
fn pagarme_refunded() {
    assert_eq!(
        pagarme_ok("refunded", &[("transaction[refunded_amount]", Some("400"))]),
        vec![
            payment("406483", PaymentStatus::Succeeded, Some(brl(1000))),
            PaymentFact::Refund {
                refund_ref: "406483:refund:400".to_owned(),
                payment_ref: "406483".to_owned(),
                amount: brl(400),
            },
        ]
    );
    assert_eq!(
        pagarme_ok("refunded", &[("transaction[refunded_amount]", None)]),
        vec![
            payment("406483", PaymentStatus::Succeeded, Some(brl(1000))),
            PaymentFact::Refund {
                refund_ref: "406483:refund:1000".to_owned(),
                payment_ref: "406483".to_owned(),
                amount: brl(1000),
            },
        ]
    );
}

/// A chargeback is a lost dispute for the paid amount.
#[test]
fn pagarme_chargedback() {
    assert_eq!(
        pagarme_ok("chargedback", &[]),
        vec![
            payment("406483", PaymentStatus::Succeeded, Some(brl(1000))),
            PaymentFact::Dispute {
                dispute_ref: "406483:chargeback".to_owned(),
                payment_ref: "406483".to_owned(),
                amount: brl(1000),
                status: DisputeStatus::Lost,
            },
        ]
    );
}

/// Pending refunds, unknown statuses, other events and other objects are ignored.
#[test]
fn pagarme_ignores() {
    assert_eq!(
        pagarme_ok("pending_refund", &[]),
        ignored("pagar.me transaction 406483 is pending_refund: refund not final")
    );
    assert_eq!(
        pagarme_ok("teleported", &[]),
        ignored("unhandled pagar.me transaction status teleported")
    );
    let body = pagarme_body(
        "paid",
        &[
            ("event", Some("subscription_status_changed")),
            ("object", Some("subscription")),
        ],
    );
    assert_eq!(
        normalize(
            Scheme::Pagarme,
            Some("subscription_status_changed"),
            body.as_bytes()
        )
        .unwrap(),
        ignored("unhandled pagar.me event subscription_status_changed")
    );
    let body = pagarme_body("paid", &[("object", Some("subscription"))]);
    assert_eq!(
        pagarme(&body).unwrap(),
        ignored("unhandled pagar.me object subscription")
    );
}

/// Strict digit parsing of form amounts.
#[test]
fn pagarme_invalid_amounts() {
    let err = |value: &str| match pagarme(&pagarme_body(
        "paid",
        &[("transaction[paid_amount]", Some(value))],
    )) {
        Err(PermanentError(message)) => message,
        Ok(facts) => panic!("{value}: expected an error, got {facts:?}"),
    };
    assert_eq!(
        err("10.50"),
        "transaction[paid_amount]: \"10.50\" is not an integer amount in cents (digits only)"
    );
    assert_eq!(
        err("-5"),
        "transaction[paid_amount]: \"-5\" is not an integer amount in cents (digits only)"
    );
    assert_eq!(
        err(" 100"),
        "transaction[paid_amount]: \" 100\" is not an integer amount in cents (digits only)"
    );
    assert_eq!(
        err("0"),
        "transaction[paid_amount]: 0 is not a positive amount"
    );
    assert_eq!(
        err("1000000000000001"),
        "transaction[paid_amount]: 1000000000000001 exceeds the maximum amount 1000000000000000"
    );
    assert_eq!(
        err("123456789012345678901234567890"),
        "transaction[paid_amount]: 123456789012345678901234567890 exceeds the maximum amount 1000000000000000"
    );
    let body = pagarme_body(
        "paid",
        &[
            ("transaction[paid_amount]", None),
            ("transaction[amount]", None),
        ],
    );
    assert_err_starts(
        pagarme(&body),
        "transaction[paid_amount]: missing, and so is transaction[amount]",
    );
}

/// Unparseable bodies, missing fields and contradictions.
#[test]
fn pagarme_errors() {
    assert_err_starts(
        normalize(Scheme::Pagarme, None, b"id=1&event=\xff"),
        "body: not valid UTF-8 form data (invalid byte at offset 11)",
    );
    let body = pagarme_body("paid", &[]) + "&transaction%5Bpaid_amount%5D=%FF";
    assert_err_starts(
        pagarme(&body),
        "transaction[paid_amount]: not valid UTF-8 after percent-decoding",
    );
    assert_err_starts(
        pagarme(&pagarme_body("paid", &[("id", None)])),
        "id: missing",
    );
    assert_err_starts(
        pagarme(&pagarme_body("paid", &[("current_status", None)])),
        "current_status: missing",
    );
    assert_err_starts(
        normalize(
            Scheme::Pagarme,
            None,
            pagarme_body("paid", &[("event", None)]).as_bytes(),
        ),
        "event: missing",
    );
    assert_err_starts(
        pagarme(&pagarme_body("paid", &[("transaction[id]", Some("999"))])),
        "transaction[id]: \"999\" differs from id \"406483\"",
    );
    let body = pagarme_body("paid", &[]) + "&current_status=refunded";
    assert_err_starts(
        pagarme(&body),
        "current_status: appears more than once with different values (\"paid\" and \"refunded\")",
    );
    assert_err_starts(
        normalize(Scheme::Pagarme, Some("other"), pagarme_body("paid", &[]).as_bytes()),
        "event: \"transaction_status_changed\" differs from the event type \"other\" recorded at ingest",
    );
    assert_err_starts(pagarme(""), "event: missing");
}

// ---------------------------------------------------------------------------------------------------------------
// Mercado Pago and other schemes
// ---------------------------------------------------------------------------------------------------------------

/// A notification only says what to fetch.
#[test]
fn mercadopago_needs_fetch() {
    let body = r#"{"action":"payment.updated","api_version":"v1","data":{"id":"123456789"},"date_created":"2021-11-01T02:02:02Z","id":"12345","live_mode":false,"type":"payment","user_id":"44444"}"#;
    assert_eq!(
        normalize(Scheme::MercadoPago, Some("payment"), body.as_bytes()).unwrap(),
        vec![PaymentFact::NeedsFetch {
            resource: "payment".to_owned(),
            resource_id: "123456789".to_owned(),
        }]
    );
    let numeric = r#"{"id":12345,"type":"merchant_order","action":"merchant_order.updated","data":{"id":987654}}"#;
    assert_eq!(
        normalize(Scheme::MercadoPago, None, numeric.as_bytes()).unwrap(),
        vec![PaymentFact::NeedsFetch {
            resource: "merchant_order".to_owned(),
            resource_id: "987654".to_owned(),
        }]
    );
}

/// Missing or unsafe resource ids are permanent errors.
#[test]
fn mercadopago_errors() {
    let run = |body: &str| normalize(Scheme::MercadoPago, None, body.as_bytes());
    assert_err_starts(
        run(r#"{"id":1,"type":"payment","data":{}}"#),
        "data.id: missing",
    );
    assert_err_starts(run(r#"{"id":1,"type":"payment"}"#), "data: missing");
    assert_err_starts(
        run(r#"{"id":1,"type":"payment","data":{"id":""}}"#),
        "data.id: is empty",
    );
    assert_err_starts(
        run(r#"{"id":1,"type":"payment","data":{"id":"../users/me"}}"#),
        "data.id: \"../users/me\" has characters other than ASCII letters, digits and '-', '_'",
    );
    assert_err_starts(
        run(r#"{"id":1,"type":"payment","data":{"id":1.5}}"#),
        "data.id: 1.5 is not a resource id",
    );
    assert_err_starts(run(r#"{"id":1,"data":{"id":"1"}}"#), "type: missing");
    assert_err_starts(run("id=1"), "body: not valid JSON");
}

/// Schemes without a payments mapping ignore any body, even an unparseable one.
#[test]
fn other_schemes_are_ignored() {
    for scheme in [
        Scheme::StandardWebhooks,
        Scheme::Svix,
        Scheme::Github,
        Scheme::Shopify,
        Scheme::Adyen,
    ] {
        assert_eq!(
            normalize(scheme, Some("x"), b"\xff").unwrap(),
            ignored(&format!(
                "no payments mapping for scheme {}",
                scheme.as_str()
            ))
        );
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------------------------

/// Every fact is well-formed: money positive, bounded, with a lower-case 3-letter currency; keys non-empty.
fn check_facts(facts: &[PaymentFact]) -> Result<(), TestCaseError> {
    fn check_money(m: &Money) -> Result<(), TestCaseError> {
        prop_assert!(m.amount > 0 && m.amount <= MAX_AMOUNT, "amount {m:?}");
        prop_assert!(
            m.currency.len() == 3 && m.currency.bytes().all(|b| b.is_ascii_lowercase()),
            "currency {m:?}"
        );
        Ok(())
    }
    prop_assert!(!facts.is_empty());
    for fact in facts {
        match fact {
            PaymentFact::Payment {
                payment_ref,
                amount,
                ..
            } => {
                prop_assert!(!payment_ref.is_empty());
                if let Some(m) = amount {
                    check_money(m)?;
                }
            }
            PaymentFact::RefundedTotal { payment_ref, total } => {
                prop_assert!(!payment_ref.is_empty());
                check_money(total)?;
            }
            PaymentFact::ChargebackReversed {
                dispute_ref,
                payment_ref,
            } => {
                prop_assert!(!dispute_ref.is_empty() && !payment_ref.is_empty());
            }
            PaymentFact::Refund {
                refund_ref,
                payment_ref,
                amount,
            } => {
                prop_assert!(!refund_ref.is_empty() && !payment_ref.is_empty());
                check_money(amount)?;
            }
            PaymentFact::Dispute {
                dispute_ref,
                payment_ref,
                amount,
                ..
            } => {
                prop_assert!(!dispute_ref.is_empty() && !payment_ref.is_empty());
                check_money(amount)?;
            }
            PaymentFact::InvoicePaid {
                invoice_ref,
                subscription_id,
                billing_cycle,
                amount,
            } => {
                prop_assert!(!invoice_ref.is_empty() && !subscription_id.is_empty());
                prop_assert!(billing_cycle.parse::<u64>().is_ok());
                check_money(amount)?;
            }
            PaymentFact::NeedsFetch {
                resource,
                resource_id,
            } => prop_assert!(!resource.is_empty() && !resource_id.is_empty()),
            PaymentFact::Ignored { reason } => prop_assert!(!reason.is_empty()),
        }
    }
    Ok(())
}

/// Runs every scheme on `body` with and without `event_type`, checking facts when there are any.
fn check_all_schemes(event_type: Option<&str>, body: &[u8]) -> Result<(), TestCaseError> {
    for scheme in Scheme::ALL {
        for ty in [None, event_type] {
            let first = normalize(scheme, ty, body);
            // Pure: the same input always gives the same answer.
            prop_assert_eq!(&first, &normalize(scheme, ty, body));
            if let Ok(facts) = first {
                check_facts(&facts)?;
            }
        }
    }
    Ok(())
}

const TYPES: &[&str] = &[
    "payment_intent.created",
    "payment_intent.processing",
    "payment_intent.requires_action",
    "payment_intent.amount_capturable_updated",
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "charge.succeeded",
    "refund.created",
    "refund.updated",
    "refund.failed",
    "charge.refund.updated",
    "charge.refunded",
    "charge.dispute.created",
    "charge.dispute.updated",
    "charge.dispute.funds_withdrawn",
    "charge.dispute.closed",
    "invoice.paid",
    "invoice.payment_succeeded",
    "customer.created",
    "payment",
];

const KEYS: &[&str] = &[
    "id",
    "object",
    "amount",
    "amount_received",
    "amount_captured",
    "amount_refunded",
    "amount_paid",
    "currency",
    "status",
    "payment_intent",
    "charge",
    "captured",
    "refunds",
    "data",
    "subscription",
    "parent",
    "subscription_details",
    "period_start",
    "period_end",
    "lines",
    "period",
    "start",
    "type",
];

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (0i64..2_000_000).prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "pi_1",
            "ch_1",
            "re_1",
            "dp_1",
            "in_1",
            "sub_1",
            "usd",
            "BRL",
            "us",
            "",
            "succeeded",
            "pending",
            "failed",
            "won",
            "lost",
            "warning_closed",
            "payment_intent",
            "charge",
            "refund",
            "dispute",
            "invoice",
            "1000",
            "a b",
        ])
        .prop_map(|s| json!(s)),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..8).prop_map(|pairs| {
                Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

/// Event-like JSON: a known (or random) type around a random object, for Stripe and Mercado Pago.
fn json_event() -> impl Strategy<Value = (String, Vec<u8>)> {
    (
        prop_oneof![
            prop::sample::select(TYPES).prop_map(str::to_owned),
            ".{0,10}"
        ],
        json_value(),
        json_value(),
    )
        .prop_map(|(ty, object, extra)| {
            let body = json!({
                "id": "evt_1",
                "type": ty,
                "action": "payment.updated",
                "data": { "object": object, "id": extra },
            });
            (ty, body.to_string().into_bytes())
        })
}

/// A realistic object for `ty`, so mutations start from a payload that maps to facts.
fn fixture_for(ty: &str) -> Value {
    match ty.split('.').next() {
        Some("payment_intent") => payment_intent("succeeded", 2000, 1500),
        Some("refund") => refund("re_1", "succeeded", 500),
        Some("invoice") => invoice(1_680_307_200, 1_682_899_200, 1500),
        _ if ty.starts_with("charge.dispute") => dispute("lost"),
        _ if ty == "charge.refund.updated" => refund("re_1", "pending", 500),
        _ if ty == "charge.refunded" => {
            let mut object = charge();
            object["refunds"] = json!({ "data": [refund("re_1", "succeeded", 500)] });
            object
        }
        _ => charge(),
    }
}

/// Valid Stripe events with up to four fields (top-level or in a nested list) replaced by hostile values.
fn mutated_stripe_event() -> impl Strategy<Value = (String, Vec<u8>)> {
    (
        prop::sample::select(&TYPES[..19]),
        prop::collection::vec(
            (prop::sample::select(KEYS), json_value(), any::<bool>()),
            0..4,
        ),
    )
        .prop_map(|(ty, mutations)| {
            let mut object = fixture_for(ty);
            for (key, value, nested) in mutations {
                let target = if nested && object["refunds"]["data"][0].is_object() {
                    &mut object["refunds"]["data"][0]
                } else {
                    &mut object
                };
                target[key] = value;
            }
            (ty.to_owned(), stripe_event(ty, object).into_bytes())
        })
}

const FORM_KEYS: &[&str] = &[
    "id",
    "event",
    "object",
    "current_status",
    "old_status",
    "transaction[id]",
    "transaction%5Bamount%5D",
    "transaction[amount]",
    "transaction[paid_amount]",
    "transaction[refunded_amount]",
];

const FORM_VALUES: &[&str] = &[
    "406483",
    "transaction_status_changed",
    "transaction",
    "paid",
    "refunded",
    "chargedback",
    "processing",
    "refused",
    "pending_refund",
    "1000",
    "0",
    "-1",
    "10.5",
    "null",
    "",
    "%FF",
    "%",
    "99999999999999999999",
    "a+b",
];

/// Form-like bodies mixing the real field names with good and bad values.
fn form_body() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            prop_oneof![
                prop::sample::select(FORM_KEYS).prop_map(str::to_owned),
                "[a-z%&=\\[\\]]{0,6}"
            ],
            prop_oneof![
                prop::sample::select(FORM_VALUES).prop_map(str::to_owned),
                ".{0,8}"
            ],
        ),
        0..12,
    )
    .prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary bytes never panic any scheme, and any facts are well-formed.
    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..256), ty in ".{0,20}") {
        check_all_schemes(Some(&ty), &body)?;
    }

    /// Event-shaped JSON with hostile field values never panics and never yields bad money.
    #[test]
    fn json_events_never_panic((ty, body) in json_event()) {
        check_all_schemes(Some(&ty), &body)?;
    }

    /// Realistic Stripe events with hostile fields never panic and never yield bad money.
    #[test]
    fn mutated_stripe_events_never_panic((ty, body) in mutated_stripe_event()) {
        check_all_schemes(Some(&ty), &body)?;
    }

    /// Form bodies with real Pagar.me field names and hostile values never panic.
    #[test]
    fn form_bodies_never_panic(body in form_body()) {
        check_all_schemes(Some("transaction_status_changed"), body.as_bytes())?;
    }

    /// Any valid Pagar.me amount round-trips exactly, whatever the status that needs one.
    #[test]
    fn pagarme_amounts_round_trip(amount in 1i64..=MAX_AMOUNT, status in prop::sample::select(vec!["paid", "refunded", "chargedback"])) {
        let text = amount.to_string();
        let body = pagarme_body(status, &[
            ("transaction[paid_amount]", Some(&text)),
            ("transaction[refunded_amount]", Some(&text)),
        ]);
        let facts = pagarme(&body).map_err(|e| TestCaseError::fail(e.0))?;
        check_facts(&facts)?;
        prop_assert_eq!(&facts[0], &payment("406483", PaymentStatus::Succeeded, Some(brl(amount))));
    }
}

/// A failed PaymentIntent's reason travels with its fact (the intent it completes shows it): the issuer's
/// `decline_code` first, else Stripe's `code` (a failed 3-D Secure challenge has no decline code).
#[test]
fn a_failed_payment_intent_carries_its_last_payment_error() {
    let mut object = payment_intent("requires_payment_method", 4100, 0);
    object["last_payment_error"] = json!({"code": "card_declined", "decline_code": "insufficient_funds", "message": "Your card has insufficient funds."});
    let facts = stripe_ok("payment_intent.payment_failed", object.clone());
    assert!(
        matches!(&facts[0], PaymentFact::Payment { status: PaymentStatus::Failed, failure: Some(f), .. }
            if f.code == "insufficient_funds" && f.message.as_deref() == Some("Your card has insufficient funds.")),
        "{facts:?}"
    );
    object["last_payment_error"] = json!({"code": "payment_intent_authentication_failure"});
    let facts = stripe_ok("payment_intent.payment_failed", object);
    assert!(
        matches!(&facts[0], PaymentFact::Payment { failure: Some(f), .. }
            if f.code == "payment_intent_authentication_failure" && f.message.is_none()),
        "{facts:?}"
    );
}
