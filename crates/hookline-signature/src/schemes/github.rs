//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the raw body keyed with the
//! secret's bytes (scheme notes §4). No timestamp is signed, so replays are bounded by dedupe
//! on `X-GitHub-Delivery` only.

use super::Ctx;
use crate::util::{self, malformed, HeaderValue};
use crate::{Verified, VerifyError};

const HEADER: &str = "X-Hub-Signature-256";
const LEGACY_HEADER: &str = "X-Hub-Signature";

pub(crate) fn verify(ctx: &Ctx<'_, '_>) -> Result<Verified, VerifyError> {
    let location = format!("header {HEADER}");
    let value = match util::header(ctx.req, HEADER) {
        HeaderValue::Value(v) => v,
        // Policy: the SHA-1 legacy header alone is not accepted; say so, since a sender that
        // only sends it looks "signed" to whoever reads the request.
        HeaderValue::Absent if util::raw_header(ctx.req, LEGACY_HEADER).is_some() => {
            return Err(util::missing(
                location,
                format!(
                    "is missing (a legacy {LEGACY_HEADER} SHA-1 header is present, but only {HEADER} is accepted)"
                ),
            ));
        }
        _ => util::required_header(ctx.req, HEADER)?,
    };
    let Some(hex_sig) = value.strip_prefix("sha256=") else {
        return Err(malformed(location, "value does not start with 'sha256='"));
    };
    let sig = match hex::decode(hex_sig) {
        Ok(sig) if sig.len() == 32 => sig,
        Ok(_) => {
            return Err(malformed(
                location,
                format!(
                    "value after 'sha256=' has {} hex digits, expected 64",
                    hex_sig.len()
                ),
            ))
        }
        Err(_) => return Err(malformed(location, "value after 'sha256=' is not hex")),
    };

    let body = ctx.req.body;
    let candidates = [sig];
    let secret_index = ctx.keys.select(
        |key| util::any_ct_eq(&util::hmac_sha256(key, &[body]), &candidates),
        |secrets| VerifyError::SignatureMismatch {
            what: "sha256 signature",
            location: location.clone(),
            secrets,
        },
    )?;

    let event_id = util::event_id_header(ctx.req, "X-GitHub-Delivery")?;
    // Event type: the X-GitHub-Event name, refined by the payload's `action` when the body is
    // a JSON object that has one ("issues.opened"). The body is not required to be JSON: GitHub
    // can send form-encoded payloads, and the signature is over bytes, not JSON.
    let event_type = util::optional_header(ctx.req, "X-GitHub-Event").map(|event| {
        let action = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("action").and_then(|a| a.as_str()).map(str::to_owned))
            .filter(|a| !a.is_empty());
        match action {
            Some(action) => format!("{event}.{action}"),
            None => event,
        }
    });
    Ok(Verified {
        // The delivery id header is not signed: keying on it would let anyone replay a captured request under a
        // new id (a new row each time) . The body is the only signed material, and a redelivery repeats it.
        dedupe_key: util::body_digest_key(ctx.req.body),
        event_id,
        event_type,
        signed_at: None,
        secret_index,
    })
}
