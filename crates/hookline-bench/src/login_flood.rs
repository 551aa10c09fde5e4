//! `hookline-bench login-flood`: webhook ack latency of the providers' listener with and without a flood of
//! unauthenticated console logins (issue 25, finding 2). The console is its own process (`hookline console
//! serve`) since the edge stopped serving it; both share the machine, not a process.
//!
//! Starts the real `hookline-edge` and the console's process on a fresh database (no relay: the edge's ack
//! path only), posts `--requests` signed Stripe webhooks one after another and times each ack (p50, p99, max);
//! then does it again while the bench keeps `--logins` concurrent console logins with unknown names in flight
//! (waves of that many, until the webhooks are done). It reports both, how the logins were answered (401 =
//! checked, 429 = refused by the check pool or a limit) and the edge's RSS (idle, peak during the flood).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::env::{free_port, with_processes};

/// The Stripe secret of the bench edge.
pub(crate) const SECRET: &str = "whsec_bench_login_flood";

/// Options of the measurement.
#[derive(Debug, Clone)]
pub struct LoginFloodOptions {
    /// Webhooks timed per run.
    pub requests: usize,
    /// Concurrent logins of the flood.
    pub logins: usize,
    /// Directory of hookline-edge and hookline (the console process).
    pub bin_dir: std::path::PathBuf,
    /// PostgreSQL server URL, without a database name.
    pub pg_base_url: String,
    /// Output directory (login-flood-report.json, the edge's and the console's logs).
    pub out_dir: std::path::PathBuf,
}

/// Ack latency of one run, milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Acks {
    /// Webhooks answered 200.
    pub ok: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

/// The measurement.
#[derive(Debug, Clone, Serialize)]
pub struct LoginFloodReport {
    /// Webhooks per run.
    pub requests: usize,
    /// Concurrent logins of the flood.
    pub logins: usize,
    /// Without the flood.
    pub quiet: Acks,
    /// During the flood.
    pub flood: Acks,
    /// Logins sent during the flood.
    pub logins_sent: usize,
    /// Of which answered 401 (a password check ran).
    pub logins_checked: usize,
    /// Of which answered 429 (check pool busy or a failure limit).
    pub logins_refused: usize,
    /// The edge's RSS before the flood, KiB.
    pub idle_rss_kib: u64,
    /// The edge's peak RSS during the flood (VmHWM), KiB.
    pub flood_peak_rss_kib: u64,
}

pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs the measurement; the database is dropped at the end, whatever happened.
pub async fn run(opts: &LoginFloodOptions) -> anyhow::Result<LoginFloodReport> {
    crate::env::with_fresh_database(&opts.pg_base_url, "login_flood", |db_url| async move {
        measure(opts, &db_url).await
    })
    .await
}

async fn measure(opts: &LoginFloodOptions, db_url: &str) -> anyhow::Result<LoginFloodReport> {
    use argon2::password_hash::rand_core::OsRng;
    use argon2::password_hash::SaltString;
    use argon2::{Argon2, PasswordHasher};
    let salt = SaltString::generate(&mut OsRng);
    let hash = Argon2::default()
        .hash_password(b"bench login flood password", &salt)
        .map_err(|e| anyhow::anyhow!("hash the bench password: {e}"))?
        .to_string();
    let (edge_port, console_port) = (free_port()?, free_port()?);
    let toml = format!(
        r#"database_url = "{db_url}"
[edge]
listen = "127.0.0.1:{edge_port}"
[relay]
embedded = false
[providers.stripe]
scheme = "stripe"
secrets = ["{SECRET}"]
[console]
listen = "127.0.0.1:{console_port}"
[[console.operators]]
name = "bench"
password_hash = "{hash}"
"#
    );
    with_processes(
        &opts.bin_dir,
        &opts.out_dir,
        "login-flood",
        &toml,
        edge_port,
        Some(console_port),
        |edge_pid| runs(opts, edge_pid, edge_port, console_port),
    )
    .await
}

/// `n` sequential signed webhooks (ids from `first`, signed with [`SECRET`]), timed.
pub(crate) async fn webhooks(
    client: &reqwest::Client,
    port: u16,
    first: usize,
    n: usize,
) -> anyhow::Result<Acks> {
    let url = webhook_url(port);
    let mut ms = Vec::with_capacity(n);
    let mut ok = 0;
    for i in first..first + n {
        let (acked, took) = post_webhook(client, &url, i).await?;
        ms.push(took);
        ok += usize::from(acked);
    }
    Ok(Acks::from_ms(ok, ms))
}

/// The edge's Stripe webhook URL on `port`.
pub(crate) fn webhook_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/webhooks/stripe")
}

/// One signed Stripe webhook (event `evt_flood_{i}`, signed with [`SECRET`]) posted to `url`: whether it was
/// answered 200, and how long the answer took (ms).
pub(crate) async fn post_webhook(
    client: &reqwest::Client,
    url: &str,
    i: usize,
) -> anyhow::Result<(bool, f64)> {
    let body = format!(
        r#"{{"id":"evt_flood_{i}","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_flood_{i}","amount":1000,"currency":"brl","status":"succeeded"}}}}}}"#
    );
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let signature = hookline_signature::sign::stripe(SECRET.as_bytes(), ts, body.as_bytes());
    let started = Instant::now();
    let res = client
        .post(url)
        .header("stripe-signature", signature)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .context("POST a webhook")?;
    let status = res.status();
    res.bytes().await.ok();
    Ok((
        status.as_u16() == 200,
        started.elapsed().as_secs_f64() * 1000.0,
    ))
}

impl Acks {
    /// The summary of `ms` (every timed webhook), `ok` of them answered 200.
    pub(crate) fn from_ms(ok: usize, mut ms: Vec<f64>) -> Acks {
        ms.sort_by(f64::total_cmp);
        Acks {
            ok,
            p50_ms: percentile(&ms, 0.5),
            p99_ms: percentile(&ms, 0.99),
            max_ms: ms.last().copied().unwrap_or(0.0),
        }
    }
}

/// The pre-login cookie and token of the console's login form.
async fn login_form(client: &reqwest::Client, base: &str) -> anyhow::Result<(String, String)> {
    let form = client.get(format!("{base}/login")).send().await?;
    let cookie = form
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("hookline_console_login="))
        .and_then(|c| c.split(';').next())
        .context("no login cookie")?
        .to_string();
    let text = form.text().await?;
    let marker = "name=\"csrf\" value=\"";
    let start = text.find(marker).context("no login token")? + marker.len();
    let token = text
        .get(start..start + 64)
        .context("short login token")?
        .to_string();
    Ok((cookie, token))
}

async fn runs(
    opts: &LoginFloodOptions,
    edge_pid: u32,
    edge_port: u16,
    console_port: u16,
) -> anyhow::Result<LoginFloodReport> {
    let hooks = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    // Warm-up (connections, prepared statements), then the quiet run.
    webhooks(&hooks, edge_port, 0, 20).await?;
    let quiet = webhooks(&hooks, edge_port, 1_000_000, opts.requests).await?;
    println!(
        "without a login flood: {} webhooks, ack p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        quiet.ok, quiet.p50_ms, quiet.p99_ms, quiet.max_ms
    );

    let base = format!("http://127.0.0.1:{console_port}");
    let logins = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(opts.logins)
        .build()?;
    let (cookie, token) = login_form(&logins, &base).await?;
    let idle_rss_kib = rss_kib(edge_pid).unwrap_or(0);
    crate::procfs::reset_peak_rss(edge_pid);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let (done, logins, base) = (done.clone(), logins.clone(), base.clone());
        let n = opts.logins;
        tokio::spawn(async move {
            let (mut sent, mut checked, mut refused) = (0usize, 0usize, 0usize);
            let mut wave = 0usize;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let attempts = (0..n).map(|i| {
                    let (logins, url) = (logins.clone(), format!("{base}/login"));
                    let body = format!("csrf={token}&name=flood-{wave}-{i}&password=guess");
                    let cookie = cookie.clone();
                    async move {
                        logins
                            .post(url)
                            .header("cookie", cookie)
                            .header("content-type", "application/x-www-form-urlencoded")
                            .body(body)
                            .send()
                            .await
                            .map(|r| r.status().as_u16())
                            .unwrap_or(0)
                    }
                });
                for status in futures::future::join_all(attempts).await {
                    sent += 1;
                    match status {
                        401 => checked += 1,
                        429 => refused += 1,
                        _ => {}
                    }
                }
                wave += 1;
            }
            (sent, checked, refused)
        })
    };
    // Let the first wave be in flight before timing.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let flooded = webhooks(&hooks, edge_port, 2_000_000, opts.requests).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (logins_sent, logins_checked, logins_refused) =
        flood.await.context("the login flood task")?;
    let flood_acks = flooded?;
    let flood_peak_rss_kib = crate::procfs::peak_rss_kib(edge_pid).unwrap_or(0);
    println!(
        "during a flood of {} concurrent logins: {} webhooks, ack p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        opts.logins, flood_acks.ok, flood_acks.p50_ms, flood_acks.p99_ms, flood_acks.max_ms
    );
    println!(
        "logins sent {logins_sent}: {logins_checked} checked (401), {logins_refused} refused (429); \
         edge RSS idle {} MiB, peak during the flood {} MiB",
        idle_rss_kib / 1024,
        flood_peak_rss_kib / 1024
    );
    Ok(LoginFloodReport {
        requests: opts.requests,
        logins: opts.logins,
        quiet,
        flood: flood_acks,
        logins_sent,
        logins_checked,
        logins_refused,
        idle_rss_kib,
        flood_peak_rss_kib,
    })
}

/// Writes `login-flood-report.json` into `dir`.
pub fn write_report(report: &LoginFloodReport, dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join("login-flood-report.json");
    std::fs::write(&path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}
