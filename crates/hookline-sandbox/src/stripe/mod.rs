//! Stripe's API subset, served at Stripe's own paths (`/v1/payment_intents`, `/v1/refunds`, `/v1/charges/{id}`,
//! `/v1/events`), form-encoded requests, JSON answers, Stripe's error envelope and idempotency semantics.

pub(crate) mod book;
pub(crate) mod confirm;
mod emit;
pub(crate) mod errors;
pub(crate) mod form;
mod list;
pub(crate) mod ops;
mod request;
mod validate;

use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse, Route};
use serde_json::{json, Value};

use crate::api::{self, Run};
use crate::auth::{self, AuthFailure};
use crate::reply::Reply;
use crate::settings::Scheme;
use crate::state::{Shared, State};
use book::{Event, StripeBook, API_VERSION};
use errors::StripeError;
use form::Form;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    // `/search` before `/{id}`: actix matches resources in registration order.
    cfg.service(
        web::resource("/v1/payment_intents")
            .route(post_route(ops::validate_create_intent))
            .route(web::get().to(list::list_intents)),
    )
    .route(
        "/v1/payment_intents/search",
        web::get().to(list::search_intents),
    )
    .route("/v1/payment_intents/{id}", get_one(Object::PaymentIntent))
    .route(
        "/v1/payment_intents/{id}/confirm",
        post_on(ops::validate_confirm),
    )
    .route(
        "/v1/payment_intents/{id}/cancel",
        post_on(ops::validate_cancel),
    )
    .route(
        "/v1/payment_intents/{id}/capture",
        post_on(ops::validate_capture),
    )
    .service(
        web::resource("/v1/refunds")
            .route(post_route(ops::validate_refund))
            .route(web::get().to(list::list_refunds)),
    )
    .route("/v1/refunds/{id}", get_one(Object::Refund))
    .route("/v1/charges/{id}", get_one(Object::Charge))
    // `/v1/customers` and `/v1/customers/{id}` are shared with Mercado Pago: routed by the crate's
    // `customers` module to `create_customer` / `get_customer`.
    .route("/v1/payment_methods/{id}", get_one(Object::PaymentMethod))
    .route(
        "/v1/payment_methods/{id}/attach",
        post_on(ops::validate_attach),
    )
    .route("/v1/events", web::get().to(list_events))
    .route("/v1/events/{id}", get_one(Object::Event));
}

/// Longest `Stripe-Version` accepted: a date and a release name (`2026-10-28.endive`) fit many times over.
const MAX_VERSION_LEN: usize = 64;

/// The API version a request asks for with `Stripe-Version`, answered back in the same header, as Stripe does
/// (<https://docs.stripe.com/api/versioning>): `YYYY-MM-DD`, optionally followed by `.releasename`; the
/// sandbox's default ([`API_VERSION`]) when absent. Anything else is Stripe's 400 `Invalid Stripe API version: …`.
/// The payloads do not change with the version (they follow [`API_VERSION`]).
pub(crate) fn api_version(req: &HttpRequest) -> Result<String, StripeError> {
    let Some(value) = req.headers().get("stripe-version") else {
        return Ok(API_VERSION.to_owned());
    };
    let text = value.to_str().unwrap_or("").trim();
    if valid_version(text) {
        return Ok(text.to_owned());
    }
    let shown: String = text.chars().take(MAX_VERSION_LEN).collect();
    Err(errors::invalid_uncoded(
        format!("Invalid Stripe API version: {shown}"),
        None,
    ))
}

fn valid_version(text: &str) -> bool {
    if text.len() > MAX_VERSION_LEN {
        return false;
    }
    let (date, name) = match text.split_once('.') {
        Some((d, n)) => (d, Some(n)),
        None => (text, None),
    };
    let parts: Vec<&str> = date.split('-').collect();
    let date_ok = matches!(parts.as_slice(), [y, m, d]
        if y.len() == 4 && m.len() == 2 && d.len() == 2
            && [y, m, d].iter().all(|p| p.bytes().all(|b| b.is_ascii_digit()))
            && (1..=12).contains(&m.parse::<u8>().unwrap_or(0))
            && (1..=31).contains(&d.parse::<u8>().unwrap_or(0)));
    let name_ok = name
        .is_none_or(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
    date_ok && name_ok
}

/// The provider a request is for, or Stripe's 401.
fn authenticate(req: &HttpRequest, state: &State) -> Result<usize, StripeError> {
    let credential = auth::credential(req.headers());
    auth::resolve(state, Scheme::Stripe, credential.as_deref()).map_err(|failure| match failure {
        AuthFailure::NotConfigured => errors::unrecognized_url(req.method().as_str(), req.path()),
        AuthFailure::Missing => errors::unauthorized(None),
        AuthFailure::Invalid(key) => errors::unauthorized(Some(&key)),
    })
}

/// Stripe's response headers.
fn decorate(reply: Reply, request_id: &str, key: Option<&str>, version: &str) -> HttpResponse {
    let mut reply = reply
        .header("Request-Id", request_id)
        .header("Stripe-Version", version);
    if let Some(key) = key {
        reply = reply.header("Idempotency-Key", key);
    }
    reply.into_response()
}

async fn post(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
    validate: impl FnOnce(&Form) -> Result<ops::Request, StripeError>,
) -> HttpResponse {
    let shared: Arc<Shared> = shared.into_inner();
    let (request_id, provider) = {
        let mut state = shared.lock();
        (state.rng.id("req", 14), authenticate(&req, &state))
    };
    let version = match api_version(&req) {
        Ok(v) => v,
        Err(e) => return decorate(e.reply(), &request_id, None, API_VERSION),
    };
    let p = match provider {
        Ok(p) => p,
        Err(e) => return decorate(e.reply(), &request_id, None, &version),
    };
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned);
    if key.as_ref().is_some_and(|k| k.len() > 255) {
        let e = errors::invalid_uncoded(
            "Idempotency keys must be at most 255 characters long.",
            None,
        );
        return decorate(e.reply(), &request_id, None, &version);
    }
    let form = Form::parse(&body);
    // Validation happens before execution: a request with invalid parameters saves nothing under its key.
    let request = match validate(&form) {
        Ok(r) => r,
        Err(e) => return decorate(e.reply(), &request_id, key.as_deref(), &version),
    };
    let fingerprint = format!("{} {}?{}", req.method(), req.path(), form.canonical());
    let edge_url = shared.edge_url.clone();
    let ctx = ops::Ctx {
        request_id: request_id.clone(),
        idempotency_key: key.clone(),
    };
    let run = api::run(
        &shared,
        p,
        key.as_deref(),
        &fingerprint,
        &request_id,
        move |state| ops::execute(state, &edge_url, p, request, &ctx),
    )
    .await;
    let key_text = key.as_deref().unwrap_or_default();
    match run {
        Run::Executed(reply) => decorate(reply, &request_id, key.as_deref(), &version),
        Run::Replayed(saved) => {
            let reply = Reply {
                status: saved.status,
                body: saved.body,
                headers: vec![
                    ("Idempotent-Replayed", "true".to_owned()),
                    ("Original-Request", saved.request_id),
                ],
            };
            decorate(reply, &request_id, key.as_deref(), &version)
        }
        Run::InFlight => decorate(
            errors::idempotency_in_flight(key_text).reply(),
            &request_id,
            key.as_deref(),
            &version,
        ),
        Run::Mismatch => decorate(
            errors::idempotency_mismatch(key_text).reply(),
            &request_id,
            key.as_deref(),
            &version,
        ),
    }
}

/// The route of a POST to a collection, whose parameters `validate` turns into a request.
fn post_route(validate: fn(&Form) -> Result<ops::Request, StripeError>) -> Route {
    web::post().to(
        move |req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>| {
            post(req, body, shared, validate)
        },
    )
}

/// The route of a POST to one object (`/v1/payment_intents/{id}/confirm`), whose id and parameters `validate`
/// turns into a request.
fn post_on(validate: fn(&str, &Form) -> Result<ops::Request, StripeError>) -> Route {
    web::post().to(
        move |req: HttpRequest,
              id: web::Path<String>,
              body: web::Bytes,
              shared: web::Data<Shared>| {
            let id = id.into_inner();
            async move { post(req, body, shared, move |form| validate(&id, form)).await }
        },
    )
}

/// A GET: authenticate, then answer from the state.
pub(crate) fn get(
    req: &HttpRequest,
    shared: &Shared,
    answer: impl FnOnce(&State, usize) -> Result<Value, StripeError>,
) -> HttpResponse {
    let mut state = shared.lock();
    let request_id = state.rng.id("req", 14);
    let (version, checked) = match api_version(req) {
        Ok(v) => (v, Ok(())),
        Err(e) => (API_VERSION.to_owned(), Err(e)),
    };
    let provider = checked.and_then(|()| authenticate(req, &state));
    // An authorization that expired is canceled before anything is read (its event queued).
    let mut expired = false;
    if let Ok(p) = provider {
        let before = state.providers[p].stripe.events.len();
        ops::expire_authorizations(&mut state, &shared.edge_url, p);
        expired = state.providers[p].stripe.events.len() != before;
    }
    let reply = match provider.and_then(|p| answer(&state, p)) {
        Ok(body) => Reply::json(200, &body),
        Err(e) => e.reply(),
    };
    drop(state);
    if expired {
        shared.wake.notify_one();
    }
    decorate(reply, &request_id, None, &version)
}

/// The objects read one by one at `GET /v1/{collection}/{id}`.
#[derive(Debug, Clone, Copy)]
enum Object {
    PaymentIntent,
    Refund,
    Charge,
    Event,
    Customer,
    PaymentMethod,
}

impl Object {
    /// The object's JSON, if the provider's book holds it.
    fn find(self, book: &StripeBook, id: &str) -> Option<Value> {
        match self {
            Object::PaymentIntent => book.intents.get(id).map(book::PaymentIntent::json),
            Object::Refund => book.refunds.get(id).map(book::Refund::json),
            Object::Charge => book.charges.get(id).map(book::Charge::json),
            Object::Event => book.event(id).map(Event::json),
            Object::Customer => book.customers.get(id).map(book::Customer::json),
            // A test id exists implicitly, as at Stripe (each read shows it unattached).
            Object::PaymentMethod => book
                .payment_methods
                .get(id)
                .map(book::PaymentMethod::json)
                .or_else(|| {
                    book::test_card(id).map(|card| book::payment_method_json(id, &card, None, 0))
                }),
        }
    }

    /// Stripe's 404 `resource_missing` for it (the `param` Stripe names differs for payment intents).
    fn missing(self, id: &str) -> StripeError {
        let (object, param) = match self {
            Object::PaymentIntent => ("payment_intent", "intent"),
            Object::Refund => ("refund", "id"),
            Object::Charge => ("charge", "id"),
            Object::Event => ("event", "id"),
            Object::Customer => ("customer", "id"),
            Object::PaymentMethod => ("PaymentMethod", "payment_method"),
        };
        errors::missing(object, id, param)
    }
}

/// `POST /v1/customers` (Stripe's).
pub(crate) async fn create_customer(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    post(req, body, shared, ops::validate_customer).await
}

/// `GET /v1/customers/{id}` (Stripe's).
pub(crate) fn get_customer(req: &HttpRequest, id: &str, shared: &Shared) -> HttpResponse {
    let object = Object::Customer;
    get(req, shared, |state, p| {
        object
            .find(&state.providers[p].stripe, id)
            .ok_or_else(|| object.missing(id))
    })
}

/// The route of `GET /v1/{collection}/{id}` for one kind of object.
fn get_one(object: Object) -> Route {
    web::get().to(
        move |req: HttpRequest, id: web::Path<String>, shared: web::Data<Shared>| async move {
            get(&req, &shared, |state, p| {
                object
                    .find(&state.providers[p].stripe, &id)
                    .ok_or_else(|| object.missing(&id))
            })
        },
    )
}

/// The filters of `GET /v1/events`.
struct EventFilter {
    types: Vec<String>,
    created: [Option<i64>; 5], // eq, gt, gte, lt, lte
    delivery_success: Option<bool>,
}

impl EventFilter {
    fn parse(form: &Form) -> Result<EventFilter, StripeError> {
        let mut types: Vec<String> = form
            .get("type")
            .map(|t| vec![t.to_owned()])
            .unwrap_or_default();
        let mut i = 0;
        while let Some(t) = form.get(&format!("types[{i}]")) {
            types.push(t.to_owned());
            i += 1;
        }
        if let Some(t) = form.get("types[]") {
            types.push(t.to_owned());
        }
        Ok(EventFilter {
            types,
            created: [
                form.timestamp("created")?,
                form.timestamp("created[gt]")?,
                form.timestamp("created[gte]")?,
                form.timestamp("created[lt]")?,
                form.timestamp("created[lte]")?,
            ],
            delivery_success: form.boolean("delivery_success")?,
        })
    }

    fn matches(&self, e: &Event) -> bool {
        let type_ok = self.types.is_empty()
            || self.types.iter().any(|t| match t.strip_suffix('*') {
                Some(prefix) => e.kind.starts_with(prefix),
                None => e.kind == *t,
            });
        let [eq, gt, gte, lt, lte] = self.created;
        let c = e.created;
        type_ok
            && eq.is_none_or(|v| c == v)
            && gt.is_none_or(|v| c > v)
            && gte.is_none_or(|v| c >= v)
            && lt.is_none_or(|v| c < v)
            && lte.is_none_or(|v| c <= v)
            && self.delivery_success.is_none_or(|d| e.delivered == d)
    }
}

fn list_page(state: &State, p: usize, form: &Form) -> Result<Value, StripeError> {
    form.check_known(&[
        "created",
        "delivery_success",
        "ending_before",
        "expand",
        "limit",
        "starting_after",
        "type",
        "types",
    ])?;
    let limit = match form.get("limit") {
        None => 10,
        Some(text) => match text.trim().parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) => n,
            _ => {
                return Err(errors::invalid_uncoded(
                    format!("Invalid limit: must be between 1 and 100 (it is '{text}')"),
                    Some("limit"),
                ))
            }
        },
    };
    let filter = EventFilter::parse(form)?;
    let book = &state.providers[p].stripe;
    let cursor = |name: &str| -> Result<Option<usize>, StripeError> {
        match form.get(name) {
            None => Ok(None),
            Some(id) => book
                .event_position(id)
                .map(Some)
                .ok_or_else(|| StripeError {
                    status: 400,
                    ..errors::missing("event", id, name)
                }),
        }
    };
    let starting_after = cursor("starting_after")?;
    let ending_before = cursor("ending_before")?;
    let indexed = book.events.iter().enumerate();
    let (page, has_more): (Vec<&Event>, bool) = match (starting_after, ending_before) {
        (_, Some(before)) => {
            // The page just newer than the cursor: the `limit` oldest of the newer events, shown newest first.
            let newer: Vec<&Event> = indexed
                .filter(|(i, e)| *i > before && filter.matches(e))
                .map(|(_, e)| e)
                .collect();
            let has_more = newer.len() > limit;
            let mut page: Vec<&Event> = newer.into_iter().take(limit).collect();
            page.reverse();
            (page, has_more)
        }
        (after, None) => {
            let mut older = indexed
                .rev()
                .filter(|(i, e)| after.is_none_or(|a| *i < a) && filter.matches(e))
                .map(|(_, e)| e);
            let page: Vec<&Event> = older.by_ref().take(limit).collect();
            (page, older.next().is_some())
        }
    };
    Ok(json!({
        "object": "list",
        "data": page.iter().map(|e| e.json()).collect::<Vec<_>>(),
        "has_more": has_more,
        "url": "/v1/events",
    }))
}

async fn list_events(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let form = Form::parse(req.query_string().as_bytes());
    get(&req, &shared, |state, p| list_page(state, p, &form))
}
