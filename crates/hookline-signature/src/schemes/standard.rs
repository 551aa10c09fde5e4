//! Standard Webhooks and Svix: `{id}.{timestamp}.{raw body}` signed with HMAC-SHA256, the key
//! being the base64-decoded secret (optional `whsec_` stripped); the signature header is a
//! space-separated list of `<version>,<base64>` entries (scheme notes §3).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::Ctx;
use crate::util::{self, malformed, HeaderValue};
use crate::{Verified, VerifyError};

/// The three header names of one header family.
struct Names {
    id: &'static str,
    timestamp: &'static str,
    signature: &'static str,
}

const WEBHOOK: Names = Names {
    id: "webhook-id",
    timestamp: "webhook-timestamp",
    signature: "webhook-signature",
};

const SVIX: Names = Names {
    id: "svix-id",
    timestamp: "svix-timestamp",
    signature: "svix-signature",
};

impl Names {
    fn all(&self) -> [&'static str; 3] {
        [self.id, self.timestamp, self.signature]
    }

    fn complete(&self, ctx: &Ctx<'_, '_>) -> bool {
        self.all()
            .iter()
            .all(|name| matches!(util::header(ctx.req, name), HeaderValue::Value(_)))
    }
}

/// Chooses the header family. Standard Webhooks reads only `webhook-*` (project policy: `svix-*`
/// belongs to the svix scheme). Svix uses a complete `svix-*` set, else a complete `webhook-*`
/// set (the Svix libraries do the same for white-labelled senders); never a mix of the two.
fn names(ctx: &Ctx<'_, '_>, svix: bool) -> Result<&'static Names, VerifyError> {
    if !svix || SVIX.complete(ctx) {
        return Ok(if svix { &SVIX } else { &WEBHOOK });
    }
    if WEBHOOK.complete(ctx) {
        return Ok(&WEBHOOK);
    }
    // Report the first unusable svix-* header, noting that the fallback was tried too.
    let mut err = SVIX
        .all()
        .into_iter()
        .find_map(|name| util::required_header(ctx.req, name).err())
        .unwrap_or_else(|| util::missing(format!("header {}", SVIX.id), "is missing"));
    if let VerifyError::MissingSignature { detail, .. } = &mut err {
        detail.push_str(
            " (and there is no complete webhook-id/webhook-timestamp/webhook-signature set to fall back to)",
        );
    }
    Err(err)
}

/// Collects the `v1` signatures. Entries without a comma are ignored (as the Rust library does),
/// other versions are skipped (`v1a` is ed25519, not HMAC).
fn parse_signatures(location: &str, value: &str) -> Result<Vec<Vec<u8>>, VerifyError> {
    let mut entries = 0usize;
    let mut v1_seen = 0usize;
    let mut sigs = Vec::new();
    for entry in value.split(' ').filter(|e| !e.is_empty()) {
        entries += 1;
        let Some((version, sig)) = entry.split_once(',') else {
            continue;
        };
        if version != "v1" {
            continue;
        }
        v1_seen += 1;
        if let Ok(sig) = STANDARD.decode(sig) {
            sigs.push(sig);
        }
    }
    if v1_seen == 0 {
        return Err(malformed(
            location,
            format!(
                "no v1 signature among {} (expected 'v1,<base64>')",
                util::count(entries, "entry", "entries")
            ),
        ));
    }
    if sigs.is_empty() {
        return Err(malformed(
            location,
            if v1_seen == 1 {
                "the v1 signature is not valid base64".to_owned()
            } else {
                format!("none of the {v1_seen} v1 signatures is valid base64")
            },
        ));
    }
    Ok(sigs)
}

pub(crate) fn verify(ctx: &Ctx<'_, '_>, svix: bool) -> Result<Verified, VerifyError> {
    let names = names(ctx, svix)?;
    let id = util::required_header(ctx.req, names.id)?;
    let ts_text = util::required_header(ctx.req, names.timestamp)?;
    let sig_value = util::required_header(ctx.req, names.signature)?;
    let timestamp = util::parse_timestamp(&format!("header {}", names.timestamp), "", ts_text)?;
    let signature_location = format!("header {}", names.signature);
    let sigs = parse_signatures(&signature_location, sig_value)?;

    let body = ctx.req.body;
    let secret_index = ctx.keys.select(
        |key| {
            let expected =
                util::hmac_sha256(key, &[id.as_bytes(), b".", ts_text.as_bytes(), b".", body]);
            util::any_ct_eq(&expected, &sigs)
        },
        |secrets| VerifyError::SignatureMismatch {
            what: "v1 signature",
            location: signature_location.clone(),
            secrets,
        },
    )?;
    util::check_tolerance(timestamp, ctx.now, ctx.tolerance)?;

    // The id header is the idempotency key; the body must still be a usable JSON payload.
    let payload = util::json_object(body)?;
    Ok(Verified {
        // The id is part of the signed content ("{id}.{ts}.{body}").
        dedupe_key: id.to_owned(),
        event_id: id.to_owned(),
        event_type: util::str_field(&payload, "type"),
        signed_at: Some(timestamp),
        secret_index,
    })
}
