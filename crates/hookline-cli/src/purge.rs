//! `hookline purge`: delete old raw events and their processed markers (see [`hookline_ops::retention`]).

use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hookline_core::Config;
use hookline_ops::retention::{self, format_window, PurgeOptions, PurgeReport};
use time::OffsetDateTime;

use crate::ops;

/// Arguments of `hookline purge`.
#[derive(Args, Debug)]
#[command(after_help = "\
Only events that are done are deleted: published, processed (a marker exists) and with no unresolved dead \
letter. Unpublished, unprocessed or dead-lettered events are kept whatever their age. The ledger, payments, \
refunds, disputes, subscription charges and pending fetches are never touched.

Every run, dry runs included, is recorded in the purge_runs table.

Exit codes: 0 done, 2 refused (window inside the retention floor without --force, or bad arguments), \
3 database unreachable or another failure.

Examples:
  hookline purge --older-than 90d --dry-run
  hookline purge --older-than 90d --operator alice")]
pub struct PurgeArgs {
    /// Delete events received longer ago than this (e.g. 90d, 12w, 2160h). Refused when shorter than
    /// retention.floor_days unless --force
    #[arg(long, value_name = "DURATION", value_parser = ops::parse_duration)]
    older_than: Duration,
    /// Only report what would be deleted (counts, oldest and newest received_at); change nothing
    #[arg(long)]
    dry_run: bool,
    /// Allow a window shorter than retention.floor_days (events that young may still be redelivered)
    #[arg(long)]
    force: bool,
    /// Events deleted per transaction [default: retention.batch_size, 1000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    batch_size: Option<u32>,
    /// Who runs the purge, for the audit row [default: $SUDO_USER, then $USER]
    #[arg(long, value_name = "NAME")]
    operator: Option<String>,
}

/// Runs the purge.
pub async fn run(config: &Config, args: &PurgeArgs) -> anyhow::Result<ExitCode> {
    let retention = hookline_ops::config::RetentionConfig::from_config(config)?;
    let floor = retention.floor;
    // Checked before touching the database: a refused run changes nothing and needs no connection.
    if let Err(why) = retention::check_window(args.older_than, floor, args.force) {
        eprintln!("error: {why}");
        return Ok(ExitCode::from(2));
    }
    if args.older_than < floor {
        eprintln!(
            "warning: --force: purging inside the retention floor of {} (retention.floor_days)",
            format_window(floor)
        );
    }
    let opts = PurgeOptions {
        older_than: args.older_than,
        floor,
        dry_run: args.dry_run,
        batch_size: args.batch_size.unwrap_or(retention.batch_size),
        operator: ops::operator(args.operator.as_deref()),
        forced: args.force,
    };
    let pool = ops::pool(config).await?;
    let progress = std::io::stderr().is_terminal() && !opts.dry_run;
    let report = retention::purge_with(&pool, &opts, |r| {
        if progress {
            eprint!("\r{} events deleted ({} batches)…", r.events, r.batches);
        }
        ControlFlow::Continue(())
    })
    .await;
    if progress {
        eprintln!();
    }
    let report = report?;
    print!("{}", summary(&opts, &report));
    Ok(ExitCode::SUCCESS)
}

/// The human summary printed on success.
fn summary(opts: &PurgeOptions, r: &PurgeReport) -> String {
    let window = format!(
        "received before {} (older than {})",
        instant(r.cutoff),
        format_window(opts.older_than)
    );
    let mut out = if r.dry_run {
        format!(
            "dry run: would delete {} events and {} processed markers {window}; nothing was changed\n",
            r.events, r.markers
        )
    } else {
        format!(
            "deleted {} events and {} processed markers {window}, in {} batches of at most {}\n",
            r.events, r.markers, r.batches, opts.batch_size
        )
    };
    if let (Some(oldest), Some(newest)) = (r.oldest, r.newest) {
        out.push_str(&format!(
            "  {} events received from {} to {}\n",
            if r.dry_run { "eligible" } else { "deleted" },
            instant(oldest),
            instant(newest)
        ));
    }
    let k = r.kept;
    if k.total() > 0 {
        out.push_str(&format!(
            "  kept {} older events that are not done: {} unpublished, {} unprocessed, {} with an unresolved \
             dead letter\n",
            k.total(),
            k.unpublished,
            k.unprocessed,
            k.dead_lettered
        ));
    }
    out.push_str("  the ledger, payments, refunds and disputes are never purged\n");
    out.push_str(&format!(
        "  audit: purge_runs id {} (operator {}{}{})\n",
        r.run_id,
        opts.operator,
        if opts.forced { ", forced" } else { "" },
        if r.dry_run { ", dry run" } else { "" }
    ));
    out
}

/// An instant to the second, RFC 3339 in UTC.
fn instant(t: OffsetDateTime) -> String {
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}
