//! Issue 46, an intent's life after its charge was sent, end to end with the merchant API, the real dispatcher and
//! the provider sandbox playing Stripe: the cancel of a charge still open at the gateway (an abandoned 3-D Secure,
//! whose order is then paid by another card), the cancel that finds the payment completed a second before (the
//! success is reported, never lost), the expiry of an intent left waiting on its customer, and manual capture —
//! two captures in parallel capture once, more than authorized is refused naming the field, the void releases the
//! authorization. Charges and captures are counted at the gateway (the sandbox's own objects).

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};

use crate::merchant_api::{clients_section, count_of, order, Answer, Gatewayed, KEY_ONE, KEY_TWO};

const WAIT: Duration = Duration::from_secs(60);

/// A Stripe checkout of `amount` for order `order_ref`, paid with the test payment method `pm`.
fn checkout(amount: i64, order_ref: &str, pm: &str) -> Value {
    let mut body = order(amount);
    body["order_reference"] = json!(order_ref);
    body["stripe"] = json!({"payment_method": pm});
    body
}

/// The intent `id` as the API shows it once `done` holds for it (the dispatcher and the gateway move it).
async fn intent_when(gw: &Gatewayed, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/v1/payment_intents/{id}");
    let mut last = Value::Null;
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        last = gw.api.get(&path, Some(KEY_ONE)).await.json();
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("intent {id}: {what} not reached within {WAIT:?}; last seen {last}");
}

fn status_is(status: &'static str) -> impl Fn(&Value) -> bool {
    move |i| i["status"] == status && i["pending_operation"].is_null()
}

async fn post(gw: &Gatewayed, path: &str, key: Option<&str>, body: &str) -> Answer {
    gw.api.post(path, Some(KEY_ONE), key, body).await
}

/// The PaymentIntent at the gateway (the sandbox's own object).
async fn at_gateway(gw: &Gatewayed, pi: &str) -> Value {
    reqwest::Client::new()
        .get(format!(
            "{}v1/payment_intents/{pi}",
            gw.sandbox.base_url().as_str()
        ))
        .bearer_auth("sk_test_refused")
        .send()
        .await
        .expect("the sandbox answers")
        .json()
        .await
        .expect("json")
}

async fn facts(gw: &Gatewayed, ty: &str, id: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM domain_events WHERE type = $1
            AND convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'intent_id' = $2",
    )
    .bind(ty)
    .bind(id)
    .fetch_one(&gw.api.db.pool)
    .await
    .expect("facts")
}

/// The customer meets 3-D Secure and gives up; the merchant cancels (202: asked of the gateway), the gateway
/// cancels the PaymentIntent, the intent is `canceled` with one fact, and the same order is paid with another card
/// — one charge at the gateway in all. Before the fix the second checkout was 409 `order_reference_in_use` for
/// ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abandoned_3ds_is_canceled_at_the_gateway_and_its_order_paid_with_another_card() {
    let gw = Gatewayed::start().await;
    let first = gw
        .api
        .create(
            "3ds-1",
            &checkout(4200, "pedido-3ds", "pm_card_threeDSecure2Required"),
        )
        .await;
    assert_eq!(first.status, 201, "{first:?}");
    let id = first.json()["id"].as_str().unwrap().to_string();
    let waiting = intent_when(&gw, &id, "requires_action", status_is("requires_action")).await;
    let pi = waiting["provider_payment_id"].as_str().unwrap().to_string();
    let blocked = gw
        .api
        .create("3ds-2", &checkout(4200, "pedido-3ds", "pm_card_visa"))
        .await;
    assert_eq!(blocked.status, 409, "{blocked:?}");
    assert_eq!(blocked.code(), "order_reference_in_use");

    let cancel = post(
        &gw,
        &format!("/v1/payment_intents/{id}/cancel"),
        Some("cancel-3ds"),
        r#"{"cancellation_reason": "abandoned"}"#,
    )
    .await;
    assert_eq!(cancel.status, 202, "{cancel:?}");
    assert_eq!(cancel.json()["status"], "requires_action");
    assert_eq!(cancel.json()["pending_operation"], "cancel");
    // The same key replays the first answer; another cancel finds the one asked.
    let replay = post(
        &gw,
        &format!("/v1/payment_intents/{id}/cancel"),
        Some("cancel-3ds"),
        r#"{"cancellation_reason": "abandoned"}"#,
    )
    .await;
    assert!(replay.replayed && replay.status == 202, "{replay:?}");

    let canceled = intent_when(&gw, &id, "canceled", status_is("canceled")).await;
    assert_eq!(canceled["cancellation_reason"], "abandoned");
    assert_eq!(at_gateway(&gw, &pi).await["status"], "canceled");
    assert_eq!(facts(&gw, "payment_intent.canceled", &id).await, 1);

    let paid = gw
        .api
        .create("3ds-3", &checkout(4200, "pedido-3ds", "pm_card_visa"))
        .await;
    assert_eq!(paid.status, 201, "{paid:?}");
    let paid_id = paid.json()["id"].as_str().unwrap().to_string();
    intent_when(&gw, &paid_id, "succeeded", status_is("succeeded")).await;
    assert_eq!(gw.charges(), 1, "one charge at the gateway for the order");
    assert_eq!(
        count_of(
            &gw.api,
            "SELECT count(*) FROM outbound_requests WHERE kind = 'cancel' AND status = 'succeeded'"
        )
        .await,
        1
    );
    gw.stop().await;
}

/// The customer finishes the challenge a second before the merchant's cancel reaches the gateway: the gateway
/// refuses the cancel (the payment succeeded), hookline reads the payment and records it — the intent is
/// `succeeded` with its one `payment_intent.succeeded`, no `canceled`, the cancel request `declined` with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_after_the_customer_finished_the_challenge_reports_the_success() {
    let gw = Gatewayed::start().await;
    let created = gw
        .api
        .create(
            "late-cancel",
            &checkout(5100, "pedido-late", "pm_card_threeDSecure2Required"),
        )
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["id"].as_str().unwrap().to_string();
    let waiting = intent_when(&gw, &id, "requires_action", status_is("requires_action")).await;
    let pi = waiting["provider_payment_id"].as_str().unwrap().to_string();
    // The customer completes 3-D Secure at the gateway; hookline has not heard (no worker applies the webhook here).
    gw.sandbox
        .control()
        .complete_authentication("st", &pi, true)
        .expect("the challenge completes");
    let cancel = post(&gw, &format!("/v1/payment_intents/{id}/cancel"), None, "").await;
    assert_eq!(cancel.status, 202, "{cancel:?}");
    let done = intent_when(&gw, &id, "succeeded", status_is("succeeded")).await;
    assert!(done["cancellation_reason"].is_null(), "{done}");
    assert_eq!(done["amount_received"], 5100);
    assert_eq!(facts(&gw, "payment_intent.succeeded", &id).await, 1);
    assert_eq!(facts(&gw, "payment_intent.canceled", &id).await, 0);
    assert_eq!(gw.charges(), 1);
    let why: String = sqlx::query_scalar(
        "SELECT status || ': ' || coalesce(last_error, '') FROM outbound_requests WHERE kind = 'cancel'",
    )
    .fetch_one(&gw.api.db.pool)
    .await
    .unwrap();
    assert!(
        why.starts_with("declined: ") && why.contains("succeeded"),
        "{why}"
    );
    // Now final: a second cancel is 409 with the state.
    let again = post(&gw, &format!("/v1/payment_intents/{id}/cancel"), None, "").await;
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(again.json()["error"]["status"], "succeeded");
    gw.stop().await;
}

/// An intent left waiting on its customer (3-D Secure never completed) does not hold its order for ever: after
/// `api.intent_expiry_secs` the sweep asks the gateway to cancel it, once; it ends `canceled` as `expired`, and
/// the order can be paid again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_intent_left_waiting_on_its_customer_expires_at_the_gateway() {
    let section = clients_section().replace(
        "listen = \"127.0.0.1:0\"\n",
        "listen = \"127.0.0.1:0\"\nintent_expiry_secs = 2\n",
    );
    let gw = Gatewayed::start_with(&section).await;
    let created = gw
        .api
        .create(
            "waiting",
            &checkout(3300, "pedido-exp", "pm_card_threeDSecure2Required"),
        )
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["id"].as_str().unwrap().to_string();
    let done = intent_when(&gw, &id, "canceled", status_is("canceled")).await;
    assert_eq!(done["cancellation_reason"], "expired");
    let pi = done["provider_payment_id"].as_str().unwrap().to_string();
    assert_eq!(at_gateway(&gw, &pi).await["status"], "canceled");
    assert_eq!(facts(&gw, "payment_intent.canceled", &id).await, 1);
    assert_eq!(
        count_of(
            &gw.api,
            "SELECT count(*) FROM outbound_requests WHERE kind = 'cancel'"
        )
        .await,
        1,
        "asked once, whatever the sweeps"
    );
    let again = gw
        .api
        .create("waiting-2", &checkout(3300, "pedido-exp", "pm_card_visa"))
        .await;
    assert_eq!(again.status, 201, "{again:?}");
    gw.stop().await;
}

/// A manual-capture checkout of `amount`.
fn manual(amount: i64, order_ref: &str) -> Value {
    let mut body = checkout(amount, order_ref, "pm_card_visa");
    body["capture_method"] = json!("manual");
    body
}

/// `capture_method: manual`: the gateway authorizes only (`requires_capture`, `amount_capturable`, one
/// `payment_intent.amount_capturable_updated`); more than authorized is 400 naming `amount_to_capture`; two
/// captures with two keys in parallel — one is asked of the gateway (202), the other answers the state (409);
/// the gateway captures once, the amount asked; `succeeded` with `amount_received`, refunds bounded by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_parallel_captures_capture_once_and_never_more_than_authorized() {
    let gw = Gatewayed::start().await;
    let created = gw.api.create("auth", &manual(10_000, "pedido-cap")).await;
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.json()["capture_method"], "manual");
    let id = created.json()["id"].as_str().unwrap().to_string();
    let authorized = intent_when(&gw, &id, "requires_capture", status_is("requires_capture")).await;
    assert_eq!(authorized["amount_capturable"], 10_000);
    assert_eq!(authorized["amount_received"], 0);
    let pi = authorized["provider_payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(at_gateway(&gw, &pi).await["status"], "requires_capture");
    assert_eq!(
        facts(&gw, "payment_intent.amount_capturable_updated", &id).await,
        1
    );

    let path = format!("/v1/payment_intents/{id}/capture");
    let too_much = post(&gw, &path, Some("cap-0"), r#"{"amount_to_capture": 10001}"#).await;
    assert_eq!(too_much.status, 400, "{too_much:?}");
    assert_eq!(too_much.json()["error"]["param"], "amount_to_capture");
    // The capture needs a key, as a create does.
    let keyless = post(&gw, &path, None, "").await;
    assert_eq!(keyless.status, 400, "{keyless:?}");

    let answers = join_all((0..8).map(|n| {
        let path = path.clone();
        let gw = &gw;
        async move {
            post(
                gw,
                &path,
                Some(&format!("cap-{}", n + 1)),
                r#"{"amount_to_capture": 7000}"#,
            )
            .await
        }
    }))
    .await;
    let asked = answers.iter().filter(|a| a.status == 202).count();
    assert_eq!(asked, 1, "{answers:?}");
    for a in answers.iter().filter(|a| a.status != 202) {
        assert_eq!(a.status, 409, "{a:?}");
        assert_eq!(a.code(), "payment_intent_unexpected_state", "{a:?}");
    }
    let done = intent_when(&gw, &id, "succeeded", status_is("succeeded")).await;
    assert_eq!(done["amount_received"], 7000);
    assert_eq!(done["amount_capturable"], 0);
    let at = at_gateway(&gw, &pi).await;
    assert_eq!(at["status"], "succeeded", "{at}");
    assert_eq!(at["amount_received"], 7000, "{at}");
    assert_eq!(
        count_of(
            &gw.api,
            "SELECT count(*) FROM outbound_requests WHERE kind = 'capture'"
        )
        .await,
        1
    );
    assert_eq!(facts(&gw, "payment_intent.succeeded", &id).await, 1);
    // Refunds are bounded by what was captured, not by what was authorized.
    let refund = gw
        .api
        .post(
            &format!("/v1/payment_intents/{id}/refunds"),
            Some(KEY_ONE),
            Some("refund-over"),
            r#"{"amount": 7001}"#,
        )
        .await;
    assert_eq!(refund.status, 422, "{refund:?}");
    // Captured: a capture now is 409 with the state; another client's capture is 404.
    let late = post(&gw, &path, Some("cap-late"), "").await;
    assert_eq!(late.status, 409, "{late:?}");
    assert_eq!(late.json()["error"]["status"], "succeeded");
    let other = gw
        .api
        .post(&path, Some(KEY_TWO), Some("cap-other"), "")
        .await;
    assert_eq!(other.status, 404, "{other:?}");
    gw.stop().await;
}

/// The cancel of an authorization is the void: the gateway releases it, the intent is `canceled`, nothing was
/// captured; a capture after it is 409. Hostile capture input is 4xx naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_void_releases_the_authorization_and_capture_input_is_checked() {
    let gw = Gatewayed::start().await;
    let created = gw.api.create("void", &manual(2500, "pedido-void")).await;
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["id"].as_str().unwrap().to_string();
    let authorized = intent_when(&gw, &id, "requires_capture", status_is("requires_capture")).await;
    let pi = authorized["provider_payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/v1/payment_intents/{id}/capture");
    for (body, want) in [
        (r#"{"amount_to_capture": "100"}"#, 400),
        (r#"{"amount_to_capture": 0}"#, 400),
        (r#"{"amount_to_capture": -5}"#, 400),
        (r#"{"amount_to_capture": 1e400}"#, 400),
        (r#"{"amount_to_capture": 100, "x": 1}"#, 400),
        ("[]", 400),
        ("{\"amount_to_capture\": \"\\u0000\"}", 400),
    ] {
        let a = post(&gw, &path, Some(&format!("bad-{body}")), body).await;
        assert!(
            a.status == want || (a.status == 422 && want == 400),
            "{body}: {a:?}"
        );
    }
    let huge = format!("/v1/payment_intents/{}/capture", "x".repeat(5000));
    assert_eq!(post(&gw, &huge, Some("huge"), "").await.status, 404);
    let nul = post(&gw, "/v1/payment_intents/pi%00x/capture", Some("nul"), "").await;
    assert_eq!(nul.status, 400, "{nul:?}");

    let void = post(&gw, &format!("/v1/payment_intents/{id}/cancel"), None, "").await;
    assert_eq!(void.status, 202, "{void:?}");
    let done = intent_when(&gw, &id, "canceled", status_is("canceled")).await;
    assert_eq!(done["amount_received"], 0);
    let at = at_gateway(&gw, &pi).await;
    assert_eq!(at["status"], "canceled", "{at}");
    assert_eq!(at["amount_received"], 0, "{at}");
    let late = post(&gw, &path, Some("cap-after-void"), "").await;
    assert_eq!(late.status, 409, "{late:?}");
    assert_eq!(late.json()["error"]["status"], "canceled");
    gw.stop().await;
}
