//! `hookline-bench console`: how fast the operator console's pages answer with a large events table.
//!
//! Seeds a fresh database with `--events` rows (default 1 000 000) in `webhook_events` with one
//! `INSERT … SELECT generate_series` (three providers, four types, one event every 50 ms of history), processed
//! markers for 99 % of them and unresolved dead letters for 0.1 %, runs `ANALYZE`, starts the real
//! `hookline-edge` and the console's own process (`hookline console serve`) on it, logs in, and times each main
//! page (sequential requests after a
//! warm-up; p50, p95 and max in milliseconds) against the 100 ms target. The overview's first request, which
//! computes `hookline status` on the whole table, is reported apart: later requests are served from its
//! snapshot (refreshed in the background at most every 5 s).
//!
//! Missing the target is reported, not fatal; a page that does not answer 200 is an error.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHasher};
use serde::Serialize;

use crate::env::{free_port, with_processes};

/// The target of every page.
pub const TARGET_MS: f64 = 100.0;
const PASSWORD: &str = "bench console password";

/// Options of the console measurement.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// Events to seed.
    pub events: i64,
    /// Timed requests per page.
    pub requests: usize,
    /// Directory of hookline-edge and hookline (the console process).
    pub bin_dir: std::path::PathBuf,
    /// PostgreSQL server URL, without a database name.
    pub pg_base_url: String,
    /// RabbitMQ URL (the overview reads queue depths).
    pub amqp_url: String,
    /// Output directory (console-report.json, the edge's and the console's logs).
    pub out_dir: std::path::PathBuf,
}

/// One page's timings.
#[derive(Debug, Clone, Serialize)]
pub struct PageTiming {
    /// What was requested.
    pub page: String,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// p95 within [`TARGET_MS`].
    pub within_target: bool,
}

/// The measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleReport {
    /// Events seeded.
    pub events: i64,
    /// Seconds the seeding (insert, markers, dead letters, analyze) took.
    pub seed_secs: f64,
    /// The overview's first request (computes the status aggregate on the whole table).
    pub overview_cold_ms: f64,
    /// Every page.
    pub pages: Vec<PageTiming>,
}

async fn seed(url: &str, events: i64) -> anyhow::Result<()> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .context("connect to the console bench database")?;
    sqlx::query(
        "INSERT INTO webhook_events
             (provider, provider_event_id, event_type, received_at, signed_at, headers, query, body)
         SELECT (ARRAY['stripe','github','mercadopago'])[1 + g % 3],
                'evt_bench_' || g,
                (ARRAY['payment_intent.succeeded','charge.refunded','invoice.paid','charge.dispute.created'])[1 + g % 4],
                now() - make_interval(secs => ($1 - g) * 0.05),
                now() - make_interval(secs => ($1 - g) * 0.05),
                '[[\"content-type\",\"application/json\"],[\"stripe-signature\",\"t=1,v1=00\"]]'::jsonb,
                '',
                convert_to(format('{\"id\":\"evt_bench_%s\",\"type\":\"payment_intent.succeeded\",\"data\":{\"object\":{\"id\":\"pi_bench_%s\",\"amount\":%s,\"currency\":\"brl\",\"status\":\"succeeded\"}}}', g, g, 1000 + g % 9000), 'UTF8')
         FROM generate_series(1, $1) AS g",
    )
    .bind(events)
    .execute(&pool)
    .await
    .context("seed webhook_events")?;
    // Seeded as already published: out of the outbox the insert trigger put them in.
    sqlx::query("DELETE FROM event_outbox")
        .execute(&pool)
        .await
        .context("seed: mark the events published")?;
    sqlx::query(
        "INSERT INTO processed_events (consumer, event_id, processed_at, outcome)
         SELECT 'payments', id, received_at, 'applied' FROM webhook_events WHERE id % 100 <> 0",
    )
    .execute(&pool)
    .await
    .context("seed processed markers")?;
    sqlx::query(
        "INSERT INTO dead_letters (consumer, event_id, reason, attempts)
         SELECT 'payments', id, 'handler failed: bench dead letter', 3 FROM webhook_events WHERE id % 1000 = 0",
    )
    .execute(&pool)
    .await
    .context("seed dead letters")?;
    sqlx::query("ANALYZE")
        .execute(&pool)
        .await
        .context("analyze")?;
    pool.close().await;
    Ok(())
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The session cookie after logging in.
async fn login(client: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let form = client.get(format!("{base}/login")).send().await?;
    let login_cookie = form
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
    let token = &text[start..start + 64];
    let res = client
        .post(format!("{base}/login"))
        .header("cookie", login_cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "csrf={token}&name=bench&password={}",
            PASSWORD.replace(' ', "+")
        ))
        .send()
        .await?;
    anyhow::ensure!(
        res.status().as_u16() == 303,
        "login answered {}",
        res.status()
    );
    res.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("hookline_console_session="))
        .and_then(|c| c.split(';').next())
        .map(str::to_string)
        .context("no session cookie")
}

async fn time_page(
    client: &reqwest::Client,
    base: &str,
    cookie: &str,
    path: &str,
    requests: usize,
) -> anyhow::Result<PageTiming> {
    let get = || async {
        let started = Instant::now();
        let res = client
            .get(format!("{base}{path}"))
            .header("cookie", cookie)
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = res.status();
        res.bytes().await?;
        anyhow::ensure!(status.as_u16() == 200, "GET {path} answered {status}");
        Ok::<f64, anyhow::Error>(started.elapsed().as_secs_f64() * 1000.0)
    };
    for _ in 0..3 {
        get().await?;
    }
    let mut ms = Vec::with_capacity(requests);
    for _ in 0..requests {
        ms.push(get().await?);
    }
    ms.sort_by(f64::total_cmp);
    let p95 = percentile(&ms, 0.95);
    Ok(PageTiming {
        page: path.to_string(),
        p50_ms: percentile(&ms, 0.5),
        p95_ms: p95,
        max_ms: ms.last().copied().unwrap_or(0.0),
        within_target: p95 <= TARGET_MS,
    })
}

/// Runs the measurement; the database is dropped at the end, whatever happened.
pub async fn run(opts: &ConsoleOptions) -> anyhow::Result<ConsoleReport> {
    crate::env::with_fresh_database(&opts.pg_base_url, "console", |db_url| async move {
        measure(opts, &db_url).await
    })
    .await
}

async fn measure(opts: &ConsoleOptions, db_url: &str) -> anyhow::Result<ConsoleReport> {
    let started = Instant::now();
    println!("seeding {} events…", opts.events);
    seed(db_url, opts.events).await?;
    let seed_secs = started.elapsed().as_secs_f64();
    println!("seeded in {seed_secs:.1} s");

    let salt = SaltString::generate(&mut OsRng);
    let hash = Argon2::default()
        .hash_password(PASSWORD.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hash the bench password: {e}"))?
        .to_string();
    let (edge_port, console_port) = (free_port()?, free_port()?);
    let toml = format!(
        r#"database_url = "{db_url}"
amqp_url = "{amqp}"
[amqp]
prefix = "bench-console-{edge_port}"
[edge]
listen = "127.0.0.1:{edge_port}"
workers = 1
[relay]
embedded = false
[providers.stripe]
scheme = "stripe"
secrets = ["whsec_bench"]
[providers.github]
scheme = "github"
secrets = ["bench"]
[providers.mercadopago]
scheme = "mercadopago"
secrets = ["bench"]
[console]
listen = "127.0.0.1:{console_port}"
[[console.operators]]
name = "bench"
password_hash = "{hash}"
"#,
        amqp = opts.amqp_url
    );
    let (overview_cold_ms, pages) = with_processes(
        &opts.bin_dir,
        &opts.out_dir,
        "console",
        &toml,
        edge_port,
        Some(console_port),
        |_| pages(opts, console_port),
    )
    .await?;
    Ok(ConsoleReport {
        events: opts.events,
        seed_secs,
        overview_cold_ms,
        pages,
    })
}

async fn pages(opts: &ConsoleOptions, port: u16) -> anyhow::Result<(f64, Vec<PageTiming>)> {
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()?;
    let cookie = login(&client, &base).await?;
    let cold = Instant::now();
    let res = client
        .get(format!("{base}/"))
        .header("cookie", &cookie)
        .send()
        .await?;
    anyhow::ensure!(
        res.status().as_u16() == 200,
        "overview answered {}",
        res.status()
    );
    res.bytes().await?;
    let overview_cold_ms = cold.elapsed().as_secs_f64() * 1000.0;
    let mid = opts.events / 2;
    let paths = [
        "/".to_string(),
        "/overview/figures".into(),
        "/events".into(),
        format!("/events?before={mid}"),
        "/events?provider=github".into(),
        format!("/events?provider=github&before={mid}"),
        "/events?type=charge.refunded".into(),
        "/events?state=unprocessed".into(),
        "/events?state=dead".into(),
        "/events?state=applied".into(),
        "/events?since=1h".into(),
        format!("/events?q=evt_bench_{mid}"),
        format!("/events?q={mid}"),
        format!("/events/{mid}"),
        "/dead-letters".into(),
        "/payments".into(),
        "/intents".into(),
        "/audit".into(),
    ];
    let mut timings = Vec::new();
    for path in &paths {
        let t = time_page(&client, &base, &cookie, path, opts.requests).await?;
        println!(
            "{:<44} p50 {:>7.1} ms  p95 {:>7.1} ms  max {:>7.1} ms  {}",
            t.page,
            t.p50_ms,
            t.p95_ms,
            t.max_ms,
            if t.within_target {
                "ok"
            } else {
                "MISSED (target 100 ms)"
            }
        );
        timings.push(t);
    }
    Ok((overview_cold_ms, timings))
}

/// Writes `console-report.json` into `dir`.
pub fn write_report(report: &ConsoleReport, dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join("console-report.json");
    std::fs::write(&path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}
