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
}

/// Parses the arguments, runs the command and maps the result to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    hookline_core::telemetry::init_tracing();
    match cli.command {
        Command::Verify(args) => verify::run(&args),
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

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(3)
        }
    }
}
