//! `amqp_url` / `amqp_urls` and `[amqp]`: the RabbitMQ endpoints of one cluster, naming and queue policy.

use secrecy::SecretString;
use serde::Deserialize;

use super::{ConfigError, Env};

/// Default broker: the local RabbitMQ with the stock guest account.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Most broker endpoints `amqp_urls` may list (a RabbitMQ cluster has a handful of nodes; a longer list is a
/// mistake, and every reconnection may try them all).
pub const MAX_AMQP_ENDPOINTS: usize = 16;
/// Default `amqp.quorum_initial_group_size`: three replicas, so a three-node cluster keeps every quorum queue
/// with one node down. RabbitMQ caps it at the cluster's size, so it works on a single node too.
pub const DEFAULT_QUORUM_INITIAL_GROUP_SIZE: u32 = 3;
/// Largest accepted `amqp.quorum_initial_group_size` (Raft groups beyond this only cost latency).
pub const MAX_QUORUM_INITIAL_GROUP_SIZE: u32 = 9;

/// `[amqp]`: RabbitMQ naming and queue policy.
#[derive(Debug, Clone)]
pub struct AmqpConfig {
    /// Every exchange and queue name starts with this prefix, so several deployments (or tests) share a broker.
    pub prefix: String,
    /// Deliveries of one message before the quorum queue dead-letters it (crash loops, handler panics).
    pub delivery_limit: u32,
    /// Replicas of each quorum queue at declaration (`x-quorum-initial-group-size`); RabbitMQ uses
    /// min(this, cluster size) nodes.
    pub quorum_initial_group_size: u32,
}

/// One broker endpoint: its URL (secret: it may carry credentials) and `host:port`, the only part ever logged.
#[derive(Clone)]
pub struct AmqpEndpoint {
    /// The full URL, credentials included.
    pub url: SecretString,
    /// `host:port`, safe for logs and errors.
    pub label: String,
}

impl std::fmt::Debug for AmqpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

/// The validated broker endpoints (`amqp_url` = one, `amqp_urls` = the nodes of a cluster): never empty, at most
/// [`MAX_AMQP_ENDPOINTS`], each an `amqp://` or `amqps://` URL with a host. `hookline_bus::connect` tries them in
/// turn.
#[derive(Clone, Debug)]
pub struct AmqpEndpoints(Vec<AmqpEndpoint>);

impl AmqpEndpoints {
    /// Validates `urls`; errors name `field` (and the index for a list) but never quote a URL, which may hold a
    /// password.
    pub fn new(urls: &[String], field: &str) -> Result<AmqpEndpoints, ConfigError> {
        if urls.is_empty() {
            return Err(ConfigError::invalid(field, "must list at least one URL"));
        }
        if urls.len() > MAX_AMQP_ENDPOINTS {
            return Err(ConfigError::invalid(
                field,
                format!(
                    "lists {} URLs, at most {MAX_AMQP_ENDPOINTS} are accepted",
                    urls.len()
                ),
            ));
        }
        let list = urls.len() > 1 || field.ends_with('s');
        urls.iter()
            .enumerate()
            .map(|(i, url)| {
                let name = if list {
                    format!("{field}[{i}]")
                } else {
                    field.to_string()
                };
                Self::endpoint(url, &name)
            })
            .collect::<Result<Vec<_>, _>>()
            .map(AmqpEndpoints)
    }

    /// One URL (the `AMQP_URL` variable, tools and tests that take a single broker).
    pub fn single(url: &str) -> Result<AmqpEndpoints, ConfigError> {
        Self::new(&[url.to_string()], "amqp_url")
    }

    fn endpoint(url: &str, field: &str) -> Result<AmqpEndpoint, ConfigError> {
        let bad = || ConfigError::invalid(field, "must be an amqp:// or amqps:// URL with a host");
        if url.len() > 2048 {
            return Err(ConfigError::invalid(field, "is longer than 2048 bytes"));
        }
        let parsed = url::Url::parse(url).map_err(|_| bad())?;
        let default_port = match parsed.scheme() {
            "amqp" => 5672,
            "amqps" => 5671,
            _ => return Err(bad()),
        };
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(bad)?;
        Ok(AmqpEndpoint {
            url: SecretString::from(url.to_string()),
            label: format!("{host}:{}", parsed.port().unwrap_or(default_port)),
        })
    }

    /// The endpoints in configured order.
    pub fn endpoints(&self) -> &[AmqpEndpoint] {
        &self.0
    }

    /// Number of endpoints (at least one).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false (validation refuses an empty list); here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first endpoint.
    pub fn first(&self) -> &AmqpEndpoint {
        &self.0[0]
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAmqp {
    prefix: Option<String>,
    delivery_limit: Option<u32>,
    quorum_initial_group_size: Option<u32>,
}

/// The broker endpoints: `AMQP_URL` from the environment wins over the file's `amqp_url` / `amqp_urls` (one of
/// them, not both); the local broker when none is set.
pub(super) fn endpoints(
    amqp_url: Option<String>,
    amqp_urls: Option<Vec<String>>,
    env: &dyn Env,
) -> Result<AmqpEndpoints, ConfigError> {
    match (env.var("AMQP_URL"), amqp_url, amqp_urls) {
        (Some(url), _, _) => AmqpEndpoints::new(&[url], "AMQP_URL"),
        (None, Some(_), Some(_)) => Err(ConfigError::invalid(
            "amqp_urls",
            "set either amqp_url (one broker) or amqp_urls (a cluster), not both",
        )),
        (None, Some(url), None) => AmqpEndpoints::new(&[url], "amqp_url"),
        (None, None, Some(urls)) => AmqpEndpoints::new(&urls, "amqp_urls"),
        (None, None, None) => AmqpEndpoints::new(&[DEFAULT_AMQP_URL.to_string()], "amqp_url"),
    }
}

pub(super) fn amqp(a: RawAmqp) -> Result<AmqpConfig, ConfigError> {
    let prefix = a.prefix.unwrap_or_else(|| "hookline".to_string());
    if prefix.is_empty()
        || !prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(ConfigError::invalid(
            "amqp.prefix",
            "must be non-empty and use only letters, digits, '-', '_' or '.'",
        ));
    }

    let delivery_limit = a.delivery_limit.unwrap_or(20);
    if delivery_limit == 0 {
        return Err(ConfigError::invalid(
            "amqp.delivery_limit",
            "must be greater than 0",
        ));
    }
    let quorum_initial_group_size = a
        .quorum_initial_group_size
        .unwrap_or(DEFAULT_QUORUM_INITIAL_GROUP_SIZE);
    if !(1..=MAX_QUORUM_INITIAL_GROUP_SIZE).contains(&quorum_initial_group_size) {
        return Err(ConfigError::invalid(
            "amqp.quorum_initial_group_size",
            format!("must be between 1 and {MAX_QUORUM_INITIAL_GROUP_SIZE}"),
        ));
    }
    Ok(AmqpConfig {
        prefix,
        delivery_limit,
        quorum_initial_group_size,
    })
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::super::testing::{err, NO_ENV};
    use super::super::Config;
    use super::MAX_AMQP_ENDPOINTS;

    #[test]
    fn amqp_urls_lists_the_nodes_of_a_cluster_in_order() {
        let c = Config::from_toml_str(
            "amqp_urls = [\"amqp://u:pw@127.0.0.1:5701/%2f\", \"amqps://n2\", \"amqp://n3:5703\"]\n\
             [amqp]\nquorum_initial_group_size = 5\n",
            "t",
            &NO_ENV,
        )
        .unwrap();
        let labels: Vec<&str> = c
            .amqp_urls
            .endpoints()
            .iter()
            .map(|e| e.label.as_str())
            .collect();
        assert_eq!(labels, ["127.0.0.1:5701", "n2:5671", "n3:5703"]);
        assert_eq!(
            c.amqp_urls.endpoints()[0].url.expose_secret(),
            "amqp://u:pw@127.0.0.1:5701/%2f"
        );
        assert_eq!(c.amqp.quorum_initial_group_size, 5);
        // Debug shows where, never who.
        assert!(!format!("{c:?}").contains("pw@"));
    }

    #[test]
    fn amqp_urls_are_validated_by_key_without_quoting_credentials() {
        let cases = [
            ("amqp_urls = []", "amqp_urls: must list at least one URL"),
            (
                "amqp_urls = [\"amqp://h1\", \"http://u:SUPERSECRET@h2\"]",
                "amqp_urls[1]: must be an amqp",
            ),
            (
                "amqp_urls = [\"amqp://u:SUPERSECRET@\"]",
                "amqp_urls[0]: must be an amqp",
            ),
            (
                "amqp_url = \"redis://u:SUPERSECRET@h\"",
                "amqp_url: must be an amqp",
            ),
            (
                "amqp_url = \"amqp://a\"\namqp_urls = [\"amqp://b\"]",
                "amqp_urls: set either amqp_url",
            ),
            (
                "[amqp]\nquorum_initial_group_size = 0",
                "amqp.quorum_initial_group_size",
            ),
            (
                "[amqp]\nquorum_initial_group_size = 10",
                "amqp.quorum_initial_group_size",
            ),
        ];
        for (text, expected) in cases {
            let message = err(text);
            assert!(message.contains(expected), "{text}: {message}");
            assert!(!message.contains("SUPERSECRET"), "{message}");
        }
        let many: Vec<String> = (0..=MAX_AMQP_ENDPOINTS)
            .map(|i| format!("\"amqp://h{i}\""))
            .collect();
        let message = err(&format!("amqp_urls = [{}]", many.join(", ")));
        assert!(message.contains("at most 16"), "{message}");
    }
}
