//! Tests written to kill the mutants `deploy/mutants.sh` found no other test noticing: each one pins down an
//! outcome (an exact line, an index, an error code) that a plausible slip in the code would change. The
//! mutant each test exists for is named above it, so a later run that reports it again points here.

use hookline_signature::{outcome_lines, sign, Request, Scheme, Verified, VerifyError};

mod common;
use common::{verify, NOW};

const STRIPE_SECRET: &str = "whsec_test_secret";
const MP_SECRET: &str = "36a9dac68450mpsecret";
const ADYEN_SECRET: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const STRIPE_BODY: &[u8] = br#"{"id":"evt_1","object":"event","type":"invoice.paid"}"#;

/// lib.rs `<impl fmt::Debug for Request>::fmt` replaced with `Ok(())`: the redaction test only checks what is
/// absent, so an empty output passed it. What it prints instead of the values is part of the contract.
#[test]
fn request_debug_lists_header_names_and_sizes() {
    let headers: [(&str, &[u8]); 2] = [
        ("X-Hub-Signature-256", b"sha256=00"),
        ("X-GitHub-Event", b"push"),
    ];
    let req = Request {
        headers: &headers,
        query: "?a=1",
        body: b"private body",
    };
    assert_eq!(
        format!("{req:?}"),
        r#"Request { header_names: ["X-Hub-Signature-256", "X-GitHub-Event"], query_len: 4, body_len: 12 }"#
    );
}

/// lib.rs `outcome_lines` replaced with `vec![]`, `vec![String::new()]`, `vec!["xyzzy".into()]`: the CLI and the
/// console print these lines, and no test of this crate read them.
#[test]
fn outcome_lines_for_a_valid_and_an_invalid_request() {
    let verified = Verified {
        event_id: "evt_1".to_owned(),
        dedupe_key: "evt_1".to_owned(),
        event_type: Some("invoice.paid".to_owned()),
        signed_at: Some(NOW - 42),
        secret_index: 1,
    };
    assert_eq!(
        outcome_lines(&Ok(verified), 2, NOW, "--now"),
        [
            "valid",
            "event_id: evt_1",
            "dedupe_key: evt_1",
            "event_type: invoice.paid",
            "signed_at: 1767225558 (42 s before --now)",
            "matched secret: #2 of 2",
        ]
    );
    let unsigned = Verified {
        event_id: "d-1".to_owned(),
        dedupe_key: "sha256:ab".to_owned(),
        event_type: None,
        signed_at: None,
        secret_index: 0,
    };
    assert_eq!(
        outcome_lines(&Ok(unsigned), 1, NOW, "now"),
        [
            "valid",
            "event_id: d-1",
            "dedupe_key: sha256:ab",
            "matched secret: #1 of 1"
        ]
    );
    let err = VerifyError::NoSecret {
        scheme: Scheme::Github,
    };
    assert_eq!(
        outcome_lines(&Err(err), 0, NOW, "now"),
        ["invalid (no_secret): no secret configured for scheme github"]
    );
}

/// error.rs `describe_skew`, `<` replaced with `<=`: a timestamp equal to the clock is "0 s old", not "in the
/// future". `verify` never reports a zero skew, but the error is public and printed by operators' tools.
#[test]
fn a_zero_skew_reads_as_old() {
    let err = VerifyError::TimestampOutOfTolerance {
        timestamp: NOW,
        now: NOW,
        tolerance: 0,
    };
    assert_eq!(
        err.to_string(),
        "timestamp 1767225600 is 0 s old (tolerance 0 s)"
    );
    let ahead = VerifyError::TimestampOutOfTolerance {
        timestamp: NOW + 1,
        now: NOW,
        tolerance: 0,
    };
    assert_eq!(
        ahead.to_string(),
        "timestamp 1767225601 is 1 s in the future (tolerance 0 s)"
    );
}

/// keys.rs `Keys::select`, `ok & !found` replaced with `ok | !found`: when two configured secrets both
/// verify, the FIRST one is reported (operators read `secret_index` to know whether the old secret is still
/// in use), and a later match must not move it.
#[test]
fn the_first_matching_secret_is_reported() {
    let header = sign::stripe(STRIPE_SECRET.as_bytes(), NOW, STRIPE_BODY);
    let headers = [("Stripe-Signature", header.as_str())];
    for (secrets, want) in [
        (&[STRIPE_SECRET, STRIPE_SECRET][..], 0),
        (&["whsec_old", STRIPE_SECRET, STRIPE_SECRET][..], 1),
        (&["whsec_old", "whsec_older", STRIPE_SECRET][..], 2),
    ] {
        let ok = verify(Scheme::Stripe, secrets, &headers, "", STRIPE_BODY)
            .unwrap_or_else(|e| panic!("{secrets:?}: {e}"));
        assert_eq!(ok.secret_index, want, "{secrets:?}");
    }
}

/// util.rs `any_ct_eq`, `|` replaced with `^`: a header carrying the same valid signature twice (a sender that
/// signs with the same secret twice during its own rotation) must still verify; with XOR the two matches
/// cancel out.
#[test]
fn a_signature_repeated_in_the_header_still_verifies() {
    let header = sign::stripe(STRIPE_SECRET.as_bytes(), NOW, STRIPE_BODY);
    let v1 = header
        .split_once(",v1=")
        .map(|(_, v1)| v1.to_owned())
        .expect("sign::stripe writes t=...,v1=...");
    let twice = format!("{header},v1={v1}");
    let ok = verify(
        Scheme::Stripe,
        &[STRIPE_SECRET],
        &[("Stripe-Signature", twice.as_str())],
        "",
        STRIPE_BODY,
    )
    .expect("the same valid signature twice verifies");
    assert_eq!(ok.event_id, "evt_1");
}

/// util.rs `id_text`, guard `!s.is_empty()` replaced with `true`: a Mercado Pago body whose `id` is an empty
/// string has no event id (it must not be stored under "").
#[test]
fn mercadopago_empty_string_id_is_missing() {
    let header = sign::mercadopago(MP_SECRET.as_bytes(), Some("123"), Some("req-1"), NOW);
    let err = verify(
        Scheme::MercadoPago,
        &[MP_SECRET],
        &[("x-signature", header.as_str()), ("x-request-id", "req-1")],
        "data.id=123",
        br#"{"id":"","type":"payment","data":{"id":"123"}}"#,
    )
    .expect_err("an empty id is no event id");
    assert_eq!(err.code(), "missing_event_id", "{err}");
    assert_eq!(
        err.to_string(),
        "no event id: body has no \"id\" (string or number)"
    );
}

/// adyen.rs `field_text`, arm `Some(Value::Bool(b))` deleted: a boolean `success` is signed and keyed as
/// `true`/`false` (as Adyen's libraries render it), not as an empty field.
#[test]
fn adyen_boolean_success_is_signed_and_keyed_as_text() {
    let mut item = serde_json::json!({
        "amount": {"currency": "EUR", "value": 1000},
        "eventCode": "AUTHORISATION",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "ref-1",
        "pspReference": "7914073381342284",
        "success": true,
    });
    let signature = sign::adyen(ADYEN_SECRET.as_bytes(), &item).expect("the hex key decodes");
    item["additionalData"] = serde_json::json!({ "hmacSignature": signature });
    let body = serde_json::to_vec(&serde_json::json!({
        "live": "false",
        "notificationItems": [{ "NotificationRequestItem": item }],
    }))
    .expect("a JSON value serialises");
    let ok = verify(Scheme::Adyen, &[ADYEN_SECRET], &[], "", &body).expect("signed item verifies");
    assert_eq!(ok.event_id, "7914073381342284:AUTHORISATION:true");
    assert_eq!(ok.dedupe_key, "7914073381342284:AUTHORISATION:true");
}

/// A one-item Adyen body whose `hmacSignature` is `signature`.
fn adyen_body_with_signature(signature: &str) -> Vec<u8> {
    let body = serde_json::json!({
        "live": "false",
        "notificationItems": [{ "NotificationRequestItem": {
            "amount": {"currency": "EUR", "value": 1000},
            "eventCode": "AUTHORISATION",
            "pspReference": "7914073381342284",
            "success": "true",
            "additionalData": { "hmacSignature": signature },
        }}],
    });
    serde_json::to_vec(&body).expect("a JSON value serialises")
}

/// adyen.rs `items`, guard `!s.is_empty()` replaced with `true`: an empty `hmacSignature` is a missing
/// signature, not a malformed one of 0 bytes.
#[test]
fn adyen_empty_signature_is_missing() {
    let err = verify(
        Scheme::Adyen,
        &[ADYEN_SECRET],
        &[],
        "",
        &adyen_body_with_signature(""),
    )
    .expect_err("no signature");
    assert_eq!(err.code(), "missing_signature", "{err}");
    assert_eq!(
        err.to_string(),
        "body notificationItems[0].NotificationRequestItem.additionalData.hmacSignature is empty"
    );
}

/// adyen.rs `items`, guard `sig.len() == 32` replaced with `true`: a signature of the wrong length is malformed
/// (a truncated or hex-instead-of-base64 value), reported as such rather than as a mismatch.
#[test]
fn adyen_signature_of_the_wrong_length_is_malformed() {
    // 16 bytes of base64.
    let err = verify(
        Scheme::Adyen,
        &[ADYEN_SECRET],
        &[],
        "",
        &adyen_body_with_signature("AAAAAAAAAAAAAAAAAAAAAA=="),
    )
    .expect_err("a 16-byte signature");
    assert_eq!(err.code(), "malformed_signature", "{err}");
    assert_eq!(
        err.to_string(),
        "body notificationItems[0].NotificationRequestItem.additionalData.hmacSignature: decodes to 16 bytes, expected 32"
    );
}

/// github.rs `verify`, guard `raw_header(LEGACY_HEADER).is_some()` replaced with `true`: the hint about a
/// legacy SHA-1 header is only given when one is there.
#[test]
fn github_missing_signature_mentions_the_legacy_header_only_when_present() {
    let err = verify(Scheme::Github, &["s"], &[], "", b"{}").expect_err("unsigned");
    assert_eq!(err.code(), "missing_signature");
    assert_eq!(err.to_string(), "header X-Hub-Signature-256 is missing");
    let err = verify(
        Scheme::Github,
        &["s"],
        &[("X-Hub-Signature", "sha1=00")],
        "",
        b"{}",
    )
    .expect_err("only the legacy header");
    assert_eq!(
        err.to_string(),
        "header X-Hub-Signature-256 is missing (a legacy X-Hub-Signature SHA-1 header is present, but only X-Hub-Signature-256 is accepted)"
    );
}

/// mercadopago.rs `parse`, guard `sig.len() == 32` replaced with `true`: a `v1=` of 16 bytes is malformed, not
/// a mismatch.
#[test]
fn mercadopago_short_signature_is_malformed() {
    let header = format!("ts={NOW},v1={}", "ab".repeat(16));
    let err = verify(
        Scheme::MercadoPago,
        &[MP_SECRET],
        &[("x-signature", header.as_str()), ("x-request-id", "req-1")],
        "data.id=123",
        br#"{"id":1,"type":"payment","data":{"id":"123"}}"#,
    )
    .expect_err("short signature");
    assert_eq!(err.code(), "malformed_signature", "{err}");
    assert_eq!(
        err.to_string(),
        "header x-signature: v1= value has 32 hex digits, expected 64"
    );
}

/// mercadopago.rs `check_body_data_id`, arm `(Some(body_id), None)` deleted: a body naming a resource that the
/// signature does not cover (no query `data.id`) is a signed-field mismatch, i.e. a forgery attempt, not
/// merely a missing id.
#[test]
fn mercadopago_body_data_id_without_a_signed_one_is_a_mismatch() {
    let header = sign::mercadopago(MP_SECRET.as_bytes(), None, Some("req-1"), NOW);
    let err = verify(
        Scheme::MercadoPago,
        &[MP_SECRET],
        &[("x-signature", header.as_str()), ("x-request-id", "req-1")],
        "",
        br#"{"id":1,"type":"payment","data":{"id":"123"}}"#,
    )
    .expect_err("unsigned data.id");
    assert_eq!(err.code(), "signed_field_mismatch", "{err}");
    assert_eq!(
        err.to_string(),
        "body data.id '123' is not covered by the signature: the query has no data.id"
    );
}

/// pagarme.rs `parse`, arm `""` deleted: `=<hex>` says the digest name is missing instead of quoting an empty
/// digest as "not allowed".
#[test]
fn pagarme_header_without_a_digest_name() {
    let err = verify(
        Scheme::Pagarme,
        &["ak_test"],
        &[("X-Hub-Signature", "=00ff")],
        "",
        b"id=1",
    )
    .expect_err("no digest name");
    assert_eq!(err.code(), "malformed_signature");
    assert_eq!(
        err.to_string(),
        "header X-Hub-Signature: no digest name before '='"
    );
}

/// standard.rs `parse_signatures`, `v1_seen == 1` replaced with `!=`: one undecodable v1 entry is described in
/// the singular, several in the plural with their count.
#[test]
fn standard_webhooks_undecodable_signatures_are_counted() {
    for (signature, message) in [
        (
            "v1,!!!",
            "header webhook-signature: the v1 signature is not valid base64",
        ),
        (
            "v1,!!! v1,???",
            "header webhook-signature: none of the 2 v1 signatures is valid base64",
        ),
    ] {
        let err = verify(
            Scheme::StandardWebhooks,
            &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
            &[
                ("webhook-id", "msg_1"),
                ("webhook-timestamp", &NOW.to_string()),
                ("webhook-signature", signature),
            ],
            "",
            b"{}",
        )
        .expect_err("undecodable signature");
        assert_eq!(err.code(), "malformed_signature");
        assert_eq!(err.to_string(), message);
    }
}
