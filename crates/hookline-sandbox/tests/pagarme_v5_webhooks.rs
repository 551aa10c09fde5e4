//! Pagar.me v5 webhooks and the control API: webhooks as Pagar.me sends them (`hook_…`, `account`, `type`,
//! `data` = the order or the charge) with the webhook's HTTP Basic credentials, to a real receiver; the same
//! delivery shaping and fault injection as the other providers; card-use scripts on saved cards; chargebacks.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::*;
use hookline_sandbox::{DeliveryBehaviour, FaultAction, FaultSpec, Outcome};
use serde_json::{json, Value};

const APPROVED: &str = "4000000000000010";

/// The webhook types the receiver got for `resource` (an `or_…` or `ch_…` id), sorted: deliveries are sent
/// concurrently, so they may arrive in any order (as Pagar.me's may).
fn received_types(receiver: &Receiver, resource: &str) -> Vec<String> {
    let mut types: Vec<String> = receiver
        .received()
        .iter()
        .filter(|r| r.body["data"]["id"] == resource)
        .map(|r| r.body["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    types.sort();
    types
}

/// The webhook types the sandbox queued for `resource`, in the order the changes happened.
fn queued_types(sandbox: &hookline_sandbox::RunningSandbox, resource: &str) -> Vec<String> {
    sandbox
        .control()
        .deliveries()
        .into_iter()
        .filter(|d| d.resource_id == resource && d.copy == 0)
        .map(|d| d.event_type)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_arrive_as_pagarme_sends_them_with_basic_credentials() {
    let receiver = Receiver::start(|_| Answer::Status(200)).await;
    let sandbox = start_pagarme(Some(&receiver.url)).await;
    let order = pg_card_order(&sandbox, "pi_hooks", 4200, APPROVED, Some("hooks")).await;
    let order_id = order["id"].as_str().unwrap().to_owned();
    let charge_id = order["charges"][0]["id"].as_str().unwrap().to_owned();
    eventually(Duration::from_secs(10), "four webhooks", || async {
        receiver.received().len() >= 4
    })
    .await;

    let received = receiver.received();
    for r in &received {
        assert_eq!(r.provider, "pagarme");
        assert!(r.verified.is_ok(), "{:?}", r.verified);
        assert!(r.event_id.starts_with("hook_"), "{}", r.event_id);
        assert!(r.body["account"]["id"]
            .as_str()
            .unwrap()
            .starts_with("acc_"));
        assert!(r.body["created_at"].as_str().unwrap().ends_with('Z'));
        assert!(r.query.is_empty());
    }
    assert_eq!(
        received_types(&receiver, &order_id),
        ["order.created", "order.paid"]
    );
    assert_eq!(
        received_types(&receiver, &charge_id),
        ["charge.created", "charge.paid"]
    );
    assert_eq!(
        queued_types(&sandbox, &charge_id),
        ["charge.created", "charge.paid"]
    );
    let paid = received
        .iter()
        .find(|r| r.body["type"] == "order.paid")
        .unwrap();
    assert_eq!(paid.body["data"]["status"], "paid");
    assert_eq!(paid.body["data"]["code"], "pi_hooks");
    assert_eq!(
        paid.body["data"]["charges"][0]["last_transaction"]["status"],
        "captured"
    );
    let charge_paid = received
        .iter()
        .find(|r| r.body["type"] == "charge.paid")
        .unwrap();
    assert_eq!(charge_paid.body["data"]["order"]["id"], order_id.as_str());

    // Refunds send their own webhooks: partial, then total (with the order cancelled).
    pg_refund(&sandbox, &charge_id, Some(200), None).await;
    pg_refund(&sandbox, &charge_id, None, None).await;
    eventually(Duration::from_secs(10), "refund webhooks", || async {
        received_types(&receiver, &charge_id).len() >= 4
            && received_types(&receiver, &order_id).len() >= 3
    })
    .await;
    assert_eq!(
        queued_types(&sandbox, &charge_id)[2..],
        ["charge.partial_canceled", "charge.refunded"]
    );
    assert_eq!(queued_types(&sandbox, &order_id)[2], "order.canceled");
    assert!(received_types(&receiver, &charge_id).contains(&"charge.partial_canceled".to_owned()));
    let refunded = receiver
        .received()
        .into_iter()
        .find(|r| r.body["type"] == "charge.refunded")
        .unwrap();
    assert_eq!(refunded.body["data"]["canceled_amount"], 4200);

    // A declined card: payment_failed for the charge and the order.
    let declined = pg_card_order(&sandbox, "pi_no", 100, "4000000000000028", None).await;
    let declined_id = declined["id"].as_str().unwrap().to_owned();
    eventually(
        Duration::from_secs(10),
        "every delivery answered",
        || async {
            sandbox
                .control()
                .deliveries()
                .iter()
                .all(|d| d.state == hookline_sandbox::DeliveryState::Delivered)
        },
    )
    .await;
    assert_eq!(
        received_types(&receiver, &declined_id),
        ["order.created", "order.payment_failed"]
    );
    let deliveries = sandbox.control().deliveries();
    // Accepted at the first attempt: the receiver found the credentials it expects on every one.
    assert!(deliveries
        .iter()
        .all(|d| d.attempts.len() == 1 && d.attempts[0].status == Some(200)));
    sandbox.stop().await;
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_shaped_and_retried_like_the_other_providers() {
    // The receiver fails each hook's first attempt: every hook is retried with the same body.
    let receiver = Receiver::start(|n| {
        if n == 1 {
            Answer::Status(500)
        } else {
            Answer::Status(200)
        }
    })
    .await;
    let mut settings = settings(Some(&receiver.url));
    settings.providers.push(pagarme("pg"));
    let sandbox = start(settings).await;
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            duplicates: 1,
            parallel: true,
            ..Default::default()
        })
        .unwrap();
    let order = pg_card_order(&sandbox, "pi_dup", 1000, APPROVED, None).await;
    let order_id = order["id"].as_str().unwrap().to_owned();
    // order.created and order.paid, each duplicated: 4 deliveries, each delivered after one retry.
    eventually(
        Duration::from_secs(15),
        "duplicated, retried deliveries",
        || async {
            sandbox
                .control()
                .deliveries()
                .iter()
                .filter(|d| {
                    d.resource_id == order_id
                        && d.state == hookline_sandbox::DeliveryState::Delivered
                })
                .count()
                == 4
        },
    )
    .await;
    let bodies: Vec<Value> = receiver
        .received()
        .into_iter()
        .filter(|r| r.body["data"]["id"] == order_id)
        .map(|r| r.body)
        .collect();
    for kind in ["order.created", "order.paid"] {
        let copies: Vec<&Value> = bodies.iter().filter(|b| b["type"] == kind).collect();
        // Two copies, the first of them refused once: at least three requests, one body (one hook id).
        assert!(copies.len() >= 3, "{kind}: {copies:?}");
        assert!(
            copies.iter().all(|b| *b == copies[0]),
            "{kind}: every copy and retry is the same hook"
        );
    }
    let deliveries: Vec<_> = sandbox
        .control()
        .deliveries()
        .into_iter()
        .filter(|d| d.resource_id == order_id)
        .collect();
    assert!(
        deliveries
            .iter()
            .any(|d| d.attempts.len() == 2 && d.attempts[0].status == Some(500)),
        "{deliveries:?}"
    );

    // Dropped deliveries are recorded, never sent: reconciliation must find the order by listing.
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            drop_next: 10,
            ..Default::default()
        })
        .unwrap();
    let dropped = pg_card_order(&sandbox, "pi_drop", 1000, APPROVED, None).await;
    let dropped_id = dropped["id"].as_str().unwrap();
    let deliveries: Vec<_> = sandbox
        .control()
        .deliveries()
        .into_iter()
        .filter(|d| d.resource_id == dropped_id)
        .collect();
    assert_eq!(deliveries.len(), 2, "order.created and order.paid");
    assert!(deliveries
        .iter()
        .all(|d| d.state == hookline_sandbox::DeliveryState::Dropped && d.attempts.is_empty()));
    let (_, listed) = pg_get(&sandbox, "/core/v5/orders?code=pi_drop").await;
    assert_eq!(listed["data"][0]["id"], dropped_id);
    sandbox.stop().await;
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_answer_in_pagarmes_format_and_a_lost_answer_is_replayed_by_its_key() {
    let sandbox = start_pagarme(None).await;
    let control = sandbox.control();
    control
        .arm_fault(FaultSpec {
            provider: Some("pagarme".into()),
            path: Some("/core/v5/orders".into()),
            method: Some("POST".into()),
            action: FaultAction::Status {
                status: 503,
                retry_after_secs: None,
            },
            count: Some(1),
            rate: None,
        })
        .unwrap();
    let token = pg_token(&sandbox, APPROVED).await;
    let body = pg_order("pi_fault", 800, pg_card_payment(&token));
    let (status, error) = pg_post(&sandbox, "/core/v5/orders", &body, Some("lost")).await;
    assert_eq!(status, 503);
    assert!(error["message"].is_string(), "{error}");
    assert_eq!(
        control.charges().total_charges,
        0,
        "refused before executing"
    );

    // The answer is lost after the order was made; the retry with the same key gets it, and charges nothing more.
    control
        .arm_fault(FaultSpec {
            provider: None,
            path: Some("/core/v5/orders".into()),
            method: None,
            action: FaultAction::DropResponse,
            count: Some(1),
            rate: None,
        })
        .unwrap();
    let lost = pg_request(
        reqwest::Method::POST,
        &sandbox,
        "/core/v5/orders",
        Some("lost"),
    )
    .json(&body)
    .send()
    .await;
    assert!(lost.is_err(), "the connection is reset");
    let (status, order) = pg_post(&sandbox, "/core/v5/orders", &body, Some("lost")).await;
    assert_eq!(status, 200);
    assert_eq!(order["status"], "paid");
    let report = control.charges();
    assert_eq!(report.provider("pagarme").unwrap().charges, 1);
    assert_eq!(report.key("pagarme", "lost").unwrap().replays, 1);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_cards_follow_their_script_then_forced_outcomes_and_chargebacks_notify() {
    let receiver = Receiver::start(|_| Answer::Status(200)).await;
    let sandbox = start_pagarme(Some(&receiver.url)).await;
    let (_, customer) = pg_post(
        &sandbox,
        "/core/v5/customers",
        &json!({"name": "Happy Hogan", "email": "happy@example.com"}),
        None,
    )
    .await;
    let customer_id = customer["id"].as_str().unwrap().to_owned();
    let token = pg_token(&sandbox, APPROVED).await;
    let (status, card) = pg_post(
        &sandbox,
        &format!("/core/v5/customers/{customer_id}/cards"),
        &json!({"token": token}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{card}");
    let card_id = card["id"].as_str().unwrap().to_owned();

    let script = control_post(
        &sandbox,
        &format!("/_sandbox/payment_methods/pagarme/{card_id}/script"),
        &json!({"outcomes": ["insufficient_funds", "succeed"]}),
    )
    .await;
    assert_eq!(script.status(), 200);
    let refused = control_post(
        &sandbox,
        &format!("/_sandbox/payment_methods/pagarme/{card_id}/script"),
        &json!({"outcomes": ["cc_rejected_other_reason"]}),
    )
    .await;
    assert_eq!(refused.status(), 400, "not a Pagar.me outcome");
    let charge_saved = |code: &str| {
        json!({
            "code": code,
            "customer_id": customer_id,
            "items": [{"amount": 990, "description": "Mensalidade", "quantity": 1}],
            "payments": [{"payment_method": "credit_card", "credit_card": {"card_id": card_id}}],
        })
    };
    let (_, first) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &charge_saved("cycle-1"),
        Some("cycle-1"),
    )
    .await;
    let transaction = &first["charges"][0]["last_transaction"];
    assert_eq!(
        (first["status"].as_str(), transaction["status"].as_str()),
        (Some("failed"), Some("not_authorized"))
    );
    assert_eq!(transaction["acquirer_return_code"], "1016");
    // A replay is not a use.
    pg_post(
        &sandbox,
        "/core/v5/orders",
        &charge_saved("cycle-1"),
        Some("cycle-1"),
    )
    .await;
    let (_, second) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &charge_saved("cycle-2"),
        Some("cycle-2"),
    )
    .await;
    assert_eq!(second["status"], "paid");
    let script = sandbox
        .control()
        .payment_method_script("pagarme", &card_id)
        .unwrap();
    assert_eq!(script.uses, 2);
    assert_eq!(
        sandbox
            .control()
            .charges()
            .payment_method_charges("pagarme", &card_id),
        2
    );

    // Past the script, forced outcomes decide the next card charges.
    sandbox
        .control()
        .push_outcome(
            "pagarme",
            Outcome {
                status: "failed".into(),
                status_detail: Some("expired_card".into()),
            },
            1,
        )
        .unwrap();
    assert!(sandbox
        .control()
        .push_outcome(
            "pagarme",
            Outcome {
                status: "approved".into(),
                status_detail: None
            },
            1
        )
        .is_err());
    let (_, forced) = pg_post(&sandbox, "/core/v5/orders", &charge_saved("cycle-3"), None).await;
    assert_eq!(
        forced["charges"][0]["last_transaction"]["acquirer_return_code"],
        "1001"
    );

    // Chargebacks on the paid charge: opened, then won.
    let charge_id = second["charges"][0]["id"].as_str().unwrap().to_owned();
    let opened = control_post(
        &sandbox,
        "/_sandbox/chargebacks",
        &json!({"provider": "pagarme", "payment": charge_id}),
    )
    .await;
    assert_eq!(opened.status(), 201);
    assert_eq!(
        opened.json::<Value>().await.unwrap()["status"],
        "chargedback"
    );
    let won = sandbox
        .control()
        .chargeback("pagarme", &charge_id, Some("won"))
        .unwrap();
    assert_eq!(won["status"], "paid");
    assert!(
        sandbox
            .control()
            .chargeback("pagarme", &charge_id, Some("won"))
            .is_err(),
        "not chargedback"
    );
    assert!(queued_types(&sandbox, &charge_id)
        .ends_with(&["charge.chargedback".to_owned(), "charge.paid".to_owned()]));
    eventually(Duration::from_secs(10), "chargeback webhooks", || async {
        received_types(&receiver, &charge_id).contains(&"charge.chargedback".to_owned())
    })
    .await;
    let auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(PG_WEBHOOK_AUTH)
    );
    assert!(
        receiver.received().iter().all(|r| r.verified.is_ok()),
        "every delivery carried {auth}"
    );
    sandbox.stop().await;
    receiver.stop().await;
}
