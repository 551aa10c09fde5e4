//! Pagar.me v1/v4 postbacks: `X-Hub-Signature: <digest>=<hex>` (Pagar.me sends `sha1`), HMAC
//! of the raw form-urlencoded body keyed with the account API key (scheme notes §6).

use sha2::{Digest, Sha256};
use subtle::Choice;

use super::Ctx;
use crate::util::{self, malformed};
use crate::{Verified, VerifyError};

const HEADER: &str = "X-Hub-Signature";

/// Digests accepted in the header. The Ruby SDK passes any name to OpenSSL; the project allows
/// only these two (policy §10.5), so a sender cannot downgrade to e.g. md5.
#[derive(Clone, Copy)]
enum Algorithm {
    Sha1,
    Sha256,
}

impl Algorithm {
    fn name(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
        }
    }

    fn len(self) -> usize {
        match self {
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
        }
    }
}

fn parse(value: &str) -> Result<(Algorithm, Vec<u8>), VerifyError> {
    let location = format!("header {HEADER}");
    let Some((name, hex_sig)) = value.split_once('=') else {
        return Err(malformed(
            location,
            "expected '<digest>=<hex>', e.g. 'sha1=...'",
        ));
    };
    let digest = match name.to_ascii_lowercase().as_str() {
        "sha1" => Algorithm::Sha1,
        "sha256" => Algorithm::Sha256,
        "" => return Err(malformed(location, "no digest name before '='")),
        _ => {
            return Err(malformed(
                location,
                format!(
                    "digest '{}' not allowed (sha1, sha256)",
                    util::excerpt(name)
                ),
            ))
        }
    };
    let sig = hex::decode(hex_sig).map_err(|_| {
        malformed(
            &location,
            format!("value after '{}=' is not hex", digest.name()),
        )
    })?;
    if sig.len() != digest.len() {
        return Err(malformed(
            &location,
            format!(
                "value after '{}=' has {} hex digits, expected {}",
                digest.name(),
                hex_sig.len(),
                digest.len() * 2
            ),
        ));
    }
    Ok((digest, sig))
}

/// A form field's first value, empty treated as absent.
fn field(form: &[(String, String)], key: &str) -> Option<String> {
    form.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
}

pub(crate) fn verify(ctx: &Ctx<'_, '_>) -> Result<Verified, VerifyError> {
    let value = util::required_header(ctx.req, HEADER)?;
    let (digest, sig) = parse(value)?;

    let body = ctx.req.body;
    let candidates = [sig];
    let secret_index = ctx.keys.select(
        |key| -> Choice {
            match digest {
                Algorithm::Sha1 => util::any_ct_eq(&util::hmac_sha1(key, &[body]), &candidates),
                Algorithm::Sha256 => util::any_ct_eq(&util::hmac_sha256(key, &[body]), &candidates),
            }
        },
        |secrets| VerifyError::SignatureMismatch {
            what: match digest {
                Algorithm::Sha1 => "sha1 signature",
                Algorithm::Sha256 => "sha256 signature",
            },
            location: format!("header {HEADER}"),
            secrets,
        },
    )?;

    if std::str::from_utf8(body).is_err() {
        return Err(VerifyError::MalformedPayload {
            detail: "form body is not valid UTF-8".to_owned(),
        });
    }
    let form: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    let event_id = event_id(&form, body);
    Ok(Verified {
        // Every field of the key is in the signed body.
        dedupe_key: event_id.clone(),
        event_id,
        event_type: field(&form, "event"),
        signed_at: None,
        secret_index,
    })
}

/// Pagar.me sends no event or delivery id, so the dedupe key is synthesised:
/// `pagarme:{id}:{event}:{current_status}` when `id` and `current_status` are present (a retry
/// repeats them, and a transaction reaches each status once, so real status changes stay
/// distinct even when other fields are equal), else `sha256:{hex}` of the raw body, which still
/// collapses byte-identical retries.
fn event_id(form: &[(String, String)], body: &[u8]) -> String {
    match (field(form, "id"), field(form, "current_status")) {
        (Some(id), Some(status)) => {
            let event = field(form, "event").unwrap_or_default();
            format!("pagarme:{id}:{event}:{status}")
        }
        _ => format!("sha256:{}", hex::encode(Sha256::digest(body))),
    }
}
