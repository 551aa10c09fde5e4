//! Pagar.me Core API v5 webhooks: JSON `{id: "hook_…", type, data, …}`, **nothing signed**.
//!
//! Pagar.me documents no signature for v5 webhooks (<https://docs.pagar.me/docs/webhooks>). What it offers is
//! HTTP Basic credentials configured on the webhook in the dashboard, which it then sends with every delivery as
//! `Authorization: Basic base64(user:password)`. "Verification" is therefore: that header decodes to one of the
//! configured `user:password` credentials (several at once for rotation), compared in constant time; the body
//! is authenticated only in the sense that whoever sent it knew a credential. Nothing binds the credential to
//! the body, so hookline never decides a money effect from this body: the worker re-reads the charge/order from
//! the API first (see `hookline-payments`' `normalize::pagarme_v5`).
//!
//! The event id is the body's `id` (`hook_…`, Pagar.me's id of the delivery, repeated on its retries); the type
//! is `type`. Both are bounded and printable. The dedupe key is `pgv5:{data.id}:{hook id}` ([`dedupe_key`]): it
//! names the charge or order the worker must re-read (the worker sees only the key before its transaction, as for
//! Mercado Pago's `mp:{data.id}:…`), and a retry of the same delivery repeats both parts.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::Ctx;
use crate::util::{self, malformed};
use crate::{Verified, VerifyError};

const HEADER: &str = "Authorization";

/// Longest configured credential (`user:password`) and longest header value accepted: far above what a
/// dashboard accepts, small enough that a hostile header cannot cost anything.
pub(crate) const MAX_CREDENTIAL_BYTES: usize = 512;
/// Longest `id` / `type` accepted from the body (Pagar.me's are ~30 characters).
pub(crate) const MAX_FIELD_BYTES: usize = 128;

/// The `Authorization` header value Pagar.me sends for `credential` (`user:password`).
pub(crate) fn header_value(credential: &[u8]) -> String {
    format!("Basic {}", STANDARD.encode(credential))
}

/// Decodes `Basic <base64>` into the credential bytes it carries.
fn parse(value: &str) -> Result<Vec<u8>, VerifyError> {
    let location = format!("header {HEADER}");
    if value.len() > MAX_CREDENTIAL_BYTES * 2 {
        return Err(malformed(location, "is too long"));
    }
    let Some((kind, rest)) = value.split_once(' ') else {
        return Err(malformed(
            location,
            "expected 'Basic <base64 of user:password>'",
        ));
    };
    if !kind.eq_ignore_ascii_case("basic") {
        return Err(malformed(
            location,
            format!(
                "scheme '{}' is not Basic (Pagar.me sends its webhook credentials as HTTP Basic)",
                util::excerpt(kind)
            ),
        ));
    }
    let decoded = STANDARD
        .decode(util::trim_ows(rest))
        .map_err(|_| malformed(&location, "the value after 'Basic ' is not base64"))?;
    if !decoded.contains(&b':') {
        return Err(malformed(
            location,
            "the Basic credentials have no ':' between user and password",
        ));
    }
    Ok(decoded)
}

/// A bounded, printable string field of the body.
fn bounded_field(
    map: &serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Result<Option<String>, String> {
    match util::str_field(map, key) {
        None => Ok(None),
        Some(s) if s.len() > MAX_FIELD_BYTES => {
            Err(format!("body {key} is longer than {MAX_FIELD_BYTES} bytes"))
        }
        Some(s) if s.chars().any(char::is_control) => {
            Err(format!("body {key} contains control characters"))
        }
        Some(s) => Ok(Some(s)),
    }
}

/// Longest `data.id` carried into the dedupe key (Pagar.me's `ch_…`/`or_…` ids are ~20 characters).
pub(crate) const MAX_OBJECT_ID_BYTES: usize = 64;

/// `data.id` when it can name an object to fetch: 1 to [`MAX_OBJECT_ID_BYTES`] ASCII letters, digits, `_`, `-`
/// (it ends up in an API path, so nothing else — no `/`, `.`, `?`, `:` — gets through). Anything else is `None`:
/// the event is still stored, under a key that names no object, and the worker has nothing to fetch.
fn object_id(map: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let id = map.get("data")?.as_object()?.get("id")?.as_str()?;
    let valid = !id.is_empty()
        && id.len() <= MAX_OBJECT_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    valid.then(|| id.to_owned())
}

/// The stored key of a Pagar.me v5 event: `pgv5:{object}:{hook}` (`object` empty when `data.id` names none).
/// `object` has no `:`, so the worker reads it back as the text between the first two colons.
pub fn dedupe_key(object: Option<&str>, hook_id: &str) -> String {
    format!("pgv5:{}:{hook_id}", object.unwrap_or_default())
}

pub(crate) fn verify(ctx: &Ctx<'_, '_>) -> Result<Verified, VerifyError> {
    let value = util::required_header(ctx.req, HEADER)?;
    let presented = parse(value)?;
    let candidates = [presented];
    let secret_index = ctx.keys.select(
        |credential| util::any_ct_eq(credential, &candidates),
        |secrets| VerifyError::SignatureMismatch {
            what: "basic credential",
            location: format!("header {HEADER}"),
            secrets,
        },
    )?;

    let map = util::json_object(ctx.req.body)?;
    let event_id = bounded_field(&map, "id")
        .map_err(|detail| VerifyError::MalformedPayload { detail })?
        .ok_or_else(|| VerifyError::MissingEventId {
            detail: "body id (Pagar.me's hook_… id) is missing or not a non-empty string"
                .to_owned(),
        })?;
    let event_type =
        bounded_field(&map, "type").map_err(|detail| VerifyError::MalformedPayload { detail })?;
    let object = object_id(&map);
    Ok(Verified {
        // Not signed (nothing is): the hook id names Pagar.me's delivery and is repeated on its retries. The
        // worker's effects are idempotent on the object it re-reads from the API, so a forged id can make a new
        // event but never a second effect.
        dedupe_key: dedupe_key(object.as_deref(), &event_id),
        event_id,
        event_type,
        signed_at: None,
        secret_index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        assert_eq!(header_value(b"user:pass"), "Basic dXNlcjpwYXNz");
        assert_eq!(parse("Basic dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert_eq!(parse("basic   dXNlcjpwYXNz").unwrap(), b"user:pass");
    }

    #[test]
    fn bad_headers_are_malformed() {
        for (value, needle) in [
            ("Bearer dXNlcjpwYXNz", "is not Basic"),
            ("dXNlcjpwYXNz", "expected 'Basic"),
            ("Basic !!!", "not base64"),
            ("Basic dXNlcg==", "no ':'"),
        ] {
            let err = parse(value).unwrap_err();
            assert_eq!(err.code(), "malformed_signature", "{value}");
            assert!(err.to_string().contains(needle), "{value}: {err}");
        }
        let long = format!("Basic {}", "A".repeat(MAX_CREDENTIAL_BYTES * 2));
        assert!(parse(&long).unwrap_err().to_string().contains("too long"));
    }
}
