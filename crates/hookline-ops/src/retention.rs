//! Retention: deleting old raw events and their processed markers, shared by `hookline purge` and the worker's
//! periodic purge.
//!
//! Only events that are *done* are eligible, whatever their age:
//!
//! - published (no longer in `event_outbox`): the relay will never need the row again;
//! - processed: at least one `processed_events` marker exists for the event — or DISCARDED: an operator gave up
//!   on it with `hookline dlq discard` (a `dead_letters` row resolved as `discarded`), so it will never be
//!   processed and keeping it forever would only make `purge` report it as "unprocessed";
//! - not dead-lettered: no `dead_letters` row with `resolved_at IS NULL` (an operator may still redrive it).
//!
//! Nothing else is touched: payments, refunds, disputes, subscription charges, pending fetches and the ledger
//! keep their `event_id` as a plain number (no foreign key) and are history. Resolved dead letters are kept too.
//!
//! Deletion runs in bounded batches, each its own short transaction that locks its rows with
//! `FOR UPDATE SKIP LOCKED` (two purgers never wait on each other), deletes the events and their markers, and
//! adds the counts to the run's audit row in `purge_runs`, so the audit row matches what was committed even if
//! the process dies mid-run (its `finished_at` then stays NULL).
//!
//! The cutoff is fixed once per run, in the database's clock (the clock that set `received_at`):
//! `purge_runs.started_at - older_than_secs`.

use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::time::Duration;

use anyhow::Context;
use sqlx::{PgConnection, PgPool};
use time::OffsetDateTime;

/// Largest accepted window (about 10 000 years); beyond it the cutoff would leave PostgreSQL's timestamp range.
const MAX_WINDOW_SECS: u64 = 10_000 * 366 * 86_400;

/// Metric names.
pub mod metric {
    /// Counter: raw events deleted by purges.
    pub const EVENTS_PURGED: &str = "hookline_retention_events_purged_total";
    /// Counter: processed markers deleted by purges.
    pub const MARKERS_PURGED: &str = "hookline_retention_markers_purged_total";
}

/// What to purge and how.
#[derive(Debug, Clone)]
pub struct PurgeOptions {
    /// Events received longer ago than this are candidates.
    pub older_than: Duration,
    /// The configured floor (`retention.floor`): a shorter `older_than` is refused unless `forced`.
    pub floor: Duration,
    /// Count and report only; nothing is deleted (the run is still audited).
    pub dry_run: bool,
    /// Events deleted per transaction (at least 1).
    pub batch_size: u32,
    /// Who asked, for the audit row.
    pub operator: String,
    /// The operator passed `--force`: a window shorter than the floor is allowed. Recorded as given.
    pub forced: bool,
}

/// Old events (received before the cutoff) that were kept because they are not done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kept {
    /// With an unresolved dead letter.
    pub dead_lettered: u64,
    /// Not published yet (and not dead-lettered).
    pub unpublished: u64,
    /// Published but without any processed marker (and not dead-lettered).
    pub unprocessed: u64,
}

impl Kept {
    /// All kept old events.
    pub fn total(&self) -> u64 {
        self.dead_lettered + self.unpublished + self.unprocessed
    }
}

/// What a purge did (or, for a dry run, would do).
#[derive(Debug, Clone)]
pub struct PurgeReport {
    /// `purge_runs.id` of the audit row.
    pub run_id: i64,
    /// True for a dry run: the counts below are what a real run would delete now.
    pub dry_run: bool,
    /// Events received before this instant were candidates.
    pub cutoff: OffsetDateTime,
    /// Events deleted (would be deleted, for a dry run).
    pub events: u64,
    /// Processed markers deleted (would be deleted, for a dry run).
    pub markers: u64,
    /// Transactions that deleted something (0 for a dry run).
    pub batches: u32,
    /// `received_at` of the oldest event deleted (or eligible).
    pub oldest: Option<OffsetDateTime>,
    /// `received_at` of the newest event deleted (or eligible).
    pub newest: Option<OffsetDateTime>,
    /// Old events kept because they are not done, counted after the run.
    pub kept: Kept,
    /// The run stopped early at the caller's request (between batches; every committed batch is counted).
    pub interrupted: bool,
}

/// Refuses a window shorter than the retention floor unless `force`. Pure; the message names the setting.
pub fn check_window(older_than: Duration, floor: Duration, force: bool) -> Result<(), String> {
    if older_than >= floor || force {
        return Ok(());
    }
    Err(format!(
        "refusing to purge: the window {} is shorter than the retention floor of {} (retention.floor_days = {}); \
         events that young may still be redelivered or needed for a replay. Use a window of at least {}, or \
         --force if you are sure",
        format_window(older_than),
        format_window(floor),
        floor_days(floor),
        format_window(floor),
    ))
}

/// The floor as `retention.floor_days` would spell it: `30`, or `0.5` for a floor that is not whole days.
fn floor_days(floor: Duration) -> String {
    let secs = floor.as_secs();
    if secs % 86_400 == 0 && floor.subsec_nanos() == 0 {
        (secs / 86_400).to_string()
    } else {
        format!("{}", floor.as_secs_f64() / 86_400.0)
    }
}

/// A window in compact human units: `30d`, `7d 12h`, `90s` → `1m 30s`, `0s`. Sub-second parts are dropped.
pub fn format_window(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return if d.is_zero() {
            "0s".into()
        } else {
            format!("{}ms", d.as_millis())
        };
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        let n = secs / size;
        secs %= size;
        if n > 0 {
            if !out.is_empty() {
                out.push(' ');
            }
            let _ = write!(out, "{n}{unit}");
        }
    }
    out
}

/// Purges (or, with `dry_run`, counts) eligible events older than `opts.older_than`. See the module docs.
pub async fn purge(pool: &PgPool, opts: &PurgeOptions) -> anyhow::Result<PurgeReport> {
    purge_with(pool, opts, |_| ControlFlow::Continue(())).await
}

/// Like [`purge`], calling `after_batch` with the running totals after each committed batch; returning
/// `ControlFlow::Break` stops the run there (the report says `interrupted`).
pub async fn purge_with<F>(
    pool: &PgPool,
    opts: &PurgeOptions,
    mut after_batch: F,
) -> anyhow::Result<PurgeReport>
where
    F: FnMut(&PurgeReport) -> ControlFlow<()> + Send,
{
    check_window(opts.older_than, opts.floor, opts.forced).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        opts.batch_size > 0,
        "the purge batch size must be at least 1"
    );
    let secs = opts.older_than.as_secs();
    anyhow::ensure!(
        secs <= MAX_WINDOW_SECS,
        "the purge window {} is out of range",
        format_window(opts.older_than)
    );
    let secs = secs as i64;

    // The audit row first: its started_at fixes the cutoff for the whole run.
    let (run_id, cutoff): (i64, OffsetDateTime) = sqlx::query_as(
        "INSERT INTO purge_runs (operator, older_than_secs, forced, dry_run)
         VALUES ($1, $2, $3, $4)
         RETURNING id, started_at - make_interval(secs => $2::float8)",
    )
    .bind(&opts.operator)
    .bind(secs)
    .bind(opts.forced)
    .bind(opts.dry_run)
    .fetch_one(pool)
    .await
    .context("cannot record the purge run (purge_runs)")?;

    let mut report = PurgeReport {
        run_id,
        dry_run: opts.dry_run,
        cutoff,
        events: 0,
        markers: 0,
        batches: 0,
        oldest: None,
        newest: None,
        kept: Kept::default(),
        interrupted: false,
    };

    if opts.dry_run {
        let mut conn = pool.acquire().await.context("acquire a connection")?;
        let consumers = consumers(&mut conn).await?;
        let (events, markers, oldest, newest): (i64, i64, Option<OffsetDateTime>, Option<OffsetDateTime>) =
            sqlx::query_as(&format!(
                "WITH eligible AS (SELECT e.id, e.received_at FROM webhook_events e WHERE {ELIGIBLE})
                 SELECT (SELECT count(*) FROM eligible),
                        (SELECT count(*) FROM processed_events p JOIN eligible x ON p.event_id = x.id
                          WHERE p.consumer = ANY($2)),
                        (SELECT min(received_at) FROM eligible),
                        (SELECT max(received_at) FROM eligible)"
            ))
            .bind(cutoff)
            .bind(&consumers)
            .fetch_one(&mut *conn)
            .await
            .context("count eligible events")?;
        report.events = events as u64;
        report.markers = markers as u64;
        report.oldest = oldest;
        report.newest = newest;
        sqlx::query(
            "UPDATE purge_runs SET events_deleted = $2, markers_deleted = $3 WHERE id = $1",
        )
        .bind(run_id)
        .bind(events)
        .bind(markers)
        .execute(&mut *conn)
        .await
        .context("record the dry run's counts (purge_runs)")?;
    } else {
        loop {
            let (events, markers, oldest, newest) =
                delete_batch(pool, run_id, cutoff, opts.batch_size).await?;
            if events == 0 {
                break;
            }
            report.batches += 1;
            report.events += events;
            report.markers += markers;
            report.oldest = min_opt(report.oldest, oldest);
            report.newest = max_opt(report.newest, newest);
            metrics::counter!(metric::EVENTS_PURGED).increment(events);
            metrics::counter!(metric::MARKERS_PURGED).increment(markers);
            tracing::debug!(
                run_id,
                batch = report.batches,
                events,
                markers,
                total = report.events,
                "purge batch committed"
            );
            if after_batch(&report).is_break() {
                report.interrupted = true;
                break;
            }
        }
    }

    report.kept = kept(pool, cutoff).await?;
    sqlx::query("UPDATE purge_runs SET finished_at = now() WHERE id = $1")
        .bind(run_id)
        .execute(pool)
        .await
        .context("record the end of the purge run (purge_runs)")?;
    Ok(report)
}

/// The eligibility predicate on `webhook_events e`: `$1` the cutoff, `$2` the consumers having markers.
///
/// Markers are looked up as `consumer = ANY($2) AND event_id = …` so the lookup uses the primary key
/// `(consumer, event_id)` (PostgreSQL before 18 cannot skip-scan on `event_id` alone).
const ELIGIBLE: &str = "e.received_at < $1
    AND NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = e.id)
    AND (EXISTS (SELECT 1 FROM processed_events p WHERE p.consumer = ANY($2) AND p.event_id = e.id)
         OR EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id AND d.resolution = 'discarded'))
    AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id AND d.resolved_at IS NULL)";

/// Every consumer that has at least one processed marker, by a loose index scan of the primary key (a few
/// index probes, however large the table).
async fn consumers(conn: &mut PgConnection) -> anyhow::Result<Vec<String>> {
    sqlx::query_scalar(
        "WITH RECURSIVE c(consumer) AS (
             SELECT min(consumer) FROM processed_events
             UNION ALL
             SELECT (SELECT min(p.consumer) FROM processed_events p WHERE p.consumer > c.consumer)
             FROM c WHERE c.consumer IS NOT NULL
         )
         SELECT consumer FROM c WHERE consumer IS NOT NULL",
    )
    .fetch_all(conn)
    .await
    .context("list the consumers of processed markers")
}

type BatchResult = (u64, u64, Option<OffsetDateTime>, Option<OffsetDateTime>);

/// One short transaction: lock up to `limit` eligible events (skipping rows another purger holds), delete them
/// and their markers, add the counts to the audit row.
async fn delete_batch(
    pool: &PgPool,
    run_id: i64,
    cutoff: OffsetDateTime,
    limit: u32,
) -> anyhow::Result<BatchResult> {
    let mut tx = pool.begin().await.context("begin purge batch")?;
    // No consumer with markers yet still leaves the discarded events to purge.
    let consumers = consumers(&mut tx).await?;
    let (events, markers, oldest, newest): (
        i64,
        i64,
        Option<OffsetDateTime>,
        Option<OffsetDateTime>,
    ) = sqlx::query_as(&format!(
        "WITH batch AS (
                 SELECT e.id FROM webhook_events e
                 WHERE {ELIGIBLE}
                 ORDER BY e.received_at, e.id
                 LIMIT $3
                 FOR UPDATE OF e SKIP LOCKED
             ),
             markers AS (
                 DELETE FROM processed_events p USING batch b
                 WHERE p.consumer = ANY($2) AND p.event_id = b.id
                 RETURNING 1
             ),
             events AS (
                 DELETE FROM webhook_events e USING batch b WHERE e.id = b.id
                 RETURNING e.received_at
             )
             SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM markers),
                    (SELECT min(received_at) FROM events), (SELECT max(received_at) FROM events)"
    ))
    .bind(cutoff)
    .bind(&consumers)
    .bind(i64::from(limit))
    .fetch_one(&mut *tx)
    .await
    .context("delete a purge batch")?;
    if events == 0 {
        tx.rollback().await.ok();
        return Ok((0, 0, None, None));
    }
    sqlx::query(
        "UPDATE purge_runs SET events_deleted = events_deleted + $2,
                               markers_deleted = markers_deleted + $3
         WHERE id = $1",
    )
    .bind(run_id)
    .bind(events)
    .bind(markers)
    .execute(&mut *tx)
    .await
    .context("record the batch in purge_runs")?;
    tx.commit().await.context("commit purge batch")?;
    Ok((events as u64, markers as u64, oldest, newest))
}

/// Old events that are not done, by the first reason that keeps them.
async fn kept(pool: &PgPool, cutoff: OffsetDateTime) -> anyhow::Result<Kept> {
    let mut conn = pool.acquire().await.context("acquire a connection")?;
    let consumers = consumers(&mut conn).await?;
    let (dead_lettered, unpublished, unprocessed): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE dl),
                count(*) FILTER (WHERE NOT dl AND NOT published),
                count(*) FILTER (WHERE NOT dl AND published AND NOT marked AND NOT discarded)
         FROM (SELECT NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = e.id) AS published,
                      EXISTS (SELECT 1 FROM dead_letters d
                              WHERE d.event_id = e.id AND d.resolved_at IS NULL) AS dl,
                      EXISTS (SELECT 1 FROM processed_events p
                              WHERE p.consumer = ANY($2) AND p.event_id = e.id) AS marked,
                      EXISTS (SELECT 1 FROM dead_letters d
                              WHERE d.event_id = e.id AND d.resolution = 'discarded') AS discarded
               FROM webhook_events e
               WHERE e.received_at < $1) old",
    )
    .bind(cutoff)
    .bind(&consumers)
    .fetch_one(&mut *conn)
    .await
    .context("count old events kept")?;
    Ok(Kept {
        dead_lettered: dead_lettered as u64,
        unpublished: unpublished as u64,
        unprocessed: unprocessed as u64,
    })
}

fn min_opt(a: Option<OffsetDateTime>, b: Option<OffsetDateTime>) -> Option<OffsetDateTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<OffsetDateTime>, b: Option<OffsetDateTime>) -> Option<OffsetDateTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// One audited purge, as the console lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PurgeRow {
    /// `purge_runs.id`.
    pub id: i64,
    /// Who.
    pub operator: String,
    /// The window, seconds.
    pub older_than_secs: i64,
    /// Inside the retention floor.
    pub forced: bool,
    /// Changed nothing.
    pub dry_run: bool,
    /// Events deleted.
    pub events_deleted: i64,
    /// Markers deleted.
    pub markers_deleted: i64,
    /// Start.
    pub started_at: time::OffsetDateTime,
    /// End.
    pub finished_at: Option<time::OffsetDateTime>,
}

/// The most recent purges, newest first.
pub async fn recent_purges<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    limit: i64,
) -> Result<Vec<PurgeRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, operator, older_than_secs, forced, dry_run, events_deleted, markers_deleted,
                started_at, finished_at
         FROM purge_runs ORDER BY id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn window_inside_the_floor_is_refused_and_names_the_setting() {
        let e = check_window(7 * DAY, 30 * DAY, false).expect_err("7d < 30d must be refused");
        assert!(e.contains("retention.floor_days = 30"), "{e}");
        assert!(e.contains("7d"), "{e}");
        assert!(e.contains("--force"), "{e}");
    }

    #[test]
    fn window_at_or_above_the_floor_is_allowed() {
        assert_eq!(check_window(30 * DAY, 30 * DAY, false), Ok(()));
        assert_eq!(check_window(40 * DAY, 30 * DAY, false), Ok(()));
    }

    #[test]
    fn one_second_short_of_the_floor_is_refused() {
        assert!(check_window(30 * DAY - Duration::from_secs(1), 30 * DAY, false).is_err());
    }

    #[test]
    fn force_allows_any_window() {
        assert_eq!(check_window(Duration::ZERO, 30 * DAY, true), Ok(()));
        assert_eq!(check_window(7 * DAY, 30 * DAY, true), Ok(()));
    }

    #[test]
    fn zero_floor_allows_everything() {
        assert_eq!(check_window(Duration::ZERO, Duration::ZERO, false), Ok(()));
    }

    #[test]
    fn fractional_floor_is_shown_as_days() {
        let e = check_window(Duration::from_secs(3_600), DAY / 2, false).unwrap_err();
        assert!(e.contains("retention.floor_days = 0.5"), "{e}");
    }

    #[test]
    fn windows_are_formatted_compactly() {
        assert_eq!(format_window(30 * DAY), "30d");
        assert_eq!(
            format_window(7 * DAY + Duration::from_secs(12 * 3600)),
            "7d 12h"
        );
        assert_eq!(format_window(Duration::from_secs(90)), "1m 30s");
        assert_eq!(format_window(Duration::ZERO), "0s");
        assert_eq!(format_window(Duration::from_millis(250)), "250ms");
    }
}
