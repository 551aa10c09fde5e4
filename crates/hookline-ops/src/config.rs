//! `[retention]`: how long raw events and their processed markers are kept, and the worker's periodic purge.
//!
//! The section belongs to this crate, which runs the purge (`hookline purge` and the worker's periodic loop): read
//! from the same document as every other section through [`Config::parse_document`], with the same field paths
//! in errors.

use std::time::Duration;

use hookline_core::config::positive;
use hookline_core::{Config, ConfigError};
use serde::Deserialize;

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

/// The whole file as far as retention is concerned: every other top-level key is another crate's (core refuses
/// the unknown ones), unknown keys *inside* `[retention]` are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    retention: RawRetention,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    floor_days: Option<u64>,
    auto_purge_older_than_days: Option<u64>,
    auto_purge_interval_secs: Option<u64>,
    batch_size: Option<u32>,
}

impl RetentionConfig {
    /// Parses and validates `[retention]` from the document `config` was loaded from (defaults when absent).
    pub fn from_config(config: &Config) -> Result<RetentionConfig, ConfigError> {
        retention(config.parse_document::<Document>()?.retention)
    }
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
        batch_size: positive(rt.batch_size.map(u64::from), 1000, "retention.batch_size")? as u32,
    };
    Ok(retention)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hookline_core::{Config, ConfigError};

    use super::RetentionConfig;

    const NO_ENV: [(&str, &str); 0] = [];

    fn parse(text: &str) -> Result<RetentionConfig, ConfigError> {
        RetentionConfig::from_config(&Config::from_toml_str(text, "test.toml", &NO_ENV)?)
    }

    fn err(text: &str) -> String {
        parse(text)
            .expect_err("config should be rejected")
            .to_string()
    }

    #[test]
    fn auto_purge_never_goes_below_the_floor() {
        let c = parse("").unwrap();
        assert_eq!(c.floor, Duration::from_secs(30 * 86_400));
        assert!(c.auto_purge_older_than.is_none());
        let c = parse("[retention]\nfloor_days = 7\nauto_purge_older_than_days = 7\n").unwrap();
        assert_eq!(
            c.auto_purge_older_than,
            Some(Duration::from_secs(7 * 86_400))
        );
        assert_eq!(
            err("[retention]\nauto_purge_older_than_days = 29"),
            "retention.auto_purge_older_than_days: 29 is below retention.floor_days (30)"
        );
        assert!(err("[retention]\nbatch_size = 0").starts_with("retention.batch_size:"));
    }
}
