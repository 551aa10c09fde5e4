//! `hookline-bench scale`: two edges and two workers against the same database and broker.
//!
//! What it shows: that the processes scale out without coordination — any edge may store any event (the database's
//! UNIQUE key decides, also for a duplicate that arrives at the *other* edge), any worker may apply any event (the
//! processed marker decides) — and how the work splits between them. Both edges take a closed loop of half the
//! connections at once while both workers drain; then a tenth of what edge 1 acknowledged is sent again through
//! edge 2 (a provider retry landing behind another node of the load balancer). The run passes only if every
//! acknowledged event was processed exactly once (`checks::verify`) and both queues end empty.
//!
//! On the 2-core development machine the throughput split is informative, not a speed-up: four processes share
//! the cores with PostgreSQL, RabbitMQ and the load generator. The correctness is not informative: it must hold.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use sqlx::postgres::PgPoolOptions;

use crate::checks::{self, AckBook, Check};
use crate::env::{self, BenchEnv, ChildProcess};
use crate::gen::{unix_now, EventFactory, Plan, PROVIDER};
use crate::load::{self, Target};
use crate::{progress, wait_count, Options, SETTLED, STORED};

/// One edge's share of the load.
#[derive(Debug, Clone, Serialize)]
pub struct EdgeShare {
    /// Address it listened on.
    pub addr: String,
    /// Requests acknowledged (200, duplicates included) during the closed loop.
    pub acked: u64,
    /// Acknowledged requests per second during the closed loop.
    pub acked_per_s: f64,
}

/// One worker's share of the processing.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerShare {
    /// Where its `/metrics` were read.
    pub metrics_addr: String,
    /// Deliveries it settled (`hookline_worker_deliveries_total`, every outcome).
    pub deliveries: u64,
    /// Its share of all settled deliveries.
    pub share: f64,
}

/// What `hookline-bench scale` measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// Seconds of closed-loop load.
    pub duration_s: f64,
    /// Connections per edge.
    pub connections_per_edge: usize,
    /// The two edges.
    pub edges: Vec<EdgeShare>,
    /// The two workers.
    pub workers: Vec<WorkerShare>,
    /// Events stored (unique).
    pub stored: i64,
    /// Stored events per second from the start of the load until the last processed marker (the whole pipeline,
    /// both halves together).
    pub pipeline_events_per_s: f64,
    /// Seconds from the end of the load until every stored event was processed.
    pub drain_after_load_s: f64,
    /// Exactly-once and zero-loss checks.
    pub checks: Vec<Check>,
    /// Whether every check passed.
    pub pass: bool,
}

/// Runs the scale-out measurement; always removes its database and queues.
pub async fn run(opts: &Options) -> anyhow::Result<ScaleReport> {
    let env = BenchEnv::new(opts)?;
    progress(format!(
        "scale run {}: database {}, RabbitMQ prefix {}",
        env.run, env.db_name, env.config.amqp.prefix
    ));
    let outcome = tokio::select! {
        r = run_inner(opts, &env) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    for p in env.teardown().await {
        progress(format!("cleanup: {p}"));
    }
    outcome
}

/// A copy of the run's configuration with another edge address and a worker metrics address.
fn variant(
    base: &Path,
    out: &Path,
    name: &str,
    edge: SocketAddr,
    edge_base: SocketAddr,
    worker_metrics: SocketAddr,
) -> anyhow::Result<PathBuf> {
    let toml = std::fs::read_to_string(base).with_context(|| format!("read {}", base.display()))?;
    let from = format!("listen = \"{edge_base}\"");
    anyhow::ensure!(
        toml.contains(&from),
        "the generated configuration has no `{from}`"
    );
    let toml = format!(
        "{}\n[worker]\nlisten = \"{worker_metrics}\"\n",
        toml.replacen(&from, &format!("listen = \"{edge}\""), 1)
    );
    let path = out.join(format!("hookline-bench-{name}.toml"));
    std::fs::write(&path, toml).with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    l.local_addr().context("local address")
}

/// Settled deliveries of the worker serving `/metrics` on `addr` (sum over consumers and outcomes).
async fn worker_deliveries(client: &reqwest::Client, addr: SocketAddr) -> anyhow::Result<u64> {
    let text = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .with_context(|| format!("GET http://{addr}/metrics"))?
        .text()
        .await
        .context("read metrics")?;
    let metric = hookline_consumer::consumer::metric::DELIVERIES;
    Ok(text
        .lines()
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with('{'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

async fn run_inner(opts: &Options, env: &BenchEnv) -> anyhow::Result<ScaleReport> {
    env.provision().await?;
    let out = &opts.out_dir;
    let (edge2_addr, m1, m2) = (free_addr()?, free_addr()?, free_addr()?);
    let cfg_edge2 = variant(
        &env.config_path,
        out,
        "edge2",
        edge2_addr,
        env.edge_addr,
        m2,
    )?;
    let cfg_worker1 = variant(
        &env.config_path,
        out,
        "worker1",
        env.edge_addr,
        env.edge_addr,
        m1,
    )?;
    let edge_addrs = [env.edge_addr, edge2_addr];
    let mut children: Vec<ChildProcess> = Vec::new();
    for (i, cfg) in [&env.config_path, &cfg_edge2].into_iter().enumerate() {
        let log = out.join(format!("scale-edge{}.log", i + 1));
        let mut edge = ChildProcess::spawn(&opts.bin_dir, "hookline-edge", cfg, &log)?;
        env::wait_ready(&mut edge, edge_addrs[i]).await?;
        children.push(edge);
    }
    for (i, cfg) in [&cfg_worker1, &cfg_edge2].into_iter().enumerate() {
        let log = out.join(format!("scale-worker{}.log", i + 1));
        children.push(ChildProcess::spawn(
            &opts.bin_dir,
            "hookline-worker",
            cfg,
            &log,
        )?);
    }
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&env.db_url)
        .await
        .context("connect the monitoring pool")?;
    let mut factory = EventFactory::new(&env.run, opts.body_bytes, opts.seed);
    let conc = (opts.concurrency / 2).max(1);
    let dur = opts.duration;
    // Sized for a fast machine; the loop stops at `dur` whatever is left.
    let n = opts.cap(30_000 + (dur.as_secs_f64() * 3_000.0) as usize);
    let plans: Vec<Arc<Plan>> = vec![
        Arc::new(factory.plan("s1", n, opts.duplicate_share)?),
        Arc::new(factory.plan("s2", n, opts.duplicate_share)?),
    ];
    progress(format!(
        "scale: 2 edges × {conc} connections (closed loop, {dur:?}), 2 workers draining meanwhile"
    ));
    let targets = [
        Target::new(edge_addrs[0], PROVIDER)?,
        Target::new(edge_addrs[1], PROVIDER)?,
    ];
    let load_start = unix_now();
    let started = Instant::now();
    let (r1, r2) = tokio::join!(
        load::closed_loop(&targets[0], plans[0].clone(), conc, dur),
        load::closed_loop(&targets[1], plans[1].clone(), conc, dur),
    );
    let runs = [r1?, r2?];
    let load_s = started.elapsed().as_secs_f64();
    let mut book = AckBook::default();
    let mut edges = Vec::new();
    for (i, (plan, run)) in plans.iter().zip(&runs).enumerate() {
        book.record(plan, run);
        let acked = run
            .samples
            .iter()
            .filter(|s| s.answer.acknowledged())
            .count() as u64;
        edges.push(EdgeShare {
            addr: edge_addrs[i].to_string(),
            acked,
            acked_per_s: acked as f64 / run.elapsed.as_secs_f64().max(1e-3),
        });
    }
    // A provider retry behind the other node of the load balancer: a tenth of edge 1's acknowledged deliveries
    // again through edge 2. Each must be answered as a duplicate of the event edge 1 stored.
    let mut again = Plan::default();
    for s in runs[0]
        .samples
        .iter()
        .filter(|s| s.answer.acknowledged())
        .step_by(10)
    {
        if let Some(d) = plans[0].deliveries.get(s.index as usize) {
            let mut d = d.clone();
            d.duplicate = true;
            again.deliveries.push(d);
        }
    }
    let again = Arc::new(again);
    let cross =
        load::closed_loop(&targets[1], again.clone(), conc, Duration::from_secs(60)).await?;
    book.record(&again, &cross);
    let cross_stored = cross
        .samples
        .iter()
        .filter(|s| matches!(s.answer, load::Answer::Stored(_)))
        .count();
    progress(format!(
        "  edges acknowledged {} + {} requests; {} resent through the other edge ({} stored anew)",
        edges[0].acked,
        edges[1].acked,
        again.len(),
        cross_stored
    ));
    let load_end = Instant::now();
    let stored = crate::count(&pool, STORED).await?;
    let settled = wait_count(&pool, SETTLED, stored, Duration::from_secs(300), None).await?;
    let drain_after_load_s = load_end.elapsed().as_secs_f64();
    anyhow::ensure!(
        settled == stored,
        "the workers settled {settled} of {stored} events within 300 s"
    );
    let last: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(processed_at))::float8 FROM processed_events WHERE consumer = 'payments'",
    )
    .fetch_one(&pool)
    .await
    .context("last marker")?;
    let span = (last.unwrap_or(load_start) - load_start).max(1e-3);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .context("metrics client")?;
    let counts = [
        worker_deliveries(&client, m1).await?,
        worker_deliveries(&client, m2).await?,
    ];
    let total = (counts[0] + counts[1]).max(1) as f64;
    let workers = [m1, m2]
        .iter()
        .zip(counts)
        .map(|(a, c)| WorkerShare {
            metrics_addr: a.to_string(),
            deliveries: c,
            share: c as f64 / total,
        })
        .collect();
    // Both queues empty: nothing left to deliver twice later.
    let depth = env.queue_depth(&env.topology.payments_queue).await?;
    let dlq = env.queue_depth(&env.topology.dead_letter_queue).await?;
    for c in children {
        c.kill().await?;
    }
    let mut checks = checks::verify(&pool, &book).await?;
    checks.push(Check {
        name: "a duplicate arriving at the other edge is not stored again".into(),
        pass: cross_stored == 0,
        detail: format!(
            "{} resent through edge 2, {cross_stored} answered as newly stored",
            again.len()
        ),
    });
    checks.push(Check {
        name: "queues empty after the drain".into(),
        pass: depth == 0 && dlq == 0,
        detail: format!("{depth} on the payments queue, {dlq} on the dead-letter queue"),
    });
    pool.close().await;
    let pass = checks.iter().all(|c| c.pass);
    Ok(ScaleReport {
        duration_s: load_s,
        connections_per_edge: conc,
        edges,
        workers,
        stored,
        pipeline_events_per_s: stored as f64 / span,
        drain_after_load_s,
        checks,
        pass,
    })
}

/// The report as text.
pub fn render(r: &ScaleReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "two edges and two workers, {} connections per edge, {:.1} s of closed-loop load\n",
        r.connections_per_edge, r.duration_s
    ));
    for (i, e) in r.edges.iter().enumerate() {
        s.push_str(&format!(
            "  edge {} ({}): {} acknowledged, {:.0}/s\n",
            i + 1,
            e.addr,
            e.acked,
            e.acked_per_s
        ));
    }
    for (i, w) in r.workers.iter().enumerate() {
        s.push_str(&format!(
            "  worker {}: {} deliveries settled ({:.0} %)\n",
            i + 1,
            w.deliveries,
            w.share * 100.0
        ));
    }
    s.push_str(&format!(
        "  {} events stored; pipeline {:.0} events/s (load start to last marker); drained {:.1} s after the load\n",
        r.stored, r.pipeline_events_per_s, r.drain_after_load_s
    ));
    s.push_str(&format!(
        "correctness: {}\n",
        if r.pass { "PASS" } else { "FAIL" }
    ));
    for c in &r.checks {
        s.push_str(&format!(
            "  {}  {:<70} {}\n",
            if c.pass { "PASS" } else { "FAIL" },
            c.name,
            c.detail
        ));
    }
    s
}

/// Writes `scale.txt` and `scale.json` into `dir`.
pub fn write_report(r: &ScaleReport, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let txt = dir.join("scale.txt");
    std::fs::write(&txt, render(r)).with_context(|| format!("write {}", txt.display()))?;
    let json = dir.join("scale.json");
    std::fs::write(
        &json,
        serde_json::to_vec_pretty(r).context("encode the report")?,
    )
    .with_context(|| format!("write {}", json.display()))?;
    Ok(vec![txt, json])
}
