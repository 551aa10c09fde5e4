//! `hookline simulate` (placeholder, being written).

use std::process::ExitCode;

use clap::Args;
use hookline_core::Config;

/// Arguments of `hookline simulate`.
#[derive(Args, Debug)]
pub struct SimulateArgs {}

/// Runs the simulate.
pub async fn run(_config: &Config, _args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
