//! `hookline-bench billing-round`: how long one scheduled billing round takes for `--subscriptions` due
//! subscriptions against the provider sandbox, and what it does to webhook acks (issue 48: the workers bill by
//! themselves, every `[billing] schedule_secs`, on the pool their consumer uses).
//!
//! On a fresh database and RabbitMQ prefix it starts the sandbox as the Stripe gateway (`hookline sandbox`, its
//! own process), the real `hookline-edge` (embedded relay: the acks, and the sandbox's webhooks of every charge)
//! and the real `hookline-worker` with `[billing] schedule_secs = 1` (consumer, dispatcher and scheduler, as in
//! production). Setup: one customer with a saved card (`pm_card_visa` attached) per subscription at the sandbox,
//! then one bulk `INSERT` of that many monthly subscriptions in the running period — parked (`next_period_at` a
//! century ahead) so that the idle worker's rounds find nothing. The plan of the scheduler's pick with every
//! subscription due is recorded (`EXPLAIN (ANALYZE, BUFFERS)`, rolled back).
//!
//! Then: `--requests` sequential signed webhook acks with the worker idle (the baseline); one `UPDATE` makes
//! every subscription due (t0), the worker's next round (≤ 1 s) claims them one transaction each and the
//! dispatcher sends the charges to the sandbox, which sends their webhooks back to the edge, which the worker
//! applies. Meanwhile the bench keeps posting sequential webhooks (as many as fit), split into those sent
//! before the poller saw every claim (during the round) and after it (until every intent succeeded).
//! Times come from the database (`billing_claims.claimed_at`, `outbound_requests.updated_at`,
//! `payment_intents.updated_at` against t0), so the poller's pace does not enter them.
//!
//! Checks (a failed one fails the run): exactly N claims of N distinct subscriptions for the running cycle, N
//! intents and N charge requests all succeeded, nothing still due, the sandbox holding N payment intents and N
//! captured charges with each saved card charged exactly once — also after two more rounds — and every webhook
//! acknowledged.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use serde::Serialize;
use sqlx::PgPool;

use crate::checks::Check;
use crate::costs::{CostModel, Counters};
use crate::env::{delete_topology, free_port, wait_ready, ChildProcess};
use crate::login_flood::{post_webhook, rss_kib, webhook_url, webhooks, Acks, SECRET};
use crate::procfs::{CpuUsage, Monitor};

/// The sandbox's and the worker's Stripe API key.
const STRIPE_KEY: &str = "sk_test_bench_billing_round";
/// Minor units charged per cycle.
const AMOUNT: i64 = 1990;

/// Options of the measurement.
#[derive(Debug, Clone)]
pub struct BillingRoundOptions {
    /// Webhooks timed in the baseline (during the round: as many as fit, one after another).
    pub requests: usize,
    /// Due subscriptions the round bills.
    pub subscriptions: usize,
    /// Give up (and fail) when the round and its dispatch have not finished after this long.
    pub timeout: Duration,
    /// Directory of hookline-edge, hookline-worker and hookline (the sandbox).
    pub bin_dir: PathBuf,
    /// PostgreSQL server URL, without a database name.
    pub pg_base_url: String,
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Output directory (billing-round-report.json, the children's logs).
    pub out_dir: PathBuf,
}

/// When things happened, seconds after t0 (the `UPDATE` that made every subscription due), from the database.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoundTimes {
    /// The first claim (the worker's next tick found them: ≤ `schedule_secs`).
    pub first_claim_s: f64,
    /// The last claim: every subscription billed.
    pub last_claim_s: f64,
    /// The round itself: first to last claim.
    pub round_s: f64,
    /// Claims per second over the round.
    pub claims_per_s: f64,
    /// The last charge request answered by the sandbox (`outbound_requests` succeeded).
    pub dispatched_s: f64,
    /// The last intent `succeeded` in hookline (the sandbox's webhook back, acked by the edge, applied by the
    /// worker).
    pub settled_s: f64,
}

/// A `billing round` line of the worker's log: what the round charged and how long it took, by its own clock.
#[derive(Debug, Clone, Serialize)]
pub struct LoggedRound {
    /// Cycles charged.
    pub charged: u64,
    /// Its wall time, ms.
    pub elapsed_ms: u64,
}

/// The measurement.
#[derive(Debug, Clone, Serialize)]
pub struct BillingRoundReport {
    /// Due subscriptions.
    pub subscriptions: usize,
    /// Webhooks timed in the baseline.
    pub requests: usize,
    /// Machine load (1, 5, 15 min) when the run started.
    pub loadavg: String,
    /// Setup: customers and saved cards at the sandbox, seconds.
    pub setup_cards_s: f64,
    /// Setup: the bulk insert of the subscriptions, seconds.
    pub setup_insert_s: f64,
    /// `EXPLAIN (ANALYZE, BUFFERS)` of the scheduler's pick with every subscription due (rolled back).
    pub pick_plan: Vec<String>,
    /// Acks with the worker idle (its scheduler finding nothing due every second).
    pub quiet: Acks,
    /// Acks posted from t0 until every claim existed.
    pub during_round: Acks,
    /// Acks posted after the last claim until every intent succeeded (the dispatch and the webhooks back).
    pub after_round: Acks,
    /// When things happened.
    pub times: RoundTimes,
    /// The worker's own `billing round` log lines with a charge.
    pub worker_rounds: Vec<LoggedRound>,
    /// CPU from t0 until every intent succeeded, by component (`other_s`: the rest of the machine, the sandbox
    /// included).
    pub cpu: CpuUsage,
    /// The sandbox process's CPU over the same window, seconds.
    pub sandbox_cpu_s: Option<f64>,
    /// Rows written, WAL, per subscription billed (t0 until settled; `webhook_events` includes the bench's own
    /// acks during the window).
    pub cost_per_subscription: Option<CostModel>,
    /// The worker's RSS after the round, KiB.
    pub worker_rss_kib: u64,
    /// The correctness checks.
    pub checks: Vec<Check>,
    /// Every check held.
    pub pass: bool,
}

/// Runs the measurement; the database and the run's queues are removed at the end, whatever happened.
pub async fn run(opts: &BillingRoundOptions) -> anyhow::Result<BillingRoundReport> {
    anyhow::ensure!(opts.subscriptions > 0, "--subscriptions must be positive");
    let prefix = format!("bench-billing-{}", uuid::Uuid::new_v4().simple());
    let result = crate::env::with_fresh_database(&opts.pg_base_url, "billing_round", |db_url| {
        let prefix = prefix.clone();
        async move { measure(opts, &db_url, &prefix).await }
    })
    .await;
    // The run's queues and exchanges, named after its prefix as the edge and worker name them.
    let no_env: [(&str, &str); 0] = [];
    let amqp = hookline_core::Config::from_toml_str(
        &format!("[amqp]\nprefix = \"{prefix}\"\n"),
        "hookline-bench",
        &no_env,
    )
    .context("the run's [amqp] section")?;
    let topology = hookline_bus::Topology::from_config(&amqp.amqp);
    for p in delete_topology(&opts.amqp_url, &topology).await {
        eprintln!("[hookline-bench] cleanup: {p}");
    }
    result
}

fn config_toml(
    opts: &BillingRoundOptions,
    db_url: &str,
    prefix: &str,
    ports: (u16, u16, u16),
) -> String {
    let (edge_port, sandbox_port, worker_port) = ports;
    format!(
        r#"# Written by hookline-bench billing-round; the database and queues it names are removed at the end.
database_url = "{db_url}"
amqp_url = "{amqp}"
[amqp]
prefix = "{prefix}"
[edge]
listen = "127.0.0.1:{edge_port}"
[worker]
listen = "127.0.0.1:{worker_port}"
[providers.stripe]
scheme = "stripe"
secrets = ["{SECRET}"]
api_base = "http://127.0.0.1:{sandbox_port}"
api_token = "{STRIPE_KEY}"
[billing]
schedule_secs = 1
"#,
        amqp = opts.amqp_url,
    )
}

/// The children of one run, killed (SIGKILL by pid) when dropped or by [`Children::kill`].
struct Children {
    sandbox: ChildProcess,
    edge: Option<ChildProcess>,
    worker: Option<ChildProcess>,
}

impl Children {
    fn ensure_running(&mut self) -> anyhow::Result<()> {
        self.sandbox.ensure_running()?;
        if let Some(e) = self.edge.as_mut() {
            e.ensure_running()?;
        }
        if let Some(w) = self.worker.as_mut() {
            w.ensure_running()?;
        }
        Ok(())
    }

    async fn kill(self) {
        for c in [self.worker, self.edge, Some(self.sandbox)]
            .into_iter()
            .flatten()
        {
            c.kill().await.ok();
        }
    }
}

async fn measure(
    opts: &BillingRoundOptions,
    db_url: &str,
    prefix: &str,
) -> anyhow::Result<BillingRoundReport> {
    std::fs::create_dir_all(&opts.out_dir)?;
    let ports = (free_port()?, free_port()?, free_port()?);
    let config_path = opts.out_dir.join("hookline-bench-billing-round.toml");
    std::fs::write(&config_path, config_toml(opts, db_url, prefix, ports))?;
    let sandbox_addr: std::net::SocketAddr = ([127, 0, 0, 1], ports.1).into();
    let sandbox = ChildProcess::spawn_sandbox(
        &opts.bin_dir,
        &config_path,
        sandbox_addr,
        48,
        &opts.out_dir.join("billing-round-sandbox.log"),
    )?;
    let mut children = Children {
        sandbox,
        edge: None,
        worker: None,
    };
    let result = runs(opts, db_url, &config_path, ports, &mut children).await;
    children.kill().await;
    result
}

async fn runs(
    opts: &BillingRoundOptions,
    db_url: &str,
    config_path: &Path,
    (edge_port, sandbox_port, worker_port): (u16, u16, u16),
    children: &mut Children,
) -> anyhow::Result<BillingRoundReport> {
    let loadavg = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let n = opts.subscriptions;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let sandbox = format!("http://127.0.0.1:{sandbox_port}");
    wait_http(
        &http,
        &format!("{sandbox}/_sandbox/health"),
        children,
        "the sandbox",
    )
    .await?;
    let mut edge = ChildProcess::spawn(
        &opts.bin_dir,
        "hookline-edge",
        config_path,
        &opts.out_dir.join("billing-round-edge.log"),
    )?;
    wait_ready(&mut edge, ([127, 0, 0, 1], edge_port).into()).await?;
    let edge_pid = edge.pid();
    children.edge = Some(edge);

    // Setup: a customer with a saved card per subscription at the sandbox, then the subscriptions, parked.
    let started = Instant::now();
    let cards = saved_cards(&http, &sandbox, n).await?;
    let setup_cards_s = started.elapsed().as_secs_f64();
    println!("setup: {n} customers with a saved card at the sandbox in {setup_cards_s:.1} s");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(db_url)
        .await
        .context("connect to the bench database")?;
    let started = Instant::now();
    let cycle = insert_subscriptions(&pool, &cards).await?;
    let setup_insert_s = started.elapsed().as_secs_f64();
    let pick_plan = pick_plan(&pool).await?;
    println!(
        "setup: {n} monthly subscriptions of cycle {cycle} in {setup_insert_s:.1} s; the scheduler's pick with all due:\n  {}",
        pick_plan.join("\n  ")
    );
    sqlx::query("VACUUM ANALYZE subscriptions")
        .execute(&pool)
        .await?;

    let mut worker = ChildProcess::spawn(
        &opts.bin_dir,
        "hookline-worker",
        config_path,
        &opts.out_dir.join("billing-round-worker.log"),
    )?;
    let worker_pid = worker.pid();
    wait_scheduler(&http, worker_port, &mut worker).await?;
    children.worker = Some(worker);

    // The baseline: the worker idle, its scheduler finding nothing every second.
    webhooks(&http, edge_port, 0, 20).await?;
    let quiet = webhooks(&http, edge_port, 1_000_000, opts.requests).await?;
    println!(
        "acks, worker idle: {} webhooks, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        quiet.ok, quiet.p50_ms, quiet.p99_ms, quiet.max_ms
    );

    let monitor = Monitor::new();
    monitor.set_edge(Some(edge_pid));
    monitor.set_worker(Some(worker_pid));
    let counters_before = Counters::read(db_url).await.ok();
    let cpu_before = monitor.snapshot();
    let sandbox_ticks = crate::procfs::process_ticks(children.sandbox.pid());
    // The acks during the round: sequential, from just before t0 until told to stop, each stamped.
    let stop = Arc::new(AtomicBool::new(false));
    let acks = {
        let (stop, http, url) = (stop.clone(), http.clone(), webhook_url(edge_port));
        tokio::spawn(async move {
            let mut samples: Vec<(Instant, bool, f64)> = Vec::new();
            let mut i = 2_000_000;
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let (ok, ms) = post_webhook(&http, &url, i).await?;
                samples.push((sent, ok, ms));
                i += 1;
            }
            anyhow::Ok(samples)
        })
    };
    let t0: f64 = {
        let mut conn = pool.acquire().await?;
        sqlx::query("UPDATE subscriptions SET next_period_at = anchor")
            .execute(&mut *conn)
            .await?;
        sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
            .fetch_one(&mut *conn)
            .await?
    };
    println!("t0: {n} subscriptions due; waiting for the worker's round and its dispatch");

    let waited = wait_done(&pool, n as i64, opts.timeout, children).await;
    stop.store(true, Ordering::Relaxed);
    let samples = acks.await.context("the ack task")??;
    let cpu = monitor.usage(&cpu_before, &monitor.snapshot());
    let sandbox_cpu_s = sandbox_ticks
        .zip(crate::procfs::process_ticks(children.sandbox.pid()))
        .map(|(a, b)| (b - a) as f64 / crate::procfs::clock_ticks_per_sec());
    let waited = waited?;
    let split = |before: bool| {
        let picked: Vec<&(Instant, bool, f64)> = samples
            .iter()
            .filter(|(at, _, _)| (*at < waited.claimed) == before)
            .collect();
        Acks::from_ms(
            picked.iter().filter(|s| s.1).count(),
            picked.iter().map(|s| s.2).collect(),
        )
    };
    let (during_round, after_round) = (split(true), split(false));
    let ack_samples = samples.len();

    let times = round_times(&pool, t0).await?;
    println!(
        "round: first claim {:.2} s after t0, last {:.2} s: {n} claims in {:.2} s ({:.0} claims/s); \
         last charge answered by the sandbox {:.2} s after t0, every intent succeeded {:.2} s after t0",
        times.first_claim_s,
        times.last_claim_s,
        times.round_s,
        times.claims_per_s,
        times.dispatched_s,
        times.settled_s
    );
    println!(
        "acks during the round: {} webhooks, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        during_round.ok, during_round.p50_ms, during_round.p99_ms, during_round.max_ms
    );
    println!(
        "acks after it (dispatch, webhooks back): {} webhooks, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        after_round.ok, after_round.p50_ms, after_round.p99_ms, after_round.max_ms
    );
    let worker_rss_kib = rss_kib(worker_pid).unwrap_or(0);

    // Two more rounds find nothing to charge; then what the database and the gateway hold.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    children.ensure_running()?;
    let mut checks = database_checks(&pool, n as i64, &cycle).await?;
    checks.extend(sandbox_checks(&http, &sandbox, &cards).await?);
    let acked = samples.iter().filter(|s| s.1).count();
    checks.push(Check {
        name: "every webhook acknowledged".into(),
        pass: quiet.ok == opts.requests && acked == ack_samples,
        detail: format!(
            "{}/{} before, {acked}/{ack_samples} during and after the round",
            quiet.ok, opts.requests
        ),
    });
    for c in &checks {
        println!(
            "{} {}: {}",
            if c.pass { "ok  " } else { "FAIL" },
            c.name,
            c.detail
        );
    }
    let cost_per_subscription = match counters_before {
        Some(before) => crate::costs::settled(db_url)
            .await
            .ok()
            .map(|after| before.per_event(&after, n as u64, cpu.postgres_s, cpu.rabbitmq_s)),
        None => None,
    };
    pool.close().await;
    let worker_rounds =
        logged_rounds(&opts.out_dir.join("billing-round-worker.log")).unwrap_or_default();
    Ok(BillingRoundReport {
        subscriptions: n,
        requests: opts.requests,
        loadavg,
        setup_cards_s,
        setup_insert_s,
        pick_plan,
        quiet,
        during_round,
        after_round,
        times,
        worker_rounds,
        cpu,
        sandbox_cpu_s,
        cost_per_subscription,
        worker_rss_kib,
        pass: checks.iter().all(|c| c.pass),
        checks,
    })
}

/// Polls `url` until it answers 200 (20 s).
async fn wait_http(
    http: &reqwest::Client,
    url: &str,
    children: &mut Children,
    what: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        children.ensure_running()?;
        if let Ok(r) = http.get(url).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what} did not answer {url} within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the worker's `/metrics` shows a finished scheduler round (its scheduler is live).
async fn wait_scheduler(
    http: &reqwest::Client,
    port: u16,
    worker: &mut ChildProcess,
) -> anyhow::Result<()> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        worker.ensure_running()?;
        if let Ok(r) = http.get(&url).send().await {
            let text = r.text().await.unwrap_or_default();
            let rounds = text
                .lines()
                .filter(|l| l.starts_with(hookline_billing::metric::ROUNDS))
                .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .sum::<f64>();
            if rounds >= 1.0 {
                return Ok(());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the worker's scheduler finished no round within 30 s (see billing-round-worker.log)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `n` customers, each with `pm_card_visa` attached (a saved `pm_…` of its own): `(cus_…, pm_…)`.
async fn saved_cards(
    http: &reqwest::Client,
    sandbox: &str,
    n: usize,
) -> anyhow::Result<Vec<(String, String)>> {
    let one = |i: usize| async move {
        let customer: serde_json::Value = post_form(
            http,
            &format!("{sandbox}/v1/customers"),
            &[("name", &format!("bench subscriber {i}"))],
        )
        .await?;
        let customer = customer["id"]
            .as_str()
            .context("the sandbox's customer has no id")?
            .to_owned();
        let method = post_form(
            http,
            &format!("{sandbox}/v1/payment_methods/pm_card_visa/attach"),
            &[("customer", &customer)],
        )
        .await?;
        let method = method["id"]
            .as_str()
            .context("the sandbox's payment method has no id")?
            .to_owned();
        anyhow::Ok((customer, method))
    };
    futures::stream::iter(0..n)
        .map(one)
        .buffered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

async fn post_form(
    http: &reqwest::Client,
    url: &str,
    form: &[(&str, &str)],
) -> anyhow::Result<serde_json::Value> {
    let res = http
        .post(url)
        .bearer_auth(STRIPE_KEY)
        .form(form)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    anyhow::ensure!(res.status().is_success(), "POST {url}: {}", res.status());
    Ok(res.json().await?)
}

/// One bulk insert: a monthly subscription per saved card, anchored on the first of the running month (its
/// period started, it existed since), parked a century ahead. Returns the running cycle (`YYYY-MM`).
async fn insert_subscriptions(pool: &PgPool, cards: &[(String, String)]) -> anyhow::Result<String> {
    let (customers, methods): (Vec<String>, Vec<String>) = cards.iter().cloned().unzip();
    sqlx::query(
        "WITH a AS (SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS anchor)
         INSERT INTO subscriptions (provider, customer, payment_method, amount, currency, interval, anchor,
                                    created_at, next_cycle, next_period_at)
         SELECT 'stripe', c, m, $3, 'brl', 'month', a.anchor, a.anchor,
                to_char(a.anchor AT TIME ZONE 'UTC', 'YYYY-MM'), a.anchor + interval '100 years'
           FROM unnest($1::text[], $2::text[]) AS u(c, m), a",
    )
    .bind(&customers)
    .bind(&methods)
    .bind(AMOUNT)
    .execute(pool)
    .await
    .context("insert the subscriptions")?;
    Ok(sqlx::query_scalar(
        "SELECT to_char(date_trunc('month', now() AT TIME ZONE 'UTC'), 'YYYY-MM')",
    )
    .fetch_one(pool)
    .await?)
}

/// The scheduler's pick (`subscriptions::lock_next_due`) with every subscription due: `EXPLAIN (ANALYZE,
/// BUFFERS)` in a transaction rolled back.
async fn pick_plan(pool: &PgPool) -> anyhow::Result<Vec<String>> {
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE subscriptions SET next_period_at = anchor")
        .execute(&mut *tx)
        .await?;
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, BUFFERS, TIMING)
         SELECT * FROM subscriptions
          WHERE status = 'active' AND next_period_at <= now()
            AND (next_period_at, id) > ('1900-01-01 00:00+00'::timestamptz, 0)
          ORDER BY next_period_at, id LIMIT 1
            FOR UPDATE SKIP LOCKED",
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.rollback().await?;
    Ok(plan)
}

/// What [`wait_done`] saw, on the bench's clock.
struct Waited {
    /// When the poller first saw every claim.
    claimed: Instant,
}

/// Polls (every 250 ms) until there are `n` claims, `n` succeeded charge requests and `n` succeeded intents.
async fn wait_done(
    pool: &PgPool,
    n: i64,
    timeout: Duration,
    children: &mut Children,
) -> anyhow::Result<Waited> {
    let deadline = Instant::now() + timeout;
    let mut claimed = None;
    loop {
        children.ensure_running()?;
        let (claims, sent, settled): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM billing_claims),
                    (SELECT count(*) FROM outbound_requests WHERE kind = 'charge' AND status = 'succeeded'),
                    (SELECT count(*) FROM payment_intents WHERE status = 'succeeded')",
        )
        .fetch_one(pool)
        .await?;
        if claims >= n && claimed.is_none() {
            claimed = Some(Instant::now());
        }
        if let Some(claimed) = claimed {
            if sent >= n && settled >= n {
                return Ok(Waited { claimed });
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "after {timeout:?}: {claims} claims, {sent} charges sent, {settled} intents succeeded of {n} \
             (see billing-round-worker.log)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn round_times(pool: &PgPool, t0: f64) -> anyhow::Result<RoundTimes> {
    let (first, last, dispatched, settled): (f64, f64, f64, f64) = sqlx::query_as(
        "SELECT extract(epoch FROM (SELECT min(claimed_at) FROM billing_claims))::float8 - $1,
                extract(epoch FROM (SELECT max(claimed_at) FROM billing_claims))::float8 - $1,
                extract(epoch FROM (SELECT max(updated_at) FROM outbound_requests WHERE kind = 'charge'))::float8 - $1,
                extract(epoch FROM (SELECT max(updated_at) FROM payment_intents))::float8 - $1",
    )
    .bind(t0)
    .fetch_one(pool)
    .await?;
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM billing_claims")
        .fetch_one(pool)
        .await?;
    let round_s = last - first;
    Ok(RoundTimes {
        first_claim_s: first,
        last_claim_s: last,
        round_s,
        claims_per_s: n as f64 / round_s.max(1e-9),
        dispatched_s: dispatched,
        settled_s: settled,
    })
}

async fn database_checks(pool: &PgPool, n: i64, cycle: &str) -> anyhow::Result<Vec<Check>> {
    let (claims, subs, of_cycle, intents): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT subscription_id), count(*) FILTER (WHERE billing_cycle = $1),
                count(DISTINCT intent_id)
           FROM billing_claims",
    )
    .bind(cycle)
    .fetch_one(pool)
    .await?;
    let (all_intents, succeeded): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM payment_intents",
    )
    .fetch_one(pool)
    .await?;
    let (requests, sent, attempts): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'), coalesce(sum(attempts), 0)::int8
           FROM outbound_requests WHERE kind = 'charge'",
    )
    .fetch_one(pool)
    .await?;
    let due: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM subscriptions WHERE status = 'active' AND next_period_at <= now()",
    )
    .fetch_one(pool)
    .await?;
    Ok(vec![
        Check {
            name: "one claim per subscription, for the running cycle".into(),
            pass: claims == n && subs == n && of_cycle == n,
            detail: format!(
                "{claims} claims of {subs} subscriptions, {of_cycle} of cycle {cycle} (want {n})"
            ),
        },
        Check {
            name: "one intent per claim, every one succeeded".into(),
            pass: intents == n && all_intents == n && succeeded == n,
            detail: format!(
                "{intents} claimed intents, {all_intents} intents, {succeeded} succeeded (want {n})"
            ),
        },
        Check {
            name: "one charge request per intent, each sent once".into(),
            pass: requests == n && sent == n && attempts == n,
            detail: format!(
                "{requests} charge requests, {sent} succeeded, {attempts} attempts (want {n})"
            ),
        },
        Check {
            name: "nothing left due".into(),
            pass: due == 0,
            detail: format!("{due} subscriptions due"),
        },
    ])
}

async fn sandbox_checks(
    http: &reqwest::Client,
    sandbox: &str,
    cards: &[(String, String)],
) -> anyhow::Result<Vec<Check>> {
    let report: serde_json::Value = http
        .get(format!("{sandbox}/_sandbox/charges"))
        .send()
        .await?
        .json()
        .await
        .context("the sandbox's charges report")?;
    let stripe = report["providers"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "stripe"))
        .context("the sandbox's charges report has no stripe provider")?;
    let count = |k: &str| stripe[k].as_u64().unwrap_or(0);
    let n = cards.len() as u64;
    let per_card = &stripe["payment_method_charges"];
    let once = cards
        .iter()
        .filter(|(_, pm)| per_card[pm.as_str()].as_u64() == Some(1))
        .count();
    Ok(vec![
        Check {
            name: "the sandbox charged every subscription once".into(),
            pass: count("payment_intents") == n
                && count("charges") == n
                && count("captured_charges") == n,
            detail: format!(
                "{} payment intents, {} charges, {} captured (want {n})",
                count("payment_intents"),
                count("charges"),
                count("captured_charges")
            ),
        },
        Check {
            name: "each saved card charged exactly once".into(),
            pass: once == cards.len(),
            detail: format!("{once} of {} cards charged once", cards.len()),
        },
    ])
}

/// The worker's `billing round` lines that charged something.
fn logged_rounds(log: &Path) -> anyhow::Result<Vec<LoggedRound>> {
    let text = std::fs::read_to_string(log)?;
    Ok(text
        .lines()
        .filter(|l| l.contains("billing round") && !l.contains("failed"))
        .filter_map(|l| {
            let clean = strip_ansi(l);
            let field = |name: &str| -> Option<u64> {
                clean.split_whitespace().find_map(|t| {
                    t.strip_prefix(name)?
                        .strip_prefix('=')?
                        .trim_matches(|c: char| !c.is_ascii_digit())
                        .parse()
                        .ok()
                })
            };
            Some(LoggedRound {
                charged: field("charged")?,
                elapsed_ms: field("elapsed_ms")?,
            })
        })
        .filter(|r| r.charged > 0)
        .collect())
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes `billing-round-report.json` into `dir`.
pub fn write_report(report: &BillingRoundReport, dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("billing-round-report.json");
    std::fs::write(&path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_round_line_is_read_with_or_without_colours() {
        let dir = std::env::temp_dir().join(format!("billing-round-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("w.log");
        std::fs::write(
            &log,
            "2026-12-06T17:00:00Z  INFO hookline_billing::schedule: billing round charged=10000 retried=0 \
             decided_elsewhere=0 canceled_at_period_end=0 not_charged=0 elapsed_ms=41234\n\
             2026-12-06T17:00:01Z  INFO hookline_billing::schedule: billing round \u{1b}[3mcharged\u{1b}[0m\u{1b}[2m=\u{1b}[0m3 \
             \u{1b}[3melapsed_ms\u{1b}[0m\u{1b}[2m=\u{1b}[0m12\n\
             2026-12-06T17:00:02Z  WARN billing round failed; the next one tries again\n",
        )
        .unwrap();
        let rounds = logged_rounds(&log).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(rounds.len(), 2);
        assert_eq!((rounds[0].charged, rounds[0].elapsed_ms), (10000, 41234));
        assert_eq!((rounds[1].charged, rounds[1].elapsed_ms), (3, 12));
    }
}
