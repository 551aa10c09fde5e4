//! `POST /v1/payment_intents`, `POST /v1/payment_intents/{id}/confirm`, `POST /v1/payment_intents/{id}/cancel`,
//! `POST /v1/payment_intents/{id}/capture`, `GET /v1/payment_intents/{id}`, `POST /v1/payment_intents/{id}/refunds`.
//!
//! Input is checked field by field before anything touches the database (each mistake has its own stable code
//! and names its `param`): the path id through [`input::line`], every string of the body through
//! [`input::json_strings`] (a NUL is 400 `invalid_text`, never a database error). Currencies are the ISO 4217
//! codes the provider accepts ([`hookline_payments::currency`]). Every read and write is scoped to the
//! authenticated client: another client's intent is 404 `intent_not_found`. The writes go through
//! [`super::idempotency::run`] (a confirm without `Idempotency-Key` through
//! [`super::idempotency::run_unkeyed`]). The provider object is checked by [`super::params`]; a field the
//! gateway requires to confirm is 400 `parameter_missing` naming it, by the dispatcher's own rule.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use hookline_core::input;
use std::time::Duration;

use hookline_payments::intents::{self, CancellationReason, CaptureMethod};
use serde_json::{Map, Value};

use super::error::ApiError;
use super::operation::{CreateIntent, Operation};
use super::params::{self, ProviderObject};
use super::{idempotency, read_body, serve, ApiState, Reply, Route};

/// Largest amount in minor units (the database's bound).
pub const MAX_AMOUNT: i64 = 1_000_000_000_000_000;
/// Longest `customer`, in characters.
pub const MAX_CUSTOMER_CHARS: usize = 200;
/// Longest `description`, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;
/// Longest refund `reason`, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// Longest `order_reference`, in characters (the database's bound).
pub const MAX_ORDER_REFERENCE_CHARS: usize = 200;
/// Longest intent id accepted in a path (longer ones cannot exist).
pub(crate) const MAX_ID_BYTES: usize = 255;

/// The fields `POST /v1/payment_intents` takes (anything else is 400 naming it).
pub(crate) const CREATE_FIELDS: &[&str] = &[
    "provider",
    "amount",
    "currency",
    "customer",
    "description",
    "order_reference",
    "confirm",
    "capture_method",
    "subscription_id",
    "billing_cycle",
    "stripe",
    "mercadopago",
    "pagarme",
];

/// The body of `POST /v1/payment_intents`, as the OpenAPI document describes it (the schema
/// `CreatePaymentIntent`). The handler reads it field by field ([`parse_create`], one stable code per mistake);
/// the unit tests hold this struct's fields and bounds to [`CREATE_FIELDS`] and the constants the parser checks.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreatePaymentIntent, example = json!({
    "provider": "stripe", "amount": 2000, "currency": "brl", "order_reference": "order-1042",
    "customer": "cus-881", "stripe": {"payment_method": "pm_card_visa"}
}))]
#[allow(dead_code)] // a schema (serde only for its container attributes): the parser reads the JSON itself
pub(crate) struct CreateIntentBody {
    /// A configured provider's name (`[providers.NAME]`) whose gateway can charge: a stripe, mercadopago or
    /// pagarme-v5 provider with `api_base`.
    #[schema(min_length = 1, max_length = 64, example = "stripe")]
    provider: String,
    /// Minor units (cents).
    #[schema(minimum = 1, maximum = 1_000_000_000_000_000_i64, example = 2000)]
    amount: i64,
    /// ISO 4217, lower or upper case, one the provider accepts.
    #[schema(min_length = 3, max_length = 3, example = "brl")]
    currency: String,
    /// The merchant's customer reference (one line).
    #[schema(max_length = 200)]
    customer: Option<String>,
    /// Free text (line breaks allowed).
    #[schema(max_length = 1000)]
    description: Option<String>,
    /// The merchant's order: one live (neither failed nor canceled) intent per order and client, whatever
    /// `Idempotency-Key` a front end sends (409 `order_reference_in_use` names the live one).
    #[schema(max_length = 200, example = "order-1042")]
    order_reference: Option<String>,
    /// `false`: wait for `POST …/confirm` (`requires_confirmation`); `true` (default): queue the charge now.
    confirm: Option<bool>,
    /// `automatic` (default) or `manual` (authorize only; `POST …/capture` takes the money; cards only).
    capture_method: Option<hookline_payments::intents::CaptureMethod>,
    /// The subscription whose cycle this charge pays (with `billing_cycle`).
    #[schema(minimum = 1)]
    subscription_id: Option<i64>,
    /// The cycle it pays, `YYYY-MM` (with `subscription_id`).
    #[schema(pattern = r"^[0-9]{4}-(0[1-9]|1[0-2])$", example = "2026-12")]
    billing_cycle: Option<String>,
    /// Stripe's provider object (a `stripe` provider).
    stripe: Option<hookline_payments::params::StripeParams>,
    /// Mercado Pago's provider object (a `mercadopago` provider).
    mercadopago: Option<hookline_payments::params::MercadoPagoParams>,
    /// Pagar.me's provider object (a `pagarme-v5` provider).
    pagarme: Option<hookline_payments::params::PagarmeParams>,
}

/// The optional body of `POST /v1/payment_intents/{id}/confirm`: the provider object, laid over the one given at
/// creation.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ConfirmPaymentIntent)]
#[allow(dead_code)] // a schema (serde only for its container attributes): the parser reads the JSON itself
pub(crate) struct ConfirmBody {
    /// Stripe's provider object.
    stripe: Option<hookline_payments::params::StripeParams>,
    /// Mercado Pago's provider object.
    mercadopago: Option<hookline_payments::params::MercadoPagoParams>,
    /// Pagar.me's provider object.
    pagarme: Option<hookline_payments::params::PagarmeParams>,
}

/// The optional body of `POST /v1/payment_intents/{id}/cancel`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CancelPaymentIntent)]
#[allow(dead_code)] // a schema (serde only for its container attributes): the parser reads the JSON itself
pub(crate) struct CancelBody {
    /// Why (default `requested_by_customer`).
    #[schema(value_type = Option<MerchantCancellationReason>)]
    cancellation_reason: Option<String>,
}

/// The reasons a merchant may give for a cancel (the OpenAPI schema `MerchantCancellationReason`).
pub(crate) struct MerchantCancellationReason;

impl utoipa::PartialSchema for MerchantCancellationReason {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(
                CancellationReason::MERCHANT.iter().map(|r| r.as_str()),
            ))
            .into()
    }
}

impl utoipa::ToSchema for MerchantCancellationReason {}

/// The optional body of `POST /v1/payment_intents/{id}/capture`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CapturePaymentIntent)]
#[allow(dead_code)] // a schema (serde only for its container attributes): the parser reads the JSON itself
pub(crate) struct CaptureBody {
    /// Minor units, at most what is authorized (`amount_capturable`); all of it when absent.
    #[schema(minimum = 1, maximum = 1_000_000_000_000_000_i64)]
    amount_to_capture: Option<i64>,
}

/// The body of `POST /v1/payment_intents/{id}/refunds`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateRefund, example = json!({"amount": 500, "reason": "requested_by_customer"}))]
#[allow(dead_code)] // a schema (serde only for its container attributes): the parser reads the JSON itself
pub(crate) struct RefundBody {
    /// Minor units, at most what is left of the captured amount.
    #[schema(minimum = 1, maximum = 1_000_000_000_000_000_i64, example = 500)]
    amount: i64,
    /// Why (default `requested_by_customer`; line breaks allowed; not blank).
    #[schema(max_length = 500)]
    reason: Option<String>,
}

/// `POST /v1/payment_intents`.
#[utoipa::path(
    post,
    path = "/v1/payment_intents",
    operation_id = "create_payment_intent",
    tag = "payment_intents",
    params(crate::schema::IdempotencyKeyRequired),
    request_body(content = CreateIntentBody, description = "The intent and, to charge at once, its provider object"),
    responses(
        (status = 201, description = "Created (or its first answer replayed: `Idempotent-Replayed: true`)",
            body = hookline_payments::intents::Intent, headers(("Idempotent-Replayed" = String, description = "`true` on a replay"))),
        crate::schema::WriteErrors,
    ),
)]
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::CreateIntent, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::key_of(&req)?;
        let body = read_body(&req, payload, &state).await?;
        let op = Operation::CreateIntent(Box::new(parse_create(&body, &state)?));
        let hash = idempotency::request_hash("POST", req.path(), &body);
        state
            .within_budget(idempotency::run(&state, client, &key, &hash, op))
            .await
    })
    .await
}

/// `POST /v1/payment_intents/{id}/confirm`: the optional body is the provider object (`{"stripe": {…}}`), to
/// supply the payment method at submit time; `Idempotency-Key` is optional (the intent's status makes a second
/// confirm answer the current state).
#[utoipa::path(
    post,
    path = "/v1/payment_intents/{id}/confirm",
    operation_id = "confirm_payment_intent",
    tag = "payment_intents",
    params(crate::schema::IntentId, crate::schema::IdempotencyKeyOptional),
    request_body(content = Option<ConfirmBody>, description = "Optional: the provider object, to supply the payment method at submit time"),
    responses(
        (status = 200, description = "The intent: confirmed now, or as it is (a second confirm changes nothing)", body = hookline_payments::intents::Intent),
        crate::schema::WriteErrors,
    ),
)]
pub async fn confirm(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::ConfirmIntent, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::optional_key_of(&req)?;
        let intent = path_id(path.into_inner())?;
        let body = read_body(&req, payload, &state).await?;
        let supplied = parse_confirm(&body)?;
        let op = Operation::Confirm { intent, supplied };
        run_optionally_keyed(&req, &state, client, key, &body, op).await
    })
    .await
}

/// `POST /v1/payment_intents/{id}/cancel`, optional body `{"cancellation_reason": …}`; `Idempotency-Key` optional
/// (the intent's status makes a second cancel answer 409 with the state it is in). Only an intent whose charge was
/// not sent is canceled ([`intents::cancel`]: the dispatcher's claim and the cancel are decided on one row).
#[utoipa::path(
    post,
    path = "/v1/payment_intents/{id}/cancel",
    operation_id = "cancel_payment_intent",
    tag = "payment_intents",
    params(crate::schema::IntentId, crate::schema::IdempotencyKeyOptional),
    request_body(content = Option<CancelBody>, description = "Optional: why"),
    responses(
        (status = 200, description = "Canceled", body = hookline_payments::intents::Intent),
        (status = 202, description = "Its cancel is asked of the gateway; `payment_intent.canceled` (or the outcome the gateway reports) follows", body = hookline_payments::intents::Intent),
        crate::schema::WriteErrors,
    ),
)]
pub async fn cancel(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::CancelIntent, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::optional_key_of(&req)?;
        let intent = path_id(path.into_inner())?;
        let body = read_body(&req, payload, &state).await?;
        let reason = parse_cancel(&body)?;
        let op = Operation::Cancel {
            intent: intent.clone(),
            reason,
        };
        let reply = run_optionally_keyed(&req, &state, client, key, &body, op).await?;
        settle(&state, client, &intent, reply, intents::Operation::Cancel).await
    })
    .await
}

/// A cancel or capture the gateway must make answers 202 (its operation queued for the dispatcher). Waits up to
/// `api.gateway_wait_ms` for the gateway's word, reading the intent: then the answer is the outcome — 200 with the
/// intent `canceled` (a cancel) or `succeeded` (a capture), or 409 `payment_intent_unexpected_state` with the state
/// the gateway reported instead (a cancel that found the payment completed a second before: `succeeded`). A replay
/// of the same key goes through the same wait, so it answers the same outcome. Past the wait, the 202 stands and
/// the outcome follows as the intent's fact. Any other answer is returned as it is.
async fn settle(
    state: &ApiState,
    client: &str,
    public_id: &str,
    reply: Reply,
    asked: intents::Operation,
) -> Result<Reply, ApiError> {
    if reply.status != StatusCode::ACCEPTED || state.gateway_wait.is_zero() {
        return Ok(reply);
    }
    let deadline = tokio::time::Instant::now() + state.gateway_wait;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                intents::get_for_client(&mut conn, client, public_id)
                    .await
                    .map_err(|e| ApiError::database(e, "read the payment intent"))
            })
            .await;
        // The outcome is not ours to report when the read fails: the 202 stands (the fact follows).
        let Ok(Some(intent)) = now else {
            return Ok(reply);
        };
        if intent.pending_operation.is_none() {
            if intent.status == asked.done() {
                let mut answer = Reply::json(StatusCode::OK, &intent)?;
                answer.replayed = reply.replayed;
                return Ok(answer);
            }
            return Err(ApiError::IntentUnexpectedState {
                status: intent.status.as_str(),
                action: match asked {
                    intents::Operation::Cancel => "canceled",
                    intents::Operation::Capture => "captured",
                },
                pending: "",
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(reply);
        }
    }
}

/// `POST /v1/payment_intents/{id}/capture`, optional body `{"amount_to_capture": N}` (≤ the authorized amount;
/// all of it when absent); `Idempotency-Key` required, as on create. A `requires_capture` intent's capture is asked
/// of the gateway once ([`intents::capture`]: one statement decides between two captures, or a capture and a
/// cancel): 202 with the intent, `succeeded` when the gateway confirms. Anything else is 409 with its state.
#[utoipa::path(
    post,
    path = "/v1/payment_intents/{id}/capture",
    operation_id = "capture_payment_intent",
    tag = "payment_intents",
    params(crate::schema::IntentId, crate::schema::IdempotencyKeyRequired),
    request_body(content = Option<CaptureBody>, description = "Optional: how much of the authorization to capture (all of it when absent)"),
    responses(
        (status = 200, description = "Captured: the intent `succeeded`", body = hookline_payments::intents::Intent),
        (status = 202, description = "Its capture is asked of the gateway; `payment_intent.succeeded` follows", body = hookline_payments::intents::Intent),
        crate::schema::WriteErrors,
    ),
)]
pub async fn capture(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::CaptureIntent, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::key_of(&req)?;
        let intent = path_id(path.into_inner())?;
        let body = read_body(&req, payload, &state).await?;
        let amount = parse_capture(&body)?;
        let hash = idempotency::request_hash("POST", req.path(), &body);
        let op = Operation::Capture {
            intent: intent.clone(),
            amount,
        };
        let reply = state
            .within_budget(idempotency::run(&state, client, &key, &hash, op))
            .await?;
        settle(&state, client, &intent, reply, intents::Operation::Capture).await
    })
    .await
}

/// `GET /v1/payment_intents/{id}`.
#[utoipa::path(
    get,
    path = "/v1/payment_intents/{id}",
    operation_id = "get_payment_intent",
    tag = "payment_intents",
    params(crate::schema::IntentId),
    responses(
        (status = 200, description = "The intent", body = hookline_payments::intents::Intent),
        crate::schema::ReadErrors,
    ),
)]
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::GetIntent, async {
        let client = state.keys.authenticate(&req)?;
        let id = path_id(path.into_inner())?;
        let intent = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                intents::get_for_client(&mut conn, client, &id)
                    .await
                    .map_err(|e| ApiError::database(e, "read the payment intent"))
            })
            .await?
            .ok_or(ApiError::IntentNotFound)?;
        Reply::json(StatusCode::OK, &intent)
    })
    .await
}

/// `POST /v1/payment_intents/{id}/refunds`.
#[utoipa::path(
    post,
    path = "/v1/payment_intents/{id}/refunds",
    operation_id = "create_refund",
    tag = "refunds",
    params(crate::schema::IntentId, crate::schema::IdempotencyKeyRequired),
    request_body(content = RefundBody),
    responses(
        (status = 201, description = "Requested: sent to the gateway under its own key; `refund.applied` follows", body = crate::operation::RefundCreated),
        crate::schema::WriteErrors,
    ),
)]
pub async fn refund(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::CreateRefund, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::key_of(&req)?;
        let intent = path_id(path.into_inner())?;
        let body = read_body(&req, payload, &state).await?;
        let (amount, reason) = parse_refund(&body)?;
        let hash = idempotency::request_hash("POST", req.path(), &body);
        let op = Operation::Refund {
            intent,
            amount,
            reason,
        };
        state
            .within_budget(idempotency::run(&state, client, &key, &hash, op))
            .await
    })
    .await
}

/// Runs `op` under the request's `Idempotency-Key` when it has one (replayed like every keyed write), else once
/// in its own transaction — for the writes whose outcome the intent's status already makes safe to repeat
/// (confirm, cancel).
pub(crate) async fn run_optionally_keyed(
    req: &HttpRequest,
    state: &ApiState,
    client: &str,
    key: Option<String>,
    body: &[u8],
    op: Operation,
) -> Result<Reply, ApiError> {
    match key {
        Some(key) => {
            let hash = idempotency::request_hash("POST", req.path(), body);
            state
                .within_budget(idempotency::run(state, client, &key, &hash, op))
                .await
        }
        None => {
            state
                .within_budget(idempotency::run_unkeyed(state, client, op))
                .await
        }
    }
}

/// An intent id from the path: an id no intent can have (empty, too long) is 404; one PostgreSQL cannot
/// hold (NUL) or with a control character is 400 from [`input::line`].
fn path_id(id: String) -> Result<String, ApiError> {
    super::object_id("id", &id, MAX_ID_BYTES, ApiError::IntentNotFound)?;
    Ok(id)
}

/// The body as a JSON object whose every key and string is storable (no NUL).
pub(crate) fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => {
            // Field "" so the error's param is the JSON pointer of the string: `/customer` → `customer`.
            input::json_strings("", &Value::Object(m.clone()))?;
            Ok(m)
        }
        Ok(_) => Err(ApiError::InvalidJson("expected an object".into())),
        // serde_json's syntax errors name a line and column, never the input.
        Err(e) => Err(ApiError::InvalidJson(e.to_string())),
    }
}

/// Unknown fields are refused (a typo must not silently drop a setting).
pub(crate) fn refuse_unknown(m: &Map<String, Value>, allowed: &[&str]) -> Result<(), ApiError> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => {
            let name: String = k.chars().take(64).collect();
            Err(ApiError::field(
                "unknown_field",
                name,
                format!("unknown field; accepted: {}", allowed.join(", ")),
            ))
        }
    }
}

pub(crate) fn required<'a>(
    m: &'a Map<String, Value>,
    param: &'static str,
) -> Result<&'a Value, ApiError> {
    match m.get(param) {
        None | Some(Value::Null) => Err(ApiError::ParameterMissing {
            param: param.to_owned(),
        }),
        Some(v) => Ok(v),
    }
}

pub(crate) fn amount(m: &Map<String, Value>) -> Result<i64, ApiError> {
    required(m, "amount")?
        .as_i64()
        .filter(|a| (1..=MAX_AMOUNT).contains(a))
        .ok_or_else(|| {
            ApiError::field(
                "amount_invalid",
                "amount",
                format!("amount must be an integer number of minor units from 1 to {MAX_AMOUNT}"),
            )
        })
}

/// An optional text field: absent or null = `None`; else a string of at most `max` characters, without
/// control characters (`multiline` allows line breaks and tabs).
fn optional_text(
    m: &Map<String, Value>,
    param: &'static str,
    code: &'static str,
    max: usize,
    multiline: bool,
) -> Result<Option<String>, ApiError> {
    match m.get(param) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if s.chars().count() <= max
                && s.chars()
                    .all(|c| !c.is_control() || (multiline && matches!(c, '\n' | '\r' | '\t'))) =>
        {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(ApiError::field(
            code,
            param,
            format!(
                "{param} must be a string of at most {max} characters without control characters"
            ),
        )),
    }
}

fn parse_create(body: &[u8], state: &ApiState) -> Result<CreateIntent, ApiError> {
    let m = parse_object(body)?;
    refuse_unknown(&m, CREATE_FIELDS)?;
    let provider = required(&m, "provider")?.as_str().ok_or_else(|| {
        ApiError::field("provider_invalid", "provider", "provider must be a string")
    })?;
    let configured = state.providers.get(provider).ok_or_else(|| {
        ApiError::field(
            "provider_unknown",
            "provider",
            "no provider of that name is configured",
        )
    })?;
    if params::field_of(configured.scheme).is_none() || configured.api_base.is_none() {
        return Err(ApiError::field(
            "provider_not_supported",
            "provider",
            "this provider cannot be charged through the API (a stripe, mercadopago or pagarme-v5 provider with api_base is required)",
        ));
    }
    let amount = amount(&m)?;
    let raw_currency = required(&m, "currency")?.as_str().unwrap_or_default();
    let currency = hookline_payments::currency::check(configured.scheme, provider, raw_currency)
        .map_err(|e| {
            let code = match e {
                hookline_payments::currency::CurrencyError::Invalid => "currency_invalid",
                hookline_payments::currency::CurrencyError::Unsupported { .. } => {
                    "currency_unsupported"
                }
            };
            ApiError::field(code, "currency", e.to_string())
        })?;
    let customer = optional_text(
        &m,
        "customer",
        "customer_invalid",
        MAX_CUSTOMER_CHARS,
        false,
    )?;
    let description = optional_text(
        &m,
        "description",
        "description_invalid",
        MAX_DESCRIPTION_CHARS,
        true,
    )?;
    let order_reference = optional_text(
        &m,
        "order_reference",
        "order_reference_invalid",
        MAX_ORDER_REFERENCE_CHARS,
        false,
    )?;
    if order_reference
        .as_deref()
        .is_some_and(|o| o.trim().is_empty())
    {
        return Err(ApiError::field(
            "order_reference_invalid",
            "order_reference",
            "order_reference must not be blank",
        ));
    }
    let cycle = subscription_cycle(&m)?;
    let confirm = match m.get("confirm") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::field(
                "confirm_invalid",
                "confirm",
                "confirm must be true or false",
            ))
        }
    };
    let capture_method = match m.get("capture_method") {
        None | Some(Value::Null) => CaptureMethod::Automatic,
        Some(v) => v
            .as_str()
            .and_then(|s| CaptureMethod::parse(s).ok())
            .ok_or_else(|| {
                ApiError::field(
                    "capture_method_invalid",
                    "capture_method",
                    "capture_method must be \"automatic\" or \"manual\"",
                )
            })?,
    };
    let object = params::from_body(&m, Some(configured.scheme))?;
    let params = object.as_ref().map(ProviderObject::to_params).transpose()?;
    if capture_method == CaptureMethod::Manual {
        if let Some(param) = params.as_ref().and_then(|p| p.not_a_card()) {
            return Err(ApiError::field(
                "capture_method_unsupported",
                param,
                "capture_method manual authorizes a card only; this payment method is captured as it is paid",
            ));
        }
    }
    if confirm {
        // The dispatcher's own rule: what it would refuse to send is refused here, naming the field.
        let effective = params.clone().or_else(|| params::empty(configured.scheme));
        if let Some(param) = effective.as_ref().and_then(|p| p.missing_for_confirm()) {
            return Err(ApiError::ParameterMissing {
                param: param.to_owned(),
            });
        }
    }
    Ok(CreateIntent {
        provider: provider.to_string(),
        amount,
        currency,
        customer,
        description,
        order_reference,
        params,
        confirm,
        cycle,
        capture_method,
    })
}

/// `subscription_id` (a positive integer) and `billing_cycle` (`YYYY-MM`): both or neither.
fn subscription_cycle(m: &Map<String, Value>) -> Result<Option<(i64, String)>, ApiError> {
    let id = match m.get("subscription_id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().filter(|id| *id > 0).ok_or_else(|| {
            ApiError::field(
                "subscription_id_invalid",
                "subscription_id",
                "subscription_id must be a positive integer",
            )
        })?),
    };
    let cycle = match m.get("billing_cycle") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_str()
                .filter(|c| hookline_billing::valid_cycle(c))
                .ok_or_else(|| {
                    ApiError::field(
                        "billing_cycle_invalid",
                        "billing_cycle",
                        "billing_cycle must be YYYY-MM (month 01-12)",
                    )
                })?
                .to_owned(),
        ),
    };
    match (id, cycle) {
        (Some(id), Some(cycle)) => Ok(Some((id, cycle))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(ApiError::ParameterMissing {
            param: "billing_cycle".into(),
        }),
        (None, Some(_)) => Err(ApiError::ParameterMissing {
            param: "subscription_id".into(),
        }),
    }
}

/// A confirm's body: empty, or an object with at most the provider object.
fn parse_confirm(body: &[u8]) -> Result<Option<ProviderObject>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let m = parse_object(body)?;
    refuse_unknown(&m, &["stripe", "mercadopago", "pagarme"])?;
    params::from_body(&m, None)
}

/// A cancel's body: empty, or `{"cancellation_reason": "duplicate" | "fraudulent" | "requested_by_customer" |
/// "abandoned"}` (`requested_by_customer` when absent).
fn parse_cancel(body: &[u8]) -> Result<CancellationReason, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(CancellationReason::RequestedByCustomer);
    }
    let m = parse_object(body)?;
    refuse_unknown(&m, &["cancellation_reason"])?;
    match m.get("cancellation_reason") {
        None | Some(Value::Null) => Ok(CancellationReason::RequestedByCustomer),
        Some(v) => v
            .as_str()
            .and_then(CancellationReason::merchant)
            .ok_or_else(|| {
                let accepted: Vec<&str> = CancellationReason::MERCHANT
                    .iter()
                    .map(|r| r.as_str())
                    .collect();
                ApiError::field(
                    "cancellation_reason_invalid",
                    "cancellation_reason",
                    format!("cancellation_reason must be one of {}", accepted.join(", ")),
                )
            }),
    }
}

/// A capture's body: empty, or `{"amount_to_capture": N}` (a positive integer of minor units; `None`: all).
fn parse_capture(body: &[u8]) -> Result<Option<i64>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let m = parse_object(body)?;
    refuse_unknown(&m, &["amount_to_capture"])?;
    match m.get("amount_to_capture") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .filter(|a| (1..=MAX_AMOUNT).contains(a))
            .map(Some)
            .ok_or_else(|| {
                ApiError::field(
                    "amount_to_capture_invalid",
                    "amount_to_capture",
                    format!("amount_to_capture must be an integer number of minor units from 1 to {MAX_AMOUNT}"),
                )
            }),
    }
}

fn parse_refund(body: &[u8]) -> Result<(i64, String), ApiError> {
    let m = parse_object(body)?;
    refuse_unknown(&m, &["amount", "reason"])?;
    let amount = amount(&m)?;
    let reason = optional_text(&m, "reason", "reason_invalid", MAX_REASON_CHARS, true)?
        .unwrap_or_else(|| "requested_by_customer".to_string());
    if reason.trim_matches(' ').is_empty() {
        return Err(ApiError::field(
            "reason_invalid",
            "reason",
            "reason must not be blank",
        ));
    }
    Ok((amount, reason))
}

#[cfg(test)]
mod subscription_cycle_tests {
    use super::*;
    use actix_web::ResponseError;
    use serde_json::json;

    fn parse(v: Value) -> Result<Option<(i64, String)>, ApiError> {
        subscription_cycle(v.as_object().expect("an object"))
    }

    #[test]
    fn a_cycle_is_a_positive_id_and_a_month_both_or_neither() {
        assert_eq!(parse(json!({})).unwrap(), None);
        assert_eq!(
            parse(json!({"subscription_id": null, "billing_cycle": null})).unwrap(),
            None
        );
        assert_eq!(
            parse(json!({"subscription_id": 12, "billing_cycle": "2026-12"})).unwrap(),
            Some((12, "2026-12".to_owned()))
        );
    }

    #[test]
    fn hostile_values_are_client_errors_naming_the_field() {
        let long = "2026-12".repeat(10_000);
        for (body, code, status) in [
            (
                json!({"subscription_id": "12", "billing_cycle": "2026-12"}),
                "subscription_id_invalid",
                422,
            ),
            (
                json!({"subscription_id": -1, "billing_cycle": "2026-12"}),
                "subscription_id_invalid",
                422,
            ),
            (
                json!({"subscription_id": 0, "billing_cycle": "2026-12"}),
                "subscription_id_invalid",
                422,
            ),
            (
                json!({"subscription_id": 1.5, "billing_cycle": "2026-12"}),
                "subscription_id_invalid",
                422,
            ),
            (
                json!({"subscription_id": 1e300, "billing_cycle": "2026-12"}),
                "subscription_id_invalid",
                422,
            ),
            (
                json!({"subscription_id": [1], "billing_cycle": "2026-12"}),
                "subscription_id_invalid",
                422,
            ),
            (
                json!({"subscription_id": 1, "billing_cycle": "2026-13"}),
                "billing_cycle_invalid",
                422,
            ),
            (
                json!({"subscription_id": 1, "billing_cycle": "2026-1\u{0}"}),
                "billing_cycle_invalid",
                422,
            ),
            (
                json!({"subscription_id": 1, "billing_cycle": "2026-\n1"}),
                "billing_cycle_invalid",
                422,
            ),
            (
                json!({"subscription_id": 1, "billing_cycle": long}),
                "billing_cycle_invalid",
                422,
            ),
            (
                json!({"subscription_id": 1, "billing_cycle": 202612}),
                "billing_cycle_invalid",
                422,
            ),
            (json!({"subscription_id": 1}), "parameter_missing", 400),
            (
                json!({"billing_cycle": "2026-12"}),
                "parameter_missing",
                400,
            ),
        ] {
            let e = parse(body.clone()).expect_err("refused");
            assert_eq!(e.code(), code, "{body}");
            assert_eq!(e.status_code().as_u16(), status, "{body}");
        }
    }
}
