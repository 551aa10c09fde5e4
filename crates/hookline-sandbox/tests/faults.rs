//! Fault injection, armed through the control API (never through the request): a delay beyond the client's
//! timeout, the lost 2xx, 429 with `Retry-After`, 500, a reset connection; and seeded reproducibility.

mod common;

use std::time::Duration;

use common::*;
use hookline_sandbox::{FaultAction, FaultSpec};
use serde_json::{json, Value};

const CHARGE: &[(&str, &str)] = &[
    ("amount", "5000"),
    ("currency", "brl"),
    ("confirm", "true"),
    ("payment_method", "pm_card_visa"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_beyond_the_client_timeout_still_charges() {
    let sandbox = start(settings(None)).await;
    // Armed over HTTP.
    let response = control_post(
        &sandbox,
        "/_sandbox/faults",
        &json!({"method": "POST", "path": "/v1/payment_intents", "action": {"kind": "delay", "delay_ms": 1500}, "count": 1}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let error = stripe_send(
        &impatient,
        &sandbox,
        "/v1/payment_intents",
        CHARGE,
        Some("slow-1"),
    )
    .await
    .expect_err("the client times out");
    assert!(error.is_timeout(), "{error}");
    // The charge exists although the client never heard of it.
    eventually(Duration::from_secs(5), "the charge", || async {
        sandbox.control().charges().total_charges == 1
    })
    .await;
    // The retry with the same key gets the saved answer at once.
    let response = stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("slow-1")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["Idempotent-Replayed"], "true");
    let pi: Value = response.json().await.unwrap();
    assert_eq!(pi["status"], "succeeded");
    assert_eq!(sandbox.control().charges().total_charges, 1);
    let faults = control_get(&sandbox, "/_sandbox/faults").await;
    assert_eq!(faults[0]["hits"], 1);
    assert_eq!(faults[0]["remaining"], 0);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_response_still_charges_and_the_retry_replays() {
    let sandbox = start(settings(None)).await;
    let control = sandbox.control();
    control
        .arm_fault(FaultSpec::next(
            "/v1/payment_intents",
            1,
            FaultAction::DropResponse,
        ))
        .unwrap();
    let error = stripe_send(
        &client(),
        &sandbox,
        "/v1/payment_intents",
        CHARGE,
        Some("lost-2xx"),
    )
    .await
    .expect_err("no answer arrives");
    assert!(
        !error.is_timeout(),
        "the connection is closed, not stalled: {error}"
    );
    assert_eq!(
        control.charges().total_charges,
        1,
        "the charge was made before the answer was lost"
    );
    let response = stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("lost-2xx")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["Idempotent-Replayed"], "true");
    assert_eq!(control.charges().total_charges, 1);

    // The same for Mercado Pago.
    control
        .arm_fault(FaultSpec {
            provider: Some("mercadopago".into()),
            ..FaultSpec::next("/v1/payments", 1, FaultAction::DropResponse)
        })
        .unwrap();
    let error = mp_send(
        &sandbox,
        "/v1/payments",
        &mp_payment(80.0, "lost"),
        Some("mp-lost"),
    )
    .await
    .expect_err("no answer arrives");
    assert!(!error.is_timeout(), "{error}");
    let response = mp_pay(&sandbox, 80.0, "lost", Some("mp-lost")).await;
    assert_eq!(response.status(), 201);
    let report = control.charges();
    assert_eq!(report.provider("mercadopago").unwrap().charges, 1);
    assert_eq!(report.key("mercadopago", "mp-lost").unwrap().replays, 1);
    let faulted: Vec<_> = control
        .requests()
        .into_iter()
        .filter(|r| r.fault.is_some())
        .collect();
    assert_eq!(faulted.len(), 2);
    assert!(faulted
        .iter()
        .all(|r| r.fault.as_deref() == Some("drop_response")));
    sandbox.stop().await;
}

/// `count` requests to `path` answered `status` (with `Retry-After` if given), executing nothing.
fn status_fault(path: &str, count: u32, status: u16, retry_after_secs: Option<u64>) -> FaultSpec {
    FaultSpec::next(
        path,
        count,
        FaultAction::Status {
            status,
            retry_after_secs,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_server_errors_execute_nothing() {
    let sandbox = start(settings(None)).await;
    let control = sandbox.control();
    control
        .arm_fault(status_fault("/v1/payment_intents", 1, 429, Some(2)))
        .unwrap();
    let response = stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("limited")).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["Retry-After"], "2");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "rate_limit");
    assert_eq!(control.charges().total_charges, 0);
    // Nothing was saved under the key: the retry executes.
    let response = stripe_post(&sandbox, "/v1/payment_intents", CHARGE, Some("limited")).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("Idempotent-Replayed").is_none());
    assert_eq!(control.charges().total_charges, 1);

    control
        .arm_fault(status_fault("/v1/payments", 2, 500, None))
        .unwrap();
    for _ in 0..2 {
        let response = mp_pay(&sandbox, 9.0, "e", Some("mp-500")).await;
        assert_eq!(response.status(), 500);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["status"], 500);
        assert_eq!(error["error"], "internal_server_error");
    }
    let response = mp_pay(&sandbox, 9.0, "e", Some("mp-500")).await;
    assert_eq!(response.status(), 201);
    assert_eq!(
        control.charges().provider("mercadopago").unwrap().charges,
        1
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_connection_executes_nothing() {
    let sandbox = start(settings(None)).await;
    let control = sandbox.control();
    let mut spec = FaultSpec::next("/v1/refunds", 1, FaultAction::Reset);
    spec.provider = Some("stripe".into());
    control.arm_fault(spec).unwrap();
    let pi = succeeded_intent(&sandbox, 2000).await;
    let refund = [("payment_intent", pi.as_str())];
    let error = stripe_send(&client(), &sandbox, "/v1/refunds", &refund, Some("reset-1"))
        .await
        .expect_err("the connection is reset");
    assert!(!error.is_timeout(), "{error}");
    assert_eq!(control.charges().provider("stripe").unwrap().refunds, 0);
    let response = stripe_post(&sandbox, "/v1/refunds", &refund, Some("reset-1")).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("Idempotent-Replayed").is_none());
    let log = control.requests();
    assert!(log
        .iter()
        .any(|r| r.fault.as_deref() == Some("reset") && r.status == 0));
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_reproduces_ids_and_random_faults() {
    async fn run(seed: u64) -> (String, Vec<u16>) {
        let sandbox = start_with(|s| s.seed = seed).await;
        sandbox
            .control()
            .arm_fault(FaultSpec {
                rate: Some(0.5),
                count: None,
                ..status_fault("/v1/events", 0, 503, None)
            })
            .unwrap();
        let pi = succeeded_intent(&sandbox, 1000).await;
        let mut statuses = Vec::new();
        for _ in 0..24 {
            statuses.push(stripe_get(&sandbox, "/v1/events?limit=1").await.0);
        }
        sandbox.stop().await;
        (pi, statuses)
    }
    let (a_id, a) = run(7).await;
    let (b_id, b) = run(7).await;
    let (c_id, c) = run(8).await;
    assert_eq!(
        (&a_id, &a),
        (&b_id, &b),
        "same seed, same ids and same faults"
    );
    assert_ne!(a_id, c_id);
    assert_ne!(a, c);
    assert!(a.contains(&503) && a.contains(&200), "{a:?}");
}
