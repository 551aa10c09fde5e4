//! What a provider sends around an event's bytes: the signed headers and query string of each scheme.

use hookline_signature::{sign, Scheme};

use crate::{form_encode, rfc3339, Event};

/// The signed parts of one request besides its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The URL query string without `?` (empty unless the scheme signs one: Mercado Pago's `data.id`).
    pub query: String,
    /// The headers, the scheme's own first and `Content-Type` last.
    pub headers: Vec<(&'static str, String)>,
}

/// The request `scheme`'s provider sends for `event` at unix time `now`, signed with `secret` (the raw
/// configured secret) through [`hookline_signature::sign`]. Fails, with a message that never contains the
/// secret, when the scheme cannot use the secret (Standard Webhooks and Svix decode it). Adyen signs inside the
/// body (see [`crate::adyen`]), so its request has only the content type.
pub fn headers_for(
    scheme: Scheme,
    secret: &[u8],
    event: &Event,
    now: i64,
) -> Result<Signed, String> {
    let body = &event.body;
    let mut headers = Vec::with_capacity(5);
    let mut query = String::new();
    match scheme {
        Scheme::Stripe => headers.push(("Stripe-Signature", sign::stripe(secret, now, body))),
        Scheme::StandardWebhooks | Scheme::Svix => {
            let signature = sign::standard_webhooks(secret, &event.delivery_id, now, body)?;
            let (id, ts, sig) = if scheme == Scheme::Svix {
                ("svix-id", "svix-timestamp", "svix-signature")
            } else {
                ("webhook-id", "webhook-timestamp", "webhook-signature")
            };
            headers.push((id, event.delivery_id.clone()));
            headers.push((ts, now.to_string()));
            headers.push((sig, signature));
        }
        Scheme::Github => {
            headers.push(("X-GitHub-Event", event.kind.clone()));
            headers.push(("X-GitHub-Delivery", event.delivery_id.clone()));
            headers.push((
                "X-GitHub-Hook-Installation-Target-Type",
                "repository".into(),
            ));
            headers.push(("X-Hub-Signature-256", sign::github(secret, body)));
        }
        Scheme::Shopify => {
            headers.push(("X-Shopify-Topic", event.kind.clone()));
            headers.push(("X-Shopify-Webhook-Id", event.delivery_id.clone()));
            headers.push(("X-Shopify-API-Version", "2025-01".into()));
            headers.push(("X-Shopify-Triggered-At", rfc3339(now)));
            headers.push(("X-Shopify-Hmac-SHA256", sign::shopify(secret, body)));
        }
        Scheme::Pagarme => headers.push(("X-Hub-Signature", sign::pagarme(secret, body))),
        // Nothing signed: the webhook's configured `user:password` (the "secret") as HTTP Basic.
        Scheme::PagarmeV5 => headers.push(("Authorization", sign::pagarme_v5(secret))),
        Scheme::MercadoPago => {
            let data_id = event.data_id.as_deref();
            // Mercado Pago signs a millisecond timestamp (13 digits).
            let signature =
                sign::mercadopago(secret, data_id, Some(&event.delivery_id), now * 1000);
            headers.push(("x-signature", signature));
            headers.push(("x-request-id", event.delivery_id.clone()));
            if let Some(id) = data_id {
                query = form_encode([("data.id", id), ("type", event.kind.as_str())]);
            }
        }
        // The signature is inside the body, computed when the event was built.
        Scheme::Adyen => {}
    }
    let content_type = scheme.payload_format().content_type();
    headers.push(("Content-Type", content_type.to_string()));
    Ok(Signed { query, headers })
}

/// The `User-Agent` the scheme's provider sends.
pub fn user_agent(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Stripe => "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
        Scheme::Github => "GitHub-Hookshot/hookline-simulate",
        Scheme::Shopify => "Shopify-Captain-Hook",
        Scheme::Pagarme => "PagarMe-Postback/4.0",
        Scheme::PagarmeV5 => "Pagar.me-Webhooks/5 (hookline simulate)",
        Scheme::MercadoPago => "MercadoPago WebHook v1.0 payment",
        Scheme::Adyen => "Adyen HttpClient 1.0",
        Scheme::StandardWebhooks | Scheme::Svix => "Svix-Webhooks/1.0 (hookline simulate)",
    }
}

#[cfg(test)]
mod tests {
    use hookline_signature::{Request, Verifier};

    use super::*;
    use crate::{adyen, mercadopago, pagarme, pagarme_v5, ping, stripe, Faker};

    const NOW: i64 = 1_767_225_600;

    fn secret(scheme: Scheme) -> &'static [u8] {
        match scheme {
            Scheme::StandardWebhooks | Scheme::Svix => b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            Scheme::Adyen => b"44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
            Scheme::PagarmeV5 => b"hookline:fake_password",
            _ => b"fake_secret",
        }
    }

    fn event(f: &mut Faker, scheme: Scheme) -> Event {
        match scheme {
            Scheme::Stripe => {
                let object = stripe::payment_intent_object("pi_1", "succeeded", 1_000);
                stripe::live_event(f, "payment_intent.succeeded", object)
            }
            Scheme::Pagarme => pagarme::Transaction::new(f, 0).postback(f, "processing", "paid"),
            Scheme::PagarmeV5 => pagarme_v5::Charge::new(f, 0).webhook(f, "charge.paid", "paid", 0),
            Scheme::MercadoPago => {
                let user = mercadopago::user_id(f);
                mercadopago::payment_notification(f, 0, user)
            }
            Scheme::Adyen => adyen::authorisation(f, 0, secret(scheme)).expect("adyen"),
            _ => ping::event(f, scheme, "fake", 0),
        }
    }

    /// Every scheme's request verifies with the real verifier, and a re-send keeps its dedupe key.
    #[test]
    fn every_scheme_verifies_and_resends_dedupe() {
        let mut f = Faker::with_run(123_456_789, NOW, 42);
        for scheme in Scheme::ALL {
            let event = event(&mut f, scheme);
            let verify = |now: i64| {
                let signed = headers_for(scheme, secret(scheme), &event, now).expect("sign");
                let headers: Vec<(&str, &[u8])> = signed
                    .headers
                    .iter()
                    .map(|(k, v)| (*k, v.as_bytes()))
                    .collect();
                let secrets = [secret(scheme)];
                Verifier {
                    scheme,
                    secrets: &secrets,
                    tolerance_secs: None,
                    now_unix: now,
                }
                .verify(&Request {
                    headers: &headers,
                    query: &signed.query,
                    body: &event.body,
                })
                .unwrap_or_else(|e| panic!("{scheme}: {e}"))
            };
            let (first, retry) = (verify(NOW), verify(NOW + 60));
            assert_eq!(first.dedupe_key, retry.dedupe_key, "{scheme}");
        }
    }

    #[test]
    fn content_type_comes_last_and_bad_secrets_fail() {
        let e = Event::raw("ping", b"{}".to_vec(), "msg_1");
        let signed = headers_for(Scheme::Stripe, b"s", &e, NOW).unwrap();
        assert_eq!(signed.headers[0].0, "Stripe-Signature");
        assert_eq!(
            signed.headers.last().unwrap(),
            &("Content-Type", "application/json".to_string())
        );
        assert!(headers_for(Scheme::StandardWebhooks, b"not base64!", &e, NOW).is_err());
    }
}
