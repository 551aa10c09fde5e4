//! The pieces of the merchant API's OpenAPI document that the handlers' annotations name and the document is
//! built around: the shared parameters (an intent's id, `Idempotency-Key`), the error answers of writes and reads,
//! and the schemas of any fact (`Event`, `EventTypeName`). Here, apart from [`crate::openapi`], so that a handler
//! module depends on this and the document on the handlers, never both ways.

use hookline_core::domain_events::EventType;
use utoipa::openapi::{RefOr, Schema};
use utoipa::ToSchema;

use crate::error::ErrorBody;

/// The intent's path id.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // a schema: the handlers read the path themselves
pub(crate) struct IntentId {
    /// The payment intent's id (`pi_hl_…`).
    #[param(
        pattern = "^pi_hl_[0-9a-f]{32}$",
        example = "pi_hl_4f9c2a7e1b3d5f60718293a4b5c6d7e8"
    )]
    id: String,
}

/// The subscription's path id.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // a schema: the handlers read the path themselves
pub(crate) struct SubscriptionId {
    /// The subscription's id (`sub_hl_…`).
    #[param(
        pattern = "^sub_hl_[0-9a-f]{32}$",
        example = "sub_hl_4f9c2a7e1b3d5f60718293a4b5c6d7e8"
    )]
    id: String,
}

/// `Idempotency-Key`, required: the first answer under it is stored and replayed for 24 h; the same key with
/// another request is 422 `idempotency_key_reused`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // a schema: the handlers read the header themselves
pub(crate) struct IdempotencyKeyRequired {
    /// 1 to 255 printable ASCII characters, made once per operation (not per click or per retry).
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = "^[\\x20-\\x7e]+$"
    )]
    key: String,
}

/// `Idempotency-Key`, optional here (the intent's status makes a repeat answer the current state).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // a schema: the handlers read the header themselves
pub(crate) struct IdempotencyKeyOptional {
    /// 1 to 255 printable ASCII characters.
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = "^[\\x20-\\x7e]+$"
    )]
    key: Option<String>,
}

/// The error answers of a write (`error.type`, `error.code`, `error.param` in [`ErrorBody`]).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // a schema: ApiError answers these
pub(crate) enum WriteErrors {
    /// A field, header or body that is wrong: `error.param` names it.
    #[response(
        status = 400,
        description = "Invalid request: `invalid_json`, `parameter_missing`, `idempotency_key_missing`, `idempotency_key_invalid`, `invalid_text`, `control_character`, `provider_object_mismatch`, `amount_too_large`, `unknown_parameter`… (`error.param` names the field)"
    )]
    BadRequest(ErrorBody),
    /// No key or a wrong one.
    #[response(
        status = 401,
        description = "`unauthorized`: no valid `Authorization: Bearer` key"
    )]
    Unauthorized(ErrorBody),
    /// Not this client's, or no such object.
    #[response(
        status = 404,
        description = "`intent_not_found`, `subscription_not_found`, `endpoint_not_found`"
    )]
    NotFound(ErrorBody),
    /// The body was not sent in time.
    #[response(status = 408, description = "`body_timeout`")]
    Timeout(ErrorBody),
    /// The object's state does not allow it, or the key is in flight.
    #[response(
        status = 409,
        description = "`order_reference_in_use`, `billing_cycle_in_use`, `intent_in_flight`, `intent_not_captured`, `payment_intent_unexpected_state` (`error.status`), `subscription_canceled`, `idempotency_key_in_flight` (retry)"
    )]
    Conflict(ErrorBody),
    /// Over the body limit.
    #[response(status = 413, description = "`payload_too_large`: over 64 KiB")]
    TooLarge(ErrorBody),
    /// A value out of its bounds or not allowed.
    #[response(
        status = 422,
        description = "A value the API cannot take: `amount_invalid`, `currency_invalid`, `currency_unsupported`, `provider_unknown`, `refund_above_captured`, `idempotency_key_reused`… (`error.param` names the field)"
    )]
    Unprocessable(ErrorBody),
    /// Ours.
    #[response(
        status = 500,
        description = "`internal_error`: retry with the same `Idempotency-Key`"
    )]
    Internal(ErrorBody),
    /// The database is unreachable or slow.
    #[response(
        status = 503,
        description = "`unavailable`: retry after `Retry-After` with the same `Idempotency-Key`"
    )]
    Unavailable(ErrorBody),
}

/// The error answers of a read.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // a schema: ApiError answers these
pub(crate) enum ReadErrors {
    /// A parameter that is wrong: `error.param` names it.
    #[response(
        status = 400,
        description = "`invalid_text`, `control_character`, `unknown_parameter`, `parameter_repeated`… (`error.param` names it)"
    )]
    BadRequest(ErrorBody),
    /// No key or a wrong one.
    #[response(
        status = 401,
        description = "`unauthorized`: no valid `Authorization: Bearer` key"
    )]
    Unauthorized(ErrorBody),
    /// Not this client's, or no such object.
    #[response(
        status = 404,
        description = "`intent_not_found`, `subscription_not_found`, `event_not_found`"
    )]
    NotFound(ErrorBody),
    /// A value out of its bounds.
    #[response(
        status = 422,
        description = "`limit_invalid`, `created_invalid`, `status_invalid`, `resource_missing` (a cursor that is not the client's)…"
    )]
    Unprocessable(ErrorBody),
    /// Ours.
    #[response(status = 500, description = "`internal_error`")]
    Internal(ErrorBody),
    /// The database is unreachable or slow.
    #[response(status = 503, description = "`unavailable`: retry after `Retry-After`")]
    Unavailable(ErrorBody),
}

/// Any fact, as listed by the events feed and as POSTed (the schema `Event`): one of the `Event_{type}` schemas of
/// [`add_webhooks`], told apart by `type`.
pub(crate) struct AnyEvent;

/// A fact type's name (the schema `EventTypeName`): exactly [`EventType::ALL`].
pub(crate) struct EventTypeName;

impl utoipa::PartialSchema for EventTypeName {
    fn schema() -> RefOr<Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(EventType::ALL.iter().map(|t| t.as_str())))
            .into()
    }
}

impl ToSchema for EventTypeName {}

/// The schema name of a fact type's envelope (`Event_payment_intent_succeeded`).
pub(crate) fn event_schema_name(ty: EventType) -> String {
    format!("Event_{}", ty.as_str().replace('.', "_"))
}

impl utoipa::PartialSchema for AnyEvent {
    fn schema() -> RefOr<Schema> {
        let mut one_of = utoipa::openapi::schema::OneOfBuilder::new();
        let mut discriminator = utoipa::openapi::Discriminator::new("type");
        for ty in EventType::ALL {
            let name = event_schema_name(ty);
            discriminator.mapping.insert(
                ty.as_str().to_owned(),
                format!("#/components/schemas/{name}"),
            );
            one_of = one_of.item(utoipa::openapi::Ref::from_schema_name(name));
        }
        one_of.discriminator(Some(discriminator)).into()
    }
}

impl ToSchema for AnyEvent {
    fn name() -> std::borrow::Cow<'static, str> {
        "Event".into()
    }
}
