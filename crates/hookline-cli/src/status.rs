//! `hookline status`: the state of the pipeline at a glance, usable as a probe (exit 1 = needs attention).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hookline_core::Config;
use hookline_ops::status::Report;

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

/// Runs `hookline status` (the report itself is [`hookline_ops::status::report`], shared with the console).
pub async fn run(config: &Config, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    let report =
        hookline_ops::status::report(&pool, config, args.max_unpublished_age, "hookline-status")
            .await?;
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

fn print_table(r: &Report) {
    println!(
        "{:<14} {:<10} {:>9} {:>11} {:>10} {:>9} {:>8} {:>7} {:>8} {:>7} {:>6} {:>9} {:>9}",
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
        "dead",
        "discarded",
        "in_flight"
    );
    for p in r.providers.iter().chain(std::iter::once(&r.totals)) {
        println!(
            "{:<14} {:<10} {:>9} {:>11} {:>10} {:>9} {:>8} {:>7} {:>8} {:>7} {:>6} {:>9} {:>9}",
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
            p.dead_lettered,
            p.discarded,
            p.in_flight
        );
    }
    let show = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
    println!(
        "queues: payments ready {}, dead-letter ready {}",
        show(r.queues.payments_ready),
        show(r.queues.dead_letter_ready)
    );
    println!(
        "outbound: {} pending{}, {} failed, {} declined, {} unknown{}, {} intent(s) and {} refund(s) unresolved > {} min",
        r.outbound.pending,
        r.outbound
            .oldest_pending_secs
            .map(|s| format!(" (oldest {s:.0}s)"))
            .unwrap_or_default(),
        r.outbound.failed,
        r.outbound.declined,
        r.outbound.unknown,
        r.outbound
            .oldest_unknown_secs
            .map(|s| format!(" (oldest unknown for {s:.0}s)"))
            .unwrap_or_default(),
        r.outbound.unresolved_intents,
        r.outbound.unresolved_refunds,
        hookline_ops::status::UNRESOLVED_AFTER.as_secs() / 60
    );
    let b = &r.billing;
    println!(
        "billing: {} period(s) and {} retr(ies) due{}, {} cycle(s) in retry, {} past due, {} needing a payment method",
        b.due_periods,
        b.due_retries,
        if b.due_periods + b.due_retries > 0 {
            format!(" (oldest {}s)", b.oldest_due_secs)
        } else {
            String::new()
        },
        b.in_retry,
        b.past_due,
        b.needs_payment_method
    );
    if r.attention.is_empty() {
        println!("status: OK");
    } else {
        for a in &r.attention {
            println!("ATTENTION: {a}");
        }
    }
}
