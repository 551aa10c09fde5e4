//! Statistics of a run: answers counted by kind (new, duplicate, 4xx, 5xx, transport errors), latencies, the
//! first distinct errors, and the summary printed at the end (its labels are what scripts and tests read).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use super::send::Reply;

/// Counters of a run.
#[derive(Default)]
pub(super) struct Stats {
    new: usize,
    duplicate: usize,
    other: usize,
    client_errors: usize,
    server_errors: usize,
    pub(super) transport_errors: usize,
    latencies: Vec<Duration>,
    /// Distinct error descriptions, the first few shown in the summary.
    errors: BTreeSet<String>,
}

/// How many distinct error descriptions the summary shows.
const ERROR_SAMPLES: usize = 5;

impl Stats {
    pub(super) fn record(&mut self, reply: Reply) {
        match reply {
            Reply::Http {
                status,
                duplicate,
                latency,
                detail,
            } => {
                self.latencies.push(latency);
                match status {
                    200 if duplicate => self.duplicate += 1,
                    200 => self.new += 1,
                    400..=499 => self.client_errors += 1,
                    500..=599 => self.server_errors += 1,
                    _ => self.other += 1,
                }
                if status != 200 && self.errors.len() < ERROR_SAMPLES {
                    self.errors.insert(detail);
                }
            }
            Reply::Transport(detail) => {
                self.transport_errors += 1;
                if self.errors.len() < ERROR_SAMPLES {
                    self.errors.insert(detail);
                }
            }
        }
    }

    pub(super) fn failures(&self) -> usize {
        self.other + self.client_errors + self.server_errors + self.transport_errors
    }

    pub(super) fn all_ok(&self) -> bool {
        self.failures() == 0
    }

    pub(super) fn summary(&mut self, events: usize, requests: usize, elapsed: Duration) -> String {
        self.latencies.sort_unstable();
        let secs = elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            requests as f64 / secs
        } else {
            0.0
        };
        let ms = |d: Option<Duration>| match d {
            Some(d) => format!("{:.1} ms", d.as_secs_f64() * 1000.0),
            None => "-".to_string(),
        };
        let mut out = String::new();
        let mut line = |label: &str, value: String| {
            let _ = writeln!(out, "{label:<18}{value}");
        };
        line("events:", events.to_string());
        line("requests sent:", requests.to_string());
        line("200 new:", self.new.to_string());
        line("200 duplicate:", self.duplicate.to_string());
        if self.other > 0 {
            line("other status:", self.other.to_string());
        }
        line("4xx:", self.client_errors.to_string());
        line("5xx:", self.server_errors.to_string());
        line("transport errors:", self.transport_errors.to_string());
        line("elapsed:", format!("{secs:.3} s"));
        line("requests/s:", format!("{rate:.1}"));
        line("latency p50:", ms(percentile(&self.latencies, 50.0)));
        line("latency p99:", ms(percentile(&self.latencies, 99.0)));
        if !self.errors.is_empty() {
            let _ = writeln!(out, "first errors:");
            for e in &self.errors {
                let _ = writeln!(out, "  {e}");
            }
        }
        out
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&v, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&v[..1], 99.0), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
