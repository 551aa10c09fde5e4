//! Stripe's error envelope: `{"error": {"type", "code", "message", "param", "doc_url", …}}` and the status codes
//! Stripe pairs with each type.

use serde_json::{json, Map, Value};

use crate::reply::Reply;

/// One Stripe error, before it is rendered.
#[derive(Debug, Clone)]
pub(crate) struct StripeError {
    pub(crate) status: u16,
    pub(crate) kind: &'static str,
    pub(crate) code: Option<&'static str>,
    pub(crate) message: String,
    pub(crate) param: Option<String>,
    /// Extra fields of the error object (`decline_code`, `payment_intent`, `charge`).
    pub(crate) extra: Map<String, Value>,
}

impl StripeError {
    pub(crate) fn reply(&self) -> Reply {
        let mut error = Map::new();
        if let Some(code) = self.code {
            error.insert("code".into(), json!(code));
            error.insert(
                "doc_url".into(),
                json!(format!(
                    "https://stripe.com/docs/error-codes/{}",
                    code.replace('_', "-")
                )),
            );
        }
        error.insert("message".into(), json!(self.message));
        if let Some(param) = &self.param {
            error.insert("param".into(), json!(param));
        }
        error.insert("type".into(), json!(self.kind));
        for (k, v) in &self.extra {
            error.insert(k.clone(), v.clone());
        }
        Reply::json(self.status, &json!({ "error": error }))
    }
}

/// A 400 `invalid_request_error`.
pub(crate) fn invalid(
    code: &'static str,
    message: impl Into<String>,
    param: Option<&str>,
) -> StripeError {
    StripeError {
        status: 400,
        kind: "invalid_request_error",
        code: Some(code),
        message: message.into(),
        param: param.map(str::to_owned),
        extra: Map::new(),
    }
}

/// Stripe's 400 `payment_intent_unexpected_state`, carrying the intent as it is in `error.payment_intent` (as
/// Stripe's does: a client reads the current status from it).
pub(crate) fn unexpected_state(message: impl Into<String>, intent: Value) -> StripeError {
    let mut e = invalid("payment_intent_unexpected_state", message, None);
    e.extra.insert("payment_intent".into(), intent);
    e
}

/// A 400 `invalid_request_error` without a code.
pub(crate) fn invalid_uncoded(message: impl Into<String>, param: Option<&str>) -> StripeError {
    StripeError {
        code: None,
        ..invalid("", message, param)
    }
}

/// 404 `resource_missing`: `No such payment_intent: 'pi_…'`.
pub(crate) fn missing(object: &str, id: &str, param: &str) -> StripeError {
    StripeError {
        status: 404,
        ..invalid(
            "resource_missing",
            format!("No such {object}: '{id}'"),
            Some(param),
        )
    }
}

/// 401 for a missing or wrong API key.
pub(crate) fn unauthorized(given: Option<&str>) -> StripeError {
    let message = match given {
        None => "You did not provide an API key. You need to provide your API key in the Authorization header, \
                 using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication \
                 for details, or we can help at https://support.stripe.com/."
            .to_owned(),
        Some(key) => format!("Invalid API Key provided: {}", mask(key)),
    };
    StripeError {
        status: 401,
        kind: "invalid_request_error",
        code: None,
        message,
        param: None,
        extra: Map::new(),
    }
}

/// 400 `idempotency_error` for a key reused with other parameters.
pub(crate) fn idempotency_mismatch(key: &str) -> StripeError {
    StripeError {
        status: 400,
        kind: "idempotency_error",
        code: None,
        message: format!(
            "Keys for idempotent requests can only be used with the same parameters they were first used with. \
             Try using a key other than '{key}' if you meant to execute a different request."
        ),
        param: None,
        extra: Map::new(),
    }
}

/// 409 `idempotency_error` while the first request with the key is still executing.
pub(crate) fn idempotency_in_flight(key: &str) -> StripeError {
    StripeError {
        status: 409,
        kind: "idempotency_error",
        code: None,
        message: format!(
            "There is currently another in-progress request using this Idempotent Key (that probably means you \
             submitted twice, and the other request is still going through): {key}. Please try again later."
        ),
        param: None,
        extra: Map::new(),
    }
}

/// The body Stripe answers an unrouted URL with.
pub(crate) fn unrecognized_url(method: &str, path: &str) -> StripeError {
    StripeError {
        status: 404,
        ..invalid_uncoded(
            format!(
                "Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can help at \
                 https://support.stripe.com/."
            ),
            None,
        )
    }
}

/// 500 `api_error` (fault injection).
pub(crate) fn api_error() -> StripeError {
    StripeError {
        status: 500,
        kind: "api_error",
        code: None,
        message: "An unknown error occurred".into(),
        param: None,
        extra: Map::new(),
    }
}

/// 429 `rate_limit` (fault injection).
pub(crate) fn rate_limited() -> StripeError {
    StripeError {
        status: 429,
        ..invalid(
            "rate_limit",
            "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
            None,
        )
    }
}

/// Stripe shows only the end of a wrong key: `sk_test_********************1234`.
fn mask(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 12 {
        return "*".repeat(chars.len());
    }
    let prefix: String = chars[..8].iter().collect();
    let suffix: String = chars[chars.len() - 4..].iter().collect();
    format!("{prefix}{}{suffix}", "*".repeat(chars.len() - 12))
}
