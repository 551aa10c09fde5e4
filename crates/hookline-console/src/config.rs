//! `[console]`: the operator web console (its own process, `hookline console serve`), and its operators.
//!
//! The section belongs to this crate (it moved out of `hookline-core`, which therefore no longer links argon2
//! for the hash check): its raw shape, validation, defaults, bounds and tests live here, read from the same
//! document as every other section through [`Config::parse_document`], with the same field paths in errors
//! (`console.operators[0].password_hash: …`).

use std::net::SocketAddr;
use std::time::Duration;

use hookline_api::ApiConfig;
use hookline_core::config::{between, positive, Env};
use hookline_core::{Config, ConfigError};
use secrecy::SecretString;
use serde::Deserialize;

/// Where the console listens when `[console]` has no `listen`: loopback only, and no port deploy/up.sh uses
/// (edge 8080, sandbox 8090, worker 9091).
pub const DEFAULT_CONSOLE_LISTEN: &str = "127.0.0.1:8070";

/// Longest operator name (it is written into audit rows and shown in pages).
pub const MAX_OPERATOR_NAME_BYTES: usize = 64;

/// `[console]`: the operator web console, served by its own process (`hookline console serve`).
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Address of the console listener (default [`DEFAULT_CONSOLE_LISTEN`]; never `edge.listen`).
    pub listen: SocketAddr,
    /// Who may log in.
    pub operators: Vec<ConsoleOperator>,
    /// How long a session lasts after login (default 8 h).
    pub session_ttl: Duration,
    /// Mark the session cookie `Secure` (set it when the console is reached through HTTPS).
    pub secure_cookie: bool,
    /// How often the overview's history samples the figures (default 60 s, 1 to 3600). It keeps a bounded
    /// number of samples, so a shorter interval keeps a shorter history; tests set 1 s.
    pub history_sample: Duration,
}

/// One `[[console.operators]]` entry.
#[derive(Clone)]
pub struct ConsoleOperator {
    /// Login name, recorded in audit rows.
    pub name: String,
    /// Argon2id PHC string (`hookline console hash-password`). Never logged nor shown.
    pub password_hash: SecretString,
}

impl std::fmt::Debug for ConsoleOperator {
    // Written by hand so that the hash never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleOperator")
            .field("name", &self.name)
            .field("password_hash", &"[redacted]")
            .finish()
    }
}

/// The whole file as far as the console is concerned: every other top-level key is another crate's (core refuses
/// the unknown ones), unknown keys *inside* `[console]` are refused.
#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    console: Option<RawConsole>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConsole {
    listen: Option<String>,
    operators: Option<Vec<RawConsoleOperator>>,
    session_ttl_secs: Option<u64>,
    secure_cookie: Option<bool>,
    history_sample_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConsoleOperator {
    name: Option<String>,
    password_hash: Option<String>,
}

impl ConsoleConfig {
    /// Parses and validates `[console]` from the document `config` was loaded from; `None` when the section is
    /// absent (no console). The listener is checked against `edge.listen` and `api.listen` (whose section is
    /// read with the same `env` for its `env:NAME` keys), so the API's section must be valid too.
    pub fn from_config(
        config: &Config,
        env: &dyn Env,
    ) -> Result<Option<ConsoleConfig>, ConfigError> {
        let Some(raw) = config.parse_document::<Document>()?.console else {
            return Ok(None);
        };
        let api = ApiConfig::from_config(config, env)?;
        let edge = hookline_web::EdgeConfig::from_config(config)?;
        console(raw, edge.listen, api.map(|a| a.listen)).map(Some)
    }
}

fn console(
    c: RawConsole,
    edge_listen: SocketAddr,
    api_listen: Option<SocketAddr>,
) -> Result<ConsoleConfig, ConfigError> {
    let text = c
        .listen
        .unwrap_or_else(|| DEFAULT_CONSOLE_LISTEN.to_string());
    let listen: SocketAddr = text.parse().map_err(|_| {
        ConfigError::invalid(
            "console.listen",
            format!("'{text}' is not an address like 127.0.0.1:8070"),
        )
    })?;
    if listen.port() != 0 && (listen == edge_listen || Some(listen) == api_listen) {
        return Err(ConfigError::invalid(
            "console.listen",
            "must differ from edge.listen and api.listen: the console has its own listener",
        ));
    }
    let raw_ops = c.operators.unwrap_or_default();
    if raw_ops.is_empty() {
        return Err(ConfigError::invalid(
            "console.operators",
            "at least one operator is required (create a hash with `hookline console hash-password`)",
        ));
    }
    let mut operators: Vec<ConsoleOperator> = Vec::with_capacity(raw_ops.len());
    for (i, o) in raw_ops.into_iter().enumerate() {
        let f = format!("console.operators[{i}]");
        let name = o.name.unwrap_or_default();
        if name.is_empty()
            || name.len() > MAX_OPERATOR_NAME_BYTES
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b))
        {
            return Err(ConfigError::invalid(
                format!("{f}.name"),
                format!(
                    "must be 1 to {MAX_OPERATOR_NAME_BYTES} characters among letters, digits and . _ - @"
                ),
            ));
        }
        if operators.iter().any(|seen| seen.name == name) {
            return Err(ConfigError::invalid(
                format!("{f}.name"),
                format!("operator '{name}' is configured twice"),
            ));
        }
        let hash = o.password_hash.unwrap_or_default();
        // Checked here, so that a typo is a startup error and not an operator who can never log in.
        let phc = argon2::PasswordHash::new(&hash).map_err(|e| {
            ConfigError::invalid(
                format!("{f}.password_hash"),
                format!(
                    "is not a PHC string ({e}); create one with `hookline console hash-password`"
                ),
            )
        })?;
        if phc.algorithm.as_str() != "argon2id" {
            return Err(ConfigError::invalid(
                format!("{f}.password_hash"),
                "must be an Argon2id hash ($argon2id$…)",
            ));
        }
        operators.push(ConsoleOperator {
            name,
            password_hash: SecretString::from(hash),
        });
    }
    Ok(ConsoleConfig {
        listen,
        operators,
        session_ttl: Duration::from_secs(positive(
            c.session_ttl_secs,
            8 * 3600,
            "console.session_ttl_secs",
        )?),
        secure_cookie: c.secure_cookie.unwrap_or(false),
        history_sample: Duration::from_secs(between(
            c.history_sample_secs,
            60,
            3600,
            "console.history_sample_secs",
        )?),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hookline_core::{Config, ConfigError};

    use super::{ConsoleConfig, DEFAULT_CONSOLE_LISTEN};

    const NO_ENV: [(&str, &str); 0] = [];

    /// `[console]` of `text`, validated as a process composing it does.
    fn parse(text: &str) -> Result<Option<ConsoleConfig>, ConfigError> {
        let config = Config::from_toml_str(text, "test.toml", &NO_ENV)?;
        ConsoleConfig::from_config(&config, &NO_ENV)
    }

    /// The message `text` is rejected with (panics when it is accepted: a test expected a rejection).
    fn err(text: &str) -> String {
        parse(text)
            .expect_err("config should be rejected")
            .to_string()
    }

    #[test]
    fn console_section_is_optional_validated_and_its_hashes_redacted() {
        const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$oGPB3w1RZHGHqBCLw06GGA$9TRg8+jFrd4mZMR+dWYoXgG0eNgIA02msXcGYuY56wU";
        let op = |name: &str, hash: &str| {
            format!("[[console.operators]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\n")
        };
        assert!(parse("").unwrap().is_none());
        let c = parse(&format!("[console]\n{}", op("alice", HASH))).unwrap();
        let console = c.as_ref().unwrap();
        assert_eq!(console.listen.to_string(), DEFAULT_CONSOLE_LISTEN);
        assert_eq!(console.operators[0].name, "alice");
        assert_eq!(console.session_ttl, Duration::from_secs(8 * 3600));
        assert!(!console.secure_cookie);
        assert!(
            !format!("{c:?}").contains("oGPB3w1RZHGHqBCLw06GGA"),
            "the hash is redacted"
        );
        assert!(err("[console]\n").starts_with("console.operators:"));
        assert!(err(&format!("[console]\n{}", op("alice", "plaintext")))
            .starts_with("console.operators[0].password_hash: is not a PHC string"));
        assert!(err(&format!(
            "[console]\n{}",
            op("alice", &HASH.replace("argon2id", "argon2i"))
        ))
        .starts_with("console.operators[0].password_hash: must be an Argon2id hash"));
        assert!(err(&format!(
            "[console]\n{}{}",
            op("alice", HASH),
            op("alice", HASH)
        ))
        .starts_with("console.operators[1].name:"));
        assert!(err(&format!("[console]\n{}", op("a b", HASH)))
            .starts_with("console.operators[0].name:"));
        assert!(
            err(&format!(
                "[console]\nlisten = \"127.0.0.1:8080\"\n{}",
                op("alice", HASH)
            ))
            .starts_with("console.listen:"),
            "never the providers' listener"
        );
        assert!(
            err(&format!(
                "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"k\"]\n[console]\nlisten = \"127.0.0.1:8081\"\n{}",
                op("alice", HASH)
            ))
            .starts_with("console.listen:"),
            "never the API's listener"
        );
        assert!(
            err(&format!(
                "[console]\nsession_ttl_secs = \"x\"\n{}",
                op("alice", HASH)
            ))
            .contains("line 2, column 20 (key session_ttl_secs)"),
            "a wrong type names its line and key, as when core parsed the section"
        );
        assert!(err(&format!(
            "[console]\nlisten = \"nowhere\"\n{}",
            op("alice", HASH)
        ))
        .starts_with("console.listen:"));
        assert!(err(&format!(
            "[console]\nsession_ttl_secs = 0\n{}",
            op("alice", HASH)
        ))
        .starts_with("console.session_ttl_secs:"));
        assert_eq!(console.history_sample, Duration::from_secs(60));
        for hostile in ["0", "3601", "18446744073709551615", "-1", "\"60\"", "1.5"] {
            let e = err(&format!(
                "[console]\nhistory_sample_secs = {hostile}\n{}",
                op("alice", HASH)
            ));
            assert!(e.contains("history_sample_secs"), "{hostile}: {e}");
        }
        let c = parse(&format!(
            "[console]\nhistory_sample_secs = 1\n{}",
            op("alice", HASH)
        ))
        .unwrap();
        assert_eq!(
            c.unwrap().history_sample,
            Duration::from_secs(1),
            "tests sample every second"
        );
    }
}
