//! Scale-out chaos (issue 15): the real binaries — two edges and two workers — on a three-node RabbitMQ cluster and
//! a PostgreSQL primary + synchronous standby behind HAProxy, all built by `deploy/cluster.sh up`, under a steady
//! provider-like load, through four faults in a row:
//!
//! 1. SIGKILL of the RabbitMQ node holding the payments queue's leader (it stays down);
//! 2. SIGKILL of a second node for a few seconds (the queues lose their majority), then its restart — and the first
//!    node's;
//! 3. the PostgreSQL primary stopped as a crash would, the standby promoted (the proxy follows it);
//! 4. the old primary rewound and restarted as the new standby, replication made synchronous again.
//!
//! Then the total-queue checker: every acknowledged event processed once (0 lost, 0 doubled), ledger balanced. The
//! edges may only answer 2xx or 503 with `Retry-After`. For every fault it prints the throughput before, during and
//! after (events acknowledged by the edges and processed by the workers per second) and the time to recover; the
//! numbers are in `deploy/SCALING.md`.
//!
//! Ignored by a plain `cargo test`: it needs the cluster. `deploy/test.sh` runs it in its own step:
//! `deploy/cluster.sh up`, then this test with the settings `deploy/cluster.sh env` prints, then `down`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookline_tests::faults::*;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;

/// Events started per second on each edge.
const RATE_PER_EDGE: f64 = 20.0;
/// Longest any fault may take to recover.
const WAIT: Duration = Duration::from_secs(120);
/// Length of the "before" and "after" windows.
const WINDOW: Duration = Duration::from_secs(6);
/// How often the sampler reads the counters.
const TICK: Duration = Duration::from_millis(250);
/// How long the pipeline must run normally to count as recovered.
const STEADY: Duration = Duration::from_secs(3);

/// The topology `deploy/cluster.sh env` describes.
struct Topology {
    amqp_urls: Vec<String>,
    pg: String,
    rabbit_nodes: Vec<String>,
}

fn topology() -> Topology {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: run `deploy/cluster.sh up` and export what `deploy/cluster.sh env` prints")
        })
    };
    let amqp_urls: Vec<String> =
        serde_json::from_str(&var("HOOKLINE_CLUSTER_AMQP_URLS")).expect("a JSON list of AMQP URLs");
    Topology {
        amqp_urls,
        pg: var("HOOKLINE_CLUSTER_PG"),
        rabbit_nodes: var("HOOKLINE_CLUSTER_RABBIT_NODES")
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    }
}

/// `deploy/cluster.sh ARGS…`, asserting success; its stdout, trimmed.
async fn cluster_sh(args: &[&str]) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/cluster.sh");
    let out = tokio::process::Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .await
        .expect("run deploy/cluster.sh");
    assert!(
        out.status.success(),
        "deploy/cluster.sh {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One reading of the counters: events acknowledged by the edges (client side) and processed markers (database;
/// `None` while it cannot be read).
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    acked: usize,
    processed: Option<i64>,
}

/// Reads the counters every [`TICK`] until cancelled.
struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    cancel: CancellationToken,
}

impl Sampler {
    fn start(db_url: &str, progress: Vec<Arc<Progress>>) -> Sampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancellationToken::new();
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(1))
            .connect_lazy(db_url)
            .expect("sampler pool");
        let (out, stop) = (samples.clone(), cancel.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let acked = progress.iter().map(|p| p.acked()).sum();
                let query = sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM processed_events WHERE consumer = 'payments'",
                )
                .fetch_one(&pool);
                let processed = tokio::time::timeout(Duration::from_secs(1), query)
                    .await
                    .ok()
                    .and_then(Result::ok);
                out.lock().expect("samples").push(Sample {
                    at: Instant::now(),
                    acked,
                    processed,
                });
                tokio::time::sleep(TICK).await;
            }
        });
        Sampler { samples, cancel }
    }

    fn all(&self) -> Vec<Sample> {
        self.samples.lock().expect("samples").clone()
    }

    /// The latest sample at or before `t` whose processed count is known.
    fn at(&self, t: Instant) -> Option<Sample> {
        self.all()
            .into_iter()
            .rev()
            .find(|s| s.at <= t && s.processed.is_some())
    }

    /// (acknowledged/s, processed/s) over `[from, to]`.
    fn rates(&self, from: Instant, to: Instant) -> (f64, f64) {
        let (Some(a), Some(b)) = (self.at(from), self.at(to)) else {
            return (0.0, 0.0);
        };
        let secs = (b.at - a.at).as_secs_f64().max(1e-3);
        (
            (b.acked - a.acked) as f64 / secs,
            (b.processed.unwrap_or(0) - a.processed.unwrap_or(0)) as f64 / secs,
        )
    }

    /// Largest backlog (acknowledged − processed) seen in `[from, to]`.
    fn max_lag(&self, from: Instant, to: Instant) -> i64 {
        self.all()
            .into_iter()
            .filter(|s| s.at >= from && s.at <= to)
            .filter_map(|s| s.processed.map(|p| s.acked as i64 - p))
            .max()
            .unwrap_or(0)
    }

    /// Longest time in `[from, to]` during which the count `f` picks did not move (a stall); an unreadable
    /// sample counts as no movement.
    fn longest_stall(
        &self,
        from: Instant,
        to: Instant,
        f: impl Fn(&Sample) -> Option<i64>,
    ) -> Duration {
        // Start from the last value known before the window: a count unreadable from its first sample on (the
        // database gone) stalls from `from`.
        let mut last: Option<(i64, Instant)> = self
            .all()
            .into_iter()
            .rev()
            .find(|s| s.at <= from && f(s).is_some())
            .and_then(|s| f(&s).map(|v| (v, from)));
        let mut longest = Duration::ZERO;
        for s in self
            .all()
            .into_iter()
            .filter(|s| s.at >= from && s.at <= to)
        {
            match (f(&s), last) {
                (Some(v), Some((prev, since))) if v == prev => longest = longest.max(s.at - since),
                (Some(v), Some((prev, _))) if v != prev => last = Some((v, s.at)),
                (Some(v), None) => last = Some((v, s.at)),
                (None, Some((_, since))) => longest = longest.max(s.at - since),
                _ => {}
            }
        }
        longest
    }

    /// Waits until, after `end`, the system is steady again: from some sample on, for [`STEADY`], the edges
    /// acknowledge and the workers process (both counts grow) and the backlog stays at most `lag`. Returns the
    /// first sample of that window (a backlog that is small only because the load just started to pile up does
    /// not count).
    async fn wait_recovered(&self, end: Instant, lag: i64) -> Instant {
        let deadline = Instant::now() + WAIT;
        loop {
            let all = self.all();
            let after: Vec<&Sample> = all
                .iter()
                .filter(|s| s.at > end && s.processed.is_some())
                .collect();
            let newest = all.last().map(|s| s.at);
            for (i, first) in after.iter().enumerate() {
                if newest.is_none_or(|n| n < first.at + STEADY) {
                    break; // not enough samples after it yet
                }
                let window: Vec<&&Sample> = after[i..]
                    .iter()
                    .take_while(|s| s.at <= first.at + STEADY)
                    .collect();
                let last = window.last().map_or(**first, |s| ***s);
                let steady = window
                    .iter()
                    .all(|s| s.acked as i64 - s.processed.unwrap_or(i64::MAX) <= lag);
                let moving = last.acked > first.acked
                    && last.processed.unwrap_or(0) > first.processed.unwrap_or(0);
                if steady && moving {
                    return first.at;
                }
            }
            assert!(
                Instant::now() < deadline,
                "not recovered within {WAIT:?} of the fault: {:?}",
                all.last()
            );
            tokio::time::sleep(TICK).await;
        }
    }
}

/// One fault and what it cost.
struct Fault {
    name: &'static str,
    start: Instant,
    end: Instant,
    recovered: Instant,
}

impl Fault {
    fn report(&self, s: &Sampler) -> String {
        let (ack_b, proc_b) = s.rates(self.start - WINDOW, self.start);
        let (ack_d, proc_d) = s.rates(self.start, self.recovered);
        let (ack_a, proc_a) = s.rates(self.recovered, self.recovered + WINDOW);
        let acked_stall = s.longest_stall(self.start, self.recovered, |x| Some(x.acked as i64));
        let processed_stall = s.longest_stall(self.start, self.recovered, |x| x.processed);
        format!(
            "[cluster] {:<42} acked/s before {ack_b:5.1} during {ack_d:5.1} after {ack_a:5.1} | processed/s before \
             {proc_b:5.1} during {proc_d:5.1} after {proc_a:5.1} | fault lasted {:5.1}s, recovered {:5.1}s after it \
             began | longest stall: acks {:4.1}s, processing {:4.1}s | max backlog {}",
            self.name,
            (self.end - self.start).as_secs_f64(),
            (self.recovered - self.start).as_secs_f64(),
            acked_stall.as_secs_f64(),
            processed_stall.as_secs_f64(),
            s.max_lag(self.start, self.recovered),
        )
    }
}

/// Polls `rabbit-leader` until the queue's leader is on a node other than `not`.
async fn wait_new_leader(queue: &str, not: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/cluster.sh");
        let out = tokio::process::Command::new("bash")
            .arg(script)
            .args(["rabbit-leader", queue])
            .output()
            .await
            .expect("run deploy/cluster.sh");
        let leader = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !leader.is_empty() && leader != not {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "no new leader for {queue} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the cluster of deploy/cluster.sh; deploy/test.sh runs it in its own step"]
async fn scale_out_survives_broker_nodes_and_a_database_failover_under_load() {
    let topo = topology();
    let mut c = Cluster::new(
        "scale_out",
        ClusterOptions {
            prefetch: 16,
            concurrency: 4,
            amqp_urls: topo.amqp_urls.clone(),
            pg_base: Some(topo.pg.clone()),
            rabbitmq_nodes: topo.rabbit_nodes.clone(),
            // Every connection lost returns the deliveries it held, and RabbitMQ 3.10 counts each return: four
            // faults must not dead-letter good events.
            delivery_limit: Some(100),
            ..ClusterOptions::default()
        },
    )
    .await;
    c.start_worker(None).await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    let second_edge = c.start_edge_replica().await;

    let load = |tag: &str| {
        let mut l = Load::new(tag, 100_000).rate(RATE_PER_EDGE);
        l.concurrency = 16;
        // A provider keeps retrying far longer than any of these faults lasts.
        l.max_attempts = 400;
        l.retry_budget = WAIT;
        l
    };
    let run_a = load("cla").start(&c.base);
    let run_b = load("clb").start(&second_edge);
    let sampler = Sampler::start(
        &c.db.url,
        vec![run_a.progress.clone(), run_b.progress.clone()],
    );
    run_a.progress.wait_acked(40, WAIT).await;
    run_b.progress.wait_acked(40, WAIT).await;
    tokio::time::sleep(WINDOW).await; // the first "before" window
    let baseline_lag = sampler.max_lag(Instant::now() - WINDOW, Instant::now());
    // Back to normal: the backlog no larger than twice the steady one, or one second of load.
    let normal_lag = (2 * baseline_lag).max((2.0 * RATE_PER_EDGE) as i64);
    let queue = c.topology().payments_queue.clone();
    // x-quorum-initial-group-size = 3: the queue has a member on each of the three nodes.
    let members = rabbitmqctl_any(
        &topo.rabbit_nodes,
        &["-q", "list_queues", "name", "members", "--no-table-headers"],
    )
    .await;
    let line = members
        .lines()
        .find(|l| l.split('\t').next() == Some(queue.as_str()))
        .unwrap_or_else(|| panic!("{queue} not listed: {members}"));
    for node in &topo.rabbit_nodes {
        assert!(
            line.contains(node.as_str()),
            "{queue} has no member on {node}: {line}"
        );
    }
    let mut faults = Vec::new();

    // 1. The node holding the leader of the payments queue dies and stays down.
    let leader = cluster_sh(&["rabbit-leader", &queue]).await;
    let start = Instant::now();
    cluster_sh(&["rabbit-kill", &leader]).await;
    let end = Instant::now();
    let new_leader = wait_new_leader(&queue, &leader).await;
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    faults.push(Fault {
        name: "RabbitMQ leader node killed",
        start,
        end,
        recovered,
    });
    tokio::time::sleep(WINDOW).await;

    // 2. A second node dies for a few seconds: one of three left, the queue has no majority. Then both return.
    let second = ["1", "2", "3"]
        .into_iter()
        .find(|n| *n != leader)
        .expect("another node")
        .to_string();
    let start = Instant::now();
    cluster_sh(&["rabbit-kill", &second]).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster_sh(&["rabbit-start", &second]).await;
    let end = Instant::now();
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    faults.push(Fault {
        name: "second RabbitMQ node killed briefly",
        start,
        end,
        recovered,
    });
    let start = Instant::now();
    cluster_sh(&["rabbit-start", &leader]).await;
    let end = Instant::now();
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    faults.push(Fault {
        name: "first RabbitMQ node restarted",
        start,
        end,
        recovered,
    });
    tokio::time::sleep(WINDOW).await;

    // 3. The PostgreSQL primary crashes; two seconds without a primary; the standby is promoted.
    let old_primary = cluster_sh(&["pg-primary"]).await;
    let start = Instant::now();
    cluster_sh(&["pg-stop-primary"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster_sh(&["pg-promote"]).await;
    let end = Instant::now();
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    let new_primary = cluster_sh(&["pg-primary"]).await;
    assert_ne!(new_primary, old_primary, "the standby was not promoted");
    let pg_fault = (start, recovered);
    faults.push(Fault {
        name: "PostgreSQL primary lost, standby promoted",
        start,
        end,
        recovered,
    });
    tokio::time::sleep(WINDOW).await;

    // 4. The old primary comes back as the new (synchronous) standby, under load.
    let start = Instant::now();
    cluster_sh(&["pg-rejoin"]).await;
    let end = Instant::now();
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    faults.push(Fault {
        name: "old primary rejoined as standby",
        start,
        end,
        recovered,
    });
    tokio::time::sleep(WINDOW).await;

    run_a.progress.stop_starting();
    run_b.progress.stop_starting();
    let (a, b) = tokio::join!(run_a.finish(), run_b.finish());
    sampler.cancel.cancel();
    for f in &faults {
        report_line(&f.report(&sampler));
    }
    report_line(&format!(
        "[cluster] leader moved from node {leader} to node {new_leader}; PostgreSQL primary moved from {old_primary} to {new_primary}"
    ));

    // The edges answered 2xx, or 503 with Retry-After (only while there was no primary); never a 500 or a hang.
    for report in [&a, &b] {
        let wrong: Vec<&Attempt> = report
            .attempts
            .iter()
            .filter(|x| !x.is_2xx() && (x.status != Some(503) || x.retry_after.is_none()))
            .collect();
        assert!(
            wrong.is_empty(),
            "answers other than 2xx or 503 + Retry-After: {:?}",
            wrong.iter().take(5).collect::<Vec<_>>()
        );
        let outside: Vec<&Attempt> = report
            .attempts
            .iter()
            .filter(|x| {
                !x.is_2xx() && (x.sent_at + x.latency < pg_fault.0 || x.sent_at > pg_fault.1)
            })
            .collect();
        assert!(
            outside.is_empty(),
            "503 outside the database failover: {:?}",
            outside.iter().take(5).collect::<Vec<_>>()
        );
    }
    let refused: Vec<&Attempt> = [&a, &b]
        .iter()
        .flat_map(|r| r.attempts.iter())
        .filter(|x| !x.is_2xx())
        .collect();
    assert!(
        !refused.is_empty(),
        "no request fell inside the database failover"
    );
    let first = refused
        .iter()
        .map(|x| x.sent_at)
        .min()
        .unwrap_or(pg_fault.0);
    let last = refused
        .iter()
        .map(|x| x.ended_at())
        .max()
        .unwrap_or(pg_fault.0);
    let slowest = refused.iter().map(|x| x.latency).max().unwrap_or_default();
    report_line(&format!(
        "[cluster] {} events acknowledged by two edges; {} answers 503 + Retry-After, all within {:.1}s of the \
         primary's loss (first {:.1}s after it, slowest answer {slowest:?})",
        a.events.len() + b.events.len(),
        refused.len(),
        (last - pg_fault.0).as_secs_f64(),
        first.saturating_duration_since(pg_fault.0).as_secs_f64(),
    ));

    // 0 lost, 0 doubled, ledger balanced.
    let checked = c.check(&[&a, &b]).await;
    assert_eq!(checked.processed, a.events.len() + b.events.len());
    c.teardown().await;
}
