//! Pagar.me Core API v5 inbound, end to end: the sandbox plays Pagar.me (orders, charges, refunds, chargebacks,
//! webhooks with HTTP Basic credentials and nothing signed), the real pipeline stores the webhooks, and the worker
//! reads each charge from the API before applying anything. Outcomes are counted in the ledger and in the
//! sandbox's own records.

use std::time::Duration;

use futures::future::join_all;
use hookline_sandbox::{
    DeliveryBehaviour, RunningSandbox, Sandbox, SandboxProvider, SandboxSettings, Scheme,
};
use hookline_tests::*;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
/// The secret key the sandbox requires from `pg` (its public key: `pk_` for `sk_`).
const PG_KEY: &str = "sk_test_inbound_pagarme";
const PG_PUBLIC_KEY: &str = "pk_test_inbound_pagarme";
/// The credential configured on the webhook at Pagar.me, and in `webhook_basic_auth`.
const PG_WEBHOOK: &str = "hookline:pg-inbound-pass";
const APPROVED: &str = "4000000000000010";
const DECLINED: &str = "4000000000000028";

/// The pipeline with one Pagar.me v5 provider `pg` (fee 3.99 % + R$ 0.39) calling the sandbox, and the sandbox
/// sending `pg`'s webhooks to the pipeline's edge.
async fn start() -> (TestPipeline, RunningSandbox, reqwest::Client) {
    let port = free_port();
    let tail = format!(
        "[providers.pg]\nscheme = \"pagarme-v5\"\nwebhook_basic_auth = [\"{PG_WEBHOOK}\"]\n\
         fee_bps = 399\nfee_fixed = 39\napi_base = \"http://127.0.0.1:{port}\"\napi_token = \"{PG_KEY}\"\n"
    );
    let p = TestPipeline::start_with(&tail).await;
    let mut settings = SandboxSettings::new(
        format!("127.0.0.1:{port}").parse().expect("addr"),
        p.edge.base.parse().expect("edge url"),
        vec![SandboxProvider::new("pg", Scheme::PagarmeV5, Vec::new())
            .with_api_token(PG_KEY)
            .with_webhook_basic_auth(PG_WEBHOOK)],
    );
    settings.seed = 29;
    settings.webhook_backoff = Duration::from_millis(100);
    settings.webhook_max_backoff = Duration::from_millis(500);
    let sandbox = Sandbox::start(settings).await.expect("sandbox");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    (p, sandbox, http)
}

/// A request to the sandbox's Pagar.me API with the secret key (HTTP Basic, empty password).
fn pg(
    http: &reqwest::Client,
    sandbox: &RunningSandbox,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    http.request(method, sandbox.url(path))
        .basic_auth(PG_KEY, Some(""))
}

async fn json_of(request: reqwest::RequestBuilder) -> Value {
    let res = request.send().await.expect("sandbox request");
    let status = res.status();
    let body: Value = res.json().await.expect("json");
    assert!(status.is_success(), "{status}: {body}");
    body
}

/// An order of `amount` cents paid by card `number` (through a fresh card token), as a merchant's checkout
/// creates it; its charge id.
async fn card_order(
    http: &reqwest::Client,
    sandbox: &RunningSandbox,
    code: &str,
    amount: i64,
    number: &str,
) -> String {
    let token = json_of(
        http.post(sandbox.url(&format!("/core/v5/tokens?appId={PG_PUBLIC_KEY}")))
            .json(
                &json!({"type": "card", "card": {"number": number, "holder_name": "Tony Stark",
                          "exp_month": 12, "exp_year": 2035, "cvv": "123"}}),
            ),
    )
    .await;
    order(http, sandbox, code, amount, json!({
        "payment_method": "credit_card",
        "credit_card": {"card_token": token["id"], "installments": 1, "operation_type": "auth_and_capture"},
    }))
    .await
}

/// An order of `amount` cents paid by `payment`; its charge id.
async fn order(
    http: &reqwest::Client,
    sandbox: &RunningSandbox,
    code: &str,
    amount: i64,
    payment: Value,
) -> String {
    let order = json_of(
        pg(http, sandbox, reqwest::Method::POST, "/core/v5/orders")
            .header("Idempotency-Key", format!("order-{code}"))
            .json(&json!({
                "code": code,
                "customer": {"name": "Tony Stark", "email": "tony@example.com", "document": "12345678909", "type": "individual"},
                "items": [{"amount": amount, "description": "Chaveiro", "quantity": 1, "code": "k"}],
                "payments": [payment],
                "closed": true,
            })),
    )
    .await;
    order["charges"][0]["id"]
        .as_str()
        .expect("charge id")
        .to_owned()
}

async fn refund(http: &reqwest::Client, sandbox: &RunningSandbox, charge: &str, amount: i64) {
    json_of(
        pg(
            http,
            sandbox,
            reqwest::Method::DELETE,
            &format!("/core/v5/charges/{charge}"),
        )
        .header("Idempotency-Key", format!("refund-{charge}-{amount}"))
        .json(&json!({"amount": amount})),
    )
    .await;
}

async fn scalar(p: &TestPipeline, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(p.pool())
        .await
        .expect(sql)
}

/// The legs of the posting `kind` of reference `reference`, by account.
async fn legs(p: &TestPipeline, kind: &str, reference: &str) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT e.account, e.amount FROM ledger_entries e JOIN ledger_transactions t ON t.id = e.transaction_id
          WHERE t.provider = 'pg' AND t.kind = $1 AND t.reference = $2 ORDER BY e.account",
    )
    .bind(kind)
    .bind(reference)
    .fetch_all(p.pool())
    .await
    .expect("legs")
}

/// The seed's test for this provider: the same webhook, twice and ten times in parallel, is one event and one
/// three-leg posting with the configured fee — whether the sandbox duplicates its deliveries or a sender
/// replays one. The worker applied what the API says, so the payment's amount is the charge's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_webhook_twice_in_parallel_is_one_posting() {
    let (p, sandbox, http) = start().await;
    let worker = p.spawn_worker();
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            duplicates: 1,
            parallel: true,
            shuffle_ms: 200,
            ..DeliveryBehaviour::default()
        })
        .expect("behaviour");
    let amounts = [4200_i64, 1000, 99_99];
    let codes: Vec<String> = (0..amounts.len()).map(|i| format!("pedido-{i}")).collect();
    let charges: Vec<String> = join_all(
        codes
            .iter()
            .zip(amounts)
            .map(|(code, a)| card_order(&http, &sandbox, code, a, APPROVED)),
    )
    .await;
    wait_for_count(
        p.pool(),
        WAIT,
        "every charge posted",
        "SELECT count(*) FROM ledger_transactions WHERE provider = 'pg' AND kind = 'payment'",
        3,
    )
    .await;

    // Replay one of Pagar.me's deliveries ten times at once, with its credential: one stored event.
    let delivery = sandbox
        .control()
        .deliveries()
        .into_iter()
        .find(|d| d.resource_id == charges[0] && d.event_type == "charge.paid")
        .expect("the charge.paid delivery");
    let body: Value = serde_json::from_str(&delivery.body).expect("delivery body");
    let hook = body["id"].as_str().expect("hook id").to_owned();
    let auth = hookline_signature::sign::pagarme_v5(PG_WEBHOOK.as_bytes());
    let url = format!("{}/webhooks/pg", p.edge.base);
    let answers = join_all((0..10).map(|_| {
        p.edge
            .client
            .post(&url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .body(delivery.body.clone())
            .send()
    }))
    .await;
    for answer in answers {
        assert_eq!(answer.expect("edge answers").status(), 200);
    }
    p.drain(WAIT).await;
    let key = format!("pgv5:{}:{hook}", charges[0]);
    assert_eq!(
        scalar(&p, &format!("SELECT count(*) FROM webhook_events WHERE provider = 'pg' AND provider_event_id = '{key}'")).await,
        1
    );
    for (charge, amount) in charges.iter().zip(amounts) {
        let legs = legs(&p, "payment", charge).await;
        // 3.99 % + 39: 4200 → 168 + 39 = 207.
        let fee = (amount * 399 + 5_000) / 10_000 + 39;
        assert_eq!(legs.len(), 3, "{charge}: {legs:?}");
        assert!(legs.contains(&("revenue".to_owned(), -amount)), "{legs:?}");
        assert!(
            legs.contains(&("provider_fees".to_owned(), fee)),
            "{legs:?}"
        );
        assert_eq!(legs.iter().map(|(_, a)| a).sum::<i64>(), 0);
    }
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM ledger_transactions WHERE provider = 'pg'"
        )
        .await,
        3
    );
    assert_ledger_balanced(p.pool()).await;
    worker.stop().await;
}

/// Partial and total refunds (Pagar.me gives them no ids: the running `canceled_amount` decides), an underpaid
/// boleto, a declined card, chargebacks opened then won and opened then lost — with deliveries duplicated and
/// shuffled, so they arrive in any order. Each is one posting or transition; nothing is refunded twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refunds_chargebacks_and_partial_payments_apply_once_in_any_order() {
    let (p, sandbox, http) = start().await;
    let worker = p.spawn_worker();
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            duplicates: 1,
            parallel: true,
            shuffle_ms: 400,
            ..DeliveryBehaviour::default()
        })
        .expect("behaviour");
    let refunded = card_order(&http, &sandbox, "refunded", 10_000, APPROVED).await;
    let won = card_order(&http, &sandbox, "won", 3_000, APPROVED).await;
    let lost = card_order(&http, &sandbox, "lost", 2_000, APPROVED).await;
    let declined = card_order(&http, &sandbox, "declined", 5_000, DECLINED).await;
    let boleto = order(
        &http,
        &sandbox,
        "boleto",
        8_000,
        json!({"payment_method": "boleto", "boleto": {}}),
    )
    .await;
    // Two partial refunds, then the rest: 10 000 in all.
    refund(&http, &sandbox, &refunded, 2_500).await;
    refund(&http, &sandbox, &refunded, 1_500).await;
    refund(&http, &sandbox, &refunded, 6_000).await;
    let control = sandbox.control();
    control
        .set_payment_status("pg", &boleto, "underpaid", Some("7500"))
        .expect("underpaid");
    control.chargeback("pg", &won, None).expect("opened");
    control.chargeback("pg", &lost, None).expect("opened");
    control.chargeback("pg", &lost, Some("lost")).expect("lost");
    wait_for_count(
        p.pool(),
        WAIT,
        "the chargeback on `won` recorded open",
        &format!("SELECT count(*) FROM disputes WHERE provider_dispute_id = 'cb_{won}'"),
        1,
    )
    .await;
    control.chargeback("pg", &won, Some("won")).expect("won");
    wait_for_count(
        p.pool(),
        WAIT,
        "the won and the lost chargeback decided",
        &format!(
            "SELECT count(*) FROM disputes WHERE (provider_dispute_id = 'cb_{won}' AND status = 'won')
                OR (provider_dispute_id = 'cb_{lost}' AND status = 'lost' AND posted)"
        ),
        2,
    )
    .await;
    wait_for_count(
        p.pool(),
        WAIT,
        "the refunds of `refunded` applied to 10 000",
        &format!(
            "SELECT count(*) FROM payments WHERE provider_payment_id = '{refunded}' AND amount_refunded = 10000"
        ),
        1,
    )
    .await;
    p.drain(WAIT).await;

    let refunds: i64 = scalar(
        &p,
        &format!(
            "SELECT COALESCE(sum(e.amount), 0)::bigint FROM ledger_entries e
               JOIN ledger_transactions t ON t.id = e.transaction_id
              WHERE t.provider = 'pg' AND t.kind = 'refund' AND e.account = 'revenue'
                AND t.payment_id = (SELECT id FROM payments WHERE provider_payment_id = '{refunded}')"
        ),
    )
    .await;
    assert_eq!(refunds, 10_000, "refunded exactly what Pagar.me cancelled");
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM refunds WHERE provider = 'pg' AND status = 'rejected'"
        )
        .await,
        0
    );
    // The underpaid boleto is a payment of what was received.
    assert!(legs(&p, "payment", &boleto)
        .await
        .contains(&("revenue".to_owned(), -7_500)));
    // The declined card: failed, no posting.
    assert_eq!(
        scalar(&p, &format!("SELECT count(*) FROM payments WHERE provider_payment_id = '{declined}' AND status = 'failed'")).await,
        1
    );
    assert!(legs(&p, "payment", &declined).await.is_empty());
    // One loss posted for the lost chargeback, none for the won one.
    assert_eq!(legs(&p, "dispute", &format!("cb_{lost}")).await.len(), 2);
    assert!(legs(&p, "dispute", &format!("cb_{won}")).await.is_empty());
    // Four paid charges posted once each.
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM ledger_transactions WHERE provider = 'pg' AND kind = 'payment'"
        )
        .await,
        4
    );
    assert_ledger_balanced(p.pool()).await;
    worker.stop().await;
}

/// The body is not trusted: a delivery with a valid credential that claims `charge.paid` for a charge the API
/// shows declined changes nothing; one naming a charge the API does not know is dead-lettered with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forged_body_decides_nothing() {
    let (p, sandbox, http) = start().await;
    let worker = p.spawn_worker();
    let declined = card_order(&http, &sandbox, "forged", 5_000, DECLINED).await;
    p.drain(WAIT).await;
    let auth = hookline_signature::sign::pagarme_v5(PG_WEBHOOK.as_bytes());
    let url = format!("{}/webhooks/pg", p.edge.base);
    for (hook, charge) in [
        ("hook_forged1", declined.as_str()),
        ("hook_forged2", "ch_unknown0000000"),
    ] {
        let forged = json!({"id": hook, "type": "charge.paid", "data": {"id": charge, "status": "paid",
                            "amount": 5000, "paid_amount": 5000, "currency": "BRL"}});
        let res = p
            .edge
            .client
            .post(&url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .body(forged.to_string())
            .send()
            .await
            .expect("edge");
        assert_eq!(res.status(), 200);
    }
    p.drain(WAIT).await;
    assert_eq!(
        scalar(&p, &format!("SELECT count(*) FROM payments WHERE provider_payment_id = '{declined}' AND status = 'failed'")).await,
        1
    );
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM ledger_transactions WHERE provider = 'pg'"
        )
        .await,
        0
    );
    let reason: String = sqlx::query_scalar(
        "SELECT d.reason FROM dead_letters d JOIN webhook_events e ON e.id = d.event_id
          WHERE e.provider_event_id = 'pgv5:ch_unknown0000000:hook_forged2'",
    )
    .fetch_one(p.pool())
    .await
    .expect("the unknown charge is dead-lettered");
    assert!(reason.contains("404"), "{reason}");
    worker.stop().await;
}

/// Webhooks dropped on purpose never reach us; `hookline reconcile pg` lists the charges, stores a notification
/// for each one whose state differs from ours, and the worker applies each once (it reads the charge, as for a
/// webhook). A second run stores nothing and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_stores_what_never_arrived() {
    let (p, sandbox, http) = start().await;
    let worker = p.spawn_worker();
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            drop_next: 1_000,
            ..DeliveryBehaviour::default()
        })
        .expect("behaviour");
    let mut charges = Vec::new();
    for i in 0..3 {
        charges.push(card_order(&http, &sandbox, &format!("dropped-{i}"), 1_234, APPROVED).await);
    }
    refund(&http, &sandbox, &charges[0], 234).await;
    assert_eq!(scalar(&p, "SELECT count(*) FROM webhook_events").await, 0);
    let reconcile = || {
        let config = p.config_file();
        async move {
            tokio::process::Command::new(binary("hookline"))
                .arg("--config")
                .arg(&config)
                .args(["reconcile", "pg", "--since", "1h", "--rate", "0", "--json"])
                .env_remove("DATABASE_URL")
                .env_remove("AMQP_URL")
                .output_within(CLI_TIMEOUT)
                .await
        }
    };
    let out = reconcile().await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report["stored"], 3, "{report}");
    wait_for_count(
        p.pool(),
        WAIT,
        "the reconciled charges posted",
        "SELECT count(*) FROM ledger_transactions WHERE provider = 'pg'",
        4,
    )
    .await;
    p.drain(WAIT).await;
    let out = reconcile().await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report["stored"], 0, "{report}");
    assert_eq!(report["present"], 3, "{report}");
    assert!(
        legs(&p, "refund", &format!("{}-refunded-234", charges[0]))
            .await
            .len()
            == 2
    );
    assert_ledger_balanced(p.pool()).await;
    worker.stop().await;
}
