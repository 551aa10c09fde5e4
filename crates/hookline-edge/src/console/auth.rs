//! Operators, passwords, sessions and CSRF tokens of the console.
//!
//! * Passwords are checked against the configured Argon2id PHC strings (on a blocking thread: a check costs tens
//!   of milliseconds by design). An unknown name is checked against a dummy hash, so the answer takes as long
//!   and says the same as for a wrong password: names cannot be enumerated.
//! * Failed logins are limited per client address and per name ([`MAX_FAILURES`] per [`FAILURE_WINDOW`]):
//!   past the limit the answer is 429 without checking anything.
//! * A session is a random 256-bit token in an `HttpOnly; SameSite=Strict` cookie; the server keeps only its
//!   SHA-256 digest, with the operator, an expiry and the session's CSRF token. Sessions live in memory: an edge
//!   restart logs every operator out (nothing to leak from the database, nothing to clean up).
//! * Every POST carries the session's CSRF token in a form field, compared in constant time; the login form
//!   carries a token bound to a short-lived pre-login cookie (double submit), so a third-party page cannot log
//!   a browser into an attacker's session either.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::{Argon2, PasswordHash, PasswordVerifier};
use hookline_core::config::ConsoleConfig;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "hookline_console_session";
/// Name of the pre-login cookie (the login form's CSRF token).
pub const LOGIN_COOKIE: &str = "hookline_console_login";
/// Failed logins accepted per client address and per name within [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 5;
/// The window of [`MAX_FAILURES`].
pub const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Most sessions kept at once (older ones are dropped first): bounds the memory an attacker with valid
/// credentials could make us hold.
const MAX_SESSIONS: usize = 10_000;
/// Most failure counters kept at once.
const MAX_COUNTERS: usize = 100_000;

/// A random 256-bit token, hex.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Constant-time equality of two tokens.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A logged-in operator.
#[derive(Debug, Clone)]
pub struct Session {
    /// The operator's configured name.
    pub operator: String,
    /// The token every POST of this session must carry.
    pub csrf: String,
    expires: Instant,
}

/// Why a login was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum LoginRefused {
    /// Wrong name or password (deliberately not told apart).
    BadCredentials,
    /// Too many failures from this address or for this name.
    RateLimited,
}

/// The console's operators and sessions.
pub struct Auth {
    operators: HashMap<String, SecretString>,
    /// Checked for unknown names, so they cost what a known name costs.
    dummy_hash: String,
    ttl: Duration,
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    failures: Mutex<HashMap<String, (Instant, u32)>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Auth({} operators, hashes redacted)",
            self.operators.len()
        )
    }
}

impl Auth {
    /// From `[console]`.
    pub fn new(config: &ConsoleConfig) -> anyhow::Result<Auth> {
        use argon2::password_hash::SaltString;
        use argon2::PasswordHasher;
        let salt = SaltString::generate(&mut OsRng);
        let dummy_hash = Argon2::default()
            .hash_password(random_token().as_bytes(), &salt)
            .map_err(|e| anyhow::anyhow!("cannot prepare the dummy password hash: {e}"))?
            .to_string();
        Ok(Auth {
            operators: config
                .operators
                .iter()
                .map(|o| (o.name.clone(), o.password_hash.clone()))
                .collect(),
            dummy_hash,
            ttl: config.session_ttl,
            sessions: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
        })
    }

    /// How long a session lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn limited(&self, keys: &[String]) -> bool {
        let now = Instant::now();
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter().any(|k| {
            failures.get(k).is_some_and(|(since, n)| {
                now.duration_since(*since) < FAILURE_WINDOW && *n >= MAX_FAILURES
            })
        })
    }

    fn count_failure(&self, keys: &[String]) {
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= MAX_COUNTERS {
            failures.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
        }
        for k in keys {
            let entry = failures.entry(k.clone()).or_insert((now, 0));
            if now.duration_since(entry.0) >= FAILURE_WINDOW {
                *entry = (now, 0);
            }
            entry.1 += 1;
        }
    }

    /// Checks `name` and `password` (from `peer`); on success opens a session and returns its cookie token.
    pub async fn login(
        &self,
        name: &str,
        password: SecretString,
        peer: Option<IpAddr>,
    ) -> Result<(String, Session), LoginRefused> {
        // A bounded name for the counter key: an attacker cannot grow memory with long names.
        let name_key: String = name.chars().take(64).collect();
        let keys = [
            format!("name:{name_key}"),
            format!("ip:{}", peer.map(|p| p.to_string()).unwrap_or_default()),
        ];
        if self.limited(&keys) {
            return Err(LoginRefused::RateLimited);
        }
        let known = self.operators.get(name);
        let hash = known
            .map(|h| h.expose_secret().to_string())
            .unwrap_or_else(|| self.dummy_hash.clone());
        let ok = actix_web::web::block(move || {
            PasswordHash::new(&hash).is_ok_and(|parsed| {
                Argon2::default()
                    .verify_password(password.expose_secret().as_bytes(), &parsed)
                    .is_ok()
            })
        })
        .await
        .unwrap_or(false);
        if !(ok && known.is_some()) {
            self.count_failure(&keys);
            return Err(LoginRefused::BadCredentials);
        }
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&keys[0]);
        let token = random_token();
        let session = Session {
            operator: name.to_string(),
            csrf: random_token(),
            expires: Instant::now() + self.ttl,
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        if sessions.len() >= MAX_SESSIONS {
            if let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| *k)
            {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(digest(&token), session.clone());
        Ok((token, session))
    }

    /// The live session of a cookie token, if any.
    pub fn session(&self, token: &str) -> Option<Session> {
        let key = digest(token);
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        match sessions.get(&key) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                sessions.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends a session.
    pub fn logout(&self, token: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&digest(token));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::SaltString;
    use argon2::PasswordHasher;
    use hookline_core::config::ConsoleOperator;

    fn auth() -> Auth {
        let salt = SaltString::generate(&mut OsRng);
        let hash = Argon2::default()
            .hash_password(b"a long enough password", &salt)
            .expect("hash")
            .to_string();
        Auth::new(&ConsoleConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            operators: vec![ConsoleOperator {
                name: "alice".into(),
                password_hash: SecretString::from(hash),
            }],
            session_ttl: Duration::from_secs(60),
            secure_cookie: false,
        })
        .expect("auth")
    }

    #[actix_web::test]
    async fn login_opens_a_session_and_failures_are_limited() {
        let auth = auth();
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let (token, session) = auth
            .login(
                "alice",
                SecretString::from("a long enough password"),
                Some(ip),
            )
            .await
            .expect("right password");
        assert_eq!(session.operator, "alice");
        assert_eq!(
            auth.session(&token).map(|s| s.operator),
            Some("alice".into())
        );
        assert!(auth.session(&random_token()).is_none());
        auth.logout(&token);
        assert!(auth.session(&token).is_none());

        let elsewhere: IpAddr = "10.0.0.9".parse().expect("ip");
        assert_eq!(
            auth.login(
                "mallory",
                SecretString::from("a long enough password"),
                Some(elsewhere)
            )
            .await
            .err(),
            Some(LoginRefused::BadCredentials),
            "an unknown name is refused like a wrong password"
        );
        for _ in 0..MAX_FAILURES {
            assert_eq!(
                auth.login("alice", SecretString::from("wrong"), Some(ip))
                    .await
                    .err(),
                Some(LoginRefused::BadCredentials)
            );
        }
        assert_eq!(
            auth.login(
                "alice",
                SecretString::from("a long enough password"),
                Some(ip)
            )
            .await
            .err(),
            Some(LoginRefused::RateLimited),
            "past the limit even the right password is refused"
        );
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        assert_eq!(
            auth.login(
                "alice",
                SecretString::from("a long enough password"),
                Some(other)
            )
            .await
            .err(),
            Some(LoginRefused::RateLimited),
            "the name is limited whatever the address"
        );
    }

    #[test]
    fn tokens_compare_in_constant_time_and_exactly() {
        let t = random_token();
        assert_eq!(t.len(), 64);
        assert!(same_token(&t, &t.clone()));
        assert!(!same_token(&t, &random_token()));
        assert!(!same_token(&t, ""));
    }
}
