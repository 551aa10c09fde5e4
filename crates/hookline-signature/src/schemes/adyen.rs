//! Adyen standard webhooks: each `notificationItems[].NotificationRequestItem` carries
//! `additionalData.hmacSignature` = base64(HMAC-SHA256(hex-decoded key, signing string)), where the
//! signing string joins eight item fields with `:` (scheme notes §8).
//!
//! Unlike every other scheme the signature is *inside* the JSON body, so the body has to be parsed
//! before anything can be verified, and the MAC covers those eight fields, not the raw bytes
//! (other fields such as `eventDate`, `reason` or `additionalData.*` are not authenticated).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::Value;
use subtle::Choice;

use super::Ctx;
use crate::util::{self, malformed};
use crate::{Verified, VerifyError};

/// A field as it appears in the signing string: strings as-is, numbers as decimal text (the
/// Python library uses `str()`), booleans as `true`/`false`, missing or null as `''`.
fn field_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`,
/// joined without escaping (a `:` inside a value is signed as-is, as Adyen does).
pub(crate) fn signing_string(item: &Value) -> String {
    let amount = item.get("amount");
    [
        field_text(item.get("pspReference")),
        field_text(item.get("originalReference")),
        field_text(item.get("merchantAccountCode")),
        field_text(item.get("merchantReference")),
        field_text(amount.and_then(|a| a.get("value"))),
        field_text(amount.and_then(|a| a.get("currency"))),
        field_text(item.get("eventCode")),
        field_text(item.get("success")),
    ]
    .join(":")
}

/// One item to verify: its signing string and the decoded signature it carries.
struct Item {
    signed: String,
    sig: Vec<u8>,
}

fn items(body: &[u8]) -> Result<(Vec<Item>, Value), VerifyError> {
    let root: Value = serde_json::from_slice(body).map_err(|e| {
        malformed(
            "body",
            format!("not valid JSON, so the Adyen hmacSignature cannot be read ({e})"),
        )
    })?;
    let list = match root.get("notificationItems") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => return Err(malformed("body", "notificationItems is empty")),
        _ => return Err(malformed("body", "has no notificationItems array")),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let item = match entry.get("NotificationRequestItem") {
            Some(item @ Value::Object(_)) => item,
            _ => {
                return Err(malformed(
                    format!("body notificationItems[{i}]"),
                    "has no NotificationRequestItem object",
                ))
            }
        };
        let location = format!(
            "body notificationItems[{i}].NotificationRequestItem.additionalData.hmacSignature"
        );
        let sig_b64 = match item
            .get("additionalData")
            .and_then(|a| a.get("hmacSignature"))
        {
            Some(Value::String(s)) if !s.is_empty() => s,
            Some(Value::String(_)) => return Err(util::missing(location, "is empty")),
            Some(_) => return Err(malformed(location, "is not a string")),
            None => return Err(util::missing(location, "is missing")),
        };
        let sig = match STANDARD.decode(sig_b64.trim()) {
            Ok(sig) if sig.len() == 32 => sig,
            Ok(sig) => {
                return Err(malformed(
                    location,
                    format!("decodes to {} bytes, expected 32", sig.len()),
                ))
            }
            Err(_) => return Err(malformed(location, "is not valid base64")),
        };
        out.push(Item {
            signed: signing_string(item),
            sig,
        });
    }
    // `list` was checked non-empty above; `first()` keeps a panic off this path even so.
    let first = list
        .first()
        .map(|entry| entry["NotificationRequestItem"].clone())
        .unwrap_or_default();
    Ok((out, first))
}

pub(crate) fn verify(ctx: &Ctx<'_, '_>) -> Result<Verified, VerifyError> {
    let (items, first) = items(ctx.req.body)?;
    let n = items.len();

    // One key must verify every item: a batch comes from one webhook configuration, and
    // accepting items under different keys would let a retired key smuggle items into a batch.
    let secret_index = ctx.keys.select(
        |key| {
            items.iter().fold(Choice::from(1), |acc, item| {
                let expected = util::hmac_sha256(key, &[item.signed.as_bytes()]);
                acc & util::any_ct_eq(&expected, std::slice::from_ref(&item.sig))
            })
        },
        |secrets| VerifyError::SignatureMismatch {
            what: "hmacSignature",
            location: if n == 1 {
                "body notificationItems[0]".to_owned()
            } else {
                format!("body notificationItems ({n} items, all must verify with one key)")
            },
            secrets,
        },
    )?;

    let psp = field_text(first.get("pspReference"));
    if psp.is_empty() {
        return Err(VerifyError::MissingEventId {
            detail: "notificationItems[0].NotificationRequestItem has no pspReference".to_owned(),
        });
    }
    let event_code = field_text(first.get("eventCode"));
    let success = field_text(first.get("success"));
    let event_id = format!("{psp}:{event_code}:{success}");
    Ok(Verified {
        dedupe_key: event_id.clone(),
        event_id,
        event_type: Some(event_code).filter(|c| !c.is_empty()),
        signed_at: None,
        secret_index,
    })
}
