//! `hookline replay`: re-deliver stored events to the workers, safely.
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
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{ArgGroup, Args};
use hookline_bus::{EventMessage, Publisher};
use hookline_core::{consumers, events, Config};
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
hookline replay --dead --provider stripe --dry-run --reason 'check'\n  hookline replay --resume 17"
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
    /// Only these stored event ids (repeatable).
    #[arg(long = "id")]
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
    /// Who runs the replay (default: $SUDO_USER or $USER).
    #[arg(long)]
    pub operator: Option<String>,
}

/// Which events a run selects (stored as JSON in the audit row, so a run resumes with the same selection).
pub use hookline_core::events::Selection as Filter;

/// One selected event.
pub use hookline_core::events::SelectedEvent as Row;

fn message(r: &Row) -> EventMessage {
    EventMessage {
        id: r.id,
        provider: r.provider.clone(),
        provider_event_id: r.provider_event_id.clone(),
        event_type: r.event_type.clone(),
    }
}

/// Counts the selection after `cursor`, over every consumer.
pub async fn count(pool: &PgPool, f: &Filter, cursor: i64) -> anyhow::Result<i64> {
    events::count_selection(pool, f, consumers::ALL, cursor)
        .await
        .context("count the selection")
}

/// One page of the selection after `cursor`, in id order.
pub async fn page(pool: &PgPool, f: &Filter, cursor: i64, limit: u32) -> anyhow::Result<Vec<Row>> {
    events::select_page(pool, f, consumers::ALL, cursor, limit)
        .await
        .context("read a page of the selection")
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

/// The kind of an audited run: what `replay_runs.kind` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// `hookline replay`.
    Replay,
    /// `hookline dlq redrive`: a replay of the dead-lettered events.
    DlqRedrive,
}

impl RunKind {
    fn as_str(self) -> &'static str {
        match self {
            RunKind::Replay => "replay",
            RunKind::DlqRedrive => "dlq_redrive",
        }
    }
}

/// A run in progress: its audit row, selection, cursor and how many it re-delivered so far.
#[derive(Debug)]
pub struct Run {
    /// `replay_runs.id`.
    pub id: i64,
    kind: RunKind,
    filter: Filter,
    cursor: i64,
    published: i64,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every selected event was re-delivered and confirmed.
    Done,
    /// Ctrl-C / SIGTERM: resumable.
    Interrupted,
    /// RabbitMQ did not confirm this many: resumable.
    Unconfirmed(usize),
}

/// Opens an audited run of `kind` over `filter` (the audit row records who, why, what and how many).
pub async fn start(
    pool: &PgPool,
    kind: RunKind,
    filter: Filter,
    reason: &str,
    operator: Option<&str>,
) -> anyhow::Result<Run> {
    let selected = count(pool, &filter, 0).await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO replay_runs (kind, operator, reason, filter, selected)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(kind.as_str())
    .bind(ops::operator(operator))
    .bind(reason)
    .bind(sqlx::types::Json(&filter))
    .bind(selected)
    .fetch_one(pool)
    .await
    .context("write the audit row")?;
    println!(
        "{} run {id}: {selected} events selected ({reason})",
        kind.as_str()
    );
    Ok(Run {
        id,
        kind,
        filter,
        cursor: 0,
        published: 0,
    })
}

/// Re-opens an interrupted run (replay or redrive) at its cursor; `None` when it already finished.
pub async fn resume(pool: &PgPool, id: i64) -> anyhow::Result<Option<Run>> {
    let row: Option<SavedRun> = sqlx::query_as(
        "SELECT kind, filter, last_event_id, published, finished_at
         FROM replay_runs WHERE id = $1 AND kind IN ('replay', 'dlq_redrive') AND NOT dry_run",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    let Some((kind, filter, cursor, published, finished)) = row else {
        anyhow::bail!(UsageError(format!(
            "no replay or redrive run {id} to resume"
        )));
    };
    if finished.is_some() {
        println!("run {id} already finished ({published} events published)");
        return Ok(None);
    }
    println!("resuming {kind} run {id} after event {cursor} ({published} already re-delivered)");
    let kind = if kind == "dlq_redrive" {
        RunKind::DlqRedrive
    } else {
        RunKind::Replay
    };
    Ok(Some(Run {
        id,
        kind,
        filter: filter.0,
        cursor,
        published,
    }))
}

/// Re-delivers the rest of `run`'s selection, page by page in id order, at most `rate` events per second
/// (0 = unlimited). The cursor in the audit row advances only after RabbitMQ confirmed a page, so an
/// interruption re-sends at most one page (deduplicated by the workers). Returns how it ended and the ids it
/// re-delivered in this call.
pub async fn execute(
    config: &Config,
    pool: &PgPool,
    run: &mut Run,
    rate: u32,
    page_size: u32,
) -> anyhow::Result<(Outcome, Vec<i64>)> {
    let remaining = count(pool, &run.filter, run.cursor).await?;
    let topology = ops::topology(config);
    let publisher = Publisher::open(&config.amqp_urls, &topology, "hookline-replay").await?;
    let progress = progress_bar(remaining as u64);
    let interrupted = hookline_core::supervisor::shutdown_signal();
    let started = Instant::now();
    let mut sent = Vec::new();
    let chunk = if rate == 0 {
        page_size
    } else {
        rate.clamp(1, page_size)
    };
    let outcome = loop {
        if interrupted.is_cancelled() {
            break Outcome::Interrupted;
        }
        let rows = page(pool, &run.filter, run.cursor, chunk).await?;
        if rows.is_empty() {
            break Outcome::Done;
        }
        let msgs: Vec<EventMessage> = rows.iter().map(message).collect();
        let acked = publisher
            .publish(&topology, &msgs, config.relay.confirm_timeout)
            .await
            .context("publish to RabbitMQ")?
            .acked;
        if acked.len() != msgs.len() {
            break Outcome::Unconfirmed(msgs.len() - acked.len());
        }
        run.cursor = rows.last().map(|r| r.id).unwrap_or(run.cursor);
        run.published += msgs.len() as i64;
        sent.extend(acked);
        // The cursor only moves past events RabbitMQ confirmed: a crash here re-sends at most this page.
        sqlx::query(
            "UPDATE replay_runs SET last_event_id = $2, published = $3, updated_at = now() WHERE id = $1",
        )
        .bind(run.id)
        .bind(run.cursor)
        .bind(run.published)
        .execute(pool)
        .await
        .context("advance the run's cursor")?;
        if let Some(pb) = &progress {
            pb.inc(msgs.len() as u64);
        }
        if rate > 0 {
            let due = Duration::from_secs_f64(sent.len() as f64 / f64::from(rate));
            let ahead = due.saturating_sub(started.elapsed());
            tokio::select! {
                _ = tokio::time::sleep(ahead) => {}
                _ = interrupted.cancelled() => {}
            }
        }
    };
    publisher.close().await;
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if outcome == Outcome::Done {
        sqlx::query("UPDATE replay_runs SET finished_at = now(), updated_at = now() WHERE id = $1")
            .bind(run.id)
            .execute(pool)
            .await?;
    }
    Ok((outcome, sent))
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
            let filter = filter_from_args(args)?;
            let reason = args
                .reason
                .clone()
                .filter(|r| !r.trim().is_empty())
                .ok_or_else(|| UsageError("--reason is required: say why you replay".into()))?;
            if let Some(p) = &filter.provider {
                if !config.providers.contains_key(p) {
                    anyhow::bail!(UsageError(format!(
                        "--provider {p}: no such provider in the configuration"
                    )));
                }
            }
            if args.dry_run {
                let selected = count(&pool, &filter, 0).await?;
                return dry_run(&pool, &filter, selected).await;
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

/// A saved run: kind, filter, cursor, published count, finish time.
type SavedRun = (
    String,
    sqlx::types::Json<Filter>,
    i64,
    i64,
    Option<OffsetDateTime>,
);

async fn dry_run(pool: &PgPool, filter: &Filter, selected: i64) -> anyhow::Result<ExitCode> {
    println!("dry run: {selected} events would be re-delivered (nothing changed)");
    let sample = page(pool, filter, 0, 10).await?;
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
    Ok(ExitCode::SUCCESS)
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
