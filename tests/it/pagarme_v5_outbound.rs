//! Pagar.me Core API v5 outbound, end to end (issue 29): intents created through the merchant API (and by
//! billing runs) become Pagar.me orders sent by the real dispatcher to the provider sandbox playing Pagar.me v5
//! (Basic auth with the secret key, `Idempotency-Key` remembered 24 h on the sandbox clock). Every outcome is
//! counted at the gateway: orders by hookline's `code` (`GET /core/v5/orders?code=`), the charge's
//! `canceled_amount`, the sandbox's per-key and per-card counters; and on hookline's side: intents, outbound
//! requests, refunds, billing claims.
//!
//! The ledger side of Pagar.me webhooks is not asserted here: the intent's final status comes from the order's
//! answer (a card order is `paid` or `failed` at once), which the dispatcher records.

use std::time::Duration;

use futures::future::join_all;
use hookline_payments::intents;
use hookline_payments::params::{PagarmeParams, PaymentParams};
use hookline_sandbox::{FaultAction, FaultSpec, RunningSandbox};
use hookline_tests::sandboxed::PAGARME_KEY;
use hookline_tests::*;
use serde_json::{json, Value};

use crate::outbound::{
    create_intent_with, expire_leases, fast_settings, intent, settle, short_key_dispatcher, spawn,
    CRASH_LEASE, WAIT,
};
use hookline_gateways::dispatch::Answer;

/// The merchant API key of the client `shop`.
const API_KEY: &str = "sk_hl_pagarme_outbound";
/// Pagar.me's test cards: paid, declined (`not_authorized`).
pub(crate) const APPROVED: &str = "4000000000000010";
const DECLINED: &str = "4000000000000028";

/// The sandboxed pipeline (providers `st`, `mp`, `pg`) with the merchant API on its own port; its base URL.
async fn start(seed: u64) -> (TestPipeline, RunningSandbox, String) {
    let port = free_port();
    let tail = format!(
        "[api]\nlisten = \"127.0.0.1:{port}\"\n\
         [[api.clients]]\nname = \"shop\"\nkeys = [\"{API_KEY}\"]\n"
    );
    let (p, sandbox) =
        sandboxed::start_with_tail(seed, Duration::from_secs(24 * 3600), &tail).await;
    (p, sandbox, format!("http://127.0.0.1:{port}"))
}

/// A request to the sandbox's Pagar.me API as the account `pg` (Basic, secret key, empty password).
fn pagarme(
    sandbox: &RunningSandbox,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .request(method, sandbox.url(path))
        .basic_auth(PAGARME_KEY, Some(""))
}

/// `method path` with `body` at the Pagar.me sandbox: status and JSON.
async fn pagarme_json(
    sandbox: &RunningSandbox,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = pagarme(sandbox, method, path);
    if let Some(b) = body {
        req = req.json(b);
    }
    let res = req.send().await.expect("the sandbox answers");
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// The orders whose `code` is `code` at the gateway (hookline's reference: the intent's public id).
async fn orders_with_code(sandbox: &RunningSandbox, code: &str) -> Vec<Value> {
    let (status, page) = pagarme_json(
        sandbox,
        reqwest::Method::GET,
        &format!("/core/v5/orders?code={code}&size=100"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["data"]
        .as_array()
        .expect("a data list")
        .iter()
        .filter(|o| o["code"] == code)
        .cloned()
        .collect()
}

/// The charge `id` at the gateway.
async fn charge(sandbox: &RunningSandbox, id: &str) -> Value {
    let (status, charge) = pagarme_json(
        sandbox,
        reqwest::Method::GET,
        &format!("/core/v5/charges/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{charge}");
    charge
}

/// A card token of test card `number`, made with the public key as a merchant's checkout would.
async fn card_token(sandbox: &RunningSandbox, number: &str) -> String {
    let public = format!("pk_{}", PAGARME_KEY.trim_start_matches("sk_"));
    let res = reqwest::Client::new()
        .post(sandbox.url(&format!("/core/v5/tokens?appId={public}")))
        .json(
            &json!({"type": "card", "card": {"number": number, "holder_name": "Tony Stark",
            "exp_month": 12, "exp_year": 2035, "cvv": "123"}}),
        )
        .send()
        .await
        .expect("token");
    assert_eq!(res.status(), 200);
    let token: Value = res.json().await.expect("json");
    token["id"].as_str().expect("token id").to_owned()
}

/// A customer with test card `number` saved to it: `(cus_…, card_…)`.
pub(crate) async fn saved_card(
    sandbox: &RunningSandbox,
    number: &str,
    name: &str,
) -> (String, String) {
    let (status, customer) = pagarme_json(
        sandbox,
        reqwest::Method::POST,
        "/core/v5/customers",
        Some(
            &json!({"name": name, "email": "cliente@example.com.br", "type": "individual",
            "document": "98765432100"}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{customer}");
    let customer = customer["id"].as_str().expect("cus_").to_owned();
    let (status, card) = pagarme_json(
        sandbox,
        reqwest::Method::POST,
        &format!("/core/v5/customers/{customer}/cards"),
        Some(
            &json!({"number": number, "holder_name": name, "exp_month": 3, "exp_year": 2034,
            "cvv": "321"}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{card}");
    (customer, card["id"].as_str().expect("card_").to_owned())
}

/// The parameters of a charge of a saved card.
pub(crate) fn saved_params(customer: &str, card: &str) -> PaymentParams {
    PaymentParams::Pagarme(PagarmeParams {
        payment_method: Some("credit_card".into()),
        card_id: Some(card.into()),
        customer_id: Some(customer.into()),
        installments: Some(1),
        ..PagarmeParams::default()
    })
}

/// A merchant API answer.
#[derive(Debug)]
struct Reply {
    status: u16,
    replayed: bool,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    fn error(&self) -> (String, String) {
        let j = self.json();
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        (s(&j["error"]["code"]), s(&j["error"]["param"]))
    }
}

/// `POST {api}{path}` as `shop`, with `key` as its `Idempotency-Key`.
async fn api_post(api: &str, path: &str, key: &str, body: &Value) -> Reply {
    let res = reqwest::Client::new()
        .post(format!("{api}{path}"))
        .bearer_auth(API_KEY)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .expect("the API answers");
    let status = res.status().as_u16();
    let replayed = res
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    Reply {
        status,
        replayed,
        text: res.text().await.expect("body"),
    }
}

async fn api_get(api: &str, path: &str) -> Value {
    let res = reqwest::Client::new()
        .get(format!("{api}{path}"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .expect("the API answers");
    assert_eq!(res.status(), 200);
    res.json().await.expect("json")
}

/// An intent created through the merchant API as `shop`, charging `card` saved to `customer` (`cus_…`).
async fn api_intent(
    p: &TestPipeline,
    api: &str,
    amount: i64,
    customer: &str,
    card: &str,
) -> intents::Intent {
    let body = json!({"provider": "pg", "amount": amount, "currency": "brl", "customer": customer,
        "pagarme": {"payment_method": "credit_card", "card_id": card, "customer_id": customer}});
    let created = api_post(
        api,
        "/v1/payment_intents",
        &format!("intent-{amount}"),
        &body,
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    let public_id = created.json()["id"].as_str().expect("id").to_owned();
    let id: i64 = sqlx::query_scalar("SELECT id FROM payment_intents WHERE public_id = $1")
        .bind(&public_id)
        .fetch_one(p.pool())
        .await
        .unwrap();
    intent(p, id).await
}

async fn count(p: &TestPipeline, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(p.pool())
        .await
        .expect(sql)
}

/// Every outbound request has a final answer (none pending, retried or unknown).
async fn all_answered(p: &TestPipeline) {
    settle(
        p,
        "every outbound request answered",
        "SELECT count(*) FROM outbound_requests WHERE status IN ('pending', 'unknown')",
        0,
    )
    .await;
}

fn pg_orders(sandbox: &RunningSandbox) -> usize {
    sandbox
        .control()
        .charges()
        .provider("pg")
        .expect("pg")
        .orders
}

/// Twelve parallel clicks with one `Idempotency-Key` through the merchant API: one intent, ONE order at Pagar.me
/// (counted by its `code`), charged once; the intent carries the order's charge id. The API takes `"pagarme"`
/// only for a pagarme-v5 provider and only in BRL; a refund through the API cancels that much of the charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_double_click_through_the_merchant_api_makes_one_pagarme_order() {
    let (p, sandbox, api) = start(41).await;
    let token = card_token(&sandbox, APPROVED).await;
    let body = json!({"provider": "pg", "amount": 4990, "currency": "brl", "customer": "cliente-pg-1",
        "description": "Pedido 1001",
        "pagarme": {"payment_method": "credit_card", "card_token": token, "installments": 1,
            "statement_descriptor": "HOOKLINE",
            "customer": {"name": "Tony Stark", "email": "tony@example.com", "document": "12345678909",
                "type": "individual"}}});
    let answers =
        join_all((0..12).map(|_| api_post(&api, "/v1/payment_intents", "click-pg-1", &body))).await;
    for a in &answers {
        assert_eq!(a.status, 201, "{a:?}");
        assert_eq!(a.text, answers[0].text, "every click gets the same answer");
    }
    assert_eq!(answers.iter().filter(|a| !a.replayed).count(), 1);
    let created = answers[0].json();
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(created["status"], "requires_dispatch", "{created}");
    assert_eq!(count(&p, "SELECT count(*) FROM payment_intents").await, 1);
    assert_eq!(count(&p, "SELECT count(*) FROM outbound_requests").await, 1);

    // What the API refuses, in the style of the other providers: nothing is created.
    let mut usd = body.clone();
    usd["currency"] = json!("usd");
    let mut on_stripe = body.clone();
    on_stripe["provider"] = json!("st");
    let mut stripe_on_pg = body.clone();
    stripe_on_pg
        .as_object_mut()
        .expect("object")
        .remove("pagarme");
    stripe_on_pg["stripe"] = json!({"payment_method": "pm_card_visa"});
    let mut bad_card = body.clone();
    bad_card["pagarme"] = json!({"payment_method": "credit_card", "card_id": "card_../x",
        "customer_id": "cus_1"});
    for (key, refused, status, code, param) in [
        ("bad-1", &usd, 422, "currency_unsupported", "currency"),
        (
            "bad-2",
            &on_stripe,
            400,
            "provider_object_mismatch",
            "pagarme",
        ),
        (
            "bad-3",
            &stripe_on_pg,
            400,
            "provider_object_mismatch",
            "stripe",
        ),
        (
            "bad-4",
            &bad_card,
            422,
            "parameter_invalid",
            "pagarme.card_id",
        ),
    ] {
        let a = api_post(&api, "/v1/payment_intents", key, refused).await;
        assert_eq!(a.status, status, "{key}: {a:?}");
        assert_eq!(
            a.error(),
            (code.to_owned(), param.to_owned()),
            "{key}: {a:?}"
        );
    }
    assert_eq!(count(&p, "SELECT count(*) FROM payment_intents").await, 1);

    let (cancel, task) = spawn(hookline_billing::dispatcher(
        p.pool().clone(),
        &p.config,
        fast_settings(),
    ));
    all_answered(&p).await;
    let orders = orders_with_code(&sandbox, &id).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(orders[0]["status"], "paid");
    assert_eq!(orders[0]["amount"], 4990);
    let charge_id = orders[0]["charges"][0]["id"]
        .as_str()
        .expect("ch_")
        .to_owned();
    let now = api_get(&api, &format!("/v1/payment_intents/{id}")).await;
    assert_eq!(now["status"], "succeeded", "{now}");
    assert_eq!(now["provider_payment_id"], charge_id.as_str());
    assert_eq!(pg_orders(&sandbox), 1);
    let report = sandbox.control().charges();
    let intent_id: i64 = sqlx::query_scalar("SELECT id FROM payment_intents")
        .fetch_one(p.pool())
        .await
        .unwrap();
    let stats = report
        .key("pg", &intents::charge_key(intent_id))
        .expect("the key reached Pagar.me");
    assert_eq!((stats.executed, stats.charges), (1, 1), "{stats:?}");

    // A partial refund through the API: the charge's canceled_amount grows by it, once.
    let refund = json!({"amount": 1990, "reason": "cliente desistiu"});
    let r = api_post(
        &api,
        &format!("/v1/payment_intents/{id}/refunds"),
        "refund-pg-1",
        &refund,
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let again = api_post(
        &api,
        &format!("/v1/payment_intents/{id}/refunds"),
        "refund-pg-1",
        &refund,
    )
    .await;
    assert_eq!((again.status, again.replayed), (201, true), "{again:?}");
    settle(
        &p,
        "the refund sent",
        "SELECT count(*) FROM outbound_refunds WHERE status = 'succeeded'",
        1,
    )
    .await;
    let ch = charge(&sandbox, &charge_id).await;
    assert_eq!(
        (ch["canceled_amount"].as_i64(), ch["status"].as_str()),
        (Some(1990), Some("paid")),
        "{ch}"
    );
    let provider_refund: String =
        sqlx::query_scalar("SELECT provider_refund_id FROM outbound_refunds")
            .fetch_one(p.pool())
            .await
            .unwrap();
    assert!(
        provider_refund.starts_with(&format!("{charge_id}-re_hl_")),
        "{provider_refund}"
    );
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();
    sandbox.stop().await;
}

/// Pagar.me makes the order but its answer is lost (the connection closes): the dispatcher resends with the SAME
/// `Idempotency-Key`, Pagar.me replays the order, and there is ONE order. Likewise when the dispatcher dies
/// between Pagar.me's answer and recording it (emulated: claimed with a lease, sent, never recorded).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_answer_is_resent_with_the_same_key_and_makes_one_order() {
    let (p, sandbox, _) = start(42).await;
    let (customer, card) = saved_card(&sandbox, APPROVED, "Pepper Potts").await;
    let params = saved_params(&customer, &card);

    // The lost answer: the order is made, the connection closed before the answer.
    sandbox
        .control()
        .arm_fault(FaultSpec {
            provider: Some("pg".into()),
            method: Some("POST".into()),
            ..FaultSpec::next("/core/v5/orders", 1, FaultAction::DropResponse)
        })
        .expect("arm");
    let lost = create_intent_with(&p, "pg", 2500, "cliente-pg-3", Some(&params)).await;
    let (cancel, task) = spawn(hookline_billing::dispatcher(
        p.pool().clone(),
        &p.config,
        fast_settings(),
    ));
    all_answered(&p).await;
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();

    // The dispatcher "crash": sent, never recorded; once its lease expired the next one sends it again.
    let crashed = create_intent_with(&p, "pg", 1990, "cliente-pg-2", Some(&params)).await;
    let d = hookline_billing::dispatcher(p.pool().clone(), &p.config, fast_settings());
    let claimed = d.claim(CRASH_LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let answer = d.send(&claimed[0]).await.unwrap();
    assert!(matches!(answer, Answer::Accepted { .. }), "{answer:?}");
    assert_eq!(intent(&p, crashed.id).await.provider_payment_id, None);
    assert_eq!(d.dispatch_once().await.unwrap(), 0, "leased");
    expire_leases(&p).await;
    let (cancel, task) = spawn(d);
    all_answered(&p).await;
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();

    for i in [&lost, &crashed] {
        let now = intent(&p, i.id).await;
        assert_eq!(now.status, "succeeded", "{now:?}");
        let charge_id = now.provider_payment_id.clone().expect("ch_");
        let orders = orders_with_code(&sandbox, &i.public_id).await;
        assert_eq!(orders.len(), 1, "{}: {orders:?}", i.public_id);
        assert_eq!(orders[0]["charges"][0]["id"], charge_id.as_str());
        assert_eq!(orders[0]["customer"]["id"], customer.as_str());
        let report = sandbox.control().charges();
        let stats = report
            .key("pg", &intents::charge_key(i.id))
            .expect("key stats")
            .clone();
        assert!(stats.requests >= 2, "{}: {stats:?}", i.public_id);
        assert_eq!((stats.executed, stats.charges), (1, 1), "{stats:?}");
        assert!(stats.replays >= 1, "{stats:?}");
    }
    let attempts: i32 =
        sqlx::query_scalar("SELECT attempts FROM outbound_requests WHERE intent_id = $1")
            .bind(lost.id)
            .fetch_one(p.pool())
            .await
            .unwrap();
    assert!(attempts >= 2, "{attempts}");
    assert_eq!(pg_orders(&sandbox), 2);
    assert_eq!(
        sandbox
            .control()
            .charges()
            .payment_method_charges("pg", &card),
        2
    );
    sandbox.stop().await;
}

/// Issue 27 for Pagar.me: the order's answer is lost (`reached`) or the order never made (`!reached`), then
/// Pagar.me answers 500 until the request is `unknown`. The sandbox clock then moves 25 h: Pagar.me has forgotten
/// the key, and resending under it would make a SECOND order. The dispatcher instead looks the order up by its
/// `code` (`GET /core/v5/orders?code=`): found → recorded (generation 0); not found → sent under the next key.
/// Either way ONE order, and nothing is sent under the expired key after the clock moved.
async fn key_expired_while_unknown(seed: u64, reached: bool) {
    let (p, sandbox, _) = start(seed).await;
    let control = sandbox.control();
    let (customer, card) = saved_card(&sandbox, APPROVED, "Natasha Romanoff").await;
    hookline_tests::sandboxed::arm_lost_then_failing(control, "pg", "/core/v5/orders", reached);
    let i = create_intent_with(
        &p,
        "pg",
        5_000,
        "cliente-pg-ttl",
        Some(&saved_params(&customer, &card)),
    )
    .await;
    let base = intents::charge_key(i.id);
    let (cancel, task) = spawn(short_key_dispatcher(&p));
    settle(
        &p,
        "the request unknown before its key's lifetime ends",
        &format!(
            "SELECT count(*) FROM outbound_requests WHERE intent_id = {} AND status = 'unknown'",
            i.id
        ),
        1,
    )
    .await;
    // Pagar.me forgets a key 24 h after its first use (on the sandbox clock).
    let seen_before_move = control.requests().len();
    control
        .advance_clock(Duration::from_secs(25 * 3600))
        .expect("advance the clock");
    control.clear_faults();
    settle(
        &p,
        "the request resolved",
        &format!(
            "SELECT count(*) FROM outbound_requests WHERE intent_id = {} AND status = 'succeeded'",
            i.id
        ),
        1,
    )
    .await;
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();

    let now = intent(&p, i.id).await;
    assert_eq!(now.status, "succeeded", "{now:?}");
    let orders = orders_with_code(&sandbox, &i.public_id).await;
    assert_eq!(orders.len(), 1, "ONE order: {orders:?}");
    assert_eq!(
        now.provider_payment_id.as_deref(),
        orders[0]["charges"][0]["id"].as_str()
    );
    assert_eq!(pg_orders(&sandbox), 1);
    let requests = control.requests();
    let after_move = &requests[seen_before_move..];
    assert!(
        after_move
            .iter()
            .all(|r| !(r.method == "POST" && r.idempotency_key.as_deref() == Some(base.as_str()))),
        "sent under the forgotten key after the clock moved"
    );
    let lookups = requests
        .iter()
        .filter(|r| {
            r.method == "GET"
                && r.path == "/core/v5/orders"
                && r.query.contains(&format!("code={}", i.public_id))
        })
        .count();
    assert!(lookups >= 1, "the order was looked up by its code");
    let generation: i32 =
        sqlx::query_scalar("SELECT key_generation FROM outbound_requests WHERE intent_id = $1")
            .bind(i.id)
            .fetch_one(p.pool())
            .await
            .unwrap();
    let report = control.charges();
    let next = format!("{base}-g1");
    let posts_next = requests
        .iter()
        .filter(|r| r.method == "POST" && r.idempotency_key.as_deref() == Some(next.as_str()))
        .count();
    if reached {
        assert_eq!(generation, 0);
        assert_eq!(posts_next, 0);
    } else {
        // Generation 1, or a later one when the faults (cleared once the request turned unknown) still failed
        // generation 1 on a loaded machine: only the last generation charges.
        assert!(generation >= 1, "sent under a new key");
        let last = format!("{base}-g{generation}");
        let stats = report.key("pg", &last).expect("the new key's stats");
        assert_eq!(stats.charges, 1, "{stats:?}");
    }
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_made_but_unknown_past_its_key_is_found_by_its_code() {
    key_expired_while_unknown(43, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_never_made_past_its_key_is_sent_under_a_new_key_once() {
    key_expired_while_unknown(44, false).await;
}

/// Ten parallel refunds of 3 000 on a 10 000 charge through the merchant API: three accepted (the database
/// decides), seven 422; Pagar.me's charge `canceled_amount` never exceeds the amount and equals what hookline
/// recorded; `hookline refund` takes the rest and the charge is `canceled`. Another charge: a partial refund,
/// then the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_refunds_never_cancel_more_than_the_charge() {
    let (p, sandbox, api) = start(45).await;
    let (customer, card) = saved_card(&sandbox, APPROVED, "Wanda Maximoff").await;
    // Created through the merchant API: its refunds are scoped to the client that created the intent.
    let a = api_intent(&p, &api, 10_000, &customer, &card).await;
    let b = api_intent(&p, &api, 5_000, &customer, &card).await;
    let (cancel, task) = spawn(hookline_billing::dispatcher(
        p.pool().clone(),
        &p.config,
        fast_settings(),
    ));
    all_answered(&p).await;
    let charge_of = |i: &intents::Intent| i.provider_payment_id.clone().expect("ch_");
    let (a, b) = (intent(&p, a.id).await, intent(&p, b.id).await);
    assert_eq!(
        (a.status.as_str(), b.status.as_str()),
        ("succeeded", "succeeded")
    );
    let (ch_a, ch_b) = (charge_of(&a), charge_of(&b));

    let refunds = |id: String, n: usize, amount: i64, prefix: &'static str| {
        let api = api.clone();
        async move {
            join_all((0..n).map(|k| {
                let (api, id) = (api.clone(), id.clone());
                async move {
                    api_post(
                        &api,
                        &format!("/v1/payment_intents/{id}/refunds"),
                        &format!("{prefix}-{k}"),
                        &json!({"amount": amount, "reason": "cliente desistiu"}),
                    )
                    .await
                }
            }))
            .await
        }
    };
    let answers = refunds(a.public_id.clone(), 10, 3_000, "race").await;
    assert_eq!(
        answers.iter().filter(|r| r.status == 201).count(),
        3,
        "{answers:?}"
    );
    for r in answers.iter().filter(|r| r.status != 201) {
        assert_eq!(
            (r.status, r.error().0.as_str()),
            (422, "refund_above_captured"),
            "{r:?}"
        );
    }
    settle(
        &p,
        "the three refunds sent",
        "SELECT count(*) FROM outbound_refunds WHERE status = 'succeeded'",
        3,
    )
    .await;
    let ch = charge(&sandbox, &ch_a).await;
    assert_eq!(
        (ch["canceled_amount"].as_i64(), ch["status"].as_str()),
        (Some(9_000), Some("paid")),
        "{ch}"
    );

    // The CLI takes what is left: the charge is cancelled in full.
    let out = tokio::process::Command::new(binary("hookline"))
        .arg("--config")
        .arg(p.config_file())
        .args([
            "refund",
            &a.public_id,
            "--amount",
            "1000",
            "--reason",
            "resto",
        ])
        .args(["--idempotency-key", "pg-cli-1"])
        .env_remove("DATABASE_URL")
        .env_remove("AMQP_URL")
        .output_within(CLI_TIMEOUT)
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .starts_with("re_hl_"),
        "{out:?}"
    );
    settle(
        &p,
        "the CLI's refund sent",
        "SELECT count(*) FROM outbound_refunds WHERE status = 'succeeded'",
        4,
    )
    .await;
    let ch = charge(&sandbox, &ch_a).await;
    assert_eq!(
        (ch["canceled_amount"].as_i64(), ch["status"].as_str()),
        (Some(10_000), Some("canceled")),
        "{ch}"
    );
    let more = refunds(a.public_id.clone(), 1, 1, "more").await;
    assert_eq!(more[0].status, 422, "{more:?}");

    // Partial, then the total.
    let partial = refunds(b.public_id.clone(), 1, 2_000, "partial").await;
    assert_eq!(partial[0].status, 201, "{partial:?}");
    settle(
        &p,
        "the partial refund sent",
        "SELECT count(*) FROM outbound_refunds WHERE status = 'succeeded'",
        5,
    )
    .await;
    let ch = charge(&sandbox, &ch_b).await;
    assert_eq!(
        (ch["canceled_amount"].as_i64(), ch["status"].as_str()),
        (Some(2_000), Some("paid")),
        "{ch}"
    );
    let total = refunds(b.public_id.clone(), 1, 3_000, "total").await;
    assert_eq!(total[0].status, 201, "{total:?}");
    settle(
        &p,
        "the total refund sent",
        "SELECT count(*) FROM outbound_refunds WHERE status = 'succeeded'",
        6,
    )
    .await;
    let ch = charge(&sandbox, &ch_b).await;
    assert_eq!(
        (ch["canceled_amount"].as_i64(), ch["status"].as_str()),
        (Some(5_000), Some("canceled")),
        "{ch}"
    );
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();

    // hookline agrees with the gateway, refund by refund and in sum.
    for (i, want) in [(&a, 10_000i64), (&b, 5_000)] {
        let recorded: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(amount), 0)::bigint FROM outbound_refunds
              WHERE intent_id = $1 AND status = 'succeeded'",
        )
        .bind(i.id)
        .fetch_one(p.pool())
        .await
        .unwrap();
        assert_eq!(recorded, want, "{}", i.public_id);
        assert_eq!(intent(&p, i.id).await.refunded, want);
    }
    assert_eq!(
        count(
            &p,
            "SELECT count(DISTINCT provider_refund_id) FROM outbound_refunds WHERE status = 'succeeded'"
        )
        .await,
        6
    );
    let report = sandbox.control().charges();
    let pg = report.provider("pg").expect("pg");
    assert_eq!((pg.orders, pg.charges), (2, 2));
    assert_eq!((pg.refunds, pg.refunded_amount), (6, 15_000), "{pg:?}");
    sandbox.stop().await;
}

/// Makes every subscription created at its anchor, as if it had existed since then (the CLI stamps now).
async fn backdate(p: &TestPipeline) {
    sqlx::query("UPDATE subscriptions SET created_at = anchor")
        .execute(p.pool())
        .await
        .expect("backdate the subscriptions");
}

/// The arguments of `hookline subscriptions add` for a monthly Pagar.me (`pg`) subscription of `amount` in
/// `currency`, anchored on 2026-10-01.
fn add_subscription(customer: &str, card: &str, amount: i64, currency: &str) -> Vec<String> {
    [
        "subscriptions",
        "add",
        "--provider",
        "pg",
        "--customer",
        customer,
        "--payment-method",
        card,
        "--amount",
        amount.to_string().as_str(),
        "--currency",
        currency,
        "--interval",
        "month",
        "--anchor",
        "2026-10-01T00:00:00Z",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `hookline billing run` 15 times, then 3 at once for the next cycle, on Pagar.me subscriptions (a customer
/// `cus_…` and its saved card `card_…`): ONE order per subscription and cycle at Pagar.me. A declined card is a
/// decline (its cycle retried on the dunning schedule); a card Pagar.me does not know is the unusable-method
/// decline (`needs_payment_method`, no order, not charged the next cycle).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_billing_runs_make_one_pagarme_order_per_cycle() {
    let (p, sandbox, _) = start(46).await;
    let (good_customer, good_card) = saved_card(&sandbox, APPROVED, "Steve Rogers").await;
    let (bad_customer, bad_card) = saved_card(&sandbox, DECLINED, "Bucky Barnes").await;
    let (gone_customer, _) = saved_card(&sandbox, APPROVED, "Sam Wilson").await;
    let gone_card = "card_gone0000000001";
    let cli = |args: Vec<String>| {
        let p = &p;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            p.hookline(&args).await
        }
    };
    let add =
        |customer: &str, card: &str, amount: i64| add_subscription(customer, card, amount, "brl");
    let mut subs = Vec::new();
    for (customer, card, amount) in [
        (&good_customer, good_card.as_str(), 2990),
        (&bad_customer, bad_card.as_str(), 3990),
        (&gone_customer, gone_card, 4990),
    ] {
        let out = cli(add(customer.as_str(), card, amount)).await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let id: i64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("id");
        subs.push(id);
    }
    // Subscriptions that existed since their anchor: October's period is theirs (a period that ended before a
    // subscription was created never is).
    backdate(&p).await;
    // Not a Pagar.me card: refused before anything is stored.
    let out = cli(add(good_customer.as_str(), "pm_card_visa", 100)).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--payment-method"),
        "{out:?}"
    );

    let (cancel, task) = spawn(hookline_billing::dispatcher(
        p.pool().clone(),
        &p.config,
        fast_settings(),
    ));
    let run = |cycle: &'static str| {
        cli([
            "billing",
            "run",
            "--json",
            "--cycle",
            cycle,
            "--allow-cycle",
            cycle,
        ]
        .map(str::to_owned)
        .to_vec())
    };
    let charged = |out: &std::process::Output| -> u64 {
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let s: Value = serde_json::from_slice(&out.stdout).expect("summary");
        assert_eq!(s["errors"], json!([]), "{s}");
        s["charged"].as_u64().expect("charged")
    };
    let mut first_cycle = 0;
    for _ in 0..15 {
        first_cycle += charged(&run("2026-10").await);
    }
    assert_eq!(first_cycle, 3);
    all_answered(&p).await;
    let runs = join_all((0..3).map(|_| run("2026-11"))).await;
    let second_cycle: u64 = runs.iter().map(charged).sum();
    assert_eq!(
        second_cycle, 2,
        "the unusable card's subscription is parked"
    );
    all_answered(&p).await;
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();

    let claims: Vec<(i64, String, String, String, String, Option<String>)> = sqlx::query_as(
        "SELECT b.subscription_id, b.billing_cycle, b.status, p.public_id, p.status, p.failure_code
           FROM billing_claims b JOIN payment_intents p ON p.id = b.intent_id
          ORDER BY b.subscription_id, b.billing_cycle",
    )
    .fetch_all(p.pool())
    .await
    .unwrap();
    let outcome: Vec<(i64, &str, &str, &str, Option<&str>)> = claims
        .iter()
        .map(|(s, c, st, _, is, f)| (*s, c.as_str(), st.as_str(), is.as_str(), f.as_deref()))
        .collect();
    assert_eq!(
        outcome,
        vec![
            (subs[0], "2026-10", "paid", "succeeded", None),
            (subs[0], "2026-11", "paid", "succeeded", None),
            (
                subs[1],
                "2026-10",
                "retry_scheduled",
                "failed",
                Some("1000")
            ),
            (
                subs[1],
                "2026-11",
                "retry_scheduled",
                "failed",
                Some("1000")
            ),
            (
                subs[2],
                "2026-10",
                "needs_payment_method",
                "failed",
                Some("payment_method_unusable")
            ),
        ]
    );
    let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM subscriptions ORDER BY id")
        .fetch_all(p.pool())
        .await
        .unwrap();
    assert_eq!(statuses, vec!["active", "active", "needs_payment_method"]);

    // At the gateway: one order per (subscription, cycle) charged, none for the unknown card.
    for (sub, cycle, _, public_id, _, _) in &claims {
        let orders = orders_with_code(&sandbox, public_id).await;
        let want = usize::from(*sub != subs[2]);
        assert_eq!(orders.len(), want, "{sub} {cycle}: {orders:?}");
        if let Some(o) = orders.first() {
            assert_eq!(o["metadata"]["hookline_subscription"], sub.to_string());
            assert_eq!(o["metadata"]["hookline_intent"], public_id.as_str());
        }
    }
    let report = sandbox.control().charges();
    assert_eq!(report.provider("pg").expect("pg").orders, 4);
    assert_eq!(report.payment_method_charges("pg", &good_card), 2);
    assert_eq!(report.payment_method_charges("pg", &bad_card), 2);
    assert_eq!(report.payment_method_charges("pg", gone_card), 0);
    assert_eq!(
        count(
            &p,
            "SELECT count(*) FROM outbound_requests WHERE status = 'succeeded'"
        )
        .await,
        2
    );
    assert_eq!(
        count(
            &p,
            "SELECT count(*) FROM outbound_requests WHERE status = 'declined'"
        )
        .await,
        3
    );
    sandbox.stop().await;
}

/// Issue 44, Pagar.me's rules: `hookline subscriptions add` refuses a currency a pagarme-v5 provider cannot charge
/// (a Pagar.me order carries no currency: `usd` would be charged as that many BRL cents), naming `--currency`; a
/// `usd` row of an older version is never charged by a billing run and is listed by `hookline billing status`; and
/// a saved card the acquirer calls expired (`acquirer_return_code` 1001) parks its subscription as
/// `needs_payment_method` at the first decline instead of going through the dunning schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pagarme_subscriptions_follow_the_currency_and_decline_rules() {
    let (p, sandbox, _) = start(47).await;
    let (customer, card) = saved_card(&sandbox, APPROVED, "Clint Barton").await;
    sandbox
        .control()
        .script_payment_method("pg", &card, &["expired_card"])
        .expect("script the card");
    let cli = |args: Vec<String>| {
        let p = &p;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            p.hookline(&args).await
        }
    };
    let add = |currency: &str| add_subscription(&customer, &card, 4990, currency);
    let refused = cli(add("usd")).await;
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--currency") && stderr.contains("pg cannot be charged in usd"),
        "{stderr}"
    );
    assert_eq!(count(&p, "SELECT count(*) FROM subscriptions").await, 0);
    let out = cli(add("BRL")).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let good: i64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("id");
    backdate(&p).await;
    // A row an older version let in.
    let old = {
        let mut conn = p.pool().acquire().await.unwrap();
        hookline_billing::add(
            &mut conn,
            None,
            &hookline_billing::NewSubscription {
                provider: "pg",
                customer: &customer,
                payment_method: &card,
                amount: 1000,
                currency: "usd",
                interval: hookline_billing::Interval::Month,
                anchor: time::macros::datetime!(2026-10-01 00:00 UTC),
            },
            // Created back then: its periods from the anchor on are its own.
            time::macros::datetime!(2026-10-01 00:00 UTC),
        )
        .await
        .unwrap()
        .id
    };

    let (cancel, task) = spawn(hookline_billing::dispatcher(
        p.pool().clone(),
        &p.config,
        fast_settings(),
    ));
    let run = cli([
        "billing",
        "run",
        "--json",
        "--cycle",
        "2026-10",
        "--allow-cycle",
        "2026-10",
    ]
    .map(str::to_owned)
    .to_vec())
    .await;
    // Exit 1: a subscription needs attention (the usd row, named in `errors`).
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let summary: Value = serde_json::from_slice(&run.stdout).expect("summary");
    assert_eq!(summary["charged"], 1, "{summary}");
    let errors = summary["errors"].to_string();
    assert!(
        errors.contains(&format!("subscription {old}")) && errors.contains("usd"),
        "{summary}"
    );
    all_answered(&p).await;
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();

    let claims: Vec<(i64, String, i32, Option<String>)> = sqlx::query_as(
        "SELECT subscription_id, status, attempts, last_failure_code FROM billing_claims ORDER BY subscription_id",
    )
    .fetch_all(p.pool())
    .await
    .unwrap();
    assert_eq!(
        claims,
        vec![(
            good,
            "needs_payment_method".to_owned(),
            1,
            Some("1001".to_owned())
        )],
        "the expired card parked at once; the usd row never claimed"
    );
    let status: String = sqlx::query_scalar("SELECT status FROM subscriptions WHERE id = $1")
        .bind(good)
        .fetch_one(p.pool())
        .await
        .unwrap();
    assert_eq!(status, "needs_payment_method");
    assert_eq!(pg_orders(&sandbox), 1, "only the expired card's order");

    let out = cli(["billing", "status", "--json"].map(str::to_owned).to_vec()).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let status: Value = serde_json::from_slice(&out.stdout).expect("status");
    assert_eq!(status["totals"]["currency_not_accepted"], 1, "{status}");
    assert_eq!(status["currency_not_accepted"][0]["id"], old, "{status}");
    sandbox.stop().await;
}
