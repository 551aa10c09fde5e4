//! Latency summaries. Every sample is kept (a run has at most a few hundred thousand), so percentiles are exact
//! rather than bucketed.

use serde::Serialize;

/// Percentiles of one set of durations, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    /// Number of samples.
    pub count: usize,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

impl Latency {
    /// Summarises samples given in microseconds; `None` when there are none.
    pub fn from_micros(samples: &mut [u32]) -> Option<Latency> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let ms = |us: u32| f64::from(us) / 1000.0;
        let sum: u64 = samples.iter().map(|&v| u64::from(v)).sum();
        Some(Latency {
            count: samples.len(),
            mean_ms: sum as f64 / samples.len() as f64 / 1000.0,
            p50_ms: ms(percentile(samples, 0.50)),
            p90_ms: ms(percentile(samples, 0.90)),
            p99_ms: ms(percentile(samples, 0.99)),
            p999_ms: ms(percentile(samples, 0.999)),
            max_ms: ms(samples[samples.len() - 1]),
        })
    }

    /// Summarises samples given in (fractional) seconds.
    pub fn from_secs(samples: &[f64]) -> Option<Latency> {
        let mut us: Vec<u32> = samples
            .iter()
            .map(|s| (s.max(0.0) * 1e6).min(f64::from(u32::MAX)) as u32)
            .collect();
        Latency::from_micros(&mut us)
    }
}

/// Nearest-rank percentile of sorted, non-empty samples.
fn percentile(sorted: &[u32], p: f64) -> u32 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Converts a duration to whole microseconds, saturating (a sample above 71 minutes is not a latency).
pub fn micros(d: std::time::Duration) -> u32 {
    d.as_micros().min(u128::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u32> = (1..=1000).map(|i| i * 1000).collect();
        let l = Latency::from_micros(&mut v).unwrap();
        assert_eq!(l.p50_ms, 500.0);
        assert_eq!(l.p99_ms, 990.0);
        assert_eq!(l.p999_ms, 999.0);
        assert_eq!(l.max_ms, 1000.0);
        assert!(Latency::from_micros(&mut []).is_none());
    }
}
