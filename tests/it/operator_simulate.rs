//! `hookline simulate` against a real pipeline: the real binary signs and sends each scenario to the edge, the
//! worker applies it, and the database shows exactly the expected effects, re-sends and shuffling included.

use std::process::Output;
use std::time::Duration;

use hookline_tests::*;

const DRAIN: Duration = Duration::from_secs(20);

async fn scalar(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// Runs `hookline --config CONFIG simulate ARGS…` and returns its output (the summary is on stdout).
async fn simulate(config: &std::path::Path, args: &[&str]) -> Output {
    let output = tokio::process::Command::new(binary("hookline"))
        .arg("--config")
        .arg(config)
        .arg("simulate")
        .args(args)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), output)
        .await
        .expect("hookline simulate finishes within 30 s")
        .expect("run hookline");
    eprintln!(
        "hookline simulate {args:?} -> {:?}\n{}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The number on the summary line `label` (e.g. `"200 duplicate:"`).
fn summary_number(output: &Output, label: &str) -> u64 {
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(label))
        .unwrap_or_else(|| panic!("no '{label}' line in the summary:\n{stdout}"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("'{label}' is not a number in:\n{stdout}"))
}

/// Sends a scenario through a fresh pipeline and drains it; returns the pipeline, the worker and the output.
async fn run_scenario(args: &[&str]) -> (TestPipeline, WorkerGuard, Output) {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    let config = p.config_file();
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["--url", p.edge.base.as_str()]);
    let output = simulate(&config, &full).await;
    assert_eq!(output.status.code(), Some(0), "every request got 200");
    drain(&p).await;
    std::fs::remove_file(&config).ok();
    (p, worker, output)
}

/// Waits until every stored event is processed or dead-lettered; on timeout, fails naming the stuck events.
async fn drain(p: &TestPipeline) {
    let deadline = tokio::time::Instant::now() + DRAIN;
    while pending_events(p.pool()).await > 0 {
        if tokio::time::Instant::now() > deadline {
            let stuck: Vec<(i64, String, Option<String>)> = sqlx::query_as(
                "SELECT e.id, e.provider_event_id, e.event_type FROM webhook_events e
                 WHERE NOT EXISTS (SELECT 1 FROM processed_events m WHERE m.event_id = e.id)
                   AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id)
                 ORDER BY e.id",
            )
            .fetch_all(p.pool())
            .await
            .expect("list stuck events");
            let processed: Vec<(i64, String, Option<String>)> = sqlx::query_as(
                "SELECT event_id, outcome, detail FROM processed_events ORDER BY event_id",
            )
            .fetch_all(p.pool())
            .await
            .expect("list processed events");
            panic!("not drained after {DRAIN:?}; stuck: {stuck:?}; processed: {processed:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn ledger_kind_count(pool: &sqlx::PgPool, kind: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM ledger_transactions WHERE kind = $1")
        .bind(kind)
        .fetch_one(pool)
        .await
        .expect("count ledger transactions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payments_with_shuffled_resends_post_once_each() {
    let (p, worker, output) = run_scenario(&[
        "stripe",
        "payment-succeeded",
        "--count",
        "30",
        "--duplicates",
        "0.3",
        "--shuffle",
        "--seed",
        "42",
    ])
    .await;
    assert_eq!(summary_number(&output, "events:"), 30);
    assert_eq!(summary_number(&output, "requests sent:"), 39);
    assert_eq!(summary_number(&output, "200 new:"), 30);
    assert!(summary_number(&output, "200 duplicate:") > 0);
    assert_eq!(summary_number(&output, "200 duplicate:"), 9);
    for label in ["4xx:", "5xx:", "transport errors:"] {
        assert_eq!(summary_number(&output, label), 0, "{label}");
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("requests/s:") && stdout.contains("latency p99:"));

    let pool = p.pool();
    assert_eq!(p.edge.db.event_count().await, 30);
    assert_eq!(assert_ledger_balanced(pool).await, 30);
    assert_eq!(ledger_kind_count(pool, "payment").await, 30);
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM payments WHERE status = 'succeeded'"
        )
        .await,
        30
    );
    assert_eq!(scalar(pool, "SELECT count(*) FROM dead_letters").await, 0);
    worker.stop().await;
    p.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_in_any_order_ends_succeeded() {
    let (p, worker, _) = run_scenario(&[
        "stripe",
        "payment-lifecycle",
        "--count",
        "10",
        "--shuffle",
        "--duplicates",
        "0.2",
    ])
    .await;
    let pool = p.pool();
    assert_eq!(p.edge.db.event_count().await, 30);
    assert_eq!(assert_ledger_balanced(pool).await, 10);
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM payments WHERE status = 'succeeded'"
        )
        .await,
        10
    );
    worker.stop().await;
    p.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refunds_post_a_payment_and_a_refund_each() {
    let (p, worker, output) = run_scenario(&[
        "stripe",
        "refund",
        "--count",
        "10",
        "--shuffle",
        "--duplicates",
        "0.5",
    ])
    .await;
    assert_eq!(summary_number(&output, "events:"), 20);
    let pool = p.pool();
    assert_eq!(p.edge.db.event_count().await, 20);
    assert_eq!(assert_ledger_balanced(pool).await, 20);
    assert_eq!(ledger_kind_count(pool, "payment").await, 10);
    assert_eq!(ledger_kind_count(pool, "refund").await, 10);
    // Partial refunds: every payment keeps part of its amount.
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM payments WHERE amount_refunded > 0 AND amount_refunded < amount"
        )
        .await,
        10
    );
    assert_eq!(scalar(pool, "SELECT count(*) FROM dead_letters").await, 0);
    worker.stop().await;
    p.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_disputes_post_a_loss_each() {
    let (p, worker, _) = run_scenario(&[
        "stripe",
        "dispute",
        "--count",
        "8",
        "--shuffle",
        "--duplicates",
        "0.25",
    ])
    .await;
    let pool = p.pool();
    assert_eq!(p.edge.db.event_count().await, 24);
    assert_eq!(assert_ledger_balanced(pool).await, 16);
    assert_eq!(ledger_kind_count(pool, "payment").await, 8);
    assert_eq!(ledger_kind_count(pool, "dispute").await, 8);
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM disputes WHERE status = 'lost'").await,
        8
    );
    worker.stop().await;
    p.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invoices_charge_each_cycle_once() {
    let (p, worker, output) = run_scenario(&[
        "stripe",
        "invoice",
        "--count",
        "12",
        "--shuffle",
        "--duplicates",
        "0.3",
    ])
    .await;
    // Each cycle arrives as invoice.paid and invoice.payment_succeeded: two events, one charge.
    assert_eq!(summary_number(&output, "events:"), 24);
    let pool = p.pool();
    assert_eq!(p.edge.db.event_count().await, 24);
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM subscription_charges").await,
        12
    );
    assert_eq!(
        scalar(
            pool,
            "SELECT count(DISTINCT subscription_id) FROM subscription_charges"
        )
        .await,
        4
    );
    assert_eq!(scalar(pool, "SELECT count(*) FROM dead_letters").await, 0);
    worker.stop().await;
    p.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pagarme_paid_postbacks_post_once_each() {
    let (p, worker, output) = run_scenario(&[
        "pagarme",
        "paid",
        "--count",
        "15",
        "--duplicates",
        "0.4",
        "--shuffle",
    ])
    .await;
    assert_eq!(summary_number(&output, "200 duplicate:"), 6);
    let pool = p.pool();
    assert_eq!(p.edge.db.event_count().await, 15);
    assert_eq!(assert_ledger_balanced(pool).await, 15);
    assert_eq!(ledger_kind_count(pool, "payment").await, 15);
    assert_eq!(scalar(pool, "SELECT count(*) FROM dead_letters").await, 0);
    worker.stop().await;
    p.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn other_schemes_are_accepted_by_the_edge() {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    let config = p.config_file();
    let base = p.edge.base.as_str();
    let runs: [&[&str]; 6] = [
        &["pagarme", "refunded", "--count", "5"],
        &[
            "mercadopago",
            "payment",
            "--count",
            "5",
            "--duplicates",
            "1",
        ],
        &["github", "ping", "--count", "3", "--duplicates", "1"],
        &["shopify", "ping", "--count", "3"],
        &["standard", "ping", "--count", "3", "--duplicates", "1"],
        &["svix", "ping", "--count", "3"],
    ];
    for args in runs {
        let mut full = args.to_vec();
        full.extend(["--url", base]);
        let output = simulate(&config, &full).await;
        assert_eq!(output.status.code(), Some(0), "{args:?}");
    }
    // 10 Pagar.me + 5 Mercado Pago + 3 × 4 generic events; every re-send was a duplicate.
    assert_eq!(p.edge.db.event_count().await, 27);
    drain(&p).await;
    let pool = p.pool();
    assert_eq!(ledger_kind_count(pool, "payment").await, 5);
    assert_eq!(ledger_kind_count(pool, "refund").await, 5);
    assert_ledger_balanced(pool).await;
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM pending_fetches").await,
        5
    );
    std::fs::remove_file(&config).ok();
    worker.stop().await;
    p.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn usage_errors_exit_2_and_unreachable_edge_exits_3() {
    let p = TestPipeline::start().await;
    let config = p.config_file();
    let base = p.edge.base.as_str();

    let output = simulate(&config, &["stripe", "chargeback", "--url", base]).await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown scenario 'chargeback'"), "{stderr}");
    for scenario in [
        "payment-succeeded",
        "payment-lifecycle",
        "refund",
        "dispute",
        "invoice",
    ] {
        assert!(stderr.contains(scenario), "lists {scenario}: {stderr}");
    }
    // Scenarios belong to a scheme: Pagar.me has no invoices.
    let output = simulate(&config, &["pagarme", "invoice", "--url", base]).await;
    assert_eq!(output.status.code(), Some(2));
    let output = simulate(&config, &["nosuchprovider", "ping", "--url", base]).await;
    assert_eq!(output.status.code(), Some(2));
    let output = simulate(
        &config,
        &["stripe", "refund", "--duplicates", "1.5", "--url", base],
    )
    .await;
    assert_eq!(output.status.code(), Some(2));

    let output = simulate(
        &config,
        &["stripe", "payment-succeeded", "--url", "http://127.0.0.1:1"],
    )
    .await;
    assert_eq!(output.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unreachable"));

    assert_eq!(p.edge.db.event_count().await, 0, "nothing was sent");
    std::fs::remove_file(&config).ok();
    p.teardown().await;
}

/// The scenario of docs/operations.md (`simulate`) (issue 31): Mercado Pago with `api_base` at the sandbox. The worker reads every notified
/// payment from the API, so `simulate` creates the payments at the sandbox first and notifies those: every
/// notification is applied (one payment posting each, nothing dead-lettered) and `status` exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_payments_with_the_sandbox_as_api_are_applied_not_dead_lettered() {
    let (p, sandbox) = hookline_tests::sandboxed::start(31).await;
    let worker = p.spawn_worker();
    let config = p.config_file();
    let output = simulate(
        &config,
        &[
            "mp",
            "payment",
            "--count",
            "10",
            "--duplicates",
            "0.3",
            "--url",
            p.edge.base.as_str(),
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "every request got 200");
    let pool = p.pool();
    // The sandbox notifies the payments it created too: the same 10 payments, posted once each however many
    // notifications name them.
    wait_until(DRAIN, "10 payment postings", || async {
        ledger_kind_count(pool, "payment").await == 10
    })
    .await;
    drain(&p).await;
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM dead_letters").await,
        0,
        "no notification names a payment the API does not know"
    );
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM payments WHERE provider = 'mp' AND status = 'succeeded'"
        )
        .await,
        10
    );
    assert_ledger_balanced(pool).await;
    let status = tokio::process::Command::new(binary("hookline"))
        .arg("--config")
        .arg(&config)
        .arg("status")
        .output()
        .await
        .expect("run hookline status");
    assert_eq!(
        status.status.code(),
        Some(0),
        "status: {}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    std::fs::remove_file(&config).ok();
    worker.stop().await;
    sandbox.stop().await;
    p.teardown().await;
}

/// With an `api_base` that is not a sandbox playing the provider (the real Mercado Pago, or nothing), made-up
/// payments could never be read: `simulate` refuses before sending anything (exit 2) and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_with_an_api_that_is_not_the_sandbox_is_refused_before_sending() {
    let p = TestPipeline::start_with(
        "[providers.mpreal]\nscheme = \"mercadopago\"\nsecrets = [\"mp_secret\"]\n\
         api_base = \"http://127.0.0.1:9\"\napi_token = \"APP_USR-token\"\n",
    )
    .await;
    let config = p.config_file();
    let output = simulate(
        &config,
        &[
            "mpreal",
            "payment",
            "--count",
            "3",
            "--url",
            p.edge.base.as_str(),
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a hookline sandbox"), "{stderr}");
    assert_eq!(p.edge.db.event_count().await, 0, "nothing was sent");
    std::fs::remove_file(&config).ok();
    p.teardown().await;
}
