//! Which configured provider a request is for, from its path family and its API key.
//!
//! Pagar.me v5 lives under `/core/v5/…` (it authenticates its own way: `pagarme_v5::authenticate`).
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

/// The provider family a path belongs to (`None`: not an API path). `/v1/customers` and `/v1/customers/{id}`
/// are both providers' ([`scheme_of`] tells them apart); this answers Stripe for them.
pub(crate) fn family(path: &str) -> Option<Scheme> {
    if path == "/core/v5" || path.starts_with("/core/v5/") {
        return Some(Scheme::PagarmeV5);
    }
    let rest = path.strip_prefix("/v1/")?;
    let mut segments = rest.split('/');
    let first = segments.next().unwrap_or("");
    let mercado_pago = first == "payments"
        || first == "card_tokens"
        || (first == "customers" && segments.nth(1) == Some("cards"));
    Some(if mercado_pago {
        Scheme::MercadoPago
    } else {
        Scheme::Stripe
    })
}

/// Whether both providers serve `path`: `/v1/customers` and `/v1/customers/{id}` (Stripe's customers,
/// Mercado Pago's customers).
pub(crate) fn is_shared(path: &str) -> bool {
    path == "/v1/customers"
        || path
            .strip_prefix("/v1/customers/")
            .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// The provider scheme a request is for: its path's [`family`], except on the paths both serve
/// ([`is_shared`]), told apart by the API key (the provider whose token it is), else by which schemes are
/// configured (only one), else by the request's shape — a JSON body, or a customer id without Stripe's
/// `cus_` prefix, is Mercado Pago's.
pub(crate) fn scheme_of(state: &State, path: &str, headers: &HeaderMap) -> Option<Scheme> {
    let family = family(path)?;
    if !is_shared(path) {
        return Some(family);
    }
    if let Some(given) = credential(headers) {
        if let Some(p) = state
            .providers
            .iter()
            .find(|p| p.config.api_token.as_deref() == Some(given.as_str()))
        {
            return Some(p.config.scheme);
        }
    }
    let has = |scheme| state.providers.iter().any(|p| p.config.scheme == scheme);
    match (has(Scheme::Stripe), has(Scheme::MercadoPago)) {
        (true, false) => return Some(Scheme::Stripe),
        (false, true) => return Some(Scheme::MercadoPago),
        _ => {}
    }
    let json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.to_ascii_lowercase().contains("json"));
    let foreign_id = path
        .strip_prefix("/v1/customers/")
        .is_some_and(|id| !id.starts_with("cus_"));
    Some(if json || foreign_id {
        Scheme::MercadoPago
    } else {
        Scheme::Stripe
    })
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
        assert_eq!(
            family("/v1/customers/1-ab/cards"),
            Some(Scheme::MercadoPago)
        );
        assert_eq!(
            family("/v1/customers/1-ab/cards/42"),
            Some(Scheme::MercadoPago)
        );
        assert!(is_shared("/v1/customers") && is_shared("/v1/customers/cus_1"));
        assert!(!is_shared("/v1/customers/") && !is_shared("/v1/customers/1/cards"));
        assert_eq!(family("/_sandbox/faults"), None);
        assert_eq!(family("/core/v5/orders"), Some(Scheme::PagarmeV5));
        assert_eq!(family("/core/v5/charges/ch_1"), Some(Scheme::PagarmeV5));
        assert!(!is_shared("/core/v5/customers"));
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
