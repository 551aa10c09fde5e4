//! Known-answer vectors from `shared/vectors/signatures.json` (see §11 of
//! `shared/docs/signature-schemes.md`). The file is read at run time from the shared folder that
//! sits beside the repository checkout (CI lays it out the same way), so updating the vectors
//! does not require copying them into the repo.

use std::collections::BTreeMap;

use hookline_signature::{Request, Scheme, Verifier};
use serde::Deserialize;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/vectors/signatures.json"
);

#[derive(Debug, Deserialize)]
struct Vector {
    scheme: String,
    name: String,
    secret: String,
    secret_encoding: String,
    additional_secrets: Vec<String>,
    headers: BTreeMap<String, String>,
    query: String,
    body: String,
    now: i64,
    tolerance_s: Option<u64>,
    expect: String,
    reason: String,
    event_id: Option<String>,
}

fn load() -> Vec<Vector> {
    let text =
        std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("cannot read {VECTORS}: {e}"));
    serde_json::from_str(&text).expect("signatures.json does not match the §11 format")
}

/// Runs one vector; `Err` describes how it failed.
fn run(v: &Vector) -> Result<(), String> {
    let scheme: Scheme = v.scheme.parse().map_err(|e| format!("{e}"))?;
    let expected_encoding = match scheme {
        Scheme::StandardWebhooks | Scheme::Svix => "whsec-base64",
        Scheme::Adyen => "hex",
        _ => "utf8",
    };
    if v.secret_encoding != expected_encoding {
        return Err(format!(
            "secret_encoding {} but the crate derives keys as {expected_encoding}",
            v.secret_encoding
        ));
    }
    let secrets: Vec<&[u8]> = std::iter::once(&v.secret)
        .chain(&v.additional_secrets)
        .map(|s| s.as_bytes())
        .collect();
    let headers: Vec<(&str, &[u8])> = v
        .headers
        .iter()
        .map(|(k, val)| (k.as_str(), val.as_bytes()))
        .collect();
    let req = Request {
        headers: &headers,
        query: &v.query,
        body: v.body.as_bytes(),
    };
    let verifier = Verifier {
        scheme,
        secrets: &secrets,
        tolerance_secs: v.tolerance_s,
        now_unix: v.now,
    };
    let result = verifier.verify(&req);
    match (v.expect.as_str(), result) {
        ("valid", Ok(ok)) => {
            if ok.event_id.is_empty() {
                return Err("verified with an empty event_id".to_owned());
            }
            if let Some(want) = &v.event_id {
                if &ok.event_id != want {
                    return Err(format!("event_id {:?}, expected {want:?}", ok.event_id));
                }
            }
            if ok.signed_at.is_some() != scheme.signs_timestamp() {
                return Err(format!("signed_at {:?} for {scheme}", ok.signed_at));
            }
            if ok.secret_index >= secrets.len() {
                return Err(format!("secret_index {} out of range", ok.secret_index));
            }
            Ok(())
        }
        ("valid", Err(e)) => Err(format!("rejected [{}] {e}", e.code())),
        ("invalid", Ok(ok)) => Err(format!("accepted (event_id {:?})", ok.event_id)),
        ("invalid", Err(e)) => {
            // Every invalid vector is about authenticity, never about an unusable payload.
            if e.is_signature_error() {
                Ok(())
            } else {
                Err(format!("rejected as a payload error [{}] {e}", e.code()))
            }
        }
        (other, _) => Err(format!("unknown expect {other:?}")),
    }
}

#[test]
fn all_known_answer_vectors() {
    let vectors = load();
    assert_eq!(vectors.len(), 103, "vector count changed");

    let failures: Vec<String> = vectors
        .iter()
        .filter_map(|v| {
            run(v)
                .err()
                .map(|why| format!("{} (expect {}, {}): {why}", v.name, v.expect, v.reason))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n  {}",
        failures.len(),
        vectors.len(),
        failures.join("\n  ")
    );
}

#[test]
fn every_scheme_has_vectors() {
    let vectors = load();
    // Pagar.me v5 signs nothing, so the shared signature vectors have no entry for it: its known answers (Basic
    // credentials, rotation, hostile headers) are in `tests/pagarme_v5.rs`.
    for scheme in Scheme::ALL.into_iter().filter(|s| *s != Scheme::PagarmeV5) {
        let n = vectors
            .iter()
            .filter(|v| v.scheme == scheme.as_str())
            .count();
        assert!(n > 0, "no vectors for {scheme}");
    }
}
