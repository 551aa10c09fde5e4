//! `hookline-bench`: measures hookline (edge, relay, worker) end to end on the local PostgreSQL and RabbitMQ, prints
//! one table, writes `report.json`, `report.txt` and `latency.svg`, and exits non-zero when a correctness check
//! fails (missed performance targets are reported, not fatal).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use hookline_bench::{report, Options, DEFAULT_AMQP, DEFAULT_PG};

/// Benchmark hookline end to end (baselines, edge max and latency sweep, worker drain, whole pipeline).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Measure something else than the pipeline (default: the pipeline).
    #[command(subcommand)]
    command: Option<Command>,
    /// Seconds per measured phase (default 10; 2 with --quick). Sweep points last half of it.
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Seconds per latency-sweep point (default: half of --duration).
    #[arg(long, value_name = "SECS")]
    sweep_duration: Option<f64>,
    /// Short phases, for a smoke test.
    #[arg(long)]
    quick: bool,
    /// HTTP connections of the closed-loop load, and baseline A's database connections.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Output directory (report.json, report.txt, latency.svg, the children's logs).
    #[arg(long, value_name = "DIR", default_value = "bench-out")]
    out: PathBuf,
    /// Directory of hookline-edge and hookline-worker (default: the directory of this binary).
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// PostgreSQL server URL, without a database name.
    #[arg(long, env = "HOOKLINE_BENCH_PG", default_value = DEFAULT_PG)]
    pg: String,
    /// RabbitMQ URL.
    #[arg(long, env = "HOOKLINE_BENCH_AMQP", default_value = DEFAULT_AMQP)]
    amqp: String,
    /// Offered rate of the pipeline phase, requests/s (default: 0.6 × baseline A, at most 0.9 × the capacity
    /// estimated from the CPU per event of the edge and worker phases).
    #[arg(long, value_name = "REQ_PER_S")]
    pipeline_rate: Option<f64>,
    /// Share of deliveries that repeat an earlier one.
    #[arg(long, default_value_t = 0.1)]
    duplicates: f64,
    /// Cap on prepared deliveries per phase.
    #[arg(long, value_name = "N")]
    max_events: Option<usize>,
    /// Export the edge's and worker's traces to this OTLP collector (`[telemetry] otlp_endpoint`); a port where
    /// nothing listens measures a dead collector.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
}

/// Other measurements.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// The operator console's pages on a large events table (target: every page under 100 ms).
    Console {
        /// Events to seed.
        #[arg(long, default_value_t = 1_000_000)]
        events: i64,
        /// Timed requests per page (after 3 warm-up requests).
        #[arg(long, default_value_t = 20)]
        requests: usize,
    },
    /// Webhook ack latency of the edge with and without a flood of unauthenticated console logins.
    LoginFlood {
        /// Webhooks timed per run (one after another).
        #[arg(long, default_value_t = 300)]
        requests: usize,
        /// Concurrent console logins of the flood.
        #[arg(long, default_value_t = 500)]
        logins: usize,
    },
    /// Webhook ack latency of the edge with and without a flood on the merchant API (same process, own
    /// listener): half valid intent creations, half unknown keys.
    ApiFlood {
        /// Webhooks timed per run (one after another).
        #[arg(long, default_value_t = 300)]
        requests: usize,
        /// API requests kept in flight during the flood.
        #[arg(long, default_value_t = 200)]
        api_concurrency: usize,
    },
    /// One scheduled billing round of the worker (issue 48) for due monthly subscriptions against the provider
    /// sandbox: its time, claims/s, the dispatch of its charges, and webhook ack latency before and during it.
    BillingRound {
        /// Webhooks timed with the worker idle (one after another); during the round they go on until every
        /// intent succeeded.
        #[arg(long, default_value_t = 300)]
        requests: usize,
        /// Due subscriptions the round bills.
        #[arg(long, default_value_t = 10_000)]
        subscriptions: usize,
        /// Give up when the round and its dispatch have not finished after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 900)]
        timeout_secs: u64,
    },
    /// Two edges and two workers on the same database and broker: zero loss, exactly once, and how the
    /// throughput splits (--duration, --concurrency: connections over both edges).
    Scale,
}

fn options(args: Args) -> anyhow::Result<Options> {
    let bin_dir = match args.bin_dir {
        Some(d) => d,
        None => std::env::current_exe()
            .context("locate this executable")?
            .parent()
            .context("executable has no directory")?
            .to_path_buf(),
    };
    let mut opts = Options::new(bin_dir);
    if args.quick {
        opts = opts.quick();
    }
    if let Some(secs) = args.duration {
        anyhow::ensure!(secs > 0.0, "--duration must be positive");
        // Signatures are made right before each phase; past the 300 s tolerance they would be refused.
        anyhow::ensure!(
            secs < 250.0,
            "--duration must stay well below the 300 s signature tolerance"
        );
        opts.duration = Duration::from_secs_f64(secs);
        opts.sweep_duration = opts.duration / 2;
    }
    if let Some(secs) = args.sweep_duration {
        anyhow::ensure!(
            secs > 0.0 && secs < 250.0,
            "--sweep-duration must be positive and below 250 s"
        );
        opts.sweep_duration = Duration::from_secs_f64(secs);
    }
    opts.concurrency = args.concurrency;
    opts.out_dir = args.out;
    opts.pg_base_url = args.pg;
    opts.amqp_url = args.amqp;
    opts.pipeline_rate = args.pipeline_rate;
    opts.otlp_endpoint = args.otlp_endpoint.clone();
    opts.duplicate_share = args.duplicates;
    opts.max_events_per_phase = args.max_events;
    Ok(opts)
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = Args::parse();
    match args.command.take() {
        Some(Command::Console { events, requests }) => {
            return console(args, events, requests).await;
        }
        Some(Command::Scale) => return scale(args).await,
        Some(Command::ApiFlood {
            requests,
            api_concurrency,
        }) => {
            return api_flood(args, requests, api_concurrency).await;
        }
        Some(Command::BillingRound {
            requests,
            subscriptions,
            timeout_secs,
        }) => {
            return billing_round(args, requests, subscriptions, timeout_secs).await;
        }
        Some(Command::LoginFlood { requests, logins }) => {
            return login_flood(args, requests, logins).await;
        }
        None => {}
    }
    let opts = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    let report = match hookline_bench::run(&opts).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    println!("{}", report::render_table(&report));
    written(report::write_outputs(&report, &opts.out_dir));
    verdict(report.correctness_pass)
}

/// Names the report files written (or says why they were not).
fn written(files: anyhow::Result<Vec<std::path::PathBuf>>) {
    match files {
        Ok(files) => {
            for f in files {
                println!("wrote {}", f.display());
            }
        }
        Err(e) => eprintln!("hookline-bench: {e:#}"),
    }
}

/// Exit status: failure when a correctness check failed.
fn verdict(correct: bool) -> ExitCode {
    if correct {
        ExitCode::SUCCESS
    } else {
        eprintln!("hookline-bench: correctness FAILED");
        ExitCode::FAILURE
    }
}

async fn console(args: Args, events: i64, requests: usize) -> ExitCode {
    let opts = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    let console_opts = hookline_bench::console::ConsoleOptions {
        events,
        requests: requests.max(1),
        bin_dir: opts.bin_dir.clone(),
        pg_base_url: opts.pg_base_url.clone(),
        amqp_url: opts.amqp_url.clone(),
        out_dir: opts.out_dir.clone(),
    };
    match hookline_bench::console::run(&console_opts).await {
        Ok(report) => {
            let missed = report.pages.iter().filter(|p| !p.within_target).count();
            println!(
                "overview, first request (status aggregate on {} events): {:.0} ms",
                report.events, report.overview_cold_ms
            );
            println!(
                "{} of {} pages within {} ms at p95",
                report.pages.len() - missed,
                report.pages.len(),
                hookline_bench::console::TARGET_MS
            );
            match hookline_bench::console::write_report(&report, &opts.out_dir) {
                Ok(path) => println!("wrote {}", path.display()),
                Err(e) => eprintln!("hookline-bench: {e:#}"),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn scale(args: Args) -> ExitCode {
    let opts = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    match hookline_bench::scale::run(&opts).await {
        Ok(report) => {
            print!("{}", hookline_bench::scale::render(&report));
            written(hookline_bench::scale::write_report(&report, &opts.out_dir));
            verdict(report.pass)
        }
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn api_flood(args: Args, requests: usize, concurrency: usize) -> ExitCode {
    let opts = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    let flood_opts = hookline_bench::api_flood::ApiFloodOptions {
        requests: requests.max(1),
        concurrency: concurrency.max(2),
        bin_dir: opts.bin_dir.clone(),
        pg_base_url: opts.pg_base_url.clone(),
        out_dir: opts.out_dir.clone(),
    };
    match hookline_bench::api_flood::run(&flood_opts).await {
        Ok(report) => {
            written(
                hookline_bench::api_flood::write_report(&report, &opts.out_dir).map(|p| vec![p]),
            );
            verdict(
                report.quiet.ok == report.requests
                    && report.flood.ok == report.requests
                    && report.api_created > 0,
            )
        }
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn login_flood(args: Args, requests: usize, logins: usize) -> ExitCode {
    let opts = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    let flood_opts = hookline_bench::login_flood::LoginFloodOptions {
        requests: requests.max(1),
        logins: logins.max(1),
        bin_dir: opts.bin_dir.clone(),
        pg_base_url: opts.pg_base_url.clone(),
        out_dir: opts.out_dir.clone(),
    };
    match hookline_bench::login_flood::run(&flood_opts).await {
        Ok(report) => {
            written(
                hookline_bench::login_flood::write_report(&report, &opts.out_dir).map(|p| vec![p]),
            );
            verdict(report.quiet.ok == report.requests && report.flood.ok == report.requests)
        }
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn billing_round(
    args: Args,
    requests: usize,
    subscriptions: usize,
    timeout_secs: u64,
) -> ExitCode {
    let opts = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    let round_opts = hookline_bench::billing_round::BillingRoundOptions {
        requests: requests.max(1),
        subscriptions: subscriptions.max(1),
        timeout: Duration::from_secs(timeout_secs.max(1)),
        bin_dir: opts.bin_dir.clone(),
        pg_base_url: opts.pg_base_url.clone(),
        amqp_url: opts.amqp_url.clone(),
        out_dir: opts.out_dir.clone(),
    };
    match hookline_bench::billing_round::run(&round_opts).await {
        Ok(report) => {
            written(
                hookline_bench::billing_round::write_report(&report, &opts.out_dir)
                    .map(|p| vec![p]),
            );
            verdict(report.pass)
        }
        Err(e) => {
            eprintln!("hookline-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn billing_round_takes_its_sizes_and_defaults_to_ten_thousand() {
        let args = Args::try_parse_from(["hookline-bench", "billing-round"]).expect("parses");
        match args.command {
            Some(Command::BillingRound {
                requests,
                subscriptions,
                timeout_secs,
            }) => assert_eq!((requests, subscriptions, timeout_secs), (300, 10_000, 900)),
            other => panic!("not billing-round: {other:?}"),
        }
        let args = Args::try_parse_from([
            "hookline-bench",
            "--out",
            "o",
            "billing-round",
            "--subscriptions",
            "50",
            "--requests",
            "20",
            "--timeout-secs",
            "60",
        ])
        .expect("parses");
        assert_eq!(args.out, PathBuf::from("o"));
        match args.command {
            Some(Command::BillingRound {
                requests,
                subscriptions,
                timeout_secs,
            }) => assert_eq!((requests, subscriptions, timeout_secs), (20, 50, 60)),
            other => panic!("not billing-round: {other:?}"),
        }
        assert!(
            Args::try_parse_from(["hookline-bench", "billing-round", "--subscriptions", "x"])
                .is_err()
        );
    }
}
