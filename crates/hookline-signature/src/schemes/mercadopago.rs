//! Mercado Pago: `x-signature: ts=<ts>,v1=<hex>` plus `x-request-id`; HMAC-SHA256 (hex) over the
//! manifest `id:{data.id};request-id:{x-request-id};ts:{ts};` keyed with the secret's bytes
//! (scheme notes §5). The body is **not** signed: it is only trusted as far as it agrees with the
//! signed query `data.id`, and consumers should re-fetch the resource by id before acting.

use super::Ctx;
use crate::util::{self, malformed, HeaderValue};
use crate::{Verified, VerifyError};

const HEADER: &str = "x-signature";
const REQUEST_ID: &str = "x-request-id";

/// Builds the signed manifest. A segment whose value is absent (or empty) is dropped, as the
/// docs' text says (their sample code would interpolate `None` instead). `data.id` is
/// lower-cased, as the Orders docs prescribe (`ORD01...` is signed as `ord01...`); only this
/// lower-cased manifest is tried.
pub(crate) fn manifest(data_id: Option<&str>, request_id: Option<&str>, ts: &str) -> String {
    let mut out = String::new();
    if let Some(id) = data_id.filter(|s| !s.is_empty()) {
        out.push_str("id:");
        out.push_str(&id.to_lowercase());
        out.push(';');
    }
    if let Some(request_id) = request_id.filter(|s| !s.is_empty()) {
        out.push_str("request-id:");
        out.push_str(request_id);
        out.push(';');
    }
    out.push_str("ts:");
    out.push_str(ts);
    out.push(';');
    out
}

/// Splits on `,` and each item on its first `=`, trimming keys and values as the docs' sample
/// code does (`ts=..., v1=...` occurs). Empty items are skipped; an item without `=` makes the
/// header malformed.
fn parse(value: &str) -> Result<(&str, Vec<u8>), VerifyError> {
    let location = format!("header {HEADER}");
    let items: Vec<&str> = value.split(',').map(str::trim).collect();
    let mut ts = None;
    let mut v1 = None;
    for (i, item) in items.iter().enumerate() {
        if item.is_empty() {
            continue;
        }
        let Some((key, val)) = item.split_once('=') else {
            return Err(malformed(
                &location,
                format!("item {} of {} is not key=value", i + 1, items.len()),
            ));
        };
        let slot = match key.trim() {
            "ts" => &mut ts,
            "v1" => &mut v1,
            _ => continue,
        };
        if slot.replace(val.trim()).is_some() {
            return Err(malformed(
                &location,
                format!("more than one {}= item", key.trim()),
            ));
        }
    }
    let ts = ts
        .filter(|t| !t.is_empty())
        .ok_or_else(|| malformed(&location, "no ts= timestamp"))?;
    let v1 = v1
        .filter(|v| !v.is_empty())
        .ok_or_else(|| malformed(&location, "no v1= signature"))?;
    let sig = match hex::decode(v1) {
        Ok(sig) if sig.len() == 32 => sig,
        Ok(_) => {
            return Err(malformed(
                &location,
                format!("v1= value has {} hex digits, expected 64", v1.len()),
            ))
        }
        Err(_) => return Err(malformed(&location, "v1= value is not hex")),
    };
    Ok((ts, sig))
}

/// The query `data.id` (percent-decoded), first occurrence, empty treated as absent.
fn query_data_id(query: &str) -> Option<String> {
    let query = query.strip_prefix('?').unwrap_or(query);
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "data.id")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

pub(crate) fn verify(ctx: &Ctx<'_, '_>) -> Result<Verified, VerifyError> {
    let value = util::required_header(ctx.req, HEADER)?;
    let (ts_text, sig) = parse(value)?;
    let raw_ts = util::parse_timestamp(&format!("header {HEADER}"), "ts= value ", ts_text)?;
    // Policy: 13 digits are milliseconds (the docs say ms), anything else is seconds (the docs'
    // own example and production logs show 10-digit seconds).
    let timestamp = if ts_text.len() == 13 {
        raw_ts / 1000
    } else {
        raw_ts
    };
    let request_id = match util::header(ctx.req, REQUEST_ID) {
        HeaderValue::Value(v) => Some(v),
        HeaderValue::Absent | HeaderValue::Empty => None,
        HeaderValue::NotUtf8 => {
            return Err(malformed(
                format!("header {REQUEST_ID}"),
                "is not valid UTF-8",
            ))
        }
    };
    let data_id = query_data_id(ctx.req.query);
    let signed = manifest(data_id.as_deref(), request_id, ts_text);

    let candidates = [sig];
    let secret_index = ctx.keys.select(
        |key| util::any_ct_eq(&util::hmac_sha256(key, &[signed.as_bytes()]), &candidates),
        |secrets| VerifyError::SignatureMismatch {
            what: "v1 signature",
            // The manifest holds no secret (query id, request id, ts) and shows at once which
            // segments were signed, the usual suspect when Mercado Pago signatures fail.
            location: format!(
                "header {HEADER} (manifest '{}')",
                util::excerpt_n(&signed, 200)
            ),
            secrets,
        },
    )?;
    util::check_tolerance(timestamp, ctx.now, ctx.tolerance)?;

    let payload = util::json_object(ctx.req.body)?;
    check_body_data_id(&payload, data_id.as_deref())?;
    // The signature covers only `data.id`, `x-request-id` and `ts`: the dedupe key is built from exactly those,
    // so a captured notification replayed with any body change (its `id` set to the next notification's, say)
    // is a duplicate of itself and can never shadow a different genuine notification. Without a signed
    // `data.id` nothing signed names the resource: refused.
    let Some(signed_id) = data_id.as_deref() else {
        return Err(VerifyError::MissingEventId {
            detail: "the query has no data.id: the signature names no resource".to_owned(),
        });
    };
    // A retry of one delivery repeats `x-request-id` (re-signed with a new `ts`): the key is the resource and
    // the request id. Without a request id, the signed `ts` is all that tells two notifications about the same
    // resource apart.
    let dedupe_key = match request_id {
        Some(request_id) => format!("mp:{}:{request_id}", signed_id.to_lowercase()),
        None => format!("mp:{}:ts:{ts_text}", signed_id.to_lowercase()),
    };
    let event_id = util::id_text(payload.get("id")).ok_or_else(|| VerifyError::MissingEventId {
        detail: "body has no \"id\" (string or number)".to_owned(),
    })?;
    let event_type =
        util::str_field(&payload, "type").or_else(|| util::str_field(&payload, "action"));
    Ok(Verified {
        dedupe_key,
        event_id,
        event_type,
        signed_at: Some(timestamp),
        secret_index,
    })
}

/// Policy: the body's `data.id` (unsigned) must agree with the signed query `data.id`, so a
/// captured signature cannot be replayed with a body pointing at another resource. Compared
/// case-insensitively, because the signature itself only covers the lower-cased id.
fn check_body_data_id(
    payload: &serde_json::Map<String, serde_json::Value>,
    signed: Option<&str>,
) -> Result<(), VerifyError> {
    let body_id = util::id_text(payload.get("data").and_then(|d| d.get("id")));
    match (body_id, signed) {
        (Some(body_id), Some(signed)) if body_id.to_lowercase() != signed.to_lowercase() => {
            Err(VerifyError::SignedFieldMismatch {
                detail: format!(
                    "body data.id '{}' differs from the signed query data.id '{}'",
                    util::excerpt(&body_id),
                    util::excerpt(signed)
                ),
            })
        }
        (Some(body_id), None) => Err(VerifyError::SignedFieldMismatch {
            detail: format!(
                "body data.id '{}' is not covered by the signature: the query has no data.id",
                util::excerpt(&body_id)
            ),
        }),
        (None, Some(_)) => Err(VerifyError::MissingEventId {
            detail: "body has no data.id (string or number): nothing says which resource changed"
                .to_owned(),
        }),
        _ => Ok(()),
    }
}
