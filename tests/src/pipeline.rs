//! Pipeline harness: edge (with its embedded relay) + in-process workers on a private database and a private
//! RabbitMQ prefix; drain and ledger assertions.

use std::future::Future;
use std::time::{Duration, Instant};

use hookline_bus::Topology;
use hookline_consumer::{Handler, Worker, WorkerSettings};
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
/// an observable outcome, never a fixed sleep.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `sql` (a `count(*)`-like scalar) equals `want`, or panics with `what` after `timeout`.
pub async fn wait_for_count(pool: &PgPool, timeout: Duration, what: &str, sql: &str, want: i64) {
    wait_until(timeout, what, || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .is_ok_and(|n| n == want)
        }
    })
    .await;
}

/// A running worker inside the test process.
pub struct WorkerGuard {
    cancel: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl WorkerGuard {
    /// Graceful stop: in-flight deliveries finish and ack.
    pub async fn stop(self) {
        self.cancel.cancel();
        self.task.await.expect("worker task").expect("worker run");
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
        let worker = hookline_worker::payments_worker(&self.config).expect("build worker");
        Self::run_worker(worker)
    }

    /// Starts a worker with a custom handler (e.g. one that panics on a given event).
    pub fn spawn_worker_with<H: Handler>(&self, handler: H) -> WorkerGuard {
        let pool = PgPool::connect_lazy(&self.edge.db.url).expect("pool");
        let worker = Worker::new(
            pool,
            handler,
            WorkerSettings {
                amqp_urls: self.config.amqp_urls.clone(),
                topology: self.topology(),
                prefetch: self.config.worker.prefetch,
                concurrency: self.config.worker.concurrency,
                batch_max: self.config.worker.batch_max,
                batch_linger: self.config.worker.batch_linger,
            },
        );
        Self::run_worker(worker)
    }

    fn run_worker<H: Handler>(worker: Worker<H>) -> WorkerGuard {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(worker.run(cancel.clone()));
        WorkerGuard { cancel, task }
    }

    /// Waits until every stored event has been processed (marker) or dead-lettered.
    pub async fn drain(&self, timeout: Duration) {
        let pool = self.pool().clone();
        wait_until(
            timeout,
            "every stored event processed or dead-lettered",
            || {
                let pool = pool.clone();
                async move { pending_events(&pool).await == 0 }
            },
        )
        .await;
    }

    /// Messages ready in a queue of this pipeline (passive declare). Waits (up to 10 s) for the queue to be
    /// declared, since workers and relays declare the topology asynchronously.
    pub async fn queue_depth(&self, queue: &str) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(n) = self.try_queue_depth(queue).await {
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

    /// Ends the test's use of the broker. Queues are NOT deleted here: deleting quorum queues while other tests
    /// declare theirs has crashed RabbitMQ 3.10's dead-letter supervisor on this machine, so `deploy/test.sh`
    /// deletes every `test-*` queue once all tests are done.
    pub async fn teardown(&self) {}

    /// Writes the configuration to a file for a child process and returns its path.
    pub fn config_file(&self) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("hookline-test-{}.toml", self.config.amqp.prefix));
        std::fs::write(&path, &self.toml).expect("write config file");
        path
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
