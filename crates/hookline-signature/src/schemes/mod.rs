//! One module per provider. Each `verify` follows the same order: parse the signature material
//! (errors name the header), find a matching secret over the raw bytes, check the signed
//! timestamp, and only then read the payload for the dedupe key.

pub(crate) mod adyen;
pub(crate) mod github;
pub(crate) mod mercadopago;
pub(crate) mod pagarme;
pub(crate) mod pagarme_v5;
pub(crate) mod shopify;
pub(crate) mod standard;
pub(crate) mod stripe;

use crate::keys::Keys;
use crate::Request;

/// Everything a scheme needs for one verification.
pub(crate) struct Ctx<'r, 'a> {
    pub(crate) req: &'r Request<'a>,
    pub(crate) keys: &'r Keys,
    /// Effective tolerance in seconds (scheme default already applied).
    pub(crate) tolerance: u64,
    pub(crate) now: i64,
}
