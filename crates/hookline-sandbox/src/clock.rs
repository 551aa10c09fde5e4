//! Wall-clock helpers, the date formats the providers use, and [`SandboxClock`]: the sandbox's own clock, which
//! the control API can move forward so that a test sees a day pass (an idempotency key expire) in no time.

use std::time::Instant;

use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Date, Duration, OffsetDateTime, UtcOffset};

/// Furthest the sandbox clock can be moved ahead of the real one: a year and a month, more than any key window
/// or expiry a test needs, and far from any `Instant` overflow.
pub(crate) const MAX_CLOCK_OFFSET: std::time::Duration =
    std::time::Duration::from_secs(400 * 86_400);

pub(crate) fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// The sandbox's clock: the real one plus an offset that only grows (`POST /_sandbox/clock`). It decides when
/// idempotency keys expire (every provider) and dates Pagar.me's objects; deliveries and retries keep real time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SandboxClock {
    offset: std::time::Duration,
}

impl SandboxClock {
    /// How far ahead of the real clock the sandbox is.
    pub(crate) fn offset(&self) -> std::time::Duration {
        self.offset
    }

    /// Now, as a monotonic instant (what key windows are measured with).
    pub(crate) fn instant(&self) -> Instant {
        Instant::now() + self.offset
    }

    /// Now, as a date.
    pub(crate) fn now(&self) -> OffsetDateTime {
        now() + self.offset
    }

    /// Moves the clock `by` ahead; refused (nothing changed) past [`MAX_CLOCK_OFFSET`] in total.
    pub(crate) fn advance(&mut self, by: std::time::Duration) -> Result<(), String> {
        match self.offset.checked_add(by) {
            Some(offset) if offset <= MAX_CLOCK_OFFSET => {
                self.offset = offset;
                Ok(())
            }
            _ => Err(format!(
                "the sandbox clock can be at most {} days ahead (it is {} s ahead)",
                MAX_CLOCK_OFFSET.as_secs() / 86_400,
                self.offset.as_secs()
            )),
        }
    }
}

/// Pagar.me's API dates: UTC, seconds, `Z` (`2024-01-15T10:20:30Z`).
pub(crate) fn pagarme_date(t: OffsetDateTime) -> String {
    t.to_offset(UtcOffset::UTC)
        .format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
        ))
        .unwrap_or_default()
}

pub(crate) fn unix_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// Mercado Pago's API dates: milliseconds and the `-04:00` offset its servers answer in
/// (`2024-01-15T10:20:30.123-04:00`).
pub(crate) fn mp_date(t: OffsetDateTime) -> String {
    let offset = UtcOffset::from_hms(-4, 0, 0).unwrap_or(UtcOffset::UTC);
    t.to_offset(offset)
        .format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3][offset_hour sign:mandatory]:[offset_minute]"
        ))
        .unwrap_or_default()
}

/// A Mercado Pago search date: `NOW`, `NOW-{n}DAYS|MONTHS|HOURS|MINUTES` (singular too), an ISO 8601 date
/// (`2024-08-23`, midnight UTC) or an RFC 3339 date-time (`2024-08-23T10:00:00.000-04:00`, `…Z`).
pub(crate) fn parse_mp_search_date(text: &str, now: OffsetDateTime) -> Option<OffsetDateTime> {
    let text = text.trim();
    let upper = text.to_ascii_uppercase();
    if upper == "NOW" {
        return Some(now);
    }
    if let Some(rest) = upper.strip_prefix("NOW-") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let n: i64 = digits.parse().ok()?;
        let unit = &rest[digits.len()..];
        let back = match unit {
            "DAY" | "DAYS" => Duration::days(n),
            "MONTH" | "MONTHS" => Duration::days(30 * n),
            "HOUR" | "HOURS" => Duration::hours(n),
            "MINUTE" | "MINUTES" => Duration::minutes(n),
            _ => return None,
        };
        return now.checked_sub(back);
    }
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Some(t);
    }
    // `2024-08-23T10:00:00.000-0400` (no colon in the offset), as MP documents `yyyy-MM-dd'T'HH:mm:ss.SSSZ`.
    if let Ok(t) = OffsetDateTime::parse(
        text,
        format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond][offset_hour sign:mandatory][offset_minute]"
        ),
    ) {
        return Some(t);
    }
    Date::parse(text, format_description!("[year]-[month]-[day]"))
        .ok()
        .map(|d| d.midnight().assume_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mp_dates_round_trip_and_relative_dates_parse() {
        let t = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let text = mp_date(t);
        assert_eq!(text, "2023-11-14T18:13:20.000-04:00");
        assert_eq!(parse_mp_search_date(&text, t), Some(t));
        assert_eq!(
            parse_mp_search_date("NOW-2DAYS", t),
            Some(t - Duration::days(2))
        );
        assert_eq!(parse_mp_search_date("now", t), Some(t));
        assert!(parse_mp_search_date("2023-11-14", t).is_some());
        assert!(parse_mp_search_date("2023-11-14T18:13:20.000-0400", t).is_some());
        assert!(parse_mp_search_date("yesterday", t).is_none());
    }

    #[test]
    fn the_sandbox_clock_only_moves_ahead_within_its_bound() {
        let mut clock = SandboxClock::default();
        let before = clock.now();
        clock
            .advance(std::time::Duration::from_secs(86_400))
            .unwrap();
        assert!(clock.now() - before >= Duration::days(1));
        assert!(clock.advance(MAX_CLOCK_OFFSET).is_err());
        assert_eq!(clock.offset().as_secs(), 86_400);
        let t = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        assert_eq!(pagarme_date(t), "2023-11-14T22:13:20Z");
    }
}
