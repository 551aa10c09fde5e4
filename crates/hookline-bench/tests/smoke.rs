//! Smoke test: the whole benchmark pipeline with a few hundred events and 1 s phases, against the real
//! PostgreSQL and RabbitMQ. It checks that the run completes and its correctness checks pass — not speed.

use std::path::PathBuf;
use std::time::Duration;

use hookline_bench::{report, Options};

/// The release binaries when they are built, else the debug ones next to this test (CI builds only those).
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/smoke-<hash> → target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile directory")
        .to_path_buf();
    let release = profile_dir
        .parent()
        .expect("target directory")
        .join("release");
    // The release binaries only when all three are there (the console measurement starts `hookline`): a release
    // build of the benchmark's two alone must not hide the debug `hookline` the test build made.
    if ["hookline-edge", "hookline-worker", "hookline"]
        .iter()
        .all(|bin| release.join(bin).exists())
    {
        release
    } else {
        profile_dir
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_pipeline_run_is_correct() {
    let out = std::env::temp_dir().join(format!("hookline-bench-smoke-{}", std::process::id()));
    let mut opts = Options::new(bin_dir()).quick();
    opts.duration = Duration::from_secs(1);
    opts.warmup = Duration::from_millis(300);
    opts.concurrency = 8;
    opts.max_events_per_phase = Some(300);
    opts.sweep = vec![0.25, 0.5, 0.9];
    opts.out_dir = out.clone();
    if let Ok(pg) = std::env::var("HOOKLINE_TEST_PG") {
        opts.pg_base_url = pg;
    }

    let report = hookline_bench::run(&opts).await.expect("benchmark run");
    let table = report::render_table(&report);
    println!("{table}");
    assert!(report.correctness_pass, "correctness failed:\n{table}");
    for key in [
        "baseline_insert",
        "baseline_worker_tx",
        "edge_max",
        "worker_drain",
        "pipeline_target",
        "pipeline",
    ] {
        let p = report
            .phase(key)
            .unwrap_or_else(|| panic!("phase {key} missing"));
        // Counts, not rates: with a few hundred events a rate window can be too short to mean anything.
        assert!(p.events > 0, "{key} measured nothing:\n{table}");
    }
    let files = report::write_outputs(&report, &out).expect("write outputs");
    let svg = std::fs::read_to_string(&files[2]).expect("read svg");
    assert!(svg.starts_with("<svg") && svg.contains("polyline"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).expect("read json"))
            .expect("json");
    assert_eq!(json["correctness_pass"], true);
    std::fs::remove_dir_all(&out).ok();
}

/// The console measurement on a few thousand events: every page answers 200 (a failure is an error of the
/// run) and each is timed; no speed is asserted here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_measurement_runs_every_page() {
    let out = std::env::temp_dir().join(format!(
        "hookline-bench-console-smoke-{}",
        std::process::id()
    ));
    let defaults = Options::new(bin_dir());
    let opts = hookline_bench::console::ConsoleOptions {
        events: 3_000,
        requests: 2,
        bin_dir: bin_dir(),
        pg_base_url: std::env::var("HOOKLINE_TEST_PG").unwrap_or(defaults.pg_base_url),
        amqp_url: defaults.amqp_url,
        out_dir: out.clone(),
    };
    let report = hookline_bench::console::run(&opts)
        .await
        .expect("console measurement");
    assert_eq!(report.events, 3_000);
    assert!(report.pages.len() >= 15, "{:?}", report.pages);
    assert!(report
        .pages
        .iter()
        .all(|p| p.max_ms > 0.0 && p.p50_ms <= p.max_ms));
    let path = hookline_bench::console::write_report(&report, &out).expect("write the report");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read json")).expect("json");
    assert_eq!(json["events"], 3_000);
    std::fs::remove_dir_all(&out).ok();
}

/// A billing round of a few dozen subscriptions against the sandbox, with the real edge and worker: every
/// check holds (one claim, intent and charge per subscription, each card charged once) and the times are in
/// order; no speed is asserted here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_round_charges_each_subscription_once() {
    let out = std::env::temp_dir().join(format!(
        "hookline-bench-billing-smoke-{}",
        std::process::id()
    ));
    let defaults = Options::new(bin_dir());
    let opts = hookline_bench::billing_round::BillingRoundOptions {
        requests: 20,
        subscriptions: 40,
        timeout: Duration::from_secs(120),
        bin_dir: bin_dir(),
        pg_base_url: std::env::var("HOOKLINE_TEST_PG").unwrap_or(defaults.pg_base_url),
        amqp_url: defaults.amqp_url,
        out_dir: out.clone(),
    };
    let report = hookline_bench::billing_round::run(&opts)
        .await
        .expect("billing round");
    assert!(report.pass, "{:#?}", report.checks);
    let t = &report.times;
    assert!(t.first_claim_s <= t.last_claim_s && t.last_claim_s <= t.dispatched_s + 1.0);
    assert_eq!(report.quiet.ok, 20);
    let path = hookline_bench::billing_round::write_report(&report, &out).expect("write");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read json")).expect("json");
    assert_eq!(json["subscriptions"], 40);
    std::fs::remove_dir_all(&out).ok();
}
