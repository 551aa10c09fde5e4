//! Billing from the command line: `hookline subscriptions …` (add, list, cancel, update) and `hookline billing …`
//! (run, status). The rules live in `hookline_billing`; this module parses, validates and prints.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use hookline_billing::manage::{self, Field, ManageError};
use hookline_billing::{self as billing, BillingStatus, Cycle, Interval, RunSummary};
use hookline_core::Config;
use time::OffsetDateTime;

use crate::ops;

/// `hookline subscriptions …`.
#[derive(Subcommand, Debug)]
pub enum SubscriptionsCommand {
    /// Create an active subscription, charged off-session with a payment method saved at the provider; prints
    /// its id.
    #[command(after_help = "\
The customer and the payment method are the provider's own ids, saved there by the merchant's checkout: \
Stripe cus_… and pm_… (charged with off_session=true, confirm=true); Mercado Pago the customer id and the card \
id (charged as a merchant-initiated card-on-file payment: hookline mints the card token from the card id).

Periods start on the anchor's day of the month (yearly: its month and day) at its time of day, UTC; a day the \
month lacks is its last day. The workers charge each period once from its start, beginning with the period \
that contains the subscription's creation.")]
    Add {
        /// Configured provider (stripe, mercadopago or pagarme-v5 scheme)
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
        /// How often: month or year
        #[arg(long, default_value = "month", value_parser = parse_interval)]
        interval: Interval,
        /// When periods start, RFC 3339 (e.g. 2026-12-15T00:00:00Z); default now
        #[arg(long, value_name = "TIME", value_parser = parse_anchor)]
        anchor: Option<OffsetDateTime>,
    },
    /// List the subscriptions.
    List {
        /// JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Cancel a subscription: now (its unpaid cycles stop being retried) or at the end of its running period.
    Cancel {
        /// Subscription id
        id: i64,
        /// Keep it until its running period ends: the next cycle is not charged, it is canceled instead
        #[arg(long)]
        at_period_end: bool,
    },
    /// Give a subscription a new saved payment method (it is active again, and its past-due cycles, or those
    /// waiting for a method, are charged again by the next billing run) and/or a new amount per cycle.
    Update {
        /// Subscription id
        id: i64,
        /// The new payment method saved at the provider (Stripe pm_…; Mercado Pago card id)
        #[arg(long, value_name = "ID")]
        payment_method: Option<String>,
        /// A new amount per cycle, in minor units, charged from the next charge on
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1_000_000_000_000_000))]
        amount: Option<i64>,
    },
}

/// `hookline billing …`.
#[derive(Subcommand, Debug)]
pub enum BillingCommand {
    /// Charge each subscription's running period (or --cycle), and every declined cycle whose retry is due,
    /// exactly once per cycle however often (or however many at once, or beside the workers' own rounds) it
    /// runs. The dispatcher sends the charges. Exit codes: 0 ok, 1 some subscription needs attention, 2 usage.
    #[command(after_help = "\
Its idempotency key is derived, never typed: the business key (subscription, cycle) is claimed once \
(billing_claims_cycle_key), a cycle has at most one live charge whatever channel made it \
(payment_intents_live_cycle: a cycle paid through the merchant API is not charged again), and the gateway's key \
is derived from each charge. The same command run twice, or at the same time, charges each cycle once.

Dunning: a declined cycle is charged again after providers.NAME.dunning_retry_secs (default 1, 3 and 5 days \
after the 1st, 2nd and 3rd decline), by whichever run comes after that; when every retry declined the cycle \
and its subscription are past_due. A decline that says the method is unusable (expired, lost, authentication \
required…) is needs_payment_method at once. Both park the subscription until `hookline subscriptions update`. \
The workers bill by themselves every [billing] schedule_secs (due periods and due retries, through the same \
claims): this command is for a backfill (--cycle with --allow-cycle), a dry run, or billing without workers.")]
    Run(BillingRunArgs),
    /// List what is behind: subscriptions past due or needing a payment method, cycles in retry or in flight.
    Status {
        /// JSON for tools
        #[arg(long)]
        json: bool,
    },
}

/// Arguments of `hookline billing run`.
#[derive(Args, Debug)]
pub struct BillingRunArgs {
    /// The billing cycle, YYYY-MM (default: each subscription's running period)
    #[arg(long)]
    cycle: Option<String>,
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

fn parse_interval(s: &str) -> Result<Interval, String> {
    s.parse()
}

/// Anchors within ten years back and one year ahead: a typo would otherwise bill from the year 1.
fn parse_anchor(s: &str) -> Result<OffsetDateTime, String> {
    let at = OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("not an RFC 3339 time (2026-12-15T00:00:00Z): {e}"))?;
    manage::check_anchor(at, OffsetDateTime::now_utc()).map_err(|e| e.to_string())?;
    Ok(at)
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
            interval,
            anchor,
        } => {
            // The merchant API's rules, the same functions (`hookline_billing::manage`).
            let now = OffsetDateTime::now_utc();
            let checked = match manage::check_new(
                &manage::Create {
                    provider,
                    customer,
                    payment_method,
                    amount: *amount,
                    currency,
                    interval: *interval,
                    anchor: *anchor,
                },
                config.providers.get(provider.as_str()),
                now,
            ) {
                Ok(checked) => checked,
                Err(e) => return usage_error(&e, currency),
            };
            let pool = ops::pool(config).await?;
            let mut tx = pool.begin().await?;
            let sub = manage::create(&mut tx, None, &checked, now)
                .await
                .map_err(anyhow::Error::new)?;
            tx.commit().await?;
            println!("{}", sub.id);
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
                    "{:>6}  {:<12}  {:<30}  {:>14}  {:<3}  {:<5}  {:<20}  {:<20}",
                    "ID", "PROVIDER", "CUSTOMER", "AMOUNT", "CUR", "EVERY", "ANCHOR", "STATUS"
                );
                for s in subs {
                    let status = if s.cancel_at_period_end && s.status != "canceled" {
                        format!("{} (ends)", s.status)
                    } else {
                        s.status.to_string()
                    };
                    println!(
                        "{:>6}  {:<12}  {:<30}  {:>14}  {:<3}  {:<5}  {:<20}  {:<20}",
                        s.id,
                        crate::ops::terminal_safe(&s.provider),
                        crate::ops::terminal_safe(&s.customer),
                        s.amount,
                        s.currency,
                        s.interval,
                        s.anchor
                            .format(&time::format_description::well_known::Rfc3339)
                            .unwrap_or_default(),
                        status
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SubscriptionsCommand::Cancel { id, at_period_end } => {
            let pool = ops::pool(config).await?;
            let mut tx = pool.begin().await?;
            let when = if *at_period_end {
                "at the end of its period"
            } else {
                "now"
            };
            let Some(sub) = billing::subscriptions::lock(&mut tx, *id).await? else {
                eprintln!("error: no subscription {id}");
                return Ok(ExitCode::from(1));
            };
            let (changed, _) = billing::cancel_subscription(&mut tx, &sub, *at_period_end)
                .await
                .map_err(anyhow::Error::new)?;
            tx.commit().await?;
            if changed {
                println!("subscription {id} canceled {when}");
            } else {
                println!("subscription {id} was already canceled ({when})");
            }
            Ok(ExitCode::SUCCESS)
        }
        SubscriptionsCommand::Update {
            id,
            payment_method,
            amount,
        } => {
            if payment_method.is_none() && amount.is_none() {
                eprintln!("error: nothing to change: give --payment-method and/or --amount");
                return Ok(ExitCode::from(2));
            }
            let pool = ops::pool(config).await?;
            let mut tx = pool.begin().await?;
            let Some(sub) = billing::subscriptions::lock(&mut tx, *id).await? else {
                eprintln!("error: no subscription {id}");
                return Ok(ExitCode::from(1));
            };
            let provider = config.providers.get(sub.provider.as_str());
            let change = billing::Change {
                payment_method: payment_method.as_deref(),
                customer: None,
                amount: *amount,
            };
            match manage::update(&mut tx, sub, provider, &change).await {
                Ok(_) => {}
                Err(ManageError::Canceled) => {
                    eprintln!("error: subscription {id} is canceled");
                    return Ok(ExitCode::from(1));
                }
                Err(ManageError::Invalid {
                    field: Field::Customer,
                    message,
                    ..
                }) => {
                    eprintln!("error: --customer must be a subscription whose customer is {message} (this one predates saved methods: add a new one)");
                    return Ok(ExitCode::from(2));
                }
                Err(e @ ManageError::Invalid { .. }) => return usage_error(&e, ""),
                Err(e) => return Err(anyhow::Error::new(e)),
            }
            tx.commit().await?;
            if payment_method.is_some() {
                println!("subscription {id} active with its new payment method; unpaid cycles are retried by the next billing run");
            }
            if let Some(amount) = amount {
                println!("subscription {id} charges {amount} from its next charge");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A subscription's input the shared rules refused: the flag and why, on stderr; exit 2 (usage).
fn usage_error(e: &ManageError, currency: &str) -> anyhow::Result<ExitCode> {
    match e {
        ManageError::Invalid { field, message, .. } => match field {
            Field::Provider => eprintln!("error: {message}"),
            Field::Currency => eprintln!(
                "error: --currency {:?}: {message}",
                crate::ops::terminal_safe(currency)
            ),
            Field::Customer => eprintln!("error: --customer must be {message}"),
            Field::PaymentMethod => eprintln!("error: --payment-method must be {message}"),
            Field::Amount => eprintln!("error: --amount: {message}"),
            Field::Anchor => eprintln!("error: --anchor {message}"),
        },
        other => eprintln!("error: {other}"),
    }
    Ok(ExitCode::from(2))
}

/// Runs `hookline billing …`.
pub async fn billing(config: &Config, cmd: &BillingCommand) -> anyhow::Result<ExitCode> {
    let args = match cmd {
        BillingCommand::Run(args) => args,
        BillingCommand::Status { json } => return status(config, *json).await,
    };
    let cycle = match args.cycle.as_deref() {
        None => None,
        Some(c) => {
            let Some(cycle) = Cycle::parse(c) else {
                eprintln!("error: --cycle must be YYYY-MM (month 01-12), not {c:?}");
                return Ok(ExitCode::from(2));
            };
            if let Err(e) = cycle_allowed(
                c,
                args.allow_cycle.as_deref(),
                OffsetDateTime::now_utc().date(),
            ) {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(2));
            }
            Some(cycle)
        }
    };
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
    let providers = billing::providers(config);
    let provider_of = |p: &str| providers.get(p).cloned();
    let summary = billing::run(
        &pool,
        cycle,
        args.dry_run,
        &provider_of,
        OffsetDateTime::now_utc(),
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
        "cycle {}: {verb} {}, retried {}, already claimed {}, paid elsewhere {}, not due {}, parked {}, \
         canceled skipped {}, canceled at period end {}, needs attention {}",
        summary.cycle.as_deref().unwrap_or("(running periods)"),
        summary.charged,
        summary.retried,
        summary.already_claimed,
        summary.paid_elsewhere,
        summary.not_due,
        summary.parked,
        summary.canceled_skipped,
        summary.canceled_at_period_end,
        summary.errors.len()
    );
    for e in &summary.errors {
        println!("  needs attention: {e}");
    }
    Ok(())
}

/// Rows per list of `hookline billing status` (the totals are always whole).
const STATUS_ROWS: i64 = 10_000;

/// `hookline billing status`: always exit 0 (it is a list; `hookline status` is the health check).
async fn status(config: &Config, json: bool) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    let mut conn = pool.acquire().await?;
    let accepted = hookline_payments::currency::ProviderCurrencies::from_config(config);
    let status = billing::status(&mut conn, STATUS_ROWS, &accepted).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print_status(&status);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(s: &BillingStatus) {
    let time = |t: Option<OffsetDateTime>| {
        t.and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "-".into())
    };
    println!(
        "past due: {}, needs payment method: {}, cycles in retry: {}, charging: {}, unpaid cycles: {}",
        s.totals.past_due,
        s.totals.needs_payment_method,
        s.totals.in_retry,
        s.totals.charging,
        s.totals.unpaid_cycles
    );
    if s.totals.currency_not_accepted > 0 {
        println!(
            "not charged, currency not accepted by the provider: {}",
            s.totals.currency_not_accepted
        );
    }
    for sub in &s.currency_not_accepted {
        println!(
            "  subscription {:>6}  {:<20}  currency {} is not one {} charges in: never charged",
            sub.id,
            sub.status,
            crate::ops::terminal_safe(&sub.currency),
            crate::ops::terminal_safe(&sub.provider)
        );
    }
    for sub in s.past_due.iter().chain(&s.needs_payment_method) {
        println!(
            "  subscription {:>6}  {:<20}  {}",
            sub.id,
            sub.status,
            crate::ops::terminal_safe(sub.status_reason.as_deref().unwrap_or(""))
        );
    }
    for c in s.in_retry.iter().chain(&s.charging).chain(&s.unpaid_cycles) {
        println!(
            "  cycle {:>6} {}  {:<16}  attempts {:>2}  next {:<25}  {}  {}",
            c.subscription_id,
            c.billing_cycle,
            c.status,
            c.attempts,
            time(c.next_attempt_at),
            c.intent,
            crate::ops::terminal_safe(c.last_failure_code.as_deref().unwrap_or(""))
        );
    }
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
