//! `[api]`: the merchant-facing API (payment intents, refunds) on its own listener, and its clients.
//!
//! The section belongs to this crate: its raw shape, validation, defaults, bounds and tests live here, read from
//! the same document as every other section through [`Config::parse_document`], with the same field paths in
//! errors (`api.clients[1].keys[0]: …`). Keys may name an environment variable (`env:NAME`), resolved by core's
//! one [`resolve_env`]. The listener is checked against `edge.listen`, read by
//! [`EdgeConfig`] (`hookline-web`'s).

use std::net::SocketAddr;
use std::time::Duration;

use hookline_core::config::{between, positive, resolve_env, Env};
use hookline_core::{Config, ConfigError};
use hookline_web::EdgeConfig;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// `api.intent_expiry_secs` when absent: a day.
pub const DEFAULT_INTENT_EXPIRY_SECS: u64 = 86_400;
/// The largest `api.intent_expiry_secs`: 30 days.
pub const MAX_INTENT_EXPIRY_SECS: u64 = 30 * 86_400;

/// `api.gateway_wait_ms` when absent: how long a cancel or capture asked of the gateway waits for its answer.
pub const DEFAULT_GATEWAY_WAIT_MS: u64 = 5_000;
/// The largest `api.gateway_wait_ms` (the merchant's HTTP client waits that long).
pub const MAX_GATEWAY_WAIT_MS: u64 = 10_000;

/// `[api]`: the merchant-facing API (payment intents, refunds), served on its own listener.
#[derive(Clone)]
pub struct ApiConfig {
    /// Address of the API listener (never the providers' `edge.listen`).
    pub listen: SocketAddr,
    /// The API's clients (`[[api.clients]]`, plus the legacy `[api] keys` as the client
    /// [`LEGACY_API_CLIENT`]). Intents, refunds and idempotency keys belong to a client's *name*, so removing,
    /// reordering or rotating keys never changes what a client sees.
    pub clients: Vec<ApiClient>,
    /// How long an `Idempotency-Key` and its stored response are kept (default 24 h).
    pub idempotency_window: Duration,
    /// How long an intent may wait for its confirm (`requires_confirmation`) before hookline cancels it as
    /// `expired`, releasing its order (`intent_expiry_secs`, default 24 h, at most 30 days).
    pub intent_expiry: Duration,
    /// How long `POST …/cancel` and `…/capture` wait for the gateway's answer to the operation they queued before
    /// answering 202 (`gateway_wait_ms`, default 5 s, 0: never wait, at most 10 s).
    pub gateway_wait: Duration,
    /// Whether a webhook endpoint made through the API may point at loopback, private, link-local or metadata
    /// addresses (`allow_private_webhook_urls`, default false: tests and one-host deployments only).
    pub allow_private_webhook_urls: bool,
}

impl std::fmt::Debug for ApiConfig {
    // Written by hand so the number of keys is visible but never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("listen", &self.listen)
            .field("clients", &self.clients)
            .field("idempotency_window", &self.idempotency_window)
            .field("intent_expiry", &self.intent_expiry)
            .field("gateway_wait", &self.gateway_wait)
            .field(
                "allow_private_webhook_urls",
                &self.allow_private_webhook_urls,
            )
            .finish()
    }
}

/// The client name the legacy `[api] keys` list stands for (all its keys are one client), and what the
/// migration `20261202000012_api_clients` maps the old index-based rows to.
pub const LEGACY_API_CLIENT: &str = "default";

/// Longest API client name (`[a-z0-9_-]`; stored on intents and idempotency keys).
pub const MAX_API_CLIENT_NAME_BYTES: usize = 64;

/// One `[[api.clients]]` entry: a stable name and the Bearer keys that authenticate as it (several at once
/// while one is rotated).
#[derive(Clone)]
pub struct ApiClient {
    /// Stable identity: what intents, refunds and idempotency keys are stored under.
    pub name: String,
    /// Accepted Bearer tokens (`env:VAR` allowed). Never logged.
    pub keys: Vec<SecretString>,
    /// A merchant's back office (`all_events = true`): its events feed and its webhook endpoints see every fact,
    /// payments that arrived only by webhook included, not only those about what it owns.
    pub all_events: bool,
}

impl std::fmt::Debug for ApiClient {
    // Written by hand so the number of keys is visible but never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("name", &self.name)
            .field("keys", &format_args!("[{} redacted]", self.keys.len()))
            .field("all_events", &self.all_events)
            .finish()
    }
}

/// The whole file as far as the API is concerned: every other top-level key is another crate's (core refuses the
/// unknown ones), unknown keys *inside* `[api]` are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    api: Option<RawApi>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    listen: Option<String>,
    keys: Option<Vec<String>>,
    clients: Option<Vec<RawApiClient>>,
    idempotency_window_secs: Option<u64>,
    intent_expiry_secs: Option<u64>,
    gateway_wait_ms: Option<u64>,
    allow_private_webhook_urls: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApiClient {
    name: Option<String>,
    keys: Option<Vec<String>>,
    all_events: Option<bool>,
}

impl ApiConfig {
    /// Parses and validates `[api]` from the document `config` was loaded from; `None` when the section is absent
    /// (no API). `env` resolves the keys' `env:NAME` references; the listener is checked against `edge.listen`.
    pub fn from_config(config: &Config, env: &dyn Env) -> Result<Option<ApiConfig>, ConfigError> {
        match config.parse_document::<Document>()?.api {
            Some(raw) => api(raw, EdgeConfig::from_config(config)?.listen, env).map(Some),
            None => Ok(None),
        }
    }
}

fn api(a: RawApi, edge_listen: SocketAddr, env: &dyn Env) -> Result<ApiConfig, ConfigError> {
    let text = a
        .listen
        .ok_or_else(|| ConfigError::invalid("api.listen", "is required"))?;
    let listen: SocketAddr = text.parse().map_err(|_| {
        ConfigError::invalid(
            "api.listen",
            format!("'{text}' is not an address like 127.0.0.1:8081"),
        )
    })?;
    if listen == edge_listen && listen.port() != 0 {
        return Err(ConfigError::invalid(
            "api.listen",
            "must differ from edge.listen: the providers' listener never serves the API",
        ));
    }
    let mut raw_clients: Vec<(String, String, Vec<String>, bool)> = Vec::new();
    if let Some(keys) = a.keys {
        // Legacy `[api] keys`: every listed key is one anonymous client.
        raw_clients.push((
            LEGACY_API_CLIENT.to_string(),
            "api.keys".to_string(),
            keys,
            false,
        ));
    }
    for (i, c) in a.clients.unwrap_or_default().into_iter().enumerate() {
        let f = format!("api.clients[{i}]");
        let name = c
            .name
            .ok_or_else(|| ConfigError::invalid(format!("{f}.name"), "is required"))?;
        if name.is_empty()
            || name.len() > MAX_API_CLIENT_NAME_BYTES
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return Err(ConfigError::invalid(
                format!("{f}.name"),
                format!("must be 1 to {MAX_API_CLIENT_NAME_BYTES} characters of a-z, 0-9, _ and -"),
            ));
        }
        if raw_clients.iter().any(|(seen, _, _, _)| *seen == name) {
            return Err(ConfigError::invalid(
                format!("{f}.name"),
                if name == LEGACY_API_CLIENT {
                    format!("'{name}' is the client of the legacy api.keys; move those keys into this client")
                } else {
                    format!("repeats the client name '{name}'")
                },
            ));
        }
        raw_clients.push((
            name,
            format!("{f}.keys"),
            c.keys.unwrap_or_default(),
            c.all_events.unwrap_or(false),
        ));
    }
    if raw_clients.is_empty() {
        return Err(ConfigError::invalid(
            "api.clients",
            "at least one client is required ([[api.clients]] with a name and keys)",
        ));
    }
    let mut clients: Vec<ApiClient> = Vec::with_capacity(raw_clients.len());
    for (name, f, keys_raw, all_events) in raw_clients {
        if keys_raw.is_empty() {
            return Err(ConfigError::invalid(&f, "at least one key is required"));
        }
        let mut keys: Vec<SecretString> = Vec::with_capacity(keys_raw.len());
        for (i, k) in keys_raw.into_iter().enumerate() {
            let f = format!("{f}[{i}]");
            let value = resolve_env(&f, k, env)?;
            // A Bearer token: visible ASCII only, so it travels in a header unchanged.
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::invalid(
                    &f,
                    "must be a non-empty token of visible ASCII characters (no spaces)",
                ));
            }
            let seen = keys
                .iter()
                .chain(clients.iter().flat_map(|c| c.keys.iter()));
            if seen.into_iter().any(|s| s.expose_secret() == value) {
                return Err(ConfigError::invalid(
                    &f,
                    "repeats an earlier key (a key belongs to exactly one client)",
                ));
            }
            keys.push(SecretString::from(value));
        }
        clients.push(ApiClient {
            name,
            keys,
            all_events,
        });
    }
    Ok(ApiConfig {
        listen,
        clients,
        idempotency_window: Duration::from_secs(positive(
            a.idempotency_window_secs,
            86_400,
            "api.idempotency_window_secs",
        )?),
        intent_expiry: Duration::from_secs(between(
            a.intent_expiry_secs,
            DEFAULT_INTENT_EXPIRY_SECS,
            MAX_INTENT_EXPIRY_SECS,
            "api.intent_expiry_secs",
        )?),
        gateway_wait: Duration::from_millis(match a.gateway_wait_ms {
            None => DEFAULT_GATEWAY_WAIT_MS,
            Some(ms) if ms <= MAX_GATEWAY_WAIT_MS => ms,
            Some(_) => {
                return Err(ConfigError::invalid(
                    "api.gateway_wait_ms",
                    format!("must be between 0 and {MAX_GATEWAY_WAIT_MS}"),
                ))
            }
        }),
        allow_private_webhook_urls: a.allow_private_webhook_urls.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secrecy::ExposeSecret;

    use hookline_core::config::Env;
    use hookline_core::{Config, ConfigError};

    use super::{ApiConfig, LEGACY_API_CLIENT};

    const NO_ENV: [(&str, &str); 0] = [];

    /// `[api]` of `text` with the environment `env`, validated as a process composing it does.
    fn parse(text: &str, env: &dyn Env) -> Result<Option<ApiConfig>, ConfigError> {
        let config = Config::from_toml_str(text, "test.toml", env)?;
        ApiConfig::from_config(&config, env)
    }

    /// The message `text` is rejected with (panics when it is accepted: a test expected a rejection).
    fn err(text: &str) -> String {
        parse(text, &NO_ENV)
            .expect_err("config should be rejected")
            .to_string()
    }

    #[test]
    fn api_section_is_optional_validated_and_its_keys_redacted() {
        assert!(parse("", &NO_ENV).unwrap().is_none());
        let env = [("API_KEY_2", "sk_hl_second_SUPERSECRET")];
        let c = parse(
            "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"sk_hl_first_SUPERSECRET\", \"env:API_KEY_2\"]\n",
            &env,
        )
        .unwrap();
        let api = c.as_ref().unwrap();
        assert_eq!(api.listen.to_string(), "127.0.0.1:8081");
        assert_eq!(api.clients.len(), 1);
        assert_eq!(api.clients[0].name, LEGACY_API_CLIENT);
        assert_eq!(
            api.clients[0].keys[1].expose_secret(),
            "sk_hl_second_SUPERSECRET"
        );
        assert_eq!(api.idempotency_window, Duration::from_secs(86_400));
        assert!(!format!("{c:?}").contains("SUPERSECRET"));
        assert_eq!(
            err("[api]\nlisten = \"127.0.0.1:8081\"\nkeys = []"),
            "api.keys: at least one key is required"
        );
        assert!(err("[api]\nlisten = \"127.0.0.1:8081\"").starts_with("api.clients:"));
        assert!(err("[api]\nkeys = [\"k\"]").starts_with("api.listen:"));
        assert!(
            err("[api]\nlisten = \"127.0.0.1:8080\"\nkeys = [\"k\"]").starts_with("api.listen:")
        );
        assert!(
            err("[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"a b\"]").starts_with("api.keys[0]:")
        );
        assert!(
            err("[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"k\", \"k\"]")
                .starts_with("api.keys[1]:")
        );
        assert!(
            err("[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"env:NOPE_NOT_SET\"]")
                .starts_with("api.keys[0]: environment variable")
        );
        assert!(err(
            "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"k\"]\nidempotency_window_secs = 0"
        )
        .starts_with("api.idempotency_window_secs:"));
        // The wait for the gateway's answer to a cancel or capture: 5 s unless set, 0 allowed, at most 10 s.
        assert_eq!(api.gateway_wait, Duration::from_secs(5));
        let base = "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"k\"]\n";
        let no_wait = parse(&format!("{base}gateway_wait_ms = 0"), &NO_ENV).unwrap();
        assert_eq!(no_wait.unwrap().gateway_wait, Duration::ZERO);
        assert_eq!(
            err(&format!("{base}gateway_wait_ms = 10001")),
            "api.gateway_wait_ms: must be between 0 and 10000"
        );
    }

    #[test]
    fn api_clients_have_validated_unique_names_and_keys() {
        let env = [("SHOP_NEXT", "sk_shop_next_SUPERSECRET")];
        let c = parse(
            "[api]\nlisten = \"127.0.0.1:8081\"\n\
             [[api.clients]]\nname = \"shop\"\nkeys = [\"sk_shop_SUPERSECRET\", \"env:SHOP_NEXT\"]\n\
             [[api.clients]]\nname = \"billing-app_2\"\nkeys = [\"sk_billing\"]\n",
            &env,
        )
        .unwrap();
        let api = c.as_ref().unwrap();
        let names: Vec<&str> = api.clients.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["shop", "billing-app_2"]);
        assert_eq!(api.clients[0].keys.len(), 2);
        assert!(!format!("{c:?}").contains("SUPERSECRET"));
        let client = |name: &str, keys: &str| {
            format!("[[api.clients]]\nname = \"{name}\"\nkeys = [{keys}]\n")
        };
        let base = "[api]\nlisten = \"127.0.0.1:8081\"\n";
        for bad in ["", "Shop", "a b", "é", &"n".repeat(65)] {
            assert!(
                err(&format!("{base}{}", client(bad, "\"k\""))).starts_with("api.clients[0].name:"),
                "{bad:?}"
            );
        }
        assert!(
            err(&format!("{base}{}", "[[api.clients]]\nkeys = [\"k\"]\n"))
                .starts_with("api.clients[0].name: is required")
        );
        assert!(err(&format!(
            "{base}{}{}",
            client("a", "\"k1\""),
            client("a", "\"k2\"")
        ))
        .starts_with("api.clients[1].name: repeats"));
        // A key belongs to one client only.
        assert!(err(&format!(
            "{base}{}{}",
            client("a", "\"k1\""),
            client("b", "\"k1\"")
        ))
        .starts_with("api.clients[1].keys[0]: repeats an earlier key"));
        assert!(err(&format!("{base}{}", client("a", ""))).starts_with("api.clients[0].keys:"));
        // The legacy list is the client "default", alongside named clients, and keeps that name to itself.
        let mixed = parse(
            &format!(
                "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"old\"]\n{}",
                client("shop", "\"new\"")
            ),
            &NO_ENV,
        )
        .unwrap();
        let names: Vec<String> = mixed.unwrap().clients.into_iter().map(|c| c.name).collect();
        assert_eq!(names, [LEGACY_API_CLIENT, "shop"]);
        assert!(err(&format!(
            "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"old\"]\n{}",
            client("default", "\"new\"")
        ))
        .starts_with("api.clients[0].name: 'default' is the client of the legacy api.keys"));
    }
}
