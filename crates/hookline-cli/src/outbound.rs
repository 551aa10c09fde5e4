//! The outbound direction from the command line: `hookline refund` and `hookline dispatch` (the dispatcher on
//! its own; it also runs inside `hookline-worker`). Subscriptions and billing runs: [`crate::billing`].

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hookline_core::Config;
use hookline_payments::dispatch::{DispatchSettings, Dispatcher};
use hookline_payments::intents::{self, RefundError};

use crate::ops;

/// Arguments of `hookline refund`.
#[derive(Args, Debug)]
#[command(after_help = "\
Records the refund and queues it for the dispatcher in one transaction. Refunds never exceed what was \
captured, also when requested concurrently.

Why --idempotency-key is required: a refund moves money. Without a key, the same command run twice (a \
retry after a timeout, a re-run from shell history, two operators) refunds twice. With it, the key is stored \
with the refund (UNIQUE per payment intent): the same command run again prints the same refund and sends \
nothing more; the same key with another amount or reason is refused. Use one key per intended refund, e.g. \
the ticket that asked for it (INC-1234-refund-1).

Exit codes: 0 requested or already requested (prints the refund id, re_hl_…), 1 refused (not captured, \
above what is left, unknown payment, key used for another refund), 2 usage.")]
pub struct RefundArgs {
    /// The payment intent's public id (pi_hl_…)
    payment: String,
    /// Amount to refund, in minor units (cents)
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1_000_000_000_000_000))]
    amount: i64,
    /// Why (kept with the refund)
    #[arg(long)]
    reason: String,
    /// This refund's key: the same key refunds once, however often the command runs (see below)
    #[arg(long, value_name = "KEY")]
    idempotency_key: String,
}

/// Arguments of `hookline dispatch`.
#[derive(Args, Debug)]
pub struct DispatchArgs {
    /// Send what is due now and exit instead of running until stopped
    #[arg(long)]
    once: bool,
    /// Timeout of one gateway request, seconds (default: `dispatcher.request_timeout_secs`, 30)
    #[arg(long, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=600))]
    request_timeout_secs: Option<u64>,
}

/// Runs `hookline refund`.
pub async fn refund(config: &Config, args: &RefundArgs) -> anyhow::Result<ExitCode> {
    let reason = args.reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        eprintln!("error: --reason must be 1 to 500 characters");
        return Ok(ExitCode::from(2));
    }
    let key = args.idempotency_key.as_str();
    if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        eprintln!(
            "error: --idempotency-key must be 1 to 255 printable ASCII characters without spaces"
        );
        return Ok(ExitCode::from(2));
    }
    let payment = args.payment.as_str();
    if payment.is_empty() || payment.len() > 255 || !payment.bytes().all(|b| b.is_ascii_graphic()) {
        eprintln!("error: the payment intent id must be 1 to 255 printable ASCII characters");
        return Ok(ExitCode::from(2));
    }
    let pool = ops::pool(config).await?;
    let mut tx = pool.begin().await?;
    match intents::request_refund_with_key(&mut tx, payment, args.amount, reason, key).await {
        Ok(requested) => {
            tx.commit().await?;
            if !requested.created {
                eprintln!(
                    "already requested with this key (status {}); nothing new was sent",
                    requested.status
                );
            }
            println!("{}", intents::refund_public_id(requested.id));
            Ok(ExitCode::SUCCESS)
        }
        Err(RefundError::Database(e)) => Err(e.into()),
        Err(refused) => {
            tx.rollback().await.ok();
            eprintln!("refused: {refused}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Runs `hookline dispatch`.
pub async fn dispatch(config: &Config, args: &DispatchArgs) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    // `[dispatcher]` as the worker's dispatcher runs, the flag overriding its timeout for this run.
    let mut settings = DispatchSettings::from_config(&config.dispatcher);
    if let Some(secs) = args.request_timeout_secs {
        settings.request_timeout = Duration::from_secs(secs);
    }
    let dispatcher = Dispatcher::from_config(pool, config, settings);
    if args.once {
        let mut total = 0;
        loop {
            let n = dispatcher.dispatch_once().await?;
            if n == 0 {
                break;
            }
            total += n;
        }
        println!("sent {total} requests");
        return Ok(ExitCode::SUCCESS);
    }
    dispatcher
        .run(hookline_core::supervisor::shutdown_signal())
        .await?;
    Ok(ExitCode::SUCCESS)
}
