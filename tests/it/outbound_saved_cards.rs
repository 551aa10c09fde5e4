//! Issue 28, the gateway side: charges with a payment method saved at the provider, sent by the real dispatcher to
//! the provider sandbox (which refuses what the real gateways refuse: a Mercado Pago saved card's token paid by
//! anyone but its customer, a Stripe off-session charge of a method not attached to the customer).
//!
//! - Mercado Pago saved cards (merchant-initiated, no CVV): per key generation the dispatcher reads the card,
//!   mints ONE token and stores it before the payment; every retry of the generation sends that token under the
//!   same key (the sandbox counts the tokens minted and the charges executed); a new generation mints anew; a card
//!   the gateway no longer finds or cannot tokenize is a decline (`payment_method_unusable`) and nothing is paid.
//! - Stripe: a 400 `invalid_request_error` about `payment_method`/`customer` is a decline, not an incident.

use hookline_payments::intents;
use hookline_payments::params::{MercadoPagoParams, PaymentParams, StripeParams};
use hookline_sandbox::{FaultAction, FaultSpec, RequestRecord, RunningSandbox};
use hookline_tests::*;
use serde_json::{json, Value};

use super::outbound::{
    charge_request, create_intent_with, fast_settings, intent, mp_card_token, postings_and_facts,
    saved_card, settle, short_key_dispatcher, spawn, KEY_TTL, WAIT,
};

/// A POST to the sandbox as Mercado Pago's API (provider `mp`); the JSON answer (2xx asserted).
async fn mp_post(sandbox: &RunningSandbox, path: &str, body: &Value) -> Value {
    let res = reqwest::Client::new()
        .post(sandbox.url(path))
        .bearer_auth(hookline_tests::sandboxed::MP_TOKEN)
        .json(body)
        .send()
        .await
        .expect("the sandbox answers");
    let status = res.status();
    let answer: Value = res.json().await.expect("JSON");
    assert!(status.is_success(), "{path}: {status}: {answer}");
    answer
}

/// A Mercado Pago customer (as the merchant's checkout creates one); its id.
async fn mp_customer(sandbox: &RunningSandbox, email: &str) -> String {
    let customer = mp_post(sandbox, "/v1/customers", &json!({ "email": email })).await;
    customer["id"].as_str().expect("customer id").to_owned()
}

/// A test card held by `holder` (`APRO` approves) saved to `customer` from a card-form token, as after a first,
/// customer-present payment; the card's id.
async fn mp_saved_card(
    p: &TestPipeline,
    sandbox: &RunningSandbox,
    customer: &str,
    holder: &str,
) -> String {
    let token = mp_card_token(p, "mp", holder).await;
    let card = mp_post(
        sandbox,
        &format!("/v1/customers/{customer}/cards"),
        &json!({ "token": token }),
    )
    .await;
    card["id"].as_str().expect("card id").to_owned()
}

/// What `billing::charge_params` builds for a Mercado Pago subscription (plus, optionally, the method).
fn saved(card: &str, customer: &str, method: Option<&str>) -> PaymentParams {
    PaymentParams::MercadoPago(MercadoPagoParams {
        card_id: Some(card.to_owned()),
        customer_id: Some(customer.to_owned()),
        payment_method_id: method.map(str::to_owned),
        installments: Some(1),
        ..MercadoPagoParams::default()
    })
}

fn mp_fault(path: &str, action: FaultAction, count: Option<u32>) -> FaultSpec {
    hookline_tests::sandboxed::fault(
        "mp",
        "POST",
        path,
        action,
        count,
        count.is_none().then_some(1.0),
    )
}

/// `(saved_card_generation, key_generation, the stored payment method, a token is stored)` of a charge request.
async fn stored_card(p: &TestPipeline, intent_id: i64) -> (Option<i32>, i32, Option<String>, bool) {
    sqlx::query_as(
        "SELECT saved_card_generation, key_generation, saved_card ->> 'payment_method_id',
                coalesce(length(saved_card ->> 'token') > 0, false)
           FROM outbound_requests WHERE intent_id = $1",
    )
    .bind(intent_id)
    .fetch_one(p.pool())
    .await
    .unwrap()
}

/// The statuses of the sandbox's requests in `requests` with `method` and `path`, in order.
fn statuses(requests: &[RequestRecord], method: &str, path: &str) -> Vec<u16> {
    requests
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .map(|r| r.status)
        .collect()
}

/// The card token is minted once per key generation and stored before the payment: the token step failing (500,
/// retried) mints again, but once a token is stored, the payment whose answer is lost is retried with THAT token
/// under the same key — the gateway replays its payment: ONE charge of the card, one token minted that paid.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_saved_card_is_charged_once_with_one_stored_token_however_often_the_payment_is_retried() {
    let (p, sandbox) = hookline_tests::sandboxed::start(31).await;
    let control = sandbox.control();
    let ana = mp_customer(&sandbox, "ana.saved@example.com").await;
    let card = mp_saved_card(&p, &sandbox, &ana, "APRO").await;
    let before = control.requests().len();
    let status_500 = FaultAction::Status {
        status: 500,
        retry_after_secs: None,
    };
    control
        .arm_fault(mp_fault("/v1/card_tokens", status_500, Some(1)))
        .expect("arm");
    control
        .arm_fault(mp_fault("/v1/payments", FaultAction::DropResponse, Some(1)))
        .expect("arm");
    let i = create_intent_with(&p, "mp", 4_990, "ana", Some(&saved(&card, &ana, None))).await;
    let (cancel, task) = spawn(hookline_billing::dispatcher(
        p.pool().clone(),
        &p.config,
        fast_settings(),
    ));
    settle(
        &p,
        "the saved card charged",
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
    assert!(now.provider_payment_id.is_some(), "{now:?}");
    let report = control.charges();
    assert_eq!(report.payment_method_charges("mp", &card), 1);
    assert_eq!(report.provider("mp").map(|b| b.charges), Some(1));
    let requests = &control.requests()[before..];
    // Attempt 1: card read, token refused (500). Attempt 2: card read, token minted and stored, payment sent,
    // answer lost. Attempt 3: the stored token, the same key — nothing minted.
    assert_eq!(
        statuses(
            requests,
            "GET",
            &format!("/v1/customers/{ana}/cards/{card}")
        ),
        vec![200, 200]
    );
    assert_eq!(
        statuses(requests, "POST", "/v1/card_tokens"),
        vec![500, 201]
    );
    let key = intents::charge_key(i.id);
    let payments: Vec<&RequestRecord> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/v1/payments")
        .collect();
    assert_eq!(payments.len(), 2, "{payments:?}");
    assert!(
        payments
            .iter()
            .all(|r| r.idempotency_key.as_deref() == Some(key.as_str())),
        "{payments:?}"
    );
    assert_eq!(
        stored_card(&p, i.id).await,
        (Some(0), 0, Some("master".to_owned()), true)
    );
    let (status, attempts, _, last_error) = charge_request(&p, i.id).await;
    assert_eq!(
        (status.as_str(), attempts),
        ("succeeded", 3),
        "{last_error}"
    );
    sandbox.stop().await;
}

/// A card the gateway no longer has for that customer (unknown card, another customer's card: the lookup's 404 or
/// the token's 400) is a decline `payment_method_unusable` — the request `declined`, the intent `failed`, a
/// `payment_intent.failed` fact, `hookline status` healthy — and no payment is sent. A card the issuer declines
/// (a card-use script) is an ordinary decline with Mercado Pago's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_saved_card_the_gateway_cannot_use_is_declined_and_nothing_is_paid() {
    let (p, sandbox) = hookline_tests::sandboxed::start(32).await;
    let control = sandbox.control();
    let ana = mp_customer(&sandbox, "ana.gone@example.com").await;
    let bia = mp_customer(&sandbox, "bia.gone@example.com").await;
    let anas = mp_saved_card(&p, &sandbox, &ana, "APRO").await;
    let disabled = mp_saved_card(&p, &sandbox, &ana, "APRO").await;
    control
        .script_payment_method("mp", &disabled, &["cc_rejected_card_disabled"])
        .expect("script");
    let before = control.requests().len();
    let unusable = [
        (saved("9999999", &ana, None), "the card lookup", 404),
        (saved(&anas, &bia, None), "the card lookup", 404),
        (saved(&anas, &bia, Some("visa")), "the card token", 400),
    ];
    let mut created = Vec::new();
    for (n, (params, step, http)) in unusable.iter().enumerate() {
        let i = create_intent_with(&p, "mp", 1_000 + n as i64, "ana", Some(params)).await;
        created.push((i, *step, *http));
    }
    let declined =
        create_intent_with(&p, "mp", 2_000, "ana", Some(&saved(&disabled, &ana, None))).await;
    let (cancel, task) = spawn(hookline_billing::dispatcher(
        p.pool().clone(),
        &p.config,
        fast_settings(),
    ));
    settle(
        &p,
        "every charge declined",
        "SELECT count(*) FROM outbound_requests WHERE status = 'declined'",
        4,
    )
    .await;
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();

    let requests = &control.requests()[before..];
    for (i, step, http) in &created {
        let now = intent(&p, i.id).await;
        assert_eq!(
            (now.status.as_str(), now.failure_code.as_deref()),
            ("failed", Some("payment_method_unusable")),
            "{now:?}"
        );
        let message = now.failure_message.clone().unwrap_or_default();
        assert!(message.contains(step), "{message}");
        assert_eq!(now.provider_payment_id, None);
        let (status, attempts, last_status, last_error) = charge_request(&p, i.id).await;
        assert_eq!(
            (status.as_str(), attempts, last_status),
            ("declined", 1, Some(*http as i16)),
            "{last_error}"
        );
        assert_eq!(stored_card(&p, i.id).await.0, None, "nothing was minted");
        let key = intents::charge_key(i.id);
        assert!(
            !requests
                .iter()
                .any(|r| r.idempotency_key.as_deref() == Some(key.as_str())),
            "a payment was sent under {key}"
        );
        let (_, facts) = postings_and_facts(&p, i, "").await;
        assert_eq!(facts, vec!["payment_intent.failed".to_string()]);
    }
    let now = intent(&p, declined.id).await;
    assert_eq!(
        (now.status.as_str(), now.failure_code.as_deref()),
        ("failed", Some("cc_rejected_card_disabled")),
        "{now:?}"
    );
    assert!(now.provider_payment_id.is_some(), "{now:?}");
    let report = control.charges();
    assert_eq!(report.payment_method_charges("mp", &anas), 0);
    assert_eq!(report.payment_method_charges("mp", &disabled), 1);
    let status = hookline_ops::status::report(p.pool(), &p.config, None, "test-status")
        .await
        .expect("status");
    assert_eq!(
        (status.outbound.declined, status.outbound.failed),
        (4, 0),
        "declines are outcomes, not incidents"
    );
    sandbox.stop().await;
}

/// The payment never reaches the gateway until its key's lifetime is about to end (500s): the request is
/// `unknown`, the lookup finds nothing, generation 1 is committed — and mints a NEW token of the card (the first
/// generation's was stored once and sent on every one of its attempts). One charge, under `{key}-g1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_key_generation_mints_a_new_token_of_the_saved_card() {
    let (p, sandbox) = hookline_tests::sandboxed::start_with_window(33, KEY_TTL).await;
    let control = sandbox.control();
    let ana = mp_customer(&sandbox, "ana.generation@example.com").await;
    let card = mp_saved_card(&p, &sandbox, &ana, "APRO").await;
    let before = control.requests().len();
    let status_500 = FaultAction::Status {
        status: 500,
        retry_after_secs: None,
    };
    control
        .arm_fault(mp_fault("/v1/payments", status_500, None))
        .expect("arm");
    let i = create_intent_with(&p, "mp", 7_700, "ana", Some(&saved(&card, &ana, None))).await;
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
    let generation_0 = &control.requests()[before..];
    let base = intents::charge_key(i.id);
    let attempts_0 = generation_0
        .iter()
        .filter(|r| r.path == "/v1/payments" && r.idempotency_key.as_deref() == Some(&base))
        .count();
    assert!(attempts_0 >= 2, "{attempts_0} attempts under the first key");
    assert_eq!(
        statuses(generation_0, "POST", "/v1/card_tokens"),
        vec![201],
        "one token for every attempt of the generation"
    );
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

    assert_eq!(intent(&p, i.id).await.status, "succeeded");
    let requests = &control.requests()[before..];
    assert_eq!(
        statuses(requests, "POST", "/v1/card_tokens"),
        vec![201, 201]
    );
    assert_eq!(
        stored_card(&p, i.id).await,
        (Some(1), 1, Some("master".to_owned()), true)
    );
    let report = control.charges();
    assert_eq!(report.payment_method_charges("mp", &card), 1);
    let next = format!("{base}-g1");
    assert_eq!(report.key("mp", &next).map(|s| s.charges), Some(1));
    assert_eq!(report.key("mp", &base).map_or(0, |s| s.charges), 0);
    sandbox.stop().await;
}

/// Stripe refuses an off-session charge of a method not attached to the customer, or attached to another one,
/// with a 400 `invalid_request_error` naming `payment_method`: the customer's method is unusable — a decline
/// (request `declined`, intent `failed` with `payment_method_unusable` and Stripe's message), not an intent that
/// needs an operator. The customer's own saved method is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_refusing_the_payment_method_is_a_decline_not_an_incident() {
    let (p, sandbox) = hookline_tests::sandboxed::start(34).await;
    let (ana, anas_method) = saved_card(&sandbox, "Ana").await;
    let (bia, _) = saved_card(&sandbox, "Bia").await;
    let off_session = |pm: &str, customer: &str| {
        PaymentParams::Stripe(StripeParams {
            payment_method: Some(pm.to_owned()),
            customer: Some(customer.to_owned()),
            off_session: true,
            return_url: None,
        })
    };
    let unattached = create_intent_with(
        &p,
        "st",
        1_500,
        "ana",
        Some(&off_session("pm_card_visa", &ana)),
    )
    .await;
    let foreign = create_intent_with(
        &p,
        "st",
        1_600,
        "bia",
        Some(&off_session(&anas_method, &bia)),
    )
    .await;
    let own = create_intent_with(
        &p,
        "st",
        1_700,
        "ana",
        Some(&off_session(&anas_method, &ana)),
    )
    .await;
    let (cancel, task) = spawn(hookline_billing::dispatcher(
        p.pool().clone(),
        &p.config,
        fast_settings(),
    ));
    settle(
        &p,
        "every charge answered",
        "SELECT count(*) FROM outbound_requests WHERE status IN ('declined', 'succeeded')",
        3,
    )
    .await;
    cancel.cancel();
    within(WAIT, "the dispatcher's stop", task).await.unwrap();

    for i in [&unattached, &foreign] {
        let now = intent(&p, i.id).await;
        assert_eq!(
            (now.status.as_str(), now.failure_code.as_deref()),
            ("failed", Some("payment_method_unusable")),
            "{now:?}"
        );
        assert!(
            now.failure_message
                .as_deref()
                .is_some_and(|m| m.contains("PaymentMethod") || m.contains("payment method")),
            "Stripe's message: {now:?}"
        );
        let (status, attempts, last_status, last_error) = charge_request(&p, i.id).await;
        assert_eq!(
            (status.as_str(), attempts, last_status),
            ("declined", 1, Some(400)),
            "{last_error}"
        );
        let (_, facts) = postings_and_facts(&p, i, "").await;
        assert_eq!(facts, vec!["payment_intent.failed".to_string()]);
    }
    assert_eq!(intent(&p, own.id).await.status, "succeeded");
    assert_eq!(
        sandbox
            .control()
            .charges()
            .payment_method_charges("st", &anas_method),
        1
    );
    let status = hookline_ops::status::report(p.pool(), &p.config, None, "test-status")
        .await
        .expect("status");
    assert_eq!(
        (status.outbound.declined, status.outbound.failed),
        (2, 0),
        "declines are outcomes, not incidents"
    );
    sandbox.stop().await;
}
