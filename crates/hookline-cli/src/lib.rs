//! `hookline`, the operator command line: `migrate`, `verify`.
//!
//! Exit codes are part of the interface: 0 success, 1 the operation ran and found a problem (e.g. an invalid
//! signature), 2 a usage error (clap's convention), 3 an operational failure (database unreachable, …).

mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The hookline operator command line.
#[derive(Parser, Debug)]
#[command(name = "hookline", version, about, propagate_version = true)]
pub struct Cli {
    /// Configuration file (TOML). Defaults to $HOOKLINE_CONFIG, then built-in defaults.
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create the database if it is missing and apply pending migrations. Safe to run repeatedly.
    Migrate,
    /// Check a webhook signature offline, exactly as the edge would, and say precisely why it fails.
    Verify(verify::VerifyArgs),
    /// Run the outbox relay on its own: publish committed-but-unpublished events to RabbitMQ until stopped
    /// (SIGTERM/Ctrl-C). Safe to run beside the edge's embedded relay and other relays (rows are claimed with
    /// FOR UPDATE SKIP LOCKED). `--once` sweeps the backlog once and exits.
    Relay {
        /// Sweep once and exit instead of running until stopped.
        #[arg(long)]
        once: bool,
    },
}

/// Parses the arguments, runs the command and maps the result to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    hookline_core::telemetry::init_tracing();
    match cli.command {
        Command::Verify(args) => verify::run(&args),
        Command::Relay { once } => {
            let result = (|| -> anyhow::Result<()> {
                let config = hookline_core::Config::load(cli.config.as_deref())?;
                let rt = tokio::runtime::Runtime::new()?;
                rt.block_on(relay(config, once))
            })();
            report(result)
        }
        Command::Migrate => {
            let result = (|| -> anyhow::Result<()> {
                let config = hookline_core::Config::load(cli.config.as_deref())?;
                let rt = tokio::runtime::Runtime::new()?;
                rt.block_on(hookline_core::db::migrate(&config.database_url))?;
                println!("database migrated");
                Ok(())
            })();
            report(result)
        }
    }
}

async fn relay(config: hookline_core::Config, once: bool) -> anyhow::Result<()> {
    use hookline_core::db::{self, PoolSettings};
    let pool = db::lazy_pool(&config.database_url, &PoolSettings::relay())?;
    let mut relay_config = config.relay.clone();
    if once {
        // An operator asking for a sweep wants everything unpublished, however fresh.
        relay_config.sweep_min_age = std::time::Duration::ZERO;
    }
    let relay = hookline_bus::Relay::new(
        pool,
        config.amqp_url.clone(),
        hookline_bus::Topology::new(&config.amqp.prefix, config.amqp.delivery_limit),
        relay_config,
        "hookline-relay",
    );
    if once {
        let mut relay = relay;
        let n = relay.sweep().await?;
        println!("published {n} events");
        return Ok(());
    }
    relay.run(None, hookline_worker::shutdown_signal()).await;
    Ok(())
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(3)
        }
    }
}
