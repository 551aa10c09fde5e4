//! Issue 44: no request ever leaves under a key the gateway may have forgotten. The key's lifetime (first send +
//! ttl − margin) is checked where a request is claimed for sending, not only where a retry is scheduled: a charge
//! or refund whose answer was lost, and whose dispatcher then stayed away past the key's lifetime (stopped, crashed,
//! a weekend), is looked up by hookline's own reference when a dispatcher comes back — never sent again under the
//! expired key, which the gateway would execute as a new charge or refund.
//!
//! "A weekend passes" is played on both clocks: the sandbox's clock moves 25 h ahead (it forgets the key, as
//! Stripe and Pagar.me do after 24 h), and hookline's rows age by as much (the database's clock cannot be moved;
//! every timestamp the claiming statement reads is moved back instead).

use std::time::Duration;

use hookline_payments::intents::{self, Intent};
use hookline_sandbox::{FaultAction, RunningSandbox};
use hookline_tests::faults::*;
use hookline_tests::sandboxed::fault;
use hookline_tests::{wait_until, TestPipeline};

use crate::outbound::{create_intent, create_intent_with, fast_settings, intent, WAIT};

/// Longer than Stripe's and Pagar.me's 24 h: every key sent before has been forgotten at the gateway.
const WEEKEND: Duration = Duration::from_secs(25 * 3600);

/// A weekend passes for hookline: every timestamp of the outbound requests the claim reads moves `by` back.
async fn age_requests(pool: &sqlx::PgPool, by: Duration) {
    sqlx::query(
        "UPDATE outbound_requests
            SET key_first_sent_at = key_first_sent_at - make_interval(secs => $1),
                next_attempt_at = next_attempt_at - make_interval(secs => $1),
                lease_until = lease_until - make_interval(secs => $1),
                created_at = created_at - make_interval(secs => $1),
                updated_at = updated_at - make_interval(secs => $1)",
    )
    .bind(by.as_secs_f64())
    .execute(pool)
    .await
    .expect("age the outbound requests");
}

/// A weekend passes for both: hookline's rows age and the sandbox forgets every key.
async fn weekend(pool: &sqlx::PgPool, sandbox: &RunningSandbox) {
    age_requests(pool, WEEKEND).await;
    sandbox
        .control()
        .advance_clock(WEEKEND)
        .expect("move the sandbox clock");
}

/// `hookline outbound resolve REQUEST FLAGS…` against the pipeline's configuration: its exit code and stdout.
async fn operator_resolves(
    p: &TestPipeline,
    request: i64,
    flags: &[&str],
) -> (Option<i32>, String) {
    let request = request.to_string();
    let mut args = vec!["outbound", "resolve", &request];
    args.extend_from_slice(flags);
    args.extend(["--reason", "checked the dashboard", "--operator", "ops-44"]);
    let out = p.hookline(&args).await;
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// An intent of 5 000 at `provider` with what a checkout sends: a card saved at Pagar.me, Stripe's test card,
/// Mercado Pago's approved test card.
async fn checkout(p: &TestPipeline, sandbox: &RunningSandbox, provider: &str) -> Intent {
    if provider != "pg" {
        return create_intent(p, provider, 5_000, "cliente@example.com").await;
    }
    let (customer, card) = crate::pagarme_v5_outbound::saved_card(
        sandbox,
        crate::pagarme_v5_outbound::APPROVED,
        "Cliente Fim de Semana",
    )
    .await;
    let params = crate::pagarme_v5_outbound::saved_params(&customer, &card);
    create_intent_with(p, provider, 5_000, "cliente-pg", Some(&params)).await
}

/// `(status, key_generation, last_error)` of the outbound request `request`.
async fn request_row(pool: &sqlx::PgPool, request: i64) -> (String, i32, Option<String>) {
    sqlx::query_as("SELECT status, key_generation, last_error FROM outbound_requests WHERE id = $1")
        .bind(request)
        .fetch_one(pool)
        .await
        .expect("request row")
}

/// The process test: the real `hookline-worker` (its dispatcher) sends a charge, the answer is lost (the
/// gateway charged, the connection dropped), the gateway then answers 503 so the request stays pending, and the
/// worker process is SIGKILLed. A weekend passes; a fresh worker process starts. It must look the charge up by
/// hookline's reference (Stripe's search by `metadata['hookline_intent']`) and record the charge the gateway
/// holds: ONE charge. Before issue 44 it sent the request again under the expired key and the gateway charged a
/// second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_stopped_past_the_key_lifetime_looks_the_charge_up_instead_of_resending() {
    let (mut c, sandbox) = stripe_sandbox_cluster("dispatcher_stopped_past_the_key_lifetime").await;
    let control = sandbox.control();
    let post =
        |action, count, rate| fault("st", "POST", "/v1/payment_intents", action, count, rate);
    // The first answer is lost after the gateway charged; every later attempt is answered 503 (retryable).
    control
        .arm_fault(post(FaultAction::DropResponse, Some(1), None))
        .expect("arm");
    control
        .arm_fault(post(
            FaultAction::Status {
                status: 503,
                retry_after_secs: None,
            },
            None,
            Some(1.0),
        ))
        .expect("arm");

    let created = stripe_charge(&c, 4200, "cliente-fim-de-semana").await;
    let key = intents::charge_key(created.id);

    let slot = c.start_worker(None).await;
    // The gateway charged (its answer was lost), and the dispatcher has tried again at least once since.
    let pool = c.pool().clone();
    wait_until(WAIT, "the charge made and retried", || {
        let control = sandbox.control();
        let pool = pool.clone();
        async move {
            let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM outbound_requests")
                .fetch_one(&pool)
                .await
                .unwrap();
            control.charges().total_charges == 1 && attempts >= 2
        }
    })
    .await;
    // The dispatcher stops: its process is killed (a stuck deploy, a weekend without workers).
    c.kill_worker(slot);
    let status: String = sqlx::query_scalar("SELECT status FROM outbound_requests")
        .fetch_one(c.pool())
        .await
        .unwrap();
    assert_eq!(status, "pending", "the answer was never recorded");
    control.clear_faults();
    weekend(c.pool(), &sandbox).await;

    // A fresh worker after the weekend.
    c.restart_worker(slot, None).await;
    wait_until(WAIT, "the charge recorded after the restart", || {
        let pool = pool.clone();
        async move {
            let (o, i): (String, String) = sqlx::query_as(
                "SELECT o.status, i.status FROM outbound_requests o
                   JOIN payment_intents i ON i.id = o.intent_id",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            o == "succeeded" && i == "succeeded"
        }
    })
    .await;
    let report = sandbox.control().charges();
    assert_eq!(report.total_charges, 1, "charged twice: {report:?}");
    let generation: i32 = sqlx::query_scalar("SELECT key_generation FROM outbound_requests")
        .fetch_one(c.pool())
        .await
        .unwrap();
    assert_eq!(generation, 0, "found by the lookup, no new key");
    let requests = sandbox.control().requests();
    let lookup = requests
        .iter()
        .position(|r| r.method == "GET" && r.path.contains("search"))
        .expect("the charge was looked up");
    assert!(
        requests[lookup..]
            .iter()
            .all(|r| !(r.method == "POST" && r.idempotency_key.as_deref() == Some(key.as_str()))),
        "sent under the expired key after the weekend"
    );
    sandbox.stop().await;
    c.teardown().await;
}

/// What a test does to one gateway.
#[derive(Debug, Clone, Copy)]
enum Op {
    Charge,
    Refund,
}

/// The charge's or the refund's answer is lost (the gateway executed it), the dispatcher stops, a weekend passes,
/// and a dispatcher comes back: the request is made `unknown` where it is claimed and resolved by the lookup —
/// one charge and at most one refund at the gateway. Returns the sandbox and pipeline for the caller's checks,
/// with the request id.
async fn lost_then_a_weekend(provider: &str, op: Op) -> (TestPipeline, RunningSandbox, i64) {
    let (p, sandbox) = hookline_tests::sandboxed::start(44).await;
    let d = hookline_billing::dispatcher(p.pool().clone(), &p.config, fast_settings());
    let i = checkout(&p, &sandbox, provider).await;
    let (method, path) = match (provider, op) {
        ("st", Op::Charge) => ("POST", "/v1/payment_intents".to_owned()),
        ("mp", Op::Charge) => ("POST", "/v1/payments".to_owned()),
        ("pg", Op::Charge) => ("POST", "/core/v5/orders".to_owned()),
        ("st", Op::Refund) => ("POST", "/v1/refunds".to_owned()),
        ("mp", Op::Refund) => ("POST", "/v1/payments/".to_owned()),
        ("pg", Op::Refund) => ("DELETE", "/core/v5/charges/".to_owned()),
        _ => unreachable!("a provider of the sandboxed pipeline"),
    };
    let lose_next = || {
        sandbox
            .control()
            .arm_fault(fault(
                provider,
                method,
                &path,
                FaultAction::DropResponse,
                Some(1),
                None,
            ))
            .expect("arm");
    };
    if let Op::Charge = op {
        lose_next();
    }
    // The charge: sent once (lost, for Op::Charge: retried later), or sent and recorded (Op::Refund).
    assert_eq!(d.dispatch_once().await.expect("dispatch"), 1);
    let request: i64 = sqlx::query_scalar("SELECT id FROM outbound_requests WHERE intent_id = $1")
        .bind(i.id)
        .fetch_one(p.pool())
        .await
        .unwrap();
    let request = match op {
        Op::Charge => request,
        Op::Refund => {
            assert_eq!(intent(&p, i.id).await.status, "succeeded");
            let mut tx = p.pool().begin().await.unwrap();
            let refund = intents::request_refund(&mut tx, &i.public_id, 2_000, "devolução")
                .await
                .expect("refund accepted");
            tx.commit().await.unwrap();
            lose_next();
            assert_eq!(d.dispatch_once().await.expect("dispatch"), 1);
            sqlx::query_scalar("SELECT id FROM outbound_requests WHERE refund_id = $1")
                .bind(refund)
                .fetch_one(p.pool())
                .await
                .unwrap()
        }
    };
    let (status, _, _) = request_row(p.pool(), request).await;
    assert_eq!(status, "pending", "{provider} {op:?}: lost, to be retried");
    // The dispatcher stays away for a weekend; then one comes back and claims whatever is due.
    weekend(p.pool(), &sandbox).await;
    for _ in 0..3 {
        d.dispatch_once().await.expect("dispatch");
    }
    (p, sandbox, request)
}

/// One charge per provider whatever happened: the charge found by the lookup (Stripe's search, Mercado Pago's
/// `external_reference`, Pagar.me's order `code`), never sent again under its expired key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_gateway_looks_a_lost_charge_up_after_its_key_expired() {
    for provider in ["st", "mp", "pg"] {
        let (p, sandbox, request) = lost_then_a_weekend(provider, Op::Charge).await;
        let (status, generation, error) = request_row(p.pool(), request).await;
        assert_eq!(
            (status.as_str(), generation),
            ("succeeded", 0),
            "{provider}: {error:?}"
        );
        let report = sandbox.control().charges();
        let book = report.provider(provider).expect("provider");
        assert_eq!(book.charges, 1, "{provider}: charged twice: {report:?}");
        sandbox.stop().await;
    }
}

/// One refund per provider: Stripe's and Mercado Pago's found by hookline's reference in their metadata.
/// Pagar.me gives a refund no reference of hookline's (only the charge's cancelled amount, which a cancellation
/// made elsewhere also grows): it stays `unknown` for an operator, with the reason — never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_gateway_never_resends_a_lost_refund_after_its_key_expired() {
    for provider in ["st", "mp", "pg"] {
        let (p, sandbox, request) = lost_then_a_weekend(provider, Op::Refund).await;
        let (status, generation, error) = request_row(p.pool(), request).await;
        let report = sandbox.control().charges();
        let book = report.provider(provider).expect("provider");
        assert_eq!(
            (book.refunds, book.refunded_amount),
            (1, 2_000),
            "{provider}: refunded twice: {report:?}"
        );
        if provider == "pg" {
            assert_eq!(status, "unknown", "{provider}: {error:?}");
            let error = error.unwrap_or_default();
            assert!(error.contains("operator"), "{provider}: {error}");
            // The operator finds the refund at Pagar.me and says so: recorded as made, nothing sent.
            let (code, out) = operator_resolves(&p, request, &["--made"]).await;
            assert_eq!(code, Some(0), "{out}");
            let (status, _, error) = request_row(p.pool(), request).await;
            assert_eq!(status, "succeeded");
            assert!(error
                .unwrap_or_default()
                .contains("resolved by ops-44: made"));
            let refunded: (String, i64) = sqlx::query_as(
                "SELECT f.status, i.refunded FROM outbound_refunds f
                   JOIN payment_intents i ON i.id = f.intent_id
                   JOIN outbound_requests o ON o.refund_id = f.id WHERE o.id = $1",
            )
            .bind(request)
            .fetch_one(p.pool())
            .await
            .unwrap();
            assert_eq!(refunded, ("succeeded".to_owned(), 2_000));
            let report = sandbox.control().charges();
            let book = report.provider(provider).expect("provider");
            assert_eq!((book.refunds, book.refunded_amount), (1, 2_000));
        } else {
            assert_eq!(
                (status.as_str(), generation),
                ("succeeded", 0),
                "{provider}: {error:?}"
            );
        }
        sandbox.stop().await;
    }
}

/// A refund hookline asked for never reached the gateway (answered 500), and a refund of the same amount was made
/// outside hookline (the dashboard, another system) before the key expired. The lookup must not take that one
/// for hookline's: Mercado Pago's carries no `metadata.hookline_refund`, Pagar.me's only grows the charge's
/// `canceled_amount`. The request stays `unknown` for an operator, with the reason; nothing is sent again and the
/// refund is not recorded as made. Before issue 44 the amount that fitted marked it `succeeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refund_made_elsewhere_is_never_taken_for_hooklines() {
    for provider in ["mp", "pg"] {
        let (p, sandbox) = hookline_tests::sandboxed::start(45).await;
        let d = hookline_billing::dispatcher(p.pool().clone(), &p.config, fast_settings());
        let i = checkout(&p, &sandbox, provider).await;
        assert_eq!(d.dispatch_once().await.expect("dispatch"), 1);
        let charged = intent(&p, i.id).await;
        assert_eq!(charged.status, "succeeded", "{charged:?}");
        let payment = charged.provider_payment_id.clone().expect("gateway id");
        let (method, path) = match provider {
            "pg" => ("DELETE", format!("/core/v5/charges/{payment}")),
            _ => ("POST", format!("/v1/payments/{payment}/refunds")),
        };
        let refused = FaultAction::Status {
            status: 500,
            retry_after_secs: None,
        };
        sandbox
            .control()
            .arm_fault(fault(provider, method, &path, refused, Some(1), None))
            .expect("arm");
        let mut tx = p.pool().begin().await.unwrap();
        let refund = intents::request_refund(&mut tx, &i.public_id, 2_000, "devolução")
            .await
            .expect("refund accepted");
        tx.commit().await.unwrap();
        assert_eq!(d.dispatch_once().await.expect("dispatch"), 1);
        // The same amount refunded outside hookline, under a key of its own.
        let outside = reqwest::Client::new();
        let res = match provider {
            "pg" => outside
                .delete(sandbox.url(&path))
                .basic_auth(hookline_tests::sandboxed::PAGARME_KEY, Some(""))
                .header("Idempotency-Key", "painel-estorno-1")
                .json(&serde_json::json!({"amount": 2_000})),
            _ => outside
                .post(sandbox.url(&path))
                .bearer_auth(hookline_tests::sandboxed::MP_TOKEN)
                .header("X-Idempotency-Key", "painel-estorno-1")
                .json(&serde_json::json!({"amount": 20.0})),
        }
        .send()
        .await
        .expect("the sandbox answers");
        assert!(res.status().is_success(), "{provider}: {}", res.status());
        weekend(p.pool(), &sandbox).await;
        for _ in 0..3 {
            d.dispatch_once().await.expect("dispatch");
        }
        let request: i64 =
            sqlx::query_scalar("SELECT id FROM outbound_requests WHERE refund_id = $1")
                .bind(refund)
                .fetch_one(p.pool())
                .await
                .unwrap();
        let (status, _, error) = request_row(p.pool(), request).await;
        let error = error.unwrap_or_default();
        assert_eq!(status, "unknown", "{provider}: {error}");
        assert!(error.contains("operator"), "{provider}: {error}");
        let refund_status: String =
            sqlx::query_scalar("SELECT status FROM outbound_refunds WHERE id = $1")
                .bind(refund)
                .fetch_one(p.pool())
                .await
                .unwrap();
        assert_eq!(
            refund_status, "requires_dispatch",
            "{provider}: not recorded as made"
        );
        let report = sandbox.control().charges();
        let book = report.provider(provider).expect("provider");
        assert_eq!(
            (book.refunds, book.refunded_amount),
            (1, 2_000),
            "{provider}: only the refund made outside: {report:?}"
        );
        // The operator checks the gateway: that refund is not hookline's. Said once, the refund is sent again
        // under a new key and made once; said again, nothing moves.
        let (code, out) = operator_resolves(&p, request, &["--not-made"]).await;
        assert_eq!(code, Some(0), "{provider}: {out}");
        let (code, _) = operator_resolves(&p, request, &["--not-made"]).await;
        assert_eq!(code, Some(1), "{provider}: only from unknown");
        for _ in 0..3 {
            d.dispatch_once().await.expect("dispatch");
        }
        let (status, generation, error) = request_row(p.pool(), request).await;
        assert_eq!(
            (status.as_str(), generation),
            ("succeeded", 1),
            "{provider}: {error:?}"
        );
        let report = sandbox.control().charges();
        let book = report.provider(provider).expect("provider");
        assert_eq!(
            (book.refunds, book.refunded_amount),
            (2, 4_000),
            "{provider}: the outside refund and hookline's: {report:?}"
        );
        sandbox.stop().await;
    }
}
