//! `hookline-core`: what every hookline process shares — configuration, the database pool and migrations, the
//! stored-event model and telemetry.

pub mod audit;
pub mod billing;
pub mod config;
pub mod consumers;
pub mod currency;
pub mod db;
pub mod dead_letters;
pub mod destinations;
pub mod domain_events;
pub mod event_outbox;
pub mod events;
pub mod input;
pub mod intents;
pub mod markers;
pub mod outbox;
pub mod payments_view;
pub mod telemetry;

pub use config::{Config, ConfigError, ProviderConfig};

/// The start of every hookline service's `main` after its arguments are parsed: logging, then the
/// configuration (`--config FILE`, else `$HOOKLINE_CONFIG`, else defaults). Call
/// [`telemetry::no_error_backtraces`] before parsing arguments.
pub fn service_config(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
    telemetry::init_tracing();
    Config::load(path)
}
pub use db::MIGRATOR;
pub mod retention;
pub mod supervisor;
