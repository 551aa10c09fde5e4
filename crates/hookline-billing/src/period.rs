//! Billing periods: which cycle (`YYYY-MM`) a subscription is charged for, and when that cycle's period starts.
//! Pure functions, the clock passed in.
//!
//! A subscription's periods start on its anchor's day of the month (yearly: the anchor's month and day), at the
//! anchor's time of day, in UTC; a day the month does not have is the month's last day (an anchor on the 31st
//! starts February's period on the 28th or 29th, and March's on the 31st again). A cycle is named by the month
//! its period starts in, for both intervals: a yearly subscription anchored in March has the cycles `2026-03`,
//! `2027-03`, ….

use time::{Date, Month, OffsetDateTime, UtcOffset};

/// How often a subscription is charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Interval {
    /// Every month.
    Month,
    /// Every year.
    Year,
}

impl Interval {
    /// `month` or `year` (the column's values).
    pub fn as_str(self) -> &'static str {
        match self {
            Interval::Month => "month",
            Interval::Year => "year",
        }
    }
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Interval {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "month" | "monthly" => Ok(Interval::Month),
            "year" | "yearly" => Ok(Interval::Year),
            other => Err(format!(
                "unknown interval {:?}: month or year",
                other.chars().take(40).collect::<String>()
            )),
        }
    }
}

/// A billing cycle: the year and month its period starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cycle {
    /// Year (1–9999).
    pub year: i32,
    /// Month.
    pub month: Month,
}

impl Cycle {
    /// Parses `YYYY-MM` (month 01–12).
    pub fn parse(cycle: &str) -> Option<Cycle> {
        let b = cycle.as_bytes();
        if b.len() != 7 || b[4] != b'-' || !b[..4].iter().chain(&b[5..]).all(u8::is_ascii_digit) {
            return None;
        }
        let year: i32 = cycle[..4].parse().ok()?;
        let month: u8 = cycle[5..].parse().ok()?;
        Some(Cycle {
            year,
            month: Month::try_from(month).ok()?,
        })
    }

    /// The cycle `at` falls in (by calendar month, UTC).
    pub fn of(at: OffsetDateTime) -> Cycle {
        let at = at.to_offset(UtcOffset::UTC);
        Cycle {
            year: at.year(),
            month: at.month(),
        }
    }

    /// The cycle one interval later.
    pub fn next(self, interval: Interval) -> Cycle {
        match interval {
            Interval::Year => Cycle {
                year: self.year + 1,
                month: self.month,
            },
            Interval::Month if self.month == Month::December => Cycle {
                year: self.year + 1,
                month: Month::January,
            },
            Interval::Month => Cycle {
                year: self.year,
                month: self.month.next(),
            },
        }
    }

    /// The cycle one interval earlier.
    pub fn previous(self, interval: Interval) -> Cycle {
        match interval {
            Interval::Year => Cycle {
                year: self.year - 1,
                month: self.month,
            },
            Interval::Month if self.month == Month::January => Cycle {
                year: self.year - 1,
                month: Month::December,
            },
            Interval::Month => Cycle {
                year: self.year,
                month: self.month.previous(),
            },
        }
    }
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}", self.year, u8::from(self.month))
    }
}

/// Whether `cycle` is a billing cycle (`YYYY-MM`, month 01–12).
pub fn valid_cycle(cycle: &str) -> bool {
    Cycle::parse(cycle).is_some()
}

/// When the period of `cycle` starts for a subscription anchored at `anchor` with `interval`: `None` when the
/// cycle is not one of its cycles (a yearly subscription in another month) or starts before the anchor's own
/// period (the subscription did not exist yet).
pub fn period_start(
    anchor: OffsetDateTime,
    interval: Interval,
    cycle: Cycle,
) -> Option<OffsetDateTime> {
    let anchor = anchor.to_offset(UtcOffset::UTC);
    if interval == Interval::Year && cycle.month != anchor.month() {
        return None;
    }
    let day = anchor.day().min(cycle.month.length(cycle.year));
    let date = Date::from_calendar_date(cycle.year, cycle.month, day).ok()?;
    let start = date.with_time(anchor.time()).assume_utc();
    (Cycle::of(start) >= Cycle::of(anchor)).then_some(start)
}

/// When the period of `cycle` ends (the next cycle's start); `None` as for [`period_start`].
pub fn period_end(
    anchor: OffsetDateTime,
    interval: Interval,
    cycle: Cycle,
) -> Option<OffsetDateTime> {
    period_start(anchor, interval, cycle)?;
    period_start(anchor, interval, cycle.next(interval))
}

/// The cycle whose period is running at `now` (the latest that has started), `None` before the anchor.
pub fn current_cycle(
    anchor: OffsetDateTime,
    interval: Interval,
    now: OffsetDateTime,
) -> Option<Cycle> {
    let anchor_utc = anchor.to_offset(UtcOffset::UTC);
    let mut cycle = match interval {
        Interval::Month => Cycle::of(now),
        Interval::Year => Cycle {
            year: now.to_offset(UtcOffset::UTC).year(),
            month: anchor_utc.month(),
        },
    };
    // At most two steps back: the candidate's period starts in its own month, so either it has started or
    // the previous one has (or the anchor is later than `now`).
    for _ in 0..2 {
        match period_start(anchor, interval, cycle) {
            Some(start) if start <= now => return Some(cycle),
            Some(_) => cycle = cycle.previous(interval),
            None if cycle > Cycle::of(anchor_utc) => cycle = cycle.previous(interval),
            None => return None,
        }
    }
    None
}

/// The first cycle a subscription created at `created_at` is charged for: the period that contains its creation,
/// or the one that starts at its anchor if that is later — never a period that ended before it existed.
pub fn first_cycle(
    anchor: OffsetDateTime,
    interval: Interval,
    created_at: OffsetDateTime,
) -> Cycle {
    if anchor >= created_at {
        return Cycle::of(anchor);
    }
    current_cycle(anchor, interval, created_at).unwrap_or_else(|| Cycle::of(anchor))
}

/// Whether `cycle`'s period ended before the subscription was created (`created_at`): never charged.
pub fn ended_before(
    anchor: OffsetDateTime,
    interval: Interval,
    cycle: Cycle,
    created_at: OffsetDateTime,
) -> bool {
    cycle < first_cycle(anchor, interval, created_at)
}

/// Which cycle the workers' scheduler bills next for a subscription whose first undecided cycle is `pointer`,
/// at `now`: the pointer, moved forward past what may not be charged by itself — periods that ended before the
/// subscription existed, and periods older than the previous one (the cycle rule's window: older ones only by
/// the operator's `billing run --cycle … --allow-cycle …`). [`Scheduled::Due`] when that cycle's period has
/// started, else [`Scheduled::Later`] with the cycle and when it starts.
pub fn scheduled(
    anchor: OffsetDateTime,
    interval: Interval,
    created_at: OffsetDateTime,
    pointer: Cycle,
    now: OffsetDateTime,
) -> Scheduled {
    let first = first_cycle(anchor, interval, created_at);
    let mut cycle = pointer.max(first);
    if let Some(current) = current_cycle(anchor, interval, now) {
        cycle = cycle.max(current.previous(interval));
    }
    // A cycle that is not the subscription's (a yearly pointer moved to another month by hand) steps to the
    // next one that is: at most one interval of months.
    for _ in 0..12 {
        if let Some(start) = period_start(anchor, interval, cycle) {
            return if start <= now {
                Scheduled::Due(cycle)
            } else {
                Scheduled::Later(cycle, start)
            };
        }
        cycle = cycle.next(Interval::Month);
    }
    Scheduled::Later(
        first,
        period_start(anchor, interval, first).unwrap_or(anchor),
    )
}

/// What [`scheduled`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduled {
    /// This cycle's period has started: bill it.
    Due(Cycle),
    /// The next cycle, and when its period starts.
    Later(Cycle, OffsetDateTime),
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn c(s: &str) -> Cycle {
        Cycle::parse(s).unwrap()
    }

    #[test]
    fn cycles_parse_print_and_step() {
        for ok in ["2026-01", "2026-09", "2026-10", "2026-12", "0001-05"] {
            assert!(valid_cycle(ok), "{ok}");
            assert_eq!(c(ok).to_string(), ok);
        }
        for bad in [
            "2026-00",
            "2026-13",
            "2026-1",
            "26-01",
            "2026/01",
            "2026-01-01",
            "",
            "abcd-01",
            "+026-01",
        ] {
            assert!(!valid_cycle(bad), "{bad}");
        }
        assert_eq!(c("2026-12").next(Interval::Month), c("2027-01"));
        assert_eq!(c("2027-01").previous(Interval::Month), c("2026-12"));
        assert_eq!(c("2026-03").next(Interval::Year), c("2027-03"));
    }

    #[test]
    fn periods_start_on_the_anchor_day_clamped_to_the_month() {
        let anchor = datetime!(2026-01-31 09:30 UTC);
        assert_eq!(
            period_start(anchor, Interval::Month, c("2026-02")),
            Some(datetime!(2026-02-28 09:30 UTC))
        );
        assert_eq!(
            period_start(anchor, Interval::Month, c("2028-02")),
            Some(datetime!(2028-02-29 09:30 UTC))
        );
        assert_eq!(
            period_start(anchor, Interval::Month, c("2026-03")),
            Some(datetime!(2026-03-31 09:30 UTC))
        );
        // Before the subscription existed: not its cycle.
        assert_eq!(period_start(anchor, Interval::Month, c("2025-12")), None);
        assert_eq!(
            period_end(anchor, Interval::Month, c("2026-01")),
            Some(datetime!(2026-02-28 09:30 UTC))
        );
        // Yearly: only the anchor's month.
        let yearly = datetime!(2024-02-29 00:00 UTC);
        assert_eq!(period_start(yearly, Interval::Year, c("2025-03")), None);
        assert_eq!(
            period_start(yearly, Interval::Year, c("2025-02")),
            Some(datetime!(2025-02-28 00:00 UTC))
        );
        // An anchor given in another offset counts in UTC.
        let offset = datetime!(2026-03-01 01:00 +03:00);
        assert_eq!(
            period_start(offset, Interval::Month, c("2026-04")),
            Some(datetime!(2026-04-28 22:00 UTC))
        );
    }

    #[test]
    fn the_scheduler_starts_at_creation_and_catches_up_within_the_window() {
        let m = Interval::Month;
        let anchor = datetime!(2026-09-10 08:00 UTC);
        // Created in November with a September anchor: November's period (10 Nov – 10 Dec) contains the
        // creation, September's and October's ended before it existed.
        let created = datetime!(2026-11-20 00:00 UTC);
        assert_eq!(first_cycle(anchor, m, created), c("2026-11"));
        assert!(ended_before(anchor, m, c("2026-10"), created));
        assert!(!ended_before(anchor, m, c("2026-11"), created));
        let now = datetime!(2026-11-21 00:00 UTC);
        assert_eq!(
            scheduled(anchor, m, created, c("2026-09"), now),
            Scheduled::Due(c("2026-11"))
        );
        // After November was decided: December is later, from its start.
        assert_eq!(
            scheduled(anchor, m, created, c("2026-12"), now),
            Scheduled::Later(c("2026-12"), datetime!(2026-12-10 08:00 UTC))
        );
        // Down from December to February: January (the previous period) first, then February; December is
        // outside the window.
        let feb = datetime!(2027-02-11 00:00 UTC);
        assert_eq!(
            scheduled(anchor, m, created, c("2026-12"), feb),
            Scheduled::Due(c("2027-01"))
        );
        assert_eq!(
            scheduled(anchor, m, created, c("2027-02"), feb),
            Scheduled::Due(c("2027-02"))
        );
        // An anchor later than the creation: its own period first, not before it starts.
        let later = datetime!(2026-12-15 00:00 UTC);
        assert_eq!(first_cycle(later, m, created), c("2026-12"));
        assert_eq!(
            scheduled(later, m, created, c("2026-12"), now),
            Scheduled::Later(c("2026-12"), later)
        );
        // Yearly: a pointer on a month that is not its cycle steps to the anchor's month.
        let y = Interval::Year;
        assert_eq!(
            scheduled(
                anchor,
                y,
                anchor,
                c("2027-01"),
                datetime!(2027-09-10 09:00 UTC)
            ),
            Scheduled::Due(c("2027-09"))
        );
    }

    #[test]
    fn the_current_cycle_is_the_latest_started() {
        let anchor = datetime!(2026-10-15 12:00 UTC);
        let m = Interval::Month;
        assert_eq!(
            current_cycle(anchor, m, datetime!(2026-10-01 00:00 UTC)),
            None
        );
        assert_eq!(
            current_cycle(anchor, m, datetime!(2026-10-15 12:00 UTC)),
            Some(c("2026-10"))
        );
        assert_eq!(
            current_cycle(anchor, m, datetime!(2026-12-03 13:00 UTC)),
            Some(c("2026-11"))
        );
        assert_eq!(
            current_cycle(anchor, m, datetime!(2026-12-15 12:00 UTC)),
            Some(c("2026-12"))
        );
        assert_eq!(
            current_cycle(anchor, m, datetime!(2027-01-01 00:00 UTC)),
            Some(c("2026-12"))
        );
        let y = Interval::Year;
        assert_eq!(
            current_cycle(anchor, y, datetime!(2027-03-01 00:00 UTC)),
            Some(c("2026-10"))
        );
        assert_eq!(
            current_cycle(anchor, y, datetime!(2027-10-15 12:00 UTC)),
            Some(c("2027-10"))
        );
        assert_eq!(
            current_cycle(anchor, y, datetime!(2026-10-15 11:59 UTC)),
            None
        );
    }
}
