//! Property tests: hostile input never panics and never verifies without the secret; requests
//! produced by `sign` always verify, and flipping any body byte breaks schemes that sign the body.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hookline_signature::{sign, Request, Scheme, Verifier};
use proptest::prelude::*;
use proptest::sample::Index;

/// Every header name any scheme reads, so random requests reach deep into the parsers.
const HEADER_NAMES: &[&str] = &[
    "Stripe-Signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "X-Hub-Signature-256",
    "X-Hub-Signature",
    "X-GitHub-Delivery",
    "X-GitHub-Event",
    "x-signature",
    "x-request-id",
    "X-Shopify-Hmac-SHA256",
    "X-Shopify-Webhook-Id",
    "X-Shopify-Topic",
    "Authorization",
];

fn scheme() -> impl Strategy<Value = Scheme> {
    prop::sample::select(Scheme::ALL.to_vec())
}

/// A well-formed configured secret for `scheme` (printable text, `whsec_` base64, or hex).
fn secret_for(scheme: Scheme) -> BoxedStrategy<String> {
    match scheme {
        Scheme::StandardWebhooks | Scheme::Svix => prop::collection::vec(any::<u8>(), 24..=64)
            .prop_map(|k| format!("whsec_{}", STANDARD.encode(k)))
            .boxed(),
        Scheme::Adyen => prop::collection::vec(any::<u8>(), 16..=64)
            .prop_map(hex::encode_upper)
            .boxed(),
        // Pagar.me v5 credentials are `user:password`.
        Scheme::PagarmeV5 => "[!-~]{1,20}:[!-~]{0,20}".boxed(),
        _ => "[!-~]{1,40}".boxed(),
    }
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (prop::sample::select(HEADER_NAMES), any::<bool>()).prop_map(|(n, upper)| {
            if upper { n.to_ascii_uppercase() } else { n.to_ascii_lowercase() }
        }),
        1 => "[A-Za-z-]{1,24}",
    ]
}

/// Header values: raw bytes, free text, and near-misses of every scheme's syntax.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..120),
        ".{0,80}".prop_map(String::into_bytes),
        "t=[0-9]{0,12}(,v[01]=[0-9a-f]{0,70}){0,3}".prop_map(String::into_bytes),
        "(v1a?|v2),[A-Za-z0-9+/=]{0,50}( v1,[A-Za-z0-9+/]{43}=)?".prop_map(String::into_bytes),
        "(sha1|sha256|md5|SHA256|)=[0-9a-fx]{0,70}".prop_map(String::into_bytes),
        "ts=[0-9]{9,14}, ?v1=[0-9a-f]{60,66}".prop_map(String::into_bytes),
        "[0-9]{1,22}".prop_map(String::into_bytes),
        "[A-Za-z0-9+/]{43}=".prop_map(String::into_bytes),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        ".{0,200}".prop_map(String::into_bytes),
        // Shapes that parse, with unauthentic signatures inside.
        ("[A-Za-z0-9+/]{43}=", ".{0,20}", any::<i64>()).prop_map(|(sig, reference, value)| {
            serde_json::to_vec(&serde_json::json!({
                "notificationItems": [{"NotificationRequestItem": {
                    "additionalData": {"hmacSignature": sig},
                    "amount": {"value": value, "currency": "EUR"},
                    "merchantReference": reference,
                    "pspReference": "PSP", "eventCode": "AUTHORISATION", "success": "true"
                }}]
            }))
            .unwrap()
        }),
        ("evt_[a-z0-9]{1,10}", ".{0,20}").prop_map(|(id, text)| {
            serde_json::to_vec(&serde_json::json!({"id": id, "type": text, "data": {"id": "1"}}))
                .unwrap()
        }),
    ]
}

fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,40}",
        "\\??data\\.id=[A-Za-z0-9%]{0,20}(&type=payment)?"
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Arbitrary requests, arbitrary clocks and tolerances: no panic, and nothing verifies
    /// without knowing the secret.
    #[test]
    fn hostile_requests_never_panic_or_verify(
        (scheme, secret) in scheme().prop_flat_map(|s| (Just(s), secret_for(s))),
        raw_secret in prop::collection::vec(any::<u8>(), 0..40),
        headers in prop::collection::vec((header_name(), header_value()), 0..10),
        query in query(),
        body in body(),
        now in prop_oneof![any::<i64>(), 1_000_000_000i64..4_000_000_000],
        tolerance in any::<Option<u64>>(),
    ) {
        let header_refs: Vec<(&str, &[u8])> =
            headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        let secrets: [&[u8]; 2] = [secret.as_bytes(), &raw_secret];
        let req = Request { headers: &header_refs, query: &query, body: &body };
        let result = Verifier { scheme, secrets: &secrets, tolerance_secs: tolerance, now_unix: now }
            .verify(&req);
        prop_assert!(result.is_err(), "{scheme} verified a forged request: {result:?}");
        let err = result.unwrap_err();
        // Whatever happened, it is an authentication failure: nothing was verified.
        prop_assert!(err.is_signature_error(), "{err}");
        // (Short secrets can occur in any text by chance; long ones must never appear.)
        prop_assert!(secret.len() < 12 || !err.to_string().contains(&secret), "secret leaked: {err}");
        prop_assert!(!err.code().is_empty());
    }
}

/// The random parts of one authentic request.
#[derive(Debug, Clone)]
struct Seed {
    token: String,
    text: String,
    raw: Vec<u8>,
    number: u64,
    offset: i64,
    millis: bool,
    trailing_newline: bool,
    request_id: Option<String>,
}

fn seed() -> impl Strategy<Value = Seed> {
    (
        "[A-Za-z0-9_-]{1,24}",
        ".{0,40}",
        prop::collection::vec(any::<u8>(), 0..200),
        any::<u64>(),
        -300i64..=300,
        any::<bool>(),
        any::<bool>(),
        proptest::option::of("[a-f0-9-]{1,36}"),
    )
        .prop_map(
            |(token, text, raw, number, offset, millis, trailing_newline, request_id)| Seed {
                token,
                text,
                raw,
                number,
                offset,
                millis,
                trailing_newline,
                request_id,
            },
        )
}

/// A request as the provider would send it: headers, query, body, expected event id.
struct Signed {
    headers: Vec<(String, String)>,
    query: String,
    body: Vec<u8>,
    event_id: String,
    signs_body: bool,
}

fn json_body(value: serde_json::Value, trailing_newline: bool) -> Vec<u8> {
    let mut body = serde_json::to_vec(&value).unwrap();
    if trailing_newline {
        body.push(b'\n');
    }
    body
}

fn signed_request(scheme: Scheme, secret: &str, s: &Seed, now: i64) -> Signed {
    let key = secret.as_bytes();
    let ts = now + s.offset;
    let h = |pairs: &[(&str, String)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    };
    match scheme {
        Scheme::Stripe => {
            let id = format!("evt_{}", s.token);
            let body = json_body(
                serde_json::json!({"id": id, "type": "invoice.paid", "data": {"note": s.text}}),
                s.trailing_newline,
            );
            Signed {
                headers: h(&[("Stripe-Signature", sign::stripe(key, ts, &body))]),
                query: String::new(),
                body,
                event_id: id,
                signs_body: true,
            }
        }
        Scheme::StandardWebhooks | Scheme::Svix => {
            let prefix = if scheme == Scheme::Svix && s.millis {
                "svix"
            } else {
                "webhook"
            };
            let id = format!("msg_{}", s.token);
            let body = json_body(
                serde_json::json!({"type": "contact.created", "data": {"note": s.text}}),
                s.trailing_newline,
            );
            let sig = sign::standard_webhooks(key, &id, ts, &body).unwrap();
            Signed {
                headers: h(&[
                    (&format!("{prefix}-id"), id.clone()),
                    (&format!("{prefix}-timestamp"), ts.to_string()),
                    (&format!("{prefix}-signature"), format!("v2,AAAA {sig}")),
                ]),
                query: String::new(),
                body,
                event_id: id,
                signs_body: true,
            }
        }
        Scheme::Github => Signed {
            headers: h(&[
                ("X-Hub-Signature-256", sign::github(key, &s.raw)),
                ("X-GitHub-Delivery", s.token.clone()),
                ("X-GitHub-Event", "push".to_owned()),
            ]),
            query: String::new(),
            body: s.raw.clone(),
            event_id: s.token.clone(),
            signs_body: true,
        },
        Scheme::Shopify => Signed {
            headers: h(&[
                ("X-Shopify-Hmac-SHA256", sign::shopify(key, &s.raw)),
                ("X-Shopify-Webhook-Id", s.token.clone()),
            ]),
            query: String::new(),
            body: s.raw.clone(),
            event_id: s.token.clone(),
            signs_body: true,
        },
        Scheme::Pagarme => {
            let mut body = form_urlencoded::Serializer::new(String::new())
                .append_pair("id", &s.number.to_string())
                .append_pair("event", "transaction_status_changed")
                .append_pair("current_status", &s.token)
                .append_pair("transaction[customer][name]", &s.text)
                .finish()
                .into_bytes();
            if s.trailing_newline {
                body.push(b'\n');
            }
            Signed {
                headers: h(&[("X-Hub-Signature", sign::pagarme(key, &body))]),
                query: String::new(),
                event_id: format!(
                    "pagarme:{}:transaction_status_changed:{}",
                    s.number, s.token
                ),
                body,
                signs_body: true,
            }
        }
        Scheme::MercadoPago => {
            let header_ts = if s.millis { ts * 1000 + 999 } else { ts };
            let data_id = s.token.clone();
            let mut headers = h(&[(
                "x-signature",
                sign::mercadopago(key, Some(&data_id), s.request_id.as_deref(), header_ts),
            )]);
            if let Some(rid) = &s.request_id {
                headers.push(("x-request-id".to_owned(), rid.clone()));
            }
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("data.id", &data_id)
                .append_pair("type", "payment")
                .finish();
            Signed {
                headers,
                query,
                body: json_body(
                    serde_json::json!({"id": s.number, "type": "payment", "data": {"id": data_id}, "note": s.text}),
                    s.trailing_newline,
                ),
                event_id: s.number.to_string(),
                signs_body: false,
            }
        }
        Scheme::Adyen => {
            let mut item = serde_json::json!({
                "amount": {"currency": "EUR", "value": s.number},
                "eventCode": "AUTHORISATION",
                "merchantAccountCode": "TestMerchant",
                "merchantReference": s.text,
                "pspReference": s.token,
                "success": "true",
            });
            item["additionalData"] =
                serde_json::json!({"hmacSignature": sign::adyen(key, &item).unwrap()});
            Signed {
                headers: Vec::new(),
                query: String::new(),
                body: json_body(
                    serde_json::json!({"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}),
                    s.trailing_newline,
                ),
                event_id: format!("{}:AUTHORISATION:true", s.token),
                signs_body: false,
            }
        }
        Scheme::PagarmeV5 => {
            let id = format!("hook_{}", s.token);
            Signed {
                headers: h(&[("Authorization", sign::pagarme_v5(key))]),
                query: String::new(),
                body: json_body(
                    serde_json::json!({"id": id, "type": "charge.paid", "data": {"id": "ch_1", "note": s.text}}),
                    s.trailing_newline,
                ),
                event_id: id,
                // Nothing is signed: the credential does not cover the body.
                signs_body: false,
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// sign -> verify succeeds (with the matching secret second during rotation), and any
    /// single-byte change to a signed body is a signature mismatch.
    #[test]
    fn sign_then_verify_round_trip(
        (scheme, secret, old_secret) in scheme().prop_flat_map(|s| (Just(s), secret_for(s), secret_for(s))),
        seed in seed(),
        rotate in any::<bool>(),
        now in 1_000_000_000i64..4_000_000_000,
        flip_at in any::<Index>(),
        flip_mask in 1u8..=255,
    ) {
        prop_assume!(secret != old_secret);
        let signed = signed_request(scheme, &secret, &seed, now);
        let secrets: Vec<&[u8]> = if rotate {
            vec![old_secret.as_bytes(), secret.as_bytes()]
        } else {
            vec![secret.as_bytes()]
        };
        let verifier = Verifier { scheme, secrets: &secrets, tolerance_secs: None, now_unix: now };
        let headers: Vec<(&str, &[u8])> =
            signed.headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes())).collect();
        let req = Request { headers: &headers, query: &signed.query, body: &signed.body };

        let ok = verifier.verify(&req);
        prop_assert!(ok.is_ok(), "{scheme}: {:?}", ok);
        let ok = ok.unwrap();
        prop_assert_eq!(&ok.event_id, &signed.event_id);
        prop_assert_eq!(ok.secret_index, usize::from(rotate));
        prop_assert_eq!(ok.signed_at.is_some(), scheme.signs_timestamp());

        if signed.signs_body && !signed.body.is_empty() {
            let mut tampered = signed.body.clone();
            let at = flip_at.index(tampered.len());
            tampered[at] ^= flip_mask;
            let req = Request { body: &tampered, ..req };
            let err = verifier.verify(&req);
            prop_assert!(err.is_err(), "{scheme} accepted a tampered body");
            prop_assert_eq!(err.unwrap_err().code(), "signature_mismatch");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A perfectly well-formed request signed with any other secret is a signature mismatch,
    /// for every scheme (the attacker controls everything but the secret).
    #[test]
    fn well_formed_but_signed_with_another_secret_is_rejected(
        (scheme, secret, attacker_secret) in scheme().prop_flat_map(|s| (Just(s), secret_for(s), secret_for(s))),
        seed in seed(),
        now in 1_000_000_000i64..4_000_000_000,
    ) {
        prop_assume!(secret != attacker_secret);
        let forged = signed_request(scheme, &attacker_secret, &seed, now);
        let secrets: [&[u8]; 1] = [secret.as_bytes()];
        let headers: Vec<(&str, &[u8])> =
            forged.headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes())).collect();
        let req = Request { headers: &headers, query: &forged.query, body: &forged.body };
        let result = Verifier { scheme, secrets: &secrets, tolerance_secs: None, now_unix: now }
            .verify(&req);
        prop_assert!(result.is_err(), "{scheme} accepted a forgery");
        prop_assert_eq!(result.unwrap_err().code(), "signature_mismatch");
    }
}
