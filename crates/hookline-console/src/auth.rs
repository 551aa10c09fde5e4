//! Operators, passwords, sessions and CSRF tokens of the console.
//!
//! * Passwords are checked against the configured Argon2id PHC strings. An unknown name is checked against a
//!   dummy hash with the first operator's parameters, so the answer takes as long and says the same as for a
//!   wrong password: names cannot be enumerated.
//! * **Checks run in a bounded pool.** A check costs tens of milliseconds of CPU and `m_cost` KiB of memory
//!   (19 MiB with the default parameters) by design: an unbounded number of concurrent checks once took the
//!   process (then the edge, which served the console) from 23 MiB to 2.9 GiB and its webhook acks from 5 to
//!   112 ms. The console now has its own process, and the bound still keeps that process small and responsive.
//!   So checks run on [`CHECK_THREADS`] dedicated threads, each with one Argon2 memory area allocated once and
//!   reused (memory is `CHECK_THREADS × m_cost`, whatever the load; operator
//!   hashes above [`MAX_HASH_KIB`] are refused at start-up). At most [`UNTRUSTED_CHECKS`] check runs at once for
//!   logins without a device cookie and [`DEVICE_CHECKS`] for logins with one (below): a login that finds no
//!   free place is answered 429 at once, without hashing and without counting — never queued.
//! * **Attempts are counted before the check**, atomically with the limit test (one mutex): N concurrent
//!   attempts are N. A success gives its reservation back; a failure keeps it. Limits, each per
//!   [`FAILURE_WINDOW`] (fixed window from the first failure):
//!   - per (client address, name): [`MAX_FAILURES`]. A stranger's failures with other names, or from another
//!     address, never lock a named operator out;
//!   - per name, across addresses: [`NAME_MAX_FAILURES`], so a known name cannot be brute-forced from many
//!     addresses;
//!   - per client address, across names: [`ADDRESS_MAX_FAILURES`] (IPv6 addresses count per /64);
//!   - for the whole console: [`GLOBAL_MAX_FAILURES`] (password spraying from many addresses and names).
//!
//!   The last three can be tripped by a stranger, so an operator who has logged in before from a browser is not
//!   subject to them: a successful login sets a device cookie ([`DEVICE_COOKIE`], random, kept as a digest for
//!   [`DEVICE_TTL`]) and an attempt that presents a valid device cookie for the same name is counted against
//!   that device only ([`MAX_FAILURES`]), and uses its own place in the pool. This is OWASP's "device cookie"
//!   design; it also covers operators behind one SSH tunnel or TLS proxy (one address for all of them).
//!   Past a limit the answer is 429 without checking anything.
//! * A session is a random 256-bit token in an `HttpOnly; SameSite=Strict` cookie; the server keeps only its
//!   SHA-256 digest, with the operator, an expiry and the session's CSRF token. Sessions and device cookies
//!   live in memory: an edge restart logs every operator out and forgets the devices (nothing to leak from the
//!   database, nothing to clean up).
//! * Every POST carries the session's CSRF token in a form field, compared in constant time; the login form
//!   carries a token bound to a short-lived pre-login cookie (double submit), so a third-party page cannot log
//!   a browser into an attacker's session either.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::ConsoleConfig;
use anyhow::Context;
use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{Output, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, PasswordHash, Version};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "hookline_console_session";
/// Name of the pre-login cookie (the login form's CSRF token).
pub const LOGIN_COOKIE: &str = "hookline_console_login";
/// Name of the device cookie set by a successful login (see the module docs).
pub const DEVICE_COOKIE: &str = "hookline_console_device";
/// How long a device cookie is honoured after its last successful login.
pub const DEVICE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Failed logins accepted per (client address, name), and per device cookie, within [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 5;
/// Failed logins accepted per name across all addresses (attempts without that name's device cookie).
pub const NAME_MAX_FAILURES: u32 = 20;
/// Failed logins accepted per client address across all names (attempts without a device cookie).
pub const ADDRESS_MAX_FAILURES: u32 = 20;
/// Failed logins accepted by the whole console (attempts without a device cookie).
pub const GLOBAL_MAX_FAILURES: u32 = 100;
/// The window of every failure limit.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Threads that run password checks (each keeps one Argon2 memory area).
pub const CHECK_THREADS: usize = 2;
/// Checks at once for logins without a device cookie; the excess is answered 429 without hashing.
pub const UNTRUSTED_CHECKS: usize = 1;
/// Checks at once for logins with a valid device cookie (so an operator gets in during a flood).
pub const DEVICE_CHECKS: usize = 1;
/// Largest accepted Argon2 `m_cost` of an operator hash, KiB: the pool's memory is at most
/// `CHECK_THREADS × MAX_HASH_KIB` (64 MiB).
pub const MAX_HASH_KIB: u32 = 32 * 1024;
/// Counter of Argon2 checks actually run (`/metrics` of the console process).
pub const PASSWORD_CHECKS_METRIC: &str = "hookline_console_password_checks_total";
/// Counter of login answers by `outcome` (`ok`, `bad_credentials`, `rate_limited`, `busy`).
pub const LOGINS_METRIC: &str = "hookline_console_logins_total";
/// Most sessions kept at once (older ones are dropped first): bounds the memory an attacker with valid
/// credentials could make us hold.
const MAX_SESSIONS: usize = 10_000;
/// Most device cookies kept at once (older ones are dropped first).
const MAX_DEVICES: usize = 10_000;
/// Counters kept before expired ones are swept (the global budget bounds how many can be live).
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

/// The counting key of a client address: IPv4 (and IPv4-mapped IPv6) as is, other IPv6 by /64 (one host
/// usually owns a whole /64).
fn address_key(peer: Option<IpAddr>) -> String {
    match peer {
        None => "unknown".into(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
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

/// A successful login.
#[derive(Debug)]
pub struct LoggedIn {
    /// The session cookie's token.
    pub token: String,
    /// The session.
    pub session: Session,
    /// The device cookie's token (the one presented, or a new one).
    pub device: String,
}

/// Why a login was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum LoginRefused {
    /// Wrong name or password (deliberately not told apart).
    BadCredentials,
    /// A failure limit is reached; the earliest the tripped limit frees up.
    RateLimited {
        /// Until the tripped window ends.
        retry_after: Duration,
    },
    /// Every place in the check pool is taken: nothing was checked nor counted; try again in a moment.
    Busy,
}

impl LoginRefused {
    /// The `outcome` label of [`LOGINS_METRIC`].
    pub fn label(&self) -> &'static str {
        match self {
            LoginRefused::BadCredentials => "bad_credentials",
            LoginRefused::RateLimited { .. } => "rate_limited",
            LoginRefused::Busy => "busy",
        }
    }
}

/// A fixed window of failures.
struct Window {
    since: Instant,
    n: u32,
}

/// What one attempt reserved: the counters it incremented, with their window start.
struct Reservation {
    keys: Vec<(String, Instant)>,
}

/// A device cookie's record.
struct Device {
    operator: String,
    expires: Instant,
}

/// One password check for the pool's threads.
struct Check {
    hash: String,
    password: SecretString,
    reply: oneshot::Sender<bool>,
    /// The pool place, released by the thread when the check is done (not when the login's future is
    /// dropped by a client that went away, which would let checks pile up).
    _permit: OwnedSemaphorePermit,
}

/// The console's operators and sessions.
pub struct Auth {
    operators: HashMap<String, SecretString>,
    /// Checked for unknown names, so they cost what a known name costs.
    dummy_hash: String,
    ttl: Duration,
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    devices: Mutex<HashMap<[u8; 32], Device>>,
    failures: Mutex<HashMap<String, Window>>,
    untrusted: Arc<Semaphore>,
    trusted: Arc<Semaphore>,
    /// Feeds the check threads; they stop when it is dropped.
    checks: Mutex<mpsc::Sender<Check>>,
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

/// The Argon2 parameters of a PHC string, refused above [`MAX_HASH_KIB`].
fn hash_params(field: &str, phc: &str) -> anyhow::Result<Params> {
    let parsed = PasswordHash::new(phc)
        .map_err(|e| anyhow::anyhow!("{field}: is not a PHC string ({e})"))?;
    let params = Params::try_from(&parsed)
        .map_err(|e| anyhow::anyhow!("{field}: unusable Argon2 parameters ({e})"))?;
    anyhow::ensure!(
        params.m_cost() <= MAX_HASH_KIB,
        "{field}: m_cost {} KiB is above {MAX_HASH_KIB} KiB: the console's password checks must fit its memory \
         budget; create the hash with `hookline console hash-password`",
        params.m_cost()
    );
    Ok(params)
}

/// A PHC string that no password matches, with `params`: checking it costs what checking a real hash costs.
fn dummy_hash(params: &Params) -> String {
    let salt = SaltString::generate(&mut OsRng);
    let mut out = [0u8; 32];
    OsRng.fill_bytes(&mut out);
    let out = Output::new(&out).map(|o| o.to_string()).unwrap_or_default();
    format!(
        "$argon2id$v=19$m={},t={},p={}${}${out}",
        params.m_cost(),
        params.t_cost(),
        params.p_cost(),
        salt.as_str()
    )
}

/// Whether `password` matches the PHC string `phc`, computed in `memory` (grown once to the hash's size, then
/// reused: the thread's memory does not depend on the load).
fn verify(phc: &str, password: &[u8], memory: &mut Vec<Block>) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
    ) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from) {
        None => Version::default(),
        Some(Ok(v)) => v,
        Some(Err(_)) => return false,
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    if params.m_cost() > MAX_HASH_KIB {
        return false;
    }
    let mut salt_buf = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_buf) else {
        return false;
    };
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    let mut out = vec![0u8; expected.len()];
    Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(password, salt, &mut out, &mut memory[..blocks])
        .is_ok()
        && bool::from(out.as_slice().ct_eq(expected.as_bytes()))
}

/// Starts the check threads on `rx`.
fn start_check_threads(rx: mpsc::Receiver<Check>) -> anyhow::Result<()> {
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..CHECK_THREADS {
        let rx = rx.clone();
        std::thread::Builder::new()
            .name(format!("console-check-{i}"))
            .spawn(move || {
                let mut memory: Vec<Block> = Vec::new();
                loop {
                    let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok(Check {
                        hash,
                        password,
                        reply,
                        _permit,
                    }) = next
                    else {
                        return;
                    };
                    metrics::counter!(PASSWORD_CHECKS_METRIC).increment(1);
                    let ok = verify(&hash, password.expose_secret().as_bytes(), &mut memory);
                    // The place is free before the answer is: the next attempt of a client never finds its own
                    // finished check still holding it.
                    drop(_permit);
                    // The login may have gone (client disconnected): nothing to tell then.
                    let _ = reply.send(ok);
                }
            })
            .context("start the console's password check threads")?;
    }
    Ok(())
}

impl Auth {
    /// From `[console]`: validates the operators' hash parameters and starts the check threads.
    pub fn new(config: &ConsoleConfig) -> anyhow::Result<Auth> {
        let mut first_params = None;
        for (i, o) in config.operators.iter().enumerate() {
            let params = hash_params(
                &format!("console.operators[{i}].password_hash"),
                o.password_hash.expose_secret(),
            )?;
            first_params.get_or_insert(params);
        }
        let dummy_hash = dummy_hash(&first_params.unwrap_or_default());
        let (tx, rx) = mpsc::channel();
        start_check_threads(rx)?;
        Ok(Auth {
            operators: config
                .operators
                .iter()
                .map(|o| (o.name.clone(), o.password_hash.clone()))
                .collect(),
            dummy_hash,
            ttl: config.session_ttl,
            sessions: Mutex::new(HashMap::new()),
            devices: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            untrusted: Arc::new(Semaphore::new(UNTRUSTED_CHECKS)),
            trusted: Arc::new(Semaphore::new(DEVICE_CHECKS)),
            checks: Mutex::new(tx),
        })
    }

    /// How long a session lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Tests every limit of `keys` and, when none is reached, counts the attempt in all of them — under one lock,
    /// so concurrent attempts are counted one by one.
    fn reserve(&self, keys: Vec<(String, u32)>) -> Result<Reservation, LoginRefused> {
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let mut retry_after = None;
        for (k, max) in &keys {
            if let Some(w) = failures.get(k) {
                let age = now.duration_since(w.since);
                if age < FAILURE_WINDOW && w.n >= *max {
                    let left = FAILURE_WINDOW - age;
                    retry_after = Some(retry_after.map_or(left, |r: Duration| r.max(left)));
                }
            }
        }
        if let Some(retry_after) = retry_after {
            return Err(LoginRefused::RateLimited { retry_after });
        }
        if failures.len() >= MAX_COUNTERS {
            failures.retain(|_, w| now.duration_since(w.since) < FAILURE_WINDOW);
        }
        let mut reserved = Vec::with_capacity(keys.len());
        for (k, _) in keys {
            let w = failures
                .entry(k.clone())
                .or_insert(Window { since: now, n: 0 });
            if now.duration_since(w.since) >= FAILURE_WINDOW {
                *w = Window { since: now, n: 0 };
            }
            w.n += 1;
            reserved.push((k, w.since));
        }
        Ok(Reservation { keys: reserved })
    }

    /// Gives a successful attempt's reservation back; `clear` (the pair's or the device's counter) is reset.
    fn release(&self, reservation: Reservation, clear: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        for (k, since) in reservation.keys {
            if k == clear {
                failures.remove(&k);
                continue;
            }
            let empty = match failures.get_mut(&k) {
                Some(w) if w.since == since => {
                    w.n = w.n.saturating_sub(1);
                    w.n == 0
                }
                _ => false,
            };
            if empty {
                failures.remove(&k);
            }
        }
    }

    /// The counting key of a device cookie valid for `name`, if `device` is one.
    fn device_key(&self, device: Option<&str>, name: &str) -> Option<String> {
        let d = digest(device?);
        let devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        let record = devices.get(&d)?;
        (record.operator == name && record.expires > Instant::now())
            .then(|| format!("device:{}", hex::encode(&d[..16])))
    }

    /// Records (or extends) the device cookie of a successful login and returns its token.
    fn remember_device(&self, device: Option<&str>, name: &str) -> String {
        let token = match device {
            Some(t) if self.device_key(Some(t), name).is_some() => t.to_string(),
            _ => random_token(),
        };
        let now = Instant::now();
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.retain(|_, d| d.expires > now);
        if devices.len() >= MAX_DEVICES {
            if let Some(oldest) = devices
                .iter()
                .min_by_key(|(_, d)| d.expires)
                .map(|(k, _)| *k)
            {
                devices.remove(&oldest);
            }
        }
        devices.insert(
            digest(&token),
            Device {
                operator: name.to_string(),
                expires: now + DEVICE_TTL,
            },
        );
        token
    }

    /// Runs one check on the pool's threads.
    async fn check(
        &self,
        hash: String,
        password: SecretString,
        permit: OwnedSemaphorePermit,
    ) -> bool {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Check {
                hash,
                password,
                reply,
                _permit: permit,
            });
        sent.is_ok() && answer.await.unwrap_or(false)
    }

    /// Checks `name` and `password` (from `peer`, with the browser's device cookie `device` if any); on
    /// success opens a session. Records the outcome in [`LOGINS_METRIC`].
    pub async fn login(
        &self,
        name: &str,
        password: SecretString,
        peer: Option<IpAddr>,
        device: Option<&str>,
    ) -> Result<LoggedIn, LoginRefused> {
        let result = self.attempt(name, password, peer, device).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.label(),
        };
        metrics::counter!(LOGINS_METRIC, "outcome" => outcome).increment(1);
        result
    }

    async fn attempt(
        &self,
        name: &str,
        password: SecretString,
        peer: Option<IpAddr>,
        device: Option<&str>,
    ) -> Result<LoggedIn, LoginRefused> {
        // A bounded name for the counter keys: an attacker cannot grow memory with long names.
        let name_key: String = name.chars().take(64).collect();
        let address = address_key(peer);
        let device_key = self.device_key(device, name);
        let (pool, keys, clear) = match &device_key {
            Some(d) => (&self.trusted, vec![(d.clone(), MAX_FAILURES)], d.clone()),
            None => {
                let pair = format!("pair:{address}|{name_key}");
                (
                    &self.untrusted,
                    vec![
                        (pair.clone(), MAX_FAILURES),
                        (format!("name:{name_key}"), NAME_MAX_FAILURES),
                        (format!("addr:{address}"), ADDRESS_MAX_FAILURES),
                        ("global".to_string(), GLOBAL_MAX_FAILURES),
                    ],
                    pair,
                )
            }
        };
        // A place in the pool first (never waited for), then the attempt is counted, then checked.
        let Ok(permit) = pool.clone().try_acquire_owned() else {
            return Err(LoginRefused::Busy);
        };
        let reservation = self.reserve(keys)?;
        let known = self.operators.get(name);
        let hash = known
            .map(|h| h.expose_secret().to_string())
            .unwrap_or_else(|| self.dummy_hash.clone());
        let ok = self.check(hash, password, permit).await;
        if !(ok && known.is_some()) {
            return Err(LoginRefused::BadCredentials);
        }
        self.release(reservation, &clear);
        let device = self.remember_device(device, name);
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
        Ok(LoggedIn {
            token,
            session,
            device,
        })
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
    use crate::config::ConsoleOperator;
    use argon2::PasswordHasher;

    const PASSWORD: &str = "a long enough password";

    /// Cheap Argon2 parameters: the unit tests are about counting, not about the cost of a check.
    fn auth() -> Auth {
        let salt = SaltString::generate(&mut OsRng);
        let params = Params::new(256, 1, 1, None).expect("params");
        let hash = Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
            .hash_password(PASSWORD.as_bytes(), &salt)
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
            history_sample: Duration::from_secs(60),
        })
        .expect("auth")
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().expect("ip"))
    }

    async fn try_login(
        auth: &Auth,
        name: &str,
        password: &str,
        from: &str,
        device: Option<&str>,
    ) -> Result<LoggedIn, LoginRefused> {
        auth.login(name, SecretString::from(password), ip(from), device)
            .await
    }

    fn limited(r: Result<LoggedIn, LoginRefused>) -> bool {
        matches!(r, Err(LoginRefused::RateLimited { .. }))
    }

    #[actix_web::test]
    async fn login_opens_a_session_and_failures_are_limited_per_address_and_name() {
        let auth = auth();
        let ok = try_login(&auth, "alice", PASSWORD, "10.0.0.1", None)
            .await
            .expect("right password");
        assert_eq!(ok.session.operator, "alice");
        assert_eq!(
            auth.session(&ok.token).map(|s| s.operator),
            Some("alice".into())
        );
        assert!(auth.session(&random_token()).is_none());
        auth.logout(&ok.token);
        assert!(auth.session(&ok.token).is_none());

        assert_eq!(
            try_login(&auth, "mallory", PASSWORD, "10.0.0.9", None)
                .await
                .err(),
            Some(LoginRefused::BadCredentials),
            "an unknown name is refused like a wrong password"
        );
        // Made-up names from 10.0.0.9 do not lock alice out of 10.0.0.9.
        for i in 0..MAX_FAILURES {
            let name = format!("nobody{i}");
            assert_eq!(
                try_login(&auth, &name, "x", "10.0.0.9", None).await.err(),
                Some(LoginRefused::BadCredentials)
            );
        }
        assert!(try_login(&auth, "alice", PASSWORD, "10.0.0.9", None)
            .await
            .is_ok());

        for _ in 0..MAX_FAILURES {
            assert_eq!(
                try_login(&auth, "alice", "wrong", "10.0.0.2", None)
                    .await
                    .err(),
                Some(LoginRefused::BadCredentials)
            );
        }
        assert!(
            limited(try_login(&auth, "alice", PASSWORD, "10.0.0.2", None).await),
            "past the (address, name) limit even the right password is refused"
        );
        assert!(
            try_login(&auth, "alice", PASSWORD, "10.0.0.3", None)
                .await
                .is_ok(),
            "another address is not locked out by 10.0.0.2's failures"
        );
    }

    #[actix_web::test]
    async fn a_name_is_limited_across_addresses_but_not_for_its_devices() {
        let auth = auth();
        let device = try_login(&auth, "alice", PASSWORD, "10.0.1.1", None)
            .await
            .expect("first login")
            .device;
        let mut address = 0;
        while address * MAX_FAILURES < NAME_MAX_FAILURES {
            for _ in 0..MAX_FAILURES {
                let from = format!("10.0.2.{address}");
                assert_eq!(
                    try_login(&auth, "alice", "guess", &from, None).await.err(),
                    Some(LoginRefused::BadCredentials)
                );
            }
            address += 1;
        }
        assert!(
            limited(try_login(&auth, "alice", PASSWORD, "10.0.3.1", None).await),
            "the name's budget across addresses is spent"
        );
        let again = try_login(&auth, "alice", PASSWORD, "10.0.3.1", Some(&device))
            .await
            .expect("a device cookie of alice is exempt from the name's budget");
        assert_eq!(again.device, device, "the device cookie is kept");
        assert!(
            auth.device_key(Some(&device), "bob").is_none(),
            "a device cookie is only valid for its operator"
        );
    }

    #[actix_web::test]
    async fn concurrent_attempts_are_counted_before_the_check() {
        let auth = auth();
        let attempts = (0..50).map(|_| try_login(&auth, "alice", "wrong", "10.0.4.1", None));
        let results = futures::future::join_all(attempts).await;
        let bad = results
            .iter()
            .filter(|r| matches!(r, Err(LoginRefused::BadCredentials)))
            .count();
        assert!(bad as u32 <= MAX_FAILURES, "{bad} checks ran");
        assert!(results.iter().all(|r| r.is_err()));
    }

    #[test]
    fn addresses_are_counted_per_host_and_ipv6_per_64() {
        assert_eq!(address_key(ip("192.0.2.7")), "192.0.2.7");
        assert_eq!(address_key(ip("::ffff:192.0.2.7")), "192.0.2.7");
        assert_eq!(
            address_key(ip("2001:db8:1:2:3:4:5:6")),
            address_key(ip("2001:db8:1:2:ffff::1"))
        );
        assert_eq!(address_key(None), "unknown");
    }

    #[test]
    fn tokens_compare_in_constant_time_and_exactly() {
        let t = random_token();
        assert_eq!(t.len(), 64);
        assert!(same_token(&t, &t.clone()));
        assert!(!same_token(&t, ""));
        assert!(!same_token(&t, &random_token()));
    }

    #[test]
    fn verify_matches_the_argon2_crate_and_hashes_above_the_budget_are_refused() {
        let salt = SaltString::generate(&mut OsRng);
        let hash = Argon2::default()
            .hash_password(b"pw", &salt)
            .expect("hash")
            .to_string();
        let mut memory = Vec::new();
        assert!(verify(&hash, b"pw", &mut memory));
        assert!(!verify(&hash, b"pw2", &mut memory));
        assert!(!verify(&dummy_hash(&Params::default()), b"pw", &mut memory));
        assert!(hash_params("f", &hash).is_ok());
        let big = Params::new(MAX_HASH_KIB + 1, 1, 1, None).expect("params");
        let big = Argon2::new(Algorithm::Argon2id, Version::V0x13, big)
            .hash_password(b"pw", &salt)
            .expect("hash")
            .to_string();
        assert!(hash_params("f", &big).is_err());
    }
}
