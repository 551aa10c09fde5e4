//! Test harness: per-test databases on the real PostgreSQL, an edge bound to a free port, signed requests.
//!
//! Isolation: every test gets its own database `hookline_test_<uuid>` (and, from the worker stage on, its own
//! RabbitMQ name prefix), so tests run in parallel. Set `HOOKLINE_TEST_PG` to point at another server.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hookline_core::Config;
use secrecy::SecretString;
use sqlx::PgPool;

/// Secrets of the providers configured in [`test_config`].
pub mod secrets {
    /// Stripe endpoint secret (`whsec_` is part of the key for Stripe).
    pub const STRIPE: &str = "whsec_test_secret_for_hookline";
    /// Stripe secret kept during a rotation.
    pub const STRIPE_OLD: &str = "whsec_previous_secret";
    /// GitHub secret.
    pub const GITHUB: &str = "It's a Secret to Everybody";
    /// Standard Webhooks secret (base64 after `whsec_`).
    pub const STANDARD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    /// Mercado Pago secret.
    pub const MERCADOPAGO: &str = "mp_secret_for_tests";
    /// Shopify client secret.
    pub const SHOPIFY: &str = "shpss_test_secret";
    /// Pagar.me API key.
    pub const PAGARME: &str = "ak_test_Q2D2qDYGJSyeR1KbI4sLzGACEr73MF";
}

/// Base URL of the PostgreSQL server used by tests (without a database name).
pub fn pg_base_url() -> String {
    std::env::var("HOOKLINE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// Current unix time in seconds.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// A freshly created and migrated database, private to one test.
pub struct TestDb {
    /// Its URL.
    pub url: String,
    /// The server it lives on (`postgres://…:PORT`, no database name).
    pub base: String,
    /// A pool on it, for assertions.
    pub pool: PgPool,
}

impl Drop for TestDb {
    /// Drops the database when the test ends (pass or fail), so a run does not leave hundreds behind: a
    /// PostgreSQL restart checkpoints every file of every database, and the fault tests restart it. Set
    /// `HOOKLINE_TEST_KEEP_DB=1` to keep them for debugging. Runs on its own thread and runtime because `Drop`
    /// cannot await.
    fn drop(&mut self) {
        if std::env::var_os("HOOKLINE_TEST_KEEP_DB").is_some() {
            return;
        }
        let Some(name) = self.url.rsplit('/').next().map(str::to_string) else {
            return;
        };
        let admin = format!("{}/postgres", self.base);
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    let _ = sqlx::query(&sql).execute(&mut conn).await;
                    let _ = conn.close().await;
                }
            });
        })
        .join();
    }
}

impl TestDb {
    /// Creates `hookline_test_<uuid>` and applies the migrations through the same code path as `hookline migrate`.
    pub async fn new() -> TestDb {
        Self::new_on(&pg_base_url()).await
    }

    /// [`TestDb::new`] on the server at `base` (e.g. the failover proxy of `deploy/cluster.sh`).
    pub async fn new_on(base: &str) -> TestDb {
        let name = format!("hookline_test_{}", uuid::Uuid::new_v4().simple());
        let url = format!("{base}/{name}");
        // The server's 100 connections are shared by every test running at once (each with its pools and
        // child processes); at a peak, a new connection is refused with "too many clients" (SQLSTATE 53300:
        // 27 tests at once in a clean-clone run). That is a wait, not a failure: a refusal with a SQLSTATE
        // that hookline itself retries (`is_transient_sqlstate`, class 53 among them) is retried until
        // connections free up.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            match hookline_core::db::migrate(&SecretString::from(url.clone())).await {
                Ok(()) => break,
                Err(e)
                    if e.chain()
                        .filter_map(|c| c.downcast_ref::<sqlx::Error>())
                        .any(refused_for_now)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("create and migrate the test database: {e:?}"),
            }
        }
        let pool = loop {
            match PgPool::connect(&url).await {
                Ok(pool) => break pool,
                Err(e) if refused_for_now(&e) && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("connect to the test database: {e}"),
            }
        };
        TestDb {
            url,
            base: base.to_string(),
            pool,
        }
    }

    /// Number of stored webhook events.
    pub async fn event_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM webhook_events")
            .fetch_one(&self.pool)
            .await
            .expect("count events")
    }
}

/// The TOML used by tests: one provider per scheme, with the secrets in [`secrets`]. `extra_edge` is appended
/// to the `[edge]` table, `tail` after everything (whole tables). The relay is embedded unless `tail` says
/// otherwise; each call gets its own RabbitMQ prefix `test-<uuid>`.
pub fn test_config_toml(database_url: &str, extra_edge: &str, tail: &str) -> String {
    format!(
        r#"
database_url = "{database_url}"
[amqp]
prefix = "test-{prefix}"
delivery_limit = 3
[edge]
listen = "127.0.0.1:0"
max_body_bytes = 1048576
workers = 2
{extra_edge}
[providers.stripe]
scheme = "stripe"
secrets = ["{stripe}", "{stripe_old}"]
tolerance_secs = 300
fee_bps = 399
fee_fixed = 39
[providers.stripe-eu]
scheme = "stripe"
secrets = ["whsec_second_account"]
[providers.github]
scheme = "github"
secrets = ["{github}"]
[providers.standard]
scheme = "standard-webhooks"
secrets = ["{standard}"]
[providers.svix]
scheme = "svix"
secrets = ["{standard}"]
[providers.mercadopago]
scheme = "mercadopago"
secrets = ["{mp}"]
[providers.shopify]
scheme = "shopify"
secrets = ["{shopify}"]
[providers.pagarme]
scheme = "pagarme"
secrets = ["{pagarme}"]
fee_bps = 299
{tail}
"#,
        prefix = uuid::Uuid::new_v4().simple(),
        stripe = secrets::STRIPE,
        stripe_old = secrets::STRIPE_OLD,
        github = secrets::GITHUB,
        standard = secrets::STANDARD,
        mp = secrets::MERCADOPAGO,
        shopify = secrets::SHOPIFY,
        pagarme = secrets::PAGARME,
    )
}

/// Parses a test configuration (environment variables are not consulted). The text is remembered under the
/// configuration's RabbitMQ prefix (unique per [`test_config_toml`] call): the console is its own process and
/// [`TestEdge::spawn_on`] hands it the configuration as a file.
pub fn parse_config(toml: &str) -> Config {
    let no_env: [(&str, &str); 0] = [];
    let config = Config::from_toml_str(toml, "test", &no_env).expect("valid test config");
    TOML_BY_PREFIX
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(config.amqp.prefix.clone(), toml.to_string());
    config
}

/// The `[[destinations]]` of a test configuration (environment variables are not consulted), as the worker
/// reads them: the section is `hookline-delivery`'s.
pub fn destinations(config: &Config) -> Vec<hookline_delivery::DestinationConfig> {
    let no_env: [(&str, &str); 0] = [];
    hookline_delivery::destinations_from_config(config, &no_env).expect("valid [[destinations]]")
}

/// The text of every configuration [`parse_config`] parsed, by RabbitMQ prefix.
static TOML_BY_PREFIX: std::sync::Mutex<std::collections::BTreeMap<String, String>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// PostgreSQL refused with a SQLSTATE that a retry can cure ([`hookline_core::db::is_transient_sqlstate`]:
/// "too many clients", an administrator's shutdown, …) — not a closed port or a bad statement.
fn refused_for_now(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|c| hookline_core::db::is_transient_sqlstate(&c))
}

/// A port of 127.0.0.1 that is free now, for a server the test starts later (a child process needs a fixed port;
/// a cluster restarts its children on the same one).
///
/// Taken from BELOW the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768–60999 on Debian): a
/// port read from `bind(0)` and let go is an ephemeral one, and every outgoing connection the tests open (to
/// PostgreSQL, RabbitMQ, the edges) draws from that same range, so under the suite's parallel load one of them
/// took such a port before the child bound it ("cannot listen on 127.0.0.1:…", seen in CI). Below the range
/// only a listener can take a port; this process hands each port out once (a counter from an offset of its pid,
/// so that two test processes start apart), and skips the ones a bind shows are in use (RabbitMQ's 25672, say).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|&first| first > LOW + 1_000)
        .unwrap_or(32_768);
    let span = high - LOW;
    let offset = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let port = LOW + (offset + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(port).expect("a port number");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Every port of the range taken: the kernel's choice, raceable as described above.
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("local address")
        .port()
}

/// The real `hookline console serve` as a child process (SIGKILLed on drop), with its configuration file.
pub struct ConsoleProcess {
    /// The child.
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its configuration file (removed on drop).
    pub config: std::path::PathBuf,
}

impl Drop for ConsoleProcess {
    fn drop(&mut self) {
        self.child.kill9();
        std::fs::remove_file(&self.config).ok();
    }
}

impl ConsoleProcess {
    /// Starts `hookline console serve` on `toml` with `[console] listen` set to a free port and `[edge] listen`
    /// to `edge_port` (the overview reads the edge's `/metrics` there); returns once `/healthz` answers 200.
    pub async fn start(toml: &str, edge_port: u16) -> ConsoleProcess {
        let mut doc: toml_edit::DocumentMut = toml.parse().expect("test config is TOML");
        let port = free_port();
        doc["console"]["listen"] = toml_edit::value(format!("127.0.0.1:{port}"));
        doc["edge"]["listen"] = toml_edit::value(format!("127.0.0.1:{edge_port}"));
        let config = std::env::temp_dir().join(format!(
            "hookline-test-console-{}.toml",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&config, doc.to_string()).expect("write the console's config file");
        let path = config.to_str().expect("UTF-8 temp path").to_string();
        let child = Child::spawn("hookline", &["--config", &path, "console", "serve"], &[]);
        let mut console = ConsoleProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
            config,
        };
        console.wait_healthy(Duration::from_secs(20)).await;
        console
    }

    /// Waits until `/healthz` answers 200; panics saying what it last saw (or that the process exited).
    pub async fn wait_healthy(&mut self, timeout: Duration) {
        let client = reqwest::Client::new();
        let url = format!("{}/healthz", self.base);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.0.try_wait() {
                panic!("hookline console serve exited with {status} before answering {url}");
            }
            let last = match client.get(&url).send().await {
                Ok(r) if r.status() == 200 => return,
                Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => e.to_string(),
            };
            assert!(
                std::time::Instant::now() < deadline,
                "{url} did not answer 200 within {timeout:?}; last: {last}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An edge serving on a free port of 127.0.0.1, with its own database.
pub struct TestEdge {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The bound port.
    pub port: u16,
    /// Its database.
    pub db: TestDb,
    /// An HTTP client with a generous pool, for parallel requests.
    pub client: reqwest::Client,
    /// `http://127.0.0.1:PORT` of the operator console, when `[console]` is configured.
    pub console: Option<String>,
    /// The console's own process (`hookline console serve`), when `[console]` is configured.
    pub console_process: Option<ConsoleProcess>,
}

impl TestEdge {
    /// Starts an edge on a new database with the default test configuration.
    pub async fn spawn() -> TestEdge {
        Self::spawn_with("").await
    }

    /// Starts an edge without the embedded relay (edge-only tests need no broker), appending `extra_edge`
    /// lines to its `[edge]` table.
    pub async fn spawn_with(extra_edge: &str) -> TestEdge {
        let db = TestDb::new().await;
        let config = parse_config(&test_config_toml(
            &db.url,
            extra_edge,
            "[relay]\nembedded = false",
        ));
        Self::spawn_on(db, config).await
    }

    /// Starts an edge with an explicit configuration; with `[console]`, also the console's own process
    /// (`hookline console serve`, the real binary) on the same configuration (it must come from
    /// [`parse_config`]).
    pub async fn spawn_on(db: TestDb, config: Config) -> TestEdge {
        let no_env: [(&str, &str); 0] = [];
        let console = hookline_console::ConsoleConfig::from_config(&config, &no_env)
            .expect("valid [console]");
        let toml = console.as_ref().map(|_| {
            TOML_BY_PREFIX
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&config.amqp.prefix)
                .cloned()
                .expect(
                    "a configuration with [console] comes from parse_config (its text is needed)",
                )
        });
        let app = hookline_edge::Application::build(config)
            .await
            .expect("build the edge");
        let port = app.port();
        tokio::spawn(app.run_until_stopped());
        let console_process = match toml {
            Some(toml) => Some(ConsoleProcess::start(&toml, port).await),
            None => None,
        };
        let console = console_process.as_ref().map(|c| c.base.clone());
        TestEdge {
            base: format!("http://127.0.0.1:{port}"),
            port,
            db,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("http client"),
            console,
            console_process,
        }
    }

    /// POSTs `body` with `headers` to `/webhooks/{provider}?{query}`.
    pub async fn post(
        &self,
        provider: &str,
        query: &str,
        headers: &[(String, String)],
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        let mut url = format!("{}/webhooks/{provider}", self.base);
        if !query.is_empty() {
            url.push('?');
            url.push_str(query);
        }
        let mut req = self.client.post(url).body(body);
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        req.send().await.expect("request reaches the edge")
    }

    /// POSTs a Stripe-style event signed with the test secret at the current time.
    pub async fn post_stripe(&self, body: &[u8]) -> reqwest::Response {
        let headers = stripe_headers(secrets::STRIPE, now(), body);
        self.post("stripe", "", &headers, body.to_vec()).await
    }

    /// Delivers a Stripe-style event the way Stripe does: a 503 (the edge's "retry me", e.g. when a disk stall
    /// outlasts `edge.db_timeout_ms`) is followed by the same event, freshly signed, after a growing pause; up
    /// to 8 attempts. Returns the last status, so a test asserting 200 still fails when the edge keeps refusing
    /// or answers anything else. Tests of the edge's own answers use [`TestEdge::post_stripe`].
    pub async fn deliver_stripe(&self, body: &[u8]) -> u16 {
        let mut pause = Duration::from_millis(100);
        for _ in 1..8 {
            let status = self.post_stripe(body).await.status().as_u16();
            if status != 503 {
                return status;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        self.post_stripe(body).await.status().as_u16()
    }
}

/// Headers of a Stripe delivery signed with `secret` at `ts`: `Stripe-Signature` first, then `Content-Type`
/// (signed by [`hookline_fake::headers_for`]).
pub fn stripe_headers(secret: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let event = hookline_fake::Event::raw("", body.to_vec(), "");
    hookline_fake::headers_for(hookline_fake::Scheme::Stripe, secret.as_bytes(), &event, ts)
        .expect("Stripe signing cannot fail")
        .headers
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

/// A ~realistic Stripe `payment_intent.succeeded` event with the given ids, created now.
pub fn stripe_event(event_id: &str, payment_id: &str, amount: i64) -> Vec<u8> {
    let object = stripe::payment_intent_object(payment_id, "succeeded", amount);
    stripe::envelope(event_id, "payment_intent.succeeded", now(), object)
        .to_string()
        .into_bytes()
}

pub mod billing;
pub mod console;
pub mod faults;
pub mod otlp;
pub mod pipeline;
pub mod proxy;
pub mod receiver;
pub mod sandboxed;
pub mod sdk;
pub use pipeline::*;

/// Builders of Stripe events (currency BRL, amounts in centavos): `payment_intent`, `charge_succeeded`, `refund`,
/// `charge_refunded`, `dispute`, `invoice_paid` and the objects and envelopes they are made of.
pub use hookline_fake::stripe;
