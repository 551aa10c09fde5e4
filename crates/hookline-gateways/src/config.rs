//! `[dispatcher]` and `[reconcile]`: the settings of what this crate runs — the outbound dispatcher that sends
//! queued charges and refunds to the gateways (inside `hookline-worker`, or alone with `hookline dispatch`) and the
//! worker's periodic reconciliation against the providers' APIs.
//!
//! Both sections belong here, where their loops run: read from the same document as every other section through
//! [`Config::parse_document`], with the same field paths in errors; core only accepts them as tables. The
//! dispatcher's settings were environment variables (`HOOKLINE_DISPATCHER`, `HOOKLINE_DISPATCH_TIMEOUT_SECS`,
//! `HOOKLINE_DISPATCH_LEASE_SECS`): a process that composes the dispatcher and still sees one is refused with the
//! key that replaces it — ignoring `HOOKLINE_DISPATCHER=off` silently would start sending charges from a worker
//! meant not to.

use std::time::Duration;

use hookline_core::config::{between, positive, Env};
use hookline_core::{Config, ConfigError};
use serde::Deserialize;

/// The whole file as far as this crate is concerned: every other top-level key is another crate's (core refuses
/// the unknown ones); unknown keys *inside* these sections are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    dispatcher: RawDispatcher,
    #[serde(default)]
    reconcile: RawReconcile,
}

impl DispatcherConfig {
    /// Parses and validates `[dispatcher]` from the document `config` was loaded from (defaults when absent);
    /// refuses the retired environment variables (`env`), naming the key that replaces each.
    pub fn from_config(config: &Config, env: &dyn Env) -> Result<DispatcherConfig, ConfigError> {
        dispatcher(config.parse_document::<Document>()?.dispatcher, env)
    }
}

impl ReconcileConfig {
    /// Parses and validates `[reconcile]` from the document `config` was loaded from (off when absent).
    pub fn from_config(config: &Config) -> Result<ReconcileConfig, ConfigError> {
        reconcile(config.parse_document::<Document>()?.reconcile)
    }
}

/// Default `dispatcher.request_timeout_secs`: payment APIs are slow under load, so generous.
pub const DEFAULT_DISPATCH_REQUEST_TIMEOUT_SECS: u64 = 30;
/// Largest `dispatcher.request_timeout_secs` (the bound `hookline dispatch --request-timeout-secs` has too).
pub const MAX_DISPATCH_REQUEST_TIMEOUT_SECS: u64 = 600;
/// Default `dispatcher.lease_secs`.
pub const DEFAULT_DISPATCH_LEASE_SECS: u64 = 60;
/// Largest `dispatcher.lease_secs`: a request whose dispatcher died waits this long before another sends it.
pub const MAX_DISPATCH_LEASE_SECS: u64 = 3600;

/// The environment variables the dispatcher used to read, and the key that replaces each.
const RETIRED_VARIABLES: [(&str, &str); 3] = [
    ("HOOKLINE_DISPATCHER", "dispatcher.enabled"),
    (
        "HOOKLINE_DISPATCH_TIMEOUT_SECS",
        "dispatcher.request_timeout_secs",
    ),
    ("HOOKLINE_DISPATCH_LEASE_SECS", "dispatcher.lease_secs"),
];

/// `[dispatcher]`: how the outbound dispatcher runs.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// Whether `hookline-worker` runs the dispatcher beside its consumer (default true; `false` leaves the
    /// sending to `hookline dispatch` elsewhere).
    pub enabled: bool,
    /// Time limit of one gateway request (connect, send, answer).
    pub request_timeout: Duration,
    /// How long a claimed request belongs to its dispatcher; one whose dispatcher died is claimed again after
    /// it (and sent again with the same idempotency key).
    pub lease: Duration,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            enabled: true,
            request_timeout: Duration::from_secs(DEFAULT_DISPATCH_REQUEST_TIMEOUT_SECS),
            lease: Duration::from_secs(DEFAULT_DISPATCH_LEASE_SECS),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDispatcher {
    enabled: Option<bool>,
    request_timeout_secs: Option<u64>,
    lease_secs: Option<u64>,
}

/// Validates `[dispatcher]`; refuses the retired environment variables (see the module documentation).
fn dispatcher(raw: RawDispatcher, env: &dyn Env) -> Result<DispatcherConfig, ConfigError> {
    for (variable, key) in RETIRED_VARIABLES {
        if env.var(variable).is_some() {
            return Err(ConfigError::invalid(
                variable,
                format!(
                    "is no longer read: set {key} in the configuration file and unset {variable}"
                ),
            ));
        }
    }
    let seconds = |value: Option<u64>, default: u64, max: u64, field: &str| {
        between(value, default, max, field).map(Duration::from_secs)
    };
    Ok(DispatcherConfig {
        enabled: raw.enabled.unwrap_or(true),
        request_timeout: seconds(
            raw.request_timeout_secs,
            DEFAULT_DISPATCH_REQUEST_TIMEOUT_SECS,
            MAX_DISPATCH_REQUEST_TIMEOUT_SECS,
            "dispatcher.request_timeout_secs",
        )?,
        lease: seconds(
            raw.lease_secs,
            DEFAULT_DISPATCH_LEASE_SECS,
            MAX_DISPATCH_LEASE_SECS,
            "dispatcher.lease_secs",
        )?,
    })
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconcile {
    interval_secs: Option<u64>,
    window_secs: Option<u64>,
    rate: Option<u32>,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hookline_core::{Config, ConfigError};

    use super::{DispatcherConfig, ReconcileConfig};

    const NO_ENV: [(&str, &str); 0] = [];

    fn dispatcher(text: &str) -> Result<DispatcherConfig, ConfigError> {
        DispatcherConfig::from_config(&Config::from_toml_str(text, "t", &NO_ENV)?, &NO_ENV)
    }

    fn reconcile(text: &str) -> Result<ReconcileConfig, ConfigError> {
        ReconcileConfig::from_config(&Config::from_toml_str(text, "t", &NO_ENV)?)
    }

    fn err(text: &str) -> String {
        let config = match Config::from_toml_str(text, "t", &NO_ENV) {
            Ok(c) => c,
            Err(e) => return e.to_string(),
        };
        DispatcherConfig::from_config(&config, &NO_ENV)
            .err()
            .or_else(|| ReconcileConfig::from_config(&config).err())
            .expect("config should be rejected")
            .to_string()
    }

    #[test]
    fn defaults_are_on_30_s_to_answer_and_a_60_s_lease() {
        let d = dispatcher("").unwrap();
        assert!(d.enabled);
        assert_eq!(d.request_timeout, Duration::from_secs(30));
        assert_eq!(d.lease, Duration::from_secs(60));
    }

    #[test]
    fn the_section_sets_every_key() {
        let d = dispatcher(
            "[dispatcher]\nenabled = false\nrequest_timeout_secs = 80\nlease_secs = 2\n",
        )
        .unwrap();
        assert!(!d.enabled);
        assert_eq!(d.request_timeout, Duration::from_secs(80));
        assert_eq!(d.lease, Duration::from_secs(2));
    }

    #[test]
    fn bounds_name_the_key() {
        for (text, expected) in [
            (
                "request_timeout_secs = 0",
                "dispatcher.request_timeout_secs: must be between 1 and 600",
            ),
            (
                "request_timeout_secs = 601",
                "dispatcher.request_timeout_secs: must be between 1 and 600",
            ),
            (
                "lease_secs = 0",
                "dispatcher.lease_secs: must be between 1 and 3600",
            ),
            (
                "lease_secs = 3601",
                "dispatcher.lease_secs: must be between 1 and 3600",
            ),
        ] {
            assert_eq!(err(&format!("[dispatcher]\n{text}")), expected, "{text}");
        }
        assert!(err("[dispatcher]\nlease = 5").contains("lease"));
        assert!(err("[dispatcher]\nenabled = \"off\"").contains("enabled"));
        assert!(err("dispatcher = 5").contains("dispatcher"));
    }

    #[test]
    fn the_retired_environment_variables_are_refused_with_their_key() {
        let config = Config::from_toml_str("", "t", &NO_ENV).unwrap();
        for (variable, key) in super::RETIRED_VARIABLES {
            let env = [(variable, "off")];
            let message = DispatcherConfig::from_config(&config, &env)
                .expect_err("a retired variable is refused")
                .to_string();
            assert!(
                message.starts_with(&format!("{variable}: is no longer read")),
                "{message}"
            );
            assert!(message.contains(key), "{message}");
        }
    }

    #[test]
    fn reconciliation_is_off_by_default_and_never_more_often_than_a_minute() {
        let c = reconcile("").unwrap();
        assert!(c.interval.is_none());
        assert_eq!(c.window, Duration::from_secs(86_400));
        assert_eq!(c.rate, 5);
        let c = reconcile("[reconcile]\ninterval_secs = 60").unwrap();
        assert_eq!(c.interval, Some(Duration::from_secs(60)));
        assert!(err("[reconcile]\ninterval_secs = 59").starts_with("reconcile.interval_secs:"));
        assert!(err("[reconcile]\nrate = 0").starts_with("reconcile.rate:"));
        assert!(err("[reconcile]\nwindow = 5").contains("window"));
    }
}
