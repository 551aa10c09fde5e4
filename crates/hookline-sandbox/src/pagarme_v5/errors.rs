//! Pagar.me's error bodies: `{"message": "…"}`, and for an invalid request 422 `{"message": "The request is
//! invalid.", "errors": {"field.path": ["…"]}}` (<https://docs.pagar.me/reference/erros-1>: 401 invalid API key,
//! 404 missing resource, 412 valid parameters but the request failed, 422 invalid parameters, 429, 500).
//! Messages the docs show are used as shown; the others are the sandbox's wording in the same style.

use std::collections::BTreeMap;

use serde_json::json;

use crate::reply::Reply;

/// `{"message": message}` with `status`.
pub(crate) fn message(status: u16, message: &str) -> Reply {
    Reply::json(status, &json!({ "message": message }))
}

/// 401: no secret key, or one the account does not have (the message of Pagar.me's ASP.NET API; not verified).
pub(crate) fn unauthorized() -> Reply {
    message(401, "Authorization has been denied for this request.")
}

/// 404 for a path the API does not serve.
pub(crate) fn route_not_found() -> Reply {
    message(
        404,
        "No HTTP resource was found that matches the request URI.",
    )
}

/// 404 for an object that does not exist (`Order`, `Charge`, `Customer`, `Card`, `Token`).
pub(crate) fn not_found(what: &str) -> Reply {
    message(404, &format!("{what} not found."))
}

/// 412: valid parameters, but the object's state refuses the request.
pub(crate) fn precondition(text: &str) -> Reply {
    message(412, text)
}

/// 409: the first request with this `Idempotency-Key` is still executing (not documented by Pagar.me).
pub(crate) fn in_flight() -> Reply {
    message(
        409,
        "A request with this Idempotency-Key is still being processed. Try again later.",
    )
}

/// 422: the `Idempotency-Key` was first used on another endpoint (not documented by Pagar.me).
pub(crate) fn key_reused() -> Reply {
    let mut errors = FieldErrors::default();
    errors.add(
        "idempotency-key",
        "The Idempotency-Key was already used in a request to another resource.",
    );
    errors.reply()
}

/// A fault's answer (`status` faults).
pub(crate) fn status(status: u16) -> Reply {
    match status {
        401 => unauthorized(),
        404 => route_not_found(),
        429 => message(429, "Too many requests."),
        s if s >= 500 => message(s, "An error has occurred."),
        s => message(s, "The request is invalid."),
    }
}

/// The errors of an invalid request, by field path (`order.customer.name`), in Pagar.me's 422 body.
#[derive(Debug, Default)]
pub(crate) struct FieldErrors {
    fields: BTreeMap<String, Vec<String>>,
}

impl FieldErrors {
    /// Adds `text` to the errors of `field`.
    pub(crate) fn add(&mut self, field: &str, text: impl Into<String>) {
        self.fields
            .entry(field.to_owned())
            .or_default()
            .push(text.into());
    }

    /// `The {name} field is required.` for `field` (whose last segment is `name`).
    pub(crate) fn required(&mut self, field: &str) {
        let name = field.rsplit('.').next().unwrap_or(field);
        self.add(field, format!("The {name} field is required."));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// 422 with every error.
    pub(crate) fn reply(&self) -> Reply {
        Reply::json(
            422,
            &json!({"message": "The request is invalid.", "errors": self.fields}),
        )
    }

    /// `Ok(value)` when nothing was added, else the 422.
    pub(crate) fn or<T>(self, value: T) -> Result<T, Reply> {
        if self.is_empty() {
            Ok(value)
        } else {
            Err(self.reply())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_errors_render_as_pagarme_does() {
        let mut errors = FieldErrors::default();
        errors.required("order.customer.name");
        errors.add("order.items", "At least one item is required.");
        let reply = errors.reply();
        assert_eq!(reply.status, 422);
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["message"], "The request is invalid.");
        assert_eq!(
            body["errors"]["order.customer.name"][0],
            "The name field is required."
        );
        assert_eq!(unauthorized().status, 401);
    }
}
