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

fn main() -> anyhow::Result<()> {
    hookline_core::telemetry::no_error_backtraces();
    let args = Args::parse();
    let (config, _telemetry) =
        hookline_core::service_start(args.config.as_deref(), "hookline-worker")?;
    // Fault-injection builds read FAILPOINTS=name=action;… from the environment.
    #[cfg(feature = "failpoints")]
    let _scenario = fail::FailScenario::setup();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(hookline_worker::run(config))
}
