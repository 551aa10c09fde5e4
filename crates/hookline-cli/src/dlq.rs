//! `hookline dlq`: inspect and redrive dead letters.
//!
//! The reason and attempt count of each dead letter live in PostgreSQL (`dead_letters`), the message itself in
//! the dead-letter queue. A redrive re-delivers the events (audited like a replay); the worker resolves each dead
//! letter in the transaction that finally applies it, and the redriven copies are removed from the DLQ.

use std::collections::HashSet;
use std::process::ExitCode;

use anyhow::Context;
use clap::{ArgGroup, Args, Subcommand};
use hookline_bus::{EventMessage, Publisher};
use hookline_core::Config;
use time::OffsetDateTime;

use crate::ops;
use crate::replay::UsageError;

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
    /// The event ids to discard (repeatable; named one by one on purpose).
    #[arg(long = "id", required = true)]
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
    /// Only these event ids (repeatable).
    #[arg(long = "id")]
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
}

#[derive(Debug, sqlx::FromRow)]
struct DeadRow {
    event_id: i64,
    provider: Option<String>,
    event_type: Option<String>,
    reason: String,
    attempts: i32,
    first_failed_at: OffsetDateTime,
    last_failed_at: OffsetDateTime,
    resolved_at: Option<OffsetDateTime>,
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
        match hookline_worker::dlq::reconcile(
            &pool,
            &config.amqp_url,
            &topology,
            "payments",
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
    match cmd {
        DlqCommand::List { all, json } => {
            let rows: Vec<DeadRow> = sqlx::query_as(
                "SELECT d.event_id, e.provider, e.event_type, d.reason, d.attempts, d.first_failed_at,
                        d.last_failed_at, d.resolved_at
                 FROM dead_letters d LEFT JOIN webhook_events e ON e.id = d.event_id
                 WHERE d.consumer = 'payments' AND ($1 OR d.resolved_at IS NULL)
                 ORDER BY d.first_failed_at, d.event_id",
            )
            .bind(*all)
            .fetch_all(&pool)
            .await
            .context("read dead letters")?;
            if *json {
                for r in &rows {
                    println!(
                        "{}",
                        serde_json::json!({
                            "event_id": r.event_id, "provider": r.provider, "type": r.event_type,
                            "reason": r.reason, "attempts": r.attempts,
                            "first_failed_at": ts(r.first_failed_at), "last_failed_at": ts(r.last_failed_at),
                            "resolved_at": r.resolved_at.map(ts),
                        })
                    );
                }
            } else {
                println!(
                    "{:>10}  {:<12} {:<28} {:>8}  {:<20} {:<20} reason",
                    "event_id", "provider", "type", "attempts", "first_failed", "last_failed"
                );
                for r in &rows {
                    let mut reason = ops::terminal_safe(&r.reason).replace('\n', " ");
                    if reason.chars().count() > 80 {
                        reason = reason.chars().take(77).chain("...".chars()).collect();
                    }
                    println!(
                        "{:>10}  {:<12} {:<28} {:>8}  {:<20} {:<20} {}{}",
                        r.event_id,
                        r.provider.as_deref().unwrap_or("(purged)"),
                        ops::terminal_safe(r.event_type.as_deref().unwrap_or("-")),
                        r.attempts,
                        ts(r.first_failed_at).chars().take(19).collect::<String>(),
                        ts(r.last_failed_at).chars().take(19).collect::<String>(),
                        if r.resolved_at.is_some() {
                            "[resolved] "
                        } else {
                            ""
                        },
                        reason
                    );
                }
                println!("{} dead letter(s)", rows.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        DlqCommand::Show { id } => show(&pool, *id).await,
        DlqCommand::Redrive(args) => redrive(config, &pool, args).await,
        DlqCommand::Discard(args) => discard(config, &pool, args).await,
    }
}

async fn show(pool: &sqlx::PgPool, id: i64) -> anyhow::Result<ExitCode> {
    let dead: Option<DeadRow> = sqlx::query_as(
        "SELECT d.event_id, e.provider, e.event_type, d.reason, d.attempts, d.first_failed_at,
                d.last_failed_at, d.resolved_at
         FROM dead_letters d LEFT JOIN webhook_events e ON e.id = d.event_id
         WHERE d.consumer = 'payments' AND d.event_id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    let Some(d) = dead else {
        eprintln!("error: no dead letter for event {id}");
        return Ok(ExitCode::from(1));
    };
    println!("event_id:      {}", d.event_id);
    println!(
        "provider:      {}",
        d.provider.as_deref().unwrap_or("(raw event purged)")
    );
    println!(
        "type:          {}",
        ops::terminal_safe(d.event_type.as_deref().unwrap_or("-"))
    );
    println!("attempts:      {}", d.attempts);
    println!("first failed:  {}", ts(d.first_failed_at));
    println!("last failed:   {}", ts(d.last_failed_at));
    println!(
        "resolved:      {}",
        d.resolved_at.map(ts).unwrap_or_else(|| "no".into())
    );
    println!("error chain:");
    for (i, part) in ops::terminal_safe(&d.reason).split(": ").enumerate() {
        println!("  {}{part}", if i == 0 { "" } else { "caused by: " });
    }
    let raw: Option<(String, Vec<u8>, serde_json::Value, String, OffsetDateTime)> = sqlx::query_as(
        "SELECT provider_event_id, body, headers, query, received_at FROM webhook_events WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    if let Some((provider_event_id, body, headers, query, received_at)) = raw {
        println!(
            "provider_event_id: {}",
            ops::terminal_safe(&provider_event_id)
        );
        println!("received_at:   {}", ts(received_at));
        if !query.is_empty() {
            println!("query:         {}", ops::terminal_safe(&query));
        }
        println!("headers:");
        for h in headers.as_array().into_iter().flatten() {
            println!(
                "  {}: {}",
                ops::terminal_safe(h[0].as_str().unwrap_or("")),
                ops::terminal_safe(h[1].as_str().unwrap_or(""))
            );
        }
        println!("body ({} bytes):", body.len());
        match std::str::from_utf8(&body) {
            Ok(text) => println!("{}", ops::terminal_safe(text)),
            Err(_) => println!("(not UTF-8) {}", hex_dump(&body)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn hex_dump(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn redrive(
    config: &Config,
    pool: &sqlx::PgPool,
    args: &RedriveArgs,
) -> anyhow::Result<ExitCode> {
    if args.reason.trim().is_empty() {
        eprintln!("error: {}", UsageError("--reason must say why".into()));
        return Ok(ExitCode::from(2));
    }
    let rows: Vec<hookline_bus::message::EventRow> = sqlx::query_as(
        "SELECT e.id, e.provider, e.provider_event_id, e.event_type
         FROM dead_letters d JOIN webhook_events e ON e.id = d.event_id
         WHERE d.consumer = 'payments' AND d.resolved_at IS NULL
           AND (cardinality($1::bigint[]) = 0 OR e.id = ANY($1))
           AND ($2::text IS NULL OR e.provider = $2)
           AND ($3::text IS NULL OR e.event_type = $3)
         ORDER BY e.id",
    )
    .bind(&args.ids)
    .bind(&args.provider)
    .bind(&args.event_type)
    .fetch_all(pool)
    .await
    .context("select dead letters")?;
    let filter = serde_json::json!({
        "ids": args.ids, "provider": args.provider, "event_type": args.event_type, "all": args.all,
    });
    let run_id: i64 = sqlx::query_scalar(
        "INSERT INTO replay_runs (kind, operator, reason, filter, selected)
         VALUES ('dlq_redrive', $1, $2, $3, $4) RETURNING id",
    )
    .bind(ops::operator(args.operator.as_deref()))
    .bind(&args.reason)
    .bind(&filter)
    .bind(rows.len() as i64)
    .fetch_one(pool)
    .await
    .context("write the audit row")?;
    if rows.is_empty() {
        sqlx::query("UPDATE replay_runs SET finished_at = now() WHERE id = $1")
            .bind(run_id)
            .execute(pool)
            .await?;
        println!("no unresolved dead letter matches");
        return Ok(ExitCode::SUCCESS);
    }
    let topology = ops::topology(config);
    let publisher = Publisher::open(&config.amqp_url, &topology, "hookline-dlq-redrive").await?;
    let msgs: Vec<EventMessage> = rows.into_iter().map(EventMessage::from).collect();
    let mut published = Vec::with_capacity(msgs.len());
    for chunk in msgs.chunks(500) {
        let acked = publisher
            .publish(&topology, chunk, config.relay.confirm_timeout)
            .await
            .context("publish to RabbitMQ")?;
        published.extend(acked);
    }
    publisher.close().await;
    let last = published.iter().copied().max().unwrap_or(0);
    sqlx::query(
        "UPDATE replay_runs SET published = $2, last_event_id = $3, finished_at = now(), updated_at = now()
         WHERE id = $1",
    )
    .bind(run_id)
    .bind(published.len() as i64)
    .bind(last)
    .execute(pool)
    .await?;
    let removed = hookline_worker::dlq::remove(
        &config.amqp_url,
        &topology,
        &published.iter().copied().collect::<HashSet<i64>>(),
    )
    .await?;
    println!(
        "redrive run {run_id}: {} of {} dead letters re-delivered; {removed} copies removed from {}",
        published.len(),
        msgs.len(),
        topology.dead_letter_queue
    );
    Ok(if published.len() == msgs.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
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
    let discarded: Vec<i64> = sqlx::query_scalar(
        "UPDATE dead_letters SET resolved_at = now(), resolution = 'discarded'
         WHERE consumer = 'payments' AND resolved_at IS NULL AND event_id = ANY($1)
         RETURNING event_id",
    )
    .bind(&args.ids)
    .fetch_all(&mut *tx)
    .await
    .context("resolve the dead letters as discarded")?;
    let last = discarded.iter().copied().max().unwrap_or(0);
    let run_id: i64 = sqlx::query_scalar(
        "INSERT INTO replay_runs (kind, operator, reason, filter, selected, published, last_event_id, finished_at)
         VALUES ('dlq_discard', $1, $2, $3, $4, 0, $5, now()) RETURNING id",
    )
    .bind(ops::operator(args.operator.as_deref()))
    .bind(&args.reason)
    .bind(&filter)
    .bind(discarded.len() as i64)
    .bind(last)
    .fetch_one(&mut *tx)
    .await
    .context("write the audit row")?;
    tx.commit().await.context("commit the discard")?;
    let topology = ops::topology(config);
    let removed = match hookline_worker::dlq::remove(
        &config.amqp_url,
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
