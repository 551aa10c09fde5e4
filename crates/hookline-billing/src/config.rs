//! `[billing]`: how the workers bill by themselves (issue 48). The section belongs to this crate, where the
//! scheduler runs; read from the same document as every other section through [`Config::parse_document`], with
//! the same field paths in errors (core only accepts it as a table).

use std::time::Duration;

use hookline_core::config::between;
use hookline_core::{Config, ConfigError};
use serde::Deserialize;

/// Default `billing.schedule_secs`: a due period waits at most a minute.
pub const DEFAULT_SCHEDULE_SECS: u64 = 60;
/// Largest `billing.schedule_secs`: an hour.
pub const MAX_SCHEDULE_SECS: u64 = 3600;

/// `[billing]`: the workers' billing scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillingConfig {
    /// Whether `hookline-worker` runs the scheduler (default true). `false` leaves billing to `hookline billing
    /// run` elsewhere — and the alert on due periods notices when nothing runs it.
    pub enabled: bool,
    /// How often a worker looks for due periods and due dunning retries.
    pub schedule: Duration,
}

impl Default for BillingConfig {
    fn default() -> Self {
        BillingConfig {
            enabled: true,
            schedule: Duration::from_secs(DEFAULT_SCHEDULE_SECS),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    billing: RawBilling,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBilling {
    enabled: Option<bool>,
    schedule_secs: Option<u64>,
}

impl BillingConfig {
    /// Parses and validates `[billing]` from the document `config` was loaded from (defaults when absent).
    pub fn from_config(config: &Config) -> Result<BillingConfig, ConfigError> {
        let raw = config.parse_document::<Document>()?.billing;
        Ok(BillingConfig {
            enabled: raw.enabled.unwrap_or(true),
            schedule: Duration::from_secs(between(
                raw.schedule_secs,
                DEFAULT_SCHEDULE_SECS,
                MAX_SCHEDULE_SECS,
                "billing.schedule_secs",
            )?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_ENV: [(&str, &str); 0] = [];

    fn parse(text: &str) -> Result<BillingConfig, ConfigError> {
        BillingConfig::from_config(&Config::from_toml_str(text, "test.toml", &NO_ENV)?)
    }

    #[test]
    fn the_schedule_is_bounded_and_defaults_to_a_minute() {
        assert_eq!(parse("").unwrap(), BillingConfig::default());
        let b = parse("[billing]\nschedule_secs = 3600\nenabled = false").unwrap();
        assert_eq!((b.enabled, b.schedule), (false, Duration::from_secs(3600)));
        for bad in ["0", "3601", "-1", "\"60\""] {
            let e = parse(&format!("[billing]\nschedule_secs = {bad}"))
                .expect_err(bad)
                .to_string();
            assert!(e.contains("schedule_secs"), "{bad}: {e}");
        }
        assert!(parse("[billing]\nschedule = 5").is_err());
    }
}
