//! `hookline-core`: what every hookline process shares — configuration, the database pool and migrations,
//! telemetry, the supervisor of background loops, input bounds, the outbound HTTP client — and the inbound
//! pipeline's own tables: raw events ([`events`]), the events waiting for RabbitMQ ([`event_outbox`]), the
//! processed markers ([`markers`]), dead letters ([`dead_letters`]), the audit trail of operator runs
//! ([`audit`]: `replay_runs`, written by every operator action of every feature) and the two seams: [`handler`] between the consumer
//! engine and the effects, and [`domain_events`] between the effects and their delivery (the facts an effect
//! writes in its own transaction: `domain_events`, `domain_outbox`).
//!
//! It must never: import a feature crate (payments, delivery, operations, the API, the console) or the
//! transports (actix, lapin); hold a business rule. Features depend on it, never the other way round.

pub mod audit;
pub mod config;
pub mod consumers;
pub mod db;
pub mod dead_letters;
pub mod domain_events;
pub mod event_outbox;
pub mod events;
pub mod handler;
pub mod http;
pub mod input;
pub mod markers;
pub mod retry;
pub mod telemetry;

pub use config::{Config, ConfigError, ProviderConfig};

/// The start of every hookline service's `main` after its arguments are parsed: the configuration
/// (`--config FILE`, else `$HOOKLINE_CONFIG`, else defaults), then logging and traces as its `[telemetry]` says
/// (`service` names the process in traces unless `telemetry.service_name` is set). Keep the returned guard
/// until `main` returns, outside the async runtime. Call [`telemetry::no_error_backtraces`] before parsing
/// arguments.
pub fn service_start(
    path: Option<&std::path::Path>,
    service: &str,
) -> Result<(Config, telemetry::Telemetry), ConfigError> {
    let config = Config::load(path)?;
    let telemetry = telemetry::init(&config.telemetry, service);
    Ok((config, telemetry))
}
pub use db::MIGRATOR;
pub mod supervisor;
