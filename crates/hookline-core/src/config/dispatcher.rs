//! `[dispatcher]`: the outbound dispatcher that sends queued charges and refunds to the gateways (inside
//! `hookline-worker`, or alone with `hookline dispatch`).
//!
//! These settings were environment variables (`HOOKLINE_DISPATCHER`, `HOOKLINE_DISPATCH_TIMEOUT_SECS`,
//! `HOOKLINE_DISPATCH_LEASE_SECS`). A deployment that still sets one is refused with the key that replaces it:
//! ignoring `HOOKLINE_DISPATCHER=off` silently would start sending charges from a worker meant not to.

use std::time::Duration;

use serde::Deserialize;

use super::{between, ConfigError, Env};

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
pub(super) struct RawDispatcher {
    enabled: Option<bool>,
    request_timeout_secs: Option<u64>,
    lease_secs: Option<u64>,
}

/// Validates `[dispatcher]`; refuses the retired environment variables (see the module documentation).
pub(super) fn dispatcher(
    raw: RawDispatcher,
    env: &dyn Env,
) -> Result<DispatcherConfig, ConfigError> {
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

#[cfg(test)]
mod tests {
    use super::super::testing::{err, NO_ENV};
    use super::super::Config;
    use std::time::Duration;

    #[test]
    fn defaults_are_on_30_s_to_answer_and_a_60_s_lease() {
        let d = Config::from_toml_str("", "t", &NO_ENV).unwrap().dispatcher;
        assert!(d.enabled);
        assert_eq!(d.request_timeout, Duration::from_secs(30));
        assert_eq!(d.lease, Duration::from_secs(60));
    }

    #[test]
    fn the_section_sets_every_key() {
        let d = Config::from_toml_str(
            "[dispatcher]\nenabled = false\nrequest_timeout_secs = 80\nlease_secs = 2\n",
            "t",
            &NO_ENV,
        )
        .unwrap()
        .dispatcher;
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
    }

    #[test]
    fn the_retired_environment_variables_are_refused_with_their_key() {
        for (variable, key) in super::RETIRED_VARIABLES {
            let env = [(variable, "off")];
            let message = Config::from_toml_str("", "t", &env)
                .expect_err("a retired variable is refused")
                .to_string();
            assert!(
                message.starts_with(&format!("{variable}: is no longer read")),
                "{message}"
            );
            assert!(message.contains(key), "{message}");
        }
    }
}
