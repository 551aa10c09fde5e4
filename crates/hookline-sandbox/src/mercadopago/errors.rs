//! Mercado Pago's error body: `{"message", "error", "status", "cause": [{"code", "description", "data"}]}`.

use serde_json::{json, Value};

use crate::reply::Reply;

pub(crate) fn error(status: u16, error: &str, message: &str, causes: &[(Value, &str)]) -> Reply {
    let cause: Vec<Value> = causes
        .iter()
        .map(|(code, description)| json!({"code": code, "description": description, "data": null}))
        .collect();
    Reply::json(
        status,
        &json!({"message": message, "error": error, "status": status, "cause": cause}),
    )
}

/// 400 with one cause.
pub(crate) fn bad_request(code: Value, description: &str) -> Reply {
    error(400, "bad_request", description, &[(code, description)])
}

pub(crate) fn unauthorized() -> Reply {
    error(401, "unauthorized", "invalid_token", &[])
}

pub(crate) fn missing_idempotency_key() -> Reply {
    bad_request(json!(4292), "Header X-Idempotency-Key can't be null")
}

pub(crate) fn payment_not_found() -> Reply {
    error(
        404,
        "not_found",
        "Payment not found",
        &[(json!(2000), "Payment not found")],
    )
}

/// A key first used on another endpoint (another payment's refunds, or payment creation).
pub(crate) fn key_already_used() -> Reply {
    bad_request(json!(2032), "X-Idempotency-Key already used")
}

pub(crate) fn in_flight() -> Reply {
    error(
        409,
        "conflict",
        "The process has not been completed yet. Try again later.",
        &[],
    )
}

pub(crate) fn route_not_found() -> Reply {
    error(404, "not_found", "resource not found", &[])
}

/// A fault's answer (`status` faults).
pub(crate) fn status(status: u16) -> Reply {
    match status {
        429 => error(429, "too_many_requests", "Too Many Requests", &[]),
        500 => error(500, "internal_server_error", "Internal server error", &[]),
        503 => error(503, "service_unavailable", "Service unavailable", &[]),
        other if other >= 500 => {
            error(other, "internal_server_error", "Internal server error", &[])
        }
        other => error(other, "bad_request", "Bad request", &[]),
    }
}
