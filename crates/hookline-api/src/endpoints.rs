//! The webhook endpoints a merchant manages itself (issue 47):
//!
//! * `POST /v1/webhook_endpoints` — make one (`url`, `enabled_events`, `description`): 201 with the endpoint and
//!   its `secret` (`whsec_…`), shown in this answer only (and in `rotate_secret`'s); an optional
//!   `Idempotency-Key` replays the same answer, secret included (it is the same client asking again);
//! * `GET /v1/webhook_endpoints`, `GET /v1/webhook_endpoints/{id}` — read them (never the secret);
//! * `POST /v1/webhook_endpoints/{id}` — change `url`, `enabled_events`, `description`, `disabled`;
//! * `POST /v1/webhook_endpoints/{id}/rotate_secret` — a new secret; the old one keeps signing, as a second
//!   signature, for `expires_in_secs` (default 24 h, 0 to 7 days);
//! * `DELETE /v1/webhook_endpoints/{id}` — no new facts; its delivery history stays;
//! * `GET /v1/webhook_endpoints/{id}/deliveries` — each fact's delivery: status, attempts, last answer, next retry;
//! * `POST /v1/events/{id}/resend` `{"endpoint": "we_…"}` — that fact to that endpoint again (same `webhook-id`).
//!
//! An endpoint is a row of `destinations` owned by the client (`hookline_delivery::destinations` owns the SQL):
//! facts reach it through the same fan-out, outbox, delivery loops and retry rules as the operator's configured
//! destinations, and only the facts its client may see (its own; all of them for an `all_events` client). Another
//! client's endpoint or fact is 404, as if it did not exist. Bounds: 16 live endpoints per client (409), a URL of
//! at most 2048 characters, 1 to 32 event types. No SSRF: unless `[api] allow_private_webhook_urls`, the URL must
//! be `https` and its host public — a literal address is judged, a name is resolved and refused if any address is
//! not public ([`hookline_delivery::address`]); the delivery judges the address it connects to again.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine;
use hookline_core::domain_events::EventType;
use hookline_core::input;
use hookline_core::supervisor::Supervisor;
use hookline_delivery::address::{self, Lookups, SystemLookups};
use hookline_delivery::destinations::{
    self, DeliveryPage, EndpointChange, EndpointDelivery, Resend,
};
use rand::RngCore;
use serde_json::{Map, Value};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::intents::{parse_object, refuse_unknown, run_optionally_keyed};
use super::list::{self, DEFAULT_LIMIT};
use super::operation::{CreateEndpoint, Operation};
use super::webhook_view::{object, unix, with_secret, EndpointObject};
use super::{idempotency, read_body, serve, ApiState, Reply, Route};
use hookline_payments::intents::MAX_LIST_LIMIT;

/// Longest `url`, in characters.
pub const MAX_URL_CHARS: usize = 2048;
/// Most `enabled_events` per endpoint.
pub const MAX_ENABLED_EVENTS: usize = 32;
/// Longest `description`, in characters (the column's bound).
pub const MAX_DESCRIPTION_CHARS: usize = 1000;
/// How long the old secret keeps signing after a rotation when `expires_in_secs` is not given: a day.
pub const DEFAULT_ROTATION_OVERLAP_SECS: u64 = 86_400;
/// The longest rotation overlap: 7 days.
pub const MAX_ROTATION_OVERLAP_SECS: u64 = 7 * 86_400;
/// Random bytes of a secret (Standard Webhooks: 24 to 64).
const SECRET_BYTES: usize = 32;
/// Longest id accepted in a path or a body (longer ones cannot exist).
const MAX_ID_BYTES: usize = 64;
/// Longest a name's resolution may take when an endpoint is made or changed.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// `POST /v1/webhook_endpoints`.
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints",
    operation_id = "create_webhook_endpoint",
    tag = "webhook_endpoints",
    params(crate::schema::IdempotencyKeyOptional),
    request_body(content = CreateEndpointBody),
    responses(
        (status = 201, description = "Made: the answer carries its `secret`, shown here and never again", body = EndpointObject),
        crate::schema::WriteErrors,
    ),
)]
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::CreateWebhookEndpoint, async {
        let client = state.keys.authenticate(&req)?;
        let key = idempotency::optional_key_of(&req)?;
        let body = read_body(&req, payload, &state).await?;
        let m = parse_object(&body)?;
        refuse_unknown(&m, &["url", "enabled_events", "description"])?;
        let url = match m.get("url") {
            None | Some(Value::Null) => {
                return Err(ApiError::ParameterMissing {
                    param: "url".into(),
                })
            }
            Some(v) => checked_url(v, &state).await?,
        };
        let events = match m.get("enabled_events") {
            None | Some(Value::Null) => {
                return Err(ApiError::ParameterMissing {
                    param: "enabled_events".into(),
                })
            }
            Some(v) => enabled_events(v)?,
        };
        let description = description(&m)?.flatten();
        let op = Operation::CreateWebhookEndpoint(Box::new(CreateEndpoint {
            id: format!(
                "{}{}",
                destinations::ENDPOINT_ID_PREFIX,
                hex::encode(random::<16>())
            ),
            url,
            events,
            description,
            secret: new_secret(),
            all_events: state.keys.sees_all_events(client),
            allow_private: state.allow_private_webhook_urls,
        }));
        run_optionally_keyed(&req, &state, client, key, &body, op).await
    })
    .await
}

/// `GET /v1/webhook_endpoints/{id}`.
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints/{id}",
    operation_id = "get_webhook_endpoint",
    tag = "webhook_endpoints",
    params(EndpointId),
    responses((status = 200, description = "The endpoint (never its secret)", body = EndpointObject), crate::schema::ReadErrors),
)]
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::GetWebhookEndpoint, async {
        let client = state.keys.authenticate(&req)?;
        let id = path_id(path.into_inner(), ApiError::EndpointNotFound)?;
        let endpoint = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                destinations::get_endpoint(&mut *conn, client, &id)
                    .await
                    .map_err(|e| ApiError::database(e, "read the webhook endpoint"))
            })
            .await?
            .ok_or(ApiError::EndpointNotFound)?;
        Reply::json(StatusCode::OK, &object(&endpoint))
    })
    .await
}

/// `GET /v1/webhook_endpoints?limit=&starting_after=`: newest first.
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints",
    operation_id = "list_webhook_endpoints",
    tag = "webhook_endpoints",
    params(PageQuery),
    responses((status = 200, description = "The client's endpoints, newest first", body = EndpointList), crate::schema::ReadErrors),
)]
pub async fn list(req: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    serve(Route::ListWebhookEndpoints, async {
        let client = state.keys.authenticate(&req)?;
        let (limit, after) = page_query(req.query_string())?;
        let all = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                destinations::list_endpoints(&mut *conn, client)
                    .await
                    .map_err(|e| ApiError::database(e, "list the webhook endpoints"))
            })
            .await?;
        // At most 16: paged here.
        let start = match &after {
            None => 0,
            Some(id) => {
                all.iter().position(|e| &e.name == id).ok_or_else(|| {
                    ApiError::field(
                        "resource_missing",
                        "starting_after",
                        "no such webhook endpoint",
                    )
                })? + 1
            }
        };
        let rest = &all[start.min(all.len())..];
        let limit = usize::try_from(limit).unwrap_or(0);
        Reply::json(
            StatusCode::OK,
            &EndpointList {
                object: "list",
                url: "/v1/webhook_endpoints",
                data: rest.iter().take(limit).map(object).collect(),
                has_more: rest.len() > limit,
            },
        )
    })
    .await
}

/// `POST /v1/webhook_endpoints/{id}`: any of `url`, `enabled_events`, `description` (null clears it),
/// `disabled` (`false` also lifts a 410's disabling).
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints/{id}",
    operation_id = "update_webhook_endpoint",
    tag = "webhook_endpoints",
    params(EndpointId),
    request_body(content = UpdateEndpointBody),
    responses((status = 200, description = "Changed", body = EndpointObject), crate::schema::WriteErrors),
)]
pub async fn update(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::UpdateWebhookEndpoint, async {
        let client = state.keys.authenticate(&req)?;
        let id = path_id(path.into_inner(), ApiError::EndpointNotFound)?;
        let body = read_body(&req, payload, &state).await?;
        let m = parse_object(&body)?;
        refuse_unknown(&m, &["url", "enabled_events", "description", "disabled"])?;
        let url = match m.get("url") {
            None => None,
            Some(v) => Some(checked_url(v, &state).await?),
        };
        let events = match m.get("enabled_events") {
            None => None,
            Some(v) => Some(enabled_events(v)?),
        };
        let description = description(&m)?;
        let disabled = match m.get("disabled") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                return Err(ApiError::field(
                    "disabled_invalid",
                    "disabled",
                    "disabled must be true or false",
                ))
            }
        };
        let change = EndpointChange {
            url: url.as_deref(),
            events: events.as_deref(),
            description: description.as_ref().map(|d| d.as_deref()),
            disabled,
        };
        let endpoint = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                destinations::update_endpoint(
                    &mut *conn,
                    client,
                    &id,
                    &change,
                    state.keys.sees_all_events(client),
                    state.allow_private_webhook_urls,
                )
                .await
                .map_err(|e| ApiError::database(e, "update the webhook endpoint"))
            })
            .await?
            .ok_or(ApiError::EndpointNotFound)?;
        Reply::json(StatusCode::OK, &object(&endpoint))
    })
    .await
}

/// `POST /v1/webhook_endpoints/{id}/rotate_secret`, optional body `{"expires_in_secs": N}`.
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints/{id}/rotate_secret",
    operation_id = "rotate_webhook_endpoint_secret",
    tag = "webhook_endpoints",
    params(EndpointId),
    request_body(content = Option<RotateBody>, description = "Optional: how long the old secret keeps signing"),
    responses((status = 200, description = "The new `secret`, shown here only; the old one signs beside it until `previous_secret_expires_at`", body = EndpointObject), crate::schema::WriteErrors),
)]
pub async fn rotate_secret(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::RotateWebhookEndpointSecret, async {
        let client = state.keys.authenticate(&req)?;
        let id = path_id(path.into_inner(), ApiError::EndpointNotFound)?;
        let body = read_body(&req, payload, &state).await?;
        let overlap = if body.iter().all(u8::is_ascii_whitespace) {
            DEFAULT_ROTATION_OVERLAP_SECS
        } else {
            let m = parse_object(&body)?;
            refuse_unknown(&m, &["expires_in_secs"])?;
            match m.get("expires_in_secs") {
                None | Some(Value::Null) => DEFAULT_ROTATION_OVERLAP_SECS,
                Some(v) => v
                    .as_u64()
                    .filter(|s| *s <= MAX_ROTATION_OVERLAP_SECS)
                    .ok_or_else(|| {
                        ApiError::field(
                            "expires_in_secs_invalid",
                            "expires_in_secs",
                            format!(
                                "expires_in_secs must be an integer from 0 to {MAX_ROTATION_OVERLAP_SECS}"
                            ),
                        )
                    })?,
            }
        };
        let secret = new_secret();
        let endpoint = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                destinations::rotate_endpoint_secret(
                    &mut *conn,
                    client,
                    &id,
                    &secret,
                    Duration::from_secs(overlap),
                )
                .await
                .map_err(|e| ApiError::database(e, "rotate the webhook endpoint's secret"))
            })
            .await?
            .ok_or(ApiError::EndpointNotFound)?;
        Reply::json(StatusCode::OK, &with_secret(&endpoint, &secret))
    })
    .await
}

/// `DELETE /v1/webhook_endpoints/{id}`.
#[utoipa::path(
    delete,
    path = "/v1/webhook_endpoints/{id}",
    operation_id = "delete_webhook_endpoint",
    tag = "webhook_endpoints",
    params(EndpointId),
    responses((status = 200, description = "Deleted: no new facts; its delivery history stays", body = DeletedEndpoint), crate::schema::ReadErrors),
)]
pub async fn delete(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::DeleteWebhookEndpoint, async {
        let client = state.keys.authenticate(&req)?;
        let id = path_id(path.into_inner(), ApiError::EndpointNotFound)?;
        let deleted = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                destinations::delete_endpoint(&mut *conn, client, &id)
                    .await
                    .map_err(|e| ApiError::database(e, "delete the webhook endpoint"))
            })
            .await?;
        if !deleted {
            return Err(ApiError::EndpointNotFound);
        }
        Reply::json(
            StatusCode::OK,
            &DeletedEndpoint {
                id,
                object: "webhook_endpoint",
                deleted: true,
            },
        )
    })
    .await
}

/// `GET /v1/webhook_endpoints/{id}/deliveries?limit=&starting_after=` (`starting_after`: a fact's id).
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints/{id}/deliveries",
    operation_id = "list_webhook_deliveries",
    tag = "webhook_endpoints",
    params(EndpointId, PageQuery),
    responses((status = 200, description = "Each fact's delivery to this endpoint, newest first", body = DeliveryList), crate::schema::ReadErrors),
)]
pub async fn deliveries(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::ListWebhookDeliveries, async {
        let client = state.keys.authenticate(&req)?;
        let id = path_id(path.into_inner(), ApiError::EndpointNotFound)?;
        let (limit, after) = page_query(req.query_string())?;
        let page = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                destinations::endpoint_deliveries(&mut conn, client, &id, after.as_deref(), limit)
                    .await
                    .map_err(|e| ApiError::database(e, "list the webhook endpoint's deliveries"))
            })
            .await?;
        let (deliveries, has_more) = match page {
            DeliveryPage::NoEndpoint => return Err(ApiError::EndpointNotFound),
            DeliveryPage::UnknownCursor => {
                return Err(ApiError::field(
                    "resource_missing",
                    "starting_after",
                    "no such delivery of this webhook endpoint",
                ))
            }
            DeliveryPage::Page {
                deliveries,
                has_more,
            } => (deliveries, has_more),
        };
        Reply::json(
            StatusCode::OK,
            &DeliveryList {
                object: "list",
                url: format!("/v1/webhook_endpoints/{id}/deliveries"),
                data: deliveries.iter().map(delivery_object).collect(),
                has_more,
            },
        )
    })
    .await
}

/// `POST /v1/events/{id}/resend` `{"endpoint": "we_…"}`: 202 once the fact is queued to that endpoint again.
#[utoipa::path(
    post,
    path = "/v1/events/{id}/resend",
    operation_id = "resend_event",
    tag = "events",
    params(crate::events::EventId),
    request_body(content = ResendBody),
    responses((status = 202, description = "Queued to the endpoint again, with the same `webhook-id`", body = ResendObject), crate::schema::WriteErrors),
)]
pub async fn resend(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::ResendEvent, async {
        let client = state.keys.authenticate(&req)?;
        let event = path_id(path.into_inner(), ApiError::EventNotFound)?;
        let body = read_body(&req, payload, &state).await?;
        let m = parse_object(&body)?;
        refuse_unknown(&m, &["endpoint"])?;
        let endpoint = match m.get("endpoint") {
            None | Some(Value::Null) => {
                return Err(ApiError::ParameterMissing {
                    param: "endpoint".into(),
                })
            }
            Some(Value::String(s)) => {
                super::object_id("endpoint", s, MAX_ID_BYTES, ApiError::EndpointNotFound)?;
                s.clone()
            }
            Some(_) => {
                return Err(ApiError::field(
                    "endpoint_invalid",
                    "endpoint",
                    "endpoint must be a webhook endpoint's id (we_…)",
                ))
            }
        };
        let all_events = state.keys.sees_all_events(client);
        let outcome = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                destinations::resend(&mut *conn, client, all_events, &endpoint, &event)
                    .await
                    .map_err(|e| ApiError::database(e, "queue the fact again"))
            })
            .await?;
        match outcome {
            Resend::NoEndpoint => Err(ApiError::EndpointNotFound),
            Resend::NoEvent => Err(ApiError::EventNotFound),
            Resend::Queued => Reply::json(
                StatusCode::ACCEPTED,
                &ResendObject {
                    object: "event_resend",
                    event,
                    endpoint,
                    status: "pending",
                },
            ),
        }
    })
    .await
}

/// Sets every endpoint's `all_events` and `allow_private` from this configuration, once, when the API starts
/// (retrying while the database is away): a client whose `all_events` changed, or an operator who turned
/// `allow_private_webhook_urls` off, changes what the endpoints made before receive and may reach.
pub fn spawn_refresh(
    pool: PgPool,
    all_events_clients: Vec<String>,
    allow_private: bool,
    supervisor: &Supervisor,
    cancel: &CancellationToken,
) {
    let state = Arc::new((pool, all_events_clients));
    // The handle is not kept: the task ends once it has written, or with `cancel`.
    drop(
        supervisor.spawn(REFRESH_TASK, cancel, state, move |state, _| async move {
            let (pool, clients) = &*state;
            let mut backoff =
                hookline_core::retry::Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
            loop {
                match destinations::refresh_endpoints(pool, clients, allow_private).await {
                    Ok(n) => {
                        if n > 0 {
                            tracing::info!(endpoints = n, "webhook endpoints follow the [api] configuration");
                        }
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(error.message = %e, "cannot refresh the webhook endpoints; retrying");
                        tokio::time::sleep(backoff.failed()).await;
                    }
                }
            }
        }),
    );
}

/// Name of the one-shot supervised task of [`spawn_refresh`].
pub const REFRESH_TASK: &str = "api_webhook_endpoints_refresh";

// --- input -----------------------------------------------------------------------------------------------------

/// A path id (see [`super::object_id`]): one no endpoint or fact can have is `missing` (404).
fn path_id(id: String, missing: ApiError) -> Result<String, ApiError> {
    super::object_id("id", &id, MAX_ID_BYTES, missing)?;
    Ok(id)
}

fn url_invalid(message: impl Into<String>) -> ApiError {
    ApiError::field("url_invalid", "url", message)
}

/// The `url` field, checked: a string of at most 2048 characters, an absolute `https` URL (`http` too under
/// `allow_private_webhook_urls`) with a host and without credentials or fragment, whose host is public unless
/// private addresses are allowed (`url_not_allowed`).
async fn checked_url(v: &Value, state: &ApiState) -> Result<String, ApiError> {
    let Value::String(raw) = v else {
        return Err(url_invalid("url must be a string"));
    };
    if raw.chars().take(MAX_URL_CHARS + 1).count() > MAX_URL_CHARS {
        return Err(url_invalid(format!(
            "url must be at most {MAX_URL_CHARS} characters"
        )));
    }
    input::line("url", raw, MAX_URL_CHARS)?;
    let url = url::Url::parse(raw).map_err(|_| url_invalid("url must be an absolute URL"))?;
    let allow_private = state.allow_private_webhook_urls;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => {
            return Err(url_invalid(if allow_private {
                "url must be http or https"
            } else {
                "url must be https"
            }))
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(url_invalid("url must not carry credentials"));
    }
    if url.fragment().is_some() {
        return Err(url_invalid("url must not have a fragment"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(url_invalid("url must have a host"));
    }
    if url.as_str().len() > MAX_URL_CHARS {
        // The parsed form (percent-encoded) is what is stored.
        return Err(url_invalid(format!(
            "url must be at most {MAX_URL_CHARS} characters once encoded"
        )));
    }
    if !allow_private {
        not_private(&url, &SystemLookups).await?;
    }
    Ok(url.to_string())
}

/// The address policy at creation: a literal address is judged, a name resolved and judged on every address.
async fn not_private(url: &url::Url, lookups: &dyn Lookups) -> Result<(), ApiError> {
    let refused = |why: &str| {
        ApiError::field(
            "url_not_allowed",
            "url",
            format!("url cannot receive webhooks: {why}"),
        )
    };
    address::check_url_host(url).map_err(refused)?;
    if let Some(url::Host::Domain(name)) = url.host() {
        let resolved =
            tokio::time::timeout(RESOLVE_TIMEOUT, address::resolve_checked(lookups, name))
                .await
                .map_err(|_| refused("the host name did not resolve in time"))?;
        resolved.map_err(refused)?;
    }
    Ok(())
}

/// `enabled_events`: 1 to 32 known types or `"*"`, duplicates dropped.
fn enabled_events(v: &Value) -> Result<Vec<String>, ApiError> {
    let invalid =
        |message: String| ApiError::field("enabled_events_invalid", "enabled_events", message);
    let Value::Array(items) = v else {
        return Err(invalid(
            "enabled_events must be an array of event types".into(),
        ));
    };
    if items.is_empty() || items.len() > MAX_ENABLED_EVENTS {
        return Err(invalid(format!(
            "enabled_events must hold 1 to {MAX_ENABLED_EVENTS} event types"
        )));
    }
    let mut events: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let known = item
            .as_str()
            .filter(|s| *s == "*" || EventType::parse(s).is_some())
            .ok_or_else(|| {
                let all: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                invalid(format!(
                    "unknown event type; accepted: \"*\", {}",
                    all.join(", ")
                ))
            })?;
        if !events.iter().any(|e| e == known) {
            events.push(known.to_owned());
        }
    }
    Ok(events)
}

/// `description`: absent = `None`; null = `Some(None)` (cleared); else at most 1000 characters on one line.
fn description(m: &Map<String, Value>) -> Result<Option<Option<String>>, ApiError> {
    match m.get("description") {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) => {
            if s.chars().take(MAX_DESCRIPTION_CHARS + 1).count() > MAX_DESCRIPTION_CHARS {
                return Err(ApiError::field(
                    "description_invalid",
                    "description",
                    format!("description must be at most {MAX_DESCRIPTION_CHARS} characters"),
                ));
            }
            Ok(Some(Some(
                input::line("description", s, MAX_DESCRIPTION_CHARS)?.to_owned(),
            )))
        }
        Some(_) => Err(ApiError::field(
            "description_invalid",
            "description",
            "description must be a string",
        )),
    }
}

/// `limit` (1..=100, default 10) and `starting_after` (an id), nothing else, each at most once: the intents
/// list's own checks ([`super::list::each_param`], [`super::list::page_limit`], [`super::list::cursor`]).
fn page_query(query: &str) -> Result<(i64, Option<String>), ApiError> {
    let mut limit = DEFAULT_LIMIT;
    let mut after = None;
    list::each_param(query, &["limit", "starting_after"], |param, value| {
        match param {
            "limit" => limit = list::page_limit(&value, MAX_LIST_LIMIT)?,
            _ => after = Some(list::cursor(param, &value, "no such object")?),
        }
        Ok(())
    })?;
    Ok((limit, after))
}

// --- output ----------------------------------------------------------------------------------------------------

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // The thread's generator is a CSPRNG seeded from the OS (rand's ThreadRng).
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

/// A Standard Webhooks secret: `whsec_` + base64 of 32 random bytes.
fn new_secret() -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(random::<SECRET_BYTES>())
    )
}

/// A page of `GET /v1/webhook_endpoints` (the OpenAPI schema `WebhookEndpointList`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = WebhookEndpointList)]
pub(crate) struct EndpointList {
    /// Always `list`.
    #[schema(value_type = String, example = "list")]
    object: &'static str,
    /// Always `/v1/webhook_endpoints`.
    #[schema(value_type = String)]
    url: &'static str,
    /// The page, newest first.
    data: Vec<EndpointObject>,
    /// Whether more follow (ask again with `starting_after` = the last id).
    has_more: bool,
}

/// The answer to `DELETE /v1/webhook_endpoints/{id}` (the OpenAPI schema `DeletedWebhookEndpoint`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = DeletedWebhookEndpoint)]
pub(crate) struct DeletedEndpoint {
    /// The endpoint's id.
    id: String,
    /// Always `webhook_endpoint`.
    #[schema(value_type = String)]
    object: &'static str,
    /// Always true.
    deleted: bool,
}

/// One fact's delivery to an endpoint (the OpenAPI schema `WebhookDelivery`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = WebhookDelivery)]
pub(crate) struct DeliveryObject {
    /// Always `webhook_delivery`.
    #[schema(value_type = String)]
    object: &'static str,
    /// The fact's id (its `webhook-id`).
    event: String,
    /// The fact's type.
    event_type: String,
    /// `pending` (to be tried, or retried at `next_attempt_at`), `delivered`, `dead` (retries exhausted).
    #[schema(value_type = DeliveryStatus)]
    status: String,
    /// Attempts so far.
    attempts: i32,
    /// The endpoint's last HTTP status.
    last_http_status: Option<i16>,
    /// The last attempt's error (a timeout, a refused connection, an address not allowed).
    last_error: Option<String>,
    /// When the next attempt is due (Unix seconds), while pending.
    next_attempt_at: Option<i64>,
    /// When it was delivered (Unix seconds).
    delivered_at: Option<i64>,
    /// When it was queued (Unix seconds).
    created: i64,
}

/// A delivery's status (the OpenAPI schema `DeliveryStatus`).
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // a schema: the status is the table's text
pub(crate) enum DeliveryStatus {
    /// To be tried.
    Pending,
    /// Answered 2xx.
    Delivered,
    /// Its retries are exhausted (an operator's `hookline events redeliver`, or a resend, queues it again).
    Dead,
}

fn delivery_object(d: &EndpointDelivery) -> DeliveryObject {
    DeliveryObject {
        object: "webhook_delivery",
        event: d.event_id.clone(),
        event_type: d.event_type.clone(),
        status: d.status.clone(),
        attempts: d.attempts,
        last_http_status: d.last_status,
        last_error: d.last_error.clone(),
        next_attempt_at: d.next_attempt_at.map(unix),
        delivered_at: d.delivered_at.map(unix),
        created: unix(d.created_at),
    }
}

/// A page of `GET /v1/webhook_endpoints/{id}/deliveries` (the OpenAPI schema `WebhookDeliveryList`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = WebhookDeliveryList)]
pub(crate) struct DeliveryList {
    /// Always `list`.
    #[schema(value_type = String)]
    object: &'static str,
    /// This list's path.
    url: String,
    /// The page, newest fact first.
    data: Vec<DeliveryObject>,
    /// Whether more follow.
    has_more: bool,
}

/// The answer to `POST /v1/events/{id}/resend` (the OpenAPI schema `EventResend`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = EventResend)]
pub(crate) struct ResendObject {
    /// Always `event_resend`.
    #[schema(value_type = String)]
    object: &'static str,
    /// The fact (`webhook-id` of the resend).
    event: String,
    /// The endpoint it goes to.
    endpoint: String,
    /// Always `pending`: queued for the delivery loop.
    #[schema(value_type = String)]
    status: &'static str,
}

// --- request bodies, as the OpenAPI document describes them (the handlers read the JSON field by field) --------

/// The body of `POST /v1/webhook_endpoints`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateWebhookEndpoint, example = json!({
    "url": "https://shop.example/hooks/hookline",
    "enabled_events": ["payment_intent.succeeded", "payment_intent.failed", "refund.applied"],
    "description": "order service"
}))]
#[allow(dead_code)] // a schema (serde only for its container attributes)
pub(crate) struct CreateEndpointBody {
    /// `https` (`http` too under `[api] allow_private_webhook_urls`), without credentials or fragment; its host
    /// must be public (no loopback, private, link-local, metadata, multicast address), unless that setting.
    #[schema(min_length = 1, max_length = 2048)]
    url: String,
    /// Fact types (or `*`), 1 to 32.
    #[schema(min_items = 1, max_items = 32)]
    enabled_events: Vec<EnabledEvent>,
    /// The merchant's note.
    #[schema(max_length = 1000)]
    description: Option<String>,
}

/// The body of `POST /v1/webhook_endpoints/{id}`: any of its fields.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UpdateWebhookEndpoint)]
#[allow(dead_code)] // a schema (serde only for its container attributes)
pub(crate) struct UpdateEndpointBody {
    /// As on create.
    #[schema(min_length = 1, max_length = 2048)]
    url: Option<String>,
    /// As on create.
    #[schema(min_items = 1, max_items = 32)]
    enabled_events: Option<Vec<EnabledEvent>>,
    /// null clears it.
    #[schema(max_length = 1000)]
    description: Option<String>,
    /// `true` stops deliveries (they wait); `false` resumes them (also after a 410).
    disabled: Option<bool>,
}

/// The optional body of `POST /v1/webhook_endpoints/{id}/rotate_secret`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RotateWebhookEndpointSecret)]
#[allow(dead_code)] // a schema (serde only for its container attributes)
pub(crate) struct RotateBody {
    /// How long the old secret keeps signing as a second signature (default a day, at most 7 days; 0: stops now).
    #[schema(minimum = 0, maximum = 604_800)]
    expires_in_secs: Option<i64>,
}

/// The body of `POST /v1/events/{id}/resend`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ResendEvent)]
#[allow(dead_code)] // a schema (serde only for its container attributes)
pub(crate) struct ResendBody {
    /// The endpoint (`we_…`) to send the fact to again.
    #[schema(min_length = 1, max_length = 64)]
    endpoint: String,
}

/// A fact type an endpoint takes, or `*` (the schema `EnabledEvent`; Serialize only to sit in the schema structs).
#[derive(serde::Serialize)]
pub(crate) struct EnabledEvent;

impl utoipa::PartialSchema for EnabledEvent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(
                EventType::ALL
                    .iter()
                    .map(|t| t.as_str())
                    .chain(std::iter::once("*")),
            ))
            .into()
    }
}

impl utoipa::ToSchema for EnabledEvent {}

/// The endpoint's path id.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // a schema: the handlers read the path themselves
pub(crate) struct EndpointId {
    /// The endpoint's id (`we_…`).
    #[param(pattern = "^we_[0-9a-f]{32}$")]
    id: String,
}

/// `limit` and `starting_after` of the endpoints' lists.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // a schema: the handlers read the query themselves
pub(crate) struct PageQuery {
    /// Page size, 1 to 100 (default 10).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
    /// The id after which the page starts (an endpoint's, or for deliveries a fact's).
    #[param(max_length = 64)]
    starting_after: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn code(r: Result<impl std::fmt::Debug, ApiError>) -> (&'static str, String) {
        match r {
            Err(ApiError::InvalidField { code, param, .. }) => (code, param),
            Err(ApiError::InvalidInput(e)) => (e.code(), e.field().to_owned()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn enabled_events_are_known_types_or_star_bounded_and_deduplicated() {
        assert_eq!(
            enabled_events(&json!(["payment.succeeded", "*", "payment.succeeded"])).unwrap(),
            vec!["payment.succeeded".to_string(), "*".to_string()]
        );
        for bad in [
            json!([]),
            json!("payment.succeeded"),
            json!(["payment.paid"]),
            json!([1]),
            json!(vec!["*"; 33]),
        ] {
            assert_eq!(
                code(enabled_events(&bad)),
                ("enabled_events_invalid", "enabled_events".into()),
                "{bad}"
            );
        }
    }

    #[test]
    fn paging_parameters_are_bounded_and_named() {
        assert_eq!(page_query("").unwrap(), (DEFAULT_LIMIT, None));
        assert_eq!(
            page_query("limit=3&starting_after=we_1").unwrap(),
            (3, Some("we_1".into()))
        );
        assert_eq!(
            code(page_query("limit=0")),
            ("limit_invalid", "limit".into())
        );
        assert_eq!(
            code(page_query("limit=101")),
            ("limit_invalid", "limit".into())
        );
        assert_eq!(
            code(page_query("limit=1&limit=2")),
            ("duplicate_parameter", "limit".into())
        );
        assert_eq!(
            code(page_query("offset=1")),
            ("unknown_parameter", "offset".into())
        );
        assert_eq!(code(page_query("starting_after=a%00b")).0, "invalid_text");
    }

    #[test]
    fn secrets_are_standard_webhooks_secrets_and_differ() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        let raw = base64::engine::general_purpose::STANDARD
            .decode(a.strip_prefix("whsec_").unwrap())
            .unwrap();
        assert_eq!(raw.len(), SECRET_BYTES);
    }
}
