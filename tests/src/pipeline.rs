//! Pipeline harness: edge (with its embedded relay) + in-process workers on a private database and a private
//! RabbitMQ prefix; drain and ledger assertions.

use std::future::Future;
use std::time::{Duration, Instant};

use hookline_bus::Topology;
use hookline_consumer::{Consumer, ConsumerSettings, Handler};
use hookline_core::config::AmqpEndpoints;
use hookline_core::Config;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{parse_config, test_config_toml, TestDb, TestEdge};

/// Relay and worker settings that make tests converge quickly.
pub const FAST_PIPELINE: &str = "[relay]\nsweep_interval_ms = 200\nsweep_min_age_ms = 300\n[worker]\nprefetch = 16\nconcurrency = 4\ndb_max_connections = 6";

/// Polls `check` every 50 ms until it returns true or `timeout` passes; panics with `what` on timeout. Waits on
/// an observable outcome, never a fixed sleep. A check that itself never returns (a lock, a dead peer) fails at
/// the same deadline: the deadline bounds the whole wait, not only the pauses between checks.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(timeout, what, check, |done| *done).await;
}

/// Polls `probe` every 50 ms until `done` accepts what it returned, and returns that value. After `timeout`
/// (which also bounds a probe that never returns) it panics with `what` and the last value the probe returned,
/// so a failed wait says what it saw instead of only that it waited.
pub async fn wait_for<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut probe: F,
    done: impl Fn(&T) -> bool,
) -> T
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last: Option<T> = None;
    let mut polls = 0u32;
    loop {
        match tokio::time::timeout_at(deadline, probe()).await {
            Ok(seen) if done(&seen) => return seen,
            Ok(seen) => last = Some(seen),
            Err(_) => panic!(
                "timed out after {timeout:?} waiting for {what}: the check in progress did not return \
                 ({polls} earlier checks; last seen: {last:?})"
            ),
        }
        polls += 1;
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what} ({polls} checks; last seen: {last:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Awaits `fut` for at most `timeout`; panics with `what` if it has not finished by then. For awaits that are
/// not polls (a task joined, a server stopped): a hang fails the test instead of holding the run.
pub async fn within<T>(timeout: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(timeout, fut).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not finish within {timeout:?}"),
    }
}

/// Runs `cmd` to completion (stdin closed, stdout and stderr captured) and returns its output; after `timeout` it
/// is SIGKILLed and the test fails with the command line and what it printed so far. A blocking call: for
/// commands that finish quickly, like the CLI's.
pub fn output_within(timeout: Duration, cmd: &mut std::process::Command) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let line = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {line}: {e}"));
    // Both pipes are read on their own threads: a child filling one pipe must not block while we wait.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                pipe.read_to_end(&mut buf).ok();
            }
            buf
        })
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                child.kill().ok();
                child.wait().ok();
                let out = stdout.join().unwrap_or_default();
                let err = stderr.join().unwrap_or_default();
                panic!(
                    "{line} did not finish within {timeout:?}; it printed:\n{}{}",
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&err)
                );
            }
            Err(e) => panic!("wait for {line}: {e}"),
        }
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// How long a CLI command (`hookline …`) may run in a test before it counts as hung.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// [`output_within`] as a method, so a command chain keeps its shape: `Command::new(…).args(…).output_within(t)`.
pub trait OutputWithin {
    /// Runs the command to completion with a deadline (see [`output_within`]).
    fn output_within(&mut self, timeout: Duration) -> std::process::Output;
}

impl OutputWithin for std::process::Command {
    fn output_within(&mut self, timeout: Duration) -> std::process::Output {
        output_within(timeout, self)
    }
}

/// The same for `tokio::process::Command`, without blocking the runtime: killed (`kill_on_drop`) and failing
/// with the command line when it has not finished within `timeout`.
pub trait OutputWithinAsync {
    /// Runs the command to completion with a deadline.
    fn output_within(
        &mut self,
        timeout: Duration,
    ) -> impl Future<Output = std::process::Output> + Send;
}

impl OutputWithinAsync for tokio::process::Command {
    fn output_within(
        &mut self,
        timeout: Duration,
    ) -> impl Future<Output = std::process::Output> + Send {
        let line = format!("{:?}", self.as_std());
        let output = self.kill_on_drop(true).output();
        async move {
            match tokio::time::timeout(timeout, output).await {
                Ok(Ok(out)) => out,
                Ok(Err(e)) => panic!("run {line}: {e}"),
                Err(_) => panic!("{line} did not finish within {timeout:?} (killed)"),
            }
        }
    }
}

/// Waits until `sql` (a `count(*)`-like scalar) equals `want`, or panics with `what` and the last count (or
/// error) after `timeout`.
pub async fn wait_for_count(pool: &PgPool, timeout: Duration, what: &str, sql: &str, want: i64) {
    // Only an `Ok(want)` ends the wait: the value returned is known.
    let _seen = wait_for(
        timeout,
        &format!("{what} ({sql} = {want})"),
        || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(&pool)
                    .await
                    .map_err(|e| e.to_string())
            }
        },
        |n| n.as_ref().is_ok_and(|n| *n == want),
    )
    .await;
}

/// A running worker inside the test process.
pub struct WorkerGuard {
    cancel: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl WorkerGuard {
    /// Graceful stop: in-flight deliveries finish and ack. A worker that does not stop within a minute fails the
    /// test (a stop is a wait like any other).
    pub async fn stop(self) {
        self.cancel.cancel();
        within(
            Duration::from_secs(60),
            "the worker's graceful stop",
            self.task,
        )
        .await
        .expect("worker task")
        .expect("worker run");
    }
}

/// Edge + relay + workers on private resources.
pub struct TestPipeline {
    /// The edge (its `db` is the pipeline's database).
    pub edge: TestEdge,
    /// The configuration every component uses.
    pub config: Config,
    /// The same configuration as TOML, for child processes (`--config FILE`).
    pub toml: String,
}

impl TestPipeline {
    /// Starts the edge with the embedded relay and fast sweeps; workers are started separately.
    pub async fn start() -> TestPipeline {
        Self::start_with("").await
    }

    /// Like [`TestPipeline::start`], with extra TOML tables appended (they must not repeat `[relay]`/`[worker]`).
    pub async fn start_with(tail: &str) -> TestPipeline {
        // Logs of the in-process edge, relay and workers: set HOOKLINE_TEST_LOG=1 (and RUST_LOG to filter).
        if std::env::var_os("HOOKLINE_TEST_LOG").is_some() {
            hookline_core::telemetry::init_tracing();
        }
        let db = TestDb::new().await;
        let toml = test_config_toml(&db.url, "", &format!("{FAST_PIPELINE}\n{tail}"));
        let config = parse_config(&toml);
        let edge = TestEdge::spawn_on(db, config.clone()).await;
        TestPipeline { edge, config, toml }
    }

    /// The pipeline's database pool.
    pub fn pool(&self) -> &PgPool {
        &self.edge.db.pool
    }

    /// Queue names of this pipeline.
    pub fn topology(&self) -> Topology {
        Topology::from_config(&self.config.amqp)
    }

    /// Starts a payments worker (as `hookline-worker` would) in this process.
    pub fn spawn_worker(&self) -> WorkerGuard {
        let worker = hookline_worker::payments_consumer(&self.config).expect("build worker");
        Self::run_worker(worker)
    }

    /// Starts a worker with a custom handler (e.g. one that panics on a given event).
    pub fn spawn_worker_with<H: Handler>(&self, handler: H) -> WorkerGuard {
        let pool = PgPool::connect_lazy(&self.edge.db.url).expect("pool");
        let topology = self.topology();
        let settings =
            hookline_worker::WorkerConfig::from_config(&self.config).expect("valid [worker]");
        let worker = Consumer::new(
            pool,
            handler,
            ConsumerSettings {
                amqp_urls: self.config.amqp_urls.clone(),
                queue: topology.payments_queue.clone(),
                topology,
                prefetch: settings.prefetch,
                concurrency: settings.concurrency,
                batch_max: settings.batch_max,
                batch_linger: settings.batch_linger,
            },
        );
        Self::run_worker(worker)
    }

    fn run_worker<H: Handler>(worker: Consumer<H>) -> WorkerGuard {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(worker.run(cancel.clone()));
        WorkerGuard { cancel, task }
    }

    /// Waits until every stored event has been processed (marker) or dead-lettered.
    pub async fn drain(&self, timeout: Duration) {
        let pool = self.pool().clone();
        wait_for(
            timeout,
            "every stored event processed or dead-lettered (seen: events still pending)",
            || {
                let pool = pool.clone();
                async move { pending_events(&pool).await }
            },
            |pending| *pending == 0,
        )
        .await;
    }

    /// Messages ready in a queue of this pipeline (passive declare). Waits (up to 10 s) for the queue to be
    /// declared, since workers and relays declare the topology asynchronously.
    pub async fn queue_depth(&self, queue: &str) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let depth = within(
                Duration::from_secs(10),
                &format!("a passive declare of {queue}"),
                self.try_queue_depth(queue),
            )
            .await;
            if let Some(n) = depth {
                return n;
            }
            assert!(
                Instant::now() < deadline,
                "queue {queue} was never declared"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Messages ready in a queue, or `None` when it does not exist (yet).
    pub async fn try_queue_depth(&self, queue: &str) -> Option<u32> {
        let [depth] = queue_depths(&self.config.amqp_urls, [queue]).await;
        depth.map(|q| q.messages)
    }

    /// The event ids referred to by the messages ready in `queue` (see [`queued_event_ids`]).
    pub async fn queued_event_ids(&self, queue: &str) -> Vec<i64> {
        queued_event_ids(&self.config.amqp_urls, queue).await
    }

    /// Ends the test's use of the broker. Queues are NOT deleted here: deleting quorum queues while other tests
    /// declare theirs has crashed RabbitMQ 3.10's dead-letter supervisor on this machine, so `deploy/test.sh`
    /// deletes every `test-*` queue once all tests are done.
    pub async fn teardown(&self) {}

    /// Writes the configuration to a file for a child process and returns its path.
    pub fn config_file(&self) -> std::path::PathBuf {
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let path =
            std::env::temp_dir().join(format!("hookline-test-{}.toml", self.config.amqp.prefix));
        // Written whole under another name, then renamed over: a command started a moment earlier (several run
        // at once) reads the old file or the new one, never a truncated one.
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let partial = path.with_extension(format!("toml.{}.{n}", std::process::id()));
        std::fs::write(&partial, &self.toml).expect("write config file");
        std::fs::rename(&partial, &path).expect("move the config file into place");
        path
    }

    /// Runs the operator command `hookline --config FILE ARGS…` against this pipeline's configuration to
    /// completion (at most [`CLI_TIMEOUT`]), with the environment's database and broker settings removed.
    pub async fn hookline(&self, args: &[&str]) -> std::process::Output {
        tokio::process::Command::new(binary("hookline"))
            .arg("--config")
            .arg(self.config_file())
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("AMQP_URL")
            .output_within(CLI_TIMEOUT)
            .await
    }

    /// The AMQP URL, for tests that talk to the broker directly.
    pub fn amqp_url(&self) -> String {
        self.config
            .amqp_urls
            .first()
            .url
            .expose_secret()
            .to_string()
    }
}
/// The event ids referred to by the messages ready in `queue`, one entry per event (a bundle gives each of its
/// events), in queue order. Every message is taken unacknowledged and returned when the channel closes, so the
/// queue holds the same messages after — each delivered once more (RabbitMQ counts that return).
pub async fn queued_event_ids(amqp_urls: &AmqpEndpoints, queue: &str) -> Vec<i64> {
    use lapin::options::BasicGetOptions;
    let conn = hookline_bus::connect(amqp_urls, "hookline-test-peek")
        .await
        .expect("connect to RabbitMQ");
    let channel = conn.create_channel().await.expect("open channel");
    let mut ids = Vec::new();
    while let Some(msg) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
    {
        let content_type = msg.delivery.properties.content_type().as_ref();
        let carried =
            hookline_bus::message::event_ids(content_type.map(|c| c.as_str()), &msg.delivery.data);
        assert!(!carried.is_empty(), "a message that refers to no event");
        ids.extend(carried);
    }
    channel.close(200, "peeked".into()).await.ok();
    conn.close(200, "peeked".into()).await.ok();
    ids
}

/// What a passive declare says about a queue (the one broker inspection lives in `hookline-bus`).
pub use hookline_ops::inspect::QueueDepth;

/// The depth of each of `queues` (`None`: not declared yet), through `hookline_ops::inspect`.
pub async fn queue_depths<const N: usize>(
    amqp_urls: &AmqpEndpoints,
    queues: [&str; N],
) -> [Option<QueueDepth>; N] {
    let depths = hookline_ops::inspect::queue_depths(amqp_urls, "hookline-test", &queues)
        .await
        .expect("inspect the queues");
    let mut out = [None; N];
    for (o, d) in out.iter_mut().zip(depths) {
        *o = d;
    }
    out
}

/// Stored events with neither a processed marker nor a dead letter.
pub async fn pending_events(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM webhook_events e
         WHERE NOT EXISTS (SELECT 1 FROM processed_events p WHERE p.event_id = e.id)
           AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id)",
    )
    .fetch_one(pool)
    .await
    .expect("count pending events")
}

/// Every ledger row as `(kind, reference, account, amount)`, sorted: a comparable picture of the ledger.
pub async fn ledger_rows(pool: &PgPool) -> Vec<(String, String, String, i64)> {
    sqlx::query_as(
        "SELECT t.kind, t.reference, e.account, e.amount
         FROM ledger_entries e JOIN ledger_transactions t ON t.id = e.transaction_id
         ORDER BY t.kind, t.reference, e.account",
    )
    .fetch_all(pool)
    .await
    .expect("read ledger")
}

/// Asserts every ledger transaction sums to zero and has at least two legs; returns the number of transactions.
pub async fn assert_ledger_balanced(pool: &PgPool) -> i64 {
    let unbalanced: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT t.id, coalesce(sum(e.amount), 0)::bigint, count(e.id)
         FROM ledger_transactions t LEFT JOIN ledger_entries e ON e.transaction_id = t.id
         GROUP BY t.id HAVING coalesce(sum(e.amount), 0) <> 0 OR count(e.id) < 2",
    )
    .fetch_all(pool)
    .await
    .expect("check ledger");
    assert!(
        unbalanced.is_empty(),
        "unbalanced ledger transactions: {unbalanced:?}"
    );
    sqlx::query_scalar("SELECT count(*) FROM ledger_transactions")
        .fetch_one(pool)
        .await
        .expect("count ledger transactions")
}

/// A checksum over every ledger row (ids included): equal before and after means nothing was added or changed.
pub async fn ledger_checksum(pool: &PgPool) -> String {
    sqlx::query_scalar(
        "SELECT md5(coalesce(string_agg(x, '|' ORDER BY x), '')) FROM (
             SELECT format('t%s:%s:%s:%s:%s', id, provider, kind, reference, currency) AS x FROM ledger_transactions
             UNION ALL
             SELECT format('e%s:%s:%s:%s', id, transaction_id, account, amount) FROM ledger_entries) rows",
    )
    .fetch_one(pool)
    .await
    .expect("ledger checksum")
}

/// Path of a workspace binary (`hookline-worker`, `hookline-edge`, `hookline`) next to the test executable.
/// `deploy/test.sh` builds them before the tests run.
pub fn binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (cargo build --workspace --bins), as deploy/test.sh does",
        path.display()
    );
    path
}

/// A child process that is SIGKILLed (by its own pid) when dropped, so a failing test leaves nothing behind.
pub struct Child(pub std::process::Child);

impl Child {
    /// Spawns `bin` with `args` and extra environment variables; its output goes to the test's stderr.
    pub fn spawn(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = std::process::Command::new(binary(bin));
        cmd.args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info,sqlx=warn");
        Child(cmd.spawn().expect("spawn child process"))
    }

    /// SIGKILL: no cleanup, no graceful shutdown — a crash.
    pub fn kill9(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill9();
    }
}
