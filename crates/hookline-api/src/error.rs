//! The API's error boundary: every way a merchant request can fail, its status and its stable code.
//!
//! Bodies follow one shape: `{"error": {"type": …, "code": …, "message": …, "param": …}}`. Client mistakes
//! carry the reason; internal causes (the database's words, cause chains) stay in the logs.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};

use hookline_web::RETRY_AFTER_SECS;

/// Why a merchant API request was not served.
#[derive(thiserror::Error)]
pub enum ApiError {
    /// No `Authorization: Bearer …` header, or a key that is not configured.
    #[error("a valid API key is required: send Authorization: Bearer <key>")]
    Unauthorized,
    /// `Idempotency-Key` is required on this request.
    #[error("the Idempotency-Key header is required on this request")]
    IdempotencyKeyMissing,
    /// `Idempotency-Key` is not 1..=255 printable ASCII characters.
    #[error("the Idempotency-Key header must be 1 to 255 printable ASCII characters")]
    IdempotencyKeyInvalid,
    /// The key was used with a different request (method, path or body).
    #[error("this Idempotency-Key was already used with a different request")]
    IdempotencyKeyReused,
    /// A request with this key is still being processed.
    #[error("a request with this Idempotency-Key is still in progress; retry shortly")]
    IdempotencyKeyInFlight,
    /// The body is over the API's limit.
    #[error("request body exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The client did not deliver its body in time.
    #[error("request body was not received within {0:?}")]
    BodyTimeout(std::time::Duration),
    /// The connection failed while the body was read.
    #[error("could not read the request body")]
    BodyRead(#[source] actix_web::error::PayloadError),
    /// The body is not a JSON object.
    #[error("the request body must be a JSON object: {0}")]
    InvalidJson(String),
    /// A field is missing, unknown or invalid: `code` is stable, `param` names the field.
    #[error("{message}")]
    InvalidField {
        /// Stable code, e.g. `amount_invalid`.
        code: &'static str,
        /// The field at fault.
        param: String,
        /// What is wrong with it.
        message: String,
    },
    /// A capture of more than the authorization holds: 400 naming `amount_to_capture` (Stripe answers so too).
    #[error("amount_to_capture {amount} is more than the {capturable} authorized")]
    AmountTooLarge {
        /// What was asked.
        amount: i64,
        /// What the authorization holds.
        capturable: i64,
    },
    /// A field required here is missing: 400 naming it (`param`: `amount`, `stripe.payment_method`, …). For
    /// the provider object, what is required to confirm is [`hookline_payments::params::PaymentParams::
    /// missing_for_confirm`], the dispatcher's own rule.
    #[error("{param} is required")]
    ParameterMissing {
        /// The missing field's path.
        param: String,
    },
    /// A provider object named after another scheme than the intent's provider (`"mercadopago"` for a Stripe
    /// provider), or both objects at once: 400 naming it.
    #[error("{param} is not the provider object of this payment intent's provider (expected {expected})")]
    ProviderObjectMismatch {
        /// The object sent.
        param: String,
        /// The object the provider takes.
        expected: &'static str,
    },
    /// The client's `order_reference` already has a live (neither failed nor canceled) payment intent: 409 with its id (the
    /// defence for a front end that makes a new Idempotency-Key per click).
    #[error("this order_reference already has a live payment intent: {intent}")]
    OrderReferenceInUse {
        /// The existing intent's public id.
        intent: String,
    },
    /// The subscription cycle named by `subscription_id` + `billing_cycle` already has a live (in flight or
    /// succeeded) charge — a billing run's or another checkout's: 409 with its id (one charge per cycle,
    /// whichever channel).
    #[error("this subscription's billing cycle already has a live payment intent: {intent}")]
    BillingCycleInUse {
        /// The existing intent's public id.
        intent: String,
    },
    /// A path id, header or JSON string PostgreSQL cannot hold (NUL) or a one-line value with a control
    /// character: 400 with the input check's stable code (`invalid_text`, `control_character`, `too_long`) and
    /// the field as `param` (a JSON string by its pointer, e.g. `customer`).
    #[error("{0}")]
    InvalidInput(#[from] hookline_core::input::InputError),
    /// No such payment intent (for this API).
    #[error("no such payment intent")]
    IntentNotFound,
    /// No such event for this client (another client's fact is the same as none).
    #[error("no such event")]
    EventNotFound,
    /// A refund of an intent that has not succeeded.
    #[error("the payment intent has not succeeded; nothing was captured to refund")]
    IntentNotCaptured,
    /// A refund beyond what is left of the captured amount.
    #[error("refunding {amount} would exceed what is left to refund ({left})")]
    RefundAboveCaptured {
        /// Requested.
        amount: i64,
        /// Still refundable.
        left: i64,
    },
    /// A cancel of an intent whose charge was sent (or is being sent): the gateway decides its outcome.
    #[error(
        "the payment intent is {status}: its charge was sent to the gateway, which decides its outcome; wait for \
         payment_intent.succeeded or payment_intent.failed (or read the intent)"
    )]
    IntentInFlight {
        /// The intent's status.
        status: &'static str,
    },
    /// An operation the intent's state does not allow: a cancel of a final intent, a capture of one that is not
    /// `requires_capture` or whose capture (or cancel) was already asked.
    #[error("the payment intent is {status}{pending}: it cannot be {action}")]
    IntentUnexpectedState {
        /// The intent's status.
        status: &'static str,
        /// What was asked: `canceled`, `captured`.
        action: &'static str,
        /// `, its cancel asked` / `, its capture asked` when an operation is pending, else empty.
        pending: &'static str,
    },
    /// Unknown route.
    #[error("no such endpoint")]
    NotFound,
    /// A known route asked with a method it does not take.
    #[error("this endpoint does not take this method")]
    MethodNotAllowed {
        /// What it takes (the `Allow` header).
        allowed: &'static [actix_web::http::Method],
    },
    /// The database is unreachable, slow or out of connections: retry later.
    #[error("temporarily unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// Anything else: a bug. The client sees an opaque 500; the log gets the cause chain.
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
    /// No such webhook endpoint (for this client).
    #[error("no such webhook endpoint")]
    EndpointNotFound,
    /// No such subscription for this client (another client's, or an operator's, is the same as none).
    #[error("no such subscription")]
    SubscriptionNotFound,
    /// A change to a canceled subscription: it cannot change any more.
    #[error("the subscription is canceled: it cannot be changed")]
    SubscriptionCanceled,
    /// The client already has its most live webhook endpoints: 409 with the bound (delete one first).
    #[error(
        "this client already has {limit} webhook endpoints, the most it may have; delete one first"
    )]
    EndpointLimitReached {
        /// The bound.
        limit: i16,
    },
}

impl std::fmt::Debug for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        hookline_core::telemetry::error_chain_fmt(self, f)
    }
}

impl ApiError {
    /// A field error.
    pub fn field(code: &'static str, param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidField {
            code,
            param: param.into(),
            message: message.into(),
        }
    }

    /// A database error: unavailable (503, retry) when transient, else unexpected (500).
    pub fn database(e: sqlx::Error, what: &'static str) -> Self {
        if hookline_core::db::is_transient(&e) {
            ApiError::Unavailable(anyhow::Error::new(e).context(what))
        } else {
            ApiError::Unexpected(anyhow::Error::new(e).context(what))
        }
    }

    /// Stable machine-readable code; also the `outcome` metrics label (a bounded set).
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::IdempotencyKeyMissing => "idempotency_key_missing",
            ApiError::IdempotencyKeyInvalid => "idempotency_key_invalid",
            ApiError::IdempotencyKeyReused => "idempotency_key_reused",
            ApiError::IdempotencyKeyInFlight => "idempotency_key_in_flight",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::BodyTimeout(_) => "body_timeout",
            ApiError::BodyRead(_) => "body_read_failed",
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::InvalidField { code, .. } => code,
            ApiError::ParameterMissing { .. } => "parameter_missing",
            ApiError::AmountTooLarge { .. } => "amount_too_large",
            ApiError::ProviderObjectMismatch { .. } => "provider_object_mismatch",
            ApiError::OrderReferenceInUse { .. } => "order_reference_in_use",
            ApiError::BillingCycleInUse { .. } => "billing_cycle_in_use",
            ApiError::InvalidInput(e) => e.code(),
            ApiError::IntentNotFound => "intent_not_found",
            ApiError::EventNotFound => "event_not_found",
            ApiError::IntentNotCaptured => "intent_not_captured",
            ApiError::RefundAboveCaptured { .. } => "refund_above_captured",
            ApiError::IntentInFlight { .. } => "intent_in_flight",
            ApiError::IntentUnexpectedState { .. } => "payment_intent_unexpected_state",
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Unexpected(_) => "internal_error",
            ApiError::EndpointNotFound => "endpoint_not_found",
            ApiError::SubscriptionNotFound => "subscription_not_found",
            ApiError::SubscriptionCanceled => "subscription_canceled",
            ApiError::EndpointLimitReached { .. } => "webhook_endpoint_limit_reached",
        }
    }

    /// The error's `type`, as in the body.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "authentication_error",
            ApiError::IdempotencyKeyReused | ApiError::IdempotencyKeyInFlight => {
                "idempotency_error"
            }
            ApiError::Unavailable(_) | ApiError::Unexpected(_) => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// True for failures of ours (logged with their cause chain), false for the client's mistakes.
    pub fn is_internal(&self) -> bool {
        matches!(self, ApiError::Unavailable(_) | ApiError::Unexpected(_))
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::IdempotencyKeyMissing
            | ApiError::IdempotencyKeyInvalid
            | ApiError::BodyRead(_)
            | ApiError::InvalidInput(_)
            | ApiError::ParameterMissing { .. }
            | ApiError::AmountTooLarge { .. }
            | ApiError::ProviderObjectMismatch { .. }
            | ApiError::InvalidJson(_) => StatusCode::BAD_REQUEST,
            ApiError::IdempotencyKeyReused
            | ApiError::InvalidField { .. }
            | ApiError::RefundAboveCaptured { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::IdempotencyKeyInFlight
            | ApiError::IntentNotCaptured
            | ApiError::IntentInFlight { .. }
            | ApiError::IntentUnexpectedState { .. }
            | ApiError::OrderReferenceInUse { .. }
            | ApiError::BillingCycleInUse { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::IntentNotFound | ApiError::EventNotFound | ApiError::NotFound => {
                StatusCode::NOT_FOUND
            }
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::EndpointNotFound | ApiError::SubscriptionNotFound => StatusCode::NOT_FOUND,
            ApiError::SubscriptionCanceled => StatusCode::CONFLICT,
            ApiError::EndpointLimitReached { .. } => StatusCode::CONFLICT,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status_code());
        let message = match self {
            ApiError::Unavailable(_) => "temporarily unavailable; retry later".to_string(),
            ApiError::Unexpected(_) => "internal error".to_string(),
            other => other.to_string(),
        };
        match self {
            ApiError::Unavailable(_) | ApiError::IdempotencyKeyInFlight => {
                res.insert_header((header::RETRY_AFTER, RETRY_AFTER_SECS.to_string()));
            }
            ApiError::Unauthorized => {
                res.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
            }
            ApiError::MethodNotAllowed { allowed } => {
                let names: Vec<&str> = allowed.iter().map(|m| m.as_str()).collect();
                res.insert_header((header::ALLOW, names.join(", ")));
            }
            ApiError::PayloadTooLarge { .. } | ApiError::BodyTimeout(_) => {
                // The rest of the body was not read: the connection cannot be reused.
                res.insert_header((header::CONNECTION, "close"));
            }
            _ => {}
        }
        let mut error = ErrorDetail {
            kind: self.kind(),
            code: self.code(),
            message,
            param: None,
            intent: None,
            status: None,
            limit: None,
        };
        match self {
            ApiError::InvalidField { param, .. }
            | ApiError::ParameterMissing { param }
            | ApiError::ProviderObjectMismatch { param, .. } => {
                error.param = Some(param.clone());
            }
            ApiError::AmountTooLarge { .. } => {
                error.param = Some("amount_to_capture".into());
            }
            ApiError::OrderReferenceInUse { intent } => {
                error.param = Some("order_reference".into());
                error.intent = Some(intent.clone());
            }
            ApiError::BillingCycleInUse { intent } => {
                error.param = Some("billing_cycle".into());
                error.intent = Some(intent.clone());
            }
            ApiError::InvalidInput(e) => {
                error.param = Some(e.field().trim_start_matches('/').to_owned());
            }
            ApiError::IntentInFlight { status }
            | ApiError::IntentUnexpectedState { status, .. } => {
                error.status = Some(status);
            }
            ApiError::EndpointLimitReached { limit } => {
                error.limit = Some(i64::from(*limit));
            }
            _ => {}
        }
        res.json(ErrorBody { error })
    }
}

/// Every error answer's body: `{"error": {…}}` (the OpenAPI schema `Error`).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong: a stable `type` and `code`, a human message, and the field at fault.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// `invalid_request_error` (the request is wrong: do not retry it unchanged), `idempotency_error` (the key was
    /// used for another request, or is in flight), `authentication_error` (no or a wrong key), `api_error`
    /// (ours: retry with the same `Idempotency-Key`).
    #[serde(rename = "type")]
    #[schema(value_type = ErrorType)]
    pub kind: &'static str,
    /// Stable machine-readable code, e.g. `amount_invalid`, `intent_not_found`, `idempotency_key_missing`.
    #[schema(example = "amount_invalid")]
    pub code: &'static str,
    /// A sentence for a developer; never shown to a customer as is.
    pub message: String,
    /// The field at fault (a JSON path such as `stripe.payment_method`, or a query parameter or header name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// The live payment intent in the way (`order_reference_in_use`, `billing_cycle_in_use`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// The payment intent's status (`intent_in_flight`, `payment_intent_unexpected_state`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    /// The bound reached (`webhook_endpoint_limit_reached`: the most endpoints a client may have).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// The error `type`s (the OpenAPI schema `ErrorType`: exactly what [`ApiError::kind`] answers).
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code, clippy::enum_variant_names)] // a schema: only its variants' names (the API's own spellings) are used
pub enum ErrorType {
    /// The request is wrong.
    InvalidRequestError,
    /// The idempotency key conflicts.
    IdempotencyError,
    /// No or a wrong API key.
    AuthenticationError,
    /// hookline's side failed: retry.
    ApiError,
}
