//! `hookline-core`: what every hookline process shares — configuration, the database pool and migrations, the
//! stored-event model and telemetry.

pub mod config;
pub mod consumers;
pub mod db;
pub mod dead_letters;
pub mod events;
pub mod markers;
pub mod telemetry;

pub use config::{Config, ConfigError, ProviderConfig};
pub use db::MIGRATOR;
pub mod retention;
pub mod supervisor;
