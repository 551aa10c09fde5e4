//! `[relay]`: the transactional-outbox publisher (embedded in the edge or `hookline relay`).
//!
//! The section belongs to this crate, where the relay runs ([`crate::Relay`], started by the edge or by
//! `hookline relay`): read from the same document as every other section through [`Config::parse_document`],
//! with the same field paths in errors.

use std::time::Duration;

use hookline_core::config::{between, linger, positive};
use hookline_core::{Config, ConfigError};
use serde::Deserialize;

/// Largest `relay.events_per_message` (what a worker reads in one message, `hookline_bus::message::BUNDLE_MAX`).
pub const EVENTS_PER_MESSAGE_MAX: usize = 1024;

/// `[relay]`: the transactional-outbox publisher.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Run the relay inside the edge process (publish right after each commit).
    pub embedded: bool,
    /// How often the sweeper looks for committed-but-unpublished events.
    pub sweep_interval: Duration,
    /// The sweeper only takes rows older than this, leaving fresh ones to the fast path.
    pub sweep_min_age: Duration,
    /// Rows per sweep batch (one transaction, pipelined publishes).
    pub batch_size: u32,
    /// Most events per AMQP message on the events queue (1 = one message per event, what workers before
    /// bundles read): events of one publish round that share a routing key travel as one message, because
    /// RabbitMQ's cost is per message. At most [`EVENTS_PER_MESSAGE_MAX`].
    pub events_per_message: usize,
    /// How long a fast-path batch that is not full waits for more committed events before its publish round
    /// (0 = never): under ingest pressure fewer, larger rounds for a few milliseconds of relay lag.
    pub linger: Duration,
    /// One deadline for a batch's writes and confirms: past it the batch is treated as unpublished and the
    /// publisher replaced.
    pub confirm_timeout: Duration,
    /// An unpublished event older than this needs attention: `hookline status` exits 1 (its
    /// `--max-unpublished-age` overrides it for one run).
    pub max_unpublished_age: Duration,
}

/// The whole file as far as the relay is concerned: every other top-level key is another crate's (core refuses
/// the unknown ones), unknown keys *inside* `[relay]` are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    relay: RawRelay,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    embedded: Option<bool>,
    sweep_interval_ms: Option<u64>,
    sweep_min_age_ms: Option<u64>,
    batch_size: Option<u32>,
    linger_ms: Option<u64>,
    events_per_message: Option<u64>,
    confirm_timeout_ms: Option<u64>,
    max_unpublished_age_secs: Option<u64>,
}

impl RelayConfig {
    /// Parses and validates `[relay]` from the document `config` was loaded from (defaults when absent).
    pub fn from_config(config: &Config) -> Result<RelayConfig, ConfigError> {
        relay(config.parse_document::<Document>()?.relay)
    }
}

fn relay(r: RawRelay) -> Result<RelayConfig, ConfigError> {
    let relay = RelayConfig {
        embedded: r.embedded.unwrap_or(true),
        sweep_interval: Duration::from_millis(positive(
            r.sweep_interval_ms,
            1000,
            "relay.sweep_interval_ms",
        )?),
        sweep_min_age: Duration::from_millis(r.sweep_min_age_ms.unwrap_or(2000)),
        batch_size: positive(r.batch_size.map(u64::from), 500, "relay.batch_size")? as u32,
        linger: linger(r.linger_ms, "relay.linger_ms")?,
        events_per_message: between(
            r.events_per_message,
            32,
            EVENTS_PER_MESSAGE_MAX as u64,
            "relay.events_per_message",
        )? as usize,
        confirm_timeout: Duration::from_millis(positive(
            r.confirm_timeout_ms,
            10_000,
            "relay.confirm_timeout_ms",
        )?),
        max_unpublished_age: Duration::from_secs(positive(
            r.max_unpublished_age_secs,
            60,
            "relay.max_unpublished_age_secs",
        )?),
    };
    Ok(relay)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hookline_core::{Config, ConfigError};

    use super::RelayConfig;

    const NO_ENV: [(&str, &str); 0] = [];

    fn parse(text: &str) -> Result<RelayConfig, ConfigError> {
        RelayConfig::from_config(&Config::from_toml_str(text, "test.toml", &NO_ENV)?)
    }

    fn err(text: &str) -> String {
        parse(text)
            .expect_err("config should be rejected")
            .to_string()
    }

    #[test]
    fn relay_linger_is_bounded_and_zero_turns_it_off() {
        let linger = |text: &str| parse(text).unwrap().linger;
        assert_eq!(linger(""), Duration::from_millis(5));
        assert_eq!(linger("[relay]\nlinger_ms = 0"), Duration::ZERO);
        assert_eq!(linger("[relay]\nlinger_ms = 1000"), Duration::from_secs(1));
        assert!(err("[relay]\nlinger_ms = 1001").starts_with("relay.linger_ms:"));
        assert!(err("[relay]\nlinger_ms = -1").contains("linger_ms"));
        assert!(err("[relay]\nlinger_ms = \"5\"").contains("linger_ms"));
    }

    #[test]
    fn events_per_message_is_bounded() {
        let per = |text: &str| parse(text).unwrap().events_per_message;
        assert_eq!(per(""), 32);
        assert_eq!(per("[relay]\nevents_per_message = 1"), 1);
        assert_eq!(per("[relay]\nevents_per_message = 1024"), 1024);
        assert!(err("[relay]\nevents_per_message = 0").starts_with("relay.events_per_message:"));
        assert!(err("[relay]\nevents_per_message = 1025").starts_with("relay.events_per_message:"));
    }
}
