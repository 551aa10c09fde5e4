//! The outbound direction from the command line: `hookline subscriptions …`, `hookline billing run`,
//! `hookline refund` and `hookline dispatch` (the dispatcher on its own; it also runs inside `hookline-worker`).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use hookline_core::Config;
use hookline_payments::billing::{self, NewSubscription, RunSummary};
use hookline_payments::dispatch::{DispatchSettings, Dispatcher};
use hookline_payments::intents::{self, RefundError};
use hookline_signature::Scheme;

use crate::ops;

/// `hookline subscriptions …`.
#[derive(Subcommand, Debug)]
pub enum SubscriptionsCommand {
    /// Create an active subscription, charged off-session with a payment method saved at the provider; prints
    /// its id.
    #[command(after_help = "\
The customer and the payment method are the provider's own ids, saved there by the merchant's checkout: \
Stripe cus_… and pm_… (charged with off_session=true); Mercado Pago the customer id and the card id (Mercado \
Pago charges a saved card only with a fresh token made with the security code the customer types again, so \
its billing charges need attention until the merchant supplies one).")]
    Add {
        /// Configured provider (stripe or mercadopago scheme)
        #[arg(long)]
        provider: String,
        /// The customer AT THE PROVIDER (Stripe cus_…; Mercado Pago customer id)
        #[arg(long)]
        customer: String,
        /// The payment method saved at the provider (Stripe pm_…; Mercado Pago card id)
        #[arg(long, value_name = "ID")]
        payment_method: String,
        /// Amount charged per cycle, in minor units (cents)
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1_000_000_000_000_000))]
        amount: i64,
        /// ISO 4217 currency (e.g. brl)
        #[arg(long)]
        currency: String,
    },
    /// List the subscriptions.
    List {
        /// JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Cancel a subscription: later cycles do not charge it.
    Cancel {
        /// Subscription id
        id: i64,
    },
}

/// `hookline billing …`.
#[derive(Subcommand, Debug)]
pub enum BillingCommand {
    /// Charge every active subscription for one cycle, exactly once however often (or however many at once)
    /// it runs: each charge claims (subscription, cycle) in the transaction that creates its payment intent.
    /// The dispatcher sends the charges. Exit codes: 0 ok, 1 some subscription needs attention, 2 usage.
    #[command(after_help = "\
Its idempotency key is derived, never typed: the business key (subscription, --cycle) is claimed once \
(billing_claims_cycle_key), and the gateway's key is derived from the claimed intent. The same command run \
twice, or at the same time, charges each subscription once per cycle.")]
    Run(BillingRunArgs),
}

/// Arguments of `hookline billing run`.
#[derive(Args, Debug)]
pub struct BillingRunArgs {
    /// The billing cycle, YYYY-MM
    #[arg(long)]
    cycle: String,
    /// Report what would be charged; change nothing
    #[arg(long)]
    dry_run: bool,
    /// Print the summary as JSON
    #[arg(long)]
    json: bool,
    /// Allow a cycle other than the current or the previous one (UTC); must name the same cycle as --cycle
    #[arg(long, value_name = "CYCLE")]
    allow_cycle: Option<String>,
}

/// Whether `cycle` may be charged in `today`'s month: the current and the previous cycle only (a late run of
/// last month's billing is normal), unless `allow` names that very cycle. A typo such as `0001-01` would
/// otherwise charge every subscription for a cycle two thousand years ago.
fn cycle_allowed(cycle: &str, allow: Option<&str>, today: time::Date) -> Result<(), String> {
    let current = format!("{:04}-{:02}", today.year(), u8::from(today.month()));
    let prev_month = today.month().previous();
    let prev_year = if prev_month == time::Month::December {
        today.year() - 1
    } else {
        today.year()
    };
    let previous = format!("{prev_year:04}-{:02}", u8::from(prev_month));
    if cycle == current || cycle == previous || allow == Some(cycle) {
        return Ok(());
    }
    Err(format!(
        "--cycle {cycle} is neither the current cycle ({current}) nor the previous one ({previous}); \
         to charge it anyway, say so with --allow-cycle {cycle}"
    ))
}

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

/// The scheme of a provider that can be charged (stripe or mercadopago).
fn chargeable(config: &Config, provider: &str) -> Result<Scheme, String> {
    match config.providers.get(provider) {
        None => Err(format!("no provider named {provider:?} is configured")),
        Some(p) if !matches!(p.scheme, Scheme::Stripe | Scheme::MercadoPago) => Err(format!(
            "provider {provider:?} is not a stripe or mercadopago provider"
        )),
        Some(p) => Ok(p.scheme),
    }
}

/// Runs `hookline subscriptions …`.
pub async fn subscriptions(
    config: &Config,
    cmd: &SubscriptionsCommand,
) -> anyhow::Result<ExitCode> {
    match cmd {
        SubscriptionsCommand::Add {
            provider,
            customer,
            payment_method,
            amount,
            currency,
        } => {
            let scheme = match chargeable(config, provider) {
                Ok(scheme) => scheme,
                Err(why) => {
                    eprintln!("error: {why}");
                    return Ok(ExitCode::from(2));
                }
            };
            let currency = currency.trim().to_ascii_lowercase();
            if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_lowercase()) {
                eprintln!(
                    "error: --currency must be a three-letter ISO 4217 code, not {currency:?}"
                );
                return Ok(ExitCode::from(2));
            }
            let (customer, payment_method) = (customer.trim(), payment_method.trim());
            if let Err((flag, what)) = billing::valid_saved_method(scheme, customer, payment_method)
            {
                eprintln!("error: {flag} must be {what}");
                return Ok(ExitCode::from(2));
            }
            let pool = ops::pool(config).await?;
            let mut conn = pool.acquire().await?;
            let id = billing::add(
                &mut conn,
                &NewSubscription {
                    provider,
                    customer,
                    payment_method,
                    amount: *amount,
                    currency: &currency,
                },
            )
            .await?;
            println!("{id}");
            Ok(ExitCode::SUCCESS)
        }
        SubscriptionsCommand::List { json } => {
            let pool = ops::pool(config).await?;
            let mut conn = pool.acquire().await?;
            let subs = billing::list(&mut conn).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&subs)?);
            } else {
                println!(
                    "{:>6}  {:<12}  {:<30}  {:>14}  {:<3}  {:<8}",
                    "ID", "PROVIDER", "CUSTOMER", "AMOUNT", "CUR", "STATUS"
                );
                for s in subs {
                    println!(
                        "{:>6}  {:<12}  {:<30}  {:>14}  {:<3}  {:<8}",
                        s.id, s.provider, s.customer, s.amount, s.currency, s.status
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SubscriptionsCommand::Cancel { id } => {
            let pool = ops::pool(config).await?;
            let mut conn = pool.acquire().await?;
            match billing::cancel(&mut conn, *id).await? {
                Some(true) => println!("subscription {id} canceled"),
                Some(false) => println!("subscription {id} was already canceled"),
                None => {
                    eprintln!("error: no subscription {id}");
                    return Ok(ExitCode::from(1));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Runs `hookline billing …`.
pub async fn billing(config: &Config, cmd: &BillingCommand) -> anyhow::Result<ExitCode> {
    let BillingCommand::Run(args) = cmd;
    if !billing::valid_cycle(&args.cycle) {
        eprintln!(
            "error: --cycle must be YYYY-MM (month 01-12), not {:?}",
            args.cycle
        );
        return Ok(ExitCode::from(2));
    }
    if let Err(e) = cycle_allowed(
        &args.cycle,
        args.allow_cycle.as_deref(),
        time::OffsetDateTime::now_utc().date(),
    ) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    let pool = ops::pool(config).await?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new(0);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} subscriptions  {per_sec}  eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    });
    let scheme_of = |p: &str| {
        chargeable(config, p).ok().filter(|_| {
            config
                .providers
                .get(p)
                .is_some_and(|c| c.api_base.is_some())
        })
    };
    let summary = billing::run_cycle(
        &pool,
        &args.cycle,
        args.dry_run,
        scheme_of,
        |done, total| {
            if let Some(pb) = &bar {
                pb.set_length(total);
                pb.set_position(done);
            }
        },
    )
    .await?;
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    print_summary(&summary, args.json)?;
    Ok(if summary.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_summary(summary: &RunSummary, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(summary)?);
        return Ok(());
    }
    let verb = if summary.dry_run {
        "would charge"
    } else {
        "charged"
    };
    println!(
        "cycle {}: {verb} {}, already claimed {}, canceled skipped {}, needs attention {}",
        summary.cycle,
        summary.charged,
        summary.already_claimed,
        summary.canceled_skipped,
        summary.errors.len()
    );
    for e in &summary.errors {
        println!("  needs attention: {e}");
    }
    Ok(())
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

#[cfg(test)]
mod cycle_tests {
    use super::cycle_allowed;
    use time::macros::date;

    #[test]
    fn only_the_current_and_previous_cycle_unless_allowed_by_name() {
        let today = date!(2026 - 12 - 02);
        assert!(cycle_allowed("2026-12", None, today).is_ok());
        assert!(cycle_allowed("2026-11", None, today).is_ok());
        assert!(cycle_allowed("2026-10", None, today).is_err());
        assert!(cycle_allowed("0001-01", None, today).is_err());
        assert!(cycle_allowed("2027-01", None, today).is_err());
        assert!(cycle_allowed("0001-01", Some("2026-10"), today).is_err());
        assert!(cycle_allowed("2026-10", Some("2026-10"), today).is_ok());
        let january = date!(2027 - 01 - 15);
        assert!(
            cycle_allowed("2026-12", None, january).is_ok(),
            "across a year"
        );
        assert!(cycle_allowed("2026-11", None, january).is_err());
    }
}
