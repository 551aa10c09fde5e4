//! Mercado Pago refuses a card payment without a card token (and a payment without `payer.email`), tokens made by
//! `POST /v1/card_tokens` decide the outcome by their holder's name (Mercado Pago's test cards) and are single
//! use; Pix is pending with its QR code until the control API pays or expires it; a refund is read back with its
//! metadata. And idempotency keys expire at both providers: a retry after the window is a second object.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn card_payments_need_a_single_use_token_whose_holder_decides_the_outcome() {
    let sandbox = start(settings(None)).await;
    // No token: refused, nothing created.
    let mut body = mp_payment(10.0, "no-token");
    body["payment_method_id"] = json!("master");
    let response = mp_post(&sandbox, "/v1/payments", &body, Some("nt-1")).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"], "bad_request");
    assert_eq!(error["cause"][0]["code"], 3003);
    // An unknown token.
    let response = mp_post(
        &sandbox,
        "/v1/payments",
        &mp_card_payment(10.0, "bad-token", "ffffffffffffffffffffffffffffffff"),
        Some("nt-2"),
    )
    .await;
    assert_eq!(response.status(), 400);
    // No payer email, even with a token.
    let token = mp_card_token(&sandbox, "APRO").await;
    let mut no_email = mp_card_payment(10.0, "no-email", &token);
    no_email["payer"] = json!({});
    let response = mp_post(&sandbox, "/v1/payments", &no_email, Some("nt-3")).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["cause"][0]["code"], 4050);
    // Token validation.
    let response = mp_post(
        &sandbox,
        "/v1/card_tokens",
        &json!({"card_number": "12", "expiration_month": 11, "expiration_year": 2030, "cardholder": {"name": "APRO"}}),
        None,
    )
    .await;
    assert_eq!(response.status(), 400);

    for (holder, status, detail) in [
        ("APRO", "approved", "accredited"),
        ("OTHE", "rejected", "cc_rejected_other_reason"),
        ("FUND", "rejected", "cc_rejected_insufficient_amount"),
        ("SECU", "rejected", "cc_rejected_bad_filled_security_code"),
        ("CALL", "rejected", "cc_rejected_call_for_authorize"),
        ("CONT", "pending", "pending_contingency"),
    ] {
        let token = mp_card_token(&sandbox, holder).await;
        let (code, read) = mp_get(&sandbox, &format!("/v1/card_tokens/{token}")).await;
        assert_eq!(
            (code, read["cardholder"]["name"].as_str()),
            (200, Some(holder))
        );
        let body = mp_card_payment(20.0, holder, &token);
        let response = mp_post(
            &sandbox,
            "/v1/payments",
            &body,
            Some(&format!("k-{holder}")),
        )
        .await;
        assert_eq!(response.status(), 201);
        let payment: Value = response.json().await.unwrap();
        assert_eq!(
            (
                payment["status"].as_str(),
                payment["status_detail"].as_str()
            ),
            (Some(status), Some(detail)),
            "{holder}"
        );
        assert_eq!(payment["card"]["last_four_digits"], "5682");
        // A retry with the same key replays; the token is not used twice.
        let replay = mp_post(
            &sandbox,
            "/v1/payments",
            &body,
            Some(&format!("k-{holder}")),
        )
        .await;
        let replayed: Value = replay.json().await.unwrap();
        assert_eq!(replayed["id"], payment["id"]);
        // Under another key the used token is refused.
        let again = mp_post(
            &sandbox,
            "/v1/payments",
            &body,
            Some(&format!("k2-{holder}")),
        )
        .await;
        assert_eq!(again.status(), 400, "{holder}: a token is single use");
    }
    assert_eq!(
        sandbox
            .control()
            .charges()
            .provider("mercadopago")
            .unwrap()
            .charges,
        6
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pix_is_pending_with_its_qr_code_until_paid_or_expired() {
    let receiver = Receiver::start(|_| Answer::Status(200)).await;
    let sandbox = start(settings(Some(&receiver.url))).await;
    let mut pix = mp_payment(35.5, "pix-order");
    pix["payment_method_id"] = json!("pix");
    let mut created = Vec::new();
    for key in ["pix-a", "pix-b"] {
        let response = mp_post(&sandbox, "/v1/payments", &pix, Some(key)).await;
        assert_eq!(response.status(), 201);
        let payment: Value = response.json().await.unwrap();
        assert_eq!(payment["status"], "pending");
        assert_eq!(payment["status_detail"], "pending_waiting_transfer");
        assert_eq!(payment["payment_type_id"], "bank_transfer");
        let data = &payment["point_of_interaction"]["transaction_data"];
        assert!(data["qr_code"].as_str().unwrap().starts_with("000201"));
        assert!(!data["qr_code_base64"].as_str().unwrap().is_empty());
        assert!(data["ticket_url"].as_str().unwrap().starts_with("https://"));
        assert!(payment["date_of_expiration"].is_string());
        created.push(payment["id"].as_u64().unwrap().to_string());
    }
    // Paid over HTTP; expired in-process.
    let response = control_post(
        &sandbox,
        &format!("/_sandbox/pix/mercadopago/{}", created[0]),
        &json!({"outcome": "paid"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let expired = sandbox
        .control()
        .settle_pix("mercadopago", &created[1], false)
        .unwrap();
    assert_eq!(
        (
            expired["status"].as_str(),
            expired["status_detail"].as_str()
        ),
        (Some("cancelled"), Some("expired"))
    );
    let (_, paid) = mp_get(&sandbox, &format!("/v1/payments/{}", created[0])).await;
    assert_eq!(
        (paid["status"].as_str(), paid["status_detail"].as_str()),
        (Some("approved"), Some("accredited"))
    );
    assert!(paid["date_approved"].is_string());
    // Only a pending Pix can be settled.
    assert!(sandbox
        .control()
        .settle_pix("mercadopago", &created[0], true)
        .is_err());
    let response = control_post(
        &sandbox,
        &format!("/_sandbox/pix/mercadopago/{}", created[0]),
        &json!({"outcome": "later"}),
    )
    .await;
    assert_eq!(response.status(), 400);
    // The change is notified: payment.updated for the paid one reaches the receiver.
    let paid_id = created[0].clone();
    eventually(Duration::from_secs(10), "payment.updated delivered", || {
        let paid_id = paid_id.clone();
        let received = receiver.received();
        async move {
            received.iter().any(|r| {
                r.verified.is_ok()
                    && r.body["action"] == "payment.updated"
                    && r.body["data"]["id"] == paid_id.as_str()
            })
        }
    })
    .await;
    let report = sandbox.control().charges();
    assert_eq!(report.provider("mercadopago").unwrap().captured_charges, 1);
    sandbox.stop().await;
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_is_read_back_with_its_metadata() {
    let sandbox = start(settings(None)).await;
    let response = mp_pay(&sandbox, 50.0, "refund-me", Some("r-pay")).await;
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_u64()
        .unwrap();
    let response = mp_post(
        &sandbox,
        &format!("/v1/payments/{id}/refunds"),
        &json!({"amount": 20.0, "metadata": {"hookline_refund": "re_hl_7"}}),
        Some("r-1"),
    )
    .await;
    assert_eq!(response.status(), 201);
    let refund: Value = response.json().await.unwrap();
    assert_eq!(refund["metadata"]["hookline_refund"], "re_hl_7");
    let refund_id = refund["id"].as_u64().unwrap();
    let (status, got) = mp_get(&sandbox, &format!("/v1/payments/{id}/refunds/{refund_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(got["amount"], 20.0);
    assert_eq!(got["metadata"]["hookline_refund"], "re_hl_7");
    let (status, missing) = mp_get(&sandbox, &format!("/v1/payments/{id}/refunds/1")).await;
    assert_eq!(status, 404, "{missing}");
    let (status, _) = mp_get(&sandbox, &format!("/v1/payments/1/refunds/{refund_id}")).await;
    assert_eq!(status, 404);
    let (_, found) = mp_get(&sandbox, "/v1/payments/search?external_reference=refund-me").await;
    assert_eq!(found["paging"]["total"], 1);
    assert_eq!(found["results"][0]["id"], id);
    sandbox.stop().await;
}

/// The behaviour hookline must defend against: a key is remembered only for the window (Stripe documents 24 h);
/// the same request with the same key after it creates a second object — a second charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_key_window_charges_again_at_both_providers() {
    // Stripe's documented 24 h, on the sandbox's clock (moved past it below, not waited out).
    let window = Duration::from_secs(24 * 3600);
    let sandbox = start_with(|s| s.idempotency_window = window).await;
    let charge = [
        ("amount", "1500"),
        ("currency", "brl"),
        ("confirm", "true"),
        ("payment_method", "pm_card_visa"),
    ];
    let mut pix = mp_payment(15.0, "expiring");
    pix["payment_method_id"] = json!("pix");
    let mut stripe_ids = Vec::new();
    let mut mp_ids = Vec::new();
    for round in 0..2 {
        for _ in 0..2 {
            let s: Value = stripe_post(&sandbox, "/v1/payment_intents", &charge, Some("same-key"))
                .await
                .json()
                .await
                .unwrap();
            stripe_ids.push(s["id"].as_str().unwrap().to_owned());
            let m: Value = mp_post(&sandbox, "/v1/payments", &pix, Some("same-key"))
                .await
                .json()
                .await
                .unwrap();
            mp_ids.push(m["id"].as_u64().unwrap());
        }
        if round == 0 {
            // Past the window: the key is forgotten.
            sandbox
                .control()
                .advance_clock(window + Duration::from_secs(1))
                .expect("move the clock");
        }
    }
    // Within the window the retry replayed; after it, a second object.
    assert_eq!(stripe_ids[0], stripe_ids[1]);
    assert_eq!(stripe_ids[2], stripe_ids[3]);
    assert_ne!(stripe_ids[0], stripe_ids[2]);
    assert_eq!(mp_ids[0], mp_ids[1]);
    assert_ne!(mp_ids[0], mp_ids[2]);
    let report = sandbox.control().charges();
    assert_eq!(report.provider("stripe").unwrap().charges, 2);
    assert_eq!(report.provider("mercadopago").unwrap().charges, 2);
    assert_eq!(report.key("stripe", "same-key").unwrap().charges, 2);
    assert_eq!(report.key("mercadopago", "same-key").unwrap().charges, 2);
    sandbox.stop().await;
}
