//! `[[destinations]]` and `[delivery]`: where domain events go over HTTP, and how hard hookline tries.
//!
//! The sections belong to this crate: their raw shapes, validation, defaults, bounds and tests live here, read
//! from the same document as every other section through [`Config::parse_document`], with the same field paths
//! in errors (`destinations[0].secrets[1]: …`). Here, and not in core, because the subscribed event types are
//! checked against [`EventType`]: core's configuration importing `domain_events` closed an import circle
//! (`config` → `domain_events` → `telemetry` → `config`).

use std::time::Duration;

use hookline_core::config::{between, resolve_env, Env};
use hookline_core::domain_events::EventType;
use hookline_core::{Config, ConfigError};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// Most destinations one deployment may declare (each runs its own delivery loop).
pub const MAX_DESTINATIONS: usize = 64;
/// Most secrets active at once for one destination (rotation needs two; a few more are tolerated).
pub const MAX_SECRETS: usize = 4;

/// `[[destinations]]`: one HTTP endpoint of the merchant's that receives the facts it subscribed to, signed per
/// the Standard Webhooks specification.
#[derive(Clone)]
pub struct DestinationConfig {
    /// Unique name (`[A-Za-z0-9_-]{1,64}`): labels, CLI arguments, the `destinations` table.
    pub name: String,
    /// `http://` or `https://` URL the facts are POSTed to.
    pub url: url::Url,
    /// Standard Webhooks secrets (`whsec_` + base64), newest first; every one signs each request, so the
    /// receiver may accept either during a rotation. `env:VAR` allowed. Never logged.
    pub secrets: Vec<SecretString>,
    /// Subscribed event types; `*` = all.
    pub events: Vec<String>,
}

impl std::fmt::Debug for DestinationConfig {
    // Written by hand so the number of secrets is visible but never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DestinationConfig")
            .field("name", &self.name)
            .field("url", &self.url.as_str())
            .field(
                "secrets",
                &format_args!("[{} redacted]", self.secrets.len()),
            )
            .field("events", &self.events)
            .finish()
    }
}

/// `[delivery]`: the HTTP delivery of domain events and the domain relay to RabbitMQ.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// Whether `hookline-worker` runs the delivery loops and the domain relay (default true; `hookline deliver`
    /// runs them alone).
    pub enabled: bool,
    /// Time limit of one HTTP attempt (connect, send, answer).
    pub timeout: Duration,
    /// Most bytes of an answer read (the rest is dropped; the first 1 KiB is recorded).
    pub max_response_bytes: usize,
    /// Attempts in flight at once per destination.
    pub max_in_flight: usize,
    /// First retry delay; doubles each attempt (with jitter), up to `backoff_max`.
    pub backoff_base: Duration,
    /// Longest delay between two attempts (a `Retry-After` is honoured up to this).
    pub backoff_max: Duration,
    /// How long a delivery is retried before it is dead-lettered (default 3 days).
    pub retry_window: Duration,
    /// Consecutive failures that open a destination's circuit breaker.
    pub breaker_threshold: u32,
    /// How long an open breaker waits before one trial request.
    pub breaker_cooldown: Duration,
    /// How often an idle loop looks for due deliveries (and the domain relay for unpublished facts).
    pub poll_interval: Duration,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            enabled: true,
            timeout: Duration::from_secs(10),
            max_response_bytes: 64 * 1024,
            max_in_flight: 8,
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(10 * 3600),
            retry_window: Duration::from_secs(3 * 86_400),
            breaker_threshold: 5,
            breaker_cooldown: Duration::from_secs(30),
            poll_interval: Duration::from_millis(250),
        }
    }
}

/// The whole file as far as delivery is concerned: every other top-level key is another crate's (core refuses the
/// unknown ones), unknown keys *inside* `[delivery]` and `[[destinations]]` are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    delivery: RawDelivery,
    #[serde(default)]
    destinations: Vec<RawDestination>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDestination {
    name: Option<String>,
    url: Option<String>,
    secrets: Option<Vec<String>>,
    events: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDelivery {
    enabled: Option<bool>,
    timeout_ms: Option<u64>,
    max_response_bytes: Option<u64>,
    max_in_flight: Option<u64>,
    backoff_base_ms: Option<u64>,
    backoff_max_secs: Option<u64>,
    retry_window_secs: Option<u64>,
    breaker_threshold: Option<u64>,
    breaker_cooldown_ms: Option<u64>,
    poll_interval_ms: Option<u64>,
}

impl DeliveryConfig {
    /// Parses and validates `[delivery]` from the document `config` was loaded from (defaults when absent).
    pub fn from_config(config: &Config) -> Result<DeliveryConfig, ConfigError> {
        delivery(config.parse_document::<Document>()?.delivery)
    }
}

/// Parses and validates `[[destinations]]` from the document `config` was loaded from (none when absent);
/// `env` resolves the secrets' `env:NAME` references.
pub fn destinations_from_config(
    config: &Config,
    env: &dyn Env,
) -> Result<Vec<DestinationConfig>, ConfigError> {
    destinations(config.parse_document::<Document>()?.destinations, env)
}

fn delivery(raw: RawDelivery) -> Result<DeliveryConfig, ConfigError> {
    let d = DeliveryConfig::default();
    // Every key is "1 to max, or the default": core's one bound.
    let bounded = between;
    let config = DeliveryConfig {
        enabled: raw.enabled.unwrap_or(true),
        timeout: Duration::from_millis(bounded(
            raw.timeout_ms,
            d.timeout.as_millis() as u64,
            300_000,
            "delivery.timeout_ms",
        )?),
        max_response_bytes: bounded(
            raw.max_response_bytes,
            d.max_response_bytes as u64,
            16 * 1024 * 1024,
            "delivery.max_response_bytes",
        )? as usize,
        max_in_flight: bounded(
            raw.max_in_flight,
            d.max_in_flight as u64,
            256,
            "delivery.max_in_flight",
        )? as usize,
        backoff_base: Duration::from_millis(bounded(
            raw.backoff_base_ms,
            d.backoff_base.as_millis() as u64,
            3_600_000,
            "delivery.backoff_base_ms",
        )?),
        backoff_max: Duration::from_secs(bounded(
            raw.backoff_max_secs,
            d.backoff_max.as_secs(),
            7 * 86_400,
            "delivery.backoff_max_secs",
        )?),
        retry_window: Duration::from_secs(bounded(
            raw.retry_window_secs,
            d.retry_window.as_secs(),
            30 * 86_400,
            "delivery.retry_window_secs",
        )?),
        breaker_threshold: bounded(
            raw.breaker_threshold,
            u64::from(d.breaker_threshold),
            1000,
            "delivery.breaker_threshold",
        )? as u32,
        breaker_cooldown: Duration::from_millis(bounded(
            raw.breaker_cooldown_ms,
            d.breaker_cooldown.as_millis() as u64,
            3_600_000,
            "delivery.breaker_cooldown_ms",
        )?),
        poll_interval: Duration::from_millis(bounded(
            raw.poll_interval_ms,
            d.poll_interval.as_millis() as u64,
            60_000,
            "delivery.poll_interval_ms",
        )?),
    };
    if config.backoff_base > config.backoff_max {
        return Err(ConfigError::invalid(
            "delivery.backoff_base_ms",
            "must not exceed delivery.backoff_max_secs",
        ));
    }
    Ok(config)
}

fn destinations(
    raw: Vec<RawDestination>,
    env: &dyn Env,
) -> Result<Vec<DestinationConfig>, ConfigError> {
    if raw.len() > MAX_DESTINATIONS {
        return Err(ConfigError::invalid(
            "destinations",
            format!("at most {MAX_DESTINATIONS} destinations"),
        ));
    }
    let mut out: Vec<DestinationConfig> = Vec::with_capacity(raw.len());
    for (i, d) in raw.into_iter().enumerate() {
        let at = |key: &str| format!("destinations[{i}].{key}");
        let name = d
            .name
            .ok_or_else(|| ConfigError::invalid(at("name"), "is required"))?;
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ConfigError::invalid(
                at("name"),
                "must be 1 to 64 characters of A-Z, a-z, 0-9, '-' and '_'",
            ));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(ConfigError::invalid(
                at("name"),
                format!("'{name}' is declared twice"),
            ));
        }
        // The ids of the webhook endpoints merchants make through the API share the `destinations` table's names:
        // a configured destination never takes one (it would sign with the configuration's secrets for the
        // endpoint's deliveries).
        if name.starts_with(crate::destinations::ENDPOINT_ID_PREFIX) {
            return Err(ConfigError::invalid(
                at("name"),
                format!(
                    "names starting with '{}' are the merchant API's webhook endpoints",
                    crate::destinations::ENDPOINT_ID_PREFIX
                ),
            ));
        }
        let text = d
            .url
            .ok_or_else(|| ConfigError::invalid(at("url"), "is required"))?;
        let url = url::Url::parse(&text)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .filter(|_| text.len() <= 2048)
            .ok_or_else(|| {
                ConfigError::invalid(
                    at("url"),
                    "must be an http:// or https:// URL of at most 2048 bytes",
                )
            })?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ConfigError::invalid(
                at("url"),
                "must not carry credentials (the request is signed instead)",
            ));
        }
        let secrets_raw = d.secrets.unwrap_or_default();
        if secrets_raw.is_empty() || secrets_raw.len() > MAX_SECRETS {
            return Err(ConfigError::invalid(
                at("secrets"),
                format!("1 to {MAX_SECRETS} secrets are required (two during a rotation)"),
            ));
        }
        let mut secrets = Vec::with_capacity(secrets_raw.len());
        for (j, s) in secrets_raw.into_iter().enumerate() {
            let f = format!("destinations[{i}].secrets[{j}]");
            let value = resolve_env(&f, s, env)?;
            // The signer must be able to use it: checked now, not at the first delivery.
            hookline_signature::sign::standard_webhooks(value.as_bytes(), "check", 0, b"")
                .map_err(|_| {
                    ConfigError::invalid(
                        &f,
                        "must be a Standard Webhooks secret: whsec_ followed by base64 (hookline destinations add generates one)",
                    )
                })?;
            secrets.push(SecretString::from(value));
        }
        let events = d.events.unwrap_or_default();
        if events.is_empty() || events.len() > 32 {
            return Err(ConfigError::invalid(
                at("events"),
                "1 to 32 event types are required ('*' for all)",
            ));
        }
        for e in &events {
            if e != "*" && EventType::parse(e).is_none() {
                let known: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                return Err(ConfigError::invalid(
                    at("events"),
                    format!(
                        "'{}' is not an event type (known: {}, or '*')",
                        e.escape_debug()
                            .to_string()
                            .chars()
                            .take(64)
                            .collect::<String>(),
                        known.join(", ")
                    ),
                ));
            }
        }
        out.push(DestinationConfig {
            name,
            url,
            secrets,
            events,
        });
    }
    Ok(out)
}

impl DestinationConfig {
    /// The secrets as byte slices, newest first, for the signer.
    pub fn secret_bytes(&self) -> Vec<&[u8]> {
        self.secrets
            .iter()
            .map(|s| s.expose_secret().as_bytes())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hookline_core::config::Env;
    use hookline_core::{Config, ConfigError};

    use super::{destinations_from_config, DeliveryConfig, DestinationConfig};

    const NO_ENV: [(&str, &str); 0] = [];
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn delivery(text: &str) -> Result<DeliveryConfig, ConfigError> {
        DeliveryConfig::from_config(&Config::from_toml_str(text, "test.toml", &NO_ENV)?)
    }

    fn destinations(text: &str, env: &dyn Env) -> Result<Vec<DestinationConfig>, ConfigError> {
        destinations_from_config(&Config::from_toml_str(text, "test.toml", env)?, env)
    }

    fn err(result: Result<impl std::fmt::Debug, ConfigError>) -> String {
        result.expect_err("config should be rejected").to_string()
    }

    #[test]
    fn delivery_defaults_and_bounds_name_the_key() {
        let d = delivery("").unwrap();
        assert!(d.enabled);
        assert_eq!(d.timeout, Duration::from_secs(10));
        assert_eq!(d.poll_interval, Duration::from_millis(250));
        assert_eq!(
            err(delivery("[delivery]\ntimeout_ms = 0")),
            "delivery.timeout_ms: must be between 1 and 300000"
        );
        assert_eq!(
            err(delivery("[delivery]\nmax_in_flight = 257")),
            "delivery.max_in_flight: must be between 1 and 256"
        );
        assert!(err(delivery(
            "[delivery]\nbackoff_base_ms = 3600000\nbackoff_max_secs = 60"
        ))
        .starts_with("delivery.backoff_base_ms: must not exceed"));
        assert!(err(delivery("[delivery]\npoll_intervall_ms = 5")).contains("poll_intervall_ms"));
        assert!(err(delivery("[delivery]\ntimeout_ms = \"5\"")).contains("(key timeout_ms)"));
    }

    #[test]
    fn destinations_are_validated_by_key_and_their_secrets_redacted() {
        let one = |extra: &str| {
            format!(
                "[[destinations]]\nname = \"shop\"\nurl = \"https://shop.example/hooks\"\n\
                 secrets = [\"{SECRET}\", \"env:OLD_SECRET\"]\nevents = [\"*\"]\n{extra}"
            )
        };
        let env = [("OLD_SECRET", SECRET)];
        let d = destinations(&one(""), &env).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].secrets.len(), 2);
        assert!(
            !format!("{d:?}").contains("MfKQ9r8"),
            "the secrets are redacted"
        );
        assert!(destinations("", &NO_ENV).unwrap().is_empty());
        assert_eq!(
            err(destinations(&one(""), &NO_ENV)),
            "destinations[0].secrets[1]: environment variable OLD_SECRET is not set"
        );
        assert!(err(destinations(
            &one("").replace("events = [\"*\"]", "events = [\"payment.nope\"]"),
            &env
        ))
        .starts_with("destinations[0].events: 'payment.nope' is not an event type"));
        assert!(err(destinations(&format!("{}{}", one(""), one("")), &env))
            .starts_with("destinations[1].name: 'shop' is declared twice"));
        assert!(err(destinations(
            &one("").replace("name = \"shop\"", "name = \"we_shop\""),
            &env
        ))
        .starts_with("destinations[0].name: names starting with 'we_'"));
        assert!(err(destinations(
            &one("").replace("https://shop.example", "ftp://shop.example"),
            &env
        ))
        .starts_with("destinations[0].url:"));
    }
}
