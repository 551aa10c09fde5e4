//! `[retention]`: how long raw events and their processed markers are kept, and the worker's periodic purge.

use std::time::Duration;

use serde::Deserialize;

use super::{positive, ConfigError};

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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    floor_days: Option<u64>,
    auto_purge_older_than_days: Option<u64>,
    auto_purge_interval_secs: Option<u64>,
    batch_size: Option<u32>,
}

pub(super) fn retention(rt: RawRetention) -> Result<RetentionConfig, ConfigError> {
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
    use super::super::testing::{err, NO_ENV};
    use super::super::Config;
    use std::time::Duration;

    #[test]
    fn auto_purge_never_goes_below_the_floor() {
        let c = Config::from_toml_str("", "t", &NO_ENV).unwrap();
        assert_eq!(c.retention.floor, Duration::from_secs(30 * 86_400));
        assert!(c.retention.auto_purge_older_than.is_none());
        let c = Config::from_toml_str(
            "[retention]\nfloor_days = 7\nauto_purge_older_than_days = 7\n",
            "t",
            &NO_ENV,
        )
        .unwrap();
        assert_eq!(
            c.retention.auto_purge_older_than,
            Some(Duration::from_secs(7 * 86_400))
        );
        assert_eq!(
            err("[retention]\nauto_purge_older_than_days = 29"),
            "retention.auto_purge_older_than_days: 29 is below retention.floor_days (30)"
        );
        assert!(err("[retention]\nbatch_size = 0").starts_with("retention.batch_size:"));
    }
}
