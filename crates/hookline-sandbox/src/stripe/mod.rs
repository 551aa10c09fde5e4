//! Stripe's API subset, served at Stripe's own paths (`/v1/payment_intents`, `/v1/refunds`, `/v1/charges/{id}`,
//! `/v1/events`), form-encoded requests, JSON answers, Stripe's error envelope and idempotency semantics.

pub(crate) mod book;
pub(crate) mod errors;
pub(crate) mod form;
pub(crate) mod ops;

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
    cfg.route(
        "/v1/payment_intents",
        post_route(ops::validate_create_intent),
    )
    .route("/v1/payment_intents/{id}", get_one(Object::PaymentIntent))
    .route(
        "/v1/payment_intents/{id}/confirm",
        web::post().to(confirm_intent),
    )
    .route("/v1/refunds", post_route(ops::validate_refund))
    .route("/v1/refunds/{id}", get_one(Object::Refund))
    .route("/v1/charges/{id}", get_one(Object::Charge))
    .route("/v1/events", web::get().to(list_events))
    .route("/v1/events/{id}", get_one(Object::Event));
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
fn decorate(reply: Reply, request_id: &str, key: Option<&str>) -> HttpResponse {
    let mut reply = reply
        .header("Request-Id", request_id)
        .header("Stripe-Version", API_VERSION);
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
    let p = match provider {
        Ok(p) => p,
        Err(e) => return decorate(e.reply(), &request_id, None),
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
        return decorate(e.reply(), &request_id, None);
    }
    let form = Form::parse(&body);
    // Validation happens before execution: a request with invalid parameters saves nothing under its key.
    let request = match validate(&form) {
        Ok(r) => r,
        Err(e) => return decorate(e.reply(), &request_id, key.as_deref()),
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
        Run::Executed(reply) => decorate(reply, &request_id, key.as_deref()),
        Run::Replayed(saved) => {
            let reply = Reply {
                status: saved.status,
                body: saved.body,
                headers: vec![
                    ("Idempotent-Replayed", "true".to_owned()),
                    ("Original-Request", saved.request_id),
                ],
            };
            decorate(reply, &request_id, key.as_deref())
        }
        Run::InFlight => decorate(
            errors::idempotency_in_flight(key_text).reply(),
            &request_id,
            key.as_deref(),
        ),
        Run::Mismatch => decorate(
            errors::idempotency_mismatch(key_text).reply(),
            &request_id,
            key.as_deref(),
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

async fn confirm_intent(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let id = id.into_inner();
    post(req, body, shared, move |form| {
        ops::validate_confirm(&id, form)
    })
    .await
}

/// A GET: authenticate, then answer from the state.
fn get(
    req: &HttpRequest,
    shared: &Shared,
    answer: impl FnOnce(&State, usize) -> Result<Value, StripeError>,
) -> HttpResponse {
    let mut state = shared.lock();
    let request_id = state.rng.id("req", 14);
    let reply = match authenticate(req, &state).and_then(|p| answer(&state, p)) {
        Ok(body) => Reply::json(200, &body),
        Err(e) => e.reply(),
    };
    drop(state);
    decorate(reply, &request_id, None)
}

/// The objects read one by one at `GET /v1/{collection}/{id}`.
#[derive(Debug, Clone, Copy)]
enum Object {
    PaymentIntent,
    Refund,
    Charge,
    Event,
}

impl Object {
    /// The object's JSON, if the provider's book holds it.
    fn find(self, book: &StripeBook, id: &str) -> Option<Value> {
        match self {
            Object::PaymentIntent => book.intents.get(id).map(book::PaymentIntent::json),
            Object::Refund => book.refunds.get(id).map(book::Refund::json),
            Object::Charge => book.charges.get(id).map(book::Charge::json),
            Object::Event => book.event(id).map(Event::json),
        }
    }

    /// Stripe's 404 `resource_missing` for it (the `param` Stripe names differs for payment intents).
    fn missing(self, id: &str) -> StripeError {
        let (object, param) = match self {
            Object::PaymentIntent => ("payment_intent", "intent"),
            Object::Refund => ("refund", "id"),
            Object::Charge => ("charge", "id"),
            Object::Event => ("event", "id"),
        };
        errors::missing(object, id, param)
    }
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
