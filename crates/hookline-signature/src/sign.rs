//! Signing helpers: produce exactly what each provider would send, so the CLI's `simulate`
//! command and end-to-end tests can build authentic requests. They share the verifiers' key
//! derivation and signed-content code, so a round trip tests the real path.
//!
//! `secret` is always the raw configured secret, exactly as it would be passed in
//! [`crate::Verifier::secrets`]. Functions whose scheme decodes the secret (Standard Webhooks,
//! Svix, Adyen) return `Err` with a message (never containing the secret) when it cannot be
//! decoded; the others cannot fail.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::keys;
use crate::schemes;
use crate::util;
use crate::Scheme;

/// `Stripe-Signature` header value: `t={timestamp},v1={hex}` over `"{timestamp}.{body}"`.
pub fn stripe(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    let mac = util::hmac_sha256(secret, &[t.as_bytes(), b".", body]);
    format!("t={t},v1={}", hex::encode(mac))
}

/// `webhook-signature` (or `svix-signature`) header value: `v1,{base64}` over
/// `"{id}.{timestamp}.{body}"`, with the key base64-decoded from `secret` (optional `whsec_`).
/// Send `id` as `webhook-id` and `timestamp` as `webhook-timestamp`.
pub fn standard_webhooks(
    secret: &[u8],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, String> {
    let key = keys::decode(Scheme::StandardWebhooks, secret)?;
    let t = timestamp.to_string();
    let mac = util::hmac_sha256(&key, &[id.as_bytes(), b".", t.as_bytes(), b".", body]);
    Ok(format!("v1,{}", STANDARD.encode(mac)))
}

/// Svix uses the Standard Webhooks algorithm; only the header names differ (`svix-*`).
pub fn svix(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Result<String, String> {
    standard_webhooks(secret, id, timestamp, body)
}

/// `X-Hub-Signature-256` header value: `sha256={hex}` of the raw body.
pub fn github(secret: &[u8], body: &[u8]) -> String {
    format!("sha256={}", hex::encode(util::hmac_sha256(secret, &[body])))
}

/// `X-Shopify-Hmac-SHA256` header value: bare base64 of HMAC-SHA256 of the raw body.
pub fn shopify(secret: &[u8], body: &[u8]) -> String {
    STANDARD.encode(util::hmac_sha256(secret, &[body]))
}

/// `X-Hub-Signature` header value for a Pagar.me postback: `sha1={hex}` of the raw body (SHA-1 is
/// what Pagar.me sends; the verifier also accepts `sha256=`).
pub fn pagarme(secret: &[u8], body: &[u8]) -> String {
    format!("sha1={}", hex::encode(util::hmac_sha1(secret, &[body])))
}

/// `x-signature` header value for Mercado Pago: `ts={timestamp},v1={hex}` over the manifest
/// `id:{data_id lower-cased};request-id:{request_id};ts:{timestamp};`, absent segments dropped.
/// `data_id` goes in the query as `data.id`, `request_id` in the `x-request-id` header;
/// `timestamp` is written as given (pass milliseconds for a 13-digit `ts`, as Mercado Pago does).
pub fn mercadopago(
    secret: &[u8],
    data_id: Option<&str>,
    request_id: Option<&str>,
    timestamp: i64,
) -> String {
    let t = timestamp.to_string();
    let manifest = schemes::mercadopago::manifest(data_id, request_id, &t);
    let mac = util::hmac_sha256(secret, &[manifest.as_bytes()]);
    format!("ts={t},v1={}", hex::encode(mac))
}

/// Adyen `hmacSignature` for one `NotificationRequestItem` object (the value to put in its
/// `additionalData.hmacSignature`), keyed with the hex-decoded `secret`.
pub fn adyen(secret: &[u8], item: &serde_json::Value) -> Result<String, String> {
    let key = keys::decode(Scheme::Adyen, secret)?;
    let signed = schemes::adyen::signing_string(item);
    Ok(STANDARD.encode(util::hmac_sha256(&key, &[signed.as_bytes()])))
}

/// `Authorization` header value a Pagar.me v5 webhook carries when credentials are configured on it:
/// `Basic base64(user:password)` of `credential` (nothing is signed; see [`crate::Scheme::PagarmeV5`]).
pub fn pagarme_v5(credential: &[u8]) -> String {
    schemes::pagarme_v5::header_value(credential)
}
