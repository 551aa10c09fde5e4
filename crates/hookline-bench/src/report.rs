//! The run's result: one table on stdout, the same data as JSON, and a hand-written SVG chart of latency
//! against offered load.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::checks::Check;
use crate::costs::CostModel;
use crate::procfs::{CpuUsage, RssPeaks};
use crate::stats::Latency;

/// Which baseline a throughput is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Baseline {
    /// A: one `webhook_events` row per commit, at the edge's load concurrency.
    A,
    /// B: the worker's per-event transaction, at the worker's concurrency.
    B,
}

/// CPU seconds per 1,000 events of the phase, per component.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuPer1k {
    /// Edge (HTTP + embedded relay).
    pub edge: Option<f64>,
    /// Worker.
    pub worker: Option<f64>,
    /// PostgreSQL.
    pub postgres: f64,
    /// RabbitMQ.
    pub rabbitmq: f64,
    /// The benchmark process (load generator or baseline client).
    pub bench: f64,
    /// Everything else the machine ran meanwhile (should be near zero on an idle machine).
    pub other: f64,
}

impl CpuPer1k {
    /// Divides the CPU used by `events / 1000`.
    pub fn new(cpu: &CpuUsage, events: u64) -> CpuPer1k {
        let per = |s: f64| s * 1000.0 / (events.max(1) as f64);
        CpuPer1k {
            edge: cpu.edge_s.map(per),
            worker: cpu.worker_s.map(per),
            postgres: per(cpu.postgres_s),
            rabbitmq: per(cpu.rabbitmq_s),
            bench: per(cpu.bench_s),
            other: per(cpu.other_s),
        }
    }
}

/// One measured phase (one row of the table).
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    /// Stable key (`baseline_insert`, `edge_max`, `edge_open_50`, `worker_drain`, `pipeline`, …).
    pub key: String,
    /// Label printed in the table.
    pub label: String,
    /// Offered rate for open-loop phases (requests/s).
    pub offered_per_s: Option<f64>,
    /// Measured throughput (see `unit`).
    pub throughput_per_s: f64,
    /// What is counted: `commits`, `acks` (200 answers, duplicates included) or `events` (unique, processed).
    pub unit: &'static str,
    /// Unique events stored per second, for edge phases (acks minus duplicates).
    pub stored_per_s: Option<f64>,
    /// The baseline the throughput is compared with.
    pub baseline: Option<Baseline>,
    /// `throughput / baseline throughput`, the baseline driven by pgbench when it ran (else by sqlx).
    pub ratio: Option<f64>,
    /// `throughput / baseline throughput`, the baseline driven by this benchmark through sqlx (30–45 % slower
    /// than pgbench on the same database: the second, flattering column).
    pub ratio_sqlx: Option<f64>,
    /// Count behind the throughput.
    pub events: u64,
    /// Seconds the count was taken over.
    pub duration_s: f64,
    /// Acknowledgement latency (open loop: from the scheduled send), or transaction latency for baselines.
    pub latency: Option<Latency>,
    /// Open loop only: from the actual send (without the client-side wait).
    pub service_latency: Option<Latency>,
    /// Pipeline only: `processed_events.processed_at − webhook_events.received_at`.
    pub e2e_lag: Option<Latency>,
    /// Largest age of the oldest unpublished event, sampled every 100 ms during the phase.
    pub relay_lag_max_ms: Option<f64>,
    /// Requests answered neither 200 nor at all, or failed transactions.
    pub errors: u64,
    /// The phase ended early because its prepared input ran out.
    pub exhausted: bool,
    /// CPU used during the phase.
    pub cpu: CpuUsage,
    /// CPU seconds per 1,000 events.
    pub cpu_per_1k: CpuPer1k,
    /// Peak RSS of the children during the phase.
    pub rss: RssPeaks,
    /// PostgreSQL's checkpoints and backend writes during the phase (edge, drain and pipeline phases).
    pub pg_writes: Option<PgWrites>,
    /// The phase's physical cost per event: rows written per table, WAL, CPU, AMQP (see [`crate::costs`]).
    pub costs: Option<CostModel>,
}

/// PostgreSQL's writes of dirty pages during a phase, from `pg_stat_bgwriter`. A checkpoint (every
/// `checkpoint_timeout`, or sooner when `max_wal_size` of WAL was written) flushes every dirty page while the
/// phase runs; backends that write pages themselves (`buffers_backend`) found no clean buffer — `shared_buffers`
/// too small for the working set. Either shows up as latency the product's code did not cause.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PgWrites {
    /// Checkpoints started during the phase.
    pub checkpoints: u64,
    /// Buffers written by backends themselves.
    pub backend_writes: u64,
}

/// One of the issue's targets, judged against pgbench's baselines (the sqlx-driven ones when pgbench is missing).
/// Informational: a missed target does not fail the run.
#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    /// The target, in words.
    pub name: String,
    /// Measured value (a ratio, milliseconds or MiB as the name says).
    pub value: Option<f64>,
    /// Unit of `value` for display (`×`, `ms`, `MiB`).
    pub unit: &'static str,
    /// Whether it was met.
    pub pass: bool,
    /// For a throughput target: the same phase against the sqlx-driven baseline (second column).
    pub sqlx_ratio: Option<f64>,
}

/// Effective settings of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Seconds per measured phase.
    pub duration_s: f64,
    /// Seconds per latency-sweep point.
    pub sweep_duration_s: f64,
    /// Seconds of unmeasured warm-up before baselines and the max-throughput phase.
    pub warmup_s: f64,
    /// Closed-loop load concurrency (HTTP connections) and baseline A connections.
    pub concurrency: usize,
    /// HTTP connections of the open-loop phases.
    pub open_loop_connections: usize,
    /// Body size of each event.
    pub body_bytes: usize,
    /// Share of deliveries that repeat an earlier one.
    pub duplicate_share: f64,
    /// Fractions of the max throughput offered in the latency sweep.
    pub sweep: Vec<f64>,
    /// Online CPUs.
    pub cores: usize,
    /// `edge.workers`.
    pub edge_workers: usize,
    /// `edge.db_max_connections`.
    pub edge_db_max_connections: u32,
    /// `worker.prefetch`.
    pub worker_prefetch: u16,
    /// `worker.concurrency` (also baseline B's concurrency).
    pub worker_concurrency: usize,
    /// `worker.db_max_connections` (also baseline B's pool).
    pub worker_db_max_connections: u32,
    /// `relay.batch_size`.
    pub relay_batch_size: u32,
    /// `relay.sweep_interval_ms`.
    pub relay_sweep_interval_ms: u64,
    /// `relay.sweep_min_age_ms`.
    pub relay_sweep_min_age_ms: u64,
    /// Directory of the edge and worker binaries.
    pub bin_dir: PathBuf,
    /// Offered rate of the `pipeline` (ceiling) phase (requests/s).
    pub pipeline_rate: Option<f64>,
    /// Unique events/s the pipeline was estimated to hold (CPU model), which bounds the default rate.
    pub pipeline_capacity_estimate: Option<f64>,
    /// Offered rate of the `pipeline_target` phase (requests/s): 0.3 × baseline A unique events/s.
    pub pipeline_target_rate: Option<f64>,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Run tag (in database, queue and event names).
    pub run: String,
    /// Unix time the run started.
    pub started_unix: f64,
    /// Wall-clock seconds of the whole run.
    pub total_s: f64,
    /// Settings.
    pub settings: Settings,
    /// Phases in run order.
    pub phases: Vec<PhaseReport>,
    /// Peak RSS of each child over the whole run.
    pub peak_rss: RssPeaks,
    /// The issue's targets.
    pub targets: Vec<TargetResult>,
    /// Correctness checks.
    pub checks: Vec<Check>,
    /// All checks passed.
    pub correctness_pass: bool,
    /// What teardown could not remove.
    pub cleanup_problems: Vec<String>,
}

impl Report {
    /// The phase with this key.
    pub fn phase(&self, key: &str) -> Option<&PhaseReport> {
        self.phases.iter().find(|p| p.key == key)
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.prec$}"),
        _ => "-".to_string(),
    }
}

fn pass(p: bool) -> &'static str {
    if p {
        "PASS"
    } else {
        "FAIL"
    }
}

/// The table printed at the end of a run (also written to `report.txt`).
pub fn render_table(r: &Report) -> String {
    let s = &r.settings;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "hookline benchmark {} — {} cores, {} s/phase (+{} s warm-up; sweep points {} s), load concurrency {}, \
         open-loop connections {}, {} B bodies, {:.0} % duplicates",
        r.run, s.cores, s.duration_s, s.warmup_s, s.sweep_duration_s, s.concurrency, s.open_loop_connections, s.body_bytes,
        s.duplicate_share * 100.0
    );
    let _ = writeln!(
        out,
        "edge: workers {}, db pool {} | worker: prefetch {}, concurrency {}, db pool {} | relay: batch {}, sweep every {} ms (rows older than {} ms)",
        s.edge_workers, s.edge_db_max_connections, s.worker_prefetch, s.worker_concurrency,
        s.worker_db_max_connections, s.relay_batch_size, s.relay_sweep_interval_ms, s.relay_sweep_min_age_ms
    );
    if let Some(target) = s.pipeline_target_rate {
        let _ = writeln!(
            out,
            "pipeline_target offered {target:.0} requests/s: 0.3 × baseline A (pgbench's) unique events/s (the target's rate), \
             duplicates on top"
        );
    }
    if let (Some(rate), Some(cap)) = (s.pipeline_rate, s.pipeline_capacity_estimate) {
        let _ = writeln!(
            out,
            "pipeline offered {rate:.0} requests/s (the ceiling): min(0.6 × baseline A, 0.9 × estimated capacity \
             {cap:.0} events/s / unique share), unless --pipeline-rate"
        );
    }
    let _ = writeln!(out);
    let header = format!(
        "{:<30} {:>9} {:>9} {:>6} {:>6} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>11} {:>6} {:>7} | {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>5}",
        "phase", "offered/s", "thrpt/s", "×base", "×sqlx", "p50 ms", "p99 ms", "p99.9 ms", "e2e p50", "e2e p99",
        "relay", "RSS MiB", "errors", "events", "edge", "worker", "pg", "rabbit", "bench", "other", "busy", "io"
    );
    let _ = writeln!(
        out,
        "{:<30} {:>9} {:>9} {:>6} {:>6} {:>24} {:>15} {:>7} {:>11} {:>14} | {:>41} {:>11}",
        "",
        "",
        "",
        "",
        "",
        "ack latency",
        "end-to-end ms",
        "lag ms",
        "edge/worker",
        "",
        "CPU s per 1,000 events",
        "%"
    );
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "{}", "-".repeat(header.chars().count()));
    for p in &r.phases {
        let (p50, p99, p999) = match &p.latency {
            Some(l) => (Some(l.p50_ms), Some(l.p99_ms), Some(l.p999_ms)),
            None => (None, None, None),
        };
        let ratio = match (p.ratio, p.baseline) {
            (Some(x), Some(b)) => format!("{x:.2}{b:?}"),
            _ => "-".into(),
        };
        let ratio_sqlx = match (p.ratio_sqlx, p.baseline) {
            (Some(x), Some(b)) => format!("{x:.2}{b:?}"),
            _ => "-".into(),
        };
        let rss = match (p.rss.edge_mib, p.rss.worker_mib) {
            (None, None) => "-".to_string(),
            (e, w) => format!("{}/{}", opt(e, 1), opt(w, 1)),
        };
        let c = &p.cpu_per_1k;
        let _ = writeln!(
            out,
            "{:<30} {:>9} {:>9.0} {:>6} {:>6} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>11} {:>6} {:>7} | {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5.0} {:>5}",
            format!("{}{}", p.label, if p.exhausted { "*" } else { "" }),
            opt(p.offered_per_s, 0),
            p.throughput_per_s,
            ratio,
            ratio_sqlx,
            opt(p50, 2),
            opt(p99, 2),
            opt(p999, 2),
            opt(p.e2e_lag.map(|l| l.p50_ms), 1),
            opt(p.e2e_lag.map(|l| l.p99_ms), 1),
            opt(p.relay_lag_max_ms, 0),
            rss,
            p.errors,
            p.events,
            opt(c.edge, 3),
            opt(c.worker, 3),
            opt(Some(c.postgres), 3),
            opt(Some(c.rabbitmq), 3),
            opt(Some(c.bench), 3),
            opt(Some(c.other), 3),
            p.cpu.machine_busy_pct,
            opt(p.cpu.io_stall_pct, 0),
        );
    }
    let _ = writeln!(
        out,
        "×base: throughput / pgbench's baseline (A = one row per commit, B = worker transaction; the sqlx-driven one \
         when pgbench is missing); ×sqlx: the same against the baseline this benchmark drives through sqlx; thrpt counts commits (A), \
         transactions (B), 200 answers incl. duplicates (edge), processed events (drain, pipeline). * = input ran out early.\n\
         CPU: pg = every PostgreSQL process, bench = this process (load generator / baseline client), other = the rest of \
         the machine (non-zero = the phase shared the machine with something else); busy = machine-wide CPU use;\n\
         io = share of the phase some task waited on the disk (PSI; high = the disk, not the code, set the latency)."
    );
    let with_checkpoints: Vec<String> = r
        .phases
        .iter()
        .filter_map(|p| {
            let w = p.pg_writes?;
            (w.checkpoints > 0).then(|| format!("{} ({})", p.label, w.checkpoints))
        })
        .collect();
    let _ = writeln!(
        out,
        "PostgreSQL checkpoints during a phase (its dirty pages written while the phase runs; latency rises): {}",
        if with_checkpoints.is_empty() {
            "none in the edge, drain and pipeline phases".to_string()
        } else {
            with_checkpoints.join(", ")
        }
    );
    render_costs(&mut out, r);
    let _ = writeln!(
        out,
        "peak RSS over the run: edge {} MiB, worker {} MiB",
        opt(r.peak_rss.edge_mib, 1),
        opt(r.peak_rss.worker_mib, 1)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "targets (informational; A and B are pgbench's baselines when it ran):{:>50}",
        "vs sqlx baseline"
    );
    for t in &r.targets {
        let value = format!("{}{}", opt(t.value, 2), t.unit);
        let _ = writeln!(
            out,
            "  {}  {:<68} {:>10} {:>10}",
            pass(t.pass),
            t.name,
            value,
            t.sqlx_ratio.map_or(String::new(), |x| format!("{x:.2}×"))
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "correctness: {}", pass(r.correctness_pass));
    for c in &r.checks {
        let _ = writeln!(out, "  {}  {:<72} {}", pass(c.pass), c.name, c.detail);
    }
    for p in &r.cleanup_problems {
        let _ = writeln!(out, "  cleanup: {p}");
    }
    let _ = writeln!(out, "total {:.0} s", r.total_s);
    out
}

/// The cost model: per event of each phase that has one, what PostgreSQL and RabbitMQ did.
fn render_costs(out: &mut String, r: &Report) {
    let rows: Vec<(&PhaseReport, &CostModel)> = r
        .phases
        .iter()
        .filter_map(|p| Some((p, p.costs.as_ref()?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\ncost per event (per unique event stored, or processed for the drain; per transaction for pgbench): tuples \
         written (pg_stat_user_tables), WAL (pg_stat_wal), CPU, RabbitMQ's own message and byte counters"
    );
    let header = format!(
        "{:<30} {:>7} {:>7} {:>5} {:>6} {:>6} {:>14} {:>11}  {}",
        "phase",
        "tuples",
        "WAL B",
        "WAL#",
        "pg ms",
        "mq ms",
        "msg in/out/ack",
        "AMQP B i/o",
        "per table: i inserted, u updated (h of them HOT), d deleted"
    );
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "{}", "-".repeat(header.chars().count()));
    for (p, c) in rows {
        let msgs = match (c.amqp_published, c.amqp_delivered, c.amqp_acknowledged) {
            (Some(a), Some(b), Some(k)) => format!("{a:.2}/{b:.2}/{k:.2}"),
            _ => "-".into(),
        };
        let bytes = match (c.amqp_bytes_in, c.amqp_bytes_out) {
            (Some(a), Some(b)) => format!("{a:.0}/{b:.0}"),
            _ => "-".into(),
        };
        let tables: Vec<String> = c
            .tables
            .iter()
            .filter(|t| t.inserted + t.updated + t.deleted >= 0.005)
            .map(|t| {
                let mut parts = Vec::new();
                if t.inserted >= 0.005 {
                    parts.push(format!("i{:.2}", t.inserted));
                }
                if t.updated >= 0.005 {
                    parts.push(format!("u{:.2}(h{:.2})", t.updated, t.hot_updated));
                }
                if t.deleted >= 0.005 {
                    parts.push(format!("d{:.2}", t.deleted));
                }
                format!("{} {}", t.table, parts.join(" "))
            })
            .collect();
        let _ = writeln!(
            out,
            "{:<30} {:>7.2} {:>7.0} {:>5.1} {:>6.3} {:>6.3} {:>14} {:>11}  {}",
            p.label,
            c.tuples,
            c.wal_bytes,
            c.wal_records,
            c.pg_cpu_ms,
            c.rabbitmq_cpu_ms,
            msgs,
            bytes,
            tables.join("; ")
        );
    }
}

/// A round tick step (1, 2 or 5 × a power of ten) close to `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let m = raw / magnitude;
    let nice = if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// A chart series: name, colour, and which percentile it plots.
type Series = (&'static str, &'static str, fn(&Latency) -> f64);

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Latency (p50, p99, p99.9; log scale) against offered load, from the open-loop phases.
pub fn render_svg(r: &Report) -> String {
    let points: Vec<(f64, &Latency)> = r
        .phases
        .iter()
        .filter(|p| p.key.starts_with("edge_open_"))
        .filter_map(|p| Some((p.offered_per_s?, p.latency.as_ref()?)))
        .collect();
    let max_tp = r.phase("edge_max").map(|p| p.throughput_per_s);
    let (w, h) = (760.0, 440.0);
    let (left, right, top, bottom) = (70.0, 170.0, 40.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let x_max = points
        .iter()
        .map(|(x, _)| *x)
        .chain(max_tp)
        .fold(1.0f64, f64::max)
        * 1.05;
    let ys: Vec<f64> = points
        .iter()
        .flat_map(|(_, l)| [l.p50_ms, l.p99_ms, l.p999_ms])
        .chain([10.0])
        .filter(|v| *v > 0.0)
        .collect();
    let y_lo = 10f64.powf(ys.iter().fold(f64::MAX, |a, b| a.min(*b)).log10().floor());
    let y_hi = 10f64.powf(ys.iter().fold(f64::MIN, |a, b| a.max(*b)).log10().ceil());
    let (y_lo, y_hi) = if y_hi <= y_lo {
        (y_lo, y_lo * 10.0)
    } else {
        (y_lo, y_hi)
    };
    let sx = |x: f64| left + pw * x / x_max;
    let sy = |y: f64| {
        let y = y.max(y_lo);
        top + ph * (1.0 - (y.log10() - y_lo.log10()) / (y_hi.log10() - y_lo.log10()))
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">hookline edge: ack latency vs offered load (open loop, run {})</text>"#,
        left + pw / 2.0,
        esc(&r.run)
    );
    // Decade and 2/5 grid lines on the log axis.
    let mut decade = y_lo;
    while decade <= y_hi * 1.0001 {
        for m in [1.0, 2.0, 5.0] {
            let v = decade * m;
            if v > y_hi * 1.0001 {
                break;
            }
            let y = sy(v);
            let stroke = if m == 1.0 { "#bbb" } else { "#eee" };
            let _ = writeln!(
                s,
                r#"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{stroke}"/>"#,
                left + pw
            );
            let label = if v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v}")
            };
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
                left - 6.0,
                y + 4.0
            );
        }
        decade *= 10.0;
    }
    let step = nice_step(x_max / 5.0);
    for i in 0..=((x_max / step) as u32) {
        let v = step * f64::from(i);
        let x = sx(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/>"##,
            top + ph
        );
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{v:.0}</text>"#,
            top + ph + 18.0
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">offered load (requests/s)</text>"#,
        left + pw / 2.0,
        h - 18.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">ack latency (ms, log scale)</text>"#,
        top + ph / 2.0
    );
    // The 10 ms target and the measured maximum throughput.
    let y10 = sy(10.0);
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{y10:.1}" x2="{:.1}" y2="{y10:.1}" stroke="#888" stroke-dasharray="6 4"/>"##,
        left + pw
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" fill="#666">10 ms target</text>"##,
        left + pw + 6.0,
        y10 + 4.0
    );
    if let Some(m) = max_tp {
        let x = sx(m);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="2 3"/>"##,
            top + ph
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" fill="#666" text-anchor="end">max {m:.0}/s</text>"##,
            x - 4.0,
            top + 14.0
        );
    }
    let series: [Series; 3] = [
        ("p50", "#1f77b4", |l| l.p50_ms),
        ("p99", "#d62728", |l| l.p99_ms),
        ("p99.9", "#ff7f0e", |l| l.p999_ms),
    ];
    for (i, (name, color, get)) in series.iter().enumerate() {
        let pts: Vec<String> = points
            .iter()
            .map(|(x, l)| format!("{:.1},{:.1}", sx(*x), sy(get(l))))
            .collect();
        let dash = if *name == "p99.9" {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(s, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
        }
        let ly = top + 20.0 + 20.0 * i as f64;
        let lx = left + pw + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{dash}/>"#,
            lx + 24.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{name}</text>"#,
            lx + 30.0,
            ly + 4.0
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// Writes `report.json`, `report.txt` and `latency.svg` into `dir`; returns their paths.
pub fn write_outputs(r: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let files = [
        (
            dir.join("report.json"),
            serde_json::to_string_pretty(r).context("serialise the report")?,
        ),
        (dir.join("report.txt"), render_table(r)),
        (dir.join("latency.svg"), render_svg(r)),
    ];
    let mut written = Vec::new();
    for (path, text) in files {
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
