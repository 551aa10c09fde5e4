//! Which configured provider a request is for, from its path family and its API key.
//!
//! Stripe and Mercado Pago both live under `/v1/…` without colliding: `/v1/payments…` and `/v1/card_tokens…` are
//! Mercado Pago, every other `/v1/…` path is Stripe. Several providers of one scheme (or both schemes at once) are told apart by the
//! `Authorization` header: `Bearer <api_token>` (both providers) or HTTP Basic with the key as user name
//! (`curl -u sk_test_…:`, Stripe).

use actix_web::http::header::HeaderMap;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::settings::Scheme;
use crate::state::State;

/// The provider family a path belongs to (`None`: not an API path).
pub(crate) fn family(path: &str) -> Option<Scheme> {
    let rest = path.strip_prefix("/v1/")?;
    let first = rest.split('/').next().unwrap_or("");
    if first == "payments" || first == "card_tokens" {
        Some(Scheme::MercadoPago)
    } else {
        Some(Scheme::Stripe)
    }
}

/// The API key sent, from `Authorization: Bearer …` or `Authorization: Basic base64(key:)`.
pub(crate) fn credential(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("authorization")?.to_str().ok()?.trim();
    let (kind, rest) = value.split_once(' ')?;
    let rest = rest.trim();
    if kind.eq_ignore_ascii_case("bearer") {
        return (!rest.is_empty()).then(|| rest.to_owned());
    }
    if kind.eq_ignore_ascii_case("basic") {
        let decoded = STANDARD.decode(rest).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let user = text.split(':').next().unwrap_or("");
        return (!user.is_empty()).then(|| user.to_owned());
    }
    None
}

/// Why a request cannot be attributed to a provider.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No provider of the path's scheme is configured.
    NotConfigured,
    /// No key sent, and every candidate requires one.
    Missing,
    /// A key was sent that no candidate has.
    Invalid(String),
}

/// The index of the provider the request is for. A provider with an `api_token` requires it; a provider without
/// one accepts any request of its scheme that names no other provider's token.
pub(crate) fn resolve(
    state: &State,
    scheme: Scheme,
    credential: Option<&str>,
) -> Result<usize, AuthFailure> {
    let candidates: Vec<usize> = state
        .providers
        .iter()
        .enumerate()
        .filter(|(_, p)| p.config.scheme == scheme)
        .map(|(i, _)| i)
        .collect();
    if candidates.is_empty() {
        return Err(AuthFailure::NotConfigured);
    }
    if let Some(given) = credential {
        if let Some(&i) = candidates
            .iter()
            .find(|&&i| state.providers[i].config.api_token.as_deref() == Some(given))
        {
            return Ok(i);
        }
    }
    let open = candidates
        .iter()
        .copied()
        .find(|&i| state.providers[i].config.api_token.is_none());
    match (open, credential) {
        (Some(i), _) => Ok(i),
        (None, None) => Err(AuthFailure::Missing),
        (None, Some(given)) => Err(AuthFailure::Invalid(given.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    #[test]
    fn families_and_credentials() {
        assert_eq!(family("/v1/payments/123"), Some(Scheme::MercadoPago));
        assert_eq!(family("/v1/payments"), Some(Scheme::MercadoPago));
        assert_eq!(family("/v1/card_tokens"), Some(Scheme::MercadoPago));
        assert_eq!(family("/v1/payment_methods/pm_1"), Some(Scheme::Stripe));
        assert_eq!(family("/v1/payment_intents"), Some(Scheme::Stripe));
        assert_eq!(family("/v1/events"), Some(Scheme::Stripe));
        assert_eq!(family("/_sandbox/faults"), None);
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("authorization"),
            HeaderValue::from_static("Bearer sk_test_1"),
        );
        assert_eq!(credential(&headers).as_deref(), Some("sk_test_1"));
        headers.insert(
            HeaderName::from_static("authorization"),
            HeaderValue::from_static("Basic c2tfdGVzdF8yOg=="),
        );
        assert_eq!(credential(&headers).as_deref(), Some("sk_test_2"));
    }
}
