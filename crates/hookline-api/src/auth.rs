//! Bearer-key authentication. Keys are kept only as SHA-256 digests and compared in constant time (every
//! configured key is compared, whatever matches), so neither timing nor a memory dump of the state reveals
//! them. A key stands for its client's NAME (`[[api.clients]]`): intents, refunds and idempotency keys are
//! stored under the name, so removing, reordering or rotating keys never moves a client onto another's data.

use crate::config::ApiClient;
use actix_web::http::header;
use actix_web::HttpRequest;
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::error::ApiError;

/// The configured keys, as digests, each with the index of its client.
pub struct Keys {
    digests: Vec<([u8; 32], u64)>,
    clients: Vec<String>,
    /// The clients configured with `all_events = true` (back offices), by name.
    all_events: Vec<String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys([{} redacted])", self.digests.len())
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl Keys {
    /// Digests of every client's keys.
    pub fn new(clients: &[ApiClient]) -> Keys {
        Keys {
            digests: clients
                .iter()
                .enumerate()
                .flat_map(|(i, c)| {
                    c.keys
                        .iter()
                        .map(move |k| (digest(k.expose_secret().as_bytes()), i as u64))
                })
                .collect(),
            clients: clients.iter().map(|c| c.name.clone()).collect(),
            all_events: clients
                .iter()
                .filter(|c| c.all_events)
                .map(|c| c.name.clone())
                .collect(),
        }
    }

    /// Whether the client `name` (as [`Keys::authenticate`] returned it) reads every fact (`all_events`).
    pub fn sees_all_events(&self, name: &str) -> bool {
        self.all_events.iter().any(|n| n == name)
    }

    /// The clients configured with `all_events = true`.
    pub fn all_events_clients(&self) -> &[String] {
        &self.all_events
    }

    /// The client (its name) of a request, or 401.
    pub fn authenticate(&self, req: &HttpRequest) -> Result<&str, ApiError> {
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Unauthorized)?;
        let presented = digest(token.as_bytes());
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (d, client) in &self.digests {
            let hit = presented.ct_eq(d);
            index.conditional_assign(client, hit & !found);
            found |= hit;
        }
        if bool::from(found) {
            usize::try_from(index)
                .ok()
                .and_then(|i| self.clients.get(i))
                .map(String::as_str)
                .ok_or(ApiError::Unauthorized)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}
