//! `hookline status`: the state of the pipeline at a glance, usable as a probe (exit 1 = needs attention).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hookline_core::{consumers, events, Config};
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

/// Per (provider, consumer) counts.
pub use hookline_core::events::ProviderStatus;

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
    outbound: Outbound,
    attention: Vec<String>,
}

/// Requests to the gateway (the outbox of charges and refunds).
#[derive(Debug, Serialize)]
pub struct Outbound {
    pending: i64,
    failed: i64,
    oldest_pending_secs: Option<f64>,
}

/// Runs `hookline status`.
pub async fn run(config: &Config, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    let providers = events::status_by_provider(&pool, consumers::ALL).await?;
    // Received and unpublished do not depend on the consumer: counted once, from the first consumer's rows.
    let first = consumers::ALL.first().copied().unwrap_or_default();
    let once = || providers.iter().filter(|p| p.consumer == first);
    let totals = ProviderStatus {
        provider: "TOTAL".into(),
        consumer: consumers::ALL.join(","),
        received: once().map(|p| p.received).sum(),
        unpublished: once().map(|p| p.unpublished).sum(),
        oldest_unpublished_secs: once()
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
    let (pending, failed, oldest_pending_secs) = hookline_core::outbox::summary(&pool).await?;
    let outbound = Outbound {
        pending,
        failed,
        oldest_pending_secs,
    };
    if failed > 0 {
        attention.push(format!(
            "{failed} request(s) to the gateway failed for good: see outbound_requests.last_error"
        ));
    }
    if let Some(age) = oldest_pending_secs.filter(|a| *a > 300.0) {
        attention.push(format!(
            "{pending} request(s) to the gateway pending, oldest {age:.0}s: is a dispatcher running and the gateway up?"
        ));
    }
    let report = Report {
        outbound,
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
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        hookline_bus::inspect::queue_depths(
            &config.amqp_urls,
            "hookline-status",
            &[&t.payments_queue, &t.dead_letter_queue],
        ),
    )
    .await;
    match result {
        Ok(Ok(d)) => Queues {
            payments_ready: d.first().copied().flatten().map(|q| q.messages),
            dead_letter_ready: d.get(1).copied().flatten().map(|q| q.messages),
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
        "{:<14} {:<10} {:>9} {:>11} {:>10} {:>9} {:>8} {:>7} {:>8} {:>7} {:>6}",
        "provider",
        "consumer",
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
            "{:<14} {:<10} {:>9} {:>11} {:>10} {:>9} {:>8} {:>7} {:>8} {:>7} {:>6}",
            p.provider,
            p.consumer,
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
    println!(
        "outbound: {} pending{}, {} failed",
        r.outbound.pending,
        r.outbound
            .oldest_pending_secs
            .map(|s| format!(" (oldest {s:.0}s)"))
            .unwrap_or_default(),
        r.outbound.failed
    );
    if r.attention.is_empty() {
        println!("status: OK");
    } else {
        for a in &r.attention {
            println!("ATTENTION: {a}");
        }
    }
}
