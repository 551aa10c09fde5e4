//! Stripe charges off session only a payment method saved to the intent's customer (a bare `pm_card_*` test id
//! is attached to nobody): anything else is a 400 naming `payment_method`, at creation and at `/confirm`, and
//! creates nothing. Saved cards that need authentication or always decline behave as Stripe's test cards do, and
//! a card-use script makes a saved method's Nth executed charge (never a replay) give a chosen outcome — also
//! under parallel charges.

mod common;

use common::*;
use futures::future::join_all;
use hookline_sandbox::RunningSandbox;
use serde_json::{json, Value};

async fn customer(sandbox: &RunningSandbox) -> String {
    let (status, body) = stripe_post_json(sandbox, "/v1/customers", &[("name", "Ana")], None).await;
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Attaches test method `test_id` to `customer`; the saved `pm_…`.
async fn saved(sandbox: &RunningSandbox, test_id: &str, customer: &str) -> String {
    let (status, pm) = stripe_post_json(
        sandbox,
        &format!("/v1/payment_methods/{test_id}/attach"),
        &[("customer", customer)],
        None,
    )
    .await;
    assert_eq!(status, 200, "{pm}");
    pm["id"].as_str().unwrap().to_owned()
}

/// An off-session charge of `pm` for `customer` under idempotency key `key`.
async fn charge_off_session(
    sandbox: &RunningSandbox,
    customer: &str,
    pm: &str,
    key: Option<&str>,
) -> (u16, Value) {
    stripe_post_json(
        sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "1500"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("off_session", "true"),
            ("customer", customer),
            ("payment_method", pm),
        ],
        key,
    )
    .await
}

/// Stripe's refusal of a method it may not charge: 400 `invalid_request_error` naming `payment_method`.
fn assert_refused(status: u16, body: &Value) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(body["error"]["param"], "payment_method", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("pm_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_session_charges_need_a_method_saved_to_the_intents_customer() {
    let sandbox = start(settings(None)).await;
    let (alice, bob) = (customer(&sandbox).await, customer(&sandbox).await);
    let alices = saved(&sandbox, "pm_card_visa", &alice).await;

    // A bare test id is attached to nobody: refused for Alice, and without any customer.
    let (status, body) = charge_off_session(&sandbox, &alice, "pm_card_visa", Some("k1")).await;
    assert_refused(status, &body);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("must be attached to the customer"));
    let (status, body) = stripe_post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "1500"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("off_session", "true"),
            ("payment_method", &alices),
        ],
        None,
    )
    .await;
    assert_refused(status, &body);
    // Alice's method for Bob.
    let (status, body) = charge_off_session(&sandbox, &bob, &alices, None).await;
    assert_refused(status, &body);
    // Refused before anything was created; the refusal is the key's answer.
    let report = sandbox.control().charges();
    let stripe = report.provider("stripe").unwrap();
    assert_eq!((stripe.charges, stripe.payment_intents), (0, 0));
    let response = stripe_post(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "1500"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("off_session", "true"),
            ("customer", &alice),
            ("payment_method", "pm_card_visa"),
        ],
        Some("k1"),
    )
    .await;
    assert_eq!(response.status(), 400);
    assert_eq!(response.headers()["idempotent-replayed"], "true");

    // Through /confirm: an intent of Alice's confirmed off session with the bare id, then with her method.
    let (_, open) = stripe_post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "1500"),
            ("currency", "brl"),
            ("customer", &alice),
        ],
        None,
    )
    .await;
    let confirm = format!(
        "/v1/payment_intents/{}/confirm",
        open["id"].as_str().unwrap()
    );
    let (status, body) = stripe_post_json(
        &sandbox,
        &confirm,
        &[("off_session", "true"), ("payment_method", "pm_card_visa")],
        None,
    )
    .await;
    assert_refused(status, &body);
    let (status, body) = stripe_post_json(
        &sandbox,
        &confirm,
        &[("off_session", "true"), ("payment_method", &alices)],
        None,
    )
    .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("succeeded")));

    // On session a test id still charges, with or without a customer (the merchant API's and the SDKs' flow).
    for customer in [None, Some(alice.as_str())] {
        let mut form = vec![
            ("amount", "1500"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("payment_method", "pm_card_visa"),
        ];
        if let Some(c) = customer {
            form.push(("customer", c));
        }
        let (status, body) = stripe_post_json(&sandbox, "/v1/payment_intents", &form, None).await;
        assert_eq!((status, body["status"].as_str()), (200, Some("succeeded")));
    }
    let report = sandbox.control().charges();
    assert_eq!(report.provider("stripe").unwrap().captured_charges, 3);
    assert_eq!(report.payment_method_charges("stripe", &alices), 1);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_cards_that_need_authentication_or_always_fail_decline_off_session() {
    let sandbox = start(settings(None)).await;
    let alice = customer(&sandbox).await;
    // Needs 3-D Secure: off session, 402 authentication_required.
    let strong = saved(&sandbox, "pm_card_authenticationRequired", &alice).await;
    let (status, body) = charge_off_session(&sandbox, &alice, &strong, None).await;
    assert_eq!(status, 402, "{body}");
    let e = &body["error"];
    assert_eq!(
        (
            e["type"].as_str(),
            e["code"].as_str(),
            e["decline_code"].as_str()
        ),
        (
            Some("card_error"),
            Some("authentication_required"),
            Some("authentication_required")
        )
    );
    assert_eq!(e["payment_intent"]["status"], "requires_payment_method");
    let (_, charge) = stripe_get(
        &sandbox,
        &format!("/v1/charges/{}", e["charge"].as_str().unwrap()),
    )
    .await;
    assert_eq!(charge["failure_code"], "authentication_required");
    assert_eq!(charge["paid"], false);

    // pm_card_chargeCustomerFail attaches, then every charge is declined.
    let failing = saved(&sandbox, "pm_card_chargeCustomerFail", &alice).await;
    let (_, read) = stripe_get(&sandbox, &format!("/v1/payment_methods/{failing}")).await;
    assert_eq!(
        (read["customer"].as_str(), read["card"]["last4"].as_str()),
        (Some(alice.as_str()), Some("0341"))
    );
    for _ in 0..2 {
        let (status, body) = charge_off_session(&sandbox, &alice, &failing, None).await;
        assert_eq!(status, 402, "{body}");
        assert_eq!(body["error"]["code"], "card_declined");
        assert_eq!(body["error"]["decline_code"], "generic_decline");
        let (_, charge) = stripe_get(
            &sandbox,
            &format!("/v1/charges/{}", body["error"]["charge"].as_str().unwrap()),
        )
        .await;
        assert_eq!(charge["failure_code"], "card_declined");
        assert_eq!(charge["failure_message"], "Your card was declined.");
    }
    let report = sandbox.control().charges();
    assert_eq!(report.provider("stripe").unwrap().captured_charges, 0);
    assert_eq!(report.payment_method_charges("stripe", &failing), 2);
    assert_eq!(report.payment_method_charges("stripe", &strong), 1);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_decides_the_nth_executed_charge_of_a_saved_method() {
    let sandbox = start(settings(None)).await;
    let alice = customer(&sandbox).await;
    let pm = saved(&sandbox, "pm_card_visa", &alice).await;
    let path = format!("/_sandbox/payment_methods/stripe/{pm}/script");
    let response = control_post(
        &sandbox,
        &path,
        &json!({"outcomes": ["succeed", "insufficient_funds", "expired_card", "authentication_required"]}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let shown: Value = response.json().await.unwrap();
    assert_eq!(shown["uses"], 0);

    let (status, body) = charge_off_session(&sandbox, &alice, &pm, Some("c1")).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("succeeded")));
    let (status, body) = charge_off_session(&sandbox, &alice, &pm, Some("c2")).await;
    assert_eq!(status, 402);
    assert_eq!(
        (
            body["error"]["code"].as_str(),
            body["error"]["decline_code"].as_str()
        ),
        (Some("card_declined"), Some("insufficient_funds"))
    );
    // A replay of the second charge answers its decline again and is not a use.
    let response = stripe_post(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "1500"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("off_session", "true"),
            ("customer", &alice),
            ("payment_method", &pm),
        ],
        Some("c2"),
    )
    .await;
    assert_eq!(response.status(), 402);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let (status, body) = charge_off_session(&sandbox, &alice, &pm, Some("c3")).await;
    assert_eq!(
        (
            status,
            body["error"]["code"].as_str(),
            body["error"]["message"].as_str()
        ),
        (402, Some("expired_card"), Some("Your card has expired."))
    );
    let (status, body) = charge_off_session(&sandbox, &alice, &pm, Some("c4")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (402, Some("authentication_required"))
    );
    // Past the script: the card's own behaviour.
    let (status, _) = charge_off_session(&sandbox, &alice, &pm, Some("c5")).await;
    assert_eq!(status, 200);
    let script = control_get(&sandbox, &path).await;
    assert_eq!(script["uses"], 5);
    assert_eq!(script["outcomes"].as_array().unwrap().len(), 4);
    assert_eq!(
        sandbox
            .control()
            .charges()
            .payment_method_charges("stripe", &pm),
        5
    );

    // Setting a script again counts uses from zero (in process this time).
    let control = sandbox.control();
    control
        .script_payment_method("stripe", &pm, &["generic_decline"])
        .unwrap();
    let (status, body) = charge_off_session(&sandbox, &alice, &pm, None).await;
    assert_eq!(
        (status, body["error"]["decline_code"].as_str()),
        (402, Some("generic_decline"))
    );
    assert_eq!(
        control.payment_method_script("stripe", &pm).unwrap().uses,
        1
    );

    // Refused: an unknown outcome (Mercado Pago's is not Stripe's), a test id, an unknown provider.
    for (path, body) in [
        (
            path.clone(),
            json!({"outcomes": ["succeed", "cc_rejected_other_reason"]}),
        ),
        (path.clone(), json!({"outcomes": "succeed"})),
        (path.clone(), json!({"outcomes": ["succeed"], "extra": 1})),
        (
            "/_sandbox/payment_methods/stripe/pm_card_visa/script".to_owned(),
            json!({"outcomes": []}),
        ),
        (
            format!("/_sandbox/payment_methods/nope/{pm}/script"),
            json!({"outcomes": []}),
        ),
    ] {
        let response = control_post(&sandbox, &path, &body).await;
        assert_eq!(response.status(), 400, "{path} {body}");
    }
    assert!(control
        .script_payment_method("stripe", &pm, &["insufficient-funds"])
        .is_err());
    assert_eq!(
        control
            .payment_method_script("stripe", &pm)
            .unwrap()
            .outcomes,
        vec!["generic_decline"]
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_charges_of_a_scripted_method_get_each_outcome_once() {
    let sandbox = start(settings(None)).await;
    let alice = customer(&sandbox).await;
    let pm = saved(&sandbox, "pm_card_visa", &alice).await;
    let mut script = vec!["insufficient_funds"; 4];
    script.extend(["succeed"; 6]);
    sandbox
        .control()
        .script_payment_method("stripe", &pm, &script)
        .unwrap();
    // Ten charges under ten keys, and the same key five times more, all at once.
    let keys: Vec<String> = (0..10)
        .map(|i| format!("par-{i}"))
        .chain((0..5).map(|_| "par-0".to_owned()))
        .collect();
    let answers = join_all(
        keys.iter()
            .map(|k| charge_off_session(&sandbox, &alice, &pm, Some(k))),
    )
    .await;
    let declined = answers.iter().filter(|(s, _)| *s == 402).count();
    let succeeded = answers.iter().filter(|(s, _)| *s == 200).count();
    let in_flight = answers.iter().filter(|(s, _)| *s == 409).count();
    assert_eq!(declined + succeeded + in_flight, 15, "{answers:?}");
    // Exactly ten executions took the ten outcomes; replays repeated their key's answer.
    let report = sandbox.control().charges();
    assert_eq!(report.payment_method_charges("stripe", &pm), 10);
    let stripe = report.provider("stripe").unwrap();
    assert_eq!((stripe.charges, stripe.captured_charges), (10, 6));
    assert_eq!(
        sandbox
            .control()
            .payment_method_script("stripe", &pm)
            .unwrap()
            .uses,
        10
    );
    sandbox.stop().await;
}
