//! Fault injection on the API, armed through the control API — never through request headers, so the client under
//! test cannot tell a faulty request from a normal one.
//!
//! A fault matches requests by provider, method and path prefix, and fires for the next `count` matching requests,
//! or with probability `rate` (drawn from the seeded generator), or both (at most `count` times, each with
//! probability `rate`). Actions:
//!
//! - `delay`: the operation is performed, then the answer is held for `delay_ms` (longer than the client's
//!   timeout: the client gives up, the charge exists);
//! - `drop_response`: the operation is performed, then the connection is closed without an answer ("the lost
//!   2xx");
//! - `status`: answered at once with `status` (429 with `Retry-After`, 500, 503, …) in the provider's error format,
//!   before anything is executed or saved under the idempotency key;
//! - `reset`: the connection is reset before anything is executed.
//!
//! This module holds the definitions and the armed list only (data the state keeps); applying them to requests
//! is `fault_injection`'s middleware, so that the state never depends on the HTTP handlers.

use serde::{Deserialize, Serialize};

use crate::limits::{MAX_COUNT, MAX_DELAY_MS};
use crate::rng::SeededRng;

/// What an armed fault does to a matching request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultAction {
    /// Perform the operation, then answer after `delay_ms`.
    Delay {
        /// How long the answer is held.
        delay_ms: u64,
    },
    /// Perform the operation, then close the connection without answering.
    DropResponse,
    /// Answer `status` at once, in the provider's error format, without executing anything.
    Status {
        /// 4xx or 5xx (429 and 500 are the usual ones).
        status: u16,
        /// `Retry-After` header value in seconds (429 gets 1 by default).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_secs: Option<u64>,
    },
    /// Reset the connection before executing anything.
    Reset,
}

impl FaultAction {
    pub(crate) fn name(&self) -> String {
        match self {
            FaultAction::Delay { delay_ms } => format!("delay {delay_ms} ms"),
            FaultAction::DropResponse => "drop_response".into(),
            FaultAction::Status { status, .. } => format!("status {status}"),
            FaultAction::Reset => "reset".into(),
        }
    }
}

/// A fault to arm: which requests it matches, what it does, how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Only requests for this provider (its hookline name); any provider when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Only this method (`POST`, `GET`); any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Only paths starting with this (`/v1/payment_intents` also matches `…/{id}/confirm`); any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// What happens.
    pub action: FaultAction,
    /// Fire for at most this many matching requests (1 when neither `count` nor `rate` is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Fire with this probability per matching request (seeded generator); until cleared unless `count` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

impl FaultSpec {
    /// A fault for the next `count` requests whose path starts with `path` (any method, any provider).
    pub fn next(path: &str, count: u32, action: FaultAction) -> FaultSpec {
        FaultSpec {
            provider: None,
            method: None,
            path: Some(path.to_owned()),
            action,
            count: Some(count),
            rate: None,
        }
    }
}

/// An armed fault and how often it fired.
#[derive(Debug, Clone, Serialize)]
pub struct ArmedFault {
    /// Its id (for the listing).
    pub id: u64,
    /// What was armed.
    pub spec: FaultSpec,
    /// Firings left (`None`: unlimited, rate-driven).
    pub remaining: Option<u32>,
    /// How many requests it hit.
    pub hits: u32,
}

/// Longest `Retry-After` a status fault answers: one hour.
pub const MAX_RETRY_AFTER_SECS: u64 = 3600;
/// Longest `provider`, `method` or `path` a fault matches on.
pub const MAX_MATCH_BYTES: usize = 200;
/// Most faults armed at once.
pub const MAX_ARMED: usize = 1000;

#[derive(Debug, Default)]
pub(crate) struct Faults {
    armed: Vec<ArmedFault>,
    next_id: u64,
}

impl Faults {
    pub(crate) fn arm(&mut self, mut spec: FaultSpec) -> Result<u64, String> {
        if let Some(rate) = spec.rate {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("rate must be between 0 and 1, not {rate}"));
            }
        }
        match &spec.action {
            FaultAction::Status { status, .. } if !(400..=599).contains(status) => {
                return Err(format!("status must be a 4xx or 5xx, not {status}"));
            }
            FaultAction::Delay { delay_ms } if *delay_ms > MAX_DELAY_MS => {
                return Err(format!("delay_ms must be at most {MAX_DELAY_MS}"));
            }
            FaultAction::Status {
                retry_after_secs: Some(secs),
                ..
            } if *secs > MAX_RETRY_AFTER_SECS => {
                return Err(format!(
                    "retry_after_secs must be at most {MAX_RETRY_AFTER_SECS}"
                ));
            }
            _ => {}
        }
        if let Some(count) = spec.count {
            if count > MAX_COUNT {
                return Err(format!("count must be at most {MAX_COUNT}, not {count}"));
            }
        }
        for (name, value) in [
            ("provider", &spec.provider),
            ("method", &spec.method),
            ("path", &spec.path),
        ] {
            if value.as_ref().is_some_and(|v| v.len() > MAX_MATCH_BYTES) {
                return Err(format!("{name} must be at most {MAX_MATCH_BYTES} bytes"));
            }
        }
        if self.armed.len() >= MAX_ARMED {
            return Err(format!(
                "at most {MAX_ARMED} faults armed at once: clear them first (DELETE /_sandbox/faults)"
            ));
        }
        if spec.count.is_none() && spec.rate.is_none() {
            spec.count = Some(1);
        }
        spec.method = spec.method.map(|m| m.to_ascii_uppercase());
        self.next_id += 1;
        self.armed.push(ArmedFault {
            id: self.next_id,
            remaining: spec.count,
            spec,
            hits: 0,
        });
        Ok(self.next_id)
    }

    pub(crate) fn list(&self) -> Vec<ArmedFault> {
        self.armed.clone()
    }

    pub(crate) fn clear(&mut self) {
        self.armed.clear();
    }

    fn active(&self) -> impl Iterator<Item = &ArmedFault> {
        self.armed.iter().filter(|f| f.remaining != Some(0))
    }

    pub(crate) fn needs_provider(&self) -> bool {
        self.active().any(|f| f.spec.provider.is_some())
    }

    /// The action for this request, if an armed fault fires for it.
    pub(crate) fn take(
        &mut self,
        rng: &mut SeededRng,
        method: &str,
        path: &str,
        provider: Option<&str>,
    ) -> Option<FaultAction> {
        for fault in &mut self.armed {
            if fault.remaining == Some(0) {
                continue;
            }
            let spec = &fault.spec;
            let matches = spec.method.as_deref().is_none_or(|m| m == method)
                && spec.path.as_deref().is_none_or(|p| path.starts_with(p))
                && spec.provider.as_deref().is_none_or(|p| provider == Some(p));
            if !matches {
                continue;
            }
            if let Some(rate) = spec.rate {
                if !rng.chance(rate) {
                    continue;
                }
            }
            if let Some(remaining) = fault.remaining.as_mut() {
                *remaining -= 1;
            }
            fault.hits += 1;
            return Some(fault.spec.action.clone());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_limits_and_filters_apply() {
        let mut faults = Faults::default();
        let mut rng = SeededRng::new(1);
        let mut spec = FaultSpec::next("/v1/refunds", 2, FaultAction::Reset);
        spec.method = Some("post".into());
        faults.arm(spec).unwrap();
        assert_eq!(faults.take(&mut rng, "GET", "/v1/refunds", None), None);
        assert_eq!(faults.take(&mut rng, "POST", "/v1/events", None), None);
        assert!(faults.take(&mut rng, "POST", "/v1/refunds", None).is_some());
        assert!(faults.take(&mut rng, "POST", "/v1/refunds", None).is_some());
        assert_eq!(faults.take(&mut rng, "POST", "/v1/refunds", None), None);
        assert_eq!(faults.list()[0].hits, 2);
    }

    #[test]
    fn rates_are_seeded_and_bad_specs_refused() {
        let run = |seed| {
            let mut faults = Faults::default();
            let mut rng = SeededRng::new(seed);
            faults
                .arm(FaultSpec {
                    rate: Some(0.5),
                    count: None,
                    ..FaultSpec::next("/v1", 0, FaultAction::DropResponse)
                })
                .unwrap();
            (0..64)
                .map(|_| {
                    faults
                        .take(&mut rng, "POST", "/v1/payments", None)
                        .is_some()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        assert!(run(9).iter().any(|hit| *hit) && run(9).iter().any(|hit| !*hit));
        let mut faults = Faults::default();
        assert!(faults
            .arm(FaultSpec::next(
                "/",
                1,
                FaultAction::Status {
                    status: 200,
                    retry_after_secs: None
                }
            ))
            .is_err());
    }
}
