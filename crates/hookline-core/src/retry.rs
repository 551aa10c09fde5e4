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

/// A reconnection schedule: 200 ms doubling to 10 s, back to 200 ms after a success. Every loop that waits out
/// an outage of the broker (the consumer, the event relay, the domain relay) uses this one.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// 200 ms doubling to 10 s: short enough to notice a node that is back, long enough not to hammer one
    /// that is not.
    pub fn reconnect() -> Self {
        Self::new(Duration::from_millis(200), Duration::from_secs(10))
    }

    /// `initial` doubling to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            next: initial,
            initial,
            max,
        }
    }

    /// The delay the next failure will wait.
    pub fn current(&self) -> Duration {
        self.next
    }

    /// A failure: returns the delay to wait now and doubles the next one (up to the cap).
    pub fn failed(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    /// A success: the next failure waits the initial delay again.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
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

    #[test]
    fn reconnect_backoff_doubles_to_its_cap_and_resets() {
        let mut b = Backoff::reconnect();
        let waits: Vec<u128> = (0..8).map(|_| b.failed().as_millis()).collect();
        assert_eq!(waits, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        b.reset();
        assert_eq!(b.current(), Duration::from_millis(200));
    }
}
