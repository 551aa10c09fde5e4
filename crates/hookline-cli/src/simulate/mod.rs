//! `hookline simulate`: sends realistic, correctly signed provider events to a running edge, exactly as the
//! provider would, to demonstrate the pipeline, smoke-test a deployment or put some load on it.
//!
//! The provider is a configured one (`[providers.NAME]`): its scheme decides the payloads and headers, its first
//! secret signs them, and requests go to `POST {url}/webhooks/{NAME}`. The payloads are the shapes the payments
//! worker understands (Stripe, Pagar.me), so a run ends in payments, refunds, disputes, subscription charges and
//! ledger postings that can be checked.
//!
//! - Every id (events, payments, refunds, disputes, invoices, transactions, deliveries) carries a per-run id
//!   taken from the clock, so repeated runs never collide. `--seed` fixes the random choices (amounts, which
//!   events are re-sent, the order), not the ids.
//! - `--duplicates F` re-sends that fraction of the events: the same bytes, re-signed with a fresh timestamp
//!   where the scheme signs one, as a provider's retry is. The edge must answer them `200` with
//!   `"duplicate": true`, and the pipeline must apply each event once.
//! - Mercado Pago notifications name only a payment, which the worker reads from `api_base`: with the sandbox
//!   there the payments are created at it first (`sandbox_payments`); with another API the run is refused. The
//!   same for Pagar.me v5, whose unsigned webhooks decide nothing: the charges they name are made at the sandbox.
//! - Exit codes: 0 every request got 200, 1 some did not, 2 usage error (unknown provider or scenario), 3 the
//!   edge is unreachable.
//!
//! This module owns the command: its arguments, the checks before sending, the progress bar and the exit code.
//! The payloads and their signatures come from `hookline-fake`; the module `scenarios` turns a scenario name into
//! events, `send` plans and sends the requests, `stats` counts the answers and prints the summary.

mod sandbox_payments;
mod scenarios;
mod send;
mod stats;

use std::io::IsTerminal;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use futures::StreamExt;
use hookline_core::Config;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use scenarios::{
    mercadopago_notifications_for, pagarme_v5_webhooks_for, scenario_help, scenarios, Gen,
};
use send::{plan, send, signed_request};
use stats::Stats;

/// Arguments of `hookline simulate`.
#[derive(Args, Debug)]
#[command(after_help = scenario_help())]
pub struct SimulateArgs {
    /// Configured provider to impersonate ([providers.NAME]): its scheme and first secret sign the requests,
    /// which go to POST {URL}/webhooks/{PROVIDER}.
    #[arg(value_name = "PROVIDER")]
    pub provider: String,
    /// What to send; the valid scenarios depend on the provider's scheme (listed below).
    #[arg(value_name = "SCENARIO")]
    pub scenario: String,
    /// How many payments (Pagar.me transactions, subscription cycles, notifications) to simulate; a scenario
    /// may send several events for each.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub count: u32,
    /// Fraction (0.0-1.0) of extra re-sends of generated events: the exact same bytes, re-signed with a fresh
    /// timestamp where the scheme signs one, as a provider's retry. The edge must answer them 200 duplicate.
    #[arg(long, value_name = "F", default_value_t = 0.0, value_parser = parse_fraction)]
    pub duplicates: f64,
    /// Send everything (re-sends included) in random order; the pipeline's result must not depend on it.
    #[arg(long)]
    pub shuffle: bool,
    /// Requests in flight at once.
    #[arg(long, short = 'j', value_name = "C", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,
    /// Base URL of the edge [default: http://{edge.listen} from the configuration].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Seed of the random choices (amounts, re-sent events, order) for a reproducible run; ids still carry a
    /// per-run id [default: from the clock].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("{value} is not between 0.0 and 1.0"));
    }
    Ok(value)
}

/// Runs `hookline simulate`: generates the scenario's events, sends them and prints a summary.
pub async fn run(config: &Config, args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let Some(provider) = config.providers.get(&args.provider) else {
        let names: Vec<&str> = config.providers.keys().map(String::as_str).collect();
        eprintln!(
            "error: provider '{}' is not configured (configured: {})",
            args.provider,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
        return Ok(ExitCode::from(2));
    };
    let scheme = provider.scheme;
    let Some(scenario) = scenarios(scheme).iter().find(|s| s.name == args.scenario) else {
        let valid: Vec<String> = scenarios(scheme)
            .iter()
            .map(|s| format!("  {:<18} {}", s.name, s.about))
            .collect();
        eprintln!(
            "error: unknown scenario '{}' for provider '{}' (scheme {scheme}); valid scenarios:\n{}",
            args.scenario,
            args.provider,
            valid.join("\n")
        );
        return Ok(ExitCode::from(2));
    };
    let base = match base_url(config, args.url.as_deref()) {
        Ok(base) => base,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let endpoint = format!("{base}/webhooks/{}", args.provider);

    let seed = args.seed.unwrap_or_else(hookline_fake::clock_seed);
    let mut gen = Gen::new(seed, provider);
    let mut events = (scenario.generate)(&mut gen, args.count as usize)?;
    let plan = plan(
        &mut gen.fake.rng,
        events.len(),
        args.duplicates,
        args.shuffle,
    );

    let secret = provider
        .secret_bytes()
        .into_iter()
        .next()
        .context("the provider has no secret")?
        .to_vec();
    // A secret the scheme cannot use is a configuration problem: say so before sending anything.
    if let Some(first) = events.first() {
        if let Err(e) = signed_request(scheme, &secret, first) {
            eprintln!("error: cannot sign for provider '{}': {e:#}", args.provider);
            return Ok(ExitCode::from(2));
        }
    }

    let concurrency = args.concurrency as usize;
    let client = provider_client(scheme, concurrency)?;
    if let Err(e) = client
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        eprintln!(
            "error: the edge at {base} is unreachable: {:#}",
            anyhow::Error::new(e)
        );
        return Ok(ExitCode::from(3));
    }

    // Mercado Pago notifications name a payment the worker reads from `api_base`: it must exist there.
    if scheme == hookline_signature::Scheme::MercadoPago && provider.api_base.is_some() {
        let amounts: Vec<i64> = (0..events.len()).map(|_| gen.fake.amount()).collect();
        let run = gen.fake.run.clone();
        match sandbox_payments::create(provider, &run, &amounts, concurrency).await {
            Ok(Some(ids)) => {
                eprintln!(
                    "simulate: created {} approved payments at the sandbox ({}) to notify",
                    ids.len(),
                    provider
                        .api_base
                        .as_ref()
                        .map(|u| u.as_str())
                        .unwrap_or_default()
                );
                events = mercadopago_notifications_for(&mut gen, ids);
            }
            Ok(None) => {}
            Err(e @ sandbox_payments::PrepareError::NotSandbox { .. }) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(2));
            }
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(3));
            }
        }
    }

    // Pagar.me v5 webhooks are not signed: the worker applies what the API shows of the charge named, which
    // must therefore exist there.
    if scheme == hookline_signature::Scheme::PagarmeV5 && provider.api_base.is_some() {
        let refunded = scenario.name == "refunded";
        let count = if refunded {
            events.len() / 2
        } else {
            events.len()
        };
        let amounts: Vec<i64> = (0..count).map(|_| gen.fake.amount()).collect();
        let run = gen.fake.run.clone();
        match sandbox_payments::create_pagarme(provider, &run, &amounts, refunded, concurrency)
            .await
        {
            Ok(Some(charges)) => {
                eprintln!(
                    "simulate: created {} paid orders at the sandbox{} to notify",
                    charges.len(),
                    if refunded { ", refunded in full," } else { "" }
                );
                events = pagarme_v5_webhooks_for(&mut gen, charges, refunded);
            }
            Ok(None) => {}
            Err(e @ sandbox_payments::PrepareError::NotSandbox { .. }) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(2));
            }
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(3));
            }
        }
    }

    eprintln!(
        "simulate: {} {} -> {endpoint}: {} events, {} requests, concurrency {concurrency}, seed {seed}, run {}",
        args.provider,
        scenario.name,
        events.len(),
        plan.len(),
        gen.fake.run
    );
    let bar = progress_bar(plan.len());

    let started = Instant::now();
    let mut stats = Stats::default();
    let mut replies = futures::stream::iter(plan.iter().copied())
        .map(|i| send(&client, &endpoint, scheme, &secret, &events[i]))
        .buffer_unordered(concurrency);
    while let Some(reply) = replies.next().await {
        stats.record(reply);
        bar.inc(1);
        if stats.failures() > 0 {
            bar.set_message(format!("{} failed", stats.failures()));
        }
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();

    print!("{}", stats.summary(events.len(), plan.len(), elapsed));
    if stats.transport_errors == plan.len() {
        eprintln!("error: no request reached the edge at {base}");
        return Ok(ExitCode::from(3));
    }
    Ok(if stats.all_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The HTTP client a provider would use: no redirects followed (a provider does not follow the edge's either),
/// one idle connection per concurrent sender, the provider's user agent.
fn provider_client(
    scheme: hookline_signature::Scheme,
    concurrency: usize,
) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(concurrency)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .user_agent(hookline_fake::user_agent(scheme))
        .build()
        .context("cannot build the HTTP client")
}

/// A progress bar on a terminal, nothing otherwise (a log or a pipe gets the summary only).
fn progress_bar(len: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {per_sec} {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// The edge's base URL without a trailing slash: `--url`, else `http://{edge.listen}` (an unspecified listen
/// address such as 0.0.0.0 is reached on the loopback interface).
fn base_url(config: &Config, url: Option<&str>) -> anyhow::Result<String> {
    let base = match url {
        Some(url) => url.trim().trim_end_matches('/').to_string(),
        None => {
            let listen = hookline_web::EdgeConfig::from_config(config)?.listen;
            let ip = match listen.ip() {
                IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
                ip => ip,
            };
            format!("http://{}", SocketAddr::new(ip, listen.port()))
        }
    };
    let parsed =
        reqwest::Url::parse(&base).with_context(|| format!("--url '{base}' is not a URL"))?;
    if parsed.scheme() != "http" {
        anyhow::bail!(
            "--url '{base}': only http:// is supported (this build has no TLS; run it next to the edge)"
        );
    }
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_is_bounded() {
        assert_eq!(parse_fraction("0.3"), Ok(0.3));
        assert!(parse_fraction("1.5").is_err());
        assert!(parse_fraction("-0.1").is_err());
        assert!(parse_fraction("NaN").is_err());
    }
}
