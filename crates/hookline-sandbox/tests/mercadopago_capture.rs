//! Mercado Pago's authorization and later capture as the real API behaves
//! (<https://www.mercadopago.com.br/developers/en/docs/checkout-api/payment-management/capture-authorized-payment>,
//! `…/cancel-reserve`): `"capture": false` leaves an approved card `authorized`/`pending_capture`;
//! `PUT /v1/payments/{id}` `{"capture": true, "transaction_amount"?}` captures it once (a retry with the key
//! replays); `{"status": "cancelled"}` cancels an authorized or pending payment and is refused for an approved
//! one; a reservation uncaptured for 7 days on the sandbox clock is cancelled `expired`; every change is notified.

mod common;

use common::*;
use hookline_sandbox::RunningSandbox;
use serde_json::{json, Value};

/// `PUT /v1/payments/{id}` with `body` and an optional `X-Idempotency-Key`: status and JSON body.
async fn mp_put(
    sandbox: &RunningSandbox,
    id: &str,
    body: &Value,
    key: Option<&str>,
) -> (u16, Value) {
    let request = client()
        .put(sandbox.url(&format!("/v1/payments/{id}")))
        .bearer_auth(MP_TOKEN)
        .json(body);
    let request = match key {
        Some(key) => request.header("X-Idempotency-Key", key),
        None => request,
    };
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

/// An authorized (not captured) card payment of `amount` by an `APRO` card; its id.
async fn authorized(sandbox: &RunningSandbox, amount: f64, reference: &str) -> String {
    let token = mp_card_token(sandbox, "APRO").await;
    let mut body = mp_card_payment(amount, reference, &token);
    body["capture"] = json!(false);
    let response = mp_post(
        sandbox,
        "/v1/payments",
        &body,
        Some(&format!("{reference}-create")),
    )
    .await;
    assert_eq!(response.status(), 201);
    let payment: Value = response.json().await.unwrap();
    assert_eq!(
        (
            &payment["status"],
            &payment["status_detail"],
            &payment["captured"]
        ),
        (
            &json!("authorized"),
            &json!("pending_capture"),
            &json!(false)
        ),
        "{payment}"
    );
    payment["id"].to_string()
}

/// The notifications queued about payment `id`: their actions, oldest first.
fn notified(sandbox: &RunningSandbox, id: &str) -> Vec<String> {
    sandbox
        .control()
        .deliveries()
        .into_iter()
        .filter(|d| d.provider == "mercadopago" && d.resource_id == id)
        .map(|d| d.event_type)
        .collect()
}

fn cause(body: &Value) -> &Value {
    &body["cause"][0]["code"]
}

#[tokio::test]
async fn an_authorized_payment_is_captured_once_under_its_key() {
    let sandbox = start(settings(None)).await;
    let id = authorized(&sandbox, 80.0, "auth-1").await;
    let (_, payment) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(payment["status"], "authorized");
    assert!(payment["date_approved"].is_null(), "{payment}");
    assert_eq!(notified(&sandbox, &id), ["payment.created"]);
    let mp = sandbox.control().charges();
    assert_eq!(mp.provider("mercadopago").unwrap().captured_charges, 0);
    // Nothing to refund before the capture.
    let response = mp_post(
        &sandbox,
        &format!("/v1/payments/{id}/refunds"),
        &json!({}),
        Some("r-early"),
    )
    .await;
    assert_eq!(response.status(), 400);

    let capture = json!({"capture": true});
    let (status, captured) = mp_put(&sandbox, &id, &capture, Some("cap-1")).await;
    assert_eq!(status, 200, "{captured}");
    assert_eq!(
        (
            &captured["status"],
            &captured["status_detail"],
            &captured["captured"]
        ),
        (&json!("approved"), &json!("accredited"), &json!(true))
    );
    assert_eq!(captured["transaction_amount"], 80.0);
    assert!(captured["date_approved"].is_string(), "{captured}");
    // The same key: the first answer again, nothing captured twice.
    let (status, replayed) = mp_put(&sandbox, &id, &capture, Some("cap-1")).await;
    assert_eq!((status, &replayed), (200, &captured));
    let report = sandbox.control().charges();
    let key = report.key("mercadopago", "cap-1").unwrap();
    assert_eq!((key.executed, key.replays), (1, 1));
    assert_eq!(report.provider("mercadopago").unwrap().captured_charges, 1);
    // A second capture: refused, the payment unchanged.
    let (status, again) = mp_put(&sandbox, &id, &capture, Some("cap-2")).await;
    assert_eq!(status, 400, "{again}");
    assert_eq!(cause(&again), 2063);
    assert_eq!(
        notified(&sandbox, &id),
        ["payment.created", "payment.updated"]
    );
    // An approved payment is not cancelled (it is refunded).
    let (status, refused) = mp_put(&sandbox, &id, &json!({"status": "cancelled"}), None).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(cause(&refused), 2063);
    let (_, payment) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(payment["status"], "approved");
}

#[tokio::test]
async fn a_partial_capture_takes_less_and_never_more_than_authorized() {
    let sandbox = start(settings(None)).await;
    let id = authorized(&sandbox, 100.0, "auth-2").await;
    let (status, refused) = mp_put(
        &sandbox,
        &id,
        &json!({"capture": true, "transaction_amount": 100.01}),
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(cause(&refused), 2017);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("transaction_amount"),
        "{refused}"
    );
    for bad in [json!("60"), json!(-1), json!(1.005)] {
        let (status, refused) = mp_put(
            &sandbox,
            &id,
            &json!({"capture": true, "transaction_amount": bad}),
            None,
        )
        .await;
        assert_eq!(status, 400, "{bad}: {refused}");
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains("transaction_amount"),
            "{refused}"
        );
    }
    let (status, captured) = mp_put(
        &sandbox,
        &id,
        &json!({"capture": true, "transaction_amount": 60.5}),
        Some("cap-part"),
    )
    .await;
    assert_eq!(status, 200, "{captured}");
    assert_eq!(captured["status"], "approved");
    assert_eq!(captured["transaction_amount"], 60.5);
    // Refunds are bounded by what was captured.
    let path = format!("/v1/payments/{id}/refunds");
    let response = mp_post(&sandbox, &path, &json!({"amount": 60.51}), Some("r-1")).await;
    assert_eq!(response.status(), 400);
    let response = mp_post(&sandbox, &path, &json!({}), Some("r-2")).await;
    assert_eq!(response.status(), 201);
    let refund: Value = response.json().await.unwrap();
    assert_eq!(refund["amount"], 60.5);
}

#[tokio::test]
async fn authorized_and_pending_payments_are_cancelled_by_the_collector_and_other_updates_refused()
{
    let sandbox = start(settings(None)).await;
    let id = authorized(&sandbox, 30.0, "auth-3").await;
    let cancel = json!({"status": "cancelled"});
    let (status, cancelled) = mp_put(&sandbox, &id, &cancel, Some("void-1")).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(
        (
            &cancelled["status"],
            &cancelled["status_detail"],
            &cancelled["captured"]
        ),
        (&json!("cancelled"), &json!("by_collector"), &json!(false))
    );
    let (status, replayed) = mp_put(&sandbox, &id, &cancel, Some("void-1")).await;
    assert_eq!((status, &replayed), (200, &cancelled));
    // Nothing left to capture or cancel.
    let (status, refused) = mp_put(&sandbox, &id, &json!({"capture": true}), None).await;
    assert_eq!((status, cause(&refused)), (400, &json!(2063)));
    let (status, refused) = mp_put(&sandbox, &id, &cancel, None).await;
    assert_eq!((status, cause(&refused)), (400, &json!(2063)));
    assert_eq!(
        notified(&sandbox, &id),
        ["payment.created", "payment.updated"]
    );

    // A pending Pix is cancelled too.
    let mut pix = mp_payment(12.0, "pix-1");
    pix["payment_method_id"] = json!("pix");
    let response = mp_post(&sandbox, "/v1/payments", &pix, Some("pix-1")).await;
    let pix: Value = response.json().await.unwrap();
    assert_eq!(pix["status"], "pending");
    let (status, cancelled) = mp_put(&sandbox, &pix["id"].to_string(), &cancel, None).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status_detail"], "by_collector");

    // A rejected payment is not cancelled.
    let token = mp_card_token(&sandbox, "OTHE").await;
    let response = mp_post(
        &sandbox,
        "/v1/payments",
        &mp_card_payment(5.0, "rej", &token),
        Some("rej"),
    )
    .await;
    let rejected: Value = response.json().await.unwrap();
    assert_eq!(rejected["status"], "rejected");
    let (status, refused) = mp_put(&sandbox, &rejected["id"].to_string(), &cancel, None).await;
    assert_eq!((status, cause(&refused)), (400, &json!(2063)));

    // What the sandbox's PUT does not take: 400 naming it; an unknown payment: 404.
    let open = authorized(&sandbox, 9.0, "auth-4").await;
    for body in [
        json!({"status": "approved"}),
        json!({"capture": false}),
        json!({"capture": "yes"}),
        json!({"description": "changed"}),
        json!({"transaction_amount": 5}),
        json!({"capture": true, "status": "cancelled"}),
        json!([1]),
    ] {
        let (status, refused) = mp_put(&sandbox, &open, &body, None).await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert_eq!(refused["error"], "bad_request");
    }
    let (_, payment) = mp_get(&sandbox, &format!("/v1/payments/{open}")).await;
    assert_eq!(payment["status"], "authorized");
    let (status, _) = mp_put(&sandbox, "123", &cancel, None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_reservation_left_uncaptured_for_seven_days_is_cancelled_expired() {
    let sandbox = start(settings(None)).await;
    let id = authorized(&sandbox, 45.0, "auth-5").await;
    let week: u64 = 7 * 86_400;
    let response = control_post(
        &sandbox,
        "/_sandbox/clock",
        &json!({"advance_secs": week - 60}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (_, payment) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(payment["status"], "authorized");
    let response = control_post(&sandbox, "/_sandbox/clock", &json!({"advance_secs": 120})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        notified(&sandbox, &id),
        ["payment.created", "payment.updated"]
    );
    let (_, payment) = mp_get(&sandbox, &format!("/v1/payments/{id}")).await;
    assert_eq!(
        (
            &payment["status"],
            &payment["status_detail"],
            &payment["captured"]
        ),
        (&json!("cancelled"), &json!("expired"), &json!(false))
    );
    let (status, refused) = mp_put(&sandbox, &id, &json!({"capture": true}), None).await;
    assert_eq!((status, cause(&refused)), (400, &json!(2063)));
}
