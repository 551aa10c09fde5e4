//! Issue 46, an intent's life after its charge was sent, end to end with the merchant API, the real dispatcher and
//! the provider sandbox playing Stripe: the cancel of a charge still open at the gateway (an abandoned 3-D Secure,
//! whose order is then paid by another card), the cancel that finds the payment completed a second before (the
//! success is reported, never lost), the expiry of an intent left waiting on its customer, and manual capture —
//! two captures in parallel capture once, more than authorized is refused naming the field, the void releases the
//! authorization. Charges and captures are counted at the gateway (the sandbox's own objects).

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};

use crate::merchant_api::{
    clients_section, count_of, order, Answer, Api, Gatewayed, KEY_ONE, KEY_TWO,
};

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

    // Asked of the gateway, and answered within `api.gateway_wait_ms`: 200 with the intent canceled.
    let cancel = post(
        &gw,
        &format!("/v1/payment_intents/{id}/cancel"),
        Some("cancel-3ds"),
        r#"{"cancellation_reason": "abandoned"}"#,
    )
    .await;
    assert_eq!(cancel.status, 200, "{cancel:?}");
    assert_eq!(cancel.json()["status"], "canceled");
    assert!(cancel.json()["pending_operation"].is_null());
    // The same key replays the first answer, settled the same way.
    let replay = post(
        &gw,
        &format!("/v1/payment_intents/{id}/cancel"),
        Some("cancel-3ds"),
        r#"{"cancellation_reason": "abandoned"}"#,
    )
    .await;
    assert!(replay.replayed && replay.status == 200, "{replay:?}");

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
    // The cancel's answer says what happened: the payment had succeeded.
    let cancel = post(&gw, &format!("/v1/payment_intents/{id}/cancel"), None, "").await;
    assert_eq!(cancel.status, 409, "{cancel:?}");
    assert_eq!(cancel.code(), "payment_intent_unexpected_state");
    assert_eq!(cancel.json()["error"]["status"], "succeeded");
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
    // One capture is asked of the gateway, and its answer awaited: 200 `succeeded`.
    let asked: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    assert_eq!(asked.len(), 1, "{answers:?}");
    assert_eq!(asked[0].json()["status"], "succeeded");
    assert_eq!(asked[0].json()["amount_received"], 7000);
    for a in answers.iter().filter(|a| a.status != 200) {
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
    // No wait for the gateway (`api.gateway_wait_ms = 0`): the operation's answer is 202, its outcome follows.
    let section = clients_section().replace(
        "listen = \"127.0.0.1:0\"\n",
        "listen = \"127.0.0.1:0\"\ngateway_wait_ms = 0\n",
    );
    let gw = Gatewayed::start_with(&section).await;
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
    assert_eq!(void.json()["pending_operation"], "cancel");
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

/// `capture_method` is checked at create: only `automatic` or `manual` (422 `capture_method_invalid`), and a
/// manual capture is for cards — a Pix is 422 `capture_method_unsupported` naming the method's field.
#[tokio::test]
async fn capture_method_is_checked_at_create() {
    let api = Api::spawn().await;
    let pix = json!({"provider": "mp", "amount": 900, "currency": "brl", "capture_method": "manual",
                     "mercadopago": {"payment_method_id": "pix", "payer": {"email": "pix@example.com"}}});
    let a = api.create("pix-manual", &pix).await;
    assert_eq!(a.status, 422, "{a:?}");
    assert_eq!(a.code(), "capture_method_unsupported");
    assert_eq!(a.json()["error"]["param"], "mercadopago.payment_method_id");
    for bad in [json!("later"), json!(5), json!(true), json!("MANUAL")] {
        let mut body = order(900);
        body["capture_method"] = bad.clone();
        let a = api.create(&format!("bad-{bad}"), &body).await;
        assert_eq!(a.status, 422, "{bad}: {a:?}");
        assert_eq!(a.code(), "capture_method_invalid", "{bad}");
    }
    let mut ok = order(900);
    ok["capture_method"] = json!("manual");
    let a = api.create("manual-ok", &ok).await;
    assert_eq!(a.status, 201, "{a:?}");
    assert_eq!(a.json()["capture_method"], "manual");
    assert_eq!(a.json()["amount_capturable"], 0);
}

// The whole pipeline (edge, relay, worker on PostgreSQL and RabbitMQ, the real dispatcher), each gateway played by
// the sandbox and its webhooks applied: what an authorization and its capture post to the ledger.

mod pipeline {
    use std::time::Duration;

    use hookline_payments::intents::{
        self, CancelOutcome, CancellationReason, CaptureMethod, CaptureOutcome, Intent, NewIntent,
    };
    use hookline_payments::params::{PagarmeCustomer, PagarmeParams, PaymentParams};
    use hookline_tests::*;

    use crate::outbound::{fast_settings, mp_card_token, mp_params, spawn, stripe_params};

    const WAIT: Duration = Duration::from_secs(90);

    /// The pipeline and the sandbox, the real dispatcher running (and a worker applying the webhooks, when asked).
    struct Live {
        p: TestPipeline,
        sandbox: hookline_sandbox::RunningSandbox,
        worker: Option<WorkerGuard>,
        dispatcher: (
            tokio_util::sync::CancellationToken,
            tokio::task::JoinHandle<()>,
        ),
    }

    impl Live {
        async fn start(seed: u64, worker: bool) -> Live {
            let (p, sandbox) = sandboxed::start(seed).await;
            let worker = worker.then(|| p.spawn_worker());
            let dispatcher = spawn(hookline_billing::dispatcher(
                p.pool().clone(),
                &p.config,
                fast_settings(),
            ));
            Live {
                p,
                sandbox,
                worker,
                dispatcher,
            }
        }

        async fn stop(self) {
            self.dispatcher.0.cancel();
            self.dispatcher.1.await.unwrap();
            if let Some(worker) = self.worker {
                worker.stop().await;
            }
            self.sandbox.stop().await;
        }
    }

    /// The card parameters a merchant's checkout sends for `provider` (an approving test card).
    async fn card(
        p: &TestPipeline,
        sandbox: &hookline_sandbox::RunningSandbox,
        provider: &str,
    ) -> PaymentParams {
        match provider {
            "st" => stripe_params("pm_card_visa"),
            "mp" => mp_params(
                "visa",
                Some(mp_card_token(p, "mp", "APRO").await),
                "comprador@example.com.br",
            ),
            _ => {
                let (customer, card) = crate::pagarme_v5_outbound::saved_card(
                    sandbox,
                    "4000000000000010",
                    "Cliente Teste",
                )
                .await;
                crate::pagarme_v5_outbound::saved_params(&customer, &card)
            }
        }
    }

    /// A `capture_method: manual` intent of hookline's own for `amount`, queued.
    async fn authorize(
        p: &TestPipeline,
        provider: &str,
        amount: i64,
        params: &PaymentParams,
    ) -> Intent {
        let mut tx = p.pool().begin().await.unwrap();
        let intent = intents::create_intent(
            &mut tx,
            &NewIntent {
                provider,
                amount,
                currency: "brl",
                customer: Some("cliente-1"),
                description: Some("reserva"),
                order_reference: None,
                payment_params: Some(params),
                confirm: true,
                cycle: None,
                capture_method: CaptureMethod::Manual,
            },
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        intent
    }

    async fn intent_until(p: &TestPipeline, id: i64, want: &'static str) -> Intent {
        let pool = p.pool().clone();
        wait_until(WAIT, want, || {
            let pool = pool.clone();
            async move {
                let mut conn = pool.acquire().await.unwrap();
                intents::get(&mut conn, id)
                    .await
                    .unwrap()
                    .is_some_and(|i| i.status == want && i.pending_operation.is_none())
            }
        })
        .await;
        let mut conn = p.pool().acquire().await.unwrap();
        intents::get(&mut conn, id).await.unwrap().unwrap()
    }

    async fn scalar(p: &TestPipeline, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(p.pool())
            .await
            .expect(sql)
    }

    /// Authorized (the provider's webhook applied: payment `authorized`, NOTHING posted), then two captures of 60 %
    /// at once — one is asked, the gateway captures once:
    /// one balanced posting of the captured amount, the intent `succeeded` with `amount_received`, its facts
    /// `amount_capturable_updated` then `succeeded`, once each.
    async fn authorized_then_captured(provider: &str, seed: u64) {
        let live = Live::start(seed, true).await;
        let (p, sandbox) = (&live.p, &live.sandbox);
        let params = card(p, sandbox, provider).await;
        let intent = authorize(p, provider, 10_000, &params).await;
        let held = intent_until(p, intent.id, "requires_capture").await;
        assert_eq!(held.amount_capturable, 10_000);
        let payment = held.provider_payment_id.clone().expect("the gateway's id");
        wait_for_count(
            p.pool(),
            WAIT,
            "the authorization's webhook applied",
            &format!(
                "SELECT count(*) FROM payments WHERE provider = '{provider}'
                    AND provider_payment_id = '{payment}' AND status = 'authorized'"
            ),
            1,
        )
        .await;
        assert_eq!(
            scalar(p, "SELECT count(*) FROM ledger_transactions").await,
            0,
            "an authorization posts nothing"
        );

        // Two captures at once, each in its own transaction (two clicks, two keys): one statement decides.
        let capture = |pool: sqlx::PgPool| async move {
            let mut tx = pool.begin().await.unwrap();
            let read = intents::get(&mut tx, intent.id).await.unwrap().unwrap();
            let asked = intents::capture(&mut tx, read, Some(6_000)).await.unwrap();
            tx.commit().await.unwrap();
            matches!(asked, CaptureOutcome::Requested(_))
        };
        let (a, b) = tokio::join!(
            tokio::spawn(capture(p.pool().clone())),
            tokio::spawn(capture(p.pool().clone()))
        );
        assert_eq!(
            [a.unwrap(), b.unwrap()]
                .iter()
                .filter(|asked| **asked)
                .count(),
            1,
            "one capture asked"
        );
        let done = intent_until(p, intent.id, "succeeded").await;
        assert_eq!(done.amount_received, 6_000);
        wait_for_count(
            p.pool(),
            WAIT,
            "the capture posted",
            &format!("SELECT count(*) FROM ledger_transactions WHERE provider = '{provider}' AND kind = 'payment'"),
            1,
        )
        .await;
        p.drain(WAIT).await;
        let posted: i64 = sqlx::query_scalar(
            "SELECT amount FROM payments WHERE provider = $1 AND provider_payment_id = $2",
        )
        .bind(provider)
        .bind(&payment)
        .fetch_one(p.pool())
        .await
        .unwrap();
        assert_eq!(posted, 6_000, "the captured amount, not the authorized one");
        assert_ledger_balanced(p.pool()).await;
        let facts: Vec<String> = sqlx::query_scalar(
            "SELECT type FROM domain_events
              WHERE convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'intent_id' = $1 ORDER BY seq",
        )
        .bind(&intent.public_id)
        .fetch_all(p.pool())
        .await
        .unwrap();
        assert_eq!(
            facts,
            vec![
                "payment_intent.amount_capturable_updated".to_string(),
                "payment_intent.succeeded".to_string()
            ]
        );
        assert_eq!(
            scalar(p, "SELECT count(*) FROM outbound_requests WHERE kind = 'capture' AND status = 'succeeded'").await,
            1
        );
        live.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn stripe_authorization_posts_nothing_and_its_capture_posts_once() {
        authorized_then_captured("st", 4601).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mercadopago_authorization_posts_nothing_and_its_capture_posts_once() {
        authorized_then_captured("mp", 4602).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn pagarme_authorization_posts_nothing_and_its_capture_posts_once() {
        authorized_then_captured("pg", 4603).await;
    }

    /// An authorization nobody captures: the gateway lets it expire (the sandbox's clock moved past its
    /// lifetime) and says so by webhook — the intent ends `canceled` as `automatic`, nothing posted, a capture
    /// then is refused. The void, for comparison, is hookline's own cancel (`a_void_…` above).
    async fn authorization_expires(provider: &str, seed: u64) {
        let live = Live::start(seed, true).await;
        let (p, sandbox) = (&live.p, &live.sandbox);
        let params = card(p, sandbox, provider).await;
        let intent = authorize(p, provider, 4_000, &params).await;
        intent_until(p, intent.id, "requires_capture").await;
        sandbox
            .control()
            .advance_clock(Duration::from_secs(8 * 86_400))
            .expect("the clock moves");
        let done = intent_until(p, intent.id, "canceled").await;
        // `automatic` (the gateway's own cancel), or `expired` where the gateway names it so (Mercado Pago).
        assert!(
            matches!(
                done.cancellation_reason.as_deref(),
                Some("automatic" | "expired")
            ),
            "{:?}",
            done.cancellation_reason
        );
        p.drain(WAIT).await;
        assert_eq!(
            scalar(p, "SELECT count(*) FROM ledger_transactions").await,
            0
        );
        let mut tx = p.pool().begin().await.unwrap();
        let locked = intents::get(&mut tx, intent.id).await.unwrap().unwrap();
        assert!(matches!(
            intents::capture(&mut tx, locked, None).await.unwrap(),
            CaptureOutcome::Refused(_)
        ));
        tx.rollback().await.unwrap();
        live.stop().await;
    }

    /// The payment at the gateway (Mercado Pago's payment, Pagar.me's charge), as its API shows it.
    async fn payment_at(p: &TestPipeline, provider: &str, id: &str) -> serde_json::Value {
        let base = p.config.providers[provider]
            .api_base
            .clone()
            .expect("api_base");
        let req = reqwest::Client::new();
        let req = match provider {
            "mp" => req
                .get(base.join(&format!("v1/payments/{id}")).unwrap())
                .bearer_auth(sandboxed::MP_TOKEN),
            _ => req
                .get(base.join(&format!("core/v5/charges/{id}")).unwrap())
                .basic_auth(sandboxed::PAGARME_KEY, Some("")),
        };
        req.send()
            .await
            .expect("the sandbox answers")
            .json()
            .await
            .expect("json")
    }

    /// A Pix waiting for its payer (`requires_action`) at `provider`.
    fn pix(provider: &str) -> PaymentParams {
        match provider {
            "mp" => mp_params("pix", None, "pix@example.com"),
            _ => PaymentParams::Pagarme(PagarmeParams {
                payment_method: Some("pix".into()),
                customer: Some(PagarmeCustomer {
                    name: Some("Cliente Pix".into()),
                    email: Some("pix@example.com".into()),
                    document: Some("98765432100".into()),
                    kind: Some("individual".into()),
                }),
                ..PagarmeParams::default()
            }),
        }
    }

    async fn pix_intent(p: &TestPipeline, provider: &str) -> Intent {
        let mut tx = p.pool().begin().await.unwrap();
        let intent = intents::create_intent(
            &mut tx,
            &NewIntent {
                provider,
                amount: 2_500,
                currency: "brl",
                customer: Some("cliente-pix"),
                description: Some("pedido pix"),
                order_reference: None,
                payment_params: Some(&pix(provider)),
                confirm: true,
                cycle: None,
                capture_method: CaptureMethod::Automatic,
            },
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        intent
    }

    async fn cancel(p: &TestPipeline, id: i64) -> CancelOutcome {
        let mut tx = p.pool().begin().await.unwrap();
        let locked = intents::get(&mut tx, id).await.unwrap().unwrap();
        let outcome = intents::cancel(
            &mut tx,
            locked,
            CancellationReason::RequestedByCustomer,
            &hookline_billing::Dunning,
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        outcome
    }

    /// A Pix nobody paid is canceled at its gateway (Mercado Pago `PUT status=cancelled`, Pagar.me `DELETE` of
    /// the pending charge): the payment is canceled there, the intent `canceled` with one fact, nothing posted.
    /// Then a Pix PAID a second before the merchant's cancel: the gateway's state wins — `succeeded`, reported
    /// once, and at Pagar.me (whose `DELETE` of a paid charge is a refund) nothing is refunded: the charge is read
    /// first and the cancel never sent.
    async fn pix_cancel(provider: &str, seed: u64) {
        // No worker: the webhooks are not applied, so hookline learns the payment's state from the gateway alone.
        let live = Live::start(seed, false).await;
        let (p, sandbox) = (&live.p, &live.sandbox);
        let unpaid = pix_intent(p, provider).await;
        let waiting = intent_until(p, unpaid.id, "requires_action").await;
        assert!(matches!(
            cancel(p, unpaid.id).await,
            CancelOutcome::Requested(_)
        ));
        let done = intent_until(p, unpaid.id, "canceled").await;
        assert_eq!(
            done.cancellation_reason.as_deref(),
            Some("requested_by_customer")
        );
        let payment = waiting.provider_payment_id.clone().unwrap();
        let at = payment_at(p, provider, &payment).await;
        assert!(
            matches!(at["status"].as_str(), Some("cancelled" | "canceled")),
            "{at}"
        );

        let paid = pix_intent(p, provider).await;
        let waiting = intent_until(p, paid.id, "requires_action").await;
        let payment = waiting.provider_payment_id.clone().unwrap();
        // The payer pays; no worker applies the webhook here: hookline still shows `requires_action`.
        sandbox
            .control()
            .settle_pix(provider, &payment, true)
            .expect("the Pix is paid");
        assert!(matches!(
            cancel(p, paid.id).await,
            CancelOutcome::Requested(_)
        ));
        let done = intent_until(p, paid.id, "succeeded").await;
        assert!(done.cancellation_reason.is_none(), "{done:?}");
        let at = payment_at(p, provider, &payment).await;
        assert!(
            matches!(at["status"].as_str(), Some("approved" | "paid")),
            "the paid Pix stays paid, nothing refunded: {at}"
        );
        assert_eq!(at["canceled_amount"].as_i64().unwrap_or(0), 0, "{at}");
        assert_eq!(
            scalar(
                p,
                &format!(
                    "SELECT count(*) FROM domain_events WHERE type = 'payment_intent.succeeded'
                        AND convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'intent_id' = '{}'",
                    paid.public_id
                )
            )
            .await,
            1
        );
        live.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mercadopago_pix_is_canceled_at_the_gateway_unless_paid_first() {
        pix_cancel("mp", 4607).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn pagarme_pix_is_canceled_at_the_gateway_unless_paid_first() {
        pix_cancel("pg", 4608).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn stripe_authorization_expiry_cancels_the_intent() {
        authorization_expires("st", 4604).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mercadopago_authorization_expiry_cancels_the_intent() {
        authorization_expires("mp", 4605).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn pagarme_authorization_expiry_cancels_the_intent() {
        authorization_expires("pg", 4606).await;
    }
}

/// A billing claim's charge the gateway canceled by itself (an authorization it let expire, a Pix that expired)
/// moved no money: the claim's dunning takes it as an attempt that did not pay — retried on its schedule, the
/// reason as its code — and the cycle is free for the retry's charge (the live-cycle index leaves canceled charges
/// out). Before issue 46 the intent `failed`; now it is `canceled`, and the dunning must still hear of it.
#[tokio::test]
async fn a_billing_charge_canceled_at_the_gateway_is_dunned_like_a_decline() {
    use hookline_billing::claims::{self, ClaimStatus};
    use hookline_payments::intents::{self as payment_intents, ChargeAnswer};
    use hookline_payments::model::IntentStatus;

    let db = hookline_tests::TestDb::new().await;
    let (sub, intent_id, public_id) = crate::console_billing::billed(&db.pool, "stripe", 1).await;
    let mut tx = db.pool.begin().await.unwrap();
    payment_intents::record_charge_answer(
        &mut tx,
        intent_id,
        &ChargeAnswer {
            provider_payment_id: Some("pi_gateway_canceled"),
            status: IntentStatus::Canceled,
            next_action: None,
            failure_code: None,
            failure_message: None,
            ends_operation: false,
        },
        &hookline_billing::Dunning,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let intent = payment_intents::get(&mut conn, intent_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(intent.status, IntentStatus::Canceled);
    assert_eq!(intent.cancellation_reason.as_deref(), Some("automatic"));
    let claim = claims::get(&mut conn, sub, crate::console_billing::CYCLE)
        .await
        .unwrap()
        .expect("the claim");
    assert_eq!(claim.intent, public_id);
    assert_eq!(claim.status, ClaimStatus::RetryScheduled, "{claim:?}");
    assert!(claim.next_attempt_at.is_some());
}
