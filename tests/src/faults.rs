//! Fault-injection harness: the REAL binaries as child processes, a provider-like load driver, and the
//! total-queue checker of `shared/docs/reliability-scenarios.md` (goals G1–G4).
//!
//! - [`Cluster`]: `hookline-edge --config FILE` (embedded relay, fast sweeps) on a fixed free port and any number
//!   of `hookline-worker --config FILE`, on a private database ([`TestDb`]) and a private RabbitMQ prefix. Each
//!   process is started, SIGKILLed (by its own pid) and restarted individually, optionally with `FAILPOINTS`.
//!   Their logs (JSON lines) go to files under the cluster's log directory, which tests read as evidence that a
//!   fault window was really hit.
//! - [`Load`]: N unique Stripe `payment_intent.succeeded` events (distinct payments, known amounts), some resent
//!   after their 2xx and some sent twice at once, with bounded concurrency and optional pacing. Each delivery is
//!   retried like a provider would (non-2xx or transport error → backoff, bounded attempts and time). Every HTTP
//!   attempt is recorded ([`Attempt`]), and whether each event was ever acknowledged.
//! - [`Cluster::check`]: drains, then asserts `lost = acked − processed = ∅`, `unexpected = processed − sent = ∅`,
//!   one row / marker / payment posting / transition per event, every 2xx backed by a stored row, a balanced
//!   ledger equal to the model computed from the events, and dead letters exactly the expected poison.
//!
//! Service faults (PostgreSQL and RabbitMQ stop/restart) go through [`PostgresGuard`] and [`BrokerGuard`], which
//! restore the service when dropped, panics included.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookline_bus::Topology;
use hookline_core::Config;
use lapin::options::{ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use serde_json::Value;
use sqlx::PgPool;

use crate::{
    assert_ledger_balanced, binary, ledger_rows, now, parse_config, secrets, stripe,
    stripe_headers, test_config_toml, Child, TestDb,
};

/// How long a drain may take after the faults are over.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a process may take to start (debug build, loaded machine).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Stripe fee in the test configuration (`providers.stripe.fee_bps`, `fee_fixed`).
pub const STRIPE_FEE_BPS: i64 = 399;
/// Fixed part of the Stripe fee in the test configuration.
pub const STRIPE_FEE_FIXED: i64 = 39;
/// Consumer name of the payments worker (processed markers, dead letters).
pub const CONSUMER: &str = "payments";

/// The model's fee: `round_half_up(amount × 399 / 10000) + 39`, never more than the amount. Written here
/// independently of `hookline_worker::payments::fee` so the checker does not trust the code it checks.
pub fn model_fee(amount: i64) -> i64 {
    ((amount * STRIPE_FEE_BPS + 5_000) / 10_000 + STRIPE_FEE_FIXED).min(amount)
}

/// Writes one line to the real stderr, bypassing libtest's capture, so per-test summaries show in normal runs.
pub fn report_line(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// A port that was free a moment ago: the child needs a fixed one (it is restarted on the same port).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// Runs `rabbitmqctl ARGS`, asserting success; returns stdout.
pub async fn rabbitmqctl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .await
        .expect("run rabbitmqctl");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `pg_ctlcluster --skip-systemctl-redirect 15 main ACTION EXTRA…`, asserting success.
pub async fn pg_ctlcluster(action: &str, extra: &[&str]) {
    let version = pg_cluster_version();
    let out = tokio::process::Command::new("pg_ctlcluster")
        .args([
            "--skip-systemctl-redirect",
            version.as_str(),
            "main",
            action,
        ])
        .args(extra)
        .output()
        .await
        .expect("run pg_ctlcluster");
    assert!(
        out.status.success(),
        "pg_ctlcluster {action} {extra:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Debian cluster version to control (the newest under /etc/postgresql; 15 on the machines of this project,
/// but a fresh machine may install another).
fn pg_cluster_version() -> String {
    std::fs::read_dir("/etc/postgresql")
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|v| v.parse::<u32>().ok())
        .max()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "15".to_string())
}

/// Waits until PostgreSQL accepts connections (a fresh connection to the maintenance database answers).
pub async fn wait_postgres_up(timeout: Duration) {
    let url = format!("{}/postgres", crate::pg_base_url());
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await {
            if sqlx::query("SELECT 1").execute(&mut conn).await.is_ok() {
                sqlx::Connection::close(conn).await.ok();
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "PostgreSQL did not come back within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Restores PostgreSQL when dropped (a failing test must not leave the cluster stopped for the others).
pub struct PostgresGuard(());

impl PostgresGuard {
    /// Arms the guard.
    pub fn new() -> PostgresGuard {
        PostgresGuard(())
    }
}

impl Default for PostgresGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for PostgresGuard {
    fn drop(&mut self) {
        // `start` on a running cluster fails harmlessly ("already running"); then wait until it accepts.
        let _ = Command::new("pg_ctlcluster")
            .args(["--skip-systemctl-redirect", "15", "main", "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for _ in 0..300 {
            let ready = Command::new("pg_isready")
                .args(["-h", "127.0.0.1", "-p", "5432", "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Restores the RabbitMQ application when dropped.
pub struct BrokerGuard(());

impl BrokerGuard {
    /// Arms the guard.
    pub fn new() -> BrokerGuard {
        BrokerGuard(())
    }
}

impl Default for BrokerGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for BrokerGuard {
    fn drop(&mut self) {
        // Idempotent: starting a running app is a no-op.
        let _ = Command::new("rabbitmqctl")
            .arg("start_app")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("rabbitmqctl")
            .args(["await_startup", "--timeout", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Settings of a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Lines appended to the `[edge]` table (e.g. `db_max_connections = 2`).
    pub extra_edge: String,
    /// `worker.prefetch`.
    pub prefetch: u16,
    /// `worker.concurrency`.
    pub concurrency: usize,
    /// `worker.db_max_connections`.
    pub worker_db_max_connections: u32,
    /// `amqp_url` of every process (e.g. through a [`crate::proxy::TcpProxy`]); `None`: the local broker.
    pub amqp_url: Option<String>,
    /// The edge logs in the default human-readable format (as `deploy/up.sh` runs it) instead of JSON lines,
    /// where an unescaped control character would land raw in the log file.
    pub edge_text_logs: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            extra_edge: String::new(),
            prefetch: 16,
            concurrency: 4,
            worker_db_max_connections: 6,
            amqp_url: None,
            edge_text_logs: false,
        }
    }
}

/// One child process of the cluster and its log file.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.0.try_wait().ok().flatten()
    }
}

/// Live message counts of the cluster's queues (passive declare).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Payments queue: ready messages.
    pub ready: u32,
    /// Payments queue: consumers.
    pub consumers: u32,
    /// Dead-letter queue: messages.
    pub dlq: u32,
}

/// Message counts of the cluster's queues (from `rabbitmqctl list_queues`, lagging).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Payments queue: ready messages.
    pub ready: u64,
    /// Payments queue: delivered, not yet acknowledged.
    pub unacked: u64,
    /// Payments queue: consumers.
    pub consumers: u64,
    /// Dead-letter queue: all messages.
    pub dlq: u64,
}

/// What [`Cluster::check`] found (after asserting it).
#[derive(Debug, Clone, Default)]
pub struct Checked {
    /// Events with a processed marker.
    pub processed: usize,
    /// Events dead-lettered.
    pub dead_lettered: usize,
    /// Stored raw events.
    pub stored: usize,
}

/// The real binaries on private resources: one edge (with its embedded relay) and any number of workers.
pub struct Cluster {
    /// Name used in summaries and file names.
    pub name: String,
    /// The private database.
    pub db: TestDb,
    /// The parsed configuration (the same the children read).
    pub config: Config,
    /// The configuration file given to every child with `--config`.
    pub config_path: PathBuf,
    /// The edge's fixed port (kept across restarts).
    pub port: u16,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Where the children's logs go (one file per process start).
    pub log_dir: PathBuf,
    /// When the cluster was created.
    pub started: Instant,
    edge: Option<Proc>,
    workers: Vec<Option<Proc>>,
    history: Vec<(String, PathBuf)>,
    http: reqwest::Client,
    edge_text_logs: bool,
}

impl Cluster {
    /// A new database, RabbitMQ prefix, port and configuration file; no process is started yet.
    pub async fn new(name: &str, opts: ClusterOptions) -> Cluster {
        let db = TestDb::new().await;
        let port = free_port();
        let tail = format!(
            "[relay]\nsweep_interval_ms = 200\nsweep_min_age_ms = 300\n\
             [worker]\nprefetch = {}\nconcurrency = {}\ndb_max_connections = {}",
            opts.prefetch, opts.concurrency, opts.worker_db_max_connections
        );
        let toml = test_config_toml(&db.url, &opts.extra_edge, &tail);
        let default_listen = "listen = \"127.0.0.1:0\"";
        assert!(
            toml.contains(default_listen),
            "test_config_toml no longer listens on port 0"
        );
        let mut toml = toml.replace(default_listen, &format!("listen = \"127.0.0.1:{port}\""));
        if let Some(url) = &opts.amqp_url {
            // A top-level key: it must come before the first table.
            toml = format!("amqp_url = \"{url}\"\n{toml}");
        }
        let config = parse_config(&toml);
        let log_dir =
            std::env::temp_dir().join(format!("hookline-faults-{name}-{}", config.amqp.prefix));
        std::fs::create_dir_all(&log_dir).expect("create the log directory");
        let config_path = log_dir.join("hookline.toml");
        std::fs::write(&config_path, &toml).expect("write the config file");
        for (bin, point) in [
            ("hookline-edge", "edge.before_commit"),
            ("hookline-edge", "relay.before_publish"),
            ("hookline-worker", "worker.before_commit"),
        ] {
            assert_has_failpoint(bin, point);
        }
        Cluster {
            name: name.to_string(),
            db,
            config,
            config_path,
            port,
            base: format!("http://127.0.0.1:{port}"),
            log_dir,
            started: Instant::now(),
            edge: None,
            workers: Vec::new(),
            history: Vec::new(),
            edge_text_logs: opts.edge_text_logs,
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(5))
                .build()
                .expect("http client"),
        }
    }

    fn spawn(&mut self, bin: &str, role: &str, failpoints: Option<&str>) -> Proc {
        let log = self
            .log_dir
            .join(format!("{:02}-{role}.log", self.history.len() + 1));
        let file = std::fs::File::create(&log).expect("create a log file");
        let mut cmd = Command::new(binary(bin));
        cmd.arg("--config")
            .arg(&self.config_path)
            // Nothing from the test's environment may override the file or inject fail points.
            .env_remove("DATABASE_URL")
            .env_remove("AMQP_URL")
            .env_remove("HOOKLINE_CONFIG")
            .env_remove("FAILPOINTS")
            .env(
                "RUST_LOG",
                "info,sqlx=warn,lapin=warn,actix_server=warn,hookline_worker=debug",
            )
            .env(
                "HOOKLINE_LOG_FORMAT",
                if role == "edge" && self.edge_text_logs {
                    "text"
                } else {
                    "json"
                },
            )
            // As on production machines (and ours): errors must still be logged without backtraces.
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("clone log file"))
            .stderr(file);
        if let Some(fp) = failpoints {
            cmd.env("FAILPOINTS", fp);
        }
        self.history.push((role.to_string(), log.clone()));
        Proc {
            child: Child(cmd.spawn().expect("spawn child process")),
            log,
        }
    }

    /// Starts the edge (optionally with `FAILPOINTS`) and waits until `/healthz` answers 200.
    pub async fn start_edge(&mut self, failpoints: Option<&str>) {
        assert!(self.edge.is_none(), "the edge is already running");
        let mut proc = self.spawn("hookline-edge", "edge", failpoints);
        let url = format!("{}/healthz", self.base);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = proc.exited() {
                panic!(
                    "the edge exited at start-up ({status}):\n{}",
                    tail(&proc.log, 30)
                );
            }
            if self
                .http
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the edge did not answer /healthz within {START_TIMEOUT:?}:\n{}",
                tail(&proc.log, 30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.edge = Some(proc);
    }

    /// SIGKILL of the edge (by its pid): no graceful shutdown, in-flight requests are cut.
    pub fn kill_edge(&mut self) {
        let mut proc = self.edge.take().expect("the edge is running");
        proc.child.kill9();
    }

    /// SIGKILL (if running), then a fresh start on the same port.
    pub async fn restart_edge(&mut self, failpoints: Option<&str>) {
        if self.edge.is_some() {
            self.kill_edge();
        }
        self.start_edge(failpoints).await;
    }

    /// Starts a worker (optionally with `FAILPOINTS`) and waits until it consumes; returns its slot.
    pub async fn start_worker(&mut self, failpoints: Option<&str>) -> usize {
        let slot = self.workers.len();
        self.workers.push(None);
        self.start_worker_in(slot, failpoints).await;
        slot
    }

    async fn start_worker_in(&mut self, slot: usize, failpoints: Option<&str>) {
        assert!(self.workers[slot].is_none(), "worker {slot} is running");
        let mut proc = self.spawn("hookline-worker", &format!("worker{slot}"), failpoints);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = proc.exited() {
                panic!(
                    "worker {slot} exited at start-up ({status}):\n{}",
                    tail(&proc.log, 30)
                );
            }
            if !messages(&proc.log, "worker consuming").is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "worker {slot} did not start consuming within {START_TIMEOUT:?}:\n{}",
                tail(&proc.log, 30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.workers[slot] = Some(proc);
    }

    /// SIGKILL of worker `slot` (by its pid).
    pub fn kill_worker(&mut self, slot: usize) {
        let mut proc = self.workers[slot].take().expect("the worker is running");
        proc.child.kill9();
    }

    /// SIGKILL of worker `slot` (if running), then a fresh start in the same slot.
    pub async fn restart_worker(&mut self, slot: usize, failpoints: Option<&str>) {
        if self.workers[slot].is_some() {
            self.kill_worker(slot);
        }
        self.start_worker_in(slot, failpoints).await;
    }

    /// Panics with the log tail if a process that should run has exited (a crash is never an expected outcome).
    pub fn assert_running(&mut self) {
        if let Some(edge) = self.edge.as_mut() {
            if let Some(status) = edge.exited() {
                panic!("the edge exited ({status}):\n{}", tail(&edge.log, 30));
            }
        }
        for (slot, w) in self.workers.iter_mut().enumerate() {
            if let Some(w) = w.as_mut() {
                if let Some(status) = w.exited() {
                    panic!("worker {slot} exited ({status}):\n{}", tail(&w.log, 30));
                }
            }
        }
    }

    /// The edge's pid, while it runs.
    pub fn edge_pid(&self) -> Option<u32> {
        self.edge.as_ref().map(|p| p.child.0.id())
    }

    /// Worker `slot`'s pid, while it runs.
    pub fn worker_pid(&self, slot: usize) -> Option<u32> {
        self.workers
            .get(slot)
            .and_then(|w| w.as_ref())
            .map(|p| p.child.0.id())
    }

    /// The edge's exit status once it has exited (reaps it), `None` while it runs.
    pub fn edge_exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.edge.as_mut().and_then(Proc::exited)
    }

    /// Forgets an edge that exited by itself, so that [`Cluster::start_edge`] can start a new one.
    pub fn forget_edge(&mut self) {
        self.edge = None;
    }

    /// Log file of the current edge process.
    pub fn edge_log(&self) -> PathBuf {
        self.edge.as_ref().expect("the edge is running").log.clone()
    }

    /// Log file of the current process in worker slot `slot`.
    pub fn worker_log(&self, slot: usize) -> PathBuf {
        self.workers[slot]
            .as_ref()
            .expect("the worker is running")
            .log
            .clone()
    }

    /// The `fields` of every log line with this message, over every process (past and present) whose role
    /// starts with `role` (`edge`, `worker`, `worker0`).
    pub fn log_messages(&self, role: &str, message: &str) -> Vec<Value> {
        self.history
            .iter()
            .filter(|(r, _)| r.starts_with(role))
            .flat_map(|(_, log)| messages(log, message))
            .collect()
    }

    /// Runs the operator command `hookline --config FILE ARGS…` to completion (at most 120 s) with a clean
    /// environment; returns its output.
    pub async fn hookline(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = tokio::process::Command::new(binary("hookline"));
        cmd.arg("--config")
            .arg(&self.config_path)
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("AMQP_URL")
            .env_remove("HOOKLINE_CONFIG")
            .env_remove("FAILPOINTS")
            .env("RUST_LOG", "info,sqlx=warn,lapin=warn")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("hookline {args:?} did not finish within 120 s"))
            .expect("run hookline")
    }

    /// The cluster's database pool (for assertions and for holding locks).
    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// The database's name.
    pub fn db_name(&self) -> String {
        self.db
            .url
            .rsplit('/')
            .next()
            .expect("database url")
            .to_string()
    }

    /// Queue names of this cluster.
    pub fn topology(&self) -> Topology {
        Topology::new(&self.config.amqp.prefix, self.config.amqp.delivery_limit)
    }

    /// `GET /healthz`: status and latency, or `None` on a transport error.
    pub async fn healthz(&self) -> Option<(u16, Duration)> {
        let started = Instant::now();
        let res = self
            .http
            .get(format!("{}/healthz", self.base))
            .send()
            .await
            .ok()?;
        Some((res.status().as_u16(), started.elapsed()))
    }

    /// Provider event ids stored in `webhook_events` (provider `stripe`).
    pub async fn stored_ids(&self) -> HashSet<String> {
        sqlx::query_scalar("SELECT provider_event_id FROM webhook_events WHERE provider = 'stripe'")
            .fetch_all(self.pool())
            .await
            .expect("read stored events")
            .into_iter()
            .collect()
    }

    /// Provider event ids with a payments processed marker.
    pub async fn processed_ids(&self) -> HashSet<String> {
        sqlx::query_scalar(
            "SELECT e.provider_event_id FROM webhook_events e
             JOIN processed_events p ON p.event_id = e.id AND p.consumer = $1",
        )
        .bind(CONSUMER)
        .fetch_all(self.pool())
        .await
        .expect("read processed events")
        .into_iter()
        .collect()
    }

    /// Provider event ids with an (unresolved) payments dead letter.
    pub async fn dead_letter_ids(&self) -> HashSet<String> {
        sqlx::query_scalar(
            "SELECT e.provider_event_id FROM dead_letters d JOIN webhook_events e ON e.id = d.event_id
             WHERE d.consumer = $1 AND d.resolved_at IS NULL",
        )
        .bind(CONSUMER)
        .fetch_all(self.pool())
        .await
        .expect("read dead letters")
        .into_iter()
        .collect()
    }

    /// Provider event ids of stored events not yet marked published, older than `min_age`.
    pub async fn unpublished_ids(&self, min_age: Duration) -> HashSet<String> {
        sqlx::query_scalar(
            "SELECT provider_event_id FROM webhook_events
             WHERE published_at IS NULL AND received_at <= now() - make_interval(secs => $1)",
        )
        .bind(min_age.as_secs_f64())
        .fetch_all(self.pool())
        .await
        .expect("read unpublished events")
        .into_iter()
        .collect()
    }

    /// Number of payments processed markers.
    pub async fn marker_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM processed_events WHERE consumer = $1")
            .bind(CONSUMER)
            .fetch_one(self.pool())
            .await
            .expect("count markers")
    }

    /// Stored events with neither a processed marker nor a dead letter.
    pub async fn unprocessed_count(&self) -> i64 {
        crate::pending_events(self.pool()).await
    }

    /// Waits until the payments queue has exactly `consumers` consumers (live, over AMQP) and returns the live
    /// counts. After a kill, a consumer count of 0 means the broker noticed the dead connection and returned its
    /// unacknowledged deliveries to the queue (one queue command does both).
    pub async fn wait_consumers(&self, consumers: u32, timeout: Duration) -> LiveCounts {
        let deadline = Instant::now() + timeout;
        loop {
            let counts = self.live_counts().await;
            if counts.consumers == consumers {
                return counts;
            }
            assert!(
                Instant::now() < deadline,
                "the payments queue never had {consumers} consumers: {counts:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the workers stopped making progress (no new processed marker for `quiet`, at least
    /// `min_markers` already) while at least `backlog` stored events wait: the fail point holds every runtime
    /// thread.
    pub async fn wait_workers_frozen(
        &self,
        min_markers: i64,
        backlog: i64,
        quiet: Duration,
        timeout: Duration,
    ) {
        let deadline = Instant::now() + timeout;
        let mut seen = (-1, Instant::now());
        loop {
            let markers = self.marker_count().await;
            if markers != seen.0 {
                seen = (markers, Instant::now());
            } else if seen.1.elapsed() >= quiet
                && markers >= min_markers
                && self.unprocessed_count().await >= backlog
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the workers never froze ({markers} markers)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Live counts (passive `queue.declare` over AMQP): ready messages and consumers of the payments queue,
    /// messages in the DLQ.
    pub async fn live_counts(&self) -> LiveCounts {
        let t = self.topology();
        let conn = hookline_bus::connect(&self.config.amqp_url, "hookline-faults-probe")
            .await
            .expect("amqp");
        let ch = conn.create_channel().await.expect("channel");
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let mut counts = LiveCounts::default();
        if let Ok(q) = ch
            .queue_declare(
                t.payments_queue.as_str().into(),
                passive,
                FieldTable::default(),
            )
            .await
        {
            counts.ready = q.message_count();
            counts.consumers = q.consumer_count();
        }
        let ch = conn.create_channel().await.expect("channel");
        if let Ok(q) = ch
            .queue_declare(
                t.dead_letter_queue.as_str().into(),
                passive,
                FieldTable::default(),
            )
            .await
        {
            counts.dlq = q.message_count();
        }
        conn.close(200, "".into()).await.ok();
        counts
    }

    /// Counts of the payments queue and its DLQ from `rabbitmqctl list_queues` (absent queues count 0). For
    /// quorum queues these statistics are refreshed on the queue's tick (5 s on RabbitMQ 3.10): they lag, so
    /// wait for them to reflect a known state before trusting them. The only source of the unacked count.
    pub async fn queue_stats(&self) -> QueueCounts {
        let t = self.topology();
        let out = rabbitmqctl(&[
            "-q",
            "list_queues",
            "name",
            "messages_ready",
            "messages_unacknowledged",
            "messages",
            "consumers",
            "--no-table-headers",
        ])
        .await;
        let mut counts = QueueCounts::default();
        for line in out.lines() {
            let cols: Vec<&str> = line.split('\t').collect();
            if cols.len() < 5 {
                continue;
            }
            let n = |i: usize| cols[i].trim().parse::<u64>().unwrap_or(0);
            if cols[0] == t.payments_queue {
                counts.ready = n(1);
                counts.unacked = n(2);
                counts.consumers = n(4);
            } else if cols[0] == t.dead_letter_queue {
                counts.dlq = n(3);
            }
        }
        counts
    }

    /// The total-queue checker. Waits for a full drain (every acknowledged event processed, every expected poison
    /// dead-lettered, nothing left unpublished, queued or unacknowledged), then asserts G1/G2 against the model
    /// and prints a one-line summary. Every event of `reports` must have been acknowledged in the end.
    pub async fn check(&mut self, reports: &[&LoadReport]) -> Checked {
        self.assert_running();
        let mut sent: HashMap<String, &SentEvent> = HashMap::new();
        for r in reports {
            for e in &r.events {
                assert!(
                    sent.insert(e.provider_event_id.clone(), e).is_none(),
                    "two load runs used the event id {}",
                    e.provider_event_id
                );
            }
        }
        let acked: HashSet<String> = reports.iter().flat_map(|r| r.acked_ids()).collect();
        let poison: HashSet<String> = sent
            .values()
            .filter(|e| e.poison)
            .map(|e| e.provider_event_id.clone())
            .collect();
        let unacked: Vec<&String> = sent.keys().filter(|id| !acked.contains(*id)).collect();
        assert!(
            unacked.is_empty(),
            "{}: {} events never got a 2xx despite the retries (e.g. {:?}); logs in {}",
            self.name,
            unacked.len(),
            unacked.iter().take(5).collect::<Vec<_>>(),
            self.log_dir.display()
        );

        // G1 at the request level, checked first (a row never disappears): every 2xx answer is backed by a
        // stored row.
        let stored_now = self.stored_ids().await;
        let ok_without_row: Vec<&Attempt> = reports
            .iter()
            .flat_map(|r| r.attempts.iter())
            .filter(|a| a.is_2xx() && !stored_now.contains(&a.provider_event_id))
            .collect();
        assert!(
            ok_without_row.is_empty(),
            "{}: {} 2xx answers for events that are not stored, e.g. {:?}",
            self.name,
            ok_without_row.len(),
            ok_without_row.iter().take(3).collect::<Vec<_>>()
        );

        // Drain: every acknowledged event processed (or, for poison, dead-lettered).
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            let processed = self.processed_ids().await;
            let dead = self.dead_letter_ids().await;
            let missing: Vec<&String> = acked
                .iter()
                .filter(|id| {
                    if poison.contains(*id) {
                        !dead.contains(*id) && !processed.contains(*id)
                    } else {
                        !processed.contains(*id)
                    }
                })
                .collect();
            if missing.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                self.assert_running();
                panic!(
                    "{}: LOST? drain timed out after {DRAIN_TIMEOUT:?}: {} acknowledged events not \
                     processed (e.g. {:?}); unpublished: {}; logs in {}",
                    self.name,
                    missing.len(),
                    missing.iter().take(5).collect::<Vec<_>>(),
                    self.unpublished_ids(Duration::ZERO).await.len(),
                    self.log_dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Quiesce: nothing left to publish or queued (live counts), nothing unacknowledged (statistics, which may
        // lag), so no late duplicate can still change the ledger.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = (LiveCounts::default(), QueueCounts::default());
        loop {
            let unpublished = self.unpublished_ids(Duration::ZERO).await.len();
            if unpublished == 0 {
                last.0 = self.live_counts().await;
                if last.0.ready == 0 && last.0.dlq as usize >= poison.len() {
                    last.1 = self.queue_stats().await;
                    if last.1.unacked == 0 {
                        break;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "{}: the pipeline did not quiesce: {unpublished} unpublished, queues {last:?}; logs in {}",
                self.name,
                self.log_dir.display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.assert_running();

        let pool = self.pool().clone();
        // One row per event, and nothing stored that was never sent.
        let stored: Vec<(String, i64)> = sqlx::query_as(
            "SELECT provider || ':' || provider_event_id, count(*) FROM webhook_events GROUP BY 1",
        )
        .fetch_all(&pool)
        .await
        .expect("count stored events");
        let more_than_once: Vec<&(String, i64)> = stored.iter().filter(|(_, n)| *n > 1).collect();
        assert!(
            more_than_once.is_empty(),
            "events stored twice: {more_than_once:?}"
        );
        let stored_ids: HashSet<String> = stored
            .iter()
            .filter_map(|(k, _)| k.strip_prefix("stripe:").map(str::to_string))
            .collect();
        assert_eq!(
            stored_ids.len(),
            stored.len(),
            "events of other providers were stored"
        );
        let stored_unsent: Vec<&String> = stored_ids
            .iter()
            .filter(|id| !sent.contains_key(*id))
            .collect();
        assert!(
            stored_unsent.is_empty(),
            "stored but never sent: {stored_unsent:?}"
        );

        // Markers: at most one per event; lost and unexpected empty.
        let markers: Vec<(String, i64, String)> = sqlx::query_as(
            "SELECT e.provider_event_id, count(*), min(p.outcome) FROM processed_events p
             JOIN webhook_events e ON e.id = p.event_id WHERE p.consumer = $1 GROUP BY 1",
        )
        .bind(CONSUMER)
        .fetch_all(&pool)
        .await
        .expect("read markers");
        let orphan_markers: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM processed_events p
             WHERE NOT EXISTS (SELECT 1 FROM webhook_events e WHERE e.id = p.event_id)",
        )
        .fetch_one(&pool)
        .await
        .expect("count orphan markers");
        assert_eq!(
            orphan_markers, 0,
            "processed markers without a stored event"
        );
        let twice: Vec<&(String, i64, String)> = markers.iter().filter(|m| m.1 > 1).collect();
        assert!(
            twice.is_empty(),
            "events processed more than once: {twice:?}"
        );
        let not_applied: Vec<&(String, i64, String)> =
            markers.iter().filter(|m| m.2 != "applied").collect();
        assert!(
            not_applied.is_empty(),
            "processed with an unexpected outcome: {not_applied:?}"
        );
        let processed: HashSet<String> = markers.into_iter().map(|m| m.0).collect();
        let mut lost: Vec<&String> = acked
            .iter()
            .filter(|id| !processed.contains(*id) && !poison.contains(*id))
            .collect();
        lost.sort();
        assert!(
            lost.is_empty(),
            "LOST (acknowledged, never processed): {lost:?}"
        );
        let mut unexpected: Vec<&String> = processed
            .iter()
            .filter(|id| !sent.contains_key(*id))
            .collect();
        unexpected.sort();
        assert!(
            unexpected.is_empty(),
            "UNEXPECTED (processed, never sent): {unexpected:?}"
        );

        // Poison: dead-lettered exactly, never processed; the DLQ holds exactly those.
        let dead = self.dead_letter_ids().await;
        assert_eq!(dead, poison, "dead letters differ from the expected poison");
        let processed_poison: Vec<&String> = poison.intersection(&processed).collect();
        assert!(
            processed_poison.is_empty(),
            "poison events were processed: {processed_poison:?}"
        );
        let dlq = self.live_counts().await.dlq;
        assert_eq!(
            dlq as usize,
            poison.len(),
            "DLQ messages differ from the expected poison"
        );

        // Ledger: balanced, one payment posting per payment, exactly the model of the processed events.
        assert_ledger_balanced(&pool).await;
        let double: Vec<(String, i64)> = sqlx::query_as(
            "SELECT reference, count(*) FROM ledger_transactions WHERE kind = 'payment'
             GROUP BY 1 HAVING count(*) > 1",
        )
        .fetch_all(&pool)
        .await
        .expect("count postings");
        assert!(double.is_empty(), "payments posted twice: {double:?}");
        let mut model: Vec<(String, String, String, i64)> = Vec::new();
        let (mut revenue, mut fees, mut receivable) = (0i64, 0i64, 0i64);
        for id in &processed {
            let e = sent[id];
            let fee = model_fee(e.amount);
            revenue -= e.amount;
            fees += fee;
            receivable += e.amount - fee;
            for (account, amount) in [
                ("provider_fees", fee),
                ("provider_receivable", e.amount - fee),
                ("revenue", -e.amount),
            ] {
                model.push((
                    "payment".into(),
                    e.payment_id.clone(),
                    account.into(),
                    amount,
                ));
            }
        }
        model.sort();
        let mut actual = ledger_rows(&pool).await;
        actual.sort();
        let totals: BTreeMap<String, i64> = actual.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.2.clone()).or_default() += r.3;
            m
        });
        assert_eq!(
            totals.get("revenue").copied().unwrap_or(0),
            revenue,
            "revenue total"
        );
        assert_eq!(
            totals.get("provider_fees").copied().unwrap_or(0),
            fees,
            "fees total"
        );
        assert_eq!(
            totals.get("provider_receivable").copied().unwrap_or(0),
            receivable,
            "receivable total"
        );
        if actual != model {
            let a: HashSet<&(String, String, String, i64)> = actual.iter().collect();
            let m: HashSet<&(String, String, String, i64)> = model.iter().collect();
            panic!(
                "ledger differs from the model: extra {:?}, missing {:?}",
                a.difference(&m).take(6).collect::<Vec<_>>(),
                m.difference(&a).take(6).collect::<Vec<_>>()
            );
        }
        // One state transition per payment (created → succeeded), one payment per processed event.
        let transitions: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT p.provider_payment_id, count(t.id),
                    count(t.id) FILTER (WHERE t.to_status = 'succeeded')
             FROM payments p LEFT JOIN payment_transitions t ON t.payment_id = p.id GROUP BY 1",
        )
        .fetch_all(&pool)
        .await
        .expect("read transitions");
        let odd: Vec<&(String, i64, i64)> = transitions
            .iter()
            .filter(|(_, n, s)| *n != 1 || *s != 1)
            .collect();
        assert!(
            odd.is_empty(),
            "payments with other than one transition: {odd:?}"
        );
        let expected_payments: HashSet<String> = processed
            .iter()
            .map(|id| sent[id].payment_id.clone())
            .collect();
        let payments: HashSet<String> = transitions.into_iter().map(|t| t.0).collect();
        assert_eq!(
            payments, expected_payments,
            "payments differ from the processed events"
        );

        let checked = Checked {
            processed: processed.len(),
            dead_lettered: dead.len(),
            stored: stored_ids.len(),
        };
        let requests: usize = reports.iter().map(|r| r.attempts.len()).sum();
        let retries: usize = reports.iter().map(|r| r.retries()).sum();
        let duplicates: usize = reports.iter().map(|r| r.duplicate_deliveries()).sum();
        let non_2xx: usize = reports.iter().map(|r| r.non_2xx()).sum();
        let transport: usize = reports.iter().map(|r| r.transport_errors()).sum();
        let load_secs: f64 = reports.iter().map(|r| r.elapsed.as_secs_f64()).sum();
        report_line(&format!(
            "[faults] {}: sent={} acked={} requests={requests} retries={retries} duplicates={duplicates} \
             non_2xx={non_2xx} transport_errors={transport} stored={} processed={} dead_lettered={} \
             load={load_secs:.1}s elapsed={:.1}s",
            self.name,
            sent.len(),
            acked.len(),
            checked.stored,
            checked.processed,
            checked.dead_lettered,
            self.started.elapsed().as_secs_f64()
        ));
        checked
    }

    /// Stops every process, deletes the RabbitMQ objects and the files. Call at the end of a passing test (a
    /// failing one leaves the logs and the database for inspection; its processes die with the `Cluster`).
    pub async fn teardown(mut self) {
        if let Some(mut e) = self.edge.take() {
            e.child.kill9();
        }
        for w in self.workers.iter_mut() {
            if let Some(mut w) = w.take() {
                w.child.kill9();
            }
        }
        if let Ok(conn) = hookline_bus::connect(&self.config.amqp_url, "hookline-test").await {
            if let Ok(ch) = conn.create_channel().await {
                let t = self.topology();
                for q in [&t.payments_queue, &t.dead_letter_queue] {
                    ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                        .await
                        .ok();
                }
                for e in [&t.exchange, &t.dead_letter_exchange] {
                    ch.exchange_delete(e.as_str().into(), ExchangeDeleteOptions::default())
                        .await
                        .ok();
                }
            }
            conn.close(200, "".into()).await.ok();
        }
        self.db.pool.close().await;
        // Drop the database: hundreds of leftover test databases make every checkpoint (and so every
        // PostgreSQL stop) slow.
        let name = self.db_name();
        let admin = format!("{}/postgres", crate::pg_base_url());
        if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await {
            sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .execute(&mut conn)
                .await
                .ok();
            sqlx::Connection::close(conn).await.ok();
        }
        std::fs::remove_dir_all(&self.log_dir).ok();
    }
}

/// Panics unless `bin` was built with the fail point `point` (a plain `cargo build -p hookline-edge` drops the
/// feature, and the fault tests would then silently test nothing).
fn assert_has_failpoint(bin: &str, point: &str) {
    static CHECKED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let key = format!("{bin}:{point}");
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    let set = checked.get_or_insert_with(HashSet::new);
    if set.contains(&key) {
        return;
    }
    let bytes = std::fs::read(binary(bin)).expect("read the binary");
    let needle = point.as_bytes();
    assert!(
        bytes.windows(needle.len()).any(|w| w == needle),
        "{bin} was built without the fail point {point}: run `cargo build --workspace --bins` (the tests \
         crate enables the failpoints features)"
    );
    set.insert(key);
}

/// The last `n` lines of a file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The `fields` of every JSON log line of `path` whose message is `message`.
pub fn messages(path: &Path, message: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("fields").cloned())
        .filter(|f| f.get("message").and_then(Value::as_str) == Some(message))
        .collect()
}

/// Which copy of an event a request carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// The first delivery.
    First,
    /// An exact resend after the first one was acknowledged.
    Resend,
    /// The twin sent at the same moment as the first delivery.
    Concurrent,
}

/// One HTTP attempt of the load driver.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// Index of the event in its load.
    pub event: usize,
    /// Its provider event id.
    pub provider_event_id: String,
    /// Which delivery this attempt belongs to.
    pub delivery: Delivery,
    /// Attempt number within the delivery (1 = first try).
    pub number: u32,
    /// When the request was sent.
    pub sent_at: Instant,
    /// Until the answer's head (or the transport error).
    pub latency: Duration,
    /// HTTP status, `None` on a transport error or timeout.
    pub status: Option<u16>,
    /// `duplicate` of a 2xx JSON answer.
    pub duplicate: Option<bool>,
    /// The transport error.
    pub error: Option<String>,
}

impl Attempt {
    /// Answered 2xx.
    pub fn is_2xx(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// When the answer (or the error) arrived.
    pub fn ended_at(&self) -> Instant {
        self.sent_at + self.latency
    }

    /// Sent at or after `from` and answered at or before `to`.
    pub fn within(&self, from: Instant, to: Instant) -> bool {
        self.sent_at >= from && self.ended_at() <= to
    }
}

/// One event of a load run.
#[derive(Debug, Clone)]
pub struct SentEvent {
    /// Index in its load.
    pub index: usize,
    /// `evt_…`.
    pub provider_event_id: String,
    /// `pi_…`.
    pub payment_id: String,
    /// Amount in centavos (`amount_received` is its negation for poison).
    pub amount: i64,
    /// Sent with a negative `amount_received`: must be dead-lettered.
    pub poison: bool,
    /// Resent once after its first 2xx.
    pub resent: bool,
    /// Sent twice at the same moment.
    pub concurrent: bool,
    /// Ever answered 2xx.
    pub acked: bool,
    body: Arc<Vec<u8>>,
}

/// Live counters of a running load, for deciding when to inject a fault.
#[derive(Debug, Default)]
pub struct Progress {
    /// Events whose first delivery has begun.
    pub started: AtomicUsize,
    /// Events with a 2xx.
    pub acked: AtomicUsize,
    /// Requests awaiting an answer.
    pub in_flight: AtomicUsize,
    /// Requests finished (answer or transport error).
    pub responses: AtomicUsize,
    /// Non-2xx answers and transport errors so far.
    pub failures: AtomicUsize,
    /// HTTP answers so far, any status (resends and twins included).
    pub answered: AtomicUsize,
    attempts: Mutex<Vec<Attempt>>,
    acked_ids: Mutex<HashSet<String>>,
    in_flight_ids: Mutex<HashMap<String, usize>>,
}

impl Progress {
    /// Events acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::SeqCst)
    }

    /// Ids of the events acknowledged so far.
    pub fn acked_ids(&self) -> HashSet<String> {
        self.acked_ids.lock().expect("acked ids").clone()
    }

    /// Ids of the events with a request awaiting its answer right now.
    pub fn in_flight_ids(&self) -> HashSet<String> {
        self.in_flight_ids
            .lock()
            .expect("in-flight ids")
            .keys()
            .cloned()
            .collect()
    }

    /// The attempts recorded so far.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().expect("attempts").clone()
    }

    /// Waits until at least `n` events are acknowledged.
    pub async fn wait_acked(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.acked() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} events acknowledged after {timeout:?}",
                self.acked()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the edge is stuck behind a fail point: at least `min_answered` HTTP answers so far,
    /// requests outstanding, and no answer at all during `quiet`. Returns the ids in flight.
    ///
    /// fail-rs's `sleep` blocks the thread, and an actix worker thread serves many connections: besides the
    /// requests held at the fail point, others on the same thread are stuck wherever they were (possibly after
    /// their commit). Tests must not assume every request in flight is at the fail point.
    pub async fn wait_stalled(
        &self,
        min_answered: usize,
        quiet: Duration,
        timeout: Duration,
    ) -> HashSet<String> {
        let deadline = Instant::now() + timeout;
        let mut seen = (usize::MAX, Instant::now());
        loop {
            let responses = self.responses.load(Ordering::SeqCst);
            if responses != seen.0 {
                seen = (responses, Instant::now());
            } else if seen.1.elapsed() >= quiet
                && self.answered.load(Ordering::SeqCst) >= min_answered
                && self.in_flight.load(Ordering::SeqCst) > 0
            {
                return self.in_flight_ids();
            }
            assert!(
                Instant::now() < deadline,
                "the edge never stalled ({} answered, {} in flight)",
                self.answered.load(Ordering::SeqCst),
                self.in_flight.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn record(&self, a: Attempt) {
        self.responses.fetch_add(1, Ordering::SeqCst);
        if a.status.is_some() {
            self.answered.fetch_add(1, Ordering::SeqCst);
        }
        if !a.is_2xx() {
            self.failures.fetch_add(1, Ordering::SeqCst);
        }
        self.attempts.lock().expect("attempts").push(a);
    }
}

/// Everything a load run did.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// The load's tag (event id prefix).
    pub tag: String,
    /// Every event, with whether it was acknowledged.
    pub events: Vec<SentEvent>,
    /// Every HTTP attempt, in completion order.
    pub attempts: Vec<Attempt>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl LoadReport {
    /// Ids of the acknowledged events.
    pub fn acked_ids(&self) -> HashSet<String> {
        self.events
            .iter()
            .filter(|e| e.acked)
            .map(|e| e.provider_event_id.clone())
            .collect()
    }

    /// Events never acknowledged.
    pub fn unacked(&self) -> Vec<&SentEvent> {
        self.events.iter().filter(|e| !e.acked).collect()
    }

    /// Attempts after the first of their delivery.
    pub fn retries(&self) -> usize {
        self.attempts.iter().filter(|a| a.number > 1).count()
    }

    /// Deliveries beyond the first of each event (resends and concurrent twins).
    pub fn duplicate_deliveries(&self) -> usize {
        self.events
            .iter()
            .map(|e| usize::from(e.resent) + usize::from(e.concurrent))
            .sum()
    }

    /// Answers other than 2xx.
    pub fn non_2xx(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| a.status.is_some() && !a.is_2xx())
            .count()
    }

    /// Attempts that got no HTTP answer.
    pub fn transport_errors(&self) -> usize {
        self.attempts.iter().filter(|a| a.status.is_none()).count()
    }

    /// Number of answers per status (`0` = transport error).
    pub fn statuses(&self) -> BTreeMap<u16, usize> {
        self.attempts.iter().fold(BTreeMap::new(), |mut m, a| {
            *m.entry(a.status.unwrap_or(0)).or_default() += 1;
            m
        })
    }

    /// The attempts of one event, in completion order.
    pub fn attempts_of(&self, provider_event_id: &str) -> Vec<&Attempt> {
        self.attempts
            .iter()
            .filter(|a| a.provider_event_id == provider_event_id)
            .collect()
    }
}

/// A load: N unique Stripe `payment_intent.succeeded` events sent like a provider would.
#[derive(Debug, Clone)]
pub struct Load {
    /// Event id prefix (unique per run): `evt_{tag}_{i}`, `pi_{tag}_{i}`.
    pub tag: String,
    /// Number of unique events.
    pub events: usize,
    /// Events in progress at once.
    pub concurrency: usize,
    /// Every k-th event is resent (exactly) after its 2xx; 0 = never.
    pub resend_every: usize,
    /// Every k-th event is sent twice at the same moment; 0 = never.
    pub concurrent_every: usize,
    /// Start at most this many events per second (None = as fast as the concurrency allows).
    pub rate_per_sec: Option<f64>,
    /// Indices of events sent with a negative `amount_received` (must be dead-lettered).
    pub poison: Vec<usize>,
    /// Attempts per delivery.
    pub max_attempts: u32,
    /// Time per delivery across its attempts.
    pub retry_budget: Duration,
    /// Per-request timeout (a provider gives up waiting and retries).
    pub request_timeout: Duration,
}

impl Load {
    /// `events` unique events, 8 at a time, 20 % resent, 10 % sent twice at once, retried up to 60 times
    /// within 60 s.
    pub fn new(tag: &str, events: usize) -> Load {
        Load {
            tag: tag.to_string(),
            events,
            concurrency: 8,
            resend_every: 5,
            concurrent_every: 10,
            rate_per_sec: None,
            poison: Vec::new(),
            max_attempts: 60,
            retry_budget: Duration::from_secs(60),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// Paces event starts at `per_sec`.
    pub fn rate(mut self, per_sec: f64) -> Load {
        self.rate_per_sec = Some(per_sec);
        self
    }

    /// Sends event `index` as poison.
    pub fn poison(mut self, index: usize) -> Load {
        self.poison.push(index);
        self
    }

    /// No resends and no concurrent twins: exactly one delivery per event.
    pub fn unique_only(mut self) -> Load {
        self.resend_every = 0;
        self.concurrent_every = 0;
        self
    }

    /// The amount of event `i`: varied, with every 7th a multiple of 5000 (its fee has an exact half to round).
    pub fn amount(i: usize) -> i64 {
        let i = i as i64;
        if i % 7 == 0 {
            5_000 * (1 + i % 9)
        } else {
            1_000 + (i * 7_919) % 90_000
        }
    }

    fn build_events(&self) -> Vec<SentEvent> {
        (0..self.events)
            .map(|i| {
                let provider_event_id = format!("evt_{}_{i}", self.tag);
                let payment_id = format!("pi_{}_{i}", self.tag);
                let amount = Self::amount(i);
                let poison = self.poison.contains(&i);
                let body = if poison {
                    serde_json::json!({
                        "id": provider_event_id, "object": "event", "api_version": "2024-06-20",
                        "created": 1767225600, "livemode": false, "type": "payment_intent.succeeded",
                        "data": { "object": {
                            "id": payment_id, "object": "payment_intent", "amount": amount,
                            "amount_received": -amount, "currency": "brl", "status": "succeeded"
                        }}
                    })
                    .to_string()
                    .into_bytes()
                } else {
                    stripe::payment_intent(&provider_event_id, "succeeded", &payment_id, amount)
                };
                SentEvent {
                    index: i,
                    provider_event_id,
                    payment_id,
                    amount,
                    poison,
                    resent: self.resend_every > 0 && i % self.resend_every == 1,
                    concurrent: self.concurrent_every > 0 && i % self.concurrent_every == 3,
                    acked: false,
                    body: Arc::new(body),
                }
            })
            .collect()
    }

    /// Starts the load against `base` (`http://127.0.0.1:PORT`) in the background.
    pub fn start(&self, base: &str) -> LoadRun {
        let progress = Arc::new(Progress::default());
        let load = self.clone();
        let url = format!("{base}/webhooks/stripe");
        let p = progress.clone();
        let handle = tokio::spawn(async move { load.run(url, p).await });
        LoadRun { progress, handle }
    }

    async fn run(self, url: String, progress: Arc<Progress>) -> LoadReport {
        let started = Instant::now();
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(self.concurrency * 2)
            .build()
            .expect("http client");
        let events = self.build_events();
        let permits = Arc::new(tokio::sync::Semaphore::new(self.concurrency.max(1)));
        let load = Arc::new(self);
        let mut tasks = Vec::with_capacity(events.len());
        for (i, event) in events.into_iter().enumerate() {
            if let Some(rate) = load.rate_per_sec {
                let at = started + Duration::from_secs_f64(i as f64 / rate);
                tokio::time::sleep_until(at.into()).await;
            }
            let permit = permits.clone().acquire_owned().await.expect("semaphore");
            progress.started.fetch_add(1, Ordering::SeqCst);
            let (client, url, progress, load) =
                (client.clone(), url.clone(), progress.clone(), load.clone());
            tasks.push(tokio::spawn(async move {
                let mut event = event;
                let first = deliver(&client, &url, &progress, &load, &event, Delivery::First);
                event.acked = if event.concurrent {
                    let twin = deliver(
                        &client,
                        &url,
                        &progress,
                        &load,
                        &event,
                        Delivery::Concurrent,
                    );
                    let (a, b) = tokio::join!(first, twin);
                    a || b
                } else {
                    first.await
                };
                if event.acked && event.resent {
                    deliver(&client, &url, &progress, &load, &event, Delivery::Resend).await;
                }
                drop(permit);
                event
            }));
        }
        let mut events = Vec::with_capacity(tasks.len());
        for t in tasks {
            events.push(t.await.expect("load task"));
        }
        events.sort_by_key(|e| e.index);
        LoadReport {
            tag: load.tag.clone(),
            events,
            attempts: progress.attempts(),
            elapsed: started.elapsed(),
        }
    }
}

/// Sends one delivery of `event`, retrying like a provider on non-2xx answers and transport errors. Returns
/// whether it was acknowledged.
async fn deliver(
    client: &reqwest::Client,
    url: &str,
    progress: &Progress,
    load: &Load,
    event: &SentEvent,
    delivery: Delivery,
) -> bool {
    let deadline = Instant::now() + load.retry_budget;
    let mut backoff = Duration::from_millis(50);
    for number in 1..=load.max_attempts {
        // Each attempt is signed anew (a provider signs every delivery attempt); the body is byte-identical.
        let headers = stripe_headers(secrets::STRIPE, now(), &event.body);
        let mut req = client
            .post(url)
            .timeout(load.request_timeout)
            .body(event.body.as_ref().clone());
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        progress.in_flight.fetch_add(1, Ordering::SeqCst);
        *progress
            .in_flight_ids
            .lock()
            .expect("in-flight ids")
            .entry(event.provider_event_id.clone())
            .or_default() += 1;
        let sent_at = Instant::now();
        let result = req.send().await;
        let latency = sent_at.elapsed();
        let (status, duplicate, error) = match result {
            Ok(res) => {
                let status = res.status().as_u16();
                let duplicate = res
                    .bytes()
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .and_then(|v| v.get("duplicate").and_then(Value::as_bool));
                (Some(status), duplicate, None)
            }
            Err(e) => (None, None, Some(format!("{e:?}"))),
        };
        {
            let mut ids = progress.in_flight_ids.lock().expect("in-flight ids");
            if let Some(n) = ids.get_mut(&event.provider_event_id) {
                *n -= 1;
                if *n == 0 {
                    ids.remove(&event.provider_event_id);
                }
            }
        }
        progress.in_flight.fetch_sub(1, Ordering::SeqCst);
        let attempt = Attempt {
            event: event.index,
            provider_event_id: event.provider_event_id.clone(),
            delivery,
            number,
            sent_at,
            latency,
            status,
            duplicate,
            error,
        };
        let ok = attempt.is_2xx();
        if ok {
            // Mark acknowledged before recording, so a test reading both never sees a 2xx of an unacked event.
            let new = progress
                .acked_ids
                .lock()
                .expect("acked ids")
                .insert(event.provider_event_id.clone());
            if new {
                progress.acked.fetch_add(1, Ordering::SeqCst);
            }
        }
        progress.record(attempt);
        if ok {
            return true;
        }
        if Instant::now() + backoff > deadline {
            break;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    false
}

/// A load running in the background.
pub struct LoadRun {
    /// Live counters.
    pub progress: Arc<Progress>,
    handle: tokio::task::JoinHandle<LoadReport>,
}

impl LoadRun {
    /// Waits for every event's deliveries to finish.
    pub async fn finish(self) -> LoadReport {
        self.handle.await.expect("load driver")
    }
}

/// Runs a load to completion.
pub async fn send_all(load: &Load, base: &str) -> LoadReport {
    load.start(base).finish().await
}

/// Sessions of this database's workers inside a transaction that has not moved for `min_idle`.
pub async fn stuck_worker_transactions(c: &Cluster, min_idle: Duration) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = $1 AND application_name = 'hookline-worker' AND state = 'idle in transaction'
           AND state_change <= now() - make_interval(secs => $2)",
    )
    .bind(c.db_name())
    .bind(min_idle.as_secs_f64())
    .fetch_one(c.pool())
    .await
    .expect("read pg_stat_activity")
}

/// W9: with a backlog larger than the prefetch, the (reconnected) worker holds at most `prefetch` unacked
/// deliveries. Processing is held by an exclusive lock on `processed_events` (the first table the worker's
/// transaction writes), `events` (> prefetch) new events are sent, and once every one of them is queued or
/// delivered, `messages_unacknowledged` must not exceed the prefetch. Returns the load's report for the checker.
pub async fn assert_prefetch_honoured(c: &Cluster, tag: &str, events: usize) -> LoadReport {
    let prefetch = u64::from(c.config.worker.prefetch);
    assert!(
        events as u64 > prefetch,
        "the backlog must exceed the prefetch"
    );
    let mut lock = c.pool().begin().await.expect("begin");
    sqlx::query("LOCK TABLE processed_events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock processed_events");
    let report = send_all(&Load::new(tag, events).unique_only(), &c.base).await;
    assert!(
        report.unacked().is_empty(),
        "backlog events not acknowledged"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let counts = loop {
        let counts = c.queue_stats().await;
        // Everything published, and the worker took what its prefetch allows.
        if counts.ready + counts.unacked >= events as u64 && counts.unacked >= prefetch {
            break counts;
        }
        assert!(
            counts.unacked <= prefetch,
            "the worker holds {} unacked deliveries, more than its prefetch {prefetch}: {counts:?}",
            counts.unacked
        );
        assert!(
            Instant::now() < deadline,
            "the backlog never built up: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        counts.unacked <= prefetch,
        "the worker holds {} unacked deliveries, more than its prefetch {prefetch}: {counts:?}",
        counts.unacked
    );
    assert!(
        counts.ready >= events as u64 - prefetch,
        "expected a backlog of ready messages: {counts:?}"
    );
    lock.rollback().await.expect("release the lock");
    report_line(&format!(
        "[faults] {}: prefetch {prefetch} honoured with a backlog of {events}: {counts:?}",
        c.name
    ));
    report
}
