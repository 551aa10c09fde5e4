//! The outbound direction from the command line: `hookline refund`, `hookline dispatch` (the dispatcher on its
//! own; it also runs inside `hookline-worker`) and `hookline outbound resolve` (an operator's finding on a refund
//! the lookup could not decide). Subscriptions and billing runs: [`crate::billing`].

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use hookline_core::Config;
use hookline_gateways::dispatch::DispatchSettings;
use hookline_payments::intents::{self, RefundError};
use hookline_payments::outbound_requests::{self, OperatorFinding};

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

/// `hookline outbound …`.
#[derive(Subcommand, Debug)]
pub enum OutboundCommand {
    /// Record what you found at the gateway for an `unknown` refund the lookup could not decide (a gateway refund
    /// without hookline's reference could be it: Mercado Pago, Pagar.me). `hookline status` and the console name
    /// such requests; their `last_error` says why.
    #[command(after_help = "\
Check the payment at the gateway's dashboard first. --made: the refund hookline asked for is there (it is \
recorded as succeeded; give its id with --gateway-id when the gateway shows one). --not-made: it is not (what \
you saw was made elsewhere): the refund is sent again under the next key generation — refused until the \
request's key has expired, as the dispatcher's own lookup waits. Decided in one statement: only from unknown, \
never while a dispatcher is looking the request up.

Exit codes: 0 recorded, 1 refused (not an unknown refund, looked up right now, or --not-made before the key \
expired), 2 usage.")]
    Resolve(ResolveArgs),
}

/// Arguments of `hookline outbound resolve`.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("finding").required(true).args(["made", "not_made"])))]
pub struct ResolveArgs {
    /// The outbound request's id (`hookline status`, the console's Outbound page)
    #[arg(value_parser = clap::value_parser!(i64).range(1..))]
    request: i64,
    /// The refund was made at the gateway
    #[arg(long)]
    made: bool,
    /// The refund was not made at the gateway: send it again (under a new key)
    #[arg(long)]
    not_made: bool,
    /// With --made: the gateway's id of the refund (default: the payment's id and hookline's refund id)
    #[arg(long, value_name = "ID", requires = "made")]
    gateway_id: Option<String>,
    /// Why (kept with the request): what you checked
    #[arg(long)]
    reason: String,
    /// Who decides (default: $SUDO_USER, else $USER)
    #[arg(long)]
    operator: Option<String>,
}

/// Runs `hookline outbound …`.
pub async fn outbound(config: &Config, cmd: &OutboundCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        OutboundCommand::Resolve(args) => resolve(config, args).await,
    }
}

/// Runs `hookline outbound resolve`.
async fn resolve(config: &Config, args: &ResolveArgs) -> anyhow::Result<ExitCode> {
    let reason = args.reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        eprintln!("error: --reason must be 1 to 500 characters");
        return Ok(ExitCode::from(2));
    }
    if let Some(id) = &args.gateway_id {
        if id.is_empty() || id.len() > 255 || !id.bytes().all(|b| b.is_ascii_graphic()) {
            eprintln!("error: --gateway-id must be 1 to 255 printable ASCII characters");
            return Ok(ExitCode::from(2));
        }
    }
    let finding = if args.made {
        OperatorFinding::Made
    } else {
        OperatorFinding::NotMade
    };
    let operator = ops::operator(args.operator.as_deref());
    let note = format!(
        "resolved by {operator}: {} at the gateway: {reason}",
        if args.made { "made" } else { "not made" }
    );
    let pool = ops::pool(config).await?;
    let Some((request, provider)) = outbound_requests::get(&pool, args.request).await? else {
        eprintln!("refused: no outbound request {}", args.request);
        return Ok(ExitCode::from(1));
    };
    let ttl = config
        .providers
        .get(&provider)
        .map_or(outbound_requests::DEFAULT_KEY_TTL, |p| {
            p.idempotency_key_ttl
        });
    let mut tx = pool.begin().await?;
    let Some((refund, generation)) =
        outbound_requests::resolve_unknown_refund(&mut tx, args.request, finding, ttl, &note)
            .await?
    else {
        tx.rollback().await.ok();
        eprintln!(
            "refused: request {} is a {} {} — only an unknown refund that no dispatcher is looking up right now, \
             and for --not-made only once its key has expired, can be resolved",
            request.id,
            request.status,
            request.kind
        );
        return Ok(ExitCode::from(1));
    };
    if finding == OperatorFinding::Made {
        let intent = intents::get(&mut tx, request.intent_id).await?;
        let gateway_id = match (&args.gateway_id, intent.and_then(|i| i.provider_payment_id)) {
            (Some(id), _) => id.clone(),
            (None, Some(payment)) => format!("{payment}-{}", intents::refund_public_id(refund)),
            (None, None) => intents::refund_public_id(refund),
        };
        intents::record_refund_answer(&mut tx, refund, Some(&gateway_id), "succeeded").await?;
    }
    tx.commit().await?;
    tracing::warn!(request = request.id, refund = refund, operator = %operator, made = args.made,
        "outbound: an operator resolved an unknown refund");
    if args.made {
        println!("{}: recorded as made", intents::refund_public_id(refund));
    } else {
        println!(
            "{}: sent again under key generation {generation}",
            intents::refund_public_id(refund)
        );
    }
    Ok(ExitCode::SUCCESS)
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
    let mut settings =
        DispatchSettings::from_config(&hookline_gateways::config::DispatcherConfig::from_config(
            config,
            &hookline_core::config::ProcessEnv,
        )?);
    if let Some(secs) = args.request_timeout_secs {
        settings.request_timeout = Duration::from_secs(secs);
    }
    let dispatcher = hookline_billing::dispatcher(pool, config, settings);
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
