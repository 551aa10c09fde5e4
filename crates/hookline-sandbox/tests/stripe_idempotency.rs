//! Stripe idempotency, over real HTTP: replays with `Idempotent-Replayed`, errors replayed, parameter mismatches,
//! concurrent retries that never charge twice, expiry; and API-key authentication.

mod common;

use std::time::Duration;

use common::*;
use futures::future::join_all;
use serde_json::Value;

async fn body(response: reqwest::Response) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.bytes().await.unwrap().to_vec())
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

const CHARGE: &[(&str, &str)] = &[
    ("amount", "2500"),
    ("currency", "brl"),
    ("confirm", "true"),
    ("payment_method", "pm_card_visa"),
    ("description", "order 17"),
    ("metadata[order]", "17"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_replays_the_same_body_and_charges_once() {
    let sandbox = start(settings(None)).await;
    let (status, first_headers, first) =
        body(stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("k-1")).await).await;
    assert_eq!(status, 200);
    assert_eq!(header(&first_headers, "Idempotent-Replayed"), None);
    let pi: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(pi["status"], "succeeded");
    assert_eq!(pi["amount_received"], 2500);
    assert_eq!(pi["metadata"]["order"], "17");
    assert!(pi["id"].as_str().unwrap().starts_with("pi_"));

    for _ in 0..3 {
        let (status, headers, again) =
            body(stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("k-1")).await).await;
        assert_eq!(status, 200);
        assert_eq!(again, first, "a replay is byte for byte the first answer");
        assert_eq!(header(&headers, "Idempotent-Replayed"), Some("true"));
        assert_eq!(
            header(&headers, "Original-Request"),
            header(&first_headers, "Request-Id")
        );
        assert_ne!(
            header(&headers, "Request-Id"),
            header(&first_headers, "Request-Id")
        );
    }

    let report = sandbox.control().charges();
    let stripe = report.provider("stripe").unwrap();
    assert_eq!(stripe.charges, 1);
    assert_eq!(stripe.payment_intents, 1);
    let key = report.key("stripe", "k-1").unwrap();
    assert_eq!(
        (key.requests, key.executed, key.replays, key.charges),
        (4, 1, 3, 1)
    );
    // The same counts over the control API.
    let over_http = control_get(&sandbox, "/_sandbox/charges").await;
    assert_eq!(over_http["total_charges"], 1);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_replayed_but_validation_failures_save_nothing() {
    let sandbox = start(settings(None)).await;
    // A decline is an executed request: its 402 is saved and replayed.
    let declined = [
        ("amount", "2500"),
        ("currency", "brl"),
        ("confirm", "true"),
        ("payment_method", "pm_card_chargeDeclinedInsufficientFunds"),
    ];
    let (status, _, first) =
        body(stripe_post(&sandbox, "/v1/payment_intents", &declined, Some("decline")).await).await;
    assert_eq!(status, 402);
    let error: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(error["error"]["type"], "card_error");
    assert_eq!(error["error"]["code"], "card_declined");
    assert_eq!(error["error"]["decline_code"], "insufficient_funds");
    assert_eq!(
        error["error"]["payment_intent"]["status"],
        "requires_payment_method"
    );
    let (status, headers, again) =
        body(stripe_post(&sandbox, "/v1/payment_intents", &declined, Some("decline")).await).await;
    assert_eq!((status, again), (402, first));
    assert_eq!(header(&headers, "Idempotent-Replayed"), Some("true"));

    // A refund beyond the captured amount: 400 amount_too_large, replayed as is.
    let pi = succeeded_intent(&sandbox, 1000).await;
    let too_much = [("payment_intent", pi.as_str()), ("amount", "1001")];
    let (status, _, first) =
        body(stripe_post(&sandbox, "/v1/refunds", &too_much, Some("refund-1")).await).await;
    assert_eq!(status, 400);
    let error: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(error["error"]["code"], "amount_too_large");
    assert_eq!(error["error"]["param"], "amount");
    let (status, headers, again) =
        body(stripe_post(&sandbox, "/v1/refunds", &too_much, Some("refund-1")).await).await;
    assert_eq!((status, again), (400, first));
    assert_eq!(header(&headers, "Idempotent-Replayed"), Some("true"));

    // Invalid parameters never began executing: nothing saved, the corrected retry executes.
    let response = stripe_post(
        &sandbox,
        "/v1/payment_intents",
        &[("currency", "brl")],
        Some("fixme"),
    )
    .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "parameter_missing");
    assert_eq!(error["error"]["param"], "amount");
    let response = stripe_post(
        &sandbox,
        "/v1/payment_intents",
        &[("currency", "brl"), ("bogus", "1")],
        None,
    )
    .await;
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "parameter_unknown");
    let response = stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("fixme")).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("Idempotent-Replayed").is_none());
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_other_parameters_is_an_idempotency_error() {
    let sandbox = start(settings(None)).await;
    assert_eq!(
        stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("k-2"))
            .await
            .status(),
        200
    );
    // Parameter order does not matter…
    let reordered: Vec<(&str, &str)> = CHARGE.iter().rev().copied().collect();
    let response = stripe_post(&sandbox, "/v1/payment_intents", &reordered, Some("k-2")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["Idempotent-Replayed"], "true");
    // …their values do.
    let other = [
        ("amount", "9900"),
        ("currency", "brl"),
        ("confirm", "true"),
        ("payment_method", "pm_card_visa"),
    ];
    let response = stripe_post(&sandbox, "/v1/payment_intents", &other, Some("k-2")).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "idempotency_error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("same parameters"));
    assert_eq!(sandbox.control().charges().total_charges, 1);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_key_never_charge_twice() {
    let sandbox = start_with(|s| s.api_latency = Duration::from_millis(500)).await;
    let requests =
        (0..8).map(|_| stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("race")));
    let responses = join_all(requests).await;
    let mut executed = 0;
    let mut in_flight = 0;
    let mut replayed = 0;
    let mut ids = std::collections::BTreeSet::new();
    for response in responses {
        let status = response.status().as_u16();
        let was_replayed = response.headers().contains_key("Idempotent-Replayed");
        let body: Value = response.json().await.unwrap();
        match (status, was_replayed) {
            (200, false) => executed += 1,
            (200, true) => replayed += 1,
            (409, _) => {
                assert_eq!(body["error"]["type"], "idempotency_error");
                assert!(body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("in-progress"));
                in_flight += 1;
                continue;
            }
            other => panic!("unexpected answer {other:?}: {body}"),
        }
        ids.insert(body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(executed, 1, "exactly one request executes");
    assert_eq!(executed + replayed + in_flight, 8);
    assert!(
        in_flight >= 1,
        "with 500 ms of execution, concurrent retries see the key in flight"
    );
    assert_eq!(ids.len(), 1, "every 200 names the same payment intent");
    let report = sandbox.control().charges();
    assert_eq!(report.total_charges, 1);
    assert_eq!(report.key("stripe", "race").unwrap().charges, 1);
    // Once finished, the key replays.
    let response = stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("race")).await;
    assert_eq!(response.headers()["Idempotent-Replayed"], "true");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_after_the_window() {
    // Stripe's 24 h, on the sandbox's clock: moved past it, not waited out.
    let window = Duration::from_secs(24 * 3600);
    let sandbox = start_with(|s| s.idempotency_window = window).await;
    assert_eq!(
        stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("short"))
            .await
            .status(),
        200
    );
    let replayed = stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("short")).await;
    assert_eq!(
        replayed.headers()["Idempotent-Replayed"],
        "true",
        "inside the window"
    );
    sandbox
        .control()
        .advance_clock(window + Duration::from_secs(1))
        .expect("move the clock");
    let response = stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("short")).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers().get("Idempotent-Replayed").is_none(),
        "an expired key executes anew"
    );
    assert_eq!(sandbox.control().charges().total_charges, 2);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_required_and_tell_providers_apart() {
    let sandbox = start_with(|s| {
        s.providers = vec![
            stripe("stripe-br", Some("sk_test_brazil_0000000001")),
            stripe("stripe-us", Some("sk_test_states_0000000002")),
            mercadopago("mercadopago", Some(MP_TOKEN)),
        ]
    })
    .await;
    let missing: Value = get_as(&sandbox, "/v1/events", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(missing["error"]["type"], "invalid_request_error");
    assert!(missing["error"]["message"]
        .as_str()
        .unwrap()
        .contains("did not provide an API key"));
    let response = get_as(&sandbox, "/v1/events", Some("sk_test_wrong_key_00000099")).await;
    assert_eq!(response.status(), 401);
    let wrong: Value = response.json().await.unwrap();
    let message = wrong["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Invalid API Key provided: sk_test_"),
        "{message}"
    );
    assert!(
        !message.contains("wrong_key"),
        "the key is masked: {message}"
    );
    // Mercado Pago's 401 for a Stripe key.
    let response = get_as(
        &sandbox,
        "/v1/payments/search",
        Some("sk_test_brazil_0000000001"),
    )
    .await;
    assert_eq!(response.status(), 401);
    let mp: Value = response.json().await.unwrap();
    assert_eq!(
        mp,
        serde_json::json!({"message": "invalid_token", "error": "unauthorized", "status": 401, "cause": []})
    );

    // HTTP Basic with the key as user name, as `curl -u sk_…:` sends it.
    let response = client()
        .post(sandbox.url("/v1/payment_intents"))
        .basic_auth("sk_test_states_0000000002", Some(""))
        .form(CHARGE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let pi: Value = response.json().await.unwrap();
    let report = sandbox.control().charges();
    assert_eq!(report.provider("stripe-us").unwrap().charges, 1);
    assert_eq!(report.provider("stripe-br").unwrap().charges, 0);
    // The other account does not see it.
    let path = format!("/v1/payment_intents/{}", pi["id"].as_str().unwrap());
    let response = get_as(&sandbox, &path, Some("sk_test_brazil_0000000001")).await;
    assert_eq!(response.status(), 404);
    let missing: Value = response.json().await.unwrap();
    assert_eq!(missing["error"]["code"], "resource_missing");
    sandbox.stop().await;
}
