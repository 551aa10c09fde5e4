//! Scale-out chaos (issues 15 and 49): the real binaries — two edges and two workers — on a three-node RabbitMQ
//! cluster and a three-node PostgreSQL cluster under Patroni (etcd of three members, synchronous mode, HAProxy
//! routing to the node whose Patroni answers 200 on `/primary`), all built by `deploy/cluster.sh up`, under a steady
//! provider-like load, through these faults in a row:
//!
//! 1. SIGKILL of the RabbitMQ node holding the payments queue's leader (it stays down);
//! 2. SIGKILL of a second node for a few seconds (the queues lose their majority), then its restart — and the first
//!    node's;
//! 3. SIGKILL of the PostgreSQL primary's postmaster, and nothing done by hand: Patroni promotes the synchronous
//!    standby, the proxy follows it, the killed node comes back as a replica by itself (`pg_rewind`);
//! 4. SIGKILL of the whole primary node (Patroni and postmaster): the leader key expires after Patroni's `ttl`, the
//!    synchronous standby is promoted; the node's Patroni is started again (the machine is back) and the node rejoins
//!    by itself;
//! 5. a planned switchover (`patronictl switchover --force`): 503s for no longer than the edge's `Retry-After`;
//! 6. SIGKILL of the synchronous standby's node: Patroni names the other replica synchronous, the primary stays;
//!    the node's Patroni is started again and it streams by itself;
//! 7. etcd loses one member, then a second (no majority) for longer than Patroni's `ttl`: the primary stays primary
//!    (`failsafe_mode`) and the edges never refuse; both members come back.
//!
//! For each database fault it prints the time from the fault to another node being primary, to the edges' first 200
//! and to the old node streaming again. Then the total-queue checker: every acknowledged event processed once (0
//! lost, 0 doubled), ledger balanced. The edges may only answer 2xx or 503 with `Retry-After`, and 503 only within a
//! database fault. For every fault it prints the throughput before, during and after (events acknowledged by the
//! edges and processed by the workers per second) and the time to recover; the numbers are in `docs/scaling.md`.
//!
//! Ignored by a plain `cargo test`: it needs the cluster. `deploy/test.sh` runs it in its own step
//! (`deploy/test-cluster.sh`): `deploy/cluster.sh up`, then this test with the settings `deploy/cluster.sh env`
//! prints, then `down`.

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
/// What Patroni's settings promise (`deploy/cluster.sh`: ttl 12 s, loop_wait 2 s, retry_timeout 5 s; see
/// `docs/scaling.md`): another node is primary, and the edges answer 200 again, within this of a crash.
const PROMISED_FAILOVER: Duration = Duration::from_secs(30);
/// Patroni's `ttl` in `deploy/cluster.sh`: without a majority in etcd for longer than this, a primary without
/// `failsafe_mode` would have demoted itself.
const PATRONI_TTL: Duration = Duration::from_secs(12);
/// The edge's `Retry-After` on a 503 (`hookline_web::RETRY_AFTER_SECS`): a planned switchover must not refuse
/// for longer than a provider honouring it waits.
const RETRY_AFTER: Duration = Duration::from_secs(5);

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

/// Runs `deploy/cluster.sh ARGS…` every 200 ms until it succeeds with an answer (stdout, trimmed) that `ok`
/// accepts, for at most `within`; that answer and when it came.
async fn poll_cluster_sh(
    args: &[&str],
    within: Duration,
    what: &str,
    ok: impl Fn(&str) -> bool,
) -> (String, Instant) {
    let deadline = Instant::now() + within;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/cluster.sh");
    loop {
        let out = tokio::process::Command::new("bash")
            .arg(&script)
            .args(args)
            .output()
            .await
            .expect("run deploy/cluster.sh");
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && ok(&answer) {
            return (answer, Instant::now());
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `rabbit-leader` until the queue's leader is on a node other than `not`.
async fn wait_new_leader(queue: &str, not: &str) -> String {
    poll_cluster_sh(
        &["rabbit-leader", queue],
        WAIT,
        &format!("a new leader for {queue}"),
        |l| !l.is_empty() && l != not,
    )
    .await
    .0
}

/// A database fault, as the cluster saw it: when it began, when another node answered 200 on `/primary`, when the
/// old primary was streaming again as a replica, and when the pipeline was back to normal.
struct DbFault {
    name: &'static str,
    old_primary: String,
    new_primary: String,
    start: Instant,
    /// When the fault's action (kill, switchover) had returned.
    end: Instant,
    promoted: Instant,
    streaming: Instant,
    recovered: Instant,
}

impl DbFault {
    /// The attempts answered other than 2xx during this fault (sent before it recovered, answered after it began).
    fn refused<'a>(&self, reports: &[&'a LoadReport]) -> Vec<&'a Attempt> {
        reports
            .iter()
            .flat_map(|r| r.attempts.iter())
            .filter(|x| !x.is_2xx() && x.ended_at() >= self.start && x.sent_at <= self.over())
            .collect()
    }

    /// When the fault is over: the pipeline steady again and the old node streaming (one edge's pool can still
    /// answer 503 for a moment after the other edge's acknowledgements made the pipeline look steady).
    fn over(&self) -> Instant {
        self.recovered.max(self.streaming)
    }

    /// The first 2xx answer to a request sent once the edges were seen refusing (after the fault's first 503 was
    /// answered; when nothing was refused, after the fault's action had returned). Earlier requests may have
    /// committed on the old primary before it died: the fault's clock starts before the script finds and kills it.
    fn first_200(&self, reports: &[&LoadReport]) -> Option<Instant> {
        let from = self
            .refused(reports)
            .iter()
            .map(|x| x.ended_at())
            .min()
            .unwrap_or(self.end);
        reports
            .iter()
            .flat_map(|r| r.attempts.iter())
            .filter(|x| x.is_2xx() && x.sent_at >= from)
            .map(Attempt::ended_at)
            .min()
    }

    fn report(&self, reports: &[&LoadReport]) -> String {
        let refused = self.refused(reports);
        let span = match (
            refused.iter().map(|x| x.sent_at).min(),
            refused.iter().map(|x| x.ended_at()).max(),
        ) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        let first_200 = self
            .first_200(reports)
            .map_or(f64::NAN, |t| (t - self.start).as_secs_f64());
        format!(
            "[cluster] {:<46} {} -> {}: another node primary after {:5.1}s, first 200 after {first_200:5.1}s, old \
             node streaming again after {:5.1}s | {} answers 503 + Retry-After over {span:4.1}s",
            self.name,
            self.old_primary,
            self.new_primary,
            (self.promoted - self.start).as_secs_f64(),
            (self.streaming - self.start).as_secs_f64(),
            refused.len(),
        )
    }
}

/// Waits until a node other than `old` answers 200 on `/primary`, at most [`PROMISED_FAILOVER`].
async fn wait_other_primary(old: &str) -> (String, Instant) {
    poll_cluster_sh(
        &["pg-primary"],
        PROMISED_FAILOVER,
        &format!("another node than {old} primary (Patroni's promise)"),
        |p| !p.is_empty() && p != old,
    )
    .await
}

/// Waits until `node` is a replica streaming WAL again.
async fn wait_streaming(node: &str) -> Instant {
    poll_cluster_sh(
        &["pg-streaming", node],
        WAIT,
        &format!("node {node} streaming as a replica"),
        |_| true,
    )
    .await
    .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the cluster of deploy/cluster.sh; deploy/test.sh runs it in its own step"]
async fn scale_out_survives_broker_nodes_and_database_failovers_under_load() {
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

    // 3. The PostgreSQL primary's postmaster is SIGKILLed, and nothing is done by hand: Patroni sees its PostgreSQL
    //    gone, releases the leader key (primary_start_timeout = 0), the synchronous standby takes it and is
    //    promoted, HAProxy follows /primary, and the killed node is rewound and streams again by itself.
    let mut db_faults = Vec::new();
    let old_primary = cluster_sh(&["pg-primary"]).await;
    let start = Instant::now();
    let killed = cluster_sh(&["pg-kill-primary"]).await;
    assert_eq!(killed, old_primary, "pg-kill-primary killed another node");
    let end = Instant::now();
    let (new_primary, promoted) = wait_other_primary(&old_primary).await;
    let streaming = wait_streaming(&old_primary).await;
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    faults.push(Fault {
        name: "PostgreSQL primary's postmaster SIGKILLed",
        start,
        end,
        recovered,
    });
    db_faults.push(DbFault {
        name: "postmaster SIGKILLed, Patroni fails over",
        old_primary,
        new_primary,
        start,
        end,
        promoted,
        streaming,
        recovered,
    });
    tokio::time::sleep(WINDOW).await;

    // 4. The whole primary node dies (Patroni too): nobody releases the leader key, it expires after ttl. The node's
    //    Patroni starts again (its machine is back) and rejoins as a replica by itself.
    let old_primary = cluster_sh(&["pg-primary"]).await;
    let start = Instant::now();
    cluster_sh(&["pg-kill-node", &old_primary]).await;
    let end = Instant::now();
    let (new_primary, promoted) = wait_other_primary(&old_primary).await;
    cluster_sh(&["pg-start", &old_primary]).await;
    let streaming = wait_streaming(&old_primary).await;
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    faults.push(Fault {
        name: "PostgreSQL primary node SIGKILLed",
        start,
        end,
        recovered,
    });
    db_faults.push(DbFault {
        name: "node SIGKILLed (Patroni too), leader key expires",
        old_primary,
        new_primary,
        start,
        end,
        promoted,
        streaming,
        recovered,
    });
    tokio::time::sleep(WINDOW).await;

    // 5. A planned switchover, the operator's way (patronictl switchover --force), under load.
    let old_primary = cluster_sh(&["pg-primary"]).await;
    let start = Instant::now();
    cluster_sh(&["pg-switchover"]).await;
    let end = Instant::now();
    let (new_primary, promoted) = wait_other_primary(&old_primary).await;
    let streaming = wait_streaming(&old_primary).await;
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    faults.push(Fault {
        name: "planned switchover (patronictl)",
        start,
        end,
        recovered,
    });
    db_faults.push(DbFault {
        name: "planned switchover (patronictl)",
        old_primary,
        new_primary,
        start,
        end,
        promoted,
        streaming,
        recovered,
    });
    tokio::time::sleep(WINDOW).await;

    // 6. The synchronous standby's node dies: commits wait until Patroni names the other replica synchronous; the
    //    primary stays. Its Patroni starts again and the node streams by itself.
    let primary = cluster_sh(&["pg-primary"]).await;
    let standby = cluster_sh(&["pg-sync-standby"]).await;
    let start = Instant::now();
    cluster_sh(&["pg-kill-node", &standby]).await;
    let end = Instant::now();
    let (new_sync, new_sync_at) = poll_cluster_sh(
        &["pg-sync-standby"],
        PROMISED_FAILOVER,
        &format!("a synchronous standby other than {standby}"),
        |s| !s.is_empty() && s != standby,
    )
    .await;
    cluster_sh(&["pg-start", &standby]).await;
    let streaming = wait_streaming(&standby).await;
    // Commits stall only once they wait for the dead standby, after in-flight ones completed: the pipeline can
    // look steady right after the kill. Recovery counts from the node's return.
    let recovered = sampler.wait_recovered(streaming, normal_lag).await;
    assert_eq!(
        cluster_sh(&["pg-primary"]).await,
        primary,
        "losing the synchronous standby moved the primary"
    );
    faults.push(Fault {
        name: "synchronous standby node SIGKILLed",
        start,
        end,
        recovered,
    });
    let standby_fault = (start, recovered);
    let standby_line = format!(
        "[cluster] synchronous standby {standby} SIGKILLed (primary {primary} stays): {new_sync} synchronous after \
         {:5.1}s, {standby} streaming again after {:5.1}s",
        (new_sync_at - start).as_secs_f64(),
        (streaming - start).as_secs_f64(),
    );
    tokio::time::sleep(WINDOW).await;

    // 7. etcd loses one member (a majority is left: nothing changes), then a second (no majority: no promotion is
    //    possible) for longer than the leader key's ttl. failsafe_mode keeps the primary primary, since it still
    //    reaches both other Patronis: the edges must not refuse anything (checked with the other 503s below) and
    //    keep acknowledging.
    let primary = cluster_sh(&["pg-primary"]).await;
    let start = Instant::now();
    cluster_sh(&["etcd-kill", "1"]).await;
    tokio::time::sleep(WINDOW).await;
    cluster_sh(&["etcd-kill", "2"]).await;
    let without_majority = Instant::now();
    while without_majority.elapsed() < 2 * PATRONI_TTL {
        assert_eq!(
            cluster_sh(&["pg-primary"]).await,
            primary,
            "the primary changed or demoted itself with etcd's majority gone"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    cluster_sh(&["etcd-start", "1"]).await;
    cluster_sh(&["etcd-start", "2"]).await;
    let end = Instant::now();
    let recovered = sampler.wait_recovered(end, normal_lag).await;
    let ack_stall = sampler.longest_stall(start, end, |x| Some(x.acked as i64));
    assert!(
        ack_stall < Duration::from_secs(3),
        "the edges stopped acknowledging for {ack_stall:?} while etcd lost members"
    );
    faults.push(Fault {
        name: "etcd: one member, then two SIGKILLed",
        start,
        end,
        recovered,
    });
    assert_eq!(
        cluster_sh(&["pg-primary"]).await,
        primary,
        "etcd's members coming back moved the primary"
    );
    tokio::time::sleep(WINDOW).await;

    run_a.progress.stop_starting();
    run_b.progress.stop_starting();
    let (a, b) = tokio::join!(run_a.finish(), run_b.finish());
    sampler.cancel.cancel();
    for f in &faults {
        report_line(&f.report(&sampler));
    }
    report_line(&format!(
        "[cluster] RabbitMQ leader moved from node {leader} to node {new_leader}"
    ));
    let reports = [&a, &b];
    for f in &db_faults {
        report_line(&f.report(&reports));
    }
    let standby_refused = reports
        .iter()
        .flat_map(|r| r.attempts.iter())
        .filter(|x| !x.is_2xx() && x.ended_at() >= standby_fault.0 && x.sent_at <= standby_fault.1)
        .count();
    report_line(&format!(
        "{standby_line} | {standby_refused} answers 503 + Retry-After"
    ));

    // The edges answered 2xx, or 503 with Retry-After, and the latter only during a database fault; never a 500 or
    // a hang.
    for report in reports {
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
                !x.is_2xx()
                    && !db_faults
                        .iter()
                        .map(|f| (f.start, f.over()))
                        .chain([standby_fault])
                        .any(|(start, over)| x.ended_at() >= start && x.sent_at <= over)
            })
            .collect();
        let windows: Vec<String> = db_faults
            .iter()
            .map(|f| (f.name, f.start, f.over()))
            .chain([("standby", standby_fault.0, standby_fault.1)])
            .map(|(name, start, over)| {
                let rel = |t: Instant| {
                    if t >= start {
                        (t - start).as_secs_f64()
                    } else {
                        -(start - t).as_secs_f64()
                    }
                };
                format!(
                    "{name}: over at {:.1}s; first outside sent at {:.1}s",
                    rel(over),
                    outside.first().map_or(f64::NAN, |x| rel(x.sent_at))
                )
            })
            .collect();
        assert!(
            outside.is_empty(),
            "503 outside the database faults ({windows:?}): {:?}",
            outside.iter().take(5).collect::<Vec<_>>()
        );
    }
    for f in &db_faults {
        // Patroni's promise, as the edges see it: 200 again within it.
        let first_200 = f
            .first_200(&reports)
            .unwrap_or_else(|| panic!("{}: no 200 after it", f.name));
        assert!(
            first_200 - f.start <= PROMISED_FAILOVER,
            "{}: first 200 only {:?} after the fault",
            f.name,
            first_200 - f.start
        );
    }
    // A crash costs 503s (the test really hit it) ...
    assert!(
        !db_faults[0].refused(&reports).is_empty(),
        "no request fell inside the postmaster's crash"
    );
    // ... a planned switchover refuses for no longer than Retry-After asks a provider to wait.
    let switchover = db_faults[2].refused(&reports);
    if let (Some(first), Some(last)) = (
        switchover.iter().map(|x| x.sent_at).min(),
        switchover.iter().map(|x| x.ended_at()).max(),
    ) {
        assert!(
            last - first <= RETRY_AFTER,
            "the planned switchover refused for {:?}, longer than Retry-After ({RETRY_AFTER:?})",
            last - first
        );
    }
    report_line(&format!(
        "[cluster] {} events acknowledged by two edges; {} answers 503 + Retry-After in all",
        a.events.len() + b.events.len(),
        reports
            .iter()
            .flat_map(|r| r.attempts.iter())
            .filter(|x| !x.is_2xx())
            .count(),
    ));

    // 0 lost, 0 doubled, ledger balanced.
    let checked = c.check(&[&a, &b]).await;
    assert_eq!(checked.processed, a.events.len() + b.events.len());
    c.teardown().await;
}
