//! `POST /v1/subscriptions`, `GET /v1/subscriptions`, `GET /v1/subscriptions/{id}`, `POST /v1/subscriptions/{id}`,
//! `POST /v1/subscriptions/{id}/cancel`: a merchant's subscriptions, charged off-session every cycle with the
//! method saved at its provider (issue 48).
//!
//! The rules are `hookline_billing::manage`'s, the same `hookline subscriptions add/update/cancel` run: the
//! provider can charge, the currency is one it accepts, the customer and the method are shaped like its ids, the
//! amount and the anchor are within their bounds; each write records its fact (`subscription.created`,
//! `subscription.updated`, `subscription.canceled`) in its transaction, owned by the client. Here the body is read
//! field by field as the payment intents' is (an unknown field, a wrong type, a NUL or a control character is a 4xx
//! naming it) and every read and write is scoped to the client: another client's subscription, or an operator's,
//! is 404 `subscription_not_found`. The create requires an `Idempotency-Key` (the intents' mechanism); an update
//! or a cancel may carry one.

use std::borrow::Cow;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use hookline_billing::manage::{self, Create};
use hookline_billing::{Interval, SubscriptionStatus};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::error::ApiError;
use super::intents::{amount, parse_object, refuse_unknown, required, run_optionally_keyed};
use super::list::{cursor, each_param, page_limit};
use super::operation::Operation;
use super::subscription_view::{
    self, manage_error, method_names, SavedMethod, SubscriptionChange, SubscriptionView,
};
use super::{idempotency, read_body, serve, ApiState, Reply, Route};

/// Longest subscription id accepted in a path or a cursor (longer ones cannot exist).
const MAX_ID_BYTES: usize = 255;
/// Longest RFC 3339 `anchor`, in bytes.
const MAX_ANCHOR_BYTES: usize = 64;
/// The provider objects, by name.
const OBJECTS: [&str; 3] = ["stripe", "mercadopago", "pagarme"];

/// The fields `POST /v1/subscriptions` takes (anything else is 400 naming it).
pub(crate) const CREATE_FIELDS: &[&str] = &[
    "provider",
    "amount",
    "currency",
    "interval",
    "anchor",
    "stripe",
    "mercadopago",
    "pagarme",
];
/// The fields `POST /v1/subscriptions/{id}` takes.
pub(crate) const UPDATE_FIELDS: &[&str] = &["amount", "stripe", "mercadopago", "pagarme"];
/// The fields `POST /v1/subscriptions/{id}/cancel` takes.
pub(crate) const CANCEL_FIELDS: &[&str] = &["at_period_end"];
/// The parameters `GET /v1/subscriptions` takes.
pub(crate) const LIST_PARAMS: &[&str] = &["limit", "starting_after", "status"];

/// Stripe's saved method in a subscription's body.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SubscriptionStripeParams)]
#[allow(dead_code)] // a schema: the parser reads the JSON itself
pub(crate) struct StripeParams {
    /// The Stripe Customer the method is saved to (`cus_…`).
    #[schema(min_length = 1, max_length = 255, example = "cus_NffrFeUfNV2Hib")]
    customer: String,
    /// The saved PaymentMethod (`pm_…`; `card_…`/`src_…` of older integrations).
    #[schema(min_length = 1, max_length = 255, example = "pm_card_visa")]
    payment_method: String,
}

/// A card saved at Mercado Pago or Pagar.me, in a subscription's body.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SubscriptionSavedCardParams)]
#[allow(dead_code)] // a schema: the parser reads the JSON itself
pub(crate) struct SavedCardParams {
    /// The customer at the provider (Mercado Pago: letters, digits and `-`; Pagar.me: `cus_…`).
    #[schema(min_length = 1, max_length = 64, example = "cus_Ab12")]
    customer_id: String,
    /// The card saved to it (Mercado Pago: digits; Pagar.me: `card_…`).
    #[schema(min_length = 1, max_length = 64, example = "card_xK8y")]
    card_id: String,
}

/// Stripe's new saved method in an update (`customer`, when given, must be the subscription's own).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SubscriptionStripeUpdate)]
#[allow(dead_code)] // a schema: the parser reads the JSON itself
pub(crate) struct StripeUpdate {
    /// The subscription's own Stripe Customer (`cus_…`).
    #[schema(min_length = 1, max_length = 255)]
    customer: Option<String>,
    /// The new saved PaymentMethod (`pm_…`).
    #[schema(min_length = 1, max_length = 255, example = "pm_card_mastercard")]
    payment_method: String,
}

/// A new card saved at Mercado Pago or Pagar.me, in an update (`customer_id`, when given, must be the
/// subscription's own).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SubscriptionSavedCardUpdate)]
#[allow(dead_code)] // a schema: the parser reads the JSON itself
pub(crate) struct SavedCardUpdate {
    /// The subscription's own customer at the provider.
    #[schema(min_length = 1, max_length = 64)]
    customer_id: Option<String>,
    /// The new saved card.
    #[schema(min_length = 1, max_length = 64)]
    card_id: String,
}

/// The body of `POST /v1/subscriptions` (the schema `CreateSubscription`); [`parse_create`] reads it, and a unit
/// test holds this struct's fields to [`CREATE_FIELDS`].
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateSubscription, example = json!({
    "provider": "stripe", "amount": 2000, "currency": "brl", "interval": "month",
    "stripe": {"customer": "cus_NffrFeUfNV2Hib", "payment_method": "pm_card_visa"}
}))]
#[allow(dead_code)] // a schema: the parser reads the JSON itself
pub(crate) struct CreateBody {
    /// A configured provider's name whose gateway can charge: a stripe, mercadopago or pagarme-v5 provider with
    /// `api_base`.
    #[schema(min_length = 1, max_length = 64, example = "stripe")]
    provider: String,
    /// Minor units charged per cycle.
    #[schema(minimum = 1, maximum = 1_000_000_000_000_000_i64, example = 2000)]
    amount: i64,
    /// ISO 4217, lower or upper case, one the provider accepts.
    #[schema(min_length = 3, max_length = 3, example = "brl")]
    currency: String,
    /// How often: `month` or `year`.
    #[schema(value_type = IntervalName)]
    interval: String,
    /// RFC 3339: periods start on its day (yearly: its month and day) at its time of day, UTC; within ten years
    /// before and one year after now (default now).
    #[schema(format = DateTime, max_length = 64)]
    anchor: Option<String>,
    /// Stripe's saved method (a `stripe` provider).
    stripe: Option<StripeParams>,
    /// Mercado Pago's saved card (a `mercadopago` provider).
    mercadopago: Option<SavedCardParams>,
    /// Pagar.me's saved card (a `pagarme-v5` provider).
    pagarme: Option<SavedCardParams>,
}

/// The body of `POST /v1/subscriptions/{id}` (the schema `UpdateSubscription`): a new saved method (the
/// subscription's own customer) and/or a new amount, from the next period on.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UpdateSubscription, example = json!({"amount": 2500}))]
#[allow(dead_code)] // a schema: the parser reads the JSON itself
pub(crate) struct UpdateBody {
    /// Minor units charged per cycle from the next charge on.
    #[schema(minimum = 1, maximum = 1_000_000_000_000_000_i64)]
    amount: Option<i64>,
    /// Stripe's new saved method (`customer`, when given, must be the subscription's).
    stripe: Option<StripeUpdate>,
    /// Mercado Pago's new saved card.
    mercadopago: Option<SavedCardUpdate>,
    /// Pagar.me's new saved card.
    pagarme: Option<SavedCardUpdate>,
}

/// The optional body of `POST /v1/subscriptions/{id}/cancel`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CancelSubscription)]
#[allow(dead_code)] // a schema: the parser reads the JSON itself
pub(crate) struct CancelBody {
    /// `true`: canceled when its running period ends (the next cycle is not charged); `false` (default): now.
    at_period_end: Option<bool>,
}

/// `month` or `year` (the schema `IntervalName`).
pub(crate) struct IntervalName;

impl utoipa::PartialSchema for IntervalName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some([Interval::Month.as_str(), Interval::Year.as_str()]))
            .into()
    }
}

impl utoipa::ToSchema for IntervalName {}

/// A page of `GET /v1/subscriptions` (the schema `SubscriptionList`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = SubscriptionList)]
pub struct SubscriptionList {
    /// Always `list`.
    #[schema(value_type = String, example = "list")]
    pub object: &'static str,
    /// Always `/v1/subscriptions`.
    #[schema(value_type = String, example = "/v1/subscriptions")]
    pub url: &'static str,
    /// The page, newest first.
    pub data: Vec<SubscriptionView>,
    /// Whether more follow the last of this page (ask again with `starting_after` = its id).
    pub has_more: bool,
}

/// The query of `GET /v1/subscriptions`; a unit test holds these names to [`LIST_PARAMS`].
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // a schema: the parser reads the query itself
pub(crate) struct ListParams {
    /// Page size, 1 to 100 (default 10).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
    /// A subscription id: the page starts after it (older ones).
    #[param(max_length = 255)]
    starting_after: Option<String>,
    /// Only subscriptions in this status.
    status: Option<SubscriptionStatus>,
}

/// `POST /v1/subscriptions`.
#[utoipa::path(
    post,
    path = "/v1/subscriptions",
    operation_id = "create_subscription",
    tag = "subscriptions",
    params(crate::schema::IdempotencyKeyRequired),
    request_body(content = CreateBody, description = "The subscription and the payment method saved at its provider"),
    responses(
        (status = 201, description = "Created (or its first answer replayed: `Idempotent-Replayed: true`)",
            body = SubscriptionView, headers(("Idempotent-Replayed" = String, description = "`true` on a replay"))),
        crate::schema::WriteErrors,
    ),
)]
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::CreateSubscription, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::key_of(&req)?;
        let body = read_body(&req, payload, &state).await?;
        let op = parse_create(&body, &state)?;
        let hash = idempotency::request_hash("POST", req.path(), &body);
        state
            .within_budget(idempotency::run(&state, client, &key, &hash, op))
            .await
    })
    .await
}

/// `GET /v1/subscriptions/{id}`.
#[utoipa::path(
    get,
    path = "/v1/subscriptions/{id}",
    operation_id = "get_subscription",
    tag = "subscriptions",
    params(crate::schema::SubscriptionId),
    responses(
        (status = 200, description = "The subscription", body = SubscriptionView),
        crate::schema::ReadErrors,
    ),
)]
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::GetSubscription, async {
        let client = state.keys.authenticate(&req)?;
        let id = path_id(path.into_inner())?;
        let view = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                let sub = hookline_billing::subscriptions::get_for_client(&mut conn, client, &id)
                    .await
                    .map_err(|e| ApiError::database(e, "read the subscription"))?
                    .ok_or(ApiError::SubscriptionNotFound)?;
                subscription_view::view(&mut conn, sub, &state.providers).await
            })
            .await?;
        Reply::json(StatusCode::OK, &view)
    })
    .await
}

/// `GET /v1/subscriptions`.
#[utoipa::path(
    get,
    path = "/v1/subscriptions",
    operation_id = "list_subscriptions",
    tag = "subscriptions",
    params(ListParams),
    responses(
        (status = 200, description = "A page of the client's subscriptions, newest first", body = SubscriptionList),
        crate::schema::ReadErrors,
    ),
)]
pub async fn list(req: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    serve(Route::ListSubscriptions, async {
        let client = state.keys.authenticate(&req)?;
        let query = parse_list(req.query_string())?;
        let (data, has_more) = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                let page = hookline_billing::subscriptions::page_for_client(
                    &mut conn,
                    client,
                    query.status,
                    query.starting_after.as_deref(),
                    query.limit,
                )
                .await
                .map_err(|e| match e {
                    hookline_billing::subscriptions::PageError::UnknownCursor => ApiError::field(
                        "resource_missing",
                        "starting_after",
                        "no such subscription",
                    ),
                    hookline_billing::subscriptions::PageError::Database(e) => {
                        ApiError::database(e, "list the subscriptions")
                    }
                })?;
                let data =
                    subscription_view::views(&mut conn, page.subscriptions, &state.providers)
                        .await?;
                Ok((data, page.has_more))
            })
            .await?;
        Reply::json(
            StatusCode::OK,
            &SubscriptionList {
                object: "list",
                url: "/v1/subscriptions",
                data,
                has_more,
            },
        )
    })
    .await
}

/// `POST /v1/subscriptions/{id}`: a new saved method and/or amount, from the next charge on; a new method makes a
/// parked subscription (`past_due`, `needs_payment_method`) active again and retries its unpaid cycle once.
/// `Idempotency-Key` optional.
#[utoipa::path(
    post,
    path = "/v1/subscriptions/{id}",
    operation_id = "update_subscription",
    tag = "subscriptions",
    params(crate::schema::SubscriptionId, crate::schema::IdempotencyKeyOptional),
    request_body(content = UpdateBody, description = "What changes: the provider object's saved method and/or amount"),
    responses(
        (status = 200, description = "The subscription as it is now", body = SubscriptionView),
        crate::schema::WriteErrors,
    ),
)]
pub async fn update(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::UpdateSubscription, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::optional_key_of(&req)?;
        let subscription = path_id(path.into_inner())?;
        let body = read_body(&req, payload, &state).await?;
        let change = Box::new(parse_update(&body)?);
        let op = Operation::UpdateSubscription {
            subscription,
            change,
        };
        run_optionally_keyed(&req, &state, client, key, &body, op).await
    })
    .await
}

/// `POST /v1/subscriptions/{id}/cancel`, optional body `{"at_period_end": bool}` (default `false`: now). A repeat
/// answers the subscription as it is. `Idempotency-Key` optional.
#[utoipa::path(
    post,
    path = "/v1/subscriptions/{id}/cancel",
    operation_id = "cancel_subscription",
    tag = "subscriptions",
    params(crate::schema::SubscriptionId, crate::schema::IdempotencyKeyOptional),
    request_body(content = Option<CancelBody>, description = "Optional: at the end of the running period"),
    responses(
        (status = 200, description = "Canceled, or set to cancel at its period's end", body = SubscriptionView),
        crate::schema::WriteErrors,
    ),
)]
pub async fn cancel(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::CancelSubscription, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::optional_key_of(&req)?;
        let subscription = path_id(path.into_inner())?;
        let body = read_body(&req, payload, &state).await?;
        let at_period_end = parse_cancel(&body)?;
        let op = Operation::CancelSubscription {
            subscription,
            at_period_end,
        };
        run_optionally_keyed(&req, &state, client, key, &body, op).await
    })
    .await
}

/// A subscription id from the path: one no subscription can have (empty, too long) is 404; a NUL or a control
/// character is 400.
fn path_id(id: String) -> Result<String, ApiError> {
    super::object_id("id", &id, MAX_ID_BYTES, ApiError::SubscriptionNotFound)?;
    Ok(id)
}

fn string<'a>(m: &'a Map<String, Value>, param: &'static str) -> Result<&'a str, ApiError> {
    required(m, param)?.as_str().ok_or_else(|| {
        ApiError::field(
            "parameter_invalid",
            param,
            format!("{param} must be a string"),
        )
    })
}

/// The saved method in the body's provider object (`None` when none is sent): at most one object; only its
/// customer and method fields (by [`method_names`]); each a string (Mercado Pago's card id may be a number, as
/// its answers carry it). `expected` (the provider's object) refuses another one.
fn saved_method(
    m: &Map<String, Value>,
    expected: Option<&'static str>,
) -> Result<Option<SavedMethod>, ApiError> {
    let present: Vec<&'static str> = OBJECTS
        .into_iter()
        .filter(|f| m.get(*f).is_some_and(|v| !v.is_null()))
        .collect();
    if let (Some(expected), Some(other)) =
        (expected, present.iter().find(|f| Some(**f) != expected))
    {
        return Err(ApiError::ProviderObjectMismatch {
            param: (*other).to_owned(),
            expected,
        });
    }
    if present.len() > 1 {
        return Err(ApiError::ProviderObjectMismatch {
            param: present[1].to_owned(),
            expected: present[0],
        });
    }
    let Some(object) = present.first().copied() else {
        return Ok(None);
    };
    let Some(Value::Object(fields)) = m.get(object) else {
        return Err(ApiError::field(
            "parameter_invalid",
            object,
            format!("{object} must be an object"),
        ));
    };
    let (customer, method) = method_names(object);
    if let Some(k) = fields.keys().find(|k| *k != customer && *k != method) {
        let name: String = k.chars().filter(|c| !c.is_control()).take(64).collect();
        return Err(ApiError::field(
            "unknown_field",
            format!("{object}.{name}"),
            format!("unknown field; accepted in {object}: {customer}, {method}"),
        ));
    }
    let text = |name: &'static str| -> Result<Option<String>, ApiError> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(None),
            // What is stored is what was sent: no space or control character to trim away.
            Some(Value::String(s))
                if !s.is_empty() && !s.chars().any(|c| c.is_control() || c.is_whitespace()) =>
            {
                Ok(Some(s.clone()))
            }
            Some(Value::Number(n)) if object == "mercadopago" && n.as_u64().is_some() => {
                Ok(Some(n.to_string()))
            }
            Some(_) => Err(ApiError::field(
                "parameter_invalid",
                format!("{object}.{name}"),
                format!("{object}.{name} must be a non-empty string without spaces or control characters"),
            )),
        }
    };
    Ok(Some(SavedMethod {
        object,
        customer: text(customer)?,
        payment_method: text(method)?,
    }))
}

fn parse_create(body: &[u8], state: &ApiState) -> Result<Operation, ApiError> {
    let m = parse_object(body)?;
    refuse_unknown(&m, CREATE_FIELDS)?;
    let provider = string(&m, "provider")?;
    let configured = state.providers.get(provider);
    // The same rule as a payment intent's: a provider the API cannot charge through (no api_base) is refused.
    if let Some(p) = configured {
        if super::params::field_of(p.scheme).is_none() || p.api_base.is_none() {
            return Err(ApiError::field(
                "provider_not_supported",
                "provider",
                "this provider cannot be charged through the API (a stripe, mercadopago or pagarme-v5 provider with api_base is required)",
            ));
        }
    }
    let scheme = manage::chargeable(provider, configured).map_err(|e| manage_error(e, None))?;
    let object = super::params::field_of(scheme).unwrap_or("stripe");
    let amount = amount(&m)?;
    let currency = required(&m, "currency")?.as_str().unwrap_or_default();
    let interval = required(&m, "interval")?
        .as_str()
        .and_then(|s| s.parse::<Interval>().ok())
        .ok_or_else(|| {
            ApiError::field(
                "interval_invalid",
                "interval",
                "interval must be \"month\" or \"year\"",
            )
        })?;
    let anchor = match m.get("anchor") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_str()
                .filter(|s| s.len() <= MAX_ANCHOR_BYTES)
                .and_then(|s| {
                    OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
                })
                .ok_or_else(|| {
                    ApiError::field(
                        "anchor_invalid",
                        "anchor",
                        "anchor must be an RFC 3339 time (2026-12-15T00:00:00Z)",
                    )
                })?,
        ),
    };
    let method = saved_method(&m, Some(object))?.ok_or_else(|| ApiError::ParameterMissing {
        param: object.to_owned(),
    })?;
    let (customer_name, method_name) = method_names(object);
    let customer = method
        .customer
        .as_deref()
        .ok_or_else(|| ApiError::ParameterMissing {
            param: format!("{object}.{customer_name}"),
        })?;
    let payment_method =
        method
            .payment_method
            .as_deref()
            .ok_or_else(|| ApiError::ParameterMissing {
                param: format!("{object}.{method_name}"),
            })?;
    let checked = manage::check_new(
        &Create {
            provider,
            customer,
            payment_method,
            amount,
            currency,
            interval,
            anchor,
        },
        configured,
        OffsetDateTime::now_utc(),
    )
    .map_err(|e| manage_error(e, Some(object)))?;
    Ok(Operation::CreateSubscription {
        checked: Box::new(checked),
        object,
    })
}

fn parse_update(body: &[u8]) -> Result<SubscriptionChange, ApiError> {
    let m = parse_object(body)?;
    refuse_unknown(&m, UPDATE_FIELDS)?;
    let amount = match m.get("amount") {
        None | Some(Value::Null) => None,
        Some(_) => Some(amount(&m)?),
    };
    let method = saved_method(&m, None)?;
    if amount.is_none() && method.is_none() {
        return Err(ApiError::ParameterMissing {
            param: "amount".to_owned(),
        });
    }
    Ok(SubscriptionChange { method, amount })
}

fn parse_cancel(body: &[u8]) -> Result<bool, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(false);
    }
    let m = parse_object(body)?;
    refuse_unknown(&m, CANCEL_FIELDS)?;
    match m.get("at_period_end") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::field(
            "at_period_end_invalid",
            "at_period_end",
            "at_period_end must be true or false",
        )),
    }
}

/// The list's parameters, checked.
#[derive(Debug)]
struct ListQuery {
    limit: i64,
    starting_after: Option<String>,
    status: Option<SubscriptionStatus>,
}

fn parse_list(query: &str) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery {
        limit: super::list::DEFAULT_LIMIT,
        starting_after: None,
        status: None,
    };
    each_param(query, LIST_PARAMS, |param, value: Cow<'_, str>| {
        match param {
            "limit" => q.limit = page_limit(&value, hookline_billing::subscriptions::MAX_PAGE)?,
            "starting_after" => {
                q.starting_after = Some(cursor(param, &value, "no such subscription")?);
            }
            _ => {
                q.status = Some(SubscriptionStatus::parse(&value).map_err(|_| {
                    let all: Vec<&str> =
                        SubscriptionStatus::ALL.iter().map(|s| s.as_str()).collect();
                    ApiError::field(
                        "status_invalid",
                        "status",
                        format!("status must be one of {}", all.join(", ")),
                    )
                })?);
            }
        }
        Ok(())
    })?;
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::ResponseError;
    use serde_json::json;

    fn refused(r: Result<impl std::fmt::Debug, ApiError>) -> (u16, &'static str, String) {
        let e = r.expect_err("refused");
        let param = match &e {
            ApiError::InvalidField { param, .. }
            | ApiError::ParameterMissing { param }
            | ApiError::ProviderObjectMismatch { param, .. } => param.clone(),
            ApiError::InvalidInput(i) => i.field().trim_start_matches('/').to_owned(),
            _ => String::new(),
        };
        (e.status_code().as_u16(), e.code(), param)
    }

    #[test]
    fn updates_name_what_is_wrong() {
        let parse = |v: Value| parse_update(v.to_string().as_bytes());
        assert!(parse(json!({"amount": 5})).is_ok());
        assert!(parse(json!({"stripe": {"payment_method": "pm_1"}})).is_ok());
        assert_eq!(refused(parse(json!({}))).2, "amount");
        assert_eq!(refused(parse(json!({"amount": 0}))).1, "amount_invalid");
        assert_eq!(refused(parse(json!({"amount": "5"}))).1, "amount_invalid");
        assert_eq!(
            refused(parse(json!({"stripe": {"pm": "x"}}))),
            (422, "unknown_field", "stripe.pm".into())
        );
        assert_eq!(
            refused(parse(json!({"stripe": {}, "pagarme": {}}))).1,
            "provider_object_mismatch"
        );
        assert_eq!(
            refused(parse(json!({"pagarme": {"card_id": 5}}))),
            (422, "parameter_invalid", "pagarme.card_id".into())
        );
        assert!(parse(json!({"mercadopago": {"card_id": 5}})).is_ok());
        assert_eq!(refused(parse(json!({"x": 1}))).2, "x");
    }

    #[test]
    fn cancels_take_at_period_end_only() {
        assert_eq!(parse_cancel(b"").ok(), Some(false));
        assert_eq!(parse_cancel(br#"{"at_period_end": true}"#).ok(), Some(true));
        assert_eq!(
            refused(parse_cancel(br#"{"at_period_end": "yes"}"#)).2,
            "at_period_end"
        );
        assert_eq!(refused(parse_cancel(br#"{"now": true}"#)).2, "now");
        assert_eq!(refused(parse_cancel(b"[]")).1, "invalid_json");
    }

    #[test]
    fn list_parameters_are_bounded() {
        assert_eq!(parse_list("").map(|q| q.limit).ok(), Some(10));
        let q = parse_list("limit=100&starting_after=sub_hl_1&status=past_due").unwrap();
        assert_eq!(q.status, Some(SubscriptionStatus::PastDue));
        for (query, param) in [
            ("limit=0", "limit"),
            ("limit=101", "limit"),
            ("status=paid", "status"),
            ("ending_before=x", "ending_before"),
            ("limit=1&limit=2", "limit"),
        ] {
            let (status, _, p) = refused(parse_list(query));
            assert!((400..500).contains(&status), "{query}");
            assert_eq!(p, param, "{query}");
        }
    }
}
