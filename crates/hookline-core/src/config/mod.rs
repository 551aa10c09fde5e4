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
//! One section, one file: each submodule holds its section's raw shape, its validated struct, the validation
//! (defaults, bounds, messages) and their tests, so that a new key is added in one place. This file holds what
//! is shared: [`Config`], loading, the environment, the error type, the number helpers ([`positive`],
//! [`between`], [`linger`]) and the one `env:NAME` resolution ([`resolve_env`]).
//!
//! Core keeps only what every process shares: the database, the broker, telemetry, and `[providers.*]` — every
//! process reads a provider (the edge its secrets and scheme, the worker its fee rule, the merchant API its
//! currencies, the gateways its `api_base`, token and key lifetime). Every other section belongs to the crate that
//! uses it, which parses and validates it from the same document ([`Config::parse_document`]) with the same
//! redacted errors and field paths. `[edge]` belongs to `hookline-web`, not `hookline-edge`: its pool, timeouts,
//! workers and listen address are every HTTP listener's (the providers' edge, the merchant API, the console), and
//! `hookline-edge` depends on `hookline-api`, so the section would close an import circle there.
//!
//! | section | owner |
//! |---|---|
//! | `[edge]` | `hookline_web::EdgeConfig` |
//! | `[api]` | `hookline_api::ApiConfig` |
//! | `[console]` | `hookline_console::ConsoleConfig` |
//! | `[delivery]`, `[[destinations]]` | `hookline_delivery::config` |
//! | `[relay]` | `hookline_bus::RelayConfig` |
//! | `[retention]` | `hookline_ops::config::RetentionConfig` |
//! | `[worker]` | `hookline_worker::WorkerConfig` |
//! | `[dispatcher]`, `[reconcile]` | `hookline_gateways::config` |
//! | `[billing]` | `hookline_billing::BillingConfig` |
//! | `[sandbox]` | `hookline_sandbox::SandboxConfig` |
//!
//! Here those sections are only accepted as tables (so that `deny_unknown_fields` still refuses a misspelt
//! top-level key); each process validates the sections it composes at start-up, and `hookline` (which composes
//! them all) validates every one, so that a bad section is still refused before anything runs.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use secrecy::SecretString;
use serde::de::DeserializeOwned;
use serde::Deserialize;

mod amqp;
mod providers;
mod telemetry;

pub use amqp::{
    AmqpConfig, AmqpEndpoint, AmqpEndpoints, DEFAULT_AMQP_URL, DEFAULT_QUORUM_INITIAL_GROUP_SIZE,
    MAX_AMQP_ENDPOINTS, MAX_QUORUM_INITIAL_GROUP_SIZE,
};
pub use providers::{
    default_idempotency_key_ttl_secs, ProviderConfig, MAX_IDEMPOTENCY_KEY_TTL_SECS,
    MIN_IDEMPOTENCY_KEY_TTL_SECS,
};
pub use telemetry::{LogFormat, TelemetryConfig, MAX_OTLP_ENDPOINT_BYTES, MAX_TRACE_QUEUE};

/// Environment variable naming the configuration file when `--config` is not given.
pub const CONFIG_ENV: &str = "HOOKLINE_CONFIG";
/// Default database: the local cluster, database `hookline`.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/hookline";

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
    /// An [`ConfigError::Invalid`] for `field` (also used by the sections other crates own, e.g. `[sandbox]`).
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
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
    /// Configured providers by name; the name is the URL segment in `POST /webhooks/{name}`.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[telemetry]`: trace export (off by default) and the log format.
    pub telemetry: TelemetryConfig,
    /// The document this was loaded from, which the crates owning a section parse again
    /// ([`Config::parse_document`]).
    document: Document,
}

/// The text of the configuration file and the name errors give it. Its `Debug` shows the name only: the text may
/// hold secrets, and [`Config`]'s `Debug` must never print one.
#[derive(Clone)]
struct Document {
    origin: String,
    text: std::sync::Arc<str>,
}

impl std::fmt::Debug for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Document")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    database_url: Option<String>,
    amqp_url: Option<String>,
    amqp_urls: Option<Vec<String>>,
    #[serde(default)]
    amqp: amqp::RawAmqp,
    // The sections other crates own and validate (see the module documentation): kept opaque here so that
    // `deny_unknown_fields` does not refuse them in the file every process reads, while a misspelt top-level
    // key or a section of the wrong shape (`console = 5`) is still refused by every process.
    #[serde(default, rename = "sandbox")]
    _sandbox: Option<toml::Table>,
    #[serde(default, rename = "edge")]
    _edge: Option<toml::Table>,
    #[serde(default, rename = "api")]
    _api: Option<toml::Table>,
    #[serde(default, rename = "console")]
    _console: Option<toml::Table>,
    #[serde(default, rename = "delivery")]
    _delivery: Option<toml::Table>,
    #[serde(default, rename = "destinations")]
    _destinations: Option<Vec<toml::Table>>,
    #[serde(default, rename = "relay")]
    _relay: Option<toml::Table>,
    #[serde(default, rename = "retention")]
    _retention: Option<toml::Table>,
    #[serde(default, rename = "worker")]
    _worker: Option<toml::Table>,
    #[serde(default, rename = "dispatcher")]
    _dispatcher: Option<toml::Table>,
    #[serde(default, rename = "reconcile")]
    _reconcile: Option<toml::Table>,
    #[serde(default, rename = "billing")]
    _billing: Option<toml::Table>,
    #[serde(default)]
    providers: BTreeMap<String, providers::RawProvider>,
    #[serde(default)]
    telemetry: telemetry::RawTelemetry,
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

/// The configuration file's text and the name errors give it: `--config FILE`, else `$HOOKLINE_CONFIG`, else
/// nothing (built-in defaults). Public so that a crate owning its own section (`hookline-sandbox`) reads exactly
/// the file [`Config::load`] read.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    /// The file's path, or `<defaults>` when no file is given.
    pub origin: String,
    /// The TOML text (empty for defaults).
    pub text: String,
}

impl ConfigSource {
    /// Reads `path` if given, else `$HOOKLINE_CONFIG` if set, else yields the empty document.
    pub fn read(path: Option<&Path>) -> Result<ConfigSource, ConfigError> {
        let from_env = std::env::var(CONFIG_ENV).ok();
        match path.map(Path::to_path_buf).or(from_env.map(Into::into)) {
            Some(path) => {
                let origin = path.display().to_string();
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: origin.clone(),
                    source,
                })?;
                Ok(ConfigSource { origin, text })
            }
            None => Ok(ConfigSource {
                origin: "<defaults>".to_string(),
                text: String::new(),
            }),
        }
    }
}

/// Deserialises `text` into `T` with the redacted error of [`parse_error_message`] (never a source line or a
/// quoted value): how every section, here or in another crate, is read.
pub fn parse_toml<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: origin.to_string(),
        message: parse_error_message(&e, text),
    })
}

impl Config {
    /// Loads the configuration: `path` if given, else `$HOOKLINE_CONFIG` if set, else defaults only.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let source = ConfigSource::read(path)?;
        Self::from_toml_str(&source.text, &source.origin, &ProcessEnv)
    }

    /// Parses and validates a TOML document; `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        let document = Document {
            origin: origin.to_string(),
            text: text.into(),
        };
        Self::validate(parse_toml(text, origin)?, document, env)
    }

    /// Parses the document this configuration was loaded from into `T`, with the redacted errors of
    /// [`parse_toml`] (line, column and key, never a value): how a crate owning a section reads it. `T` is the
    /// owner's view of the whole file (its section as a field, unknown top-level keys ignored: core refuses
    /// those), so that a wrong type inside the section names its line and key exactly as before.
    pub fn parse_document<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        parse_toml(&self.document.text, &self.document.origin)
    }

    /// Validates every section core owns; each section's module names the fields it checks in its errors.
    fn validate(raw: RawConfig, document: Document, env: &dyn Env) -> Result<Config, ConfigError> {
        let database_url = env
            .var("DATABASE_URL")
            .or(raw.database_url)
            .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_string());
        if !(database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")) {
            return Err(ConfigError::invalid(
                "database_url",
                "must be a postgres:// URL",
            ));
        }
        let amqp_urls = amqp::endpoints(raw.amqp_url, raw.amqp_urls, env)?;
        let amqp = amqp::amqp(raw.amqp)?;
        let mut providers = BTreeMap::new();
        for (name, p) in raw.providers {
            providers.insert(name.clone(), providers::provider(name, p, env)?);
        }
        Ok(Config {
            database_url: SecretString::from(database_url),
            amqp_urls,
            amqp,
            providers,
            telemetry: telemetry::telemetry(raw.telemetry)?,
            document,
        })
    }
}

/// A value that may name an environment variable (`env:NAME`) instead of holding itself: the one resolution
/// of every secret-bearing key (provider secrets and tokens, API keys, destination secrets) and of the CLI's
/// `--secret`. An unset variable is refused with `field`'s name, never the value.
pub fn resolve_env(field: &str, value: String, env: &dyn Env) -> Result<String, ConfigError> {
    match value.strip_prefix("env:") {
        Some(var) => env.var(var).ok_or_else(|| {
            ConfigError::invalid(field, format!("environment variable {var} is not set"))
        }),
        None => Ok(value),
    }
}

/// A positive number or its default; zero is refused with the field's name.
pub fn positive(value: Option<u64>, default: u64, field: &str) -> Result<u64, ConfigError> {
    match value {
        Some(0) => Err(ConfigError::invalid(field, "must be greater than 0")),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// A number from 1 to `max`, or `default` when absent; anything else is refused with the field's name. The one
/// shape of the "1 to max, or the default" bound, whichever crate owns the key.
pub fn between(
    value: Option<u64>,
    default: u64,
    max: u64,
    field: &str,
) -> Result<u64, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) if (1..=max).contains(&v) => Ok(v),
        Some(_) => Err(ConfigError::invalid(
            field,
            format!("must be between 1 and {max}"),
        )),
    }
}

/// A batch linger in milliseconds (the worker's and the relay's): 5 unless set, 0 turns it off, at most 1000.
pub fn linger(value: Option<u64>, field: &str) -> Result<Duration, ConfigError> {
    match value.unwrap_or(5) {
        ms @ 0..=1000 => Ok(Duration::from_millis(ms)),
        _ => Err(ConfigError::invalid(
            field,
            "must be at most 1000 (it adds to every event's latency)",
        )),
    }
}

/// What every section's tests share.
#[cfg(test)]
mod testing {
    use super::Config;

    /// No environment variables at all.
    pub(super) const NO_ENV: [(&str, &str); 0] = [];

    /// The message `text` is rejected with (panics when it is accepted: a test expected a rejection).
    pub(super) fn err(text: &str) -> String {
        Config::from_toml_str(text, "test.toml", &NO_ENV)
            .expect_err("config should be rejected")
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{err, NO_ENV};
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn syntax_errors_name_the_line_and_key_but_never_echo_a_secret() {
        let cases = [
            // Unterminated string: toml's Display would quote the whole line.
            "[providers.stripe]\nscheme = \"stripe\"\nsecrets=\"whsec_SUPERSECRET_1\n",
            // Wrong type: serde's message quotes the value.
            "database_url = \"postgres://u:SUPERSECRET_2@h/db\"\n[amqp]\ndelivery_limit = \"SUPERSECRET_3\"\n",
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
        assert!(message.contains("delivery_limit"), "{message}");
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

    #[test]
    fn a_sandbox_section_is_accepted_and_left_to_the_sandbox() {
        // Core does not validate it (hookline-sandbox does), but the file every process reads may hold it.
        let c = Config::from_toml_str(
            "[sandbox]\nedge_url = \"http://127.0.0.1:8080\"\nwebhook_max_attempts = 3\n",
            "t",
            &NO_ENV,
        );
        assert!(c.is_ok(), "{c:?}");
        assert!(err("sandbox = 5").contains("sandbox"));
    }

    #[test]
    fn the_sections_other_crates_own_are_accepted_as_tables_and_kept_for_them() {
        // Core validates none of them, but every process still refuses one of the wrong shape.
        let text = "[console]\nlisten = \"x\"\n[edge]\n[api]\n[delivery]\n[[destinations]]\nname = \"d\"\n\
                    [relay]\n[retention]\n[worker]\n";
        let c = Config::from_toml_str(text, "t", &NO_ENV).unwrap();
        #[derive(Deserialize)]
        struct Console {
            console: toml::Table,
        }
        let doc: Console = c.parse_document().unwrap();
        assert_eq!(doc.console["listen"].as_str(), Some("x"));
        for key in [
            "edge",
            "console",
            "api",
            "delivery",
            "destinations",
            "relay",
            "retention",
            "worker",
        ] {
            assert!(err(&format!("{key} = 5")).contains(key), "{key}");
        }
        assert!(err("consoel = 5").contains("consoel"));
    }

    #[test]
    fn env_references_resolve_or_name_the_field() {
        let env = [("SET", "value")];
        assert_eq!(resolve_env("f", "env:SET".into(), &env).unwrap(), "value");
        assert_eq!(resolve_env("f", "plain".into(), &env).unwrap(), "plain");
        assert_eq!(
            resolve_env("a.b[0]", "env:UNSET".into(), &env)
                .unwrap_err()
                .to_string(),
            "a.b[0]: environment variable UNSET is not set"
        );
    }
}
