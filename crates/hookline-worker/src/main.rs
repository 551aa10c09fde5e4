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
    let cancel = hookline_worker::shutdown_signal();
    // Retention runs beside the consumer when [retention] auto_purge_older_than_days is set.
    let purge_pool = hookline_core::db::lazy_pool(
        &config.database_url,
        &hookline_core::db::PoolSettings::cli(),
    )?;
    let purge = tokio::spawn(hookline_worker::retention::run_periodic(
        purge_pool,
        config.retention.clone(),
        cancel.clone(),
    ));
    let result = worker.run(cancel.clone()).await;
    cancel.cancel();
    purge.await.ok();
    result
}
