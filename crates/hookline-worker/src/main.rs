//! `hookline-worker`: consumes events and applies their payment effects exactly once.

use std::path::PathBuf;

use clap::Parser;

/// Consume stored events from RabbitMQ and apply their effects exactly once.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Configuration file (TOML), shared with the edge. Defaults to $HOOKLINE_CONFIG, then built-in defaults.
    #[arg(long, short)]
    config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    hookline_core::telemetry::init_tracing();
    // Fault-injection builds read FAILPOINTS=name=action;… from the environment.
    #[cfg(feature = "failpoints")]
    let _scenario = fail::FailScenario::setup();
    let config = hookline_core::Config::load(args.config.as_deref())?;
    let worker = hookline_worker::payments_worker(&config)?;
    worker.run(hookline_worker::shutdown_signal()).await
}
