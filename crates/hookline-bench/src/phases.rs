//! The benchmark's phases, one function each, in run order (the crate documentation lists them); `run_phases`
//! calls them in turn. Each phase pushes its report row onto [`Bench::phases`] and returns what later phases need
//! (a rate to compare with, a running child).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::baseline;
use crate::checks::{self, AckBook, Check};
use crate::costs::{self, CostModel, Counters};
use crate::env::{self, BenchEnv, ChildProcess};
use crate::gen::{unix_now, EventFactory, PROVIDER};
use crate::load::{self, Target};
use crate::procfs::{CpuUsage, Monitor};
use crate::report::{Baseline, CpuPer1k, PhaseReport};
use crate::stats::Latency;
use crate::{
    baseline_phase, count, edge_phase, pipeline_capacity, progress, settle_relay, wait_count,
    LagSampler, Options, PhaseClock, SETTLED, STORED,
};

/// What every phase shares: the run's inputs, the event factory (phase-tagged, unique event ids) and what the
/// phases produced so far.
pub(crate) struct Bench<'a> {
    pub(crate) opts: &'a Options,
    pub(crate) env: &'a BenchEnv,
    pub(crate) monitor: &'a Monitor,
    pub(crate) factory: EventFactory,
    /// Report rows, in run order.
    pub(crate) phases: Vec<PhaseReport>,
    /// Checks made along the way, appended to those of `checks::verify` at the end.
    pub(crate) extra_checks: Vec<Check>,
}

impl<'a> Bench<'a> {
    /// Nothing measured yet.
    pub(crate) fn new(opts: &'a Options, env: &'a BenchEnv, monitor: &'a Monitor) -> Bench<'a> {
        Bench {
            opts,
            env,
            monitor,
            factory: EventFactory::new(&env.run, opts.body_bytes, opts.seed),
            phases: Vec::new(),
            extra_checks: Vec::new(),
        }
    }
}

/// The running edge (embedded relay on) and what the edge phases load and observe it with, from phase 3 until
/// it is stopped in phase 7.
pub(crate) struct EdgeRun {
    edge: ChildProcess,
    /// Monitoring connections to the run's database: counts, timings, relay lag, the correctness checks.
    pool: PgPool,
    lag: LagSampler,
    target: Target,
    /// Every answer of every edge phase, checked against the database at the end.
    book: AckBook,
}

/// The offered rates of the two pipeline phases and the capacity estimate that bounds the second (all in the
/// settings).
pub(crate) struct PipelineRate {
    /// Requests/s offered.
    pub(crate) rate: f64,
    /// Unique events/s the pipeline was estimated to hold (CPU model).
    pub(crate) capacity: f64,
    /// Requests/s offered by the `pipeline_target` phase: the target's unique events/s, duplicates on top.
    pub(crate) target_rate: f64,
}

/// Phase 1, **Baseline A**: one `webhook_events` row per commit at the load concurrency (pgbench-equivalent), straight
/// against PostgreSQL: what the edge's durable ingest is compared with. Returns its rate (commits/s) and the ids of the
/// rows it stored, which baseline B processes.
pub(crate) async fn baseline_a(bench: &mut Bench<'_>) -> anyhow::Result<(f64, Vec<i64>)> {
    let (opts, env) = (bench.opts, bench.env);
    let dur = opts.duration;
    let conc = opts.concurrency;
    progress(format!(
        "baseline A: one row per commit, {conc} connections, {:?} warm-up + {dur:?}",
        opts.warmup
    ));
    let (a, stored_ids) = baseline::one_row_per_commit(
        &env.baseline_db_url,
        conc as u32,
        &bench.factory,
        opts.warmup,
        dur,
        bench.monitor,
    )
    .await
    .context("baseline A")?;
    let a_rate = a.rate();
    progress(format!("  {a_rate:.0} commits/s"));
    bench.phases.push(baseline_phase(
        "baseline_insert",
        format!("A 1 row/commit c={conc}"),
        "commits",
        &a,
        Baseline::A,
    ));
    Ok((a_rate, stored_ids))
}

/// Phase 2, **Baseline B**: the worker's per-event transaction (`process_event` + `PaymentsHandler`) at the worker's
/// concurrency, on the rows baseline A stored: what the worker's drain rate is compared with. Returns its rate
/// (transactions/s) and checks that every transaction applied.
pub(crate) async fn baseline_b(bench: &mut Bench<'_>, stored_ids: Vec<i64>) -> anyhow::Result<f64> {
    let (opts, env) = (bench.opts, bench.env);
    let cfg = &env.config;
    let wc = env.worker.concurrency;
    progress(format!(
        "baseline B: worker transaction, concurrency {wc}, pool {}, on {} stored events",
        env.worker.db_max_connections,
        stored_ids.len()
    ));
    crate::fresh_checkpoint(&env.baseline_db_url).await;
    let b = baseline::worker_transaction(
        &env.baseline_db_url,
        cfg,
        stored_ids,
        wc,
        env.worker.db_max_connections,
        opts.warmup,
        opts.duration,
        bench.monitor,
    )
    .await
    .context("baseline B")?;
    let b_rate = b.rate();
    progress(format!("  {b_rate:.0} transactions/s"));
    bench.extra_checks.push(Check {
        name: "baseline worker transactions all applied".into(),
        pass: b.errors == 0,
        detail: format!("{} failed or found a marker", b.errors),
    });
    bench.phases.push(baseline_phase(
        "baseline_worker_tx",
        format!("B worker tx c={wc}"),
        "transactions",
        &b,
        Baseline::B,
    ));
    Ok(b_rate)
}

/// Phases 1b and 2b, **Baselines A and B by pgbench** (see [`crate::pgbench`]): the same two baselines driven by
/// PostgreSQL's own load generator, printed beside the Rust-driven ones. Skipped (with a note) when pgbench is
/// not installed; a failure is reported, not fatal.
pub(crate) async fn pgbench_baselines(bench: &mut Bench<'_>) {
    if !crate::pgbench::available() {
        progress("pgbench baselines: pgbench not found (PostgreSQL's client package); skipped");
        return;
    }
    let (opts, env) = (bench.opts, bench.env);
    let dir = opts.out_dir.join("pgbench");
    let runs = [
        (
            "baseline_insert_pgbench",
            "A 1 row/commit (pgbench)",
            "commits",
            opts.concurrency,
            Baseline::A,
        ),
        (
            "baseline_worker_tx_pgbench",
            "B worker tx (pgbench)",
            "transactions",
            env.worker.concurrency,
            Baseline::B,
        ),
    ];
    for (key, label, unit, clients, baseline) in runs {
        progress(format!("{label}: {clients} clients, {:?}", opts.duration));
        crate::fresh_checkpoint(&env.baseline_db_url).await;
        let before = counters_before(&env.baseline_db_url).await;
        let cpu0 = bench.monitor.snapshot();
        let started = std::time::Instant::now();
        let (url, dur, dir) = (env.baseline_db_url.clone(), opts.duration, dir.clone());
        let result = tokio::task::spawn_blocking(move || match baseline {
            Baseline::A => crate::pgbench::baseline_a(&url, clients, dur, &dir),
            Baseline::B => crate::pgbench::baseline_b(&url, clients, dur, &dir),
        })
        .await;
        let cpu1 = bench.monitor.snapshot();
        match result {
            Ok(Ok(r)) => {
                progress(format!("  {:.0} {unit}/s", r.tps));
                let m = crate::baseline::Measured {
                    ops: r.transactions,
                    elapsed: started.elapsed(),
                    latency: None,
                    errors: r.failed,
                    // pgbench is this process's child, reaped before `cpu1`: its CPU is the load generator's.
                    cpu: bench.monitor.usage_with_reaped_children(&cpu0, &cpu1),
                    exhausted: false,
                    started_unix: 0.0,
                };
                let mut row = baseline_phase(key, label.to_string(), unit, &m, baseline);
                row.throughput_per_s = r.tps;
                row.costs = costs_after(&env.baseline_db_url, before, m.ops, &m.cpu).await;
                bench.phases.push(row);
            }
            Ok(Err(e)) => progress(format!("  {label} failed: {e:#}")),
            Err(e) => progress(format!("  {label} failed: {e}")),
        }
    }
}

/// Starts the real `hookline-edge` binary, with its embedded relay (the worker is not running: the queue fills up
/// for phase 5), waits until it is ready, and opens what the edge phases need: the monitoring pool, the relay lag
/// sampler, the HTTP target and the book of answers.
pub(crate) async fn start_edge(bench: &Bench<'_>) -> anyhow::Result<EdgeRun> {
    let (opts, env) = (bench.opts, bench.env);
    progress("starting hookline-edge");
    let mut edge = ChildProcess::spawn(
        &opts.bin_dir,
        "hookline-edge",
        &env.config_path,
        &opts.out_dir.join("edge.log"),
    )?;
    bench.monitor.set_edge(Some(edge.pid()));
    env::wait_ready(&mut edge, env.edge_addr).await?;
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .connect(&env.db_url)
        .await
        .context("connect the monitoring pool")?;
    let lag = LagSampler::start(pool.clone());
    let target = Target::new(env.edge_addr, PROVIDER)?;
    Ok(EdgeRun {
        edge,
        pool,
        lag,
        target,
        book: AckBook::default(),
    })
}

/// Phase 3, **Edge max**: the edge's highest acknowledged rate under a closed loop of `concurrency` connections
/// sending signed, unique ~1 KB `payment_intent.succeeded` events with 10 % duplicates, after an unmeasured warm-up
/// that sizes the prepared input (the embedded relay publishes meanwhile; the worker is not running, so the queue
/// fills up for phase 5). Compared with baseline A; returns the max (acks/s), which the latency sweep offers
/// fractions of.
pub(crate) async fn edge_max(
    bench: &mut Bench<'_>,
    edge: &mut EdgeRun,
    a_rate: f64,
) -> anyhow::Result<f64> {
    let (opts, monitor) = (bench.opts, bench.monitor);
    let dur = opts.duration;
    let dup = opts.duplicate_share;
    let conc = opts.concurrency;
    progress(format!(
        "edge warm-up: closed loop, {conc} connections, {:?}",
        opts.warmup
    ));
    let warm_plan = Arc::new(bench.factory.plan("wu", opts.cap(20_000), dup)?);
    let warm = load::closed_loop(&edge.target, warm_plan.clone(), conc, opts.warmup).await?;
    edge.book.record(&warm_plan, &warm);
    let estimate = warm.ack_rate().max(50.0);

    settle_relay(&edge.pool, &mut edge.edge).await?;
    // Enough prepared deliveries for 1.5× the warm-up rate; if the edge is faster, the phase ends early (*).
    let n = opts.cap((estimate * dur.as_secs_f64() * 1.5) as usize + conc * 10);
    let plan = Arc::new(bench.factory.plan("mx", n, dup)?);
    progress(format!(
        "edge max: closed loop, {conc} connections, {dur:?} ({n} prepared deliveries)"
    ));
    crate::fresh_checkpoint(&bench.env.db_url).await;
    // The warm-up's writes may still be unreported: wait until they are, so that they are not this phase's.
    let before = reported(costs::settled(&bench.env.db_url).await);
    let clock = PhaseClock::begin(monitor);
    let run = load::closed_loop(&edge.target, plan.clone(), conc, dur).await?;
    let (cpu, rss, end) = clock.end(monitor);
    edge.book.record(&plan, &run);
    let mut max_phase = edge_phase(
        "edge_max".into(),
        format!("edge max c={conc}"),
        None,
        &run,
        cpu,
        rss,
        edge.lag.window(clock.start, end),
        a_rate,
    );
    max_phase.costs = edge_costs(bench.env, edge, before, &max_phase).await?;
    let edge_max = max_phase.throughput_per_s;
    progress(format!("  {edge_max:.0} acks/s"));
    bench.phases.push(max_phase);
    Ok(edge_max)
}

/// Phase 4, **Latency sweep**: open-loop load at each `sweep` fraction of the edge's max, latency counted from the
/// scheduled send time (so a slow edge cannot hide queueing by slowing the client down), with the relay lag and CPU of
/// each point.
pub(crate) async fn latency_sweep(
    bench: &mut Bench<'_>,
    edge: &mut EdgeRun,
    edge_max: f64,
    a_rate: f64,
) -> anyhow::Result<()> {
    let (opts, monitor) = (bench.opts, bench.monitor);
    let dup = opts.duplicate_share;
    let olc = opts.open_loop_connections();
    for &fraction in &opts.sweep {
        let rate = (edge_max * fraction).max(1.0);
        let n = opts.cap((rate * opts.sweep_duration.as_secs_f64()).ceil() as usize);
        let pct = (fraction * 100.0).round() as u32;
        progress(format!(
            "edge open loop at {pct} % of max: {rate:.0}/s, {n} deliveries, {olc} connections"
        ));
        // Each point starts with the relay caught up, so a backlog left by the previous (heavier) phase does not
        // show up as this phase's relay lag or CPU.
        settle_relay(&edge.pool, &mut edge.edge).await?;
        let plan = Arc::new(bench.factory.plan(&format!("o{pct}"), n, dup)?);
        crate::fresh_checkpoint(&bench.env.db_url).await;
        let before = counters_before(&bench.env.db_url).await;
        let clock = PhaseClock::begin(monitor);
        let run = load::open_loop(&edge.target, plan.clone(), rate, olc).await?;
        let (cpu, rss, end) = clock.end(monitor);
        edge.book.record(&plan, &run);
        let mut p = edge_phase(
            format!("edge_open_{pct}"),
            format!("edge open {pct}% of max"),
            Some(rate),
            &run,
            cpu,
            rss,
            edge.lag.window(clock.start, end),
            a_rate,
        );
        p.costs = edge_costs(bench.env, edge, before, &p).await?;
        if let Some(l) = &p.latency {
            progress(format!(
                "  p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
                l.p50_ms, l.p99_ms, l.p999_ms
            ));
        }
        bench.phases.push(p);
        edge.edge.ensure_running()?;
    }
    Ok(())
}

/// Phase 5, **Worker drain**: once the relay has published every stored event, `hookline-worker` starts on the whole
/// backlog; its rate, from the first to the last processed marker (its own start-up is not draining), is compared with
/// baseline B. Returns the running worker (it stays on for the pipeline) and the drain rate (events/s).
pub(crate) async fn worker_drain(
    bench: &mut Bench<'_>,
    edge: &mut EdgeRun,
    b_rate: f64,
) -> anyhow::Result<(ChildProcess, f64)> {
    let (opts, env, monitor) = (bench.opts, bench.env, bench.monitor);
    let pool = &edge.pool;
    progress("waiting for the relay to publish every stored event");
    settle_relay(pool, &mut edge.edge).await?;
    let backlog = count(pool, STORED).await?;
    let depth = env.queue_depth(&env.topology.payments_queue).await?;
    progress(format!(
        "worker drain: {backlog} stored events, {depth} messages on {}",
        env.topology.payments_queue
    ));
    crate::fresh_checkpoint(&env.db_url).await;
    let before = counters_before(&env.db_url).await;
    let clock = PhaseClock::begin(monitor);
    let spawned_unix = unix_now();
    let mut worker = ChildProcess::spawn(
        &opts.bin_dir,
        "hookline-worker",
        &env.config_path,
        &opts.out_dir.join("worker.log"),
    )?;
    monitor.set_worker(Some(worker.pid()));
    // Generous: a fifth of baseline B's rate, and never less than two minutes.
    let drain_timeout =
        Duration::from_secs_f64((backlog as f64 / (b_rate * 0.2).max(1.0)).max(120.0));
    let settled = wait_count(pool, SETTLED, backlog, drain_timeout, Some(&mut worker)).await?;
    let (cpu, rss, drain_end) = clock.end(monitor);
    anyhow::ensure!(
        settled == backlog,
        "the worker settled {settled} of {backlog} events within {drain_timeout:?}"
    );
    let (n, first, last): (i64, Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT count(*), extract(epoch FROM min(processed_at))::float8,
                extract(epoch FROM max(processed_at))::float8
         FROM processed_events WHERE consumer = 'payments'",
    )
    .fetch_one(pool)
    .await
    .context("drain timing")?;
    // From the first to the last marker: the worker's own start-up (connect, declare) is not draining.
    let span = match (first, last) {
        (Some(f), Some(l)) if l > f => l - f,
        _ => (last.unwrap_or(spawned_unix) - spawned_unix).max(1e-3),
    };
    let drain_rate = n as f64 / span;
    progress(format!(
        "  {drain_rate:.0} events/s ({n} in {span:.1} s; {:.1} s after start)",
        last.unwrap_or(spawned_unix) - spawned_unix
    ));
    bench.phases.push(PhaseReport {
        key: "worker_drain".into(),
        label: format!("worker drain ({backlog} backlog)"),
        offered_per_s: None,
        throughput_per_s: drain_rate,
        unit: "events",
        stored_per_s: None,
        baseline: Some(Baseline::B),
        ratio: Some(drain_rate / b_rate.max(1e-9)),
        events: n as u64,
        duration_s: span,
        latency: None,
        service_latency: None,
        e2e_lag: None,
        relay_lag_max_ms: None,
        errors: (backlog - n).max(0) as u64,
        exhausted: false,
        cpu_per_1k: CpuPer1k::new(&cpu, n as u64),
        cpu,
        rss,
        pg_writes: edge.lag.window(clock.start, drain_end).pg_writes,
        costs: costs_after(&env.db_url, before, n as u64, &cpu).await,
        ratio_sqlx: None,
    });
    Ok((worker, drain_rate))
}

/// The pipeline's latency target's rate: unique events per second, as a share of baseline A.
pub(crate) const PIPELINE_TARGET_SHARE: f64 = 0.3;

/// The offered rates of the two pipeline phases: the target's rate, and the default (or `--pipeline-rate`) rate
/// that looks for the ceiling, bounded by the capacity estimate.
pub(crate) fn pipeline_rates(
    bench: &Bench<'_>,
    a_rate: f64,
    drain_rate: f64,
) -> anyhow::Result<PipelineRate> {
    let opts = bench.opts;
    let dup = opts.duplicate_share;
    let drain_phase = bench
        .phases
        .iter()
        .find(|p| p.key == "worker_drain")
        .context("drain phase")?;
    let capacity = pipeline_capacity(&bench.phases, drain_phase, dup).unwrap_or(drain_rate);
    let rate = opts
        .pipeline_rate
        .unwrap_or_else(|| (0.6 * a_rate).min(0.9 * capacity / (1.0 - dup)))
        .max(1.0);
    progress(format!(
        "  pipeline capacity estimate (CPU model): {capacity:.0} events/s"
    ));
    Ok(PipelineRate {
        rate,
        capacity,
        target_rate: (PIPELINE_TARGET_SHARE * a_rate / (1.0 - dup)).max(1.0),
    })
}

/// Phase 6, **Pipeline**: edge + relay + worker at a sustained offered rate, run twice. `pipeline_target` offers
/// the target's rate (0.3 × baseline A unique events/s, duplicates on top) and answers the target's question:
/// does the pipeline hold that rate, and with what end-to-end lag. `pipeline` offers more (by default 0.6 ×
/// baseline A bounded by 0.9 × the CPU-model capacity) and measures the ceiling: what it processes when offered
/// about as much as it can take — its lag there says how close to the ceiling the rate was, not what a user sees
/// at a rate the pipeline holds. Each reports the events/s processed during the load after a ramp (compared with
/// baseline A), the end-to-end lag (`processed_at − received_at`) and the relay lag, and waits until the worker
/// has settled every stored event.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn pipeline(
    bench: &mut Bench<'_>,
    edge: &mut EdgeRun,
    worker: &mut ChildProcess,
    key: &str,
    tag: &str,
    rate: f64,
    a_rate: f64,
) -> anyhow::Result<()> {
    let (opts, monitor) = (bench.opts, bench.monitor);
    let dur = opts.duration;
    let dup = opts.duplicate_share;
    let olc = opts.open_loop_connections();
    let pool = &edge.pool;
    let n = opts.cap((rate * dur.as_secs_f64()).ceil() as usize);
    progress(format!(
        "{key}: edge + relay + worker, open loop at {rate:.0}/s ({:.0} unique events/s), {n} deliveries",
        rate * (1.0 - dup)
    ));
    // Each run starts with the relay caught up, as the sweep points do.
    settle_relay(pool, &mut edge.edge).await?;
    let plan = Arc::new(bench.factory.plan(tag, n, dup)?);
    crate::fresh_checkpoint(&bench.env.db_url).await;
    let before = counters_before(&bench.env.db_url).await;
    let clock = PhaseClock::begin(monitor);
    let load_start = unix_now();
    let run = load::open_loop(&edge.target, plan.clone(), rate, olc).await?;
    let load_end = unix_now();
    let (cpu, rss, end) = clock.end(monitor);
    edge.book.record(&plan, &run);
    let lag = edge.lag.window(clock.start, end);
    let stored_now = count(pool, STORED).await?;
    let settled = wait_count(
        pool,
        SETTLED,
        stored_now,
        Duration::from_secs(120),
        Some(worker),
    )
    .await?;
    anyhow::ensure!(
        settled == stored_now,
        "after the {key} phase the worker settled {settled} of {stored_now} events within 120 s"
    );
    let prefix = bench.factory.event_prefix(tag);
    let lags: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM p.processed_at - e.received_at)::float8
         FROM webhook_events e JOIN processed_events p ON p.consumer = 'payments' AND p.event_id = e.id
         WHERE starts_with(e.provider_event_id, $1)",
    )
    .bind(&prefix)
    .fetch_all(pool)
    .await
    .context("end-to-end lag")?;
    // Sustained: processed during the load, after a ramp (the first events need one lag to get through).
    let ramp = (dur.as_secs_f64() / 5.0).min(1.0);
    let (w0, w1) = (load_start + ramp, load_end);
    let processed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM webhook_events e
         JOIN processed_events p ON p.consumer = 'payments' AND p.event_id = e.id
         WHERE starts_with(e.provider_event_id, $1)
           AND p.processed_at >= to_timestamp($2) AND p.processed_at < to_timestamp($3)",
    )
    .bind(&prefix)
    .bind(w0)
    .bind(w1)
    .fetch_one(pool)
    .await
    .context("sustained throughput")?;
    let sustained = processed as f64 / (w1 - w0).max(1e-3);
    let mut pipe = edge_phase(
        key.into(),
        format!("{key} @{rate:.0}/s"),
        Some(rate),
        &run,
        cpu,
        rss,
        lag,
        a_rate,
    );
    pipe.unit = "events";
    pipe.throughput_per_s = sustained;
    pipe.ratio = Some(sustained / a_rate.max(1e-9));
    pipe.e2e_lag = Latency::from_secs(&lags);
    pipe.cpu_per_1k = CpuPer1k::new(&cpu, pipe.events);
    pipe.costs = costs_after(&bench.env.db_url, before, stored_in(&pipe), &cpu).await;
    progress(format!(
        "  {sustained:.0} events/s processed; end-to-end p99 {} ms; relay lag max {} ms",
        pipe.e2e_lag
            .map_or("-".into(), |l| format!("{:.1}", l.p99_ms)),
        lag.relay_lag_max_ms
            .map_or("-".into(), |l| format!("{l:.0}"))
    ));
    bench.phases.push(pipe);
    Ok(())
}

/// After the pipeline everything is processed: the queue must be empty too (nothing left to deliver twice later),
/// and so must the dead-letter queue. Waits up to 10 s for the payments queue, then records the check.
pub(crate) async fn check_queues_empty(bench: &mut Bench<'_>) -> anyhow::Result<()> {
    let env = bench.env;
    let mut depth = Err(anyhow::anyhow!("not read"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        // A broker slow to accept one more connection (seen with hundreds of leftover test queues) is asked
        // again: a run's whole report must not be lost to it.
        depth = env.queue_depth(&env.topology.payments_queue).await;
        if matches!(depth, Ok(0)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dlq = env.queue_depth(&env.topology.dead_letter_queue).await;
    let (pass, detail) = match (depth, dlq) {
        (Ok(d), Ok(q)) => (
            d == 0 && q == 0,
            format!("{d} on the payments queue, {q} on the dead-letter queue"),
        ),
        (d, q) => (
            false,
            format!(
                "could not read the queues: {}",
                [d.err(), q.err()]
                    .into_iter()
                    .flatten()
                    .map(|e| format!("{e:#}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
    };
    bench.extra_checks.push(Check {
        name: "queues empty after the drain".into(),
        pass,
        detail,
    });
    Ok(())
}

/// Phase 7, **Correctness**: stops the children (by pid), then checks that every acknowledged event was processed once,
/// with no duplicate posting and a balanced ledger (`checks::verify`), followed by the checks made along the way. A
/// benchmark that got faster by losing or double-applying events must fail, not win.
pub(crate) async fn stop_and_check(
    bench: &mut Bench<'_>,
    edge: EdgeRun,
    worker: ChildProcess,
) -> anyhow::Result<Vec<Check>> {
    let monitor = bench.monitor;
    let EdgeRun {
        edge,
        pool,
        lag,
        book,
        ..
    } = edge;
    monitor.read_peaks();
    drop(lag);
    worker.kill().await?;
    monitor.set_worker(None);
    edge.kill().await?;
    monitor.set_edge(None);
    progress("checking correctness");
    let mut checks = checks::verify(&pool, &book).await?;
    checks.append(&mut bench.extra_checks);
    pool.close().await;
    Ok(checks)
}

/// A reading of the counters, or `None` after reporting why not: without them the phase runs without its cost
/// model.
fn reported(read: anyhow::Result<Counters>) -> Option<Counters> {
    read.map_err(|e| progress(format!("  cost counters unavailable: {e:#}")))
        .ok()
}

/// Counters before a phase (see [`reported`]).
async fn counters_before(db_url: &str) -> Option<Counters> {
    reported(Counters::read(db_url).await)
}

/// The phase's cost per event, read once every backend has reported what the phase caused.
async fn costs_after(
    db_url: &str,
    before: Option<Counters>,
    events: u64,
    cpu: &CpuUsage,
) -> Option<CostModel> {
    let before = before?;
    let after = reported(costs::settled(db_url).await)?;
    Some(before.per_event(&after, events, cpu.postgres_s, cpu.rabbitmq_s))
}

/// Unique events an edge or pipeline phase stored (its acknowledgements minus duplicates).
fn stored_in(p: &PhaseReport) -> u64 {
    (p.stored_per_s.unwrap_or(0.0) * p.duration_s).round() as u64
}

/// An edge phase's cost per unique event stored, the relay's publishing and deleting included (it is waited for).
async fn edge_costs(
    env: &BenchEnv,
    edge: &mut EdgeRun,
    before: Option<Counters>,
    p: &PhaseReport,
) -> anyhow::Result<Option<CostModel>> {
    settle_relay(&edge.pool, &mut edge.edge).await?;
    Ok(costs_after(&env.db_url, before, stored_in(p), &p.cpu).await)
}
