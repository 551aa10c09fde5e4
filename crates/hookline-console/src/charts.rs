//! Pictures, drawn on the server as inline SVG: no build step, no script, no external font or stylesheet, so
//! they pass the console's Content-Security-Policy (presentation attributes only, no `style=`) and work in a
//! browser that runs nothing. Every label goes through maud's `(…)`, which escapes it: a provider's event
//! type or a destination's name may be hostile, and in SVG as in HTML it must render as text.
//!
//! Two kinds, both pure functions of their data (the handlers read it; the tests here draw fixed data):
//! - [`timeline`]: the moments of one thing (an event, a payment) in order, evenly spaced, with the time
//!   between consecutive moments written on the segment. Evenly, not to scale: the steps of one event span
//!   milliseconds (stored → published → applied) to days (a dispute opened after the payment), and a scale
//!   that showed the days would put every millisecond step on one pixel.
//! - [`columns`]: one series per minute (or per bucket), as columns, for the overview's last hour and day.
//!
//! Sizes are bounded whatever the data: at most [`MAX_MARKS`] moments (the rest counted in a note) and at
//! most [`MAX_COLUMNS`] columns.

use maud::{html, Markup};
use time::OffsetDateTime;

/// Most moments one timeline draws; the rest are counted below it.
pub const MAX_MARKS: usize = 40;
/// Most columns one chart draws.
pub const MAX_COLUMNS: usize = 1440;

/// How a moment went: the colour of its dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Done as it should be (stored, applied, delivered).
    Ok,
    /// Failed or refused (dead-lettered, a delivery answered 5xx).
    Bad,
    /// Neither (published, a transition, a posting).
    Neutral,
}

impl Tone {
    fn fill(self) -> &'static str {
        match self {
            Tone::Ok => "#22863a",
            Tone::Bad => "#cb2431",
            Tone::Neutral => "#0366d6",
        }
    }
}

/// One moment of a [`timeline`].
#[derive(Debug, Clone)]
pub struct Mark {
    /// When.
    pub at: OffsetDateTime,
    /// What, in a few words ("stored", "applied by payments", "delivered to crm").
    pub label: String,
    /// How it went.
    pub tone: Tone,
}

impl Mark {
    /// A moment.
    pub fn new(at: OffsetDateTime, label: impl Into<String>, tone: Tone) -> Mark {
        Mark {
            at,
            label: label.into(),
            tone,
        }
    }
}

/// "+850 µs", "+12 ms", "+3.2 s", "+4 min 10 s", "+2 h 5 min", "+3 d 4 h": the time between two moments, in
/// the unit that reads best. A negative span (clocks of two processes, a provider's timestamp) keeps its sign.
pub fn span(d: time::Duration) -> String {
    let sign = if d.is_negative() { "-" } else { "+" };
    let d = d.abs();
    let us = d.whole_microseconds();
    let s = d.whole_seconds();
    if us < 1_000 {
        format!("{sign}{us} µs")
    } else if us < 1_000_000 {
        format!("{sign}{} ms", us / 1_000)
    } else if s < 60 {
        format!("{sign}{:.1} s", d.as_seconds_f64())
    } else if s < 3_600 {
        format!("{sign}{} min {} s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{sign}{} h {} min", s / 3_600, (s % 3_600) / 60)
    } else {
        format!("{sign}{} d {} h", s / 86_400, (s % 86_400) / 3_600)
    }
}

/// The clock time of a moment, to the millisecond (UTC; the page says the date elsewhere).
fn clock(t: OffsetDateTime) -> String {
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// The moments in time order (stable: equal times keep the caller's order), evenly spaced, each a dot with its
/// label and clock time, the span since the previous one written between them, and the whole span in the
/// title. `id` is the element id (tests and screenshots find the picture by it). Empty: a line saying so.
pub fn timeline(id: &str, title: &str, marks: &[Mark]) -> Markup {
    let mut marks: Vec<&Mark> = marks.iter().collect();
    marks.sort_by_key(|m| m.at);
    let hidden = marks.len().saturating_sub(MAX_MARKS);
    marks.truncate(MAX_MARKS);
    if marks.is_empty() {
        return html! { p.muted id=(id) { (title) ": nothing to draw yet." } };
    }
    const STEP: usize = 120;
    const LEFT: usize = 60;
    let width = LEFT * 2 + STEP * (marks.len() - 1);
    let total = marks[marks.len() - 1].at - marks[0].at;
    let x = |i: usize| LEFT + STEP * i;
    html! {
        figure.chart id=(id) {
            figcaption { (title) " — " (marks.len()) " moments over " (span(total).trim_start_matches('+')) }
            svg xmlns="http://www.w3.org/2000/svg" role="img" width=(width) height="150"
                viewBox={ "0 0 " (width) " 150" } font-family="sans-serif" font-size="11" {
                title { (title) }
                line x1=(x(0)) y1="60" x2=(x(marks.len() - 1)) y2="60" stroke="#959da5" stroke-width="2" {}
                @for (i, m) in marks.iter().enumerate() {
                    @if i > 0 {
                        text.span x=(x(i) - STEP / 2) y="52" text-anchor="middle" fill="#586069" {
                            (span(m.at - marks[i - 1].at))
                        }
                    }
                    circle.mark cx=(x(i)) cy="60" r="6" fill=(m.tone.fill()) {
                        title { (m.label) " at " (clock(m.at)) }
                    }
                    // Labels alternate between two rows so that neighbours never overlap: each may take two steps.
                    text.label x=(x(i)) y=(if i % 2 == 0 { 84 } else { 114 }) text-anchor="middle" fill="#1b1f23" {
                        (shorten(&m.label, 36))
                    }
                    text x=(x(i)) y=(if i % 2 == 0 { 98 } else { 128 }) text-anchor="middle" fill="#6a737d" {
                        (clock(m.at))
                    }
                }
            }
            @if hidden > 0 { p.muted { "… and " (hidden) " later moments, listed below." } }
        }
    }
}

/// One series of a [`columns`] chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Its name in the legend ("received", "processed").
    pub name: String,
    /// Its colour (`#rrggbb`).
    pub color: &'static str,
    /// One value per column, oldest first; `None` where nothing was sampled.
    pub values: Vec<Option<f64>>,
}

/// Columns per bucket for each series side by side in one band, oldest left: the overview's per-minute
/// history. `start` is the first bucket's time and `bucket` its length (the axis labels); `unit` follows the
/// largest value in the caption. Buckets without a sample are left blank, not drawn as zero: a console that
/// just started knows nothing of the hour before.
pub fn columns(
    id: &str,
    title: &str,
    unit: &str,
    start: OffsetDateTime,
    bucket: time::Duration,
    series: &[Series],
) -> Markup {
    let n = series
        .iter()
        .map(|s| s.values.len())
        .max()
        .unwrap_or(0)
        .min(MAX_COLUMNS);
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().take(n).flatten())
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    const LEFT: f64 = 50.0;
    const TOP: f64 = 10.0;
    const HEIGHT: f64 = 120.0;
    // About 720 px of columns whatever their number: 60 minutes × 3 series get 4 px each, a day's 144 buckets
    // × 3 get 1 px.
    let band = (720.0 / (n.max(1) * series.len().max(1)) as f64)
        .floor()
        .clamp(1.0, 12.0);
    let width = LEFT + 10.0 + band * n as f64 * series.len().max(1) as f64;
    let scale = if max > 0.0 { HEIGHT / max } else { 0.0 };
    let lanes = series.len().max(1) as f64;
    let end = start + bucket * n as i32;
    html! {
        figure.chart id=(id) {
            figcaption {
                (title) " — max " (format_value(max)) " " (unit) " "
                @for s in series {
                    span.legend { svg width="10" height="10" { rect width="10" height="10" fill=(s.color) {} } " " (s.name) " " }
                }
            }
            svg xmlns="http://www.w3.org/2000/svg" role="img" width=(width as u32) height=((TOP + HEIGHT + 30.0) as u32)
                viewBox={ "0 0 " (width as u32) " " ((TOP + HEIGHT + 30.0) as u32) } font-family="sans-serif" font-size="11" {
                title { (title) }
                line x1=(LEFT) y1=(TOP + HEIGHT) x2=(width - 10.0) y2=(TOP + HEIGHT) stroke="#959da5" {}
                text x=(LEFT - 4.0) y=(TOP + 8.0) text-anchor="end" fill="#6a737d" { (format_value(max)) }
                text x=(LEFT - 4.0) y=(TOP + HEIGHT) text-anchor="end" fill="#6a737d" { "0" }
                @for (k, s) in series.iter().enumerate() {
                    @for (i, v) in s.values.iter().take(n).enumerate() {
                        @if let Some(v) = v.filter(|v| v.is_finite() && *v > 0.0) {
                            @let h = (v * scale).max(1.0);
                            rect x=(LEFT + band * (i as f64 * lanes + k as f64)) y=(TOP + HEIGHT - h)
                                width=(band) height=(h) fill=(s.color) {
                                title { (s.name) " " (format_value(v)) " " (unit) }
                            }
                        }
                    }
                }
                text x=(LEFT) y=(TOP + HEIGHT + 16.0) fill="#6a737d" { (hh_mm(start)) }
                text x=(width - 10.0) y=(TOP + HEIGHT + 16.0) text-anchor="end" fill="#6a737d" { (hh_mm(end)) }
            }
        }
    }
}

fn hh_mm(t: OffsetDateTime) -> String {
    format!("{:02}:{:02}", t.hour(), t.minute())
}

/// 0, 7, 12.5, 1,234 → "1234"; fractions to one decimal below 100.
fn format_value(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// At most `max` characters, an ellipsis when cut (on a character boundary).
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn spans_read_in_the_unit_that_fits() {
        let d = time::Duration::microseconds;
        assert_eq!(span(d(850)), "+850 µs");
        assert_eq!(span(d(12_400)), "+12 ms");
        assert_eq!(span(d(3_250_000)), "+3.2 s");
        assert_eq!(span(time::Duration::seconds(250)), "+4 min 10 s");
        assert_eq!(span(time::Duration::seconds(7_500)), "+2 h 5 min");
        assert_eq!(
            span(time::Duration::seconds(3 * 86_400 + 4 * 3_600)),
            "+3 d 4 h"
        );
        assert_eq!(span(time::Duration::milliseconds(-40)), "-40 ms");
    }

    #[test]
    fn a_timeline_orders_its_moments_and_writes_each_span() {
        let t0 = datetime!(2026-12-03 10:00:00 UTC);
        let marks = [
            Mark::new(t0 + time::Duration::milliseconds(40), "applied", Tone::Ok),
            Mark::new(t0, "stored", Tone::Ok),
            Mark::new(
                t0 + time::Duration::milliseconds(12),
                "published",
                Tone::Neutral,
            ),
        ];
        let svg = timeline("t", "Event 1", &marks).into_string();
        let stored = svg.find(">stored<").expect("stored drawn");
        let published = svg.find(">published<").expect("published drawn");
        let applied = svg.find(">applied<").expect("applied drawn");
        assert!(stored < published && published < applied, "{svg}");
        assert!(
            svg.contains(">+12 ms<") && svg.contains(">+28 ms<"),
            "{svg}"
        );
        assert!(svg.contains("3 moments over 40 ms"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 3);
    }

    #[test]
    fn labels_are_escaped_and_the_number_of_moments_is_bounded() {
        let t0 = datetime!(2026-12-03 10:00:00 UTC);
        let marks: Vec<Mark> = (0..100)
            .map(|i| {
                Mark::new(
                    t0 + time::Duration::seconds(i),
                    "<script>alert(1)</script>",
                    Tone::Bad,
                )
            })
            .collect();
        let svg = timeline("t", "</svg><script>", &marks).into_string();
        assert!(!svg.contains("<script>"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), MAX_MARKS);
        assert!(svg.contains("and 60 later moments"), "{svg}");
        assert!(timeline("t", "x", &[])
            .into_string()
            .contains("nothing to draw"));
    }

    #[test]
    fn columns_leave_unsampled_buckets_blank_and_scale_to_the_largest() {
        let t0 = datetime!(2026-12-03 10:00:00 UTC);
        let series = [
            Series {
                name: "received".into(),
                color: "#0366d6",
                values: vec![None, Some(10.0), Some(40.0), Some(0.0)],
            },
            Series {
                name: "<b>processed</b>".into(),
                color: "#22863a",
                values: vec![None, Some(5.0), Some(f64::NAN)],
            },
        ];
        let svg = columns(
            "c",
            "per minute",
            "events",
            t0,
            time::Duration::minutes(1),
            &series,
        )
        .into_string();
        // Three positive finite values drawn; None, 0 and NaN are not.
        assert_eq!(svg.matches("<rect x=").count(), 3, "{svg}");
        assert!(svg.contains("max 40 events"), "{svg}");
        assert!(svg.contains(">10:00<") && svg.contains(">10:04<"), "{svg}");
        assert!(!svg.contains("<b>"), "{svg}");
        let too_many = Series {
            name: "x".into(),
            color: "#000000",
            values: vec![Some(1.0); MAX_COLUMNS + 500],
        };
        let svg = columns("c", "t", "u", t0, time::Duration::minutes(1), &[too_many]).into_string();
        assert_eq!(svg.matches("<rect x=").count(), MAX_COLUMNS);
    }
}
