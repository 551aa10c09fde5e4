//! `[reconcile]`: the worker's periodic reconciliation against the providers' APIs (off by default).

use std::time::Duration;

use serde::Deserialize;

use super::{positive, ConfigError};

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
pub(super) struct RawReconcile {
    interval_secs: Option<u64>,
    window_secs: Option<u64>,
    rate: Option<u32>,
}

pub(super) fn reconcile(r: RawReconcile) -> Result<ReconcileConfig, ConfigError> {
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
    use super::super::testing::{err, NO_ENV};
    use super::super::Config;
    use std::time::Duration;

    #[test]
    fn reconciliation_is_off_by_default_and_never_more_often_than_a_minute() {
        let c = Config::from_toml_str("", "t", &NO_ENV).unwrap();
        assert!(c.reconcile.interval.is_none());
        assert_eq!(c.reconcile.window, Duration::from_secs(86_400));
        assert_eq!(c.reconcile.rate, 5);
        let c = Config::from_toml_str("[reconcile]\ninterval_secs = 60", "t", &NO_ENV).unwrap();
        assert_eq!(c.reconcile.interval, Some(Duration::from_secs(60)));
        assert!(err("[reconcile]\ninterval_secs = 59").starts_with("reconcile.interval_secs:"));
        assert!(err("[reconcile]\nrate = 0").starts_with("reconcile.rate:"));
    }
}
