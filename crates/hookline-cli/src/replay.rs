//! `hookline replay`: re-deliver stored events to the workers, safely. The engine (selection, audit row,
//! confirmed pages, cursor) is [`hookline_ops::replay`], shared with `hookline dlq redrive` and the operator
//! console; this module parses the flags and prints.
//!
//! A replay RE-DELIVERS event references onto the events exchange. The worker's processed marker makes that
//! safe: an event whose effect was applied changes nothing, an event never applied is applied once. There is no
//! flag that re-applies an applied effect — that would be a new business operation, not a replay.
//!
//! Selections stream in pages ordered by event id (keyset pagination: memory stays flat whatever the size),
//! publishes are confirmed by RabbitMQ before the run's cursor advances, and every run is audited in
//! `replay_runs`. An interrupted run (Ctrl-C, SIGTERM, crash) resumes from its cursor with `--resume RUN`:
//! nothing is skipped; at most the last unconfirmed page is published twice, which the worker deduplicates.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{ArgGroup, Args};
use hookline_core::Config;
use hookline_ops::replay::{Resumed, Target};
use sqlx::PgPool;
use time::OffsetDateTime;

use crate::ops;

/// Arguments of `hookline replay`.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("state").args(["unprocessed", "dead", "all"]).multiple(false)))]
#[command(
    after_help = "A replay re-delivers: events already applied change nothing (the worker deduplicates), \
events never applied are applied once. No flag re-applies an applied effect.\n\n\
Examples:\n  hookline replay --unprocessed --since 2h --reason 'RabbitMQ outage INC-42'\n  \
hookline replay --dead --provider stripe --dry-run --reason 'check'\n  \
hookline replay --confirm TOKEN --reason 'check'   (the token the dry run printed)\n  hookline replay --resume 17"
)]
pub struct ReplayArgs {
    /// Only events of this configured provider.
    #[arg(long)]
    pub provider: Option<String>,
    /// Only events of this type (e.g. payment_intent.succeeded).
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// Only events received at or after this time (RFC 3339, or a duration ago such as 2h).
    #[arg(long, value_parser = ops::parse_instant)]
    pub since: Option<OffsetDateTime>,
    /// Only events received before this time (RFC 3339, or a duration ago).
    #[arg(long, value_parser = ops::parse_instant)]
    pub until: Option<OffsetDateTime>,
    /// Only these stored event ids: `--id 1 2` or `--id 1 --id 2`.
    #[arg(long = "id", num_args = 1..)]
    pub ids: Vec<i64>,
    /// Events without a processed marker (never applied, whatever the reason).
    #[arg(long)]
    pub unprocessed: bool,
    /// Events with an unresolved dead letter.
    #[arg(long)]
    pub dead: bool,
    /// Every matching event, processed or not (safe: applied ones change nothing).
    #[arg(long)]
    pub all: bool,
    /// Why you are replaying (required; recorded in the audit row).
    #[arg(long)]
    pub reason: Option<String>,
    /// Print the count and a sample; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Maximum events per second (0 = unlimited). Keeps a large replay from starving live traffic.
    #[arg(long, default_value_t = 500)]
    pub rate: u32,
    /// Events read per page.
    #[arg(long, default_value_t = 500)]
    pub page_size: u32,
    /// Continue an interrupted run from its cursor (its filter and reason are reused).
    #[arg(long, conflicts_with_all = ["provider", "event_type", "since", "until", "ids", "unprocessed", "dead", "all", "dry_run"])]
    pub resume: Option<i64>,
    /// Replay exactly what a dry run counted: the token it printed carries the selection (times resolved) and
    /// the count; the run is refused, and nothing replayed, if the selection no longer holds that many events.
    #[arg(long, value_name = "TOKEN", conflicts_with_all = ["provider", "event_type", "since", "until", "ids", "unprocessed", "dead", "all", "dry_run", "resume"])]
    pub confirm: Option<String>,
    /// Who runs the replay (default: $SUDO_USER or $USER).
    #[arg(long)]
    pub operator: Option<String>,
}

pub use hookline_ops::replay::{Filter, Outcome, Row, Run, RunKind};

/// Counts the selection after `cursor`, over every consumer.
pub async fn count(pool: &PgPool, f: &Filter, cursor: i64) -> anyhow::Result<i64> {
    hookline_ops::replay::count(pool, f, cursor).await
}

/// One page of the selection after `cursor`, in id order.
pub async fn page(pool: &PgPool, f: &Filter, cursor: i64, limit: u32) -> anyhow::Result<Vec<Row>> {
    hookline_ops::replay::page(pool, f, cursor, limit).await
}

fn filter_from_args(args: &ReplayArgs) -> anyhow::Result<Filter> {
    let state = match (args.unprocessed, args.dead, args.all) {
        (true, _, _) => "unprocessed",
        (_, true, _) => "dead",
        (_, _, true) => "all",
        _ => anyhow::bail!(UsageError(
            "choose which events: --unprocessed, --dead or --all".into()
        )),
    };
    Ok(Filter {
        provider: args.provider.clone(),
        event_type: args.event_type.clone(),
        since: args.since,
        until: args.until,
        ids: args.ids.clone(),
        state: state.to_string(),
    })
}

/// A usage error detected after parsing (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Runs `hookline replay`.
pub async fn run(config: &Config, args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    match run_inner(config, args).await {
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
        other => other,
    }
}

/// Opens an audited run of `kind` over `filter` and says so.
pub async fn start(
    pool: &PgPool,
    kind: RunKind,
    filter: Filter,
    reason: &str,
    operator: Option<&str>,
) -> anyhow::Result<Run> {
    let run =
        hookline_ops::replay::start(pool, kind, filter, reason, &ops::operator(operator)).await?;
    println!(
        "{} run {}: {} events selected ({reason})",
        kind.as_str(),
        run.id,
        run.selected
    );
    Ok(run)
}

/// Re-opens an interrupted run (replay or redrive) at its cursor; `None` when it already finished.
pub async fn resume(pool: &PgPool, id: i64) -> anyhow::Result<Option<Run>> {
    match hookline_ops::replay::resume(pool, id).await? {
        Resumed::NotFound => anyhow::bail!(UsageError(format!(
            "no replay or redrive run {id} to resume"
        ))),
        Resumed::Finished { published } => {
            println!("run {id} already finished ({published} events published)");
            Ok(None)
        }
        Resumed::Open(run) => {
            println!(
                "resuming {} run {id} after event {} ({} already re-delivered)",
                run.kind.as_str(),
                run.cursor,
                run.published
            );
            Ok(Some(run))
        }
    }
}

/// Where the CLI publishes: the configured broker and names, at `rate` events per second.
pub fn target(config: &Config, rate: u32, page_size: u32) -> anyhow::Result<Target> {
    Ok(Target {
        amqp_urls: config.amqp_urls.clone(),
        topology: ops::topology(config),
        confirm_timeout: hookline_bus::RelayConfig::from_config(config)?.confirm_timeout,
        rate,
        page_size,
    })
}

/// Re-delivers the rest of `run`'s selection ([`hookline_ops::replay::execute`]) with a progress bar on a
/// terminal; Ctrl-C / SIGTERM interrupt it resumably.
pub async fn execute(
    config: &Config,
    pool: &PgPool,
    run: &mut Run,
    rate: u32,
    page_size: u32,
) -> anyhow::Result<(Outcome, Vec<i64>)> {
    let remaining = count(pool, &run.filter, run.cursor).await?;
    let progress = progress_bar(remaining as u64);
    let interrupted = hookline_core::supervisor::shutdown_signal();
    let result = hookline_ops::replay::execute(
        pool,
        &target(config, rate, page_size)?,
        run,
        &interrupted,
        |n| {
            if let Some(pb) = &progress {
                pb.inc(n);
            }
        },
    )
    .await;
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    result
}

/// Prints how a run ended and returns the exit code (0 done, 1 interrupted, 3 unconfirmed).
pub fn report(run: &Run, outcome: Outcome) -> ExitCode {
    let kind = run.kind.as_str();
    let id = run.id;
    match outcome {
        Outcome::Done => {
            println!(
                "{kind} run {id} finished: {} events re-delivered",
                run.published
            );
            ExitCode::SUCCESS
        }
        Outcome::Interrupted => {
            println!(
                "{kind} run {id} interrupted after {} events; resume with: hookline replay --resume {id}",
                run.published
            );
            ExitCode::from(1)
        }
        Outcome::Unconfirmed(n) => {
            eprintln!(
                "{kind} run {id} stopped: RabbitMQ did not confirm {n} events (see the logs); \
                 resume with: hookline replay --resume {id}"
            );
            ExitCode::from(3)
        }
    }
}

async fn run_inner(config: &Config, args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    let mut run = match args.resume {
        Some(id) => match resume(&pool, id).await? {
            Some(run) => run,
            None => return Ok(ExitCode::SUCCESS),
        },
        None => {
            let reason = args
                .reason
                .clone()
                .filter(|r| !r.trim().is_empty())
                .ok_or_else(|| UsageError("--reason is required: say why you replay".into()))?;
            hookline_core::input::text("--reason", &reason, 500)
                .map_err(|e| UsageError(e.to_string()))?;
            if let Some(token) = &args.confirm {
                return run_confirmed(config, &pool, args, token, &reason).await;
            }
            let filter = filter_from_args(args)?;
            for (flag, value) in [
                ("--provider", &filter.provider),
                ("--type", &filter.event_type),
            ] {
                if let Some(v) = value {
                    hookline_core::input::text(flag, v, 200)
                        .map_err(|e| UsageError(e.to_string()))?;
                }
            }
            if let Some(p) = &filter.provider {
                if !config.providers.contains_key(p) {
                    anyhow::bail!(UsageError(format!(
                        "--provider {p}: no such provider in the configuration"
                    )));
                }
            }
            if args.dry_run {
                let selected = count(&pool, &filter, 0).await?;
                return dry_run(&pool, filter, selected, &reason).await;
            }
            start(
                &pool,
                RunKind::Replay,
                filter,
                &reason,
                args.operator.as_deref(),
            )
            .await?
        }
    };
    let (outcome, _) = execute(config, &pool, &mut run, args.rate, args.page_size).await?;
    Ok(report(&run, outcome))
}

/// `--confirm TOKEN`: the dry run's selection, started only if it still holds the counted number of events
/// (exit 4 and nothing replayed otherwise).
async fn run_confirmed(
    config: &Config,
    pool: &PgPool,
    args: &ReplayArgs,
    token: &str,
    reason: &str,
) -> anyhow::Result<ExitCode> {
    use hookline_ops::replay::{ConfirmError, Confirmation};
    let confirmation = Confirmation::parse(token).map_err(|e| UsageError(e.to_string()))?;
    if let Some(p) = &confirmation.filter.provider {
        if !config.providers.contains_key(p) {
            anyhow::bail!(UsageError(format!(
                "the confirmation's provider {p}: no such provider in the configuration"
            )));
        }
    }
    let operator = ops::operator(args.operator.as_deref());
    let mut run = match hookline_ops::replay::start_confirmed(
        pool,
        RunKind::Replay,
        &confirmation,
        reason,
        &operator,
    )
    .await
    {
        Ok(run) => run,
        Err(e @ ConfirmError::Changed { .. }) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(4));
        }
        Err(ConfirmError::Other(e)) => return Err(e),
        Err(e) => anyhow::bail!(UsageError(e.to_string())),
    };
    println!(
        "replay run {}: {} events selected, as the dry run counted ({reason})",
        run.id, run.selected
    );
    let (outcome, _) = execute(config, pool, &mut run, args.rate, args.page_size).await?;
    Ok(report(&run, outcome))
}

async fn dry_run(
    pool: &PgPool,
    filter: Filter,
    selected: i64,
    reason: &str,
) -> anyhow::Result<ExitCode> {
    println!("dry run: {selected} events would be re-delivered (nothing changed)");
    let sample = page(pool, &filter, 0, 10).await?;
    if !sample.is_empty() {
        println!(
            "{:>10}  {:<12} {:<36} {:<32} {:<25} state",
            "id", "provider", "provider_event_id", "type", "received_at"
        );
        for r in sample {
            println!(
                "{:>10}  {:<12} {:<36} {:<32} {:<25} {}",
                r.id,
                r.provider,
                ops::terminal_safe(&r.provider_event_id),
                ops::terminal_safe(r.event_type.as_deref().unwrap_or("-")),
                r.received_at
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default(),
                r.state
            );
        }
    }
    let token = hookline_ops::replay::Confirmation {
        filter,
        count: selected,
    }
    .token();
    println!(
        "to replay exactly these {selected} events (refused if the selection changed meanwhile):\n  \
         hookline replay --confirm {token} --reason {}",
        shell_quote(reason)
    );
    Ok(ExitCode::SUCCESS)
}

/// `s` quoted for a POSIX shell (single quotes; terminal-safe).
fn shell_quote(s: &str) -> String {
    format!("'{}'", ops::terminal_safe(s).replace('\'', "'\\''"))
}

fn progress_bar(total: u64) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} events  {per_sec}  eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(pb)
}
