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
use hookline_core::Config;
use serde::{Deserialize, Serialize};
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

/// Which events a replay selects; stored as JSON in the audit row so a run can be resumed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Filter {
    /// Provider name.
    pub provider: Option<String>,
    /// Event type.
    pub event_type: Option<String>,
    /// Received at or after (RFC 3339).
    #[serde(with = "time::serde::rfc3339::option")]
    pub since: Option<OffsetDateTime>,
    /// Received before (RFC 3339).
    #[serde(with = "time::serde::rfc3339::option")]
    pub until: Option<OffsetDateTime>,
    /// Explicit ids.
    pub ids: Vec<i64>,
    /// `all`, `unprocessed` or `dead`.
    pub state: String,
}

/// One selected event.
#[derive(Debug, sqlx::FromRow)]
pub struct Row {
    id: i64,
    provider: String,
    provider_event_id: String,
    event_type: Option<String>,
    received_at: OffsetDateTime,
    state: String,
}

impl Row {
    fn message(&self) -> EventMessage {
        EventMessage {
            id: self.id,
            provider: self.provider.clone(),
            provider_event_id: self.provider_event_id.clone(),
            event_type: self.event_type.clone(),
        }
    }
}

/// The selection's WHERE clause; `$1` is the cursor (exclusive lower bound on the id).
const SELECT: &str = "
    FROM webhook_events e
    LEFT JOIN processed_events p ON p.consumer = 'payments' AND p.event_id = e.id
    LEFT JOIN dead_letters d ON d.consumer = 'payments' AND d.event_id = e.id AND d.resolved_at IS NULL
    WHERE e.id > $1
      AND ($2::text IS NULL OR e.provider = $2)
      AND ($3::text IS NULL OR e.event_type = $3)
      AND ($4::timestamptz IS NULL OR e.received_at >= $4)
      AND ($5::timestamptz IS NULL OR e.received_at < $5)
      AND (cardinality($6::bigint[]) = 0 OR e.id = ANY($6))
      AND CASE $7::text WHEN 'all' THEN true
                        WHEN 'unprocessed' THEN p.event_id IS NULL
                        WHEN 'dead' THEN d.event_id IS NOT NULL END";

fn bind<'q>(
    q: sqlx::query::QueryAs<'q, sqlx::Postgres, Row, sqlx::postgres::PgArguments>,
    cursor: i64,
    f: &'q Filter,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, Row, sqlx::postgres::PgArguments> {
    q.bind(cursor)
        .bind(&f.provider)
        .bind(&f.event_type)
        .bind(f.since)
        .bind(f.until)
        .bind(&f.ids)
        .bind(&f.state)
}

/// Counts the selection after `cursor`.
pub async fn count(pool: &PgPool, f: &Filter, cursor: i64) -> anyhow::Result<i64> {
    let sql = format!("SELECT count(*) {SELECT}");
    let n: i64 = sqlx::query_scalar(&sql)
        .bind(cursor)
        .bind(&f.provider)
        .bind(&f.event_type)
        .bind(f.since)
        .bind(f.until)
        .bind(&f.ids)
        .bind(&f.state)
        .fetch_one(pool)
        .await
        .context("count the selection")?;
    Ok(n)
}

/// One page of the selection after `cursor`, in id order.
pub async fn page(pool: &PgPool, f: &Filter, cursor: i64, limit: u32) -> anyhow::Result<Vec<Row>> {
    let sql = format!(
        "SELECT e.id, e.provider, e.provider_event_id, e.event_type, e.received_at,
                CASE WHEN d.event_id IS NOT NULL THEN 'dead'
                     WHEN p.event_id IS NOT NULL THEN p.outcome
                     ELSE 'unprocessed' END AS state
         {SELECT} ORDER BY e.id LIMIT {limit}"
    );
    let q = sqlx::query_as::<_, Row>(&sql);
    bind(q, cursor, f)
        .fetch_all(pool)
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

async fn run_inner(config: &Config, args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    let (run_id, filter, mut cursor, mut published) = match args.resume {
        Some(id) => {
            let row: Option<SavedRun> = sqlx::query_as(
                "SELECT filter, reason, last_event_id, published, finished_at
                     FROM replay_runs WHERE id = $1 AND kind = 'replay' AND NOT dry_run",
            )
            .bind(id)
            .fetch_optional(&pool)
            .await?;
            let Some((filter, _reason, cursor, published, finished)) = row else {
                anyhow::bail!(UsageError(format!("no replay run {id} to resume")));
            };
            if finished.is_some() {
                println!("replay run {id} already finished ({published} events published)");
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "resuming replay run {id} after event {cursor} ({published} already re-delivered)"
            );
            (id, filter.0, cursor, published)
        }
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
            let selected = count(&pool, &filter, 0).await?;
            if args.dry_run {
                return dry_run(&pool, &filter, selected).await;
            }
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO replay_runs (kind, operator, reason, filter, selected)
                 VALUES ('replay', $1, $2, $3, $4) RETURNING id",
            )
            .bind(ops::operator(args.operator.as_deref()))
            .bind(&reason)
            .bind(sqlx::types::Json(&filter))
            .bind(selected)
            .fetch_one(&pool)
            .await
            .context("write the audit row")?;
            println!("replay run {id}: {selected} events selected ({reason})");
            (id, filter, 0, 0)
        }
    };
    let remaining = count(&pool, &filter, cursor).await?;
    let topology = ops::topology(config);
    let publisher = Publisher::open(&config.amqp_url, &topology, "hookline-replay").await?;
    let progress = progress_bar(remaining as u64);
    let interrupted = hookline_worker::shutdown_signal();
    let started = Instant::now();
    let mut sent_this_run: u64 = 0;
    let chunk = if args.rate == 0 {
        args.page_size
    } else {
        args.rate.clamp(1, args.page_size)
    };
    let outcome = loop {
        if interrupted.is_cancelled() {
            break Outcome::Interrupted;
        }
        let rows = page(&pool, &filter, cursor, chunk).await?;
        if rows.is_empty() {
            break Outcome::Done;
        }
        let msgs: Vec<EventMessage> = rows.iter().map(Row::message).collect();
        let acked = publisher
            .publish(&topology, &msgs, config.relay.confirm_timeout)
            .await
            .context("publish to RabbitMQ")?;
        if acked.len() != msgs.len() {
            break Outcome::Unconfirmed(msgs.len() - acked.len());
        }
        cursor = rows.last().map(|r| r.id).unwrap_or(cursor);
        published += msgs.len() as i64;
        sent_this_run += msgs.len() as u64;
        // The cursor only moves past events RabbitMQ confirmed: a crash here re-sends at most this page.
        sqlx::query(
            "UPDATE replay_runs SET last_event_id = $2, published = $3, updated_at = now() WHERE id = $1",
        )
        .bind(run_id)
        .bind(cursor)
        .bind(published)
        .execute(&pool)
        .await
        .context("advance the replay cursor")?;
        if let Some(pb) = &progress {
            pb.inc(msgs.len() as u64);
        }
        if args.rate > 0 {
            let due = Duration::from_secs_f64(sent_this_run as f64 / f64::from(args.rate));
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
    match outcome {
        Outcome::Done => {
            sqlx::query(
                "UPDATE replay_runs SET finished_at = now(), updated_at = now() WHERE id = $1",
            )
            .bind(run_id)
            .execute(&pool)
            .await?;
            println!(
                "replay run {run_id} finished: {published} events re-delivered in {:.1}s",
                started.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Interrupted => {
            println!(
                "replay run {run_id} interrupted after {published} events; resume with: hookline replay --resume {run_id}"
            );
            Ok(ExitCode::from(1))
        }
        Outcome::Unconfirmed(n) => {
            eprintln!(
                "replay run {run_id} stopped: RabbitMQ did not confirm {n} events (see the logs); \
                 resume with: hookline replay --resume {run_id}"
            );
            Ok(ExitCode::from(3))
        }
    }
}

/// A saved run: filter, reason, cursor, published count, finish time.
type SavedRun = (
    sqlx::types::Json<Filter>,
    String,
    i64,
    i64,
    Option<OffsetDateTime>,
);

enum Outcome {
    Done,
    Interrupted,
    Unconfirmed(usize),
}

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
                r.provider_event_id,
                r.event_type.as_deref().unwrap_or("-"),
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
