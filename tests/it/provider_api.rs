//! Mercado Pago end to end and reconciliation, against the provider sandbox (a real HTTP server playing
//! Mercado Pago's and Stripe's APIs and webhooks) and the real pipeline (edge + relay + worker on PostgreSQL and
//! RabbitMQ). Charges are counted at the gateway, postings in the ledger.

use std::time::Duration;

use futures::future::join_all;
use hookline_sandbox::{DeliveryBehaviour, FaultAction, FaultSpec, RunningSandbox};
use hookline_tests::*;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
use hookline_tests::sandboxed::{MP_TOKEN, STRIPE_KEY};

/// The pipeline and the sandbox (`hookline_tests::sandboxed`), and an HTTP client for the sandbox's API.
async fn start() -> (TestPipeline, RunningSandbox, reqwest::Client) {
    let (p, sandbox) = hookline_tests::sandboxed::start(7).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    (p, sandbox, http)
}

/// `POST /v1/payments` at the sandbox (Mercado Pago): the id of the approved payment.
async fn mp_payment(
    http: &reqwest::Client,
    sandbox: &RunningSandbox,
    key: &str,
    amount: &str,
) -> String {
    // A card payment needs a card token, as at Mercado Pago (APRO: Mercado Pago's approved test holder).
    let token: Value = http
        .post(sandbox.url("/v1/card_tokens"))
        .bearer_auth(MP_TOKEN)
        .json(&json!({
            "card_number": "4235647728025682",
            "expiration_month": 11,
            "expiration_year": 2030,
            "security_code": "123",
            "cardholder": {"name": "APRO"},
        }))
        .send()
        .await
        .expect("create card token")
        .json()
        .await
        .expect("token json");
    let res = http
        .post(sandbox.url("/v1/payments"))
        .bearer_auth(MP_TOKEN)
        .header("X-Idempotency-Key", key)
        .json(&json!({
            "transaction_amount": amount.parse::<f64>().expect("amount"),
            "description": "pedido",
            "payment_method_id": "visa",
            "token": token["id"],
            "payer": {"email": "cliente@example.com.br"},
        }))
        .send()
        .await
        .expect("create payment");
    assert!(res.status().is_success(), "{}", res.status());
    let body: Value = res.json().await.expect("json");
    body["id"].to_string().trim_matches('"').to_string()
}

/// `POST /v1/payment_intents` at the sandbox (Stripe), confirmed with Stripe's test card: the PaymentIntent's id.
async fn stripe_payment(
    http: &reqwest::Client,
    sandbox: &RunningSandbox,
    key: &str,
    amount: &str,
) -> String {
    let res = http
        .post(sandbox.url("/v1/payment_intents"))
        .bearer_auth(STRIPE_KEY)
        .header("Idempotency-Key", key)
        .form(&[
            ("amount", amount),
            ("currency", "brl"),
            ("confirm", "true"),
            ("payment_method", "pm_card_visa"),
        ])
        .send()
        .await
        .expect("create payment intent");
    assert!(res.status().is_success(), "{}", res.status());
    let body: Value = res.json().await.expect("json");
    body["id"].as_str().expect("pi_").to_owned()
}

/// A Pagar.me order of `amount` cents paid with a card saved at the sandbox: its charge's id (`ch_…`).
async fn pagarme_payment(
    http: &reqwest::Client,
    sandbox: &RunningSandbox,
    code: &str,
    amount: i64,
) -> String {
    let (customer, card) =
        crate::pagarme_v5_outbound::saved_card(sandbox, crate::pagarme_v5_outbound::APPROVED, code)
            .await;
    let order: Value = http
        .post(sandbox.url("/core/v5/orders"))
        .basic_auth(hookline_tests::sandboxed::PAGARME_KEY, Some(""))
        .header("Idempotency-Key", format!("order-{code}"))
        .json(&json!({
            "code": code,
            "customer_id": customer,
            "items": [{"amount": amount, "description": "Chaveiro", "quantity": 1, "code": "k"}],
            "payments": [{"payment_method": "credit_card", "amount": amount,
                "credit_card": {"card_id": card, "installments": 1, "operation_type": "auth_and_capture"}}],
            "closed": true,
        }))
        .send()
        .await
        .expect("order")
        .json()
        .await
        .expect("order json");
    order["charges"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a charge: {order}"))
        .to_owned()
}

/// `hookline reconcile PROVIDER --since 1h --rate 0 --json EXTRA…` against the pipeline's configuration.
async fn reconcile(p: &TestPipeline, provider: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "reconcile",
        provider,
        "--since",
        "1h",
        "--rate",
        "0",
        "--json",
    ];
    args.extend_from_slice(extra);
    p.hookline(&args).await
}

async fn scalar(p: &TestPipeline, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(p.pool())
        .await
        .expect(sql)
}

async fn settle(p: &TestPipeline, what: &str, sql: &'static str, want: i64) {
    wait_for_count(p.pool(), WAIT, what, sql, want).await;
}

/// Payments created at the provider, notified (with duplicates, in parallel, shuffled), fetched by the worker:
/// one 3-leg posting each, with the configured fee; a partial refund and a chargeback each post once; a replay
/// of everything changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_notifications_are_fetched_and_posted_once() {
    let (p, sandbox, http) = start().await;
    let worker = p.spawn_worker();
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            duplicates: 2,
            parallel: true,
            shuffle_ms: 200,
            ..DeliveryBehaviour::default()
        })
        .expect("behaviour");
    let amounts = ["10.00", "25.50", "99.99", "1.05", "250.00"];
    let keys: Vec<String> = (0..amounts.len()).map(|i| format!("order-{i}")).collect();
    let ids: Vec<String> = join_all(
        keys.iter()
            .zip(amounts)
            .map(|(key, amount)| mp_payment(&http, &sandbox, key, amount)),
    )
    .await;
    settle(
        &p,
        "every payment posted",
        "SELECT count(*) FROM ledger_transactions WHERE provider = 'mp' AND kind = 'payment'",
        5,
    )
    .await;
    // 3 legs each, the fee at 4.99 %: 25.50 → fee 127 (round half up of 127.245), receivable 2423.
    let legs: Vec<(String, i64)> = sqlx::query_as(
        "SELECT e.account, e.amount FROM ledger_entries e JOIN ledger_transactions t ON t.id = e.transaction_id
         WHERE t.provider = 'mp' AND t.reference = $1 ORDER BY e.account",
    )
    .bind(&ids[1])
    .fetch_all(p.pool())
    .await
    .unwrap();
    assert_eq!(legs.len(), 3, "{legs:?}");
    assert!(legs.contains(&("revenue".to_string(), -2550)), "{legs:?}");
    assert_eq!(legs.iter().map(|(_, a)| a).sum::<i64>(), 0);

    // A partial refund, then a chargeback on another payment: each its own posting, once.
    let res = http
        .post(sandbox.url(&format!("/v1/payments/{}/refunds", ids[4])))
        .bearer_auth(MP_TOKEN)
        .header("X-Idempotency-Key", "refund-1")
        .json(&json!({"amount": 50.0}))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    sandbox
        .control()
        .chargeback("mp", &ids[0], None)
        .expect("chargeback");
    settle(
        &p,
        "the refund posted",
        "SELECT count(*) FROM ledger_transactions WHERE provider = 'mp' AND kind = 'refund'",
        1,
    )
    .await;
    settle(
        &p,
        "the chargeback posted",
        "SELECT count(*) FROM ledger_transactions WHERE provider = 'mp' AND kind = 'dispute'",
        1,
    )
    .await;
    p.drain(WAIT).await;
    assert_eq!(
        scalar(&p, "SELECT amount_refunded FROM payments WHERE provider = 'mp' ORDER BY amount DESC LIMIT 1").await,
        5000
    );
    assert_eq!(scalar(&p, "SELECT count(*) FROM dead_letters").await, 0);
    let before = ledger_checksum(p.pool()).await;

    // A replay of every stored notification: each is fetched again and changes nothing.
    let config = p.config_file();
    let out = tokio::process::Command::new(binary("hookline"))
        .args(["--config"])
        .arg(&config)
        .args(["replay", "--all", "--rate", "0", "--reason", "replay all"])
        .env_remove("DATABASE_URL")
        .env_remove("AMQP_URL")
        .output_within(CLI_TIMEOUT)
        .await;
    assert!(out.status.success(), "{out:?}");
    p.drain(WAIT).await;
    let queue = p.topology().payments_queue;
    wait_until(WAIT, "queue drained", || async {
        p.queue_depth(&queue).await == 0
    })
    .await;
    worker.stop().await;
    assert_eq!(ledger_checksum(p.pool()).await, before);
    assert_ledger_balanced(p.pool()).await;
    // The gateway holds exactly the five charges it was asked for.
    let charges = sandbox.control().charges();
    assert_eq!(charges.provider("mp").expect("mp").charges, 5);
    sandbox.stop().await;
}

/// The provider's API failing for a while (500s) makes the worker back off without burning the delivery limit,
/// then apply; a payment the provider does not know (404) is dead-lettered with the reason, never silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_failures_back_off_and_unknown_payments_are_dead_lettered() {
    let (p, sandbox, http) = start().await;
    let worker = p.spawn_worker();
    sandbox
        .control()
        .arm_fault(FaultSpec {
            method: Some("GET".into()),
            ..FaultSpec::next(
                "/v1/payments/",
                3,
                FaultAction::Status {
                    status: 500,
                    retry_after_secs: None,
                },
            )
        })
        .expect("arm");
    let id = mp_payment(&http, &sandbox, "order-backoff", "42.00").await;
    settle(
        &p,
        "the payment posted after the API recovered",
        "SELECT count(*) FROM ledger_transactions WHERE provider = 'mp'",
        1,
    )
    .await;
    assert_eq!(scalar(&p, "SELECT count(*) FROM dead_letters").await, 0);
    let reference: String =
        sqlx::query_scalar("SELECT reference FROM ledger_transactions WHERE provider = 'mp'")
            .fetch_one(p.pool())
            .await
            .unwrap();
    assert_eq!(reference, id);

    // A signed notification for a payment the provider does not have.
    let body = json!({"id": 1, "type": "payment", "action": "payment.updated", "data": {"id": "999999999"}});
    let body = body.to_string().into_bytes();
    let ts = now() * 1000;
    let sig = hookline_signature::sign::mercadopago(
        b"mp_sandbox_secret",
        Some("999999999"),
        Some("req-x"),
        ts,
    );
    let res = p
        .edge
        .post(
            "mp",
            "data.id=999999999&type=payment",
            &[
                ("x-signature".into(), sig),
                ("x-request-id".into(), "req-x".into()),
            ],
            body,
        )
        .await;
    assert_eq!(res.status(), 200);
    settle(
        &p,
        "the unknown payment dead-lettered",
        "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL",
        1,
    )
    .await;
    let reason: String = sqlx::query_scalar("SELECT reason FROM dead_letters")
        .fetch_one(p.pool())
        .await
        .unwrap();
    assert!(reason.contains("404"), "{reason}");
    worker.stop().await;
    sandbox.stop().await;
}

/// Webhooks dropped on purpose never reach us; `hookline reconcile` finds the payments (Mercado Pago) and
/// events (Stripe) through the API, stores them through the same path, and the worker posts each once. A second
/// run stores nothing; the exit code says everything matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_repairs_dropped_webhooks_without_doubling() {
    let (p, sandbox, http) = start().await;
    let worker = p.spawn_worker();
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            drop_next: 1_000,
            ..DeliveryBehaviour::default()
        })
        .expect("behaviour");
    for i in 0..4 {
        mp_payment(&http, &sandbox, &format!("dropped-{i}"), "12.34").await;
    }
    for i in 0..3 {
        stripe_payment(&http, &sandbox, &format!("pi-dropped-{i}"), "5000").await;
    }
    assert_eq!(scalar(&p, "SELECT count(*) FROM webhook_events").await, 0);

    let reconcile =
        |provider: &'static str, extra: &'static [&'static str]| reconcile(&p, provider, extra);
    let dry = reconcile("mp", &["--dry-run"]).await;
    assert_eq!(
        dry.status.code(),
        Some(1),
        "a dry run that finds gaps: {dry:?}"
    );
    assert_eq!(scalar(&p, "SELECT count(*) FROM webhook_events").await, 0);

    for provider in ["mp", "st"] {
        let out = reconcile(provider, &[]).await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let report: Value = serde_json::from_slice(&out.stdout).expect("report");
        assert!(report["stored"].as_u64().unwrap_or(0) > 0, "{report}");
    }
    settle(
        &p,
        "every payment posted once",
        "SELECT count(*) FROM ledger_transactions WHERE kind = 'payment'",
        7,
    )
    .await;
    p.drain(WAIT).await;
    // Nothing is stored twice: a second run finds everything present.
    for provider in ["mp", "st"] {
        let out = reconcile(provider, &[]).await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let report: Value = serde_json::from_slice(&out.stdout).expect("report");
        assert_eq!(report["stored"], 0, "{report}");
        assert_eq!(report["missing"], 0, "{report}");
        assert_eq!(report["mismatched"], 0, "{report}");
    }
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM webhook_events WHERE source = 'reconcile'"
        )
        .await,
        scalar(&p, "SELECT count(*) FROM webhook_events").await
    );
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM reconcile_runs WHERE finished_at IS NOT NULL"
        )
        .await,
        5
    );
    worker.stop().await;
    assert_ledger_balanced(p.pool()).await;
    assert_eq!(
        scalar(&p, "SELECT count(*) FROM ledger_transactions").await,
        7
    );

    // Webhooks that arrive while no worker runs are stored but not applied: reconciliation cannot repair that
    // by storing, so it reports the payment as mismatched and exits 1.
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour::default())
        .expect("behaviour");
    let stored_before = scalar(&p, "SELECT count(*) FROM webhook_events").await;
    stripe_payment(&http, &sandbox, "pi-unapplied", "7000").await;
    let pool = p.pool().clone();
    wait_until(WAIT, "the new payment's three webhooks stored", || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM webhook_events")
                .fetch_one(&pool)
                .await
                .is_ok_and(|n| n >= stored_before + 3)
        }
    })
    .await;
    let out = reconcile("st", &[]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report["mismatched"], 1, "{report}");
    assert_eq!(report["stored"], 0, "{report}");
    sandbox.stop().await;
}

/// Issue 44: a dispute whose webhooks were lost is recovered by reconciliation, for the three providers. One paid
/// payment each (Stripe, Mercado Pago, Pagar.me v5), applied from its webhooks; then every webhook is dropped and
/// each payment is charged back and lost at the gateway — and two more disputes are won (Stripe's opened and won
/// unseen; Pagar.me's opened while the webhooks still arrived, won unseen: its charge `paid` again).
/// `hookline reconcile` finds the disputes (Stripe's `charge.dispute.*` events in its Events list; Mercado Pago's
/// `charged_back` payment; Pagar.me's `chargedback` or paid-again charge) and the worker applies them through the
/// same state machine as their webhooks: each dispute once, a loss posted once (a win posts nothing),
/// `dispute.opened` and its final `dispute.lost` or `dispute.won` written once. A second run finds everything
/// present. Before issue 44 the Mercado Pago and Pagar.me runs compared status and refunded total only: the
/// payment was `succeeded` on both sides, and the dispute stayed unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_recovers_disputes_whose_webhooks_were_lost() {
    let (p, sandbox, http) = start().await;
    let worker = p.spawn_worker();
    let mp = mp_payment(&http, &sandbox, "disputed-mp", "40.00").await;
    let st = stripe_payment(&http, &sandbox, "pi-disputed", "5000").await;
    let pg = pagarme_payment(&http, &sandbox, "disputed-pg", 3000).await;
    // Two more, whose disputes are won: Pagar.me's opened while the webhooks still arrive, both won once they are
    // lost.
    let st_won = stripe_payment(&http, &sandbox, "pi-disputed-won", "6000").await;
    let pg_won = pagarme_payment(&http, &sandbox, "disputed-pg-won", 3500).await;
    settle(
        &p,
        "the five payments posted",
        "SELECT count(*) FROM ledger_transactions WHERE kind = 'payment'",
        5,
    )
    .await;
    let control = sandbox.control();
    control
        .chargeback("pg", &pg_won, None)
        .expect("pagar.me chargeback opened");
    settle(
        &p,
        "the open Pagar.me dispute known",
        "SELECT count(*) FROM disputes WHERE status = 'open'",
        1,
    )
    .await;

    // From now on every webhook is lost.
    control
        .set_delivery_behaviour(DeliveryBehaviour {
            drop_next: 1_000,
            ..DeliveryBehaviour::default()
        })
        .expect("behaviour");
    control
        .chargeback("st", &st, Some("lost"))
        .expect("stripe dispute");
    control
        .chargeback("mp", &mp, None)
        .expect("mercado pago chargeback");
    control
        .chargeback("pg", &pg, Some("lost"))
        .expect("pagar.me chargeback");
    control
        .chargeback("st", &st_won, Some("won"))
        .expect("stripe dispute won");
    control
        .chargeback("pg", &pg_won, Some("won"))
        .expect("pagar.me chargeback won");
    assert_eq!(scalar(&p, "SELECT count(*) FROM disputes").await, 1);

    let reconcile = |provider: &'static str| reconcile(&p, provider, &[]);
    for provider in ["st", "mp", "pg"] {
        let out = reconcile(provider).await;
        assert_eq!(out.status.code(), Some(0), "{provider}: {out:?}");
        let report: Value = serde_json::from_slice(&out.stdout).expect("report");
        assert!(
            report["stored"].as_u64().unwrap_or(0) > 0,
            "{provider}: {report}"
        );
    }
    settle(
        &p,
        "the three disputes lost",
        "SELECT count(*) FROM disputes WHERE status = 'lost'",
        3,
    )
    .await;
    settle(
        &p,
        "the two disputes won",
        "SELECT count(*) FROM disputes WHERE status = 'won'",
        2,
    )
    .await;
    settle(
        &p,
        "the three losses posted",
        "SELECT count(*) FROM ledger_transactions WHERE kind = 'dispute'",
        3,
    )
    .await;
    p.drain(WAIT).await;
    // A second run finds everything present and stores nothing.
    for provider in ["st", "mp", "pg"] {
        let out = reconcile(provider).await;
        assert_eq!(out.status.code(), Some(0), "{provider}: {out:?}");
        let report: Value = serde_json::from_slice(&out.stdout).expect("report");
        assert_eq!(
            (&report["stored"], &report["missing"], &report["mismatched"]),
            (&json!(0), &json!(0), &json!(0)),
            "{provider}: {report}"
        );
    }
    p.drain(WAIT).await;
    worker.stop().await;
    // Each dispute's facts, once each: opened, then its final word.
    let disputes: Vec<(String, String)> =
        sqlx::query_as("SELECT provider_dispute_id, status FROM disputes ORDER BY id")
            .fetch_all(p.pool())
            .await
            .unwrap();
    for (dispute, status) in &disputes {
        let facts: Vec<String> = sqlx::query_scalar(
            "SELECT type FROM domain_events
              WHERE convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'provider_dispute_id' = $1 ORDER BY seq",
        )
        .bind(dispute)
        .fetch_all(p.pool())
        .await
        .unwrap();
        assert_eq!(
            facts,
            vec!["dispute.opened".to_owned(), format!("dispute.{status}")],
            "{dispute}"
        );
    }
    assert_eq!(scalar(&p, "SELECT count(*) FROM disputes").await, 5);
    assert_eq!(
        scalar(
            &p,
            "SELECT count(*) FROM ledger_transactions WHERE kind = 'dispute'"
        )
        .await,
        3
    );
    assert_ledger_balanced(p.pool()).await;
    sandbox.stop().await;
}
