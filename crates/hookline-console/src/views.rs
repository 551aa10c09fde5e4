//! Page layout, the stylesheet and script, and small formatting helpers. Every value is interpolated through
//! maud's `(…)`, which HTML-escapes it: event ids, bodies, headers and reasons come from outside and may be
//! hostile (a stored `<script>` must render as text).

use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use maud::{html, Markup, DOCTYPE};
use time::OffsetDateTime;

use super::auth::Session;

const STYLESHEET: &str = r#"
body { font-family: system-ui, sans-serif; margin: 0; color: #1b1f23; background: #f6f8fa; font-size: 14px; }
header { background: #24292e; color: #fff; padding: 8px 16px; display: flex; gap: 16px; align-items: center; }
header a { color: #fff; text-decoration: none; }
header .who { margin-left: auto; }
header form { display: inline; }
main { padding: 16px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 24px; }
table { border-collapse: collapse; background: #fff; margin: 8px 0; }
th, td { border: 1px solid #d1d5da; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef1f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #fff; border: 1px solid #d1d5da; padding: 8px; overflow: auto; max-height: 480px; white-space: pre-wrap; word-break: break-all; }
.attention { background: #fff5b1; border: 1px solid #d9c000; padding: 8px; margin: 8px 0; }
.ok { color: #22863a; } .bad { color: #cb2431; } .muted { color: #6a737d; } .stale { color: #735c0f; }
.card { background: #fff; border: 1px solid #d1d5da; padding: 12px; margin: 8px 0; }
form.filters label { margin-right: 8px; }
input[type=text], input[type=password], select, textarea { font: inherit; padding: 2px 4px; }
textarea { width: 40em; height: 3em; }
.flash { background: #dcffe4; border: 1px solid #34d058; padding: 8px; }
"#;

const SCRIPT: &str = r#"
// Live refresh of the overview's figures: the server renders the fragment (escaped); this only swaps it in.
document.addEventListener('DOMContentLoaded', function () {
  var figures = document.getElementById('figures');
  if (!figures) { return; }
  setInterval(function () {
    fetch('/overview/figures', { credentials: 'same-origin', cache: 'no-store' })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (t) { if (t !== null) { figures.innerHTML = t; } })
      .catch(function () {});
  }, 5000);
});
"#;

/// `GET /console.css`.
pub async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(STYLESHEET)
}

/// `GET /console.js`.
pub async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(SCRIPT)
}

/// A whole page: navigation (when logged in), then `body`.
pub fn page(title: &str, session: Option<&Session>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · hookline console" }
                link rel="stylesheet" href="/console.css";
                script src="/console.js" defer {}
            }
            body {
                header {
                    strong { "hookline" }
                    @if let Some(s) = session {
                        a href="/" { "Overview" }
                        a href="/events" { "Events" }
                        a href="/dead-letters" { "Dead letters" }
                        a href="/payments" { "Payments" }
                        a href="/intents" { "Outbound" }
                        a href="/billing" { "Billing" }
                        a href="/deliveries" { "Deliveries" }
                        a href="/audit" { "Audit" }
                        span.who {
                            (s.operator) " "
                            form method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(s.csrf);
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The page of an error.
pub fn error_page(status: StatusCode, message: &str) -> Markup {
    page(
        status.canonical_reason().unwrap_or("Error"),
        None,
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
            p { (message) }
            p { a href="/" { "Back to the console" } }
        },
    )
}

/// An instant to the second, UTC, RFC 3339.
pub fn ts(t: OffsetDateTime) -> String {
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// An optional instant.
pub fn ots(t: Option<OffsetDateTime>) -> String {
    t.map(ts).unwrap_or_else(|| "—".into())
}

/// A raw body for display: pretty-printed when it is JSON, as text when it is UTF-8, else hex.
pub fn body_text(body: &[u8]) -> (String, &'static str) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Ok(pretty) = serde_json::to_string_pretty(&v) {
            return (pretty, "JSON, pretty-printed");
        }
    }
    match std::str::from_utf8(body) {
        Ok(text) => (text.to_string(), "text"),
        Err(_) => (hex::encode(body), "not UTF-8: hex"),
    }
}

/// Minor units with two decimals (every currency hookline handles today has two).
pub fn money(amount: i64) -> String {
    let sign = if amount < 0 { "-" } else { "" };
    let a = amount.unsigned_abs();
    format!("{sign}{}.{:02}", a / 100, a % 100)
}

/// Percentiles of a Prometheus histogram, estimated from its cumulative buckets summed over every label set
/// ([`histogram_buckets`]): the upper bound of the bucket the rank falls in. `None` when there is no
/// observation.
pub fn histogram_percentiles(exposition: &str, name: &str, quantiles: &[f64]) -> Option<Vec<f64>> {
    let buckets = histogram_buckets(exposition, name);
    quantiles
        .iter()
        .map(|q| bucket_bound(&buckets, *q))
        .collect()
}

/// The upper bound (`le`, `+Inf` included) of the bucket that holds quantile `q` of the cumulative histogram `h`
/// (what Prometheus's `histogram_quantile` would interpolate inside); `None` without observations. The one rule
/// for the overview's percentiles, over the edge's whole life here and over one minute in [`crate::history`].
pub fn bucket_bound(h: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = h.last().map(|(_, n)| *n).filter(|n| *n > 0.0)?;
    let rank = q * total;
    Some(
        h.iter()
            .find(|(_, n)| *n >= rank)
            .map_or(f64::INFINITY, |(le, _)| *le),
    )
}

/// The cumulative buckets `(le, count)` of a Prometheus histogram, summed over every label set
/// (`name_bucket{…,le="x"} n` lines of the exposition text), sorted by `le`; lines that do not parse are
/// skipped. The overview's history keeps them to read each minute's latency from two of them.
pub fn histogram_buckets(exposition: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in exposition.lines().filter(|l| l.starts_with(&prefix)) {
        let Some(le_start) = line.find("le=\"") else {
            continue;
        };
        let rest = &line[le_start + 4..];
        let Some(le_end) = rest.find('"') else {
            continue;
        };
        let le = match &rest[..le_end] {
            "+Inf" => f64::INFINITY,
            v => match v.parse::<f64>() {
                Ok(x) => x,
                Err(_) => continue,
            },
        };
        let Some(count) = line
            .rsplit(' ')
            .next()
            .and_then(|c| c.trim().parse::<f64>().ok())
        else {
            continue;
        };
        match buckets.iter_mut().find(|(b, _)| *b == le) {
            Some((_, n)) => *n += count,
            None => buckets.push((le, count)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped() {
        let hostile = "<script>alert('x')</script>\"&";
        let out = html! { td { (hostile) } a href=(hostile) { "x" } }.into_string();
        assert!(!out.contains("<script>"), "{out}");
        assert!(out.contains("&lt;script&gt;"), "{out}");
        assert!(!out.contains("href=\"<"), "{out}");
    }

    #[test]
    fn bodies_are_pretty_printed_or_shown_safely() {
        assert_eq!(body_text(br#"{"a":1}"#).1, "JSON, pretty-printed");
        assert!(body_text(br#"{"a":1}"#).0.contains("\"a\": 1"));
        assert_eq!(body_text(b"plain").0, "plain");
        assert_eq!(body_text(&[0xff, 0x00]).0, "ff00");
    }

    #[test]
    fn percentiles_come_from_cumulative_buckets_over_every_label_set() {
        let text = "\
x_seconds_bucket{provider=\"a\",le=\"0.001\"} 50
x_seconds_bucket{provider=\"a\",le=\"0.01\"} 90
x_seconds_bucket{provider=\"a\",le=\"+Inf\"} 100
x_seconds_bucket{provider=\"b\",le=\"0.001\"} 50
x_seconds_bucket{provider=\"b\",le=\"0.01\"} 100
x_seconds_bucket{provider=\"b\",le=\"+Inf\"} 100
x_seconds_sum 1
";
        let p =
            histogram_percentiles(text, "x_seconds", &[0.5, 0.95, 0.999]).expect("observations");
        assert_eq!(p[0], 0.001);
        assert_eq!(p[1], 0.01);
        assert!(p[2].is_infinite());
        assert!(histogram_percentiles("", "x_seconds", &[0.5]).is_none());
    }

    #[test]
    fn money_has_two_decimals() {
        assert_eq!(money(12345), "123.45");
        assert_eq!(money(-5), "-0.05");
    }
}
