//! Stripe refunds (never beyond what was captured, even concurrently) and the events list (pagination, filters,
//! `delivery_success=false`).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use futures::future::join_all;
use hookline_sandbox::{DeliveryBehaviour, DeliveryState};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_refunds_never_exceed_what_was_captured() {
    let sandbox = start(settings(None)).await;
    let pi = succeeded_intent(&sandbox, 10_000).await;
    let keys: Vec<String> = (0..6).map(|i| format!("refund-{i}")).collect();
    let form = [("payment_intent", pi.as_str()), ("amount", "3000")];
    let requests = keys
        .iter()
        .map(|key| stripe_post(&sandbox, "/v1/refunds", &form, Some(key)));
    let mut succeeded = 0;
    let mut refused = 0;
    for response in join_all(requests).await {
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        match status {
            200 => {
                assert_eq!(body["object"], "refund");
                assert_eq!(body["status"], "succeeded");
                assert_eq!(body["payment_intent"], pi.as_str());
                assert!(body["id"].as_str().unwrap().starts_with("re_"));
                succeeded += 1;
            }
            400 => {
                assert_eq!(body["error"]["code"], "amount_too_large", "{body}");
                refused += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((succeeded, refused), (3, 3));

    // The rest, without an amount; then nothing is left.
    let response = stripe_post(&sandbox, "/v1/refunds", &[("payment_intent", &pi)], None).await;
    assert_eq!(response.status(), 200);
    let last: Value = response.json().await.unwrap();
    assert_eq!(last["amount"], 1000);
    let response = stripe_post(
        &sandbox,
        "/v1/refunds",
        &[("payment_intent", &pi), ("amount", "1")],
        None,
    )
    .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "charge_already_refunded");

    let (_, intent) = stripe_get(&sandbox, &format!("/v1/payment_intents/{pi}")).await;
    let (status, charge) = stripe_get(
        &sandbox,
        &format!("/v1/charges/{}", intent["latest_charge"].as_str().unwrap()),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(charge["amount_refunded"], 10_000);
    assert_eq!(charge["refunded"], true);
    let (status, refund) = stripe_get(
        &sandbox,
        &format!("/v1/refunds/{}", last["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!((status, refund["amount"].as_i64()), (200, Some(1000)));
    let report = sandbox.control().charges();
    let stripe = report.provider("stripe").unwrap();
    assert_eq!((stripe.refunds, stripe.refunded_amount), (4, 10_000));
    // A refund of an intent that never succeeded, and of one that does not exist.
    let response = stripe_post(
        &sandbox,
        "/v1/payment_intents",
        &[("amount", "900"), ("currency", "brl")],
        None,
    )
    .await;
    let open: Value = response.json().await.unwrap();
    assert_eq!(open["status"], "requires_payment_method");
    let response = stripe_post(
        &sandbox,
        "/v1/refunds",
        &[("payment_intent", open["id"].as_str().unwrap())],
        None,
    )
    .await;
    assert_eq!(response.status(), 400);
    let response = stripe_post(
        &sandbox,
        "/v1/refunds",
        &[("payment_intent", "pi_nope")],
        None,
    )
    .await;
    assert_eq!(response.status(), 404);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_moves_an_intent_to_succeeded_once() {
    let sandbox = start(settings(None)).await;
    let customer: Value = stripe_post(&sandbox, "/v1/customers", &[("email", "a@b.c")], None)
        .await
        .json()
        .await
        .unwrap();
    let customer = customer["id"].as_str().unwrap();
    let response = stripe_post(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "4200"),
            ("currency", "BRL"),
            ("customer", customer),
        ],
        None,
    )
    .await;
    let pi: Value = response.json().await.unwrap();
    assert_eq!(pi["status"], "requires_payment_method");
    assert_eq!(pi["currency"], "brl");
    let path = format!("/v1/payment_intents/{}/confirm", pi["id"].as_str().unwrap());
    let response = stripe_post(&sandbox, &path, &[("payment_method", "pm_card_visa")], None).await;
    assert_eq!(response.status(), 200);
    let confirmed: Value = response.json().await.unwrap();
    assert_eq!(confirmed["status"], "succeeded");
    assert!(confirmed["latest_charge"]
        .as_str()
        .unwrap()
        .starts_with("ch_"));
    let response = stripe_post(&sandbox, &path, &[], None).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "payment_intent_unexpected_state");
    assert_eq!(sandbox.control().charges().total_charges, 1);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_listed_newest_first_in_pages_with_filters() {
    let sandbox = start(settings(None)).await;
    let mut intents = Vec::new();
    for _ in 0..7 {
        intents.push(succeeded_intent(&sandbox, 1500).await);
    }
    // Each confirmed intent: payment_intent.created, charge.succeeded, payment_intent.succeeded.
    let mut seen = Vec::new();
    let mut query = "/v1/events?limit=5".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = stripe_get(&sandbox, &query).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["object"], "list");
        assert_eq!(page["url"], "/v1/events");
        let data = page["data"].as_array().unwrap();
        assert!(data.len() <= 5);
        for e in data {
            assert_eq!(e["object"], "event");
            assert!(e["id"].as_str().unwrap().starts_with("evt_"));
            assert_eq!(
                e["data"]["object"]["id"].as_str().map(|id| id.len() > 3),
                Some(true)
            );
            seen.push(e.clone());
        }
        pages += 1;
        if page["has_more"] == false {
            break;
        }
        query = format!(
            "/v1/events?limit=5&starting_after={}",
            data.last().unwrap()["id"].as_str().unwrap()
        );
    }
    assert_eq!(pages, 5);
    assert_eq!(seen.len(), 21);
    let ids: BTreeSet<&str> = seen.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 21, "no event twice across pages");
    let created: Vec<i64> = seen
        .iter()
        .map(|e| e["created"].as_i64().unwrap())
        .collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "newest first");
    // The newest event is the last intent's success; the oldest the first intent's creation.
    assert_eq!(seen[0]["type"], "payment_intent.succeeded");
    assert_eq!(seen[0]["data"]["object"]["id"], intents[6].as_str());
    assert_eq!(seen[20]["type"], "payment_intent.created");
    assert_eq!(seen[20]["data"]["object"]["id"], intents[0].as_str());
    let charge = seen
        .iter()
        .find(|e| e["type"] == "charge.succeeded")
        .unwrap();
    let object = &charge["data"]["object"];
    assert_eq!(object["object"], "charge");
    assert_eq!(object["amount_captured"], 1500);
    assert!(object["payment_intent"]
        .as_str()
        .unwrap()
        .starts_with("pi_"));

    // ending_before walks back: the page before the second page is the first page.
    let (_, first) = stripe_get(&sandbox, "/v1/events?limit=5").await;
    let fifth = first["data"][4]["id"].as_str().unwrap();
    let (_, second) = stripe_get(
        &sandbox,
        &format!("/v1/events?limit=5&starting_after={fifth}"),
    )
    .await;
    let sixth = second["data"][0]["id"].as_str().unwrap();
    let (_, back) = stripe_get(
        &sandbox,
        &format!("/v1/events?limit=5&ending_before={sixth}"),
    )
    .await;
    assert_eq!(back["data"], first["data"]);
    assert_eq!(back["has_more"], false);

    let (_, succeeded) = stripe_get(
        &sandbox,
        "/v1/events?type=payment_intent.succeeded&limit=100",
    )
    .await;
    assert_eq!(succeeded["data"].as_array().unwrap().len(), 7);
    let (_, charges) = stripe_get(&sandbox, "/v1/events?type=charge.*").await;
    assert_eq!(charges["data"].as_array().unwrap().len(), 7);
    let (_, two_types) = stripe_get(
        &sandbox,
        "/v1/events?types[0]=charge.succeeded&types[1]=payment_intent.created&limit=100",
    )
    .await;
    assert_eq!(two_types["data"].as_array().unwrap().len(), 14);
    let (_, future) = stripe_get(&sandbox, "/v1/events?created[gt]=4102444800").await;
    assert_eq!(future["data"].as_array().unwrap().len(), 0);
    let (_, past) = stripe_get(&sandbox, "/v1/events?created[gte]=1600000000&limit=100").await;
    assert_eq!(past["data"].as_array().unwrap().len(), 21);
    let (status, _) = stripe_get(&sandbox, "/v1/events?limit=101").await;
    assert_eq!(status, 400);
    let (status, _) = stripe_get(&sandbox, "/v1/events?starting_after=evt_unknown").await;
    assert_eq!(status, 400);
    let (status, one) = stripe_get(&sandbox, &format!("/v1/events/{fifth}")).await;
    assert_eq!((status, one["id"].as_str()), (200, Some(fifth)));
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_deliveries_stay_listed_with_delivery_success_false() {
    let receiver = Receiver::start(|_| Answer::Status(200)).await;
    let sandbox = start(settings(Some(&receiver.url))).await;
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            drop_next: 2,
            ..DeliveryBehaviour::default()
        })
        .unwrap();
    let pi = succeeded_intent(&sandbox, 3000).await;
    eventually(Duration::from_secs(10), "the one kept delivery", || async {
        sandbox
            .control()
            .deliveries()
            .iter()
            .any(|d| d.state == DeliveryState::Delivered)
    })
    .await;
    let deliveries = sandbox.control().deliveries();
    let dropped: Vec<_> = deliveries
        .iter()
        .filter(|d| d.state == DeliveryState::Dropped)
        .collect();
    assert_eq!(dropped.len(), 2);
    assert!(
        dropped.iter().all(|d| d.attempts.is_empty()),
        "a dropped delivery is never attempted"
    );
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(
        receiver.received()[0].body["type"],
        "payment_intent.succeeded"
    );

    let (_, undelivered) = stripe_get(&sandbox, "/v1/events?delivery_success=false").await;
    let undelivered: Vec<&Value> = undelivered["data"].as_array().unwrap().iter().collect();
    let types: Vec<&str> = undelivered
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["charge.succeeded", "payment_intent.created"]);
    assert!(undelivered.iter().all(|e| e["pending_webhooks"] == 1));
    let (_, delivered) = stripe_get(&sandbox, "/v1/events?delivery_success=true").await;
    assert_eq!(delivered["data"][0]["data"]["object"]["id"], pi.as_str());
    assert_eq!(delivered["data"][0]["pending_webhooks"], 0);

    // Reconciliation can re-send what was dropped.
    let id = dropped[0].id;
    sandbox.control().redeliver(id).unwrap();
    eventually(Duration::from_secs(10), "the redelivery", || async {
        receiver.received().len() == 2
    })
    .await;
    let (_, undelivered) = stripe_get(&sandbox, "/v1/events?delivery_success=false").await;
    assert_eq!(undelivered["data"].as_array().unwrap().len(), 1);
    sandbox.stop().await;
    receiver.stop().await;
}
