//! The process cluster: the REAL binaries as child processes on private resources — `hookline-edge --config
//! FILE` (embedded relay, fast sweeps) on a fixed free port and any number of `hookline-worker --config FILE` —
//! each started, SIGKILLed (by its own pid) and restarted individually, optionally with `FAILPOINTS`, with their
//! JSON-line logs in files that tests read as evidence. What the cluster's database and queues hold is read by
//! the methods in [`super::check`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hookline_bus::Topology;
use hookline_core::Config;
use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use serde_json::Value;
use sqlx::PgPool;

use super::START_TIMEOUT;
use crate::{binary, parse_config, test_config_toml, Child, TestDb};

pub use crate::free_port;

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
    /// Whole TOML tables appended to the configuration (e.g. a provider with an `api_base`).
    pub tail: String,
    /// `amqp_urls` of every process (the nodes of a RabbitMQ cluster); empty: not set.
    pub amqp_urls: Vec<String>,
    /// The PostgreSQL server of the cluster's database (`postgres://…:PORT`); `None`: [`crate::pg_base_url`].
    pub pg_base: Option<String>,
    /// Nodes `rabbitmqctl -n` asks for queue statistics, first one that answers; empty: the default node.
    pub rabbitmq_nodes: Vec<String>,
    /// `amqp.delivery_limit` instead of the test configuration's 3.
    pub delivery_limit: Option<u32>,
    /// Extra environment variables of every child process (e.g. `RUST_LOG`). Set here, never
    /// with `std::env::set_var`: the tests share one process, whose environment every other test and child reads.
    pub env: Vec<(String, String)>,
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
            tail: String::new(),
            amqp_urls: Vec::new(),
            pg_base: None,
            rabbitmq_nodes: Vec::new(),
            delivery_limit: None,
            env: Vec::new(),
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
    /// Further edges (same database and queues, each on its own port): `(base URL, config file, process)`.
    replicas: Vec<(String, PathBuf, Proc)>,
    workers: Vec<Option<Proc>>,
    /// `rabbitmqctl -n` targets for queue statistics (empty: the default node).
    pub rabbitmq_nodes: Vec<String>,
    history: Vec<(String, PathBuf)>,
    http: reqwest::Client,
    edge_text_logs: bool,
    env: Vec<(String, String)>,
}

impl Cluster {
    /// A new database, RabbitMQ prefix, port and configuration file; no process is started yet.
    pub async fn new(name: &str, opts: ClusterOptions) -> Cluster {
        let db = match &opts.pg_base {
            Some(base) => TestDb::new_on(base).await,
            None => TestDb::new().await,
        };
        let port = free_port();
        let tail = format!(
            "[relay]\nsweep_interval_ms = 200\nsweep_min_age_ms = 300\n\
             [worker]\nprefetch = {}\nconcurrency = {}\ndb_max_connections = {}\n{}",
            opts.prefetch, opts.concurrency, opts.worker_db_max_connections, opts.tail
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
        if !opts.amqp_urls.is_empty() {
            let list: Vec<String> = opts.amqp_urls.iter().map(|u| format!("\"{u}\"")).collect();
            toml = format!("amqp_urls = [{}]\n{toml}", list.join(", "));
        }
        if let Some(limit) = opts.delivery_limit {
            let default_limit = "delivery_limit = 3";
            assert!(
                toml.contains(default_limit),
                "test_config_toml changed its delivery limit"
            );
            toml = toml.replace(default_limit, &format!("delivery_limit = {limit}"));
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
            replicas: Vec::new(),
            workers: Vec::new(),
            rabbitmq_nodes: opts.rabbitmq_nodes.clone(),
            history: Vec::new(),
            edge_text_logs: opts.edge_text_logs,
            env: opts.env.clone(),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(5))
                .build()
                .expect("http client"),
        }
    }

    fn spawn(&mut self, bin: &str, role: &str, failpoints: Option<&str>) -> Proc {
        let config = self.config_path.clone();
        self.spawn_with(bin, role, failpoints, &config)
    }

    fn spawn_with(
        &mut self,
        bin: &str,
        role: &str,
        failpoints: Option<&str>,
        config_path: &Path,
    ) -> Proc {
        let log = self
            .log_dir
            .join(format!("{:02}-{role}.log", self.history.len() + 1));
        let file = std::fs::File::create(&log).expect("create a log file");
        let mut cmd = Command::new(binary(bin));
        cmd.arg("--config")
            .arg(config_path)
            // Nothing from the test's environment may override the file or inject fail points.
            .env_remove("DATABASE_URL")
            .env_remove("AMQP_URL")
            .env_remove("HOOKLINE_CONFIG")
            .env_remove("FAILPOINTS")
            .env(
                "RUST_LOG",
                "info,sqlx=warn,lapin=warn,actix_server=warn,hookline_worker=debug,hookline_consumer=debug,hookline_payments=debug",
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
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
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

    /// Starts one more edge process on the same database and queues, on a port of its own (its configuration
    /// file differs only in `edge.listen`), and waits until its `/healthz` answers 200. Returns its base URL.
    pub async fn start_edge_replica(&mut self) -> String {
        let port = free_port();
        let toml = std::fs::read_to_string(&self.config_path).expect("read the config file");
        let listen = format!("listen = \"127.0.0.1:{}\"", self.port);
        assert!(
            toml.contains(&listen),
            "the config file has no edge listen line"
        );
        let toml = toml.replace(&listen, &format!("listen = \"127.0.0.1:{port}\""));
        let n = self.replicas.len() + 2;
        let path = self.log_dir.join(format!("hookline-edge{n}.toml"));
        std::fs::write(&path, toml).expect("write the replica's config file");
        let base = format!("http://127.0.0.1:{port}");
        let mut proc = self.spawn_with("hookline-edge", &format!("edge{n}"), None, &path);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = proc.exited() {
                panic!(
                    "edge {n} exited at start-up ({status}):\n{}",
                    tail(&proc.log, 30)
                );
            }
            let url = format!("{base}/healthz");
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
                "edge {n} did not answer /healthz within {START_TIMEOUT:?}:\n{}",
                tail(&proc.log, 30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.replicas.push((base.clone(), path, proc));
        base
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
        for (base, _, edge) in self.replicas.iter_mut() {
            if let Some(status) = edge.exited() {
                panic!(
                    "the edge at {base} exited ({status}):\n{}",
                    tail(&edge.log, 30)
                );
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

    /// Starts a worker without waiting for it to consume (its broker may never answer); returns its slot.
    pub fn spawn_worker(&mut self) -> usize {
        let slot = self.workers.len();
        let proc = self.spawn("hookline-worker", &format!("worker{slot}"), None);
        self.workers.push(Some(proc));
        slot
    }

    /// Worker `slot`'s exit status once it has exited (reaps it), `None` while it runs.
    pub fn worker_exit_status(&mut self, slot: usize) -> Option<std::process::ExitStatus> {
        self.workers
            .get_mut(slot)
            .and_then(|w| w.as_mut())
            .and_then(Proc::exited)
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
        Topology::from_config(&self.config.amqp)
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

    /// Stops every process, deletes the RabbitMQ objects and the files. Call at the end of a passing test (a
    /// failing one leaves the logs and the database for inspection; its processes die with the `Cluster`).
    pub async fn teardown(mut self) {
        if let Some(mut e) = self.edge.take() {
            e.child.kill9();
        }
        for (_, _, mut e) in self.replicas.drain(..) {
            e.child.kill9();
        }
        for w in self.workers.iter_mut() {
            if let Some(mut w) = w.take() {
                w.child.kill9();
            }
        }
        if let Ok(conn) = hookline_bus::connect(&self.config.amqp_urls, "hookline-test").await {
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
        let admin = format!("{}/postgres", self.db.base);
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
