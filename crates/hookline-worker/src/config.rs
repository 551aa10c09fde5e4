//! `[worker]`: the consumer that applies payment effects (prefetch, concurrency, batching, its health listener).
//!
//! The section belongs to this crate, the process that composes the consumer: the consumer engine
//! (`hookline_consumer`) takes its own settings struct and never reads the file, so the keys that set it, the
//! pool and the health listener of the worker process are validated here, read from the same document as every
//! other section through [`Config::parse_document`], with the same field paths in errors.

use std::net::SocketAddr;
use std::time::Duration;

use hookline_core::config::{linger, positive};
use hookline_core::{Config, ConfigError};
use serde::Deserialize;

/// `[worker]`: the consumer.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Unacknowledged deliveries RabbitMQ may push to one worker process (`basic.qos`).
    pub prefetch: u16,
    /// Deliveries processed at once by one worker process.
    pub concurrency: usize,
    /// Size of the worker's connection pool.
    pub db_max_connections: u32,
    /// Most deliveries applied in one transaction (each in its own savepoint); 1 disables batching.
    pub batch_max: usize,
    /// While earlier batches are in flight, the longest a batch that is not full gathers more deliveries before
    /// it starts anyway (0 = never waits); with nothing in flight it starts at once.
    pub batch_linger: Duration,
    /// Where the worker serves `/healthz` and `/metrics`; `None` (the default) serves nothing.
    pub listen: Option<SocketAddr>,
}

/// The whole file as far as the worker is concerned: every other top-level key is another crate's (core refuses
/// the unknown ones), unknown keys *inside* `[worker]` are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    worker: RawWorker,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    listen: Option<String>,
    prefetch: Option<u16>,
    concurrency: Option<usize>,
    db_max_connections: Option<u32>,
    batch_max: Option<usize>,
    batch_linger_ms: Option<u64>,
}

impl WorkerConfig {
    /// Parses and validates `[worker]` from the document `config` was loaded from (defaults when absent).
    pub fn from_config(config: &Config) -> Result<WorkerConfig, ConfigError> {
        worker(config.parse_document::<Document>()?.worker)
    }
}

fn worker(w: RawWorker) -> Result<WorkerConfig, ConfigError> {
    let worker = WorkerConfig {
        prefetch: positive(w.prefetch.map(u64::from), 128, "worker.prefetch")? as u16,
        concurrency: positive(w.concurrency.map(|c| c as u64), 8, "worker.concurrency")? as usize,
        db_max_connections: positive(
            w.db_max_connections.map(u64::from),
            16,
            "worker.db_max_connections",
        )? as u32,
        batch_max: positive(w.batch_max.map(|b| b as u64), 32, "worker.batch_max")? as usize,
        batch_linger: linger(w.batch_linger_ms, "worker.batch_linger_ms")?,
        listen: match w.listen {
            None => None,
            Some(text) => Some(text.parse().map_err(|_| {
                ConfigError::invalid(
                    "worker.listen",
                    format!("'{text}' is not an address like 127.0.0.1:9091"),
                )
            })?),
        },
    };
    Ok(worker)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hookline_core::{Config, ConfigError};

    use super::WorkerConfig;

    const NO_ENV: [(&str, &str); 0] = [];

    fn parse(text: &str) -> Result<WorkerConfig, ConfigError> {
        WorkerConfig::from_config(&Config::from_toml_str(text, "test.toml", &NO_ENV)?)
    }

    fn err(text: &str) -> String {
        parse(text)
            .expect_err("config should be rejected")
            .to_string()
    }

    #[test]
    fn batch_linger_is_bounded_and_zero_turns_it_off() {
        let linger = |text: &str| parse(text).unwrap().batch_linger;
        assert_eq!(linger(""), Duration::from_millis(5));
        assert_eq!(linger("[worker]\nbatch_linger_ms = 0"), Duration::ZERO);
        assert!(err("[worker]\nbatch_linger_ms = 1001").starts_with("worker.batch_linger_ms:"));
        assert!(err("[worker]\nbatch_linger_ms = -1").contains("batch_linger_ms"));
        assert!(err("[worker]\nbatch_linger_ms = \"5\"").contains("batch_linger_ms"));
        assert!(err("[worker]\nprefetch = 0").starts_with("worker.prefetch:"));
        assert!(err("[worker]\nlisten = \"nope\"").starts_with("worker.listen:"));
        let defaults = parse("").unwrap();
        assert_eq!((defaults.prefetch, defaults.concurrency), (128, 8));
        assert!(defaults.listen.is_none());
    }
}
