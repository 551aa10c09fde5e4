//! `hookline-bench api-flood`: webhook ack latency of the providers' listener with and without a flood on the
//! merchant API (issue 26: the API is served by the edge process, on its own listener, so a merchant's burst —
//! or a stolen key, or a scanner — shares the process, its runtime and its database with the acks).
//!
//! Starts the real `hookline-edge` with `[api]` on a fresh database (no relay, no dispatcher: the edge's two
//! listeners only), posts `--requests` signed Stripe webhooks one after another and times each ack; then again
//! while the bench keeps `--concurrency` API requests in flight, in waves until the webhooks are done: half of
//! each wave creates payment intents with a valid key (each a new Idempotency-Key: a transaction writing the
//! intent, its outbound request and the stored answer), half presents an unknown key (401 before any database
//! work). It reports both runs, how the API answered (by status) and the edge's RSS.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::env::{free_port, with_processes};
use crate::login_flood::{rss_kib, webhooks, Acks, SECRET};

/// The bench client's API key.
const API_KEY: &str = "bench-api-key-0123456789abcdef";

/// Options of the measurement.
#[derive(Debug, Clone)]
pub struct ApiFloodOptions {
    /// Webhooks timed per run.
    pub requests: usize,
    /// API requests kept in flight during the flood.
    pub concurrency: usize,
    /// Directory of hookline-edge.
    pub bin_dir: std::path::PathBuf,
    /// PostgreSQL server URL, without a database name.
    pub pg_base_url: String,
    /// Output directory (api-flood-report.json, the edge's log).
    pub out_dir: std::path::PathBuf,
}

/// The measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ApiFloodReport {
    /// Webhooks per run.
    pub requests: usize,
    /// API requests in flight during the flood.
    pub concurrency: usize,
    /// Without the flood.
    pub quiet: Acks,
    /// During the flood.
    pub flood: Acks,
    /// API requests sent during the flood.
    pub api_sent: usize,
    /// Of which answered 201 (an intent created).
    pub api_created: usize,
    /// Of which answered 401 (unknown key).
    pub api_unauthorized: usize,
    /// Of which answered 429 or 503 (a limit or the request budget).
    pub api_shed: usize,
    /// Of which answered anything else (or not at all).
    pub api_other: usize,
    /// The edge's RSS before the flood, KiB.
    pub idle_rss_kib: u64,
    /// The edge's peak RSS during the flood (VmHWM), KiB.
    pub flood_peak_rss_kib: u64,
}

/// Runs the measurement; the database is dropped at the end, whatever happened.
pub async fn run(opts: &ApiFloodOptions) -> anyhow::Result<ApiFloodReport> {
    crate::env::with_fresh_database(&opts.pg_base_url, "api_flood", |db_url| async move {
        measure(opts, &db_url).await
    })
    .await
}

async fn measure(opts: &ApiFloodOptions, db_url: &str) -> anyhow::Result<ApiFloodReport> {
    let (edge_port, api_port) = (free_port()?, free_port()?);
    // The provider's api_base is never called: no dispatcher runs in this bench.
    let toml = format!(
        r#"database_url = "{db_url}"
[edge]
listen = "127.0.0.1:{edge_port}"
[relay]
embedded = false
[providers.stripe]
scheme = "stripe"
secrets = ["{SECRET}"]
api_base = "http://127.0.0.1:9/"
api_token = "sk_test_bench"
[api]
listen = "127.0.0.1:{api_port}"
[[api.clients]]
name = "bench"
keys = ["{API_KEY}"]
"#
    );
    with_processes(
        &opts.bin_dir,
        &opts.out_dir,
        "api-flood",
        &toml,
        edge_port,
        None,
        |edge_pid| runs(opts, edge_pid, edge_port, api_port),
    )
    .await
}

/// One API request of the flood: an intent created under a fresh key (`valid`), or an unknown key.
async fn api_request(client: &reqwest::Client, url: &str, valid: bool, n: usize) -> u16 {
    let key = if valid {
        API_KEY
    } else {
        "not-a-key-of-this-edge"
    };
    client
        .post(url)
        .bearer_auth(key)
        .header("idempotency-key", format!("flood-{n}"))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"provider":"stripe","amount":{},"currency":"usd","order_reference":"flood-{n}",
                "stripe":{{"payment_method":"pm_card_visa"}}}}"#,
            1000 + n % 1000
        ))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

async fn runs(
    opts: &ApiFloodOptions,
    edge_pid: u32,
    edge_port: u16,
    api_port: u16,
) -> anyhow::Result<ApiFloodReport> {
    let hooks = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let api = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(opts.concurrency)
        .build()?;
    let url = format!("http://127.0.0.1:{api_port}/v1/payment_intents");
    // The API must work before it is flooded: one intent, answered 201.
    let first = api_request(&api, &url, true, usize::MAX / 2).await;
    anyhow::ensure!(
        first == 201,
        "the bench's first payment intent was answered {first}, not 201: see api-flood-edge.log"
    );
    webhooks(&hooks, edge_port, 0, 20).await?;
    let quiet = webhooks(&hooks, edge_port, 1_000_000, opts.requests).await?;
    println!(
        "without an API flood: {} webhooks, ack p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        quiet.ok, quiet.p50_ms, quiet.p99_ms, quiet.max_ms
    );
    let idle_rss_kib = rss_kib(edge_pid).unwrap_or(0);
    crate::procfs::reset_peak_rss(edge_pid);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let (done, api, url) = (done.clone(), api.clone(), url.clone());
        let n = opts.concurrency;
        tokio::spawn(async move {
            let mut counts = [0usize; 5]; // sent, 201, 401, 429/503, other
            let mut wave = 0usize;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let requests = (0..n).map(|i| {
                    let (api, url) = (api.clone(), url.clone());
                    async move { api_request(&api, &url, i % 2 == 0, wave * n + i).await }
                });
                for status in futures::future::join_all(requests).await {
                    counts[0] += 1;
                    match status {
                        201 => counts[1] += 1,
                        401 => counts[2] += 1,
                        429 | 503 => counts[3] += 1,
                        _ => counts[4] += 1,
                    }
                }
                wave += 1;
            }
            counts
        })
    };
    // Let the first wave be in flight before timing.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let flooded = webhooks(&hooks, edge_port, 2_000_000, opts.requests).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let counts = flood.await.context("the API flood task")?;
    let flood_acks = flooded?;
    let flood_peak_rss_kib = crate::procfs::peak_rss_kib(edge_pid).unwrap_or(0);
    println!(
        "during a flood of {} concurrent API requests: {} webhooks, ack p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        opts.concurrency, flood_acks.ok, flood_acks.p50_ms, flood_acks.p99_ms, flood_acks.max_ms
    );
    println!(
        "API requests sent {}: {} created (201), {} unauthorized (401), {} shed (429/503), {} other; \
         edge RSS idle {} MiB, peak during the flood {} MiB",
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        counts[4],
        idle_rss_kib / 1024,
        flood_peak_rss_kib / 1024
    );
    Ok(ApiFloodReport {
        requests: opts.requests,
        concurrency: opts.concurrency,
        quiet,
        flood: flood_acks,
        api_sent: counts[0],
        api_created: counts[1],
        api_unauthorized: counts[2],
        api_shed: counts[3],
        api_other: counts[4],
        idle_rss_kib,
        flood_peak_rss_kib,
    })
}

/// Writes `api-flood-report.json` into `dir`.
pub fn write_report(
    report: &ApiFloodReport,
    dir: &std::path::Path,
) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join("api-flood-report.json");
    std::fs::write(&path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}
