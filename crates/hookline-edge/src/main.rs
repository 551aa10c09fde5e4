//! `hookline-edge`: the HTTP receiver. All logic lives in the library; this only parses arguments.

use std::path::PathBuf;

use clap::Parser;

/// Receive provider webhooks, verify their signatures and store each event exactly once.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Configuration file (TOML). Defaults to $HOOKLINE_CONFIG, then built-in defaults.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Apply database migrations (creating the database if needed) before serving.
    #[arg(long)]
    migrate: bool,
}

fn main() -> anyhow::Result<()> {
    hookline_core::telemetry::no_error_backtraces();
    let args = Args::parse();
    let (config, _telemetry) =
        hookline_core::service_start(args.config.as_deref(), "hookline-edge")?;
    // Fault-injection builds read FAILPOINTS=name=action;… from the environment.
    #[cfg(feature = "failpoints")]
    let _scenario = fail::FailScenario::setup();
    actix_web::rt::System::new().block_on(async move {
        if args.migrate {
            hookline_core::db::migrate(&config.database_url).await?;
        }
        let app = hookline_edge::Application::build(config).await?;
        app.run_until_stopped().await
    })
}
