//! Retry schedules and the server's word on them: the one backoff rule and the one `Retry-After` reader of
//! every retrying loop (the outbound dispatcher, the delivery of facts, reconnections).

use std::time::{Duration, SystemTime};

/// `base · 2^(attempt-1)`, capped at `max`, of which the upper half is random (so callers recovering together are
/// not retried in lockstep): the retry schedule of the dispatcher and of the domain-event delivery. `seed` makes
/// the jitter reproducible.
pub fn jittered_backoff(base: Duration, max: Duration, attempt: i32, seed: u64) -> Duration {
    let exp = u32::try_from(attempt.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
    let full = base
        .saturating_mul(1u32.checked_shl(exp).unwrap_or(u32::MAX))
        .min(max);
    let unit = (splitmix64(seed) >> 11) as f64 / (1u64 << 53) as f64;
    full.mul_f64(0.5 + 0.5 * unit)
}

fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `Retry-After`: delay-seconds or an HTTP date.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        assert_eq!(parse_retry_after(" 120 "), Some(Duration::from_secs(120)));
        let later = SystemTime::now() + Duration::from_secs(3600);
        let d = parse_retry_after(&httpdate::fmt_http_date(later)).expect("date");
        assert!(
            d > Duration::from_secs(3500) && d <= Duration::from_secs(3600),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
