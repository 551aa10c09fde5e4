//! Stripe's separate authorization and capture as the real API behaves
//! (<https://docs.stripe.com/payments/place-a-hold-on-a-payment-method>,
//! <https://docs.stripe.com/api/payment_intents/capture>): `capture_method=manual` stops a confirmed intent at
//! `requires_capture` (the card authorized, nothing captured); `POST …/capture` takes all or part of it once, a
//! retry with the key replays it; canceling is the void; an authorization left uncaptured for 7 days on the sandbox
//! clock is canceled (`automatic`); every `payment_intent_unexpected_state` carries the intent.

mod common;

use common::*;
use serde_json::{json, Value};

/// A confirmed manual intent of `amount` cents paid by `method`: the status and body of the create.
async fn authorize(
    sandbox: &hookline_sandbox::RunningSandbox,
    amount: i64,
    method: &str,
) -> (u16, Value) {
    let amount = amount.to_string();
    stripe_post_json(
        sandbox,
        "/v1/payment_intents",
        &[
            ("amount", &amount),
            ("currency", "brl"),
            ("capture_method", "manual"),
            ("confirm", "true"),
            ("payment_method", method),
        ],
        None,
    )
    .await
}

/// An authorized (`requires_capture`) intent of `amount` cents; its id.
async fn authorized(sandbox: &hookline_sandbox::RunningSandbox, amount: i64) -> String {
    let (status, intent) = authorize(sandbox, amount, "pm_card_visa").await;
    assert_eq!(status, 200, "{intent}");
    assert_eq!(intent["status"], "requires_capture", "{intent}");
    intent["id"].as_str().unwrap().to_owned()
}

/// The types of the events about object `id`, oldest first.
async fn events_of(sandbox: &hookline_sandbox::RunningSandbox, id: &str) -> Vec<String> {
    let (_, events) = stripe_get(sandbox, "/v1/events?limit=100").await;
    let mut kinds: Vec<String> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["data"]["object"]["id"] == id || e["data"]["object"]["payment_intent"] == id)
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    kinds.reverse();
    kinds
}

async fn charge_of(sandbox: &hookline_sandbox::RunningSandbox, intent: &Value) -> Value {
    let charge = intent["latest_charge"].as_str().expect("a charge");
    let (status, charge) = stripe_get(sandbox, &format!("/v1/charges/{charge}")).await;
    assert_eq!(status, 200, "{charge}");
    charge
}

#[tokio::test]
async fn a_manual_intent_is_authorized_then_captured_once_under_its_key() {
    let sandbox = start(settings(None)).await;
    let (status, intent) = authorize(&sandbox, 2500, "pm_card_visa").await;
    assert_eq!(status, 200, "{intent}");
    assert_eq!(intent["status"], "requires_capture");
    assert_eq!(intent["capture_method"], "manual");
    assert_eq!(intent["amount_capturable"], 2500);
    assert_eq!(intent["amount_received"], 0);
    let id = intent["id"].as_str().unwrap().to_owned();
    let charge = charge_of(&sandbox, &intent).await;
    assert_eq!(
        (
            &charge["status"],
            &charge["paid"],
            &charge["captured"],
            &charge["amount_captured"]
        ),
        (&json!("succeeded"), &json!(true), &json!(false), &json!(0)),
        "{charge}"
    );
    assert!(charge["balance_transaction"].is_null(), "{charge}");
    assert_eq!(
        events_of(&sandbox, &id).await,
        [
            "payment_intent.created",
            "charge.succeeded",
            "payment_intent.amount_capturable_updated"
        ]
    );
    // Nothing captured yet: the gateway holds no captured charge, and nothing can be refunded.
    let stripe = sandbox.control().charges();
    let stripe = stripe.provider("stripe").unwrap();
    assert_eq!((stripe.charges, stripe.captured_charges), (1, 0));
    let (status, refused) =
        stripe_post_json(&sandbox, "/v1/refunds", &[("payment_intent", &id)], None).await;
    assert_eq!(status, 400, "{refused}");

    let capture = format!("/v1/payment_intents/{id}/capture");
    let (status, captured) = stripe_post_json(&sandbox, &capture, &[], Some("cap-1")).await;
    assert_eq!(status, 200, "{captured}");
    assert_eq!(captured["status"], "succeeded");
    assert_eq!(
        (&captured["amount_received"], &captured["amount_capturable"]),
        (&json!(2500), &json!(0))
    );
    let charge = charge_of(&sandbox, &captured).await;
    assert_eq!(
        (
            &charge["captured"],
            &charge["amount_captured"],
            &charge["amount_refunded"],
            &charge["refunded"]
        ),
        (&json!(true), &json!(2500), &json!(0), &json!(false)),
        "{charge}"
    );
    assert!(charge["balance_transaction"].is_string(), "{charge}");

    // The same key and body: the first answer, nothing captured again; another body: Stripe's idempotency error.
    let response = stripe_post(&sandbox, &capture, &[], Some("cap-1")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let replayed: Value = response.json().await.unwrap();
    assert_eq!(replayed, captured);
    let (status, mismatch) = stripe_post_json(
        &sandbox,
        &capture,
        &[("amount_to_capture", "100")],
        Some("cap-1"),
    )
    .await;
    assert_eq!(status, 400, "{mismatch}");
    assert_eq!(mismatch["error"]["type"], "idempotency_error");
    let report = sandbox.control().charges();
    let key = report.key("stripe", "cap-1").unwrap();
    assert_eq!((key.executed, key.replays, key.conflicts), (1, 1, 1));

    // A second capture: refused with the intent as it is.
    let (status, again) = stripe_post_json(&sandbox, &capture, &[], None).await;
    assert_eq!(status, 400, "{again}");
    assert_eq!(again["error"]["code"], "payment_intent_unexpected_state");
    assert_eq!(again["error"]["payment_intent"]["id"], id.as_str());
    assert_eq!(again["error"]["payment_intent"]["status"], "succeeded");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("status of succeeded"),
        "{again}"
    );
    assert_eq!(
        events_of(&sandbox, &id).await,
        [
            "payment_intent.created",
            "charge.succeeded",
            "payment_intent.amount_capturable_updated",
            "charge.captured",
            "payment_intent.succeeded"
        ]
    );
    let stripe = sandbox.control().charges();
    assert_eq!(stripe.provider("stripe").unwrap().captured_charges, 1);
    // The webhooks went out as for any other change.
    let deliveries = sandbox.control().deliveries();
    for kind in [
        "payment_intent.amount_capturable_updated",
        "charge.captured",
        "payment_intent.succeeded",
    ] {
        assert!(
            deliveries.iter().any(|d| d.event_type == kind),
            "no {kind} delivery"
        );
    }
}

#[tokio::test]
async fn a_partial_capture_releases_the_rest_and_bounds_refunds() {
    let sandbox = start(settings(None)).await;
    let id = authorized(&sandbox, 5000).await;
    let capture = format!("/v1/payment_intents/{id}/capture");
    // More than authorized, or not a positive integer: refused naming the parameter, nothing done.
    for (value, code) in [
        ("5001", "amount_too_large"),
        ("0", "parameter_invalid_integer"),
        ("abc", "parameter_invalid_integer"),
    ] {
        let (status, refused) =
            stripe_post_json(&sandbox, &capture, &[("amount_to_capture", value)], None).await;
        assert_eq!(status, 400, "{value}: {refused}");
        assert_eq!(refused["error"]["type"], "invalid_request_error");
        assert_eq!(refused["error"]["code"], code, "{value}: {refused}");
        assert_eq!(refused["error"]["param"], "amount_to_capture");
    }
    let (status, refused) = stripe_post_json(&sandbox, &capture, &[("amount", "1")], None).await;
    assert_eq!(
        (status, &refused["error"]["param"]),
        (400, &json!("amount"))
    );

    let (status, captured) = stripe_post_json(
        &sandbox,
        &capture,
        &[("amount_to_capture", "3000"), ("metadata[step]", "packed")],
        None,
    )
    .await;
    assert_eq!(status, 200, "{captured}");
    assert_eq!(captured["status"], "succeeded");
    assert_eq!(
        (&captured["amount"], &captured["amount_received"]),
        (&json!(5000), &json!(3000))
    );
    assert_eq!(captured["metadata"]["step"], "packed");
    let charge = charge_of(&sandbox, &captured).await;
    // Stripe shows the uncaptured rest as refunded.
    assert_eq!(
        (
            &charge["amount"],
            &charge["amount_captured"],
            &charge["amount_refunded"],
            &charge["refunded"]
        ),
        (&json!(5000), &json!(3000), &json!(2000), &json!(false)),
        "{charge}"
    );
    // Refunds: never beyond what was captured.
    let (status, refused) = stripe_post_json(
        &sandbox,
        "/v1/refunds",
        &[("payment_intent", &id), ("amount", "3001")],
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "amount_too_large");
    let (status, refund) =
        stripe_post_json(&sandbox, "/v1/refunds", &[("payment_intent", &id)], None).await;
    assert_eq!(status, 200, "{refund}");
    assert_eq!(refund["amount"], 3000);
    let charge = charge_of(&sandbox, &captured).await;
    assert_eq!(
        (&charge["amount_refunded"], &charge["refunded"]),
        (&json!(5000), &json!(true))
    );
    let (status, refused) =
        stripe_post_json(&sandbox, "/v1/refunds", &[("payment_intent", &id)], None).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "charge_already_refunded");
}

#[tokio::test]
async fn canceling_an_authorization_voids_it_and_a_succeeded_intent_is_not_canceled() {
    let sandbox = start(settings(None)).await;
    let id = authorized(&sandbox, 4000).await;
    let (status, voided) = stripe_post_json(
        &sandbox,
        &format!("/v1/payment_intents/{id}/cancel"),
        &[("cancellation_reason", "requested_by_customer")],
        Some("void-1"),
    )
    .await;
    assert_eq!(status, 200, "{voided}");
    assert_eq!(voided["status"], "canceled");
    assert_eq!(voided["cancellation_reason"], "requested_by_customer");
    assert_eq!(
        (&voided["amount_capturable"], &voided["amount_received"]),
        (&json!(0), &json!(0))
    );
    let charge = charge_of(&sandbox, &voided).await;
    assert_eq!(
        (
            &charge["captured"],
            &charge["amount_captured"],
            &charge["amount_refunded"]
        ),
        (&json!(false), &json!(0), &json!(4000)),
        "{charge}"
    );
    assert_eq!(
        events_of(&sandbox, &id).await.last().map(String::as_str),
        Some("payment_intent.canceled")
    );
    // Nothing to capture, refund or confirm any more.
    let (status, refused) = stripe_post_json(
        &sandbox,
        &format!("/v1/payment_intents/{id}/capture"),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "payment_intent_unexpected_state");
    assert_eq!(refused["error"]["payment_intent"]["status"], "canceled");
    let charge_id = voided["latest_charge"].as_str().unwrap();
    let (status, refused) =
        stripe_post_json(&sandbox, "/v1/refunds", &[("charge", charge_id)], None).await;
    assert_eq!(status, 400, "{refused}");
    let stripe = sandbox.control().charges();
    assert_eq!(stripe.provider("stripe").unwrap().captured_charges, 0);

    // A succeeded intent: the cancel is refused, and the error carries the intent.
    let paid = succeeded_intent(&sandbox, 1000).await;
    let (status, refused) = stripe_post_json(
        &sandbox,
        &format!("/v1/payment_intents/{paid}/cancel"),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "payment_intent_unexpected_state");
    assert_eq!(refused["error"]["payment_intent"]["id"], paid.as_str());
    assert_eq!(refused["error"]["payment_intent"]["status"], "succeeded");
    // And an automatic intent was never capturable.
    let (status, refused) = stripe_post_json(
        &sandbox,
        &format!("/v1/payment_intents/{paid}/capture"),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["payment_intent"]["status"], "succeeded");
}

#[tokio::test]
async fn an_authorization_left_uncaptured_for_seven_days_is_canceled() {
    let sandbox = start(settings(None)).await;
    let id = authorized(&sandbox, 2000).await;
    let week: u64 = 7 * 86_400;
    let response = control_post(
        &sandbox,
        "/_sandbox/clock",
        &json!({"advance_secs": week - 60}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (_, intent) = stripe_get(&sandbox, &format!("/v1/payment_intents/{id}")).await;
    assert_eq!(intent["status"], "requires_capture");

    let response = control_post(&sandbox, "/_sandbox/clock", &json!({"advance_secs": 120})).await;
    assert_eq!(response.status(), 200);
    // The move itself expired it: its event exists before anyone reads the intent.
    assert!(sandbox
        .control()
        .deliveries()
        .iter()
        .any(|d| d.event_type == "payment_intent.canceled" && d.resource_id == id));
    let (_, intent) = stripe_get(&sandbox, &format!("/v1/payment_intents/{id}")).await;
    assert_eq!(intent["status"], "canceled");
    assert_eq!(intent["cancellation_reason"], "automatic");
    assert_eq!(intent["amount_capturable"], 0);
    let (_, events) = stripe_get(&sandbox, "/v1/events?type=payment_intent.canceled").await;
    let events = events["data"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0]["request"]["id"].is_null(), "{:?}", events[0]);
    let (status, refused) = stripe_post_json(
        &sandbox,
        &format!("/v1/payment_intents/{id}/capture"),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "payment_intent_unexpected_state");
    assert_eq!(refused["error"]["payment_intent"]["status"], "canceled");
}

#[tokio::test]
async fn declines_and_three_d_secure_behave_as_for_automatic_capture() {
    let sandbox = start(settings(None)).await;
    let (status, declined) = authorize(&sandbox, 2000, "pm_card_chargeDeclined").await;
    assert_eq!(status, 402, "{declined}");
    assert_eq!(
        declined["error"]["payment_intent"]["status"],
        "requires_payment_method"
    );
    assert_eq!(declined["error"]["payment_intent"]["amount_capturable"], 0);

    let (status, challenged) = authorize(&sandbox, 2000, "pm_card_threeDSecure2Required").await;
    assert_eq!(status, 200, "{challenged}");
    assert_eq!(challenged["status"], "requires_action");
    let id = challenged["id"].as_str().unwrap();
    // Capturing before the challenge is done is refused.
    let capture = format!("/v1/payment_intents/{id}/capture");
    let (status, refused) = stripe_post_json(&sandbox, &capture, &[], None).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"]["payment_intent"]["status"],
        "requires_action"
    );
    let response = control_post(
        &sandbox,
        &format!("/_sandbox/payment_intents/stripe/{id}/authenticate"),
        &json!({"outcome": "succeed"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (_, intent) = stripe_get(&sandbox, &format!("/v1/payment_intents/{id}")).await;
    assert_eq!(intent["status"], "requires_capture");
    assert_eq!(intent["amount_capturable"], 2000);
    let (status, captured) = stripe_post_json(&sandbox, &capture, &[], None).await;
    assert_eq!((status, &captured["status"]), (200, &json!("succeeded")));

    // `automatic_async` captures at once; an unknown method is refused naming it.
    let (status, intent) = stripe_post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "900"),
            ("currency", "brl"),
            ("capture_method", "automatic_async"),
            ("confirm", "true"),
            ("payment_method", "pm_card_visa"),
        ],
        None,
    )
    .await;
    assert_eq!((status, &intent["status"]), (200, &json!("succeeded")));
    let (status, refused) = stripe_post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "900"),
            ("currency", "brl"),
            ("capture_method", "later"),
        ],
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "capture_method");
}
