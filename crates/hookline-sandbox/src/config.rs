//! `[sandbox]`: the settings of `hookline sandbox`, read from the same TOML file as the rest of hookline.
//!
//! The section belongs to this crate: its raw shape, validation, defaults, bounds and tests live here, and
//! `hookline_core::Config` only accepts it as an opaque table. The file is found and read exactly as
//! `hookline_core::Config::load` finds it ([`ConfigSource`]) and parsed with the same redacted errors
//! ([`parse_toml`]); errors are [`ConfigError`]s naming the field (`sandbox.webhook_timeout_ms: …`), like every
//! other section's, so the CLI reports them the same way.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use hookline_core::config::{parse_toml, ConfigSource};
use hookline_core::ConfigError;
use serde::Deserialize;

use crate::settings::SandboxSettings;

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

/// The whole file as far as the sandbox is concerned: every other section is `hookline_core`'s (and checked
/// there), so unknown top-level keys are ignored here; unknown keys *inside* `[sandbox]` are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    sandbox: RawSandbox,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    edge_url: Option<String>,
    idempotency_window_secs: Option<u64>,
    webhook_timeout_ms: Option<u64>,
    webhook_max_attempts: Option<u32>,
}

impl SandboxConfig {
    /// Reads `[sandbox]` from the configuration file (`path`, else `$HOOKLINE_CONFIG`, else defaults);
    /// `edge_listen` is the validated `edge.listen`, the default target of the webhooks.
    pub fn load(
        path: Option<&Path>,
        edge_listen: SocketAddr,
    ) -> Result<SandboxConfig, ConfigError> {
        let source = ConfigSource::read(path)?;
        Self::from_toml_str(&source.text, &source.origin, edge_listen)
    }

    /// Parses and validates the `[sandbox]` section of a whole configuration document; `origin` names it in
    /// errors.
    pub fn from_toml_str(
        text: &str,
        origin: &str,
        edge_listen: SocketAddr,
    ) -> Result<SandboxConfig, ConfigError> {
        let document: Document = parse_toml(text, origin)?;
        validate(document.sandbox, edge_listen)
    }

    /// Writes these settings into `settings` (the rest, such as the backoff and the API latency, keep theirs).
    pub fn apply(&self, settings: &mut SandboxSettings) {
        settings.edge_url = self.edge_url.clone();
        settings.idempotency_window = self.idempotency_window;
        settings.webhook_timeout = self.webhook_timeout;
        settings.webhook_max_attempts = self.webhook_max_attempts;
    }
}

fn validate(s: RawSandbox, edge_listen: SocketAddr) -> Result<SandboxConfig, ConfigError> {
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
                IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
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

/// A positive number or its default; zero is refused with the field's name (as core's sections do).
fn positive(value: Option<u64>, default: u64, field: &str) -> Result<u64, ConfigError> {
    match value {
        Some(0) => Err(ConfigError::invalid(field, "must be greater than 0")),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> SocketAddr {
        "127.0.0.1:8080".parse().expect("address")
    }

    fn err(text: &str) -> String {
        SandboxConfig::from_toml_str(text, "t", edge())
            .expect_err("the section should be rejected")
            .to_string()
    }

    #[test]
    fn defaults_follow_the_edge_listener_and_loopback_replaces_every_interface() {
        let s = SandboxConfig::from_toml_str("", "t", edge()).unwrap();
        assert_eq!(s.edge_url.as_str(), "http://127.0.0.1:8080/");
        assert_eq!(s.idempotency_window, Duration::from_secs(86_400));
        assert_eq!(s.webhook_timeout, Duration::from_millis(5_000));
        assert_eq!(s.webhook_max_attempts, 8);
        let any4 = SandboxConfig::from_toml_str("", "t", "0.0.0.0:18080".parse().unwrap()).unwrap();
        assert_eq!(any4.edge_url.as_str(), "http://127.0.0.1:18080/");
        let any6 = SandboxConfig::from_toml_str("", "t", "[::]:18080".parse().unwrap()).unwrap();
        assert_eq!(any6.edge_url.as_str(), "http://[::1]:18080/");
    }

    #[test]
    fn the_section_is_read_among_the_others_and_validated() {
        let s = SandboxConfig::from_toml_str(
            "[edge]\nlisten = \"127.0.0.1:9\"\n[sandbox]\nedge_url = \"http://edge:9000/base\"\n\
             idempotency_window_secs = 60\nwebhook_timeout_ms = 250\nwebhook_max_attempts = 3\n\
             [providers.st]\nscheme = \"stripe\"\nsecrets = [\"whsec_x\"]\n",
            "t",
            edge(),
        )
        .unwrap();
        assert_eq!(s.edge_url.as_str(), "http://edge:9000/base");
        assert_eq!(s.idempotency_window, Duration::from_secs(60));
        assert_eq!(s.webhook_timeout, Duration::from_millis(250));
        assert_eq!(s.webhook_max_attempts, 3);
        assert!(
            err("[sandbox]\nwebhook_timeout_ms = 0\n").starts_with("sandbox.webhook_timeout_ms:")
        );
        assert!(err("[sandbox]\nwebhook_max_attempts = 0\n")
            .starts_with("sandbox.webhook_max_attempts:"));
        assert!(err("[sandbox]\nidempotency_window_secs = 0\n")
            .starts_with("sandbox.idempotency_window_secs:"));
        assert!(err("[sandbox]\nedge_url = \"ftp://x\"\n").starts_with("sandbox.edge_url:"));
        assert!(err("[sandbox]\nedge_url = \"not a url\"\n")
            .starts_with("sandbox.edge_url: is not a URL"));
        assert!(err("[sandbox]\nedge = \"http://x\"\n").contains("edge"));
    }

    #[test]
    fn parse_errors_never_quote_a_value() {
        let message =
            err("[sandbox]\nedge_url = 5\n[providers.p]\nsecrets = \"whsec_SUPERSECRET\n");
        assert!(!message.contains("SUPERSECRET"), "{message}");
        assert!(message.contains("line "), "{message}");
    }

    #[test]
    fn apply_sets_the_configured_fields_only() {
        let s = SandboxConfig::from_toml_str("[sandbox]\nwebhook_max_attempts = 2\n", "t", edge())
            .unwrap();
        let mut settings = SandboxSettings::new(
            "127.0.0.1:0".parse().unwrap(),
            "http://elsewhere:1".parse().unwrap(),
            Vec::new(),
        );
        let backoff = settings.webhook_backoff;
        s.apply(&mut settings);
        assert_eq!(settings.edge_url.as_str(), "http://127.0.0.1:8080/");
        assert_eq!(settings.webhook_max_attempts, 2);
        assert_eq!(settings.webhook_backoff, backoff);
    }
}
