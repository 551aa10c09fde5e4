//! Small helpers shared by the schemes: header lookup, MACs, constant-time comparison,
//! timestamps and payload access.

use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::Sha256;
use subtle::{Choice, ConstantTimeEq};

use crate::{Request, VerifyError};

/// HMAC-SHA256 over the concatenation of `parts` (avoids building the signed string in memory).
/// `sha256:{hex}` of the raw body: the dedupe key of schemes that sign the body and nothing that names the
/// delivery. A retry or redelivery carries the same bytes; a replay with any other header changed is a duplicate.
pub(crate) fn body_digest_key(body: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// HMAC-SHA1 over the concatenation of `parts` (Pagar.me's default digest).
pub(crate) fn hmac_sha1(key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
    let mut mac = <Hmac<Sha1> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Whether any candidate equals `expected`, comparing every candidate in constant time.
/// Candidates of another length compare unequal (length is public, content is not).
pub(crate) fn any_ct_eq(expected: &[u8], candidates: &[Vec<u8>]) -> Choice {
    candidates.iter().fold(Choice::from(0), |acc, candidate| {
        acc | expected.ct_eq(candidate)
    })
}

/// First header named `name` (ASCII case-insensitive), raw bytes.
pub(crate) fn raw_header<'a>(req: &Request<'a>, name: &str) -> Option<&'a [u8]> {
    req.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
}

/// Strips HTTP optional whitespace (spaces and tabs) around a value.
pub(crate) fn trim_ows(s: &str) -> &str {
    s.trim_matches(|c| c == ' ' || c == '\t')
}

/// The state of one header, decoded for parsing.
pub(crate) enum HeaderValue<'a> {
    Absent,
    Empty,
    NotUtf8,
    Value(&'a str),
}

/// Looks a header up and classifies it; the value is OWS-trimmed.
pub(crate) fn header<'a>(req: &Request<'a>, name: &str) -> HeaderValue<'a> {
    match raw_header(req, name) {
        None => HeaderValue::Absent,
        Some(raw) => match std::str::from_utf8(raw) {
            Err(_) => HeaderValue::NotUtf8,
            Ok(s) => match trim_ows(s) {
                "" => HeaderValue::Empty,
                s => HeaderValue::Value(s),
            },
        },
    }
}

/// A header the signature check cannot do without: absent or empty is `missing_signature`.
pub(crate) fn required_header<'a>(req: &Request<'a>, name: &str) -> Result<&'a str, VerifyError> {
    match header(req, name) {
        HeaderValue::Value(s) => Ok(s),
        HeaderValue::Absent => Err(missing(format!("header {name}"), "is missing")),
        HeaderValue::Empty => Err(missing(format!("header {name}"), "is empty")),
        HeaderValue::NotUtf8 => Err(malformed(format!("header {name}"), "is not valid UTF-8")),
    }
}

/// A header holding the dedupe key or type: read only after the signature was accepted, so its
/// problems are payload-level (`missing_event_id`), not signature errors.
pub(crate) fn event_id_header(req: &Request<'_>, name: &str) -> Result<String, VerifyError> {
    let detail = match header(req, name) {
        HeaderValue::Value(s) => return Ok(s.to_owned()),
        HeaderValue::Absent => "is missing",
        HeaderValue::Empty => "is empty",
        HeaderValue::NotUtf8 => "is not valid UTF-8",
    };
    Err(VerifyError::MissingEventId {
        detail: format!("header {name} {detail}"),
    })
}

/// An optional informational header (event type); unusable values are simply absent.
pub(crate) fn optional_header(req: &Request<'_>, name: &str) -> Option<String> {
    match header(req, name) {
        HeaderValue::Value(s) => Some(s.to_owned()),
        _ => None,
    }
}

pub(crate) fn missing(location: impl Into<String>, detail: impl Into<String>) -> VerifyError {
    VerifyError::MissingSignature {
        location: location.into(),
        detail: detail.into(),
    }
}

pub(crate) fn malformed(location: impl Into<String>, detail: impl Into<String>) -> VerifyError {
    VerifyError::MalformedSignature {
        location: location.into(),
        detail: detail.into(),
    }
}

/// A request-controlled value made safe for a log line: at most 32 characters, control
/// characters and quotes escaped, `…` when cut.
pub(crate) fn excerpt(s: &str) -> String {
    excerpt_n(s, 32)
}

/// [`excerpt`] with a caller-chosen length, for longer non-secret values such as a manifest.
pub(crate) fn excerpt_n(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).flat_map(char::escape_debug).collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// "1 entry" / "3 entries"-style counting for messages.
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Parses a decimal unix timestamp: ASCII digits only (no sign, no spaces, no fraction), so
/// the signed text and the checked number cannot disagree. `what` prefixes the value in the
/// message (e.g. `"t= value "`), `location` names the header.
pub(crate) fn parse_timestamp(location: &str, what: &str, value: &str) -> Result<i64, VerifyError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed(
            location,
            format!("{what}'{}' is not an integer", excerpt(value)),
        ));
    }
    value.parse::<i64>().map_err(|_| {
        malformed(
            location,
            format!(
                "{what}'{}' is out of range for a unix timestamp",
                excerpt(value)
            ),
        )
    })
}

/// Rejects `|now - ts| > tolerance`; exactly `tolerance` is accepted (both directions).
pub(crate) fn check_tolerance(timestamp: i64, now: i64, tolerance: u64) -> Result<(), VerifyError> {
    let skew = (i128::from(now) - i128::from(timestamp)).unsigned_abs();
    if skew > u128::from(tolerance) {
        return Err(VerifyError::TimestampOutOfTolerance {
            timestamp,
            now,
            tolerance,
        });
    }
    Ok(())
}

/// Parses a signed body as a JSON object (after verification).
pub(crate) fn json_object(
    body: &[u8],
) -> Result<serde_json::Map<String, serde_json::Value>, VerifyError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| VerifyError::MalformedPayload {
            detail: format!("body is not valid JSON ({e})"),
        })?;
    match value {
        serde_json::Value::Object(map) => Ok(map),
        other => Err(VerifyError::MalformedPayload {
            detail: format!(
                "body is JSON but not an object (found {})",
                json_kind(&other)
            ),
        }),
    }
}

/// The JSON type name, for messages.
pub(crate) fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A non-empty string field.
pub(crate) fn str_field(
    map: &serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Option<String> {
    match map.get(key) {
        Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// A field rendered as an identifier: strings as-is, numbers as their decimal JSON text
/// (Mercado Pago sends ids as numbers or strings depending on the topic).
pub(crate) fn id_text(value: Option<&serde_json::Value>) -> Option<String> {
    match value {
        Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}
