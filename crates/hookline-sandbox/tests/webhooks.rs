//! Webhooks out: signed exactly as each provider signs (checked with hookline's own verifier), retried on
//! anything but a 2xx with the same identity, recorded attempt by attempt, and shaped on command (duplicated in
//! parallel, shuffled, held).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use hookline_sandbox::{DeliveryBehaviour, DeliveryState};
use serde_json::Value;

fn fail_twice(attempt: u32) -> Answer {
    if attempt <= 2 {
        Answer::Status(500)
    } else {
        Answer::Status(200)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_events_are_signed_and_retried_with_the_same_event_id() {
    let receiver = Receiver::start(fail_twice).await;
    let sandbox = start(settings(Some(&receiver.url))).await;
    let pi = succeeded_intent(&sandbox, 7700).await;
    eventually(
        Duration::from_secs(15),
        "three events delivered",
        || async {
            let d = sandbox.control().deliveries();
            d.len() == 3 && d.iter().all(|d| d.state == DeliveryState::Delivered)
        },
    )
    .await;
    let received = receiver.received();
    assert_eq!(received.len(), 9, "3 events × (2 failures + 1 success)");
    let mut by_event: BTreeMap<String, Vec<&Received>> = BTreeMap::new();
    for r in &received {
        assert_eq!(r.provider, "stripe");
        // The edge's verifier accepts it, and its dedupe key is the event id.
        assert_eq!(
            r.verified.as_ref().ok(),
            Some(&r.event_id),
            "{:?}",
            r.verified
        );
        by_event.entry(r.event_id.clone()).or_default().push(r);
    }
    assert_eq!(by_event.len(), 3);
    for attempts in by_event.values() {
        let answers: Vec<u16> = attempts.iter().map(|r| r.answered).collect();
        assert_eq!(answers, [500, 500, 200]);
        assert!(
            attempts.iter().all(|r| r.body == attempts[0].body),
            "a retry repeats the body"
        );
    }
    let types: BTreeSet<&str> = received
        .iter()
        .map(|r| r.body["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        BTreeSet::from([
            "payment_intent.created",
            "charge.succeeded",
            "payment_intent.succeeded"
        ])
    );
    let succeeded = received
        .iter()
        .find(|r| r.body["type"] == "payment_intent.succeeded")
        .unwrap();
    assert_eq!(succeeded.body["data"]["object"]["id"], pi.as_str());
    assert_eq!(succeeded.body["object"], "event");

    // Every attempt is recorded with its status and latency.
    for d in sandbox.control().deliveries() {
        let statuses: Vec<Option<u16>> = d.attempts.iter().map(|a| a.status).collect();
        assert_eq!(statuses, [Some(500), Some(500), Some(200)]);
        assert_eq!(
            d.attempts.iter().map(|a| a.number).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(d.url.ends_with("/webhooks/stripe"));
    }
    let (_, undelivered) = stripe_get(&sandbox, "/v1/events?delivery_success=false").await;
    assert_eq!(undelivered["data"], serde_json::json!([]));
    sandbox.stop().await;
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercado_pago_notifications_carry_only_the_id_and_keep_their_request_id() {
    let receiver = Receiver::start(fail_twice).await;
    let sandbox = start(settings(Some(&receiver.url))).await;
    let response = mp_pay(&sandbox, 40.0, "order-9", Some("n-1")).await;
    let payment_id = response.json::<Value>().await.unwrap()["id"]
        .as_u64()
        .unwrap()
        .to_string();
    eventually(
        Duration::from_secs(15),
        "the notification delivered",
        || async { receiver.received().iter().any(|r| r.answered == 200) },
    )
    .await;
    let received = receiver.received();
    assert_eq!(received.len(), 3);
    let request_ids: BTreeSet<Option<&str>> =
        received.iter().map(|r| r.request_id.as_deref()).collect();
    assert_eq!(request_ids.len(), 1, "the same x-request-id on every retry");
    let request_id = received[0].request_id.clone().unwrap();
    assert_eq!(request_id.len(), 36);
    for r in &received {
        assert_eq!(r.provider, "mercadopago");
        // The verifier's dedupe key is built from the signed data.id and request id.
        assert_eq!(
            r.verified.as_deref(),
            Ok(format!("mp:{payment_id}:{request_id}").as_str())
        );
        assert_eq!(r.query, format!("data.id={payment_id}&type=payment"));
        assert_eq!(r.body["data"]["id"], payment_id.as_str());
        assert_eq!(r.body["type"], "payment");
        assert_eq!(r.body["action"], "payment.created");
        assert_eq!(r.body["api_version"], "v1");
        assert_eq!(r.body["live_mode"], false);
        assert!(r.body["id"].is_u64() && r.body["user_id"].is_u64());
        assert!(
            r.body.get("transaction_amount").is_none(),
            "only the id travels"
        );
        assert_eq!(r.body, received[0].body);
    }
    assert_eq!(
        received.iter().map(|r| r.answered).collect::<Vec<_>>(),
        [500, 500, 200]
    );

    // A refund notifies payment.updated, with a new notification and request id.
    let response = mp_post(
        &sandbox,
        &format!("/v1/payments/{payment_id}/refunds"),
        &serde_json::json!({}),
        None,
    )
    .await;
    assert_eq!(response.status(), 201);
    eventually(Duration::from_secs(15), "the update delivered", || async {
        receiver
            .received()
            .iter()
            .filter(|r| r.answered == 200)
            .count()
            == 2
    })
    .await;
    let updated: Vec<Received> = receiver
        .received()
        .into_iter()
        .filter(|r| r.body["action"] == "payment.updated")
        .collect();
    assert_eq!(updated.len(), 3);
    assert_ne!(updated[0].request_id.as_deref(), Some(request_id.as_str()));
    assert_ne!(updated[0].event_id, received[0].event_id);
    sandbox.stop().await;
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_and_silent_receivers_exhaust_the_attempts() {
    // First attempt of each identity stalls past the timeout, the rest answer 503.
    let receiver = Receiver::start(|attempt| {
        if attempt == 1 {
            Answer::Stall(Duration::from_secs(2))
        } else {
            Answer::Status(503)
        }
    })
    .await;
    let mut s = settings(Some(&receiver.url));
    s.webhook_timeout = Duration::from_millis(300);
    s.webhook_max_attempts = 3;
    let sandbox = start(s).await;
    let response = stripe_post(
        &sandbox,
        "/v1/payment_intents",
        &[("amount", "500"), ("currency", "brl")],
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    eventually(Duration::from_secs(15), "the delivery given up", || async {
        sandbox
            .control()
            .deliveries()
            .iter()
            .any(|d| d.state == DeliveryState::Failed)
    })
    .await;
    let d = &sandbox.control().deliveries()[0];
    assert_eq!(d.attempts.len(), 3);
    let first = &d.attempts[0];
    assert_eq!(first.status, None);
    assert!(
        first.error.as_deref().unwrap_or("").contains("timed out"),
        "{first:?}"
    );
    assert!(first.latency_ms >= 250, "{first:?}");
    assert_eq!(d.attempts[1].status, Some(503));
    assert_eq!(d.attempts[2].status, Some(503));
    let (_, undelivered) = stripe_get(&sandbox, "/v1/events?delivery_success=false").await;
    assert_eq!(undelivered["data"].as_array().unwrap().len(), 1);
    sandbox.stop().await;
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_can_be_duplicated_in_parallel_held_and_shuffled() {
    let receiver = Receiver::start(|_| Answer::Status(200)).await;
    let sandbox = start(settings(Some(&receiver.url))).await;
    let control = sandbox.control();
    // Over HTTP, as a test in another process would.
    let response = client()
        .put(sandbox.url("/_sandbox/delivery"))
        .json(&serde_json::json!({"duplicates": 2, "parallel": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    succeeded_intent(&sandbox, 1200).await;
    eventually(Duration::from_secs(10), "3 events × 3 copies", || async {
        receiver.received().len() == 9
    })
    .await;
    let mut copies: BTreeMap<String, usize> = BTreeMap::new();
    for r in receiver.received() {
        assert!(r.verified.is_ok());
        *copies.entry(r.event_id).or_default() += 1;
    }
    assert!(copies.values().all(|n| *n == 3), "{copies:?}");
    let by_copy: BTreeSet<u32> = control.deliveries().iter().map(|d| d.copy).collect();
    assert_eq!(by_copy, BTreeSet::from([0, 1, 2]));

    // Held while paused, released in a shuffled order.
    control
        .set_delivery_behaviour(DeliveryBehaviour {
            paused: true,
            ..DeliveryBehaviour::default()
        })
        .unwrap();
    for _ in 0..4 {
        succeeded_intent(&sandbox, 800).await;
    }
    // Two whole passes of the delivery loop after the held deliveries were queued: it has looked at each of them
    // at least once (a pass that started before they were queued may not have).
    let seen = control.delivery_rounds() + 2;
    eventually(
        Duration::from_secs(10),
        "the delivery loop passed over the held deliveries",
        || async { control.delivery_rounds() >= seen },
    )
    .await;
    assert_eq!(receiver.received().len(), 9, "nothing sent while paused");
    assert!(
        control
            .deliveries()
            .iter()
            .filter(|d| d.state == DeliveryState::Pending)
            .all(|d| d.attempts.is_empty()),
        "no attempt started while paused"
    );
    let held = control
        .deliveries()
        .iter()
        .filter(|d| d.state == DeliveryState::Pending)
        .count();
    assert_eq!(held, 12);
    control
        .set_delivery_behaviour(DeliveryBehaviour {
            shuffle_ms: 400,
            ..DeliveryBehaviour::default()
        })
        .unwrap();
    eventually(Duration::from_secs(10), "the held deliveries", || async {
        receiver.received().len() == 21
    })
    .await;
    let order: Vec<String> = receiver.received()[9..]
        .iter()
        .map(|r| r.event_id.clone())
        .collect();
    let created: Vec<String> = control
        .deliveries()
        .iter()
        .filter(|d| d.copy == 0)
        .skip(3)
        .map(|d| d.event_id.clone())
        .collect();
    assert_eq!(
        order.iter().collect::<BTreeSet<_>>(),
        created.iter().collect::<BTreeSet<_>>()
    );
    assert_ne!(
        order, created,
        "released out of creation order (seeded shuffle)"
    );
    sandbox.stop().await;
    receiver.stop().await;
}
