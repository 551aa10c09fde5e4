//! Shopify: `X-Shopify-Hmac-SHA256: <base64>`, bare (no prefix), HMAC-SHA256 of the raw body
//! keyed with the app client secret (scheme notes §7). No signed timestamp.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::Ctx;
use crate::util::{self, malformed};
use crate::{Verified, VerifyError};

const HEADER: &str = "X-Shopify-Hmac-SHA256";

pub(crate) fn verify(ctx: &Ctx<'_, '_>) -> Result<Verified, VerifyError> {
    let location = format!("header {HEADER}");
    let value = util::required_header(ctx.req, HEADER)?;
    let sig = STANDARD.decode(value).map_err(|_| {
        malformed(
            &location,
            "not valid base64 (Shopify sends the bare base64 digest, no 'sha256=' prefix)",
        )
    })?;
    if sig.len() != 32 {
        return Err(malformed(
            &location,
            format!(
                "decodes to {} bytes, expected 32 (a hex digest instead of base64?)",
                sig.len()
            ),
        ));
    }

    let body = ctx.req.body;
    let candidates = [sig];
    let secret_index = ctx.keys.select(
        |key| util::any_ct_eq(&util::hmac_sha256(key, &[body]), &candidates),
        |secrets| VerifyError::SignatureMismatch {
            what: "signature",
            location: location.clone(),
            secrets,
        },
    )?;

    // X-Shopify-Webhook-Id is what the current docs say to dedupe on. X-Shopify-Event-Id is not
    // used as a fallback: it is shared by the deliveries of one event to several subscriptions,
    // so it would silently drop deliveries that are not duplicates.
    let event_id = util::event_id_header(ctx.req, "X-Shopify-Webhook-Id")?;
    Ok(Verified {
        // The delivery id header is not signed: keying on it would let anyone replay a captured request under a
        // new id (a new row each time) . The body is the only signed material, and a redelivery repeats it.
        dedupe_key: util::body_digest_key(ctx.req.body),
        event_id,
        event_type: util::optional_header(ctx.req, "X-Shopify-Topic"),
        signed_at: None,
        secret_index,
    })
}
