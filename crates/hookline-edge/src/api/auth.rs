//! Bearer-key authentication. Keys are kept only as SHA-256 digests and compared in constant time (every
//! configured key is compared, whatever matches), so neither timing nor a memory dump of the state reveals
//! them. A key's position in `[api] keys` is its client identity: what idempotency keys are stored under.

use actix_web::http::header;
use actix_web::HttpRequest;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::error::ApiError;

/// The configured keys, as digests.
pub struct Keys {
    digests: Vec<[u8; 32]>,
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
    /// Digests of the configured keys, in order.
    pub fn new(keys: &[SecretString]) -> Keys {
        Keys {
            digests: keys
                .iter()
                .map(|k| digest(k.expose_secret().as_bytes()))
                .collect(),
        }
    }

    /// The client (index of the matching key) of a request, or 401.
    pub fn authenticate(&self, req: &HttpRequest) -> Result<usize, ApiError> {
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
        for (i, d) in self.digests.iter().enumerate() {
            let hit = presented.ct_eq(d);
            index.conditional_assign(&(i as u64), hit & !found);
            found |= hit;
        }
        if bool::from(found) {
            Ok(index as usize)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}
