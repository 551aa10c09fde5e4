//! Pagar.me v5 webhooks: known answers for the Basic-credential check (Pagar.me signs nothing; see
//! `src/schemes/pagarme_v5.rs`), rotation, hostile headers and bodies, and properties: only a configured
//! credential verifies, and the event id is always the body's `id`.

mod common;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use common::verify;
use hookline_signature::{sign, Scheme};
use proptest::prelude::*;

const CRED: &str = "hookline:s3cr3t-pass";
const OLD: &str = "hookline:old-pass";
const BODY: &[u8] = br#"{"id":"hook_RyEKQO789TRpZjv5","account":{"id":"acc_1","name":"Loja"},"type":"charge.paid","created_at":"2026-01-01T00:00:00Z","data":{"id":"ch_1"}}"#;

fn run(
    secrets: &[&str],
    authorization: Option<&str>,
    body: &[u8],
) -> Result<hookline_signature::Verified, hookline_signature::VerifyError> {
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| ("Authorization", a))
        .into_iter()
        .collect();
    verify(Scheme::PagarmeV5, secrets, &headers, "", body)
}

/// `data.id` reaches the key (and later an API path) only when it is a plain id; anything else gives a key naming
/// no object, and the event is still accepted (200): what it means is the worker's business.
#[test]
fn only_a_plain_data_id_is_named_in_the_key() {
    let auth = sign::pagarme_v5(CRED.as_bytes());
    for (data, key) in [
        (r#"{"id":"or_Ab-9_z"}"#, "pgv5:or_Ab-9_z:hook_1"),
        (r#"{"id":"../admin"}"#, "pgv5::hook_1"),
        (r#"{"id":"ch_1?x=1"}"#, "pgv5::hook_1"),
        (r#"{"id":"ch:1"}"#, "pgv5::hook_1"),
        (r#"{"id":""}"#, "pgv5::hook_1"),
        (r#"{"id":12}"#, "pgv5::hook_1"),
        (r#"{"code":"x"}"#, "pgv5::hook_1"),
        (r#""ch_1""#, "pgv5::hook_1"),
    ] {
        let body = format!(r#"{{"id":"hook_1","type":"charge.paid","data":{data}}}"#);
        let ok = run(&[CRED], Some(&auth), body.as_bytes()).unwrap();
        assert_eq!(ok.dedupe_key, key, "{data}");
    }
    let long = format!(
        r#"{{"id":"hook_1","type":"charge.paid","data":{{"id":"ch_{}"}}}}"#,
        "a".repeat(70)
    );
    let ok = run(&[CRED], Some(&auth), long.as_bytes()).unwrap();
    assert_eq!(ok.dedupe_key, "pgv5::hook_1");
    assert_eq!(
        hookline_signature::pagarme_v5_dedupe_key(Some("ch_9"), "hook_2"),
        "pgv5:ch_9:hook_2"
    );
}

#[test]
fn known_answer_header_and_ids() {
    // base64("hookline:s3cr3t-pass"), computed independently.
    assert_eq!(
        sign::pagarme_v5(CRED.as_bytes()),
        "Basic aG9va2xpbmU6czNjcjN0LXBhc3M="
    );
    let ok = run(&[CRED], Some("Basic aG9va2xpbmU6czNjcjN0LXBhc3M="), BODY).unwrap();
    assert_eq!(ok.event_id, "hook_RyEKQO789TRpZjv5");
    // The key names the object the worker re-reads, then the delivery.
    assert_eq!(ok.dedupe_key, "pgv5:ch_1:hook_RyEKQO789TRpZjv5");
    assert_eq!(ok.event_type.as_deref(), Some("charge.paid"));
    assert_eq!(ok.signed_at, None);
    assert_eq!(ok.secret_index, 0);
    // HTTP header names and the auth scheme name are case-insensitive; unpadded base64 is not what
    // Pagar.me sends and is refused.
    assert!(verify(
        Scheme::PagarmeV5,
        &[CRED],
        &[("authorization", "BASIC aG9va2xpbmU6czNjcjN0LXBhc3M=")],
        "",
        BODY
    )
    .is_ok());
    assert_eq!(
        run(&[CRED], Some("Basic aG9va2xpbmU6czNjcjN0LXBhc3M"), BODY)
            .unwrap_err()
            .code(),
        "malformed_signature"
    );
}

#[test]
fn rotation_accepts_every_configured_credential_and_reports_which() {
    let old = sign::pagarme_v5(OLD.as_bytes());
    let new = sign::pagarme_v5(CRED.as_bytes());
    assert_eq!(run(&[CRED, OLD], Some(&old), BODY).unwrap().secret_index, 1);
    assert_eq!(run(&[CRED, OLD], Some(&new), BODY).unwrap().secret_index, 0);
}

#[test]
fn wrong_missing_or_foreign_authorization_is_a_signature_error() {
    let cases: [(Option<String>, &str, &str); 7] = [
        (None, "missing_signature", "header Authorization is missing"),
        (
            Some(String::new()),
            "missing_signature",
            "header Authorization is empty",
        ),
        (
            Some(sign::pagarme_v5(b"hookline:wrong")),
            "signature_mismatch",
            "no basic credential in header Authorization matches the configured secret",
        ),
        // A prefix or an extension of the credential is not the credential.
        (
            Some(sign::pagarme_v5(b"hookline:s3cr3t-pas")),
            "signature_mismatch",
            "no basic credential",
        ),
        (
            Some(sign::pagarme_v5(b"hookline:s3cr3t-pass2")),
            "signature_mismatch",
            "no basic credential",
        ),
        (
            Some("Bearer aG9va2xpbmU6czNjcjN0LXBhc3M=".to_owned()),
            "malformed_signature",
            "is not Basic",
        ),
        (
            Some(format!("Basic {}", STANDARD.encode("no-colon"))),
            "malformed_signature",
            "no ':'",
        ),
    ];
    for (header, code, message) in cases {
        let err = run(&[CRED], header.as_deref(), BODY).unwrap_err();
        assert_eq!(err.code(), code, "{header:?}");
        assert!(err.is_signature_error(), "{header:?}");
        assert!(err.to_string().contains(message), "{header:?}: {err}");
        assert!(
            !err.to_string().contains("s3cr3t"),
            "the credential leaked: {err}"
        );
    }
}

#[test]
fn the_body_is_read_only_after_the_credential_and_is_bounded() {
    let auth = sign::pagarme_v5(CRED.as_bytes());
    // A wrong credential is reported before the body is looked at.
    assert_eq!(
        run(&[CRED], Some(&sign::pagarme_v5(b"x:y")), b"not json")
            .unwrap_err()
            .code(),
        "signature_mismatch"
    );
    for (body, code) in [
        (&b"not json"[..], "malformed_payload"),
        (br#"["hook_1"]"#, "malformed_payload"),
        (br#"{"type":"charge.paid"}"#, "missing_event_id"),
        (br#"{"id":"","type":"charge.paid"}"#, "missing_event_id"),
        (br#"{"id":7,"type":"charge.paid"}"#, "missing_event_id"),
        (
            br#"{"id":"hook_\u0000x","type":"charge.paid"}"#,
            "malformed_payload",
        ),
    ] {
        let err = run(&[CRED], Some(&auth), body).unwrap_err();
        assert_eq!(err.code(), code, "{}", String::from_utf8_lossy(body));
        assert!(!err.is_signature_error());
    }
    let long = format!(
        r#"{{"id":"hook_{}","type":"charge.paid"}}"#,
        "a".repeat(200)
    );
    assert_eq!(
        run(&[CRED], Some(&auth), long.as_bytes())
            .unwrap_err()
            .code(),
        "malformed_payload"
    );
    // A missing type is allowed (informational).
    assert_eq!(
        run(&[CRED], Some(&auth), br#"{"id":"hook_1"}"#)
            .unwrap()
            .event_type,
        None
    );
}

#[test]
fn configured_credentials_are_validated() {
    use hookline_signature::validate_secret;
    assert!(validate_secret(Scheme::PagarmeV5, CRED.as_bytes()).is_ok());
    assert!(validate_secret(Scheme::PagarmeV5, b"user:").is_ok());
    for (bad, why) in [
        (&b"nocolon"[..], "':'"),
        (b"", "empty"),
        (b"us\ter:pw", "control"),
        (b" user:pw", "whitespace"),
    ] {
        let err = validate_secret(Scheme::PagarmeV5, bad).unwrap_err();
        assert!(err.contains(why), "{bad:?}: {err}");
    }
    let long = format!("u:{}", "p".repeat(600));
    assert!(validate_secret(Scheme::PagarmeV5, long.as_bytes())
        .unwrap_err()
        .contains("longer"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any credential verifies only itself; any other presented credential is a mismatch; the id is the body's.
    #[test]
    fn only_a_configured_credential_verifies(
        user in "[!-9;-~]{1,16}", password in "[ -~]{0,24}", other in "[ -~]{1,40}", id in "hook_[A-Za-z0-9]{1,30}",
    ) {
        let credential = format!("{user}:{password}");
        let body = serde_json::json!({"id": id, "type": "charge.paid", "data": {}}).to_string();
        let ok = run(&[&credential], Some(&sign::pagarme_v5(credential.as_bytes())), body.as_bytes()).unwrap();
        prop_assert_eq!(&ok.event_id, &id);
        prop_assume!(other != credential);
        let err = run(&[&credential], Some(&sign::pagarme_v5(other.as_bytes())), body.as_bytes()).unwrap_err();
        prop_assert!(err.is_signature_error());
    }

    /// Hostile Authorization headers never panic and never verify.
    #[test]
    fn hostile_headers_never_verify(value in prop::collection::vec(any::<u8>(), 0..200)) {
        let headers: [(&str, &[u8]); 1] = [("Authorization", &value)];
        let secrets: [&[u8]; 1] = [CRED.as_bytes()];
        let result = hookline_signature::Verifier { scheme: Scheme::PagarmeV5, secrets: &secrets, tolerance_secs: None, now_unix: common::NOW }
            .verify(&hookline_signature::Request { headers: &headers, query: "", body: BODY });
        prop_assert!(result.is_err() || value.ends_with(sign::pagarme_v5(CRED.as_bytes()).split(' ').nth(1).unwrap().as_bytes()));
    }
}
