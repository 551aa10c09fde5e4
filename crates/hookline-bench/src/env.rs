//! The benchmark's private resources — two databases, a RabbitMQ prefix, a port, a configuration file — and the
//! edge and worker child processes. Everything is named after one run tag and removed by [`BenchEnv::teardown`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use hookline_bus::Topology;
use hookline_core::Config;
use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use secrecy::SecretString;
use sqlx::Connection;

use crate::gen::{FEE_BPS, FEE_FIXED, PROVIDER, STRIPE_SECRET};
use crate::Options;

/// Names, URLs and configuration of one run.
#[derive(Debug)]
pub struct BenchEnv {
    /// Short tag (8 hex digits) in every name of this run.
    pub run: String,
    /// Database the edge, relay and worker use: `hookline_bench_<uuid>`.
    pub db_name: String,
    /// Its URL.
    pub db_url: String,
    /// Database of the baselines (kept apart so their rows and markers cannot blur the correctness checks).
    pub baseline_db_name: String,
    /// Its URL.
    pub baseline_db_url: String,
    /// Server URL without a database, for `CREATE`/`DROP DATABASE`.
    pub pg_base_url: String,
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Exchanges and queues of this run (prefix `bench-<uuid>`).
    pub topology: Topology,
    /// Where the edge listens.
    pub edge_addr: SocketAddr,
    /// The configuration file given to both children.
    pub config_path: PathBuf,
    /// The same configuration, parsed (effective values, defaults included).
    pub config: Config,
    /// `[edge]` of that configuration (the web crate owns the section).
    pub edge: hookline_web::EdgeConfig,
    /// `[worker]` of that configuration (the worker crate owns the section).
    pub worker: hookline_worker::WorkerConfig,
    /// `[relay]` of that configuration (the bus crate owns the section).
    pub relay: hookline_bus::RelayConfig,
}

/// A port that was free a moment ago: the edge needs a fixed one in its file, so bind port 0 and let it go.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(listener.local_addr().context("local address")?.port())
}

/// The configuration both children read. Pool sizes, prefetch, concurrency and relay timings are left at their
/// defaults on purpose: the benchmark measures the shipped configuration (the effective values are printed).
fn config_toml(
    db_url: &str,
    amqp_url: &str,
    prefix: &str,
    addr: SocketAddr,
    otlp_endpoint: Option<&str>,
) -> String {
    let telemetry = otlp_endpoint.map_or(String::new(), |url| {
        format!("\n[telemetry]\notlp_endpoint = \"{url}\"\n")
    });
    format!(
        r#"# Written by hookline-bench for one run; the database and queues it names are removed at the end.
database_url = "{db_url}"
amqp_url = "{amqp_url}"

[amqp]
prefix = "{prefix}"

[edge]
listen = "{addr}"
workers = 2

[providers.{PROVIDER}]
scheme = "stripe"
secrets = ["{STRIPE_SECRET}"]
tolerance_secs = 300
fee_bps = {FEE_BPS}
fee_fixed = {FEE_FIXED}
{telemetry}"#
    )
}

impl BenchEnv {
    /// Chooses names and a port and writes the configuration file into the output directory. Touches neither
    /// PostgreSQL nor RabbitMQ (see [`BenchEnv::provision`]).
    pub fn new(opts: &Options) -> anyhow::Result<BenchEnv> {
        let uuid = uuid::Uuid::new_v4().simple().to_string();
        let run = uuid[..8].to_string();
        let base = opts.pg_base_url.trim_end_matches('/').to_string();
        let db_name = format!("hookline_bench_{uuid}");
        let baseline_db_name = format!("hookline_bench_{uuid}_baseline");
        let db_url = format!("{base}/{db_name}");
        let baseline_db_url = format!("{base}/{baseline_db_name}");
        let prefix = format!("bench-{uuid}");
        let edge_addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let toml = config_toml(
            &db_url,
            &opts.amqp_url,
            &prefix,
            edge_addr,
            opts.otlp_endpoint.as_deref(),
        );
        let no_env: [(&str, &str); 0] = [];
        let config = Config::from_toml_str(&toml, "hookline-bench", &no_env)
            .context("the generated configuration is invalid")?;
        let edge = hookline_web::EdgeConfig::from_config(&config)
            .context("the generated configuration is invalid")?;
        let worker = hookline_worker::WorkerConfig::from_config(&config)
            .context("the generated configuration is invalid")?;
        let relay = hookline_bus::RelayConfig::from_config(&config)
            .context("the generated configuration is invalid")?;
        std::fs::create_dir_all(&opts.out_dir)
            .with_context(|| format!("create output directory {}", opts.out_dir.display()))?;
        let config_path = opts.out_dir.join("hookline-bench.toml");
        std::fs::write(&config_path, &toml)
            .with_context(|| format!("write {}", config_path.display()))?;
        Ok(BenchEnv {
            run,
            topology: Topology::from_config(&config.amqp),
            db_name,
            db_url,
            baseline_db_name,
            baseline_db_url,
            pg_base_url: base,
            amqp_url: opts.amqp_url.clone(),
            edge_addr,
            config_path,
            config,
            edge,
            worker,
            relay,
        })
    }

    /// Creates and migrates both databases (through the same code as `hookline migrate`) and checks that
    /// RabbitMQ answers.
    pub async fn provision(&self) -> anyhow::Result<()> {
        for url in [&self.db_url, &self.baseline_db_url] {
            hookline_core::db::migrate(&SecretString::from(url.clone()))
                .await
                .with_context(|| format!("create and migrate {url}"))?;
        }
        let conn = hookline_bus::connect(&self.amqp_endpoints()?, "hookline-bench").await?;
        conn.close(200, "".into()).await.ok();
        Ok(())
    }

    /// Drops both databases and deletes this run's queues and exchanges. Returns what could not be removed
    /// (best effort: one failure does not stop the rest).
    pub async fn teardown(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let admin = format!("{}/postgres", self.pg_base_url);
        match retry(|| sqlx::PgConnection::connect(&admin)).await {
            Ok(mut conn) => {
                for name in [&self.db_name, &self.baseline_db_name] {
                    // FORCE: a pool that was not closed cleanly must not keep the database alive.
                    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    if let Err(e) = sqlx::query(&sql).execute(&mut conn).await {
                        problems.push(format!("drop database {name}: {e}"));
                    }
                }
                conn.close().await.ok();
            }
            Err(e) => problems.push(format!("connect to {admin} to drop the databases: {e}")),
        }
        problems.extend(delete_topology(&self.amqp_url, &self.topology).await);
        problems
    }

    /// The broker as the services see it (one endpoint: the benchmark runs against one node).
    fn amqp_endpoints(&self) -> anyhow::Result<hookline_core::config::AmqpEndpoints> {
        hookline_core::config::AmqpEndpoints::single(&self.amqp_url)
            .context("the benchmark's AMQP URL")
    }

    /// Messages in `queue` (ready, not counting unacknowledged ones), by passive declare.
    pub async fn queue_depth(&self, queue: &str) -> anyhow::Result<u32> {
        let depths = hookline_ops::inspect::queue_depths(
            &self.amqp_endpoints()?,
            "hookline-bench",
            &[queue],
        )
        .await?;
        depths
            .first()
            .copied()
            .flatten()
            .map(|q| q.messages)
            .with_context(|| format!("queue {queue} does not exist"))
    }
}

/// Deletes the queues and exchanges of `topology` (a run's prefix) on `amqp_url`. Returns what could not be
/// removed (best effort: one failure does not stop the rest).
pub(crate) async fn delete_topology(amqp_url: &str, topology: &Topology) -> Vec<String> {
    let mut problems = Vec::new();
    let amqp = match hookline_core::config::AmqpEndpoints::single(amqp_url)
        .context("the benchmark's AMQP URL")
    {
        Ok(amqp) => amqp,
        Err(e) => {
            problems.push(format!("{e:#}"));
            return problems;
        }
    };
    match retry(|| hookline_bus::connect(&amqp, "hookline-bench")).await {
        Ok(conn) => {
            match conn.create_channel().await {
                Ok(ch) => {
                    let t = topology;
                    // The domain facts' unrouted queue too: nothing consumes it in a benchmark, and each run
                    // leaves one message per payment fact there otherwise (RabbitMQ grows from run to run).
                    for q in [&t.payments_queue, &t.dead_letter_queue, &t.domain_unrouted] {
                        if let Err(e) = ch
                            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                            .await
                        {
                            problems.push(format!("delete queue {q}: {e}"));
                        }
                    }
                    for x in [
                        &t.exchange,
                        &t.dead_letter_exchange,
                        &t.domain_exchange,
                        &t.domain_unrouted,
                    ] {
                        if let Err(e) = ch
                            .exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default())
                            .await
                        {
                            problems.push(format!("delete exchange {x}: {e}"));
                        }
                    }
                }
                Err(e) => problems.push(format!("open a channel to delete the queues: {e}")),
            }
            conn.close(200, "".into()).await.ok();
        }
        Err(e) => problems.push(format!("connect to RabbitMQ to delete the queues: {e:#}")),
    }
    problems
}

/// Tries `connect` for up to 30 s: teardown must not give up because a server is restarting at that moment.
async fn retry<T, E, F, Fut>(mut connect: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match connect().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// A child process (`hookline-edge` or `hookline-worker`), SIGKILLed by its pid when dropped so that an error or
/// Ctrl-C never leaves one behind.
pub struct ChildProcess {
    name: &'static str,
    child: tokio::process::Child,
    pid: u32,
    log: PathBuf,
}

impl ChildProcess {
    /// Starts `{bin_dir}/{name} --config {config}` with its output in `log`. The environment variables that would
    /// override the file (`DATABASE_URL`, `AMQP_URL`, `HOOKLINE_CONFIG`) and fault injection are removed, and the
    /// log filter is the shipped default, so a developer's shell cannot skew the run.
    pub fn spawn(
        bin_dir: &Path,
        name: &'static str,
        config: &Path,
        log: &Path,
    ) -> anyhow::Result<ChildProcess> {
        Self::spawn_args(bin_dir, name, config, &[], log)
    }

    /// The operator console's own process: `{bin_dir}/hookline --config {config} console serve`, as
    /// [`ChildProcess::spawn`] starts the others.
    pub fn spawn_console(
        bin_dir: &Path,
        config: &Path,
        log: &Path,
    ) -> anyhow::Result<ChildProcess> {
        Self::spawn_args(bin_dir, "hookline", config, &["console", "serve"], log)
    }

    /// The provider sandbox's own process: `{bin_dir}/hookline --config {config} sandbox --listen {listen}
    /// --seed {seed}`, as [`ChildProcess::spawn`] starts the others.
    pub fn spawn_sandbox(
        bin_dir: &Path,
        config: &Path,
        listen: SocketAddr,
        seed: u64,
        log: &Path,
    ) -> anyhow::Result<ChildProcess> {
        let (listen, seed) = (listen.to_string(), seed.to_string());
        Self::spawn_args(
            bin_dir,
            "hookline",
            config,
            &["sandbox", "--listen", &listen, "--seed", &seed],
            log,
        )
    }

    /// [`ChildProcess::spawn`] with `args` after `--config {config}`.
    fn spawn_args(
        bin_dir: &Path,
        name: &'static str,
        config: &Path,
        args: &[&str],
        log: &Path,
    ) -> anyhow::Result<ChildProcess> {
        let bin = bin_dir.join(name);
        anyhow::ensure!(
            bin.exists(),
            "{} is missing: build it first (cargo build --release -p hookline-edge -p hookline-worker -p hookline-cli)",
            bin.display()
        );
        let out =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone().context("duplicate log handle")?;
        let child = tokio::process::Command::new(&bin)
            .arg("--config")
            .arg(config)
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("AMQP_URL")
            .env_remove("HOOKLINE_CONFIG")
            .env_remove("FAILPOINTS")
            .env_remove("HOOKLINE_LOG_FORMAT")
            .env("RUST_LOG", hookline_core::telemetry::DEFAULT_FILTER)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let pid = child.id().context("child has no pid")?;
        Ok(ChildProcess {
            name,
            child,
            pid,
            log: log.to_path_buf(),
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// An error naming the log when the process has already exited.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait().context("poll child")? {
            anyhow::bail!(
                "{} exited ({status}); see {}",
                self.name,
                self.log.display()
            );
        }
        Ok(())
    }

    /// SIGKILL by pid, then reap it.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child
            .start_kill()
            .with_context(|| format!("kill {} (pid {})", self.name, self.pid))?;
        self.child.wait().await.context("reap child")?;
        Ok(())
    }
}

/// Waits until the console process answers `GET /healthz` with 200 (its loops live, its database answers).
pub async fn wait_console(console: &mut ChildProcess, addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        console.ensure_running()?;
        if crate::load::get_status(addr, "/healthz").await == Some(200) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the console did not answer /healthz on {addr} within 20 s; see {}",
            console.log.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the edge answers `GET /readyz` with 200 (its database answers).
pub async fn wait_ready(edge: &mut ChildProcess, addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        edge.ensure_running()?;
        if crate::load::get_status(addr, "/readyz").await == Some(200) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the edge did not become ready on {addr} within 20 s; see {}",
            edge.log.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The processes of a one-off bench (console, login and API floods): `toml` written to
/// `{out_dir}/hookline-bench-{name}.toml`, `hookline-edge` started and ready on `edge_port`, and with
/// `console_port` the console process too (ready on that port); then `work` with the edge's pid. Every child is
/// killed afterwards, whatever happened; logs are `{name}-edge.log` and `{name}-console.log` in `out_dir`.
pub async fn with_processes<T, F, Fut>(
    bin_dir: &Path,
    out_dir: &Path,
    name: &str,
    toml: &str,
    edge_port: u16,
    console_port: Option<u16>,
    work: F,
) -> anyhow::Result<T>
where
    F: FnOnce(u32) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    std::fs::create_dir_all(out_dir)?;
    let config_path = out_dir.join(format!("hookline-bench-{name}.toml"));
    std::fs::write(&config_path, toml)?;
    let mut edge = ChildProcess::spawn(
        bin_dir,
        "hookline-edge",
        &config_path,
        &out_dir.join(format!("{name}-edge.log")),
    )?;
    let result = async {
        wait_ready(&mut edge, ([127, 0, 0, 1], edge_port).into()).await?;
        let Some(console_port) = console_port else {
            return work(edge.pid()).await;
        };
        let mut console = ChildProcess::spawn_console(
            bin_dir,
            &config_path,
            &out_dir.join(format!("{name}-console.log")),
        )?;
        let result = match wait_console(&mut console, ([127, 0, 0, 1], console_port).into()).await {
            Ok(()) => work(edge.pid()).await,
            Err(e) => Err(e),
        };
        console.kill().await.ok();
        result
    }
    .await;
    edge.kill().await.ok();
    result
}

/// Runs `measure` on a fresh database `hookline_bench_{name}_{uuid}` (created and migrated first) and drops the
/// database afterwards, whatever `measure` returned: the one-off benches (console, login and API floods) leave
/// nothing behind.
pub async fn with_fresh_database<T, F, Fut>(
    pg_base_url: &str,
    name: &str,
    measure: F,
) -> anyhow::Result<T>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let base_url = pg_base_url.trim_end_matches('/').to_string();
    let db_name = format!("hookline_bench_{name}_{}", uuid::Uuid::new_v4().simple());
    let db_url = format!("{base_url}/{db_name}");
    hookline_core::db::migrate(&SecretString::from(db_url.clone()))
        .await
        .with_context(|| format!("create and migrate the {name} bench database"))?;
    let result = measure(db_url).await;
    if let Ok(mut conn) = sqlx::PgConnection::connect(&format!("{base_url}/postgres")).await {
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{db_name}\" WITH (FORCE)"
        ))
        .execute(&mut conn)
        .await
        .ok();
    }
    result
}
