//! Configuration: one TOML file shared by every hookline process.
//!
//! Precedence, lowest to highest: built-in defaults (PostgreSQL and RabbitMQ on 127.0.0.1), the file given by
//! `--config FILE` or `HOOKLINE_CONFIG`, then the environment variables `DATABASE_URL` and `AMQP_URL` (one broker
//! URL; it replaces `amqp_url` / `amqp_urls`).
//!
//! Loading is two-step: the file is deserialised into a *raw* shape that mirrors the TOML, then validated into
//! [`Config`]. Validation errors name the offending field (`providers.stripe.secrets[1]: …`) so an operator can fix
//! the file without reading code. Secrets are held in [`SecretString`], whose `Debug` prints `[REDACTED]`.
//!
//! One concern, one file (longer than most): every section's raw shape, its validation helper (one per section)
//! and their tests, so that a new key is added in one place.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hookline_signature::Scheme;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

mod delivery;
pub use delivery::{DeliveryConfig, DestinationConfig, MAX_DESTINATIONS, MAX_SECRETS};

/// Environment variable naming the configuration file when `--config` is not given.
pub const CONFIG_ENV: &str = "HOOKLINE_CONFIG";
/// Default database: the local cluster, database `hookline`.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/hookline";
/// Default broker: the local RabbitMQ with the stock guest account.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Most broker endpoints `amqp_urls` may list (a RabbitMQ cluster has a handful of nodes; a longer list is a
/// mistake, and every reconnection may try them all).
pub const MAX_AMQP_ENDPOINTS: usize = 16;
/// Default `amqp.quorum_initial_group_size`: three replicas, so a three-node cluster keeps every quorum queue
/// with one node down. RabbitMQ caps it at the cluster's size, so it works on a single node too.
pub const DEFAULT_QUORUM_INITIAL_GROUP_SIZE: u32 = 3;
/// Largest accepted `amqp.quorum_initial_group_size` (Raft groups beyond this only cost latency).
pub const MAX_QUORUM_INITIAL_GROUP_SIZE: u32 = 9;

/// A configuration problem, always naming the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}")]
    Read {
        /// The path that was tried.
        path: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or has fields of the wrong shape.
    #[error("configuration file {path} is invalid: {message}")]
    Parse {
        /// The path that was read.
        path: String,
        /// Where and what, with values redacted (see `parse_error_message`): never the source line.
        message: String,
    },
    /// A field is present and well-formed TOML but its value is not acceptable.
    #[error("{field}: {message}")]
    Invalid {
        /// Dotted path of the field, e.g. `providers.stripe.secrets[0]`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl ConfigError {
    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The validated configuration of a hookline deployment.
#[derive(Debug, Clone)]
pub struct Config {
    /// PostgreSQL connection URL (may carry a password, hence secret).
    pub database_url: SecretString,
    /// RabbitMQ endpoints (`amqp_url` or `amqp_urls`): the nodes of one cluster, in the order they are tried.
    pub amqp_urls: AmqpEndpoints,
    /// RabbitMQ naming.
    pub amqp: AmqpConfig,
    /// The HTTP edge.
    pub edge: EdgeConfig,
    /// The outbox relay.
    pub relay: RelayConfig,
    /// The worker.
    pub worker: WorkerConfig,
    /// Retention of raw events.
    pub retention: RetentionConfig,
    /// `[reconcile]`: the worker's periodic reconciliation against provider APIs (off by default).
    pub reconcile: ReconcileConfig,
    /// `[sandbox]`: the local Stripe / Mercado Pago double (`hookline sandbox`).
    pub sandbox: SandboxConfig,
    /// `[api]`: the merchant-facing API on its own listener; `None` (section absent) = no API.
    pub api: Option<ApiConfig>,
    /// `[console]`: the operator web console on its own listener; `None` (section absent) = no console.
    pub console: Option<ConsoleConfig>,
    /// Configured providers by name; the name is the URL segment in `POST /webhooks/{name}`.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[[destinations]]`: the merchant's HTTP endpoints that receive domain events.
    pub destinations: Vec<DestinationConfig>,
    /// `[delivery]`: how domain events are delivered.
    pub delivery: DeliveryConfig,
}

/// `[amqp]`: RabbitMQ naming and queue policy.
#[derive(Debug, Clone)]
pub struct AmqpConfig {
    /// Every exchange and queue name starts with this prefix, so several deployments (or tests) share a broker.
    pub prefix: String,
    /// Deliveries of one message before the quorum queue dead-letters it (crash loops, handler panics).
    pub delivery_limit: u32,
    /// Replicas of each quorum queue at declaration (`x-quorum-initial-group-size`); RabbitMQ uses
    /// min(this, cluster size) nodes.
    pub quorum_initial_group_size: u32,
}

/// One broker endpoint: its URL (secret: it may carry credentials) and `host:port`, the only part ever logged.
#[derive(Clone)]
pub struct AmqpEndpoint {
    /// The full URL, credentials included.
    pub url: SecretString,
    /// `host:port`, safe for logs and errors.
    pub label: String,
}

impl std::fmt::Debug for AmqpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

/// The validated broker endpoints (`amqp_url` = one, `amqp_urls` = the nodes of a cluster): never empty, at most
/// [`MAX_AMQP_ENDPOINTS`], each an `amqp://` or `amqps://` URL with a host. `hookline_bus::connect` tries them in
/// turn.
#[derive(Clone, Debug)]
pub struct AmqpEndpoints(Vec<AmqpEndpoint>);

impl AmqpEndpoints {
    /// Validates `urls`; errors name `field` (and the index for a list) but never quote a URL, which may hold a
    /// password.
    pub fn new(urls: &[String], field: &str) -> Result<AmqpEndpoints, ConfigError> {
        if urls.is_empty() {
            return Err(ConfigError::invalid(field, "must list at least one URL"));
        }
        if urls.len() > MAX_AMQP_ENDPOINTS {
            return Err(ConfigError::invalid(
                field,
                format!(
                    "lists {} URLs, at most {MAX_AMQP_ENDPOINTS} are accepted",
                    urls.len()
                ),
            ));
        }
        let list = urls.len() > 1 || field.ends_with('s');
        urls.iter()
            .enumerate()
            .map(|(i, url)| {
                let name = if list {
                    format!("{field}[{i}]")
                } else {
                    field.to_string()
                };
                Self::endpoint(url, &name)
            })
            .collect::<Result<Vec<_>, _>>()
            .map(AmqpEndpoints)
    }

    /// One URL (the `AMQP_URL` variable, tools and tests that take a single broker).
    pub fn single(url: &str) -> Result<AmqpEndpoints, ConfigError> {
        Self::new(&[url.to_string()], "amqp_url")
    }

    fn endpoint(url: &str, field: &str) -> Result<AmqpEndpoint, ConfigError> {
        let bad = || ConfigError::invalid(field, "must be an amqp:// or amqps:// URL with a host");
        if url.len() > 2048 {
            return Err(ConfigError::invalid(field, "is longer than 2048 bytes"));
        }
        let parsed = url::Url::parse(url).map_err(|_| bad())?;
        let default_port = match parsed.scheme() {
            "amqp" => 5672,
            "amqps" => 5671,
            _ => return Err(bad()),
        };
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(bad)?;
        Ok(AmqpEndpoint {
            url: SecretString::from(url.to_string()),
            label: format!("{host}:{}", parsed.port().unwrap_or(default_port)),
        })
    }

    /// The endpoints in configured order.
    pub fn endpoints(&self) -> &[AmqpEndpoint] {
        &self.0
    }

    /// Number of endpoints (at least one).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false (validation refuses an empty list); here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first endpoint.
    pub fn first(&self) -> &AmqpEndpoint {
        &self.0[0]
    }
}

/// `[relay]`: the transactional-outbox publisher.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Run the relay inside the edge process (publish right after each commit).
    pub embedded: bool,
    /// How often the sweeper looks for committed-but-unpublished events.
    pub sweep_interval: Duration,
    /// The sweeper only takes rows older than this, leaving fresh ones to the fast path.
    pub sweep_min_age: Duration,
    /// Rows per sweep batch (one transaction, pipelined publishes).
    pub batch_size: u32,
    /// How long a fast-path batch that is not full waits for more committed events before its publish round
    /// (0 = never): under ingest pressure fewer, larger rounds for a few milliseconds of relay lag.
    pub linger: Duration,
    /// One deadline for a batch's writes and confirms: past it the batch is treated as unpublished and the
    /// publisher replaced.
    pub confirm_timeout: Duration,
    /// An unpublished event older than this needs attention: `hookline status` exits 1 (its
    /// `--max-unpublished-age` overrides it for one run).
    pub max_unpublished_age: Duration,
}

/// `[reconcile]`: periodic reconciliation inside the worker (`hookline reconcile` for every provider with an
/// `api_base` and a scheme that supports it). Off unless `interval_secs` is set.
#[derive(Debug, Clone)]
pub struct ReconcileConfig {
    /// How often; `None` = never (the default).
    pub interval: Option<Duration>,
    /// How far back each run looks.
    pub window: Duration,
    /// API requests per second at most.
    pub rate: u32,
}

/// `[retention]`: how long raw events and their processed markers are kept.
#[derive(Debug, Clone)]
pub struct RetentionConfig {
    /// `hookline purge` refuses a window shorter than this unless `--force`. Default 30 days: above every
    /// provider's retry horizon (Stripe retries for 3 days), so a purged event can no longer be redelivered.
    pub floor: Duration,
    /// When set, the worker purges events older than this periodically.
    pub auto_purge_older_than: Option<Duration>,
    /// How often the worker's periodic purge runs.
    pub auto_purge_interval: Duration,
    /// Rows deleted per batch (one short transaction each).
    pub batch_size: u32,
}

/// `[worker]`: the consumer.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Unacknowledged deliveries RabbitMQ may push to one worker process (`basic.qos`).
    pub prefetch: u16,
    /// Deliveries processed at once by one worker process.
    pub concurrency: usize,
    /// Size of the worker's connection pool.
    pub db_max_connections: u32,
    /// Most deliveries applied in one transaction (each in its own savepoint); 1 disables batching.
    pub batch_max: usize,
    /// How long a batch that is not full waits for more deliveries before it starts (0 = never waits).
    pub batch_linger: Duration,
    /// Where the worker serves `/healthz` and `/metrics`; `None` (the default) serves nothing.
    pub listen: Option<SocketAddr>,
}

/// `[edge]`: the HTTP receiver.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Largest accepted request body; larger ones get 413 without being buffered.
    pub max_body_bytes: usize,
    /// Budget for storing one event (pool acquire + INSERT). Past it the edge answers 503 so the provider retries.
    pub db_timeout: Duration,
    /// Size of the edge's connection pool.
    pub db_max_connections: u32,
    /// A client must deliver its request headers within this time (408 otherwise).
    pub client_request_timeout: Duration,
    /// A client must deliver its whole body within this time (408 otherwise): defeats trickled bodies.
    pub body_read_timeout: Duration,
    /// On SIGTERM, in-flight requests get this long to finish.
    pub shutdown_timeout: Duration,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// Most rows written by one multi-row INSERT (group commit); 1 writes each request on its own.
    pub batch_max: usize,
    /// Batches in flight at once (each holds one pooled connection while it writes).
    pub batch_writers: usize,
}

/// `[providers.NAME]`: one webhook source.
#[derive(Clone)]
pub struct ProviderConfig {
    /// The provider's name (the URL segment).
    pub name: String,
    /// How its signatures are computed.
    pub scheme: Scheme,
    /// Accepted secrets, current first. Several are accepted at once during rotation.
    pub secrets: Vec<SecretString>,
    /// Accepted clock skew for schemes that sign a timestamp; `None` for schemes that sign none.
    pub tolerance_secs: Option<u64>,
    /// Provider fee in basis points of the amount (used by the ledger).
    pub fee_bps: i64,
    /// Fixed provider fee per payment, in minor units (used by the ledger).
    pub fee_fixed: i64,
    /// Base URL of the provider's API (`https://api.stripe.com`, `https://api.mercadopago.com`, or the local
    /// sandbox): what the worker fetches resources from and where outbound calls and reconciliation go.
    pub api_base: Option<url::Url>,
    /// Bearer token for that API (`env:VAR` allowed); never logged.
    pub api_token: Option<SecretString>,
}

impl std::fmt::Debug for ProviderConfig {
    // Written by hand so the number of secrets is visible but never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("name", &self.name)
            .field("scheme", &self.scheme.as_str())
            .field(
                "secrets",
                &format_args!("[{} redacted]", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .field("fee_bps", &self.fee_bps)
            .field("fee_fixed", &self.fee_fixed)
            .field("api_base", &self.api_base.as_ref().map(url::Url::as_str))
            .field("api_token", &self.api_token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

impl ProviderConfig {
    /// The secrets as byte slices, in configured order, for the verifier.
    pub fn secret_bytes(&self) -> Vec<&[u8]> {
        self.secrets
            .iter()
            .map(|s| s.expose_secret().as_bytes())
            .collect()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    database_url: Option<String>,
    amqp_url: Option<String>,
    amqp_urls: Option<Vec<String>>,
    #[serde(default)]
    amqp: RawAmqp,
    #[serde(default)]
    edge: RawEdge,
    #[serde(default)]
    relay: RawRelay,
    #[serde(default)]
    worker: RawWorker,
    #[serde(default)]
    retention: RawRetention,
    #[serde(default)]
    reconcile: RawReconcile,
    #[serde(default)]
    sandbox: RawSandbox,
    #[serde(default)]
    api: Option<RawApi>,
    #[serde(default)]
    console: Option<RawConsole>,
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    destinations: Vec<delivery::RawDestination>,
    #[serde(default)]
    delivery: delivery::RawDelivery,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAmqp {
    prefix: Option<String>,
    delivery_limit: Option<u32>,
    quorum_initial_group_size: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    embedded: Option<bool>,
    sweep_interval_ms: Option<u64>,
    sweep_min_age_ms: Option<u64>,
    batch_size: Option<u32>,
    linger_ms: Option<u64>,
    confirm_timeout_ms: Option<u64>,
    max_unpublished_age_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    floor_days: Option<u64>,
    auto_purge_older_than_days: Option<u64>,
    auto_purge_interval_secs: Option<u64>,
    batch_size: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconcile {
    interval_secs: Option<u64>,
    window_secs: Option<u64>,
    rate: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    listen: Option<String>,
    prefetch: Option<u16>,
    concurrency: Option<usize>,
    db_max_connections: Option<u32>,
    batch_max: Option<usize>,
    batch_linger_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdge {
    listen: Option<String>,
    max_body_bytes: Option<usize>,
    db_timeout_ms: Option<u64>,
    db_max_connections: Option<u32>,
    client_request_timeout_ms: Option<u64>,
    body_read_timeout_ms: Option<u64>,
    shutdown_timeout_secs: Option<u64>,
    workers: Option<usize>,
    batch_max: Option<usize>,
    batch_writers: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    scheme: Option<String>,
    secrets: Option<Vec<String>>,
    tolerance_secs: Option<u64>,
    fee_bps: Option<i64>,
    fee_fixed: Option<i64>,
    api_base: Option<String>,
    api_token: Option<String>,
}

/// Where environment lookups come from; a trait so tests need not mutate the process environment.
pub trait Env {
    /// The variable's value, if set.
    fn var(&self, name: &str) -> Option<String>;
}

/// The real process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl<const N: usize> Env for [(&str, &str); N] {
    fn var(&self, name: &str) -> Option<String> {
        self.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

/// The TOML parser's error without the parts that can hold a secret. `toml`'s `Display` quotes the offending
/// source line (`secrets = ["whsec_…"]`, a `database_url` with its password) and serde's messages quote string
/// values (`invalid type: string "…"`); this goes to stderr, i.e. the service log. What is kept: the line and
/// column, the key on that line, and the message with every double-quoted value replaced by `"…"`.
fn parse_error_message(e: &toml::de::Error, text: &str) -> String {
    let mut message = String::new();
    let mut quoted = false;
    for c in e.message().chars() {
        if c == '"' {
            if !quoted {
                message.push_str("\"…\"");
            }
            quoted = !quoted;
        } else if !quoted {
            message.push(c);
        }
    }
    let Some(span) = e.span() else {
        return message;
    };
    let start = span.start.min(text.len());
    let before = text.get(..start).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let key = text
        .lines()
        .nth(line - 1)
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim())
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"'))
        });
    match key {
        Some(key) => format!("line {line}, column {column} (key {key}): {message}"),
        None => format!("line {line}, column {column}: {message}"),
    }
}

impl Config {
    /// Loads the configuration: `path` if given, else `$HOOKLINE_CONFIG` if set, else defaults only.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let from_env = std::env::var(CONFIG_ENV).ok();
        let path = path.map(Path::to_path_buf).or(from_env.map(Into::into));
        match path {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                Self::from_toml_str(&text, &path.display().to_string(), &ProcessEnv)
            }
            None => Self::from_toml_str("", "<defaults>", &ProcessEnv),
        }
    }

    /// Parses and validates a TOML document; `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: parse_error_message(&e, text),
        })?;
        Self::validate(raw, env)
    }

    /// Validates every section; each helper below names the fields it checks in its errors.
    fn validate(raw: RawConfig, env: &dyn Env) -> Result<Config, ConfigError> {
        let (database_url, amqp_urls) =
            Self::urls(raw.database_url, raw.amqp_url, raw.amqp_urls, env)?;
        let amqp = Self::amqp(raw.amqp)?;
        let mut providers = BTreeMap::new();
        for (name, p) in raw.providers {
            providers.insert(name.clone(), Self::provider(name, p, env)?);
        }
        let edge = Self::edge(raw.edge)?;
        let sandbox = Self::sandbox(raw.sandbox, edge.listen)?;
        let api = match raw.api {
            Some(a) => Some(Self::api(a, edge.listen, env)?),
            None => None,
        };
        let console = match raw.console {
            Some(c) => Some(Self::console(
                c,
                edge.listen,
                api.as_ref().map(|a| a.listen),
            )?),
            None => None,
        };
        Ok(Config {
            database_url: SecretString::from(database_url),
            amqp_urls,
            amqp,
            edge,
            relay: Self::relay(raw.relay)?,
            worker: Self::worker(raw.worker)?,
            retention: Self::retention(raw.retention)?,
            reconcile: Self::reconcile(raw.reconcile)?,
            sandbox,
            api,
            console,
            providers,
            destinations: delivery::destinations(raw.destinations, env)?,
            delivery: delivery::delivery(raw.delivery)?,
        })
    }

    fn urls(
        database_url: Option<String>,
        amqp_url: Option<String>,
        amqp_urls: Option<Vec<String>>,
        env: &dyn Env,
    ) -> Result<(String, AmqpEndpoints), ConfigError> {
        let database_url = env
            .var("DATABASE_URL")
            .or(database_url)
            .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_string());
        if !(database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")) {
            return Err(ConfigError::invalid(
                "database_url",
                "must be a postgres:// URL",
            ));
        }
        let amqp = match (env.var("AMQP_URL"), amqp_url, amqp_urls) {
            (Some(url), _, _) => AmqpEndpoints::new(&[url], "AMQP_URL")?,
            (None, Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    "amqp_urls",
                    "set either amqp_url (one broker) or amqp_urls (a cluster), not both",
                ))
            }
            (None, Some(url), None) => AmqpEndpoints::new(&[url], "amqp_url")?,
            (None, None, Some(urls)) => AmqpEndpoints::new(&urls, "amqp_urls")?,
            (None, None, None) => AmqpEndpoints::new(&[DEFAULT_AMQP_URL.to_string()], "amqp_url")?,
        };
        Ok((database_url, amqp))
    }

    fn amqp(a: RawAmqp) -> Result<AmqpConfig, ConfigError> {
        let prefix = a.prefix.unwrap_or_else(|| "hookline".to_string());
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(ConfigError::invalid(
                "amqp.prefix",
                "must be non-empty and use only letters, digits, '-', '_' or '.'",
            ));
        }

        let delivery_limit = a.delivery_limit.unwrap_or(20);
        if delivery_limit == 0 {
            return Err(ConfigError::invalid(
                "amqp.delivery_limit",
                "must be greater than 0",
            ));
        }
        let quorum_initial_group_size = a
            .quorum_initial_group_size
            .unwrap_or(DEFAULT_QUORUM_INITIAL_GROUP_SIZE);
        if !(1..=MAX_QUORUM_INITIAL_GROUP_SIZE).contains(&quorum_initial_group_size) {
            return Err(ConfigError::invalid(
                "amqp.quorum_initial_group_size",
                format!("must be between 1 and {MAX_QUORUM_INITIAL_GROUP_SIZE}"),
            ));
        }
        Ok(AmqpConfig {
            prefix,
            delivery_limit,
            quorum_initial_group_size,
        })
    }

    fn relay(r: RawRelay) -> Result<RelayConfig, ConfigError> {
        let relay = RelayConfig {
            embedded: r.embedded.unwrap_or(true),
            sweep_interval: Duration::from_millis(positive(
                r.sweep_interval_ms,
                1000,
                "relay.sweep_interval_ms",
            )?),
            sweep_min_age: Duration::from_millis(r.sweep_min_age_ms.unwrap_or(2000)),
            batch_size: positive(r.batch_size.map(u64::from), 500, "relay.batch_size")? as u32,
            linger: linger(r.linger_ms, "relay.linger_ms")?,
            confirm_timeout: Duration::from_millis(positive(
                r.confirm_timeout_ms,
                10_000,
                "relay.confirm_timeout_ms",
            )?),
            max_unpublished_age: Duration::from_secs(positive(
                r.max_unpublished_age_secs,
                60,
                "relay.max_unpublished_age_secs",
            )?),
        };
        Ok(relay)
    }

    fn worker(w: RawWorker) -> Result<WorkerConfig, ConfigError> {
        let worker = WorkerConfig {
            prefetch: positive(w.prefetch.map(u64::from), 128, "worker.prefetch")? as u16,
            concurrency: positive(w.concurrency.map(|c| c as u64), 8, "worker.concurrency")?
                as usize,
            db_max_connections: positive(
                w.db_max_connections.map(u64::from),
                16,
                "worker.db_max_connections",
            )? as u32,
            batch_max: positive(w.batch_max.map(|b| b as u64), 32, "worker.batch_max")? as usize,
            batch_linger: linger(w.batch_linger_ms, "worker.batch_linger_ms")?,
            listen: match w.listen {
                None => None,
                Some(text) => Some(text.parse().map_err(|_| {
                    ConfigError::invalid(
                        "worker.listen",
                        format!("'{text}' is not an address like 127.0.0.1:9091"),
                    )
                })?),
            },
        };
        Ok(worker)
    }

    fn retention(rt: RawRetention) -> Result<RetentionConfig, ConfigError> {
        const DAY: u64 = 86_400;
        let floor_days = rt.floor_days.unwrap_or(30);
        let retention = RetentionConfig {
            floor: Duration::from_secs(floor_days * DAY),
            auto_purge_older_than: match rt.auto_purge_older_than_days {
                Some(d) if d < floor_days => {
                    return Err(ConfigError::invalid(
                        "retention.auto_purge_older_than_days",
                        format!("{d} is below retention.floor_days ({floor_days})"),
                    ))
                }
                Some(d) => Some(Duration::from_secs(d * DAY)),
                None => None,
            },
            auto_purge_interval: Duration::from_secs(positive(
                rt.auto_purge_interval_secs,
                3600,
                "retention.auto_purge_interval_secs",
            )?),
            batch_size: positive(rt.batch_size.map(u64::from), 1000, "retention.batch_size")?
                as u32,
        };
        Ok(retention)
    }

    fn edge(e: RawEdge) -> Result<EdgeConfig, ConfigError> {
        let listen = e.listen.unwrap_or_else(|| "127.0.0.1:8080".to_string());
        let listen: SocketAddr = listen.parse().map_err(|_| {
            ConfigError::invalid(
                "edge.listen",
                format!("'{listen}' is not an address like 127.0.0.1:8080"),
            )
        })?;
        let max_body_bytes = e.max_body_bytes.unwrap_or(1024 * 1024);
        if max_body_bytes == 0 {
            return Err(ConfigError::invalid(
                "edge.max_body_bytes",
                "must be greater than 0",
            ));
        }
        let db_timeout_ms = e.db_timeout_ms.unwrap_or(1500);
        if db_timeout_ms == 0 {
            return Err(ConfigError::invalid(
                "edge.db_timeout_ms",
                "must be greater than 0",
            ));
        }
        let db_max_connections = e.db_max_connections.unwrap_or(16);
        if db_max_connections == 0 {
            return Err(ConfigError::invalid(
                "edge.db_max_connections",
                "must be greater than 0",
            ));
        }
        if e.batch_writers.unwrap_or(0) > db_max_connections as usize {
            return Err(ConfigError::invalid(
                "edge.batch_writers",
                format!("must not exceed edge.db_max_connections ({db_max_connections}): each batch holds a connection"),
            ));
        }
        let edge = EdgeConfig {
            listen,
            max_body_bytes,
            db_timeout: Duration::from_millis(db_timeout_ms),
            db_max_connections,
            client_request_timeout: Duration::from_millis(
                e.client_request_timeout_ms.unwrap_or(5000),
            ),
            body_read_timeout: Duration::from_millis(e.body_read_timeout_ms.unwrap_or(10_000)),
            shutdown_timeout: Duration::from_secs(e.shutdown_timeout_secs.unwrap_or(30)),
            workers: e.workers.unwrap_or(0),
            batch_max: positive(e.batch_max.map(|v| v as u64), 256, "edge.batch_max")? as usize,
            // Default: 4 batches in flight, but never more than the pool can serve.
            batch_writers: positive(
                e.batch_writers.map(|v| v as u64),
                4.min(u64::from(db_max_connections)),
                "edge.batch_writers",
            )? as usize,
        };
        Ok(edge)
    }

    fn reconcile(r: RawReconcile) -> Result<ReconcileConfig, ConfigError> {
        let interval = match r.interval_secs {
            None => None,
            Some(s) if s < 60 => {
                return Err(ConfigError::invalid(
                    "reconcile.interval_secs",
                    "must be at least 60 (each run reads the provider's API)",
                ))
            }
            Some(s) => Some(Duration::from_secs(s)),
        };
        Ok(ReconcileConfig {
            interval,
            window: Duration::from_secs(positive(r.window_secs, 86_400, "reconcile.window_secs")?),
            rate: positive(r.rate.map(u64::from), 5, "reconcile.rate")? as u32,
        })
    }

    fn provider(
        name: String,
        p: RawProvider,
        env: &dyn Env,
    ) -> Result<ProviderConfig, ConfigError> {
        let field = |f: &str| format!("providers.{name}.{f}");
        if name.is_empty()
            || name.len() > crate::events::MAX_PROVIDER_NAME_BYTES
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        {
            return Err(ConfigError::invalid(
                format!("providers.{name}"),
                format!(
                    "a provider name is a URL segment of at most {} bytes: use only letters, digits, '-' or '_'",
                    crate::events::MAX_PROVIDER_NAME_BYTES
                ),
            ));
        }
        let scheme_text = p
            .scheme
            .ok_or_else(|| ConfigError::invalid(field("scheme"), "is required"))?;
        let scheme: Scheme = scheme_text.parse().map_err(|_| {
            let valid: Vec<&str> = Scheme::ALL.iter().map(|s| s.as_str()).collect();
            ConfigError::invalid(
                field("scheme"),
                format!(
                    "unknown scheme '{scheme_text}' (valid: {})",
                    valid.join(", ")
                ),
            )
        })?;
        let secrets_raw = p.secrets.unwrap_or_default();
        if secrets_raw.is_empty() {
            return Err(ConfigError::invalid(
                field("secrets"),
                "at least one secret is required",
            ));
        }
        let mut secrets = Vec::with_capacity(secrets_raw.len());
        for (i, s) in secrets_raw.into_iter().enumerate() {
            let f = format!("providers.{name}.secrets[{i}]");
            let value = match s.strip_prefix("env:") {
                Some(var) => env.var(var).ok_or_else(|| {
                    ConfigError::invalid(&f, format!("environment variable {var} is not set"))
                })?,
                None => s,
            };
            if value.is_empty() {
                return Err(ConfigError::invalid(&f, "is empty"));
            }
            hookline_signature::validate_secret(scheme, value.as_bytes())
                .map_err(|why| ConfigError::invalid(&f, why))?;
            secrets.push(SecretString::from(value));
        }
        let tolerance_secs = match (p.tolerance_secs, scheme.signs_timestamp()) {
            (Some(_), false) => {
                return Err(ConfigError::invalid(
                    field("tolerance_secs"),
                    format!(
                        "scheme '{}' signs no timestamp, so a tolerance has no meaning",
                        scheme.as_str()
                    ),
                ))
            }
            (Some(0), true) => {
                return Err(ConfigError::invalid(
                    field("tolerance_secs"),
                    "must be greater than 0",
                ))
            }
            (Some(t), true) => Some(t),
            (None, _) => scheme.default_tolerance_secs(),
        };
        let fee_bps = p.fee_bps.unwrap_or(0);
        if !(0..=10_000).contains(&fee_bps) {
            return Err(ConfigError::invalid(
                field("fee_bps"),
                "must be between 0 and 10000",
            ));
        }
        let fee_fixed = p.fee_fixed.unwrap_or(0);
        if fee_fixed < 0 {
            return Err(ConfigError::invalid(
                field("fee_fixed"),
                "must not be negative",
            ));
        }
        let api_base = match p.api_base {
            None => None,
            Some(text) => {
                let parsed = url::Url::parse(&text).map_err(|e| {
                    ConfigError::invalid(field("api_base"), format!("is not a URL: {e}"))
                })?;
                if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
                    return Err(ConfigError::invalid(
                        field("api_base"),
                        "must be an http:// or https:// URL with a host",
                    ));
                }
                Some(parsed)
            }
        };
        let api_token = match p.api_token {
            None => None,
            Some(t) => {
                let f = field("api_token");
                let value = match t.strip_prefix("env:") {
                    Some(var) => env.var(var).ok_or_else(|| {
                        ConfigError::invalid(&f, format!("environment variable {var} is not set"))
                    })?,
                    None => t,
                };
                if value.is_empty() || value.chars().any(|c| c.is_control() || c == ' ') {
                    return Err(ConfigError::invalid(
                        &f,
                        "must be a non-empty token without spaces or control characters",
                    ));
                }
                Some(SecretString::from(value))
            }
        };
        if api_token.is_some() && api_base.is_none() {
            return Err(ConfigError::invalid(
                field("api_base"),
                "is required when api_token is set",
            ));
        }
        Ok(ProviderConfig {
            name,
            scheme,
            secrets,
            tolerance_secs,
            fee_bps,
            fee_fixed,
            api_base,
            api_token,
        })
    }

    fn api(a: RawApi, edge_listen: SocketAddr, env: &dyn Env) -> Result<ApiConfig, ConfigError> {
        let text = a
            .listen
            .ok_or_else(|| ConfigError::invalid("api.listen", "is required"))?;
        let listen: SocketAddr = text.parse().map_err(|_| {
            ConfigError::invalid(
                "api.listen",
                format!("'{text}' is not an address like 127.0.0.1:8081"),
            )
        })?;
        if listen == edge_listen && listen.port() != 0 {
            return Err(ConfigError::invalid(
                "api.listen",
                "must differ from edge.listen: the providers' listener never serves the API",
            ));
        }
        let mut raw_clients: Vec<(String, String, Vec<String>)> = Vec::new();
        if let Some(keys) = a.keys {
            // Legacy `[api] keys`: every listed key is one anonymous client.
            raw_clients.push((LEGACY_API_CLIENT.to_string(), "api.keys".to_string(), keys));
        }
        for (i, c) in a.clients.unwrap_or_default().into_iter().enumerate() {
            let f = format!("api.clients[{i}]");
            let name = c
                .name
                .ok_or_else(|| ConfigError::invalid(format!("{f}.name"), "is required"))?;
            if name.is_empty()
                || name.len() > MAX_API_CLIENT_NAME_BYTES
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
            {
                return Err(ConfigError::invalid(
                    format!("{f}.name"),
                    format!(
                        "must be 1 to {MAX_API_CLIENT_NAME_BYTES} characters of a-z, 0-9, _ and -"
                    ),
                ));
            }
            if raw_clients.iter().any(|(seen, _, _)| *seen == name) {
                return Err(ConfigError::invalid(
                    format!("{f}.name"),
                    if name == LEGACY_API_CLIENT {
                        format!("'{name}' is the client of the legacy api.keys; move those keys into this client")
                    } else {
                        format!("repeats the client name '{name}'")
                    },
                ));
            }
            raw_clients.push((name, format!("{f}.keys"), c.keys.unwrap_or_default()));
        }
        if raw_clients.is_empty() {
            return Err(ConfigError::invalid(
                "api.clients",
                "at least one client is required ([[api.clients]] with a name and keys)",
            ));
        }
        let mut clients: Vec<ApiClient> = Vec::with_capacity(raw_clients.len());
        for (name, f, keys_raw) in raw_clients {
            if keys_raw.is_empty() {
                return Err(ConfigError::invalid(&f, "at least one key is required"));
            }
            let mut keys: Vec<SecretString> = Vec::with_capacity(keys_raw.len());
            for (i, k) in keys_raw.into_iter().enumerate() {
                let f = format!("{f}[{i}]");
                let value = match k.strip_prefix("env:") {
                    Some(var) => env.var(var).ok_or_else(|| {
                        ConfigError::invalid(&f, format!("environment variable {var} is not set"))
                    })?,
                    None => k,
                };
                // A Bearer token: visible ASCII only, so it travels in a header unchanged.
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(ConfigError::invalid(
                        &f,
                        "must be a non-empty token of visible ASCII characters (no spaces)",
                    ));
                }
                let seen = keys
                    .iter()
                    .chain(clients.iter().flat_map(|c| c.keys.iter()));
                if seen.into_iter().any(|s| s.expose_secret() == value) {
                    return Err(ConfigError::invalid(
                        &f,
                        "repeats an earlier key (a key belongs to exactly one client)",
                    ));
                }
                keys.push(SecretString::from(value));
            }
            clients.push(ApiClient { name, keys });
        }
        Ok(ApiConfig {
            listen,
            clients,
            idempotency_window: Duration::from_secs(positive(
                a.idempotency_window_secs,
                86_400,
                "api.idempotency_window_secs",
            )?),
        })
    }

    fn console(
        c: RawConsole,
        edge_listen: SocketAddr,
        api_listen: Option<SocketAddr>,
    ) -> Result<ConsoleConfig, ConfigError> {
        let text = c
            .listen
            .unwrap_or_else(|| DEFAULT_CONSOLE_LISTEN.to_string());
        let listen: SocketAddr = text.parse().map_err(|_| {
            ConfigError::invalid(
                "console.listen",
                format!("'{text}' is not an address like 127.0.0.1:8090"),
            )
        })?;
        if listen.port() != 0 && (listen == edge_listen || Some(listen) == api_listen) {
            return Err(ConfigError::invalid(
                "console.listen",
                "must differ from edge.listen and api.listen: the console has its own listener",
            ));
        }
        let raw_ops = c.operators.unwrap_or_default();
        if raw_ops.is_empty() {
            return Err(ConfigError::invalid(
                "console.operators",
                "at least one operator is required (create a hash with `hookline console hash-password`)",
            ));
        }
        let mut operators: Vec<ConsoleOperator> = Vec::with_capacity(raw_ops.len());
        for (i, o) in raw_ops.into_iter().enumerate() {
            let f = format!("console.operators[{i}]");
            let name = o.name.unwrap_or_default();
            if name.is_empty()
                || name.len() > MAX_OPERATOR_NAME_BYTES
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b))
            {
                return Err(ConfigError::invalid(
                    format!("{f}.name"),
                    format!(
                        "must be 1 to {MAX_OPERATOR_NAME_BYTES} characters among letters, digits and . _ - @"
                    ),
                ));
            }
            if operators.iter().any(|seen| seen.name == name) {
                return Err(ConfigError::invalid(
                    format!("{f}.name"),
                    format!("operator '{name}' is configured twice"),
                ));
            }
            let hash = o.password_hash.unwrap_or_default();
            // Checked here, so that a typo is a startup error and not an operator who can never log in.
            let phc = argon2::PasswordHash::new(&hash).map_err(|e| {
                ConfigError::invalid(
                    format!("{f}.password_hash"),
                    format!("is not a PHC string ({e}); create one with `hookline console hash-password`"),
                )
            })?;
            if phc.algorithm.as_str() != "argon2id" {
                return Err(ConfigError::invalid(
                    format!("{f}.password_hash"),
                    "must be an Argon2id hash ($argon2id$…)",
                ));
            }
            operators.push(ConsoleOperator {
                name,
                password_hash: SecretString::from(hash),
            });
        }
        Ok(ConsoleConfig {
            listen,
            operators,
            session_ttl: Duration::from_secs(positive(
                c.session_ttl_secs,
                8 * 3600,
                "console.session_ttl_secs",
            )?),
            secure_cookie: c.secure_cookie.unwrap_or(false),
        })
    }

    fn sandbox(s: RawSandbox, edge_listen: SocketAddr) -> Result<SandboxConfig, ConfigError> {
        let edge_url = match s.edge_url {
            Some(text) => {
                let parsed = url::Url::parse(&text).map_err(|e| {
                    ConfigError::invalid("sandbox.edge_url", format!("is not a URL: {e}"))
                })?;
                if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
                    return Err(ConfigError::invalid(
                        "sandbox.edge_url",
                        "must be an http:// or https:// URL with a host",
                    ));
                }
                parsed
            }
            None => {
                // An edge listening on every interface is reached on loopback.
                let ip = match edge_listen.ip() {
                    std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
                        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
                    }
                    std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
                        std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
                    }
                    ip => ip,
                };
                let text = format!("http://{}", SocketAddr::new(ip, edge_listen.port()));
                url::Url::parse(&text).map_err(|e| {
                    ConfigError::invalid("sandbox.edge_url", format!("default {text}: {e}"))
                })?
            }
        };
        Ok(SandboxConfig {
            edge_url,
            idempotency_window: Duration::from_secs(positive(
                s.idempotency_window_secs,
                86_400,
                "sandbox.idempotency_window_secs",
            )?),
            webhook_timeout: Duration::from_millis(positive(
                s.webhook_timeout_ms,
                5_000,
                "sandbox.webhook_timeout_ms",
            )?),
            webhook_max_attempts: positive(
                s.webhook_max_attempts.map(u64::from),
                8,
                "sandbox.webhook_max_attempts",
            )? as u32,
        })
    }
}

/// `[sandbox]`: settings of `hookline sandbox`, the local double of the Stripe and Mercado Pago APIs that signs
/// and sends webhooks to the edge.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Base URL webhooks are sent to (`{edge_url}/webhooks/{provider}`); default `http://{edge.listen}`, loopback
    /// when the edge listens on every interface.
    pub edge_url: url::Url,
    /// How long an idempotency key is remembered (Stripe: 24 h).
    pub idempotency_window: Duration,
    /// A webhook attempt without an answer within this time failed and is retried.
    pub webhook_timeout: Duration,
    /// Attempts per webhook delivery before it is given up.
    pub webhook_max_attempts: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    edge_url: Option<String>,
    idempotency_window_secs: Option<u64>,
    webhook_timeout_ms: Option<u64>,
    webhook_max_attempts: Option<u32>,
}

/// `[api]`: the merchant-facing API (payment intents, refunds), served on its own listener.
#[derive(Clone)]
pub struct ApiConfig {
    /// Address of the API listener (never the providers' `edge.listen`).
    pub listen: SocketAddr,
    /// The API's clients (`[[api.clients]]`, plus the legacy `[api] keys` as the client
    /// [`LEGACY_API_CLIENT`]). Intents, refunds and idempotency keys belong to a client's *name*, so removing,
    /// reordering or rotating keys never changes what a client sees.
    pub clients: Vec<ApiClient>,
    /// How long an `Idempotency-Key` and its stored response are kept (default 24 h).
    pub idempotency_window: Duration,
}

impl std::fmt::Debug for ApiConfig {
    // Written by hand so the number of keys is visible but never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("listen", &self.listen)
            .field("clients", &self.clients)
            .field("idempotency_window", &self.idempotency_window)
            .finish()
    }
}

/// The client name the legacy `[api] keys` list stands for (all its keys are one client), and what the
/// migration `20261202000012_api_clients` maps the old index-based rows to.
pub const LEGACY_API_CLIENT: &str = "default";

/// Longest API client name (`[a-z0-9_-]`; stored on intents and idempotency keys).
pub const MAX_API_CLIENT_NAME_BYTES: usize = 64;

/// One `[[api.clients]]` entry: a stable name and the Bearer keys that authenticate as it (several at once
/// while one is rotated).
#[derive(Clone)]
pub struct ApiClient {
    /// Stable identity: what intents, refunds and idempotency keys are stored under.
    pub name: String,
    /// Accepted Bearer tokens (`env:VAR` allowed). Never logged.
    pub keys: Vec<SecretString>,
}

impl std::fmt::Debug for ApiClient {
    // Written by hand so the number of keys is visible but never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("name", &self.name)
            .field("keys", &format_args!("[{} redacted]", self.keys.len()))
            .finish()
    }
}

/// Where the console listens when `[console]` has no `listen`: loopback only, and no port deploy/up.sh uses
/// (edge 8080, sandbox 8090, worker 9091).
pub const DEFAULT_CONSOLE_LISTEN: &str = "127.0.0.1:8070";

/// Longest operator name (it is written into audit rows and shown in pages).
pub const MAX_OPERATOR_NAME_BYTES: usize = 64;

/// `[console]`: the operator web console, served by its own process (`hookline console serve`).
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Address of the console listener (default [`DEFAULT_CONSOLE_LISTEN`]; never `edge.listen`).
    pub listen: SocketAddr,
    /// Who may log in.
    pub operators: Vec<ConsoleOperator>,
    /// How long a session lasts after login (default 8 h).
    pub session_ttl: Duration,
    /// Mark the session cookie `Secure` (set it when the console is reached through HTTPS).
    pub secure_cookie: bool,
}

/// One `[[console.operators]]` entry.
#[derive(Clone)]
pub struct ConsoleOperator {
    /// Login name, recorded in audit rows.
    pub name: String,
    /// Argon2id PHC string (`hookline console hash-password`). Never logged nor shown.
    pub password_hash: SecretString,
}

impl std::fmt::Debug for ConsoleOperator {
    // Written by hand so that the hash never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleOperator")
            .field("name", &self.name)
            .field("password_hash", &"[redacted]")
            .finish()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConsole {
    listen: Option<String>,
    operators: Option<Vec<RawConsoleOperator>>,
    session_ttl_secs: Option<u64>,
    secure_cookie: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConsoleOperator {
    name: Option<String>,
    password_hash: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    listen: Option<String>,
    keys: Option<Vec<String>>,
    clients: Option<Vec<RawApiClient>>,
    idempotency_window_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApiClient {
    name: Option<String>,
    keys: Option<Vec<String>>,
}

/// A positive number or its default; zero is refused with the field's name.
fn positive(value: Option<u64>, default: u64, field: &str) -> Result<u64, ConfigError> {
    match value {
        Some(0) => Err(ConfigError::invalid(field, "must be greater than 0")),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// A batch linger in milliseconds (the worker's and the relay's): 5 unless set, 0 turns it off, at most 1000.
fn linger(value: Option<u64>, field: &str) -> Result<Duration, ConfigError> {
    match value.unwrap_or(5) {
        ms @ 0..=1000 => Ok(Duration::from_millis(ms)),
        _ => Err(ConfigError::invalid(
            field,
            "must be at most 1000 (it adds to every event's latency)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_ENV: [(&str, &str); 0] = [];

    fn err(text: &str) -> String {
        Config::from_toml_str(text, "test.toml", &NO_ENV)
            .expect_err("config should be rejected")
            .to_string()
    }

    #[test]
    fn syntax_errors_name_the_line_and_key_but_never_echo_a_secret() {
        let cases = [
            // Unterminated string: toml's Display would quote the whole line.
            "[providers.stripe]\nscheme = \"stripe\"\nsecrets=\"whsec_SUPERSECRET_1\n",
            // Wrong type: serde's message quotes the value.
            "database_url = \"postgres://u:SUPERSECRET_2@h/db\"\n[edge]\nmax_body_bytes = \"SUPERSECRET_3\"\n",
            // Stray token after a secret.
            "amqp_url = \"amqp://u:SUPERSECRET_4@h\" x\n",
        ];
        for text in cases {
            let message = err(text);
            assert!(!message.contains("SUPERSECRET"), "{message}");
            assert!(message.contains("line "), "{message}");
        }
        let message = err(cases[1]);
        assert!(message.contains("line 3"), "{message}");
        assert!(message.contains("max_body_bytes"), "{message}");
    }

    #[test]
    fn api_base_and_token_are_validated_and_the_token_redacted() {
        let env = [("MP_TOKEN", "APP_USR-secret-token")];
        let c = Config::from_toml_str(
            "[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\n\
             api_base = \"http://127.0.0.1:8090\"\napi_token = \"env:MP_TOKEN\"\n",
            "t",
            &env,
        )
        .unwrap();
        let mp = &c.providers["mp"];
        assert_eq!(
            mp.api_base.as_ref().unwrap().as_str(),
            "http://127.0.0.1:8090/"
        );
        assert_eq!(
            mp.api_token.as_ref().unwrap().expose_secret(),
            "APP_USR-secret-token"
        );
        assert!(!format!("{mp:?}").contains("APP_USR"));
        let message = err(
            "[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\napi_base = \"ftp://x\"\n",
        );
        assert!(message.contains("providers.mp.api_base"), "{message}");
        let message =
            err("[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\napi_token = \"t\"\n");
        assert!(message.contains("required when api_token"), "{message}");
    }

    #[test]
    fn console_section_is_optional_validated_and_its_hashes_redacted() {
        const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$oGPB3w1RZHGHqBCLw06GGA$9TRg8+jFrd4mZMR+dWYoXgG0eNgIA02msXcGYuY56wU";
        let op = |name: &str, hash: &str| {
            format!("[[console.operators]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\n")
        };
        assert!(Config::from_toml_str("", "t", &NO_ENV)
            .unwrap()
            .console
            .is_none());
        let c = Config::from_toml_str(&format!("[console]\n{}", op("alice", HASH)), "t", &NO_ENV)
            .unwrap();
        let console = c.console.as_ref().unwrap();
        assert_eq!(console.listen.to_string(), DEFAULT_CONSOLE_LISTEN);
        assert_eq!(console.operators[0].name, "alice");
        assert_eq!(console.session_ttl, Duration::from_secs(8 * 3600));
        assert!(!console.secure_cookie);
        assert!(
            !format!("{c:?}").contains("oGPB3w1RZHGHqBCLw06GGA"),
            "the hash is redacted"
        );
        assert!(err("[console]\n").starts_with("console.operators:"));
        assert!(err(&format!("[console]\n{}", op("alice", "plaintext")))
            .starts_with("console.operators[0].password_hash: is not a PHC string"));
        assert!(err(&format!(
            "[console]\n{}",
            op("alice", &HASH.replace("argon2id", "argon2i"))
        ))
        .starts_with("console.operators[0].password_hash: must be an Argon2id hash"));
        assert!(err(&format!(
            "[console]\n{}{}",
            op("alice", HASH),
            op("alice", HASH)
        ))
        .starts_with("console.operators[1].name:"));
        assert!(err(&format!("[console]\n{}", op("a b", HASH)))
            .starts_with("console.operators[0].name:"));
        assert!(
            err(&format!(
                "[console]\nlisten = \"127.0.0.1:8080\"\n{}",
                op("alice", HASH)
            ))
            .starts_with("console.listen:"),
            "never the providers' listener"
        );
        assert!(err(&format!(
            "[console]\nlisten = \"nowhere\"\n{}",
            op("alice", HASH)
        ))
        .starts_with("console.listen:"));
        assert!(err(&format!(
            "[console]\nsession_ttl_secs = 0\n{}",
            op("alice", HASH)
        ))
        .starts_with("console.session_ttl_secs:"));
    }

    #[test]
    fn api_section_is_optional_validated_and_its_keys_redacted() {
        assert!(Config::from_toml_str("", "t", &NO_ENV)
            .unwrap()
            .api
            .is_none());
        let env = [("API_KEY_2", "sk_hl_second_SUPERSECRET")];
        let c = Config::from_toml_str(
            "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"sk_hl_first_SUPERSECRET\", \"env:API_KEY_2\"]\n",
            "t",
            &env,
        )
        .unwrap();
        let api = c.api.as_ref().unwrap();
        assert_eq!(api.listen.to_string(), "127.0.0.1:8081");
        assert_eq!(api.clients.len(), 1);
        assert_eq!(api.clients[0].name, LEGACY_API_CLIENT);
        assert_eq!(
            api.clients[0].keys[1].expose_secret(),
            "sk_hl_second_SUPERSECRET"
        );
        assert_eq!(api.idempotency_window, Duration::from_secs(86_400));
        assert!(!format!("{c:?}").contains("SUPERSECRET"));
        assert_eq!(
            err("[api]\nlisten = \"127.0.0.1:8081\"\nkeys = []"),
            "api.keys: at least one key is required"
        );
        assert!(err("[api]\nlisten = \"127.0.0.1:8081\"").starts_with("api.clients:"));
        assert!(err("[api]\nkeys = [\"k\"]").starts_with("api.listen:"));
        assert!(
            err("[api]\nlisten = \"127.0.0.1:8080\"\nkeys = [\"k\"]").starts_with("api.listen:")
        );
        assert!(
            err("[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"a b\"]").starts_with("api.keys[0]:")
        );
        assert!(
            err("[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"k\", \"k\"]")
                .starts_with("api.keys[1]:")
        );
        assert!(
            err("[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"env:NOPE_NOT_SET\"]")
                .starts_with("api.keys[0]: environment variable")
        );
        assert!(err(
            "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"k\"]\nidempotency_window_secs = 0"
        )
        .starts_with("api.idempotency_window_secs:"));
    }

    #[test]
    fn api_clients_have_validated_unique_names_and_keys() {
        let env = [("SHOP_NEXT", "sk_shop_next_SUPERSECRET")];
        let c = Config::from_toml_str(
            "[api]\nlisten = \"127.0.0.1:8081\"\n\
             [[api.clients]]\nname = \"shop\"\nkeys = [\"sk_shop_SUPERSECRET\", \"env:SHOP_NEXT\"]\n\
             [[api.clients]]\nname = \"billing-app_2\"\nkeys = [\"sk_billing\"]\n",
            "t",
            &env,
        )
        .unwrap();
        let api = c.api.as_ref().unwrap();
        let names: Vec<&str> = api.clients.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["shop", "billing-app_2"]);
        assert_eq!(api.clients[0].keys.len(), 2);
        assert!(!format!("{c:?}").contains("SUPERSECRET"));
        let client = |name: &str, keys: &str| {
            format!("[[api.clients]]\nname = \"{name}\"\nkeys = [{keys}]\n")
        };
        let base = "[api]\nlisten = \"127.0.0.1:8081\"\n";
        for bad in ["", "Shop", "a b", "é", &"n".repeat(65)] {
            assert!(
                err(&format!("{base}{}", client(bad, "\"k\""))).starts_with("api.clients[0].name:"),
                "{bad:?}"
            );
        }
        assert!(
            err(&format!("{base}{}", "[[api.clients]]\nkeys = [\"k\"]\n"))
                .starts_with("api.clients[0].name: is required")
        );
        assert!(err(&format!(
            "{base}{}{}",
            client("a", "\"k1\""),
            client("a", "\"k2\"")
        ))
        .starts_with("api.clients[1].name: repeats"));
        // A key belongs to one client only.
        assert!(err(&format!(
            "{base}{}{}",
            client("a", "\"k1\""),
            client("b", "\"k1\"")
        ))
        .starts_with("api.clients[1].keys[0]: repeats an earlier key"));
        assert!(err(&format!("{base}{}", client("a", ""))).starts_with("api.clients[0].keys:"));
        // The legacy list is the client "default", alongside named clients, and keeps that name to itself.
        let mixed = Config::from_toml_str(
            &format!(
                "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"old\"]\n{}",
                client("shop", "\"new\"")
            ),
            "t",
            &NO_ENV,
        )
        .unwrap();
        let names: Vec<String> = mixed
            .api
            .unwrap()
            .clients
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, [LEGACY_API_CLIENT, "shop"]);
        assert!(err(&format!(
            "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"old\"]\n{}",
            client("default", "\"new\"")
        ))
        .starts_with("api.clients[0].name: 'default' is the client of the legacy api.keys"));
    }

    #[test]
    fn provider_names_are_bounded() {
        let long = "p".repeat(crate::events::MAX_PROVIDER_NAME_BYTES + 1);
        let message = err(&format!(
            "[providers.{long}]\nscheme = \"github\"\nsecrets = [\"x\"]\n"
        ));
        assert!(message.contains("at most"), "{message}");
    }

    #[test]
    fn defaults_point_at_localhost() {
        let c = Config::from_toml_str("", "t", &NO_ENV).unwrap();
        assert_eq!(c.database_url.expose_secret(), DEFAULT_DATABASE_URL);
        assert_eq!(c.amqp_urls.len(), 1);
        assert_eq!(c.amqp_urls.first().url.expose_secret(), DEFAULT_AMQP_URL);
        assert_eq!(c.amqp_urls.first().label, "127.0.0.1:5672");
        assert_eq!(c.amqp.quorum_initial_group_size, 3);
        assert_eq!(c.amqp.prefix, "hookline");
        assert_eq!(c.edge.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.edge.max_body_bytes, 1_048_576);
        assert!(c.providers.is_empty());
    }

    #[test]
    fn environment_overrides_file_urls() {
        let env = [
            ("DATABASE_URL", "postgres://u@h/db"),
            ("AMQP_URL", "amqp://h"),
        ];
        let c = Config::from_toml_str(
            "database_url = \"postgres://file/x\"\namqp_url = \"amqp://file\"",
            "t",
            &env,
        )
        .unwrap();
        assert_eq!(c.database_url.expose_secret(), "postgres://u@h/db");
        assert_eq!(c.amqp_urls.len(), 1);
        assert_eq!(c.amqp_urls.first().url.expose_secret(), "amqp://h");
    }

    #[test]
    fn amqp_urls_lists_the_nodes_of_a_cluster_in_order() {
        let c = Config::from_toml_str(
            "amqp_urls = [\"amqp://u:pw@127.0.0.1:5701/%2f\", \"amqps://n2\", \"amqp://n3:5703\"]\n\
             [amqp]\nquorum_initial_group_size = 5\n",
            "t",
            &NO_ENV,
        )
        .unwrap();
        let labels: Vec<&str> = c
            .amqp_urls
            .endpoints()
            .iter()
            .map(|e| e.label.as_str())
            .collect();
        assert_eq!(labels, ["127.0.0.1:5701", "n2:5671", "n3:5703"]);
        assert_eq!(
            c.amqp_urls.endpoints()[0].url.expose_secret(),
            "amqp://u:pw@127.0.0.1:5701/%2f"
        );
        assert_eq!(c.amqp.quorum_initial_group_size, 5);
        // Debug shows where, never who.
        assert!(!format!("{c:?}").contains("pw@"));
    }

    #[test]
    fn amqp_urls_are_validated_by_key_without_quoting_credentials() {
        let cases = [
            ("amqp_urls = []", "amqp_urls: must list at least one URL"),
            (
                "amqp_urls = [\"amqp://h1\", \"http://u:SUPERSECRET@h2\"]",
                "amqp_urls[1]: must be an amqp",
            ),
            (
                "amqp_urls = [\"amqp://u:SUPERSECRET@\"]",
                "amqp_urls[0]: must be an amqp",
            ),
            (
                "amqp_url = \"redis://u:SUPERSECRET@h\"",
                "amqp_url: must be an amqp",
            ),
            (
                "amqp_url = \"amqp://a\"\namqp_urls = [\"amqp://b\"]",
                "amqp_urls: set either amqp_url",
            ),
            (
                "[amqp]\nquorum_initial_group_size = 0",
                "amqp.quorum_initial_group_size",
            ),
            (
                "[amqp]\nquorum_initial_group_size = 10",
                "amqp.quorum_initial_group_size",
            ),
        ];
        for (text, expected) in cases {
            let message = err(text);
            assert!(message.contains(expected), "{text}: {message}");
            assert!(!message.contains("SUPERSECRET"), "{message}");
        }
        let many: Vec<String> = (0..=MAX_AMQP_ENDPOINTS)
            .map(|i| format!("\"amqp://h{i}\""))
            .collect();
        let message = err(&format!("amqp_urls = [{}]", many.join(", ")));
        assert!(message.contains("at most 16"), "{message}");
    }

    #[test]
    fn full_example_with_env_secret_and_shared_scheme() {
        let env = [("STRIPE_OLD_SECRET", "whsec_old")];
        let c = Config::from_toml_str(
            r#"
            [providers.stripe]
            scheme = "stripe"
            secrets = ["whsec_new", "env:STRIPE_OLD_SECRET"]
            tolerance_secs = 120
            [providers.stripe-eu]
            scheme = "stripe"
            secrets = ["whsec_eu"]
            [providers.gh]
            scheme = "github"
            secrets = ["s3cret"]
            "#,
            "t",
            &env,
        )
        .unwrap();
        let s = &c.providers["stripe"];
        assert_eq!(s.secret_bytes(), vec![&b"whsec_new"[..], &b"whsec_old"[..]]);
        assert_eq!(s.tolerance_secs, Some(120));
        assert_eq!(c.providers["stripe-eu"].tolerance_secs, Some(300));
        assert_eq!(c.providers["gh"].tolerance_secs, None);
    }

    #[test]
    fn unknown_scheme_names_the_field() {
        let e = err("[providers.p]\nscheme = \"strpe\"\nsecrets = [\"x\"]");
        assert!(
            e.starts_with("providers.p.scheme: unknown scheme 'strpe'"),
            "{e}"
        );
    }

    #[test]
    fn missing_and_empty_secrets_name_the_field() {
        assert_eq!(
            err("[providers.p]\nscheme = \"github\""),
            "providers.p.secrets: at least one secret is required"
        );
        assert_eq!(
            err("[providers.p]\nscheme = \"github\"\nsecrets = []"),
            "providers.p.secrets: at least one secret is required"
        );
        assert_eq!(
            err("[providers.p]\nscheme = \"github\"\nsecrets = [\"a\", \"\"]"),
            "providers.p.secrets[1]: is empty"
        );
        assert_eq!(
            err("[providers.p]\nscheme = \"github\"\nsecrets = [\"env:NOPE_NOT_SET\"]"),
            "providers.p.secrets[0]: environment variable NOPE_NOT_SET is not set"
        );
    }

    #[test]
    fn tolerance_on_untimestamped_scheme_is_rejected() {
        let e = err("[providers.gh]\nscheme = \"github\"\nsecrets = [\"x\"]\ntolerance_secs = 300");
        assert!(e.starts_with("providers.gh.tolerance_secs:"), "{e}");
    }

    #[test]
    fn unknown_fields_and_bad_listen_are_rejected() {
        assert!(err("[edge]\nlisten_addr = \"x\"").contains("listen_addr"));
        assert!(err("[edge]\nlisten = \"nope\"").starts_with("edge.listen:"));
    }

    #[test]
    fn batch_linger_is_bounded_and_zero_turns_it_off() {
        let linger = |text: &str| {
            Config::from_toml_str(text, "t", &NO_ENV)
                .unwrap()
                .worker
                .batch_linger
        };
        assert_eq!(linger(""), Duration::from_millis(5));
        assert_eq!(linger("[worker]\nbatch_linger_ms = 0"), Duration::ZERO);
        assert!(err("[worker]\nbatch_linger_ms = 1001").starts_with("worker.batch_linger_ms:"));
        assert!(err("[worker]\nbatch_linger_ms = -1").contains("batch_linger_ms"));
        assert!(err("[worker]\nbatch_linger_ms = \"5\"").contains("batch_linger_ms"));
    }

    #[test]
    fn relay_linger_is_bounded_and_zero_turns_it_off() {
        let linger = |text: &str| {
            Config::from_toml_str(text, "t", &NO_ENV)
                .unwrap()
                .relay
                .linger
        };
        assert_eq!(linger(""), Duration::from_millis(5));
        assert_eq!(linger("[relay]\nlinger_ms = 0"), Duration::ZERO);
        assert_eq!(linger("[relay]\nlinger_ms = 1000"), Duration::from_secs(1));
        assert!(err("[relay]\nlinger_ms = 1001").starts_with("relay.linger_ms:"));
        assert!(err("[relay]\nlinger_ms = -1").contains("linger_ms"));
        assert!(err("[relay]\nlinger_ms = \"5\"").contains("linger_ms"));
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let c = Config::from_toml_str(
            "database_url = \"postgres://u:dbpassword@h/x\"\n[providers.p]\nscheme = \"github\"\nsecrets = [\"topsecretvalue\"]",
            "t",
            &NO_ENV,
        )
        .unwrap();
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("topsecretvalue"), "{dbg}");
        assert!(!dbg.contains("dbpassword"), "{dbg}");
    }
}
