//! `hookline dlq`: inspect, redrive and discard dead letters.
//!
//! The reason and attempt count of each dead letter live in PostgreSQL (`hookline_core::dead_letters`), the
//! message itself in the dead-letter queue (`hookline_bus::dead_letters`). A redrive IS a replay of the
//! dead-lettered selection (`hookline_ops::replay::start` + `redrive`: same selection, same audit table, same
//! resumable cursor, `hookline replay --resume RUN` continues it); the worker resolves each dead letter in the
//! transaction that finally applies it, and the redriven copies are removed from the DLQ. Every consumer of
//! `hookline_core::consumers::ALL` is covered. The redrive itself is [`hookline_ops::replay::redrive`], shared
//! with the operator console.

use std::collections::HashSet;
use std::process::ExitCode;

use anyhow::Context;
use clap::{ArgGroup, Args, Subcommand};
use hookline_core::dead_letters::{self, DeadLetter};
use hookline_core::{consumers, events, Config};
use time::OffsetDateTime;

use crate::ops;
use crate::replay::{self, RunKind, UsageError};

/// Dead-letter commands.
#[derive(Subcommand, Debug)]
pub enum DlqCommand {
    /// List dead letters: reason, attempts, first/last failure, provider, type.
    List {
        /// Include resolved dead letters (applied after a redrive).
        #[arg(long)]
        all: bool,
        /// Output JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one dead letter: the raw payload and the failure reason.
    Show {
        /// The stored event id (first column of `dlq list`).
        id: i64,
    },
    /// Re-deliver dead-lettered events after the cause is fixed (each is applied once).
    Redrive(RedriveArgs),
    /// Give up on dead letters that can never apply (hostile or corrupt rows): resolved as discarded, never
    /// applied, audited; their copies are removed from the dead-letter queue.
    Discard(DiscardArgs),
}

/// Arguments of `hookline dlq discard`.
#[derive(Args, Debug)]
pub struct DiscardArgs {
    /// The event ids to discard, named one by one on purpose: `--id 1 2` or `--id 1 --id 2`.
    #[arg(long = "id", required = true, num_args = 1..)]
    pub ids: Vec<i64>,
    /// Why (required; recorded in the audit row).
    #[arg(long)]
    pub reason: String,
    /// Who runs it (default: $SUDO_USER or $USER).
    #[arg(long)]
    pub operator: Option<String>,
}

/// Arguments of `hookline dlq redrive`.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("which").args(["ids", "provider", "event_type", "all"]).multiple(true).required(true)))]
pub struct RedriveArgs {
    /// Only these event ids: `--id 1 2` or `--id 1 --id 2`.
    #[arg(long = "id", num_args = 1..)]
    pub ids: Vec<i64>,
    /// Only this provider's dead letters.
    #[arg(long)]
    pub provider: Option<String>,
    /// Only this event type.
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// Every unresolved dead letter.
    #[arg(long)]
    pub all: bool,
    /// Why (required; recorded in the audit row).
    #[arg(long)]
    pub reason: String,
    /// Who runs it (default: $SUDO_USER or $USER).
    #[arg(long)]
    pub operator: Option<String>,
    /// Maximum events per second (0 = unlimited).
    #[arg(long, default_value_t = 500)]
    pub rate: u32,
}

fn ts(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Runs a dead-letter command.
pub async fn run(config: &Config, cmd: &DlqCommand) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    if !matches!(cmd, DlqCommand::Show { .. }) {
        // Record a reason for any DLQ message that has none (delivery limit reached through crashes), so the
        // table below is the whole picture.
        let topology = ops::topology(config);
        for consumer in consumers::ALL {
            match hookline_bus::dead_letters::reconcile(
                &pool,
                &config.amqp_urls,
                &topology,
                consumer,
                100_000,
            )
            .await
            {
                Ok(r) if r.recorded > 0 => eprintln!(
                    "note: {} dead-lettered message(s) had no recorded reason; recorded now",
                    r.recorded
                ),
                Ok(_) => {}
                Err(e) => eprintln!("warning: cannot inspect the dead-letter queue: {e:#}"),
            }
        }
    }
    match cmd {
        DlqCommand::List { all, json } => list(&pool, *all, *json).await,
        DlqCommand::Show { id } => show(&pool, *id).await,
        DlqCommand::Redrive(args) => redrive(config, &pool, args).await,
        DlqCommand::Discard(args) => discard(config, &pool, args).await,
    }
}

async fn list(pool: &sqlx::PgPool, all: bool, json: bool) -> anyhow::Result<ExitCode> {
    let rows = dead_letters::list(pool, consumers::ALL, all)
        .await
        .context("read dead letters")?;
    if json {
        for r in &rows {
            println!(
                "{}",
                serde_json::json!({
                    "consumer": r.consumer, "event_id": r.event_id, "provider": r.provider,
                    "type": r.event_type, "reason": r.reason, "attempts": r.attempts,
                    "first_failed_at": ts(r.first_failed_at), "last_failed_at": ts(r.last_failed_at),
                    "resolved_at": r.resolved_at.map(ts), "resolution": r.resolution,
                })
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>10}  {:<10} {:<12} {:<28} {:>8}  {:<20} {:<20} reason",
        "event_id", "consumer", "provider", "type", "attempts", "first_failed", "last_failed"
    );
    for r in &rows {
        let mut reason = ops::terminal_safe(&r.reason).replace('\n', " / ");
        if reason.chars().count() > 80 {
            reason = reason.chars().take(77).chain("...".chars()).collect();
        }
        let resolved = match (&r.resolved_at, r.resolution.as_deref()) {
            (None, _) => String::new(),
            (Some(_), Some(how)) => format!("[{how}] "),
            (Some(_), None) => "[resolved] ".into(),
        };
        println!(
            "{:>10}  {:<10} {:<12} {:<28} {:>8}  {:<20} {:<20} {resolved}{reason}",
            r.event_id,
            r.consumer,
            r.provider.as_deref().unwrap_or("(purged)"),
            ops::terminal_safe(r.event_type.as_deref().unwrap_or("-")),
            r.attempts,
            ts(r.first_failed_at).chars().take(19).collect::<String>(),
            ts(r.last_failed_at).chars().take(19).collect::<String>(),
        );
    }
    println!("{} dead letter(s)", rows.len());
    Ok(ExitCode::SUCCESS)
}

fn print_dead_letter(d: &DeadLetter) {
    println!("consumer:      {}", d.consumer);
    println!("attempts:      {}", d.attempts);
    println!("first failed:  {}", ts(d.first_failed_at));
    println!("last failed:   {}", ts(d.last_failed_at));
    println!(
        "resolved:      {}",
        match (d.resolved_at, d.resolution.as_deref()) {
            (None, _) => "no".to_string(),
            (Some(t), how) => format!("{} ({})", ts(t), how.unwrap_or("resolved")),
        }
    );
    println!("error chain:");
    // Stored one cause per line (older rows: one line).
    for (i, part) in ops::terminal_safe(&d.reason).lines().enumerate() {
        println!("  {}{part}", if i == 0 { "" } else { "caused by: " });
    }
}

async fn show(pool: &sqlx::PgPool, id: i64) -> anyhow::Result<ExitCode> {
    let dead = dead_letters::of_event(pool, consumers::ALL, id).await?;
    let Some(first) = dead.first() else {
        eprintln!("error: no dead letter for event {id}");
        return Ok(ExitCode::from(1));
    };
    println!("event_id:      {id}");
    println!(
        "provider:      {}",
        first.provider.as_deref().unwrap_or("(raw event purged)")
    );
    println!(
        "type:          {}",
        ops::terminal_safe(first.event_type.as_deref().unwrap_or("-"))
    );
    for d in &dead {
        print_dead_letter(d);
    }
    if let Some(raw) = events::get(pool, id).await? {
        println!(
            "provider_event_id: {}",
            ops::terminal_safe(&raw.provider_event_id)
        );
        println!("received_at:   {}", ts(raw.received_at));
        if !raw.query.is_empty() {
            println!("query:         {}", ops::terminal_safe(&raw.query));
        }
        println!("headers:");
        for h in raw.headers.as_array().into_iter().flatten() {
            println!(
                "  {}: {}",
                ops::terminal_safe(h[0].as_str().unwrap_or("")),
                ops::terminal_safe(h[1].as_str().unwrap_or(""))
            );
        }
        println!("body ({} bytes):", raw.body.len());
        match std::str::from_utf8(&raw.body) {
            Ok(text) => println!("{}", ops::terminal_safe(text)),
            Err(_) => println!("(not UTF-8) {}", hex::encode(&raw.body)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A redrive is a replay of the dead-lettered selection, audited as `dlq_redrive`, resumable with
/// `hookline replay --resume RUN`; the copies it re-delivered are then removed from the DLQ.
async fn redrive(
    config: &Config,
    pool: &sqlx::PgPool,
    args: &RedriveArgs,
) -> anyhow::Result<ExitCode> {
    if args.reason.trim().is_empty() {
        eprintln!("error: {}", UsageError("--reason must say why".into()));
        return Ok(ExitCode::from(2));
    }
    let filter = hookline_ops::replay::redrive_filter(
        args.ids.clone(),
        args.provider.clone(),
        args.event_type.clone(),
    );
    let mut run = replay::start(
        pool,
        RunKind::DlqRedrive,
        filter,
        &args.reason,
        args.operator.as_deref(),
    )
    .await?;
    let interrupted = hookline_core::supervisor::shutdown_signal();
    let done = hookline_ops::replay::redrive(
        pool,
        &replay::target(config, args.rate, 500)?,
        &mut run,
        &interrupted,
        |_| {},
    )
    .await?;
    let Some(removed) = done.removed else {
        println!("no unresolved dead letter matches");
        return Ok(ExitCode::SUCCESS);
    };
    println!(
        "{removed} redriven copies removed from {}",
        ops::topology(config).dead_letter_queue
    );
    let outcome = done.outcome;
    Ok(replay::report(&run, outcome))
}

async fn discard(
    config: &Config,
    pool: &sqlx::PgPool,
    args: &DiscardArgs,
) -> anyhow::Result<ExitCode> {
    if args.reason.trim().is_empty() {
        eprintln!("error: {}", UsageError("--reason must say why".into()));
        return Ok(ExitCode::from(2));
    }
    let filter = serde_json::json!({ "ids": args.ids });
    let mut tx = pool.begin().await.context("begin")?;
    let discarded = dead_letters::discard(&mut *tx, consumers::ALL, &args.ids)
        .await
        .context("resolve the dead letters as discarded")?;
    let last = discarded.iter().copied().max().unwrap_or(0);
    let run_id = hookline_core::audit::insert_discard(
        &mut *tx,
        &ops::operator(args.operator.as_deref()),
        &args.reason,
        &filter,
        discarded.len() as i64,
        last,
    )
    .await
    .context("write the audit row")?;
    tx.commit().await.context("commit the discard")?;
    let topology = ops::topology(config);
    let removed = match hookline_bus::dead_letters::remove(
        &config.amqp_urls,
        &topology,
        &discarded.iter().copied().collect::<HashSet<i64>>(),
    )
    .await
    {
        Ok(n) => n,
        Err(e) => {
            eprintln!("warning: cannot remove the copies from the dead-letter queue: {e:#}");
            0
        }
    };
    let missing: Vec<i64> = args
        .ids
        .iter()
        .copied()
        .filter(|id| !discarded.contains(id))
        .collect();
    println!(
        "discard run {run_id}: {} dead letter(s) discarded; {removed} copies removed from {}",
        discarded.len(),
        topology.dead_letter_queue
    );
    if missing.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("no unresolved dead letter for event(s) {missing:?}");
        Ok(ExitCode::from(1))
    }
}
