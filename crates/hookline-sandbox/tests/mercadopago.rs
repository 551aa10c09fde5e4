//! Mercado Pago: `X-Idempotency-Key` required and replayed, refunds never beyond what was captured (also
//! concurrently), search, forced outcomes, status changes and chargebacks.

mod common;

use common::*;
use futures::future::join_all;
use hookline_sandbox::Outcome;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_require_an_idempotency_key_and_replay_it() {
    let sandbox = start(settings(None)).await;
    let response = mp_pay(&sandbox, 25.0, "order-1", None).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"], "bad_request");
    assert_eq!(error["status"], 400);
    assert_eq!(error["cause"][0]["code"], 4292);
    assert_eq!(
        sandbox.control().charges().total_charges,
        0,
        "refused before anything was created"
    );

    let response = mp_pay(&sandbox, 25.0, "order-1", Some("mp-key-1")).await;
    assert_eq!(response.status(), 201);
    let first = response.bytes().await.unwrap();
    let payment: Value = serde_json::from_slice(&first).unwrap();
    let id = payment["id"].as_u64().expect("a numeric id");
    assert_eq!(payment["status"], "approved");
    assert_eq!(payment["status_detail"], "accredited");
    assert_eq!(payment["transaction_amount"], 25.0);
    assert_eq!(payment["currency_id"], "BRL");
    assert_eq!(payment["external_reference"], "order-1");
    assert_eq!(payment["transaction_amount_refunded"], 0.0);
    assert_eq!(payment["fee_details"][0]["type"], "mercadopago_fee");
    assert!(payment["date_approved"]
        .as_str()
        .unwrap()
        .ends_with("-04:00"));
    assert_eq!(payment["refunds"], json!([]));

    // The same key replays the first answer (even with another body), creating nothing.
    for body in [mp_payment(25.0, "order-1"), mp_payment(99.0, "other")] {
        let response = mp_post(&sandbox, "/v1/payments", &body, Some("mp-key-1")).await;
        assert_eq!(response.status(), 201);
        assert_eq!(response.bytes().await.unwrap(), first);
    }
    let report = sandbox.control().charges();
    assert_eq!(report.provider("mercadopago").unwrap().charges, 1);
    let key = report.key("mercadopago", "mp-key-1").unwrap();
    assert_eq!((key.requests, key.replays, key.charges), (3, 2, 1));
    assert_eq!(key.objects, [id.to_string()]);

    // A key is scoped to its endpoint: reused for a refund it is refused, and refunds nothing.
    let response = mp_post(
        &sandbox,
        &format!("/v1/payments/{id}/refunds"),
        &json!({}),
        Some("mp-key-1"),
    )
    .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["cause"][0]["code"], 2032);

    let (status, fetched) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(fetched["id"], id);
    let (status, missing) = mp_get(&sandbox, "/v1/payments/1").await;
    assert_eq!(status, 404);
    assert_eq!(missing["cause"][0]["code"], 2000);

    // Invalid bodies in Mercado Pago's error format.
    let response = mp_post(
        &sandbox,
        "/v1/payments",
        &json!({"payer": {"email": "a@b.c"}, "payment_method_id": "visa"}),
        Some("bad-1"),
    )
    .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["cause"][0]["code"], 4037);
    let response = mp_post(
        &sandbox,
        "/v1/payments",
        &json!({"transaction_amount": 10, "payment_method_id": "visa", "payer": {}}),
        Some("bad-2"),
    )
    .await;
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["cause"][0]["code"], 4050);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_refunds_never_exceed_what_was_captured() {
    let sandbox = start(settings(None)).await;
    let response = mp_pay(&sandbox, 100.0, "order-2", Some("pay-2")).await;
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_u64()
        .unwrap();
    let path = format!("/v1/payments/{id}/refunds");
    let keys: Vec<String> = (0..5).map(|i| format!("refund-{i}")).collect();
    let partial = json!({"amount": 30.00});
    let responses = join_all(
        keys.iter()
            .map(|key| mp_post(&sandbox, &path, &partial, Some(key))),
    )
    .await;
    let mut created = 0;
    let mut refused = 0;
    let mut refunded_with = None;
    for (key, response) in keys.iter().zip(responses) {
        match response.status().as_u16() {
            201 => {
                let refund: Value = response.json().await.unwrap();
                assert_eq!(refund["payment_id"], id);
                assert_eq!(refund["amount"], 30.0);
                assert_eq!(refund["status"], "approved");
                refunded_with = Some((key.clone(), refund));
                created += 1;
            }
            400 => {
                let error: Value = response.json().await.unwrap();
                assert_eq!(error["error"], "bad_request");
                refused += 1;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((created, refused), (3, 2));
    let (_, payment) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(payment["transaction_amount_refunded"], 90.0);
    assert_eq!(payment["status"], "approved");
    assert_eq!(payment["status_detail"], "partially_refunded");
    assert_eq!(payment["refunds"].as_array().unwrap().len(), 3);

    // A retried refund (same key) replays; an empty body refunds the rest; then the payment is refunded.
    let (key, refund) = refunded_with.unwrap();
    let again = mp_post(&sandbox, &path, &partial, Some(&key)).await;
    assert_eq!(again.status(), 201);
    assert_eq!(again.json::<Value>().await.unwrap(), refund);
    let response = client()
        .post(sandbox.url(&path))
        .bearer_auth(MP_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let rest: Value = response.json().await.unwrap();
    assert_eq!(rest["amount"], 10.0);
    let (_, payment) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(payment["status"], "refunded");
    assert_eq!(payment["transaction_amount_refunded"], 100.0);
    let response = mp_post(&sandbox, &path, &json!({"amount": 1}), None).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["cause"][0]["code"], 2063);
    let (_, refunds) = mp_get(&sandbox, &path).await;
    assert_eq!(refunds.as_array().unwrap().len(), 4);
    let report = sandbox.control().charges();
    assert_eq!(
        report.provider("mercadopago").unwrap().refunded_amount,
        10_000
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_filters_sorts_and_pages() {
    let sandbox = start(settings(None)).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let holder = if i == 3 { "OTHE" } else { "APRO" };
        let token = mp_card_token(&sandbox, holder).await;
        let body = mp_card_payment(10.0 + f64::from(i), &format!("ref-{i}"), &token);
        let response = mp_post(
            &sandbox,
            "/v1/payments",
            &body,
            Some(&format!("search-{i}")),
        )
        .await;
        assert_eq!(response.status(), 201);
        ids.push(
            response.json::<Value>().await.unwrap()["id"]
                .as_u64()
                .unwrap(),
        );
    }
    let base = "/v1/payments/search?range=date_created&begin_date=NOW-1DAYS&end_date=NOW";
    let (status, page) = mp_get(
        &sandbox,
        &format!("{base}&sort=date_created&criteria=asc&limit=2&offset=0"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["paging"], json!({"total": 5, "limit": 2, "offset": 0}));
    let first: Vec<u64> = page["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(first, ids[..2]);
    let (_, last) = mp_get(
        &sandbox,
        &format!("{base}&sort=date_created&criteria=asc&limit=2&offset=4"),
    )
    .await;
    assert_eq!(last["results"][0]["id"], ids[4]);
    let (_, desc) = mp_get(&sandbox, &format!("{base}&sort=id&criteria=desc")).await;
    let sorted: Vec<u64> = desc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    let mut expected = ids.clone();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(sorted, expected);
    let (_, rejected) = mp_get(&sandbox, &format!("{base}&status=rejected")).await;
    assert_eq!(rejected["paging"]["total"], 1);
    assert_eq!(
        rejected["results"][0]["status_detail"],
        "cc_rejected_other_reason"
    );
    let (_, by_ref) = mp_get(&sandbox, "/v1/payments/search?external_reference=ref-2").await;
    assert_eq!(by_ref["results"][0]["id"], ids[2]);
    let (_, approved_range) = mp_get(
        &sandbox,
        "/v1/payments/search?range=date_approved&begin_date=NOW-1DAYS&end_date=NOW",
    )
    .await;
    assert_eq!(
        approved_range["paging"]["total"], 4,
        "a rejected payment has no date_approved"
    );
    let (_, none) = mp_get(
        &sandbox,
        "/v1/payments/search?begin_date=2020-01-01&end_date=2020-01-02",
    )
    .await;
    assert_eq!(none["paging"]["total"], 0);
    let (status, error) = mp_get(&sandbox, "/v1/payments/search?begin_date=yesterday").await;
    assert_eq!(
        (status, error["cause"][0]["code"].as_u64()),
        (400, Some(1001))
    );
    let (status, _) = mp_get(&sandbox, "/v1/payments/search?sort=amount").await;
    assert_eq!(status, 400);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_outcomes_status_changes_and_chargebacks() {
    let sandbox = start(settings(None)).await;
    let control = sandbox.control();
    control
        .push_outcome(
            "mercadopago",
            Outcome {
                status: "pending".into(),
                status_detail: None,
            },
            1,
        )
        .unwrap();
    let response = mp_pay(&sandbox, 50.0, "pix-1", Some("o-1")).await;
    let pending: Value = response.json().await.unwrap();
    assert_eq!(pending["status"], "pending");
    assert_eq!(pending["date_approved"], Value::Null);
    let id = pending["id"].as_u64().unwrap().to_string();
    // A pending payment cannot be refunded.
    let response = mp_post(
        &sandbox,
        &format!("/v1/payments/{id}/refunds"),
        &json!({}),
        None,
    )
    .await;
    assert_eq!(response.status(), 400);

    // Paid: approved through the control API over HTTP.
    let response = control_post(
        &sandbox,
        &format!("/_sandbox/payments/mercadopago/{id}/status"),
        &json!({"status": "approved"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (_, approved) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(approved["status"], "approved");
    assert!(approved["date_approved"].is_string());

    let response = control_post(
        &sandbox,
        "/_sandbox/chargebacks",
        &json!({"provider": "mercadopago", "payment": id}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let (_, charged_back) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(charged_back["status"], "charged_back");
    assert_eq!(charged_back["status_detail"], "settled");
    assert!(
        control.chargeback("mercadopago", &id, None).is_err(),
        "only once"
    );

    // Pix is pending until paid; a payer named after a test card decides the outcome.
    let mut pix = mp_payment(12.0, "pix-2");
    pix["payment_method_id"] = json!("pix");
    let response = mp_post(&sandbox, "/v1/payments", &pix, Some("o-2")).await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (body["status"].as_str(), body["status_detail"].as_str()),
        (Some("pending"), Some("pending_waiting_transfer"))
    );
    let token = mp_card_token(&sandbox, "FUND").await;
    let fund = mp_card_payment(12.0, "card-3", &token);
    let response = mp_post(&sandbox, "/v1/payments", &fund, Some("o-3")).await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status_detail"], "cc_rejected_insufficient_amount");
    assert!(control
        .push_outcome(
            "mercadopago",
            Outcome {
                status: "refunded".into(),
                status_detail: None
            },
            1
        )
        .is_err());
    sandbox.stop().await;
}
