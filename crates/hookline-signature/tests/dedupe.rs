//! The dedupe key comes only from signed material: a captured request replayed with unsigned parts changed can
//! neither become a new event nor shadow a different genuine one.

use hookline_signature::{sign, Request, Scheme, Verified, Verifier, VerifyError};

const NOW: i64 = 1_767_225_600;

fn verify(
    scheme: Scheme,
    secret: &[u8],
    headers: &[(&str, &[u8])],
    query: &str,
    body: &[u8],
) -> Result<Verified, VerifyError> {
    let secrets = [secret];
    Verifier {
        scheme,
        secrets: &secrets,
        tolerance_secs: scheme.signs_timestamp().then_some(300),
        now_unix: NOW,
    }
    .verify(&Request {
        headers,
        query,
        body,
    })
}

fn mp(body: &str, query_id: Option<&str>, request_id: &str) -> Result<Verified, VerifyError> {
    let secret = b"mp_secret";
    let sig = sign::mercadopago(secret, query_id, Some(request_id), NOW);
    let query = query_id.map(|id| format!("data.id={id}&type=payment"));
    verify(
        Scheme::MercadoPago,
        secret,
        &[
            ("x-signature", sig.as_bytes()),
            ("x-request-id", request_id.as_bytes()),
        ],
        query.as_deref().unwrap_or(""),
        body.as_bytes(),
    )
}

#[test]
fn mercadopago_key_ignores_the_unsigned_body_id() {
    let genuine = mp(
        r#"{"id":111,"type":"payment","data":{"id":"123"}}"#,
        Some("123"),
        "req-a",
    )
    .expect("genuine");
    // The attacker replays the same signed request with the body id of the next notification.
    let tampered = mp(
        r#"{"id":222,"type":"payment","data":{"id":"123"}}"#,
        Some("123"),
        "req-a",
    )
    .expect("the body is not signed, so it still verifies");
    assert_eq!(genuine.dedupe_key, tampered.dedupe_key);
    assert_eq!(genuine.dedupe_key, "mp:123:req-a");
    // The next genuine notification (another request id) has its own key, whatever bodies were replayed.
    let next = mp(
        r#"{"id":222,"type":"payment","data":{"id":"123"}}"#,
        Some("123"),
        "req-b",
    )
    .expect("next");
    assert_ne!(next.dedupe_key, tampered.dedupe_key);
}

#[test]
fn mercadopago_without_a_signed_or_body_data_id_is_refused() {
    let no_query = mp(r#"{"id":1,"type":"payment"}"#, None, "req-a").unwrap_err();
    assert_eq!(no_query.code(), "missing_event_id");
    let no_body = mp(r#"{"id":1,"type":"payment"}"#, Some("123"), "req-a").unwrap_err();
    assert_eq!(no_body.code(), "missing_event_id");
}

#[test]
fn body_signed_schemes_key_on_the_body_not_the_delivery_header() {
    let body = br#"{"action":"opened","number":1}"#;
    let secret = b"gh_secret";
    let sig = sign::github(secret, body);
    let with_delivery = |delivery: &str| {
        verify(
            Scheme::Github,
            secret,
            &[
                ("X-Hub-Signature-256", sig.as_bytes()),
                ("X-GitHub-Delivery", delivery.as_bytes()),
                ("X-GitHub-Event", b"issues"),
            ],
            "",
            body,
        )
        .expect("valid")
    };
    let a = with_delivery("72d3162e-cc78-11e3-81ab-4c9367dc0958");
    let b = with_delivery("00000000-0000-0000-0000-000000000000");
    assert_eq!(a.event_id, "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    assert_eq!(
        a.dedupe_key, b.dedupe_key,
        "a new delivery id is the same signed body"
    );
    assert!(a.dedupe_key.starts_with("sha256:"));

    let shop_secret = b"shop_secret";
    let shop_sig = sign::shopify(shop_secret, body);
    let shop = |id: &str| {
        verify(
            Scheme::Shopify,
            shop_secret,
            &[
                ("X-Shopify-Hmac-SHA256", shop_sig.as_bytes()),
                ("X-Shopify-Webhook-Id", id.as_bytes()),
            ],
            "",
            body,
        )
        .expect("valid")
    };
    assert_eq!(shop("a").dedupe_key, shop("b").dedupe_key);
}

#[test]
fn signed_ids_are_the_key_where_the_scheme_signs_them() {
    let body = br#"{"id":"evt_1","type":"invoice.paid"}"#;
    let header = sign::stripe(b"whsec_x", NOW, body);
    let v = verify(
        Scheme::Stripe,
        b"whsec_x",
        &[("Stripe-Signature", header.as_bytes())],
        "",
        body,
    )
    .expect("valid");
    assert_eq!(v.dedupe_key, "evt_1");
    assert_eq!(v.event_id, "evt_1");
}
