//! `hookline reconcile PROVIDER --since DURATION`: compare what the provider's API says happened with what we
//! stored, and store what never arrived (see `hookline_gateways::reconcile` for how, and why it is safe).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Args;
use hookline_core::Config;

use crate::ops;

/// Arguments of `hookline reconcile`.
#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 everything matched or was repaired, 1 something needs attention \
(a dry run that found gaps, an item that could not be stored or compared), 2 usage error, 3 the database or \
the provider's API could not be reached.\n\nExamples:\n  hookline reconcile stripe --since 3d --dry-run\n  \
hookline reconcile mercadopago --since 24h --json"
)]
pub struct ReconcileArgs {
    /// The configured provider (its scheme must be stripe or mercadopago, with `api_base` set).
    pub provider: String,
    /// How far back to look (e.g. 24h, 3d), or an RFC 3339 time.
    #[arg(long, value_parser = ops::parse_instant)]
    pub since: Option<time::OffsetDateTime>,
    /// Report only; store nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// API requests per second at most (0 = unlimited).
    #[arg(long, default_value_t = 10)]
    pub rate: u32,
    /// Continue an interrupted run from its cursor.
    #[arg(long, conflicts_with_all = ["since", "dry_run"])]
    pub resume: Option<i64>,
    /// Who runs it (default: $SUDO_USER or $USER).
    #[arg(long)]
    pub operator: Option<String>,
}

/// Runs `hookline reconcile`.
pub async fn run(config: &Config, args: &ReconcileArgs) -> anyhow::Result<ExitCode> {
    let Some(provider) = config.providers.get(&args.provider) else {
        eprintln!(
            "error: no provider named {:?} in the configuration",
            args.provider
        );
        return Ok(ExitCode::from(2));
    };
    if let Err(why) = hookline_gateways::reconcile::supported(provider) {
        eprintln!("error: {why}");
        return Ok(ExitCode::from(2));
    }
    let since = match (args.since, args.resume) {
        (Some(s), _) => s,
        (None, Some(_)) => time::OffsetDateTime::UNIX_EPOCH, // the run's own window is kept in its audit row
        (None, None) => {
            eprintln!("error: --since is required (e.g. --since 24h)");
            return Ok(ExitCode::from(2));
        }
    };
    let pool = ops::pool(config).await?;
    let opts = hookline_gateways::reconcile::Options {
        since,
        until: time::OffsetDateTime::now_utc(),
        dry_run: args.dry_run,
        rate: args.rate,
        operator: ops::operator(args.operator.as_deref()),
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos} checked  {per_sec}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        pb
    });
    let progress = |n: u64| {
        if let Some(pb) = &bar {
            pb.inc(n);
        }
    };
    let report =
        hookline_gateways::reconcile::run(&pool, provider, &opts, args.resume, &progress).await?;
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "reconcile run {} ({}{}): {} checked, {} present, {} missing, {} mismatched, {} stored",
            report.run_id,
            report.provider,
            if report.dry_run { ", dry run" } else { "" },
            report.seen,
            report.present,
            report.missing,
            report.mismatched,
            report.stored
        );
        for a in &report.attention {
            println!("attention: {}", ops::terminal_safe(a));
        }
    }
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
