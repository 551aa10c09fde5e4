//! `[edge]`: the HTTP receiver of the providers' webhooks (listener, limits, timeouts, group commit).
//!
//! The section belongs to this crate, not to `hookline-edge`: its pool, timeouts and workers are every HTTP
//! listener's ([`Limits::of_edge`](crate::Limits::of_edge), the merchant API's pool, the console's limits), and
//! `hookline-edge` depends on `hookline-api`, so the section would close an import circle there. Its raw shape,
//! validation, defaults, bounds and tests live here, read from the same document as every other section through
//! [`Config::parse_document`], with the same field paths in errors (`edge.listen: …`).

use std::net::SocketAddr;
use std::time::Duration;

use hookline_core::config::positive;
use hookline_core::{Config, ConfigError};
use serde::Deserialize;

/// `[edge]`: the HTTP receiver.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Largest accepted request body; larger ones get 413 without being buffered.
    pub max_body_bytes: usize,
    /// Budget for storing one event (pool acquire + INSERT). Past it the edge answers 503 so the provider retries.
    pub db_timeout: Duration,
    /// Size of the edge's connection pool.
    pub db_max_connections: u32,
    /// A client must deliver its request headers within this time (408 otherwise).
    pub client_request_timeout: Duration,
    /// A client must deliver its whole body within this time (408 otherwise): defeats trickled bodies.
    pub body_read_timeout: Duration,
    /// On SIGTERM, in-flight requests get this long to finish.
    pub shutdown_timeout: Duration,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// Most rows written by one multi-row INSERT (group commit); 1 writes each request on its own.
    pub batch_max: usize,
    /// Batches in flight at once (each holds one pooled connection while it writes).
    pub batch_writers: usize,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdge {
    listen: Option<String>,
    max_body_bytes: Option<usize>,
    db_timeout_ms: Option<u64>,
    db_max_connections: Option<u32>,
    client_request_timeout_ms: Option<u64>,
    body_read_timeout_ms: Option<u64>,
    shutdown_timeout_secs: Option<u64>,
    workers: Option<usize>,
    batch_max: Option<usize>,
    batch_writers: Option<usize>,
}

/// The whole file as far as the edge settings are concerned: every other top-level key is another crate's (core
/// refuses the unknown ones), unknown keys *inside* `[edge]` are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    edge: RawEdge,
}

impl EdgeConfig {
    /// Parses and validates `[edge]` from the document `config` was loaded from; the defaults when the section
    /// is absent (every process has an edge's settings, whether or not it serves the providers).
    pub fn from_config(config: &Config) -> Result<EdgeConfig, ConfigError> {
        edge(config.parse_document::<Document>()?.edge)
    }
}

fn edge(e: RawEdge) -> Result<EdgeConfig, ConfigError> {
    let listen = e.listen.unwrap_or_else(|| "127.0.0.1:8080".to_string());
    let listen: SocketAddr = listen.parse().map_err(|_| {
        ConfigError::invalid(
            "edge.listen",
            format!("'{listen}' is not an address like 127.0.0.1:8080"),
        )
    })?;
    let max_body_bytes = e.max_body_bytes.unwrap_or(1024 * 1024);
    if max_body_bytes == 0 {
        return Err(ConfigError::invalid(
            "edge.max_body_bytes",
            "must be greater than 0",
        ));
    }
    let db_timeout_ms = e.db_timeout_ms.unwrap_or(1500);
    if db_timeout_ms == 0 {
        return Err(ConfigError::invalid(
            "edge.db_timeout_ms",
            "must be greater than 0",
        ));
    }
    let db_max_connections = e.db_max_connections.unwrap_or(16);
    if db_max_connections == 0 {
        return Err(ConfigError::invalid(
            "edge.db_max_connections",
            "must be greater than 0",
        ));
    }
    if e.batch_writers.unwrap_or(0) > db_max_connections as usize {
        return Err(ConfigError::invalid(
            "edge.batch_writers",
            format!("must not exceed edge.db_max_connections ({db_max_connections}): each batch holds a connection"),
        ));
    }
    let edge = EdgeConfig {
        listen,
        max_body_bytes,
        db_timeout: Duration::from_millis(db_timeout_ms),
        db_max_connections,
        client_request_timeout: Duration::from_millis(e.client_request_timeout_ms.unwrap_or(5000)),
        body_read_timeout: Duration::from_millis(e.body_read_timeout_ms.unwrap_or(10_000)),
        shutdown_timeout: Duration::from_secs(e.shutdown_timeout_secs.unwrap_or(30)),
        workers: e.workers.unwrap_or(0),
        batch_max: positive(e.batch_max.map(|v| v as u64), 256, "edge.batch_max")? as usize,
        // Default: 4 batches in flight, but never more than the pool can serve.
        batch_writers: positive(
            e.batch_writers.map(|v| v as u64),
            4.min(u64::from(db_max_connections)),
            "edge.batch_writers",
        )? as usize,
    };
    Ok(edge)
}

#[cfg(test)]
mod tests {
    use hookline_core::{Config, ConfigError};

    use super::EdgeConfig;

    const NO_ENV: [(&str, &str); 0] = [];

    /// `[edge]` of `text`, validated as a process composing it does.
    fn parse(text: &str) -> Result<EdgeConfig, ConfigError> {
        let config = Config::from_toml_str(text, "test.toml", &NO_ENV)?;
        EdgeConfig::from_config(&config)
    }

    /// The message `text` is rejected with (panics when it is accepted: a test expected a rejection).
    fn err(text: &str) -> String {
        parse(text)
            .expect_err("config should be rejected")
            .to_string()
    }

    #[test]
    fn defaults_point_at_localhost() {
        let e = parse("").unwrap();
        assert_eq!(e.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(e.max_body_bytes, 1_048_576);
        assert_eq!(e.db_max_connections, 16);
        assert_eq!(e.batch_max, 256);
        assert_eq!(e.batch_writers, 4);
    }

    #[test]
    fn unknown_fields_and_bad_listen_are_rejected() {
        assert!(err("[edge]\nlisten_addr = \"x\"").contains("listen_addr"));
        assert!(err("[edge]\nlisten = \"nope\"").starts_with("edge.listen:"));
    }

    #[test]
    fn bounds_name_the_key() {
        assert!(err("[edge]\nmax_body_bytes = 0").starts_with("edge.max_body_bytes:"));
        assert!(err("[edge]\ndb_timeout_ms = 0").starts_with("edge.db_timeout_ms:"));
        assert!(err("[edge]\ndb_max_connections = 0").starts_with("edge.db_max_connections:"));
        assert!(err("[edge]\ndb_max_connections = 2\nbatch_writers = 3")
            .starts_with("edge.batch_writers:"));
        assert_eq!(
            parse("[edge]\ndb_max_connections = 2")
                .unwrap()
                .batch_writers,
            2
        );
    }

    #[test]
    fn a_wrong_type_names_its_line_and_key_but_never_echoes_the_value() {
        let message =
            err("database_url = \"postgres://h/db\"\n[edge]\nmax_body_bytes = \"SUPERSECRET_3\"\n");
        assert!(!message.contains("SUPERSECRET"), "{message}");
        assert!(message.contains("line 3"), "{message}");
        assert!(message.contains("max_body_bytes"), "{message}");
    }

    #[test]
    fn a_section_of_the_wrong_shape_is_refused_by_core() {
        assert!(Config::from_toml_str("edge = 5", "t", &NO_ENV).is_err());
    }
}
