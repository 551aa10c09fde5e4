//! The overview's last hour and last day, minute by minute, drawn from the figures the console reads anyway.
//!
//! Where the numbers come from: each minute the supervised overview loop takes a snapshot (the `hookline
//! status` report from PostgreSQL and RabbitMQ, the edge's `/metrics`, the destinations' backlog from
//! `domain_deliveries`) — the same reads the overview page triggers every 5 s while someone looks at it — and
//! keeps a [`Sample`] of its cumulative totals here. A minute's "received" is then the difference of two
//! totals, and the ack latency of a minute is read from the difference of two histograms. So the pictures cost
//! no query of their own (no `GROUP BY minute` over a day of events, which on a million rows would be the
//! slowest query of the console), and memory is bounded: [`MAX_SAMPLES`] samples, a day of minutes.
//!
//! What this does NOT know: anything before the console started (the charts say since when), and minutes the
//! database did not answer (blank, never zero). Totals that go down (a purge deletes events, a restarted edge
//! starts its histogram again) give a blank minute rather than a negative one. For history beyond a day or
//! across restarts, Prometheus scrapes the same figures from the processes (docs/http.md, "HTTP interface").

use std::collections::VecDeque;

use time::{Duration, OffsetDateTime};

use crate::charts::Series;

/// One day of one-minute samples, and one more so that the oldest minute has a start.
pub const MAX_SAMPLES: usize = 24 * 60 + 1;
/// Most destinations whose backlog is kept per sample (the rest are summed into "other").
pub const MAX_DESTINATIONS: usize = 8;

/// Cumulative figures at one moment. `None`: that source did not answer.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// When the figures were read.
    pub at: Option<OffsetDateTime>,
    /// Events stored, all providers (`webhook_events`).
    pub received: Option<i64>,
    /// Events with a processed marker.
    pub processed: Option<i64>,
    /// Events dead-lettered and not resolved.
    pub dead_lettered: Option<i64>,
    /// The edge's ack-latency histogram: `(le, cumulative count)`, sorted by `le`.
    pub ack_buckets: Option<Vec<(f64, f64)>>,
    /// Age of the oldest event not yet published by the relay, in seconds (0 when none waits).
    pub relay_lag_secs: Option<f64>,
    /// Pending deliveries per destination, by name.
    pub backlog: Option<Vec<(String, i64)>>,
}

/// The samples, oldest first, at most [`MAX_SAMPLES`].
#[derive(Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
}

/// What the overview draws for one window (the last hour, the last day).
#[derive(Debug, Clone)]
pub struct Window {
    /// Start of the first bucket.
    pub start: OffsetDateTime,
    /// Length of a bucket.
    pub bucket: Duration,
    /// received / processed / dead-lettered, per minute (averaged over the bucket).
    pub flow: Vec<Series>,
    /// ack latency p50 / p95 / p99 in milliseconds, per bucket.
    pub ack: Vec<Series>,
    /// relay lag in seconds (the largest sampled in the bucket).
    pub relay_lag: Vec<Series>,
    /// pending deliveries per destination (the last sample of the bucket).
    pub backlog: Vec<Series>,
    /// The first sample's time, if any: "since HH:MM".
    pub since: Option<OffsetDateTime>,
}

const BLUE: &str = "#0366d6";
const GREEN: &str = "#22863a";
const RED: &str = "#cb2431";
const GREY: &str = "#6a737d";
const PALETTE: [&str; 8] = [
    "#0366d6", "#e36209", "#6f42c1", "#22863a", "#b08800", "#d73a49", "#005cc5", "#586069",
];

impl History {
    /// Keeps `s`, dropping the oldest sample past [`MAX_SAMPLES`].
    pub fn push(&mut self, s: Sample) {
        if self.samples.len() == MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    /// Number of samples kept.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// No sample yet.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// When the newest sample was taken.
    pub fn last_at(&self) -> Option<OffsetDateTime> {
        self.samples.back().and_then(|s| s.at)
    }

    /// The window of `buckets` buckets of `bucket` ending at `now`.
    pub fn window(&self, now: OffsetDateTime, buckets: usize, bucket: Duration) -> Window {
        let start = now - bucket * i32::try_from(buckets).unwrap_or(i32::MAX);
        let index = |t: OffsetDateTime| -> Option<usize> {
            if t < start || t > now {
                return None;
            }
            let k = ((t - start).as_seconds_f64() / bucket.as_seconds_f64()) as usize;
            Some(k.min(buckets.saturating_sub(1)))
        };
        let mut received = vec![Acc::default(); buckets];
        let mut processed = vec![Acc::default(); buckets];
        let mut dead = vec![Acc::default(); buckets];
        let mut ack: Vec<Vec<(f64, f64)>> = vec![Vec::new(); buckets];
        let mut lag: Vec<Option<f64>> = vec![None; buckets];
        let mut names: Vec<String> = Vec::new();
        let mut backlog: Vec<Vec<Option<f64>>> = Vec::new();
        let mut since = None;
        for (prev, cur) in self.samples.iter().zip(self.samples.iter().skip(1)) {
            let (Some(t0), Some(t1)) = (prev.at, cur.at) else {
                continue;
            };
            let Some(k) = index(t1) else { continue };
            since = since.or(Some(t0));
            let minutes = (t1 - t0).as_seconds_f64() / 60.0;
            if minutes <= 0.0 {
                continue;
            }
            received[k].add(delta(prev.received, cur.received), minutes);
            processed[k].add(delta(prev.processed, cur.processed), minutes);
            dead[k].add(delta(prev.dead_lettered, cur.dead_lettered), minutes);
            if let (Some(a), Some(b)) = (&prev.ack_buckets, &cur.ack_buckets) {
                if let Some(d) = histogram_delta(a, b) {
                    merge(&mut ack[k], &d);
                }
            }
            if let Some(l) = cur.relay_lag_secs.filter(|l| l.is_finite() && *l >= 0.0) {
                lag[k] = Some(lag[k].map_or(l, |m: f64| m.max(l)));
            }
            for (name, pending) in cur.backlog.iter().flatten() {
                let i = match names.iter().position(|n| n == name) {
                    Some(i) => i,
                    None if names.len() < MAX_DESTINATIONS => {
                        names.push(name.clone());
                        backlog.push(vec![None; buckets]);
                        names.len() - 1
                    }
                    None => continue,
                };
                backlog[i][k] = Some(*pending as f64);
            }
        }
        let percentiles = |q: f64| -> Vec<Option<f64>> {
            ack.iter()
                .map(|h| percentile(h, q).map(|s| s * 1000.0))
                .collect()
        };
        Window {
            start,
            bucket,
            flow: vec![
                series("received", BLUE, received.iter().map(Acc::rate).collect()),
                series(
                    "processed",
                    GREEN,
                    processed.iter().map(Acc::rate).collect(),
                ),
                series("dead-lettered", RED, dead.iter().map(Acc::rate).collect()),
            ],
            ack: vec![
                series("p50", GREEN, percentiles(0.5)),
                series("p95", BLUE, percentiles(0.95)),
                series("p99", RED, percentiles(0.99)),
            ],
            relay_lag: vec![series("oldest unpublished", GREY, lag)],
            backlog: names
                .into_iter()
                .zip(backlog)
                .enumerate()
                .map(|(i, (name, values))| Series {
                    name,
                    color: PALETTE[i % PALETTE.len()],
                    values,
                })
                .collect(),
            since,
        }
    }
}

fn series(name: &str, color: &'static str, values: Vec<Option<f64>>) -> Series {
    Series {
        name: name.to_string(),
        color,
        values,
    }
}

/// A count over a bucket and the minutes it covers: its rate per minute.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    count: f64,
    minutes: f64,
    seen: bool,
}

impl Acc {
    fn add(&mut self, d: Option<i64>, minutes: f64) {
        if let Some(d) = d {
            self.count += d as f64;
            self.minutes += minutes;
            self.seen = true;
        }
    }

    fn rate(&self) -> Option<f64> {
        (self.seen && self.minutes > 0.0).then(|| self.count / self.minutes)
    }
}

/// `cur - prev` of a total; `None` when either is unknown or the total went down (a purge, a reset).
fn delta(prev: Option<i64>, cur: Option<i64>) -> Option<i64> {
    let d = cur?.checked_sub(prev?)?;
    (d >= 0).then_some(d)
}

/// The observations between two cumulative histograms with the same bounds; `None` when the bounds differ or a
/// count went down (the edge restarted).
fn histogram_delta(a: &[(f64, f64)], b: &[(f64, f64)]) -> Option<Vec<(f64, f64)>> {
    if a.len() != b.len() {
        return None;
    }
    a.iter()
        .zip(b)
        .map(|((le_a, n_a), (le_b, n_b))| {
            (le_a == le_b && n_b >= n_a).then_some((*le_b, n_b - n_a))
        })
        .collect()
}

/// Adds histogram `d` into `into` (same bounds, or `into` empty).
fn merge(into: &mut Vec<(f64, f64)>, d: &[(f64, f64)]) {
    if into.is_empty() {
        into.extend_from_slice(d);
    } else if into.len() == d.len() {
        for (x, y) in into.iter_mut().zip(d) {
            x.1 += y.1;
        }
    }
}

/// The bound of the bucket holding quantile `q` ([`crate::views::bucket_bound`]); `None` without observations
/// or beyond the last finite bound (a column cannot be drawn to infinity).
pub fn percentile(h: &[(f64, f64)], q: f64) -> Option<f64> {
    crate::views::bucket_bound(h, q).filter(|le| le.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn sample(minute: i64, received: i64, processed: i64, ack: &[(f64, f64)]) -> Sample {
        Sample {
            at: Some(datetime!(2026-12-03 10:00:00 UTC) + Duration::minutes(minute)),
            received: Some(received),
            processed: Some(processed),
            dead_lettered: Some(0),
            ack_buckets: Some(ack.to_vec()),
            relay_lag_secs: Some(minute as f64),
            backlog: Some(vec![("crm".into(), minute * 10)]),
        }
    }

    #[test]
    fn a_minute_is_the_difference_of_two_totals_and_unknown_minutes_stay_blank() {
        let mut h = History::default();
        h.push(sample(0, 100, 90, &[(0.005, 10.0), (f64::INFINITY, 10.0)]));
        h.push(sample(1, 160, 150, &[(0.005, 60.0), (f64::INFINITY, 70.0)]));
        // A minute the database did not answer: blank, and the next minute has no start.
        h.push(Sample {
            at: Some(datetime!(2026-12-03 10:02:00 UTC)),
            ..Sample::default()
        });
        h.push(sample(3, 200, 190, &[(0.005, 70.0), (f64::INFINITY, 80.0)]));
        // A purge: the total went down, that minute is blank rather than negative.
        h.push(sample(4, 20, 200, &[(0.005, 70.0), (f64::INFINITY, 80.0)]));
        let w = h.window(datetime!(2026-12-03 10:05:00 UTC), 5, Duration::minutes(1));
        let received = &w.flow[0].values;
        assert_eq!(received.len(), 5);
        assert_eq!(received[0], None, "no sample ends in 10:00-10:01");
        assert_eq!(received[1], Some(60.0));
        assert_eq!(received[2], None);
        assert_eq!(received[3], None);
        assert_eq!(received[4], None, "the purge");
        assert_eq!(w.flow[1].values[4], Some(10.0));
        // 60 acks in minute 1: 50 under 5 ms, 10 above → p50 5 ms, p99 beyond the last finite bound.
        assert_eq!(w.ack[0].values[1], Some(5.0));
        assert_eq!(w.ack[2].values[1], None);
        assert_eq!(w.relay_lag[0].values[4], Some(4.0));
        assert_eq!(w.backlog[0].name, "crm");
        assert_eq!(w.backlog[0].values[4], Some(40.0));
        assert_eq!(w.since, Some(datetime!(2026-12-03 10:00:00 UTC)));
    }

    #[test]
    fn a_day_of_minutes_is_the_most_kept_and_buckets_average_per_minute() {
        let mut h = History::default();
        for m in 0..(MAX_SAMPLES as i64 + 100) {
            h.push(sample(m, m * 6, m * 6, &[]));
        }
        assert_eq!(h.len(), MAX_SAMPLES);
        let now = datetime!(2026-12-03 10:00:00 UTC) + Duration::minutes(MAX_SAMPLES as i64 + 99);
        let w = h.window(now, 144, Duration::minutes(10));
        assert_eq!(w.flow[0].values.len(), 144);
        assert!(w.flow[0]
            .values
            .iter()
            .flatten()
            .all(|v| (*v - 6.0).abs() < 1e-9));
    }

    #[test]
    fn percentiles_name_the_bucket_bound() {
        let h = [
            (0.001, 50.0),
            (0.01, 95.0),
            (0.1, 99.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(percentile(&h, 0.5), Some(0.001));
        assert_eq!(percentile(&h, 0.95), Some(0.01));
        assert_eq!(percentile(&h, 0.99), Some(0.1));
        assert_eq!(percentile(&h, 1.0), None);
        assert_eq!(percentile(&[], 0.5), None);
    }
}
