//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...][,v0=...]`, HMAC-SHA256 over
//! `"{t}.{raw body}"` keyed with the `whsec_...` string's bytes (scheme notes §2).

use super::Ctx;
use crate::util::{self, malformed};
use crate::{Verified, VerifyError};

pub(crate) const HEADER: &str = "Stripe-Signature";

/// The parsed header: the timestamp text exactly as sent (it is part of the signed bytes) and
/// every decodable `v1` signature.
struct Parsed<'a> {
    t: &'a str,
    v1: Vec<Vec<u8>>,
}

/// Parses like stripe-go: split on `,`, each item on its first `=`; an item without `=` makes the
/// whole header invalid; `v1` values that are not hex are skipped ("ignore invalid signatures");
/// other schemes (`v0` test-mode signatures, future ones) are ignored.
fn parse(value: &str) -> Result<Parsed<'_>, VerifyError> {
    let location = format!("header {HEADER}");
    let items: Vec<&str> = value.split(',').collect();
    let mut t = None;
    let mut v1 = Vec::new();
    let mut v1_seen = 0usize;
    for (i, item) in items.iter().enumerate() {
        let Some((key, val)) = item.split_once('=') else {
            return Err(malformed(
                &location,
                format!("item {} of {} is not key=value", i + 1, items.len()),
            ));
        };
        match util::trim_ows(key) {
            "t" => {
                if t.is_some() {
                    return Err(malformed(&location, "more than one t= timestamp"));
                }
                t = Some(util::trim_ows(val));
            }
            "v1" => {
                v1_seen += 1;
                if let Ok(sig) = hex::decode(util::trim_ows(val)) {
                    v1.push(sig);
                }
            }
            _ => {}
        }
    }
    let Some(t) = t else {
        return Err(malformed(&location, "no t= timestamp"));
    };
    if t.is_empty() {
        return Err(malformed(&location, "t= timestamp is empty"));
    }
    if v1.is_empty() {
        let detail = if v1_seen == 0 {
            "no v1 signature".to_owned()
        } else if v1_seen == 1 {
            "the v1 signature is not valid hex".to_owned()
        } else {
            format!("none of the {v1_seen} v1 signatures is valid hex")
        };
        return Err(malformed(&location, detail));
    }
    Ok(Parsed { t, v1 })
}

pub(crate) fn verify(ctx: &Ctx<'_, '_>) -> Result<Verified, VerifyError> {
    let value = util::required_header(ctx.req, HEADER)?;
    let parsed = parse(value)?;
    let timestamp = util::parse_timestamp(&format!("header {HEADER}"), "t= value ", parsed.t)?;

    let body = ctx.req.body;
    let secret_index = ctx.keys.select(
        |key| {
            let expected = util::hmac_sha256(key, &[parsed.t.as_bytes(), b".", body]);
            util::any_ct_eq(&expected, &parsed.v1)
        },
        |secrets| VerifyError::SignatureMismatch {
            what: "v1 signature",
            location: format!("header {HEADER}"),
            secrets,
        },
    )?;
    util::check_tolerance(timestamp, ctx.now, ctx.tolerance)?;

    let payload = util::json_object(body)?;
    let event_id = util::str_field(&payload, "id").ok_or_else(|| VerifyError::MissingEventId {
        detail: "body has no non-empty string \"id\" (Stripe event ids look like evt_...)"
            .to_owned(),
    })?;
    Ok(Verified {
        // The id is in the signed body.
        dedupe_key: event_id.clone(),
        event_id,
        event_type: util::str_field(&payload, "type"),
        signed_at: Some(timestamp),
        secret_index,
    })
}
