//! `hookline status`: the state of the pipeline at a glance, usable as a probe (exit 1 = needs attention).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hookline_core::Config;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde::Serialize;

use crate::ops;

/// Arguments of `hookline status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Output JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Unpublished events older than this need attention (the relay is stuck or RabbitMQ is down). Default:
    /// `relay.max_unpublished_age_secs` (60 s).
    #[arg(long, value_parser = ops::parse_duration)]
    pub max_unpublished_age: Option<Duration>,
}

/// Per-provider counts.
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct ProviderStatus {
    provider: String,
    received: i64,
    unpublished: i64,
    oldest_unpublished_secs: Option<f64>,
    processed: i64,
    applied: i64,
    parked: i64,
    ignored: i64,
    needs_fetch: i64,
    dead_lettered: i64,
}

/// Queue depths, when RabbitMQ answers.
#[derive(Debug, Serialize)]
pub struct Queues {
    payments_ready: Option<u32>,
    dead_letter_ready: Option<u32>,
    error: Option<String>,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    providers: Vec<ProviderStatus>,
    totals: ProviderStatus,
    queues: Queues,
    attention: Vec<String>,
}

/// Runs `hookline status`.
pub async fn run(config: &Config, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    let providers: Vec<ProviderStatus> = sqlx::query_as(
        "SELECT e.provider,
                count(*) AS received,
                count(*) FILTER (WHERE e.published_at IS NULL) AS unpublished,
                extract(epoch FROM now() - min(e.received_at) FILTER (WHERE e.published_at IS NULL))::float8
                    AS oldest_unpublished_secs,
                count(p.event_id) AS processed,
                count(*) FILTER (WHERE p.outcome = 'applied') AS applied,
                count(*) FILTER (WHERE p.outcome = 'parked') AS parked,
                count(*) FILTER (WHERE p.outcome = 'ignored') AS ignored,
                count(*) FILTER (WHERE p.outcome = 'needs_fetch') AS needs_fetch,
                count(d.event_id) AS dead_lettered
         FROM webhook_events e
         LEFT JOIN processed_events p ON p.consumer = 'payments' AND p.event_id = e.id
         LEFT JOIN dead_letters d ON d.consumer = 'payments' AND d.event_id = e.id AND d.resolved_at IS NULL
         GROUP BY e.provider ORDER BY e.provider",
    )
    .fetch_all(&pool)
    .await?;
    let totals = ProviderStatus {
        provider: "TOTAL".into(),
        received: providers.iter().map(|p| p.received).sum(),
        unpublished: providers.iter().map(|p| p.unpublished).sum(),
        oldest_unpublished_secs: providers
            .iter()
            .filter_map(|p| p.oldest_unpublished_secs)
            .reduce(f64::max),
        processed: providers.iter().map(|p| p.processed).sum(),
        applied: providers.iter().map(|p| p.applied).sum(),
        parked: providers.iter().map(|p| p.parked).sum(),
        ignored: providers.iter().map(|p| p.ignored).sum(),
        needs_fetch: providers.iter().map(|p| p.needs_fetch).sum(),
        dead_lettered: providers.iter().map(|p| p.dead_lettered).sum(),
    };
    let queues = queue_depths(config).await;

    let mut attention = Vec::new();
    if let Some(age) = totals.oldest_unpublished_secs {
        let max_age = args
            .max_unpublished_age
            .unwrap_or(config.relay.max_unpublished_age);
        if age > max_age.as_secs_f64() {
            attention.push(format!(
                "{} unpublished event(s), oldest {:.0}s (> {:?}): is the relay running and RabbitMQ up?",
                totals.unpublished, age, max_age
            ));
        }
    }
    if totals.dead_lettered > 0 {
        attention.push(format!(
            "{} dead letter(s): see `hookline dlq list`",
            totals.dead_lettered
        ));
    }
    if let Some(n) = queues.dead_letter_ready.filter(|n| *n > 0) {
        attention.push(format!("{n} message(s) in the dead-letter queue"));
    }
    if let Some(e) = &queues.error {
        attention.push(format!("RabbitMQ: {e}"));
    }
    let report = Report {
        providers,
        totals,
        queues,
        attention,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(if report.attention.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn queue_depths(config: &Config) -> Queues {
    let t = ops::topology(config);
    let result = tokio::time::timeout(Duration::from_secs(5), async {
        let conn = hookline_bus::connect(&config.amqp_url, "hookline-status").await?;
        let mut depths = Vec::new();
        for q in [&t.payments_queue, &t.dead_letter_queue] {
            // Passive: reports without creating. A missing queue closes the channel, so one channel per queue.
            let ch = conn.create_channel().await?;
            let depth = ch
                .queue_declare(
                    q.as_str().into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map(|q| q.message_count())
                .ok();
            if depth.is_some() {
                ch.close(200, "status".into()).await.ok();
            }
            depths.push(depth);
        }
        conn.close(200, "status".into()).await.ok();
        anyhow::Ok(depths)
    })
    .await;
    match result {
        Ok(Ok(d)) => Queues {
            payments_ready: d[0],
            dead_letter_ready: d[1],
            error: None,
        },
        Ok(Err(e)) => Queues {
            payments_ready: None,
            dead_letter_ready: None,
            error: Some(format!("{e:#}")),
        },
        Err(_) => Queues {
            payments_ready: None,
            dead_letter_ready: None,
            error: Some("no answer within 5 s".into()),
        },
    }
}

fn print_table(r: &Report) {
    println!(
        "{:<14} {:>9} {:>11} {:>10} {:>9} {:>8} {:>7} {:>8} {:>7} {:>6}",
        "provider",
        "received",
        "unpublished",
        "oldest(s)",
        "processed",
        "applied",
        "parked",
        "ignored",
        "fetch",
        "dead"
    );
    for p in r.providers.iter().chain(std::iter::once(&r.totals)) {
        println!(
            "{:<14} {:>9} {:>11} {:>10} {:>9} {:>8} {:>7} {:>8} {:>7} {:>6}",
            p.provider,
            p.received,
            p.unpublished,
            p.oldest_unpublished_secs
                .map(|s| format!("{s:.0}"))
                .unwrap_or_else(|| "-".into()),
            p.processed,
            p.applied,
            p.parked,
            p.ignored,
            p.needs_fetch,
            p.dead_lettered
        );
    }
    let show = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
    println!(
        "queues: payments ready {}, dead-letter ready {}",
        show(r.queues.payments_ready),
        show(r.queues.dead_letter_ready)
    );
    if r.attention.is_empty() {
        println!("status: OK");
    } else {
        for a in &r.attention {
            println!("ATTENTION: {a}");
        }
    }
}
