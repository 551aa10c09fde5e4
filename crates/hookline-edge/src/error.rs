//! The edge's error boundary: every way a webhook request can fail, and the status each one earns.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use hookline_signature::VerifyError;

use hookline_web::RETRY_AFTER_SECS;

/// Why a webhook was not accepted.
#[derive(thiserror::Error)]
pub enum IngestError {
    /// No provider of that name is configured.
    #[error("no provider named '{0}' is configured")]
    UnknownProvider(String),
    /// The body exceeds `edge.max_body_bytes` (declared or streamed).
    #[error("request body exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The configured limit.
        limit: usize,
    },
    /// The client did not deliver its body in time.
    #[error("request body was not received within {0:?}")]
    BodyTimeout(std::time::Duration),
    /// The connection failed while the body was read.
    #[error("could not read the request body")]
    BodyRead(#[source] actix_web::error::PayloadError),
    /// The signature is missing, malformed, stale or wrong: retrying the same request will not fix it.
    #[error(transparent)]
    Signature(VerifyError),
    /// The signature is valid but the payload is unusable (not JSON, no event id).
    #[error(transparent)]
    Payload(VerifyError),
    /// The verified event breaks a storage bound (id or type length, control characters, header bytes):
    /// decided before the INSERT; retrying will not fix it.
    #[error(transparent)]
    Unstorable(hookline_core::events::Unstorable),
    /// The database refused this row's data (a data exception or a limit the bounds did not foresee). The row
    /// was written alone, apart from its batch, so only this request is refused.
    #[error("the event could not be stored as sent")]
    Refused(#[source] anyhow::Error),
    /// The database is unreachable, slow or out of connections: the provider should retry.
    #[error("the event store is temporarily unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// Anything else: a bug. The client sees an opaque 500; the log gets the cause chain.
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl std::fmt::Debug for IngestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        hookline_core::telemetry::error_chain_fmt(self, f)
    }
}

impl IngestError {
    /// Stable machine-readable code, used in JSON bodies and as a metrics label.
    pub fn code(&self) -> &'static str {
        match self {
            IngestError::UnknownProvider(_) => "unknown_provider",
            IngestError::PayloadTooLarge { .. } => "payload_too_large",
            IngestError::BodyTimeout(_) => "body_timeout",
            IngestError::BodyRead(_) => "body_read_failed",
            IngestError::Signature(e) | IngestError::Payload(e) => e.code(),
            IngestError::Unstorable(e) => e.code(),
            IngestError::Refused(_) => "unstorable_event",
            IngestError::Unavailable(_) => "unavailable",
            IngestError::Unexpected(_) => "internal_error",
        }
    }

    /// Coarse outcome for the requests counter (bounded cardinality).
    pub fn outcome(&self) -> &'static str {
        match self {
            IngestError::UnknownProvider(_) => "unknown_provider",
            IngestError::PayloadTooLarge { .. } => "too_large",
            IngestError::BodyTimeout(_) | IngestError::BodyRead(_) => "body_error",
            IngestError::Signature(_) => "bad_signature",
            IngestError::Payload(_) => "bad_payload",
            IngestError::Unstorable(_) | IngestError::Refused(_) => "bad_input",
            IngestError::Unavailable(_) => "unavailable",
            IngestError::Unexpected(_) => "error",
        }
    }
}

impl ResponseError for IngestError {
    fn status_code(&self) -> StatusCode {
        match self {
            IngestError::UnknownProvider(_) => StatusCode::NOT_FOUND,
            IngestError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            IngestError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            IngestError::BodyRead(_)
            | IngestError::Signature(_)
            | IngestError::Payload(_)
            | IngestError::Unstorable(_)
            | IngestError::Refused(_) => StatusCode::BAD_REQUEST,
            IngestError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            IngestError::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status_code());
        // Internal causes stay in the logs; clients get a stable code and, for their own mistakes, the reason.
        let message = match self {
            IngestError::Unavailable(_) => {
                "temporarily unable to store the event; retry later".into()
            }
            IngestError::Unexpected(_) => "internal error".into(),
            // The database's own words stay in the logs.
            IngestError::Refused(_) => "the event could not be stored as sent".into(),
            other => other.to_string(),
        };
        if matches!(self, IngestError::Unavailable(_)) {
            res.insert_header((header::RETRY_AFTER, RETRY_AFTER_SECS.to_string()));
        }
        if matches!(
            self,
            IngestError::PayloadTooLarge { .. } | IngestError::BodyTimeout(_)
        ) {
            // The rest of the body was not read: the connection cannot be reused.
            res.insert_header((header::CONNECTION, "close"));
        }
        res.json(serde_json::json!({ "error": self.code(), "message": message }))
    }
}
