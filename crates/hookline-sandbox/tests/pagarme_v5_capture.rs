//! Pagar.me v5's authorization and later capture (`credit_card.operation_type: "auth_only"`,
//! `POST /core/v5/charges/{id}/capture`): the charge waits `pending` with its transaction
//! `authorized_pending_capture` (order `pending`, `charge.pending`); the capture takes all or part of it once (a
//! retry with the key replays the answer) and makes it `paid`; `DELETE` voids it; an authorization uncaptured
//! for 5 days on the sandbox clock is cancelled, as Pagar.me does.

mod common;

use common::*;
use hookline_sandbox::RunningSandbox;
use serde_json::{json, Value};

const APPROVED: &str = "4000000000000010";
const DECLINED: &str = "4000000000000028";

/// An `auth_only` order of `amount` cents paid by a fresh token of card `number`.
async fn auth_only_order(sandbox: &RunningSandbox, code: &str, amount: i64, number: &str) -> Value {
    let token = pg_token(sandbox, number).await;
    let mut payment = pg_card_payment(&token);
    payment["credit_card"]["operation_type"] = json!("auth_only");
    let (status, order) = pg_post(
        sandbox,
        "/core/v5/orders",
        &pg_order(code, amount, payment),
        Some(&format!("{code}-create")),
    )
    .await;
    assert_eq!(status, 200, "{order}");
    order
}

/// An authorized (not captured) charge of `amount` cents; its id.
async fn authorized(sandbox: &RunningSandbox, code: &str, amount: i64) -> String {
    let order = auth_only_order(sandbox, code, amount, APPROVED).await;
    assert_eq!(order["status"], "pending", "{order}");
    let charge = &order["charges"][0];
    assert_eq!(charge["status"], "pending", "{order}");
    assert_eq!(
        charge["last_transaction"]["status"], "authorized_pending_capture",
        "{order}"
    );
    charge["id"].as_str().unwrap().to_owned()
}

async fn capture(
    sandbox: &RunningSandbox,
    charge: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> (u16, Value) {
    let request = pg_request(
        reqwest::Method::POST,
        sandbox,
        &format!("/core/v5/charges/{charge}/capture"),
        key,
    );
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    pg_send(request).await
}

/// The webhook types the sandbox queued for `resource`, in the order the changes happened.
fn queued(sandbox: &RunningSandbox, resource: &str) -> Vec<String> {
    sandbox
        .control()
        .deliveries()
        .into_iter()
        .filter(|d| d.resource_id == resource && d.copy == 0)
        .map(|d| d.event_type)
        .collect()
}

#[tokio::test]
async fn an_auth_only_charge_is_authorized_then_captured_once_under_its_key() {
    let sandbox = start_pagarme(None).await;
    let charge = authorized(&sandbox, "pi_auth_1", 5000).await;
    let (_, read) = pg_get(&sandbox, &format!("/core/v5/charges/{charge}")).await;
    assert_eq!(read["paid_amount"], 0);
    assert_eq!(read["last_transaction"]["operation_type"], "auth_only");
    assert_eq!(read["last_transaction"]["success"], true);
    assert_eq!(
        queued(&sandbox, &charge),
        ["charge.created", "charge.pending"]
    );
    let report = sandbox.control().charges();
    assert_eq!(report.provider("pagarme").unwrap().captured_charges, 0);

    let (status, paid) = capture(&sandbox, &charge, None, Some("cap-1")).await;
    assert_eq!(status, 200, "{paid}");
    assert_eq!(paid["status"], "paid");
    assert_eq!(paid["paid_amount"], 5000);
    assert_eq!(paid["last_transaction"]["status"], "captured");
    assert_eq!(paid["order"]["status"], "paid");
    // The same key: the first answer, nothing captured twice.
    let (status, replayed) = capture(&sandbox, &charge, None, Some("cap-1")).await;
    assert_eq!((status, &replayed), (200, &paid));
    let report = sandbox.control().charges();
    let key = report.key("pagarme", "cap-1").unwrap();
    assert_eq!((key.executed, key.replays), (1, 1));
    assert_eq!(report.provider("pagarme").unwrap().captured_charges, 1);
    // A second capture: refused.
    let (status, refused) = capture(&sandbox, &charge, None, Some("cap-2")).await;
    assert_eq!(status, 412, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("paid"),
        "{refused}"
    );
    assert_eq!(
        queued(&sandbox, &charge),
        ["charge.created", "charge.pending", "charge.paid"]
    );
    let order = paid["order"]["id"].as_str().unwrap();
    assert_eq!(queued(&sandbox, order), ["order.created", "order.paid"]);
    // Captured: refunded as any paid charge (the existing DELETE).
    let (status, refunded) = pg_refund(&sandbox, &charge, None, None).await;
    assert_eq!(status, 200, "{refunded}");
    assert_eq!(refunded["last_transaction"]["status"], "refunded");
}

#[tokio::test]
async fn a_partial_capture_takes_less_and_never_more_than_authorized() {
    let sandbox = start_pagarme(None).await;
    let charge = authorized(&sandbox, "pi_auth_2", 5000).await;
    let (status, refused) = capture(&sandbox, &charge, Some(json!({"amount": 5001})), None).await;
    assert_eq!(status, 412, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("amount"),
        "{refused}"
    );
    for bad in [json!(0), json!("10"), json!(-5)] {
        let (status, refused) =
            capture(&sandbox, &charge, Some(json!({"amount": bad})), None).await;
        assert_eq!(status, 422, "{bad}: {refused}");
        assert!(refused["errors"]["amount"].is_array(), "{refused}");
    }
    let (status, paid) = capture(
        &sandbox,
        &charge,
        Some(json!({"amount": 3000, "code": "pi_auth_2"})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{paid}");
    assert_eq!(
        (&paid["status"], &paid["paid_amount"]),
        (&json!("paid"), &json!(3000))
    );
    // Refunds are bounded by what was captured.
    let (status, refused) = pg_refund(&sandbox, &charge, Some(3001), None).await;
    assert_eq!(status, 412, "{refused}");
    let (status, refunded) = pg_refund(&sandbox, &charge, None, None).await;
    assert_eq!(status, 200, "{refunded}");
    assert_eq!(refunded["canceled_amount"], 3000);
}

#[tokio::test]
async fn an_authorization_is_voided_and_what_is_not_authorized_is_not_captured() {
    let sandbox = start_pagarme(None).await;
    let charge = authorized(&sandbox, "pi_auth_3", 2000).await;
    let (status, voided) = pg_refund(&sandbox, &charge, None, Some("void-1")).await;
    assert_eq!(status, 200, "{voided}");
    assert_eq!(voided["status"], "canceled");
    assert_eq!(voided["paid_amount"], 0);
    assert_eq!(voided["last_transaction"]["status"], "voided");
    assert_eq!(voided["order"]["status"], "canceled");
    let (status, refused) = capture(&sandbox, &charge, None, None).await;
    assert_eq!(status, 412, "{refused}");
    let report = sandbox.control().charges();
    let pagarme = report.provider("pagarme").unwrap();
    assert_eq!((pagarme.captured_charges, pagarme.refunds), (0, 0));

    // A declined auth_only card fails as any card does; a captured card, a pending Pix: nothing to capture.
    let order = auth_only_order(&sandbox, "pi_auth_4", 2000, DECLINED).await;
    assert_eq!(order["status"], "failed");
    let declined = order["charges"][0]["id"].as_str().unwrap();
    let (status, _) = capture(&sandbox, declined, None, None).await;
    assert_eq!(status, 412);
    let order = pg_card_order(&sandbox, "pi_auth_5", 2000, APPROVED, None).await;
    let paid = order["charges"][0]["id"].as_str().unwrap();
    let (status, _) = capture(&sandbox, paid, None, None).await;
    assert_eq!(status, 412);
    let (status, order) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order(
            "pi_auth_6",
            2000,
            json!({"payment_method": "pix", "pix": {"expires_in": 600}}),
        ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{order}");
    let pix = order["charges"][0]["id"].as_str().unwrap();
    let (status, _) = capture(&sandbox, pix, None, None).await;
    assert_eq!(status, 412);
    // The pending Pix is cancelled by DELETE.
    let (status, canceled) = pg_refund(&sandbox, pix, None, None).await;
    assert_eq!((status, &canceled["status"]), (200, &json!("canceled")));
    let (status, _) = capture(&sandbox, "ch_nope", None, None).await;
    assert_eq!(status, 404);
    // An operation type the sandbox does not play is refused naming it.
    let token = pg_token(&sandbox, APPROVED).await;
    let mut payment = pg_card_payment(&token);
    payment["credit_card"]["operation_type"] = json!("pre_auth");
    let (status, refused) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order("pi_auth_7", 2000, payment),
        None,
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["errors"]["order.payments[0].credit_card.operation_type"].is_array(),
        "{refused}"
    );
}

#[tokio::test]
async fn an_authorization_uncaptured_for_five_days_is_cancelled() {
    let sandbox = start_pagarme(None).await;
    let charge = authorized(&sandbox, "pi_auth_8", 2500).await;
    let days5: u64 = 5 * 86_400;
    let response = control_post(
        &sandbox,
        "/_sandbox/clock",
        &json!({"advance_secs": days5 - 60}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (_, read) = pg_get(&sandbox, &format!("/core/v5/charges/{charge}")).await;
    assert_eq!(read["status"], "pending");
    let response = control_post(&sandbox, "/_sandbox/clock", &json!({"advance_secs": 120})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        queued(&sandbox, &charge),
        ["charge.created", "charge.pending", "charge.updated"]
    );
    let (_, read) = pg_get(&sandbox, &format!("/core/v5/charges/{charge}")).await;
    assert_eq!(read["status"], "canceled");
    assert_eq!(read["last_transaction"]["status"], "voided");
    assert_eq!(read["order"]["status"], "canceled");
    let (status, _) = capture(&sandbox, &charge, None, None).await;
    assert_eq!(status, 412);
}
