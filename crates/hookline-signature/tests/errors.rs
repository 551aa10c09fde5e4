//! Precise errors per scheme: the machine code, the operator message, and the
//! signature-vs-payload classification. Requests are built with the public `sign` helpers.

use hookline_signature::{sign, validate_secret, Request, Scheme, Verified, Verifier, VerifyError};

mod common;
use common::{verify as run, NOW};

const STRIPE_SECRET: &str = "whsec_test_secret";
const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const GH_SECRET: &str = "It's a Secret to Everybody";
const MP_SECRET: &str = "36a9dac68450mpsecret";
const SHOP_SECRET: &str = "shopify-client-secret";
const PAGARME_SECRET: &str = "ak_test_Q2D2qDYGJSyeR1KbI4sLzGACEr73MF";
const ADYEN_SECRET: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const STRIPE_BODY: &[u8] = br#"{"id":"evt_1","object":"event","type":"invoice.paid"}"#;
const SW_BODY: &[u8] = br#"{"type":"contact.created","data":{}}"#;

/// Asserts the error code and exact message, and that no configured secret leaks into it.
#[track_caller]
fn expect_err(
    result: Result<Verified, VerifyError>,
    code: &str,
    message: &str,
    secrets: &[&str],
) -> VerifyError {
    let err = result.expect_err("expected an error");
    assert_eq!(err.code(), code, "message was: {err}");
    assert_eq!(err.to_string(), message);
    for secret in secrets {
        assert!(!err.to_string().contains(secret), "secret leaked: {err}");
    }
    err
}

// ---------------------------------------------------------------- Stripe

fn stripe(header: &str, body: &[u8]) -> Result<Verified, VerifyError> {
    run(
        Scheme::Stripe,
        &[STRIPE_SECRET],
        &[("Stripe-Signature", header)],
        "",
        body,
    )
}

#[test]
fn stripe_valid_and_fields() {
    let ok = stripe(
        &sign::stripe(STRIPE_SECRET.as_bytes(), NOW, STRIPE_BODY),
        STRIPE_BODY,
    )
    .unwrap();
    assert_eq!(ok.event_id, "evt_1");
    assert_eq!(ok.event_type.as_deref(), Some("invoice.paid"));
    assert_eq!(ok.signed_at, Some(NOW));
    assert_eq!(ok.secret_index, 0);
}

#[test]
fn stripe_header_errors() {
    let s = &[STRIPE_SECRET];
    expect_err(
        run(Scheme::Stripe, s, &[], "", STRIPE_BODY),
        "missing_signature",
        "header Stripe-Signature is missing",
        s,
    );
    expect_err(
        stripe("  ", STRIPE_BODY),
        "missing_signature",
        "header Stripe-Signature is empty",
        s,
    );
    expect_err(
        stripe("v1=abcd", STRIPE_BODY),
        "malformed_signature",
        "header Stripe-Signature: no t= timestamp",
        s,
    );
    expect_err(
        stripe("t=1,v1=ab,garbage", STRIPE_BODY),
        "malformed_signature",
        "header Stripe-Signature: item 3 of 3 is not key=value",
        s,
    );
    expect_err(
        stripe("t=1,t=2,v1=ab", STRIPE_BODY),
        "malformed_signature",
        "header Stripe-Signature: more than one t= timestamp",
        s,
    );
    expect_err(
        stripe(&format!("t={NOW},v0=abcd"), STRIPE_BODY),
        "malformed_signature",
        "header Stripe-Signature: no v1 signature",
        s,
    );
    expect_err(
        stripe(&format!("t={NOW},v1=zz"), STRIPE_BODY),
        "malformed_signature",
        "header Stripe-Signature: the v1 signature is not valid hex",
        s,
    );
    expect_err(
        stripe("t=-5,v1=ab", STRIPE_BODY),
        "malformed_signature",
        "header Stripe-Signature: t= value '-5' is not an integer",
        s,
    );
    expect_err(
        stripe("t=99999999999999999999,v1=ab", STRIPE_BODY),
        "malformed_signature",
        "header Stripe-Signature: t= value '99999999999999999999' is out of range for a unix timestamp",
        s,
    );
}

#[test]
fn stripe_mismatch_names_the_secret_count() {
    let header = sign::stripe(b"whsec_other", NOW, STRIPE_BODY);
    let secrets = [STRIPE_SECRET, "whsec_previous"];
    expect_err(
        run(
            Scheme::Stripe,
            &secrets,
            &[("stripe-signature", &header)],
            "",
            STRIPE_BODY,
        ),
        "signature_mismatch",
        "no v1 signature in header Stripe-Signature matches any of 2 configured secrets",
        &secrets,
    );
    expect_err(
        stripe(&header, STRIPE_BODY),
        "signature_mismatch",
        "no v1 signature in header Stripe-Signature matches the configured secret",
        &[STRIPE_SECRET],
    );
}

#[test]
fn stripe_rotation_reports_matching_secret_index() {
    let header = sign::stripe(b"whsec_new", NOW, STRIPE_BODY);
    let ok = run(
        Scheme::Stripe,
        &["whsec_old", "whsec_new"],
        &[("Stripe-Signature", &header)],
        "",
        STRIPE_BODY,
    )
    .unwrap();
    assert_eq!(ok.secret_index, 1);
}

#[test]
fn stripe_tolerance_boundary_both_directions() {
    for (ts, ok) in [
        (NOW - 300, true),
        (NOW + 300, true),
        (NOW - 301, false),
        (NOW + 301, false),
    ] {
        let header = sign::stripe(STRIPE_SECRET.as_bytes(), ts, STRIPE_BODY);
        let result = stripe(&header, STRIPE_BODY);
        assert_eq!(result.is_ok(), ok, "ts offset {}: {result:?}", ts - NOW);
    }
    expect_err(
        stripe(
            &sign::stripe(STRIPE_SECRET.as_bytes(), NOW + 301, STRIPE_BODY),
            STRIPE_BODY,
        ),
        "timestamp_out_of_tolerance",
        "timestamp 1767225901 is 301 s in the future (tolerance 300 s)",
        &[],
    );
    expect_err(
        stripe(
            &sign::stripe(STRIPE_SECRET.as_bytes(), NOW - 301, STRIPE_BODY),
            STRIPE_BODY,
        ),
        "timestamp_out_of_tolerance",
        "timestamp 1767225299 is 301 s old (tolerance 300 s)",
        &[],
    );
}

#[test]
fn custom_tolerance_overrides_default() {
    let header = sign::stripe(STRIPE_SECRET.as_bytes(), NOW - 10, STRIPE_BODY);
    let headers: [(&str, &[u8]); 1] = [("Stripe-Signature", header.as_bytes())];
    let req = Request {
        headers: &headers,
        query: "",
        body: STRIPE_BODY,
    };
    let secrets: [&[u8]; 1] = [STRIPE_SECRET.as_bytes()];
    let mut verifier = Verifier {
        scheme: Scheme::Stripe,
        secrets: &secrets,
        tolerance_secs: Some(10),
        now_unix: NOW,
    };
    assert!(verifier.verify(&req).is_ok());
    verifier.tolerance_secs = Some(9);
    assert_eq!(
        verifier.verify(&req).unwrap_err().code(),
        "timestamp_out_of_tolerance"
    );
}

#[test]
fn stripe_payload_errors_are_not_signature_errors() {
    let cases: [(&[u8], &str, &str); 5] = [
        (
            b"not json",
            "malformed_payload",
            "malformed payload: body is not valid JSON (expected ident at line 1 column 2)",
        ),
        (
            b"[1,2]",
            "malformed_payload",
            "malformed payload: body is JSON but not an object (found an array)",
        ),
        (
            b"{\"id\":\"\"}",
            "missing_event_id",
            "no event id: body has no non-empty string \"id\" (Stripe event ids look like evt_...)",
        ),
        (
            b"{\"id\":42}",
            "missing_event_id",
            "no event id: body has no non-empty string \"id\" (Stripe event ids look like evt_...)",
        ),
        (
            b"{\"id\":\"evt_\xff\"}",
            "malformed_payload",
            "malformed payload: body is not valid JSON (invalid unicode code point at line 1 column 12)",
        ),
    ];
    for (body, code, message) in cases {
        let header = sign::stripe(STRIPE_SECRET.as_bytes(), NOW, body);
        let err = expect_err(stripe(&header, body), code, message, &[STRIPE_SECRET]);
        assert!(!err.is_signature_error(), "{err}");
    }
}

#[test]
fn different_length_signatures_do_not_panic() {
    // Short, long and empty candidates go through the constant-time comparison unharmed.
    for sig in ["00", "", &"ab".repeat(64), &"0".repeat(62)] {
        let result = stripe(&format!("t={NOW},v1={sig}"), STRIPE_BODY);
        assert!(result.is_err());
    }
    for sig in [
        "v1,",
        "v1,AAAA",
        "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        let result = run(
            Scheme::StandardWebhooks,
            &[SW_SECRET],
            &[
                ("webhook-id", "msg_1"),
                ("webhook-timestamp", &NOW.to_string()),
                ("webhook-signature", sig),
            ],
            "",
            SW_BODY,
        );
        assert_eq!(result.unwrap_err().code(), "signature_mismatch");
    }
}

#[test]
fn first_header_occurrence_wins_and_names_are_case_insensitive() {
    let good = sign::stripe(STRIPE_SECRET.as_bytes(), NOW, STRIPE_BODY);
    let bad = sign::stripe(b"whsec_other", NOW, STRIPE_BODY);
    let ok = run(
        Scheme::Stripe,
        &[STRIPE_SECRET],
        &[("STRIPE-SIGNATURE", &good), ("Stripe-Signature", &bad)],
        "",
        STRIPE_BODY,
    );
    assert!(ok.is_ok());
    let err = run(
        Scheme::Stripe,
        &[STRIPE_SECRET],
        &[("stripe-signature", &bad), ("Stripe-Signature", &good)],
        "",
        STRIPE_BODY,
    );
    assert_eq!(err.unwrap_err().code(), "signature_mismatch");
}

// ---------------------------------------------------------------- Standard Webhooks / Svix

fn sw_headers(prefix: &str, id: &str, ts: &str, sig: &str) -> Vec<(String, String)> {
    vec![
        (format!("{prefix}-id"), id.to_owned()),
        (format!("{prefix}-timestamp"), ts.to_owned()),
        (format!("{prefix}-signature"), sig.to_owned()),
    ]
}

fn sw(
    scheme: Scheme,
    secrets: &[&str],
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Verified, VerifyError> {
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    run(scheme, secrets, &headers, "", body)
}

#[test]
fn standard_webhooks_errors() {
    let s = &[SW_SECRET];
    let sig = sign::standard_webhooks(SW_SECRET.as_bytes(), "msg_1", NOW, SW_BODY).unwrap();
    expect_err(
        sw(
            Scheme::StandardWebhooks,
            s,
            &sw_headers("webhook", "msg_1", "hello", &sig),
            SW_BODY,
        ),
        "malformed_signature",
        "header webhook-timestamp: 'hello' is not an integer",
        s,
    );
    expect_err(
        sw(
            Scheme::StandardWebhooks,
            s,
            &sw_headers("webhook", "", &NOW.to_string(), &sig),
            SW_BODY,
        ),
        "missing_signature",
        "header webhook-id is empty",
        s,
    );
    expect_err(
        sw(
            Scheme::StandardWebhooks,
            s,
            &sw_headers("svix", "msg_1", &NOW.to_string(), &sig),
            SW_BODY,
        ),
        "missing_signature",
        "header webhook-id is missing",
        s,
    );
    expect_err(
        sw(
            Scheme::StandardWebhooks,
            s,
            &sw_headers(
                "webhook",
                "msg_1",
                &NOW.to_string(),
                "v1a,abc v2,def nocomma",
            ),
            SW_BODY,
        ),
        "malformed_signature",
        "header webhook-signature: no v1 signature among 3 entries (expected 'v1,<base64>')",
        s,
    );
    expect_err(
        sw(
            Scheme::StandardWebhooks,
            s,
            &sw_headers(
                "webhook",
                "msg_1",
                &(NOW - 301).to_string(),
                &sign::standard_webhooks(SW_SECRET.as_bytes(), "msg_1", NOW - 301, SW_BODY)
                    .unwrap(),
            ),
            SW_BODY,
        ),
        "timestamp_out_of_tolerance",
        "timestamp 1767225299 is 301 s old (tolerance 300 s)",
        s,
    );
    // Signed but not JSON: a payload error, the signature was fine.
    let body = b"plain text";
    let sig = sign::standard_webhooks(SW_SECRET.as_bytes(), "msg_1", NOW, body).unwrap();
    let err = expect_err(
        sw(
            Scheme::StandardWebhooks,
            s,
            &sw_headers("webhook", "msg_1", &NOW.to_string(), &sig),
            body,
        ),
        "malformed_payload",
        "malformed payload: body is not valid JSON (expected value at line 1 column 1)",
        s,
    );
    assert!(!err.is_signature_error());
}

#[test]
fn standard_webhooks_tolerance_boundary_both_directions() {
    for (offset, ok) in [(-300, true), (300, true), (-301, false), (301, false)] {
        let ts = NOW + offset;
        let sig = sign::standard_webhooks(SW_SECRET.as_bytes(), "msg_1", ts, SW_BODY).unwrap();
        let result = sw(
            Scheme::StandardWebhooks,
            &[SW_SECRET],
            &sw_headers("webhook", "msg_1", &ts.to_string(), &sig),
            SW_BODY,
        );
        assert_eq!(result.is_ok(), ok, "offset {offset}: {result:?}");
    }
}

#[test]
fn standard_webhooks_secret_forms() {
    // With and without whsec_, padded or not: all derive the same key.
    let raw = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let sig = sign::standard_webhooks(SW_SECRET.as_bytes(), "msg_1", NOW, SW_BODY).unwrap();
    let headers = sw_headers("webhook", "msg_1", &NOW.to_string(), &sig);
    for secret in [SW_SECRET, raw] {
        assert!(sw(Scheme::StandardWebhooks, &[secret], &headers, SW_BODY).is_ok());
    }
    // A 5-byte key whose base64 needs padding is accepted unpadded too.
    let padded = "whsec_aGVsbG8=";
    let unpadded = "whsec_aGVsbG8";
    let sig = sign::standard_webhooks(padded.as_bytes(), "msg_1", NOW, SW_BODY).unwrap();
    assert_eq!(
        sign::standard_webhooks(unpadded.as_bytes(), "msg_1", NOW, SW_BODY).unwrap(),
        sig
    );
    let headers = sw_headers("webhook", "msg_1", &NOW.to_string(), &sig);
    assert!(sw(Scheme::StandardWebhooks, &[unpadded], &headers, SW_BODY).is_ok());
}

#[test]
fn undecodable_secret_is_invalid_secret_only_when_nothing_matches() {
    let sig = sign::standard_webhooks(SW_SECRET.as_bytes(), "msg_1", NOW, SW_BODY).unwrap();
    let headers = sw_headers("webhook", "msg_1", &NOW.to_string(), &sig);
    let bad = "whsec_not*base64!";
    let ok = sw(
        Scheme::StandardWebhooks,
        &[bad, SW_SECRET],
        &headers,
        SW_BODY,
    )
    .unwrap();
    assert_eq!(ok.secret_index, 1);
    let err = expect_err(
        sw(Scheme::StandardWebhooks, &[bad], &headers, SW_BODY),
        "invalid_secret",
        "secret #0 configured for standard-webhooks cannot be used (not valid base64 after the optional 'whsec_' prefix) and no other configured secret verified the request",
        &[bad, "not*base64"],
    );
    assert!(err.is_signature_error());
    expect_err(
        run(Scheme::Adyen, &["XYZ"], &[], "", b"{}"),
        "malformed_signature",
        "body: has no notificationItems array",
        &[],
    );
}

#[test]
fn no_secret_configured() {
    expect_err(
        run(Scheme::Github, &[], &[], "", b""),
        "no_secret",
        "no secret configured for scheme github",
        &[],
    );
    // An empty configured secret is never used as a key.
    let body = b"{}";
    expect_err(
        run(Scheme::Github, &[""], &[("X-Hub-Signature-256", &sign::github(b"", body))], "", body),
        "invalid_secret",
        "secret #0 configured for github cannot be used (the secret is empty) and no other configured secret verified the request",
        &[],
    );
}

#[test]
fn svix_fallback_and_precedence() {
    let s = &[SW_SECRET];
    let sig = sign::svix(SW_SECRET.as_bytes(), "msg_w", NOW, SW_BODY).unwrap();
    let ok = sw(
        Scheme::Svix,
        s,
        &sw_headers("webhook", "msg_w", &NOW.to_string(), &sig),
        SW_BODY,
    )
    .unwrap();
    assert_eq!(ok.event_id, "msg_w");
    // A complete svix-* set wins over webhook-*.
    let svix_sig = sign::svix(SW_SECRET.as_bytes(), "msg_s", NOW, SW_BODY).unwrap();
    let mut headers = sw_headers("svix", "msg_s", &NOW.to_string(), &svix_sig);
    headers.extend(sw_headers("webhook", "msg_w", &NOW.to_string(), &sig));
    assert_eq!(
        sw(Scheme::Svix, s, &headers, SW_BODY).unwrap().event_id,
        "msg_s"
    );
    // Incomplete sets are never mixed.
    let mixed = vec![
        ("svix-id".to_owned(), "msg_w".to_owned()),
        ("webhook-timestamp".to_owned(), NOW.to_string()),
        ("webhook-signature".to_owned(), sig),
    ];
    expect_err(
        sw(Scheme::Svix, s, &mixed, SW_BODY),
        "missing_signature",
        "header svix-timestamp is missing (and there is no complete webhook-id/webhook-timestamp/webhook-signature set to fall back to)",
        s,
    );
}

#[test]
fn validate_secret_rules() {
    assert!(validate_secret(Scheme::Stripe, b"whsec_abc").is_ok());
    assert!(validate_secret(Scheme::Svix, SW_SECRET.as_bytes()).is_ok());
    assert!(validate_secret(Scheme::Adyen, ADYEN_SECRET.as_bytes()).is_ok());
    for (scheme, secret, why) in [
        (Scheme::Github, &b""[..], "the secret is empty"),
        (
            Scheme::Stripe,
            b"whsec_abc\n",
            "the secret has leading or trailing whitespace (a newline from a secrets file?)",
        ),
        (
            Scheme::StandardWebhooks,
            b"whsec_***",
            "not valid base64 after the optional 'whsec_' prefix",
        ),
        (
            Scheme::StandardWebhooks,
            b"whsec_",
            "the secret decodes to zero key bytes",
        ),
        (
            Scheme::Svix,
            b"whsk_abcd",
            "this is an ed25519 (v1a) key; only symmetric whsec_ secrets are supported",
        ),
        (
            Scheme::Adyen,
            b"ABC",
            "not valid hex (Adyen HMAC keys are hex strings)",
        ),
        (
            Scheme::Shopify,
            b"\xff\xfe",
            "the secret is not valid UTF-8",
        ),
    ] {
        assert_eq!(
            validate_secret(scheme, secret).unwrap_err(),
            why,
            "{scheme}"
        );
    }
}

// ---------------------------------------------------------------- GitHub

#[test]
fn github_errors_and_fields() {
    let s = &[GH_SECRET];
    let body = br#"{"action":"opened","issue":{"number":1}}"#;
    let sig = sign::github(GH_SECRET.as_bytes(), body);
    let ok = run(
        Scheme::Github,
        s,
        &[
            ("X-Hub-Signature-256", &sig),
            ("X-GitHub-Delivery", "d-1"),
            ("X-GitHub-Event", "issues"),
        ],
        "",
        body,
    )
    .unwrap();
    assert_eq!(ok.event_id, "d-1");
    assert_eq!(ok.event_type.as_deref(), Some("issues.opened"));
    assert_eq!(ok.signed_at, None);

    expect_err(
        run(Scheme::Github, s, &[("X-Hub-Signature", "sha1=00"), ("X-GitHub-Delivery", "d-1")], "", body),
        "missing_signature",
        "header X-Hub-Signature-256 is missing (a legacy X-Hub-Signature SHA-1 header is present, but only X-Hub-Signature-256 is accepted)",
        s,
    );
    expect_err(
        run(
            Scheme::Github,
            s,
            &[("X-Hub-Signature-256", "sha256=abcd")],
            "",
            body,
        ),
        "malformed_signature",
        "header X-Hub-Signature-256: value after 'sha256=' has 4 hex digits, expected 64",
        s,
    );
    expect_err(
        run(
            Scheme::Github,
            s,
            &[("X-Hub-Signature-256", "sha1=abcd")],
            "",
            body,
        ),
        "malformed_signature",
        "header X-Hub-Signature-256: value does not start with 'sha256='",
        s,
    );
    let err = expect_err(
        run(
            Scheme::Github,
            s,
            &[("X-Hub-Signature-256", &sig)],
            "",
            body,
        ),
        "missing_event_id",
        "no event id: header X-GitHub-Delivery is missing",
        s,
    );
    assert!(!err.is_signature_error());
    // A non-JSON body is fine for GitHub (form-encoded deliveries exist).
    let ok = run(
        Scheme::Github,
        s,
        &[
            (
                "X-Hub-Signature-256",
                &sign::github(GH_SECRET.as_bytes(), b"payload=%7B%7D"),
            ),
            ("X-GitHub-Delivery", "d-2"),
        ],
        "",
        b"payload=%7B%7D",
    )
    .unwrap();
    assert_eq!(ok.event_type, None);
}

// ---------------------------------------------------------------- Mercado Pago

const MP_BODY: &[u8] =
    br#"{"action":"payment.updated","data":{"id":"123456789"},"id":12345678901,"type":"payment"}"#;

fn mp(ts: i64, query: &str, body: &[u8]) -> Result<Verified, VerifyError> {
    let header = sign::mercadopago(MP_SECRET.as_bytes(), Some("123456789"), Some("req-1"), ts);
    run(
        Scheme::MercadoPago,
        &[MP_SECRET],
        &[("x-signature", &header), ("x-request-id", "req-1")],
        query,
        body,
    )
}

#[test]
fn mercadopago_millisecond_and_second_timestamps() {
    let q = "data.id=123456789&type=payment";
    let ok = mp(NOW * 1000 - 1500, q, MP_BODY).unwrap();
    assert_eq!(ok.signed_at, Some(NOW - 2));
    assert_eq!(ok.event_id, "12345678901");
    assert_eq!(ok.event_type.as_deref(), Some("payment"));
    assert_eq!(mp(NOW - 2, q, MP_BODY).unwrap().signed_at, Some(NOW - 2));
    // 13 digits are milliseconds: the boundary is in seconds, both directions.
    for (ms, ok) in [
        ((NOW - 300) * 1000, true),
        ((NOW + 300) * 1000, true),
        ((NOW - 301) * 1000, false),
        ((NOW + 301) * 1000, false),
    ] {
        assert_eq!(mp(ms, q, MP_BODY).is_ok(), ok, "ts {ms}");
    }
    expect_err(
        mp((NOW - 301) * 1000, q, MP_BODY),
        "timestamp_out_of_tolerance",
        "timestamp 1767225299 is 301 s old (tolerance 300 s)",
        &[MP_SECRET],
    );
    // Treated as seconds, a millisecond value is far in the future.
    let fourteen = NOW * 10_000;
    assert_eq!(
        mp(fourteen, q, MP_BODY).unwrap_err().code(),
        "timestamp_out_of_tolerance"
    );
}

#[test]
fn mercadopago_manifest_and_body_rules() {
    let s = &[MP_SECRET];
    // The query id is percent-decoded, and upper case is signed lower-cased.
    let header = sign::mercadopago(MP_SECRET.as_bytes(), Some("ord01 x"), None, NOW);
    let body = br#"{"id":"n-1","data":{"id":"ORD01 X"},"action":"order.processed"}"#;
    let ok = run(
        Scheme::MercadoPago,
        s,
        &[("x-signature", &header)],
        "data.id=ORD01%20X",
        body,
    )
    .unwrap();
    assert_eq!(ok.event_id, "n-1");
    assert_eq!(ok.event_type.as_deref(), Some("order.processed"));

    let q = "data.id=123456789&type=payment";
    let other = br#"{"data":{"id":"999"},"id":1}"#;
    let err = expect_err(
        mp(NOW, q, other),
        "signed_field_mismatch",
        "body data.id '999' differs from the signed query data.id '123456789'",
        s,
    );
    assert!(err.is_signature_error());
    // A numeric body data.id compares by its decimal text.
    assert!(mp(NOW, q, br#"{"data":{"id":123456789},"id":"n"}"#).is_ok());
    expect_err(
        mp(NOW, q, br#"{"data":{"id":"123456789"}}"#),
        "missing_event_id",
        "no event id: body has no \"id\" (string or number)",
        s,
    );
    expect_err(
        mp(NOW, "type=payment", MP_BODY),
        "signature_mismatch",
        "no v1 signature in header x-signature (manifest 'request-id:req-1;ts:1767225600;') matches the configured secret",
        s,
    );
    for (header, message) in [
        ("ts=1,v1=zz", "header x-signature: v1= value is not hex"),
        ("v1=00", "header x-signature: no ts= timestamp"),
        ("ts=1", "header x-signature: no v1= signature"),
        (
            "ts=1,ts=2,v1=00",
            "header x-signature: more than one ts= item",
        ),
        ("ts=abc,v1=", "header x-signature: no v1= signature"),
    ] {
        expect_err(
            run(
                Scheme::MercadoPago,
                s,
                &[("x-signature", header)],
                q,
                MP_BODY,
            ),
            "malformed_signature",
            message,
            s,
        );
    }
    let hex64 = "0".repeat(64);
    expect_err(
        run(
            Scheme::MercadoPago,
            s,
            &[("x-signature", &format!("ts=abc,v1={hex64}"))],
            q,
            MP_BODY,
        ),
        "malformed_signature",
        "header x-signature: ts= value 'abc' is not an integer",
        s,
    );
    expect_err(
        run(
            Scheme::MercadoPago,
            s,
            &[("x-signature", &format!("ts=1,v1={hex64},junk"))],
            q,
            MP_BODY,
        ),
        "malformed_signature",
        "header x-signature: item 3 of 3 is not key=value",
        s,
    );
}

// ---------------------------------------------------------------- Shopify

#[test]
fn shopify_errors_and_fields() {
    let s = &[SHOP_SECRET];
    let body = br#"{"id":1}"#;
    let sig = sign::shopify(SHOP_SECRET.as_bytes(), body);
    let ok = run(
        Scheme::Shopify,
        s,
        &[
            ("X-Shopify-Hmac-Sha256", &sig),
            ("X-Shopify-Webhook-Id", "wh-1"),
            ("X-Shopify-Topic", "orders/create"),
        ],
        "",
        body,
    )
    .unwrap();
    assert_eq!(
        (ok.event_id.as_str(), ok.event_type.as_deref()),
        ("wh-1", Some("orders/create"))
    );
    let err = expect_err(
        run(
            Scheme::Shopify,
            s,
            &[
                ("X-Shopify-Hmac-SHA256", &sig),
                ("X-Shopify-Event-Id", "ev-1"),
            ],
            "",
            body,
        ),
        "missing_event_id",
        "no event id: header X-Shopify-Webhook-Id is missing",
        s,
    );
    assert!(!err.is_signature_error());
    expect_err(
        run(Scheme::Shopify, s, &[("X-Shopify-Hmac-SHA256", "AAAA")], "", body),
        "malformed_signature",
        "header X-Shopify-Hmac-SHA256: decodes to 3 bytes, expected 32 (a hex digest instead of base64?)",
        s,
    );
}

// ---------------------------------------------------------------- Pagar.me

#[test]
fn pagarme_errors_and_fields() {
    let s = &[PAGARME_SECRET];
    let body = b"id=77&event=transaction_status_changed&current_status=paid";
    let sha1 = sign::pagarme(PAGARME_SECRET.as_bytes(), body);
    let ok = run(Scheme::Pagarme, s, &[("X-Hub-Signature", &sha1)], "", body).unwrap();
    assert_eq!(ok.event_id, "pagarme:77:transaction_status_changed:paid");
    assert_eq!(ok.event_type.as_deref(), Some("transaction_status_changed"));

    // sha256 is accepted too (the SDK takes the digest from the header).
    let sha256 = sign::github(PAGARME_SECRET.as_bytes(), body);
    assert!(run(
        Scheme::Pagarme,
        s,
        &[("X-Hub-Signature", &sha256)],
        "",
        body
    )
    .is_ok());

    // No current_status: fall back to a body hash.
    let body2 = b"id=77&event=subscription_created";
    let ok = run(
        Scheme::Pagarme,
        s,
        &[(
            "X-Hub-Signature",
            &sign::pagarme(PAGARME_SECRET.as_bytes(), body2),
        )],
        "",
        body2,
    )
    .unwrap();
    assert!(
        ok.event_id.starts_with("sha256:") && ok.event_id.len() == 7 + 64,
        "{}",
        ok.event_id
    );

    expect_err(
        run(
            Scheme::Pagarme,
            s,
            &[("X-Hub-Signature", "md5=00")],
            "",
            body,
        ),
        "malformed_signature",
        "header X-Hub-Signature: digest 'md5' not allowed (sha1, sha256)",
        s,
    );
    expect_err(
        run(
            Scheme::Pagarme,
            s,
            &[("X-Hub-Signature", "sha1=abcd")],
            "",
            body,
        ),
        "malformed_signature",
        "header X-Hub-Signature: value after 'sha1=' has 4 hex digits, expected 40",
        s,
    );
    let bad = b"id=1&x=\xff";
    let err = expect_err(
        run(
            Scheme::Pagarme,
            s,
            &[(
                "X-Hub-Signature",
                &sign::pagarme(PAGARME_SECRET.as_bytes(), bad),
            )],
            "",
            bad,
        ),
        "malformed_payload",
        "malformed payload: form body is not valid UTF-8",
        s,
    );
    assert!(!err.is_signature_error());
}

// ---------------------------------------------------------------- Adyen

fn adyen_item(psp: &str, value: i64) -> serde_json::Value {
    serde_json::json!({
        "amount": {"currency": "EUR", "value": value},
        "eventCode": "AUTHORISATION",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "ref:1",
        "pspReference": psp,
        "success": "true",
    })
}

fn adyen_body(items: &[serde_json::Value]) -> Vec<u8> {
    let items: Vec<_> = items
        .iter()
        .map(|i| serde_json::json!({"NotificationRequestItem": i}))
        .collect();
    serde_json::to_vec(&serde_json::json!({"live": "false", "notificationItems": items})).unwrap()
}

fn signed_adyen_item(secret: &str, psp: &str, value: i64) -> serde_json::Value {
    let mut item = adyen_item(psp, value);
    let sig = sign::adyen(secret.as_bytes(), &item).unwrap();
    item["additionalData"] = serde_json::json!({ "hmacSignature": sig });
    item
}

#[test]
fn adyen_batches_and_errors() {
    let s = &[ADYEN_SECRET];
    let a = signed_adyen_item(ADYEN_SECRET, "PSP1", 100);
    let b = signed_adyen_item(ADYEN_SECRET, "PSP2", 200);
    let ok = run(
        Scheme::Adyen,
        s,
        &[],
        "",
        &adyen_body(&[a.clone(), b.clone()]),
    )
    .unwrap();
    assert_eq!(ok.event_id, "PSP1:AUTHORISATION:true");
    assert_eq!(ok.event_type.as_deref(), Some("AUTHORISATION"));

    // Every item must verify.
    let mut tampered = b.clone();
    tampered["amount"]["value"] = serde_json::json!(201);
    expect_err(
        run(Scheme::Adyen, s, &[], "", &adyen_body(&[a.clone(), tampered])),
        "signature_mismatch",
        "no hmacSignature in body notificationItems (2 items, all must verify with one key) matches the configured secret",
        s,
    );
    // ... with one key: items signed by two different configured keys are rejected.
    let other_key = "00112233445566778899AABBCCDDEEFF";
    let c = signed_adyen_item(other_key, "PSP3", 300);
    let keys = &[ADYEN_SECRET, other_key];
    assert_eq!(
        run(
            Scheme::Adyen,
            keys,
            &[],
            "",
            &adyen_body(&[a.clone(), c.clone()])
        )
        .unwrap_err()
        .code(),
        "signature_mismatch"
    );
    assert_eq!(
        run(Scheme::Adyen, keys, &[], "", &adyen_body(&[c]))
            .unwrap()
            .secret_index,
        1
    );

    expect_err(
        run(Scheme::Adyen, s, &[], "", b"<xml/>"),
        "malformed_signature",
        "body: not valid JSON, so the Adyen hmacSignature cannot be read (expected value at line 1 column 1)",
        s,
    );
    expect_err(
        run(Scheme::Adyen, s, &[], "", br#"{"notificationItems":[]}"#),
        "malformed_signature",
        "body: notificationItems is empty",
        s,
    );
    expect_err(
        run(
            Scheme::Adyen,
            s,
            &[],
            "",
            &adyen_body(&[adyen_item("PSP1", 1)]),
        ),
        "missing_signature",
        "body notificationItems[0].NotificationRequestItem.additionalData.hmacSignature is missing",
        s,
    );
    let no_psp = signed_adyen_item(ADYEN_SECRET, "", 5);
    let err = expect_err(
        run(Scheme::Adyen, s, &[], "", &adyen_body(&[no_psp])),
        "missing_event_id",
        "no event id: notificationItems[0].NotificationRequestItem has no pspReference",
        s,
    );
    assert!(!err.is_signature_error());
}

// ---------------------------------------------------------------- Scheme and Debug

#[test]
fn scheme_names_round_trip() {
    for scheme in Scheme::ALL {
        assert_eq!(scheme.as_str().parse::<Scheme>().unwrap(), scheme);
        assert_eq!(scheme.to_string(), scheme.as_str());
        assert_eq!(
            scheme.signs_timestamp(),
            scheme.default_tolerance_secs() == Some(300)
        );
    }
    assert_eq!(
        " Standard-Webhooks ".parse::<Scheme>().unwrap(),
        Scheme::StandardWebhooks
    );
    let err = "paypal".parse::<Scheme>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown signature scheme 'paypal' (valid: stripe, standard-webhooks, svix, github, mercadopago, shopify, pagarme, adyen, pagarme-v5)"
    );
    let timestamped: Vec<_> = Scheme::ALL
        .into_iter()
        .filter(Scheme::signs_timestamp)
        .collect();
    assert_eq!(
        timestamped,
        [
            Scheme::Stripe,
            Scheme::StandardWebhooks,
            Scheme::Svix,
            Scheme::MercadoPago
        ]
    );
    assert_eq!(
        Scheme::Pagarme.payload_format().content_type(),
        "application/x-www-form-urlencoded"
    );
    assert_eq!(
        Scheme::Adyen.payload_format().content_type(),
        "application/json"
    );
}

#[test]
fn debug_output_redacts_secrets_and_values() {
    let secrets: [&[u8]; 1] = [b"super-secret-value"];
    let verifier = Verifier {
        scheme: Scheme::Github,
        secrets: &secrets,
        tolerance_secs: None,
        now_unix: NOW,
    };
    let text = format!("{verifier:?}");
    assert!(!text.contains("super-secret-value"), "{text}");
    assert!(text.contains("<1 redacted>"), "{text}");
    let headers: [(&str, &[u8]); 1] = [("X-Hub-Signature-256", b"sha256=deadbeef")];
    let req = Request {
        headers: &headers,
        query: "",
        body: b"private body",
    };
    let text = format!("{req:?}");
    assert!(
        !text.contains("deadbeef") && !text.contains("private"),
        "{text}"
    );
}

#[test]
fn echoed_values_are_truncated_and_escaped() {
    let long = format!("{}\n", "x".repeat(100));
    let err = run(
        Scheme::StandardWebhooks,
        &[SW_SECRET],
        &[
            ("webhook-id", "m"),
            ("webhook-timestamp", &long),
            ("webhook-signature", "v1,AA=="),
        ],
        "",
        SW_BODY,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(!text.contains('\n'), "{text}");
    assert!(text.contains('…') && text.len() < 100, "{text}");
}
