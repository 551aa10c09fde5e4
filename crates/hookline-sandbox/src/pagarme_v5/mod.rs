//! Pagar.me's Core API v5 subset, at its own paths under `/core/v5` (<https://docs.pagar.me/reference>):
//! orders, charges (read, list, cancel = refund), customers, saved cards, card tokens. JSON in and out, amounts in
//! cents, Pagar.me's error bodies ([`errors`]).
//!
//! Authentication is HTTP Basic with the account's secret key as the user and an empty password
//! (`Authorization: Basic base64("sk_test_…:")`, <https://docs.pagar.me/reference/autenticação-2>); anything
//! else, a Bearer token included, is 401. The token endpoint is the exception, as in the real API: it takes the
//! public key as `?appId=pk_…` and no secret key. The sandbox has no separate public key: a provider's public key
//! is its secret key with `sk_` replaced by `pk_` (`sk_test_abc` → `pk_test_abc`); without an `api_token` any
//! `pk_…` is accepted.
//!
//! `Idempotency-Key` on `POST /core/v5/orders` (and honoured on every other mutating request): the first answer
//! for a key — a declined order included — is replayed for any request with that key on the same endpoint,
//! whatever its body, for 24 hours from the key's first use (the sandbox's `idempotency_window`, on the sandbox
//! clock), as <https://docs.pagar.me/docs/o-que-é> describes; then the key is forgotten and the same request
//! creates a second order. Not documented by Pagar.me, the sandbox's choice: a retry while the first request
//! still executes is 409, a key reused on another endpoint 422, and an invalid request (422) saves nothing.

pub(crate) mod book;
mod cards;
mod customers;
mod emit;
pub(crate) mod errors;
mod fields;
mod lifecycle;
mod list;
mod ops;
mod render;
pub(crate) mod settle;
mod validate;

use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::api::{self, Run};
use crate::auth::{self, AuthFailure};
use crate::reply::Reply;
use crate::settings::Scheme;
use crate::state::{Shared, State};
use ops::Request;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/core/v5/orders")
            .route(web::post().to(create_order))
            .route(web::get().to(list_orders)),
    )
    .route("/core/v5/orders/{id}", web::get().to(get_order))
    .route("/core/v5/charges", web::get().to(list_charges))
    .service(
        web::resource("/core/v5/charges/{id}")
            .route(web::get().to(get_charge))
            .route(web::delete().to(cancel_charge)),
    )
    .route(
        "/core/v5/charges/{id}/capture",
        web::post().to(capture_charge),
    )
    .route("/core/v5/customers", web::post().to(create_customer))
    .route("/core/v5/customers/{id}", web::get().to(get_customer))
    .service(
        web::resource("/core/v5/customers/{id}/cards")
            .route(web::post().to(create_card))
            .route(web::get().to(list_cards)),
    )
    .route(
        "/core/v5/customers/{id}/cards/{card_id}",
        web::get().to(get_card),
    )
    .route("/core/v5/tokens", web::post().to(create_token))
    .route("/core/v5/tokens/{id}", web::get().to(get_token));
}

/// The secret key of `Authorization: Basic base64(key:)`; Pagar.me takes no other scheme.
fn secret_key(req: &HttpRequest) -> Option<String> {
    let value = req.headers().get("authorization")?.to_str().ok()?.trim();
    let (kind, rest) = value.split_once(' ')?;
    if !kind.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(rest.trim()).ok()?).ok()?;
    let user = decoded.split(':').next().unwrap_or("");
    (!user.is_empty()).then(|| user.to_owned())
}

/// The provider a request is for, or Pagar.me's 401.
fn authenticate(req: &HttpRequest, state: &State) -> Result<usize, Reply> {
    let key = secret_key(req);
    auth::resolve(state, Scheme::PagarmeV5, key.as_deref()).map_err(|failure| match failure {
        AuthFailure::NotConfigured => errors::route_not_found(),
        AuthFailure::Missing | AuthFailure::Invalid(_) => errors::unauthorized(),
    })
}

/// The public key of a provider's secret key (`sk_test_x` → `pk_test_x`).
fn public_key_of(secret: &str) -> String {
    format!("pk_{}", secret.strip_prefix("sk_").unwrap_or(secret))
}

/// The provider whose public key is the request's `appId`, or 401.
fn authenticate_public(req: &HttpRequest, state: &State) -> Result<usize, Reply> {
    let app_id = form_urlencoded::parse(req.query_string().as_bytes())
        .find(|(k, _)| k.eq_ignore_ascii_case("appId"))
        .map(|(_, v)| v.into_owned())
        .filter(|v| v.starts_with("pk_"));
    let candidates = state
        .providers
        .iter()
        .enumerate()
        .filter(|(_, p)| p.config.scheme == Scheme::PagarmeV5);
    let mut open = None;
    for (i, p) in candidates {
        match &p.config.api_token {
            Some(secret) if app_id.as_deref() == Some(public_key_of(secret).as_str()) => {
                return Ok(i)
            }
            None => open = open.or(Some(i)),
            Some(_) => {}
        }
    }
    match (open, &app_id) {
        (Some(i), Some(_)) => Ok(i),
        _ if state
            .providers
            .iter()
            .all(|p| p.config.scheme != Scheme::PagarmeV5) =>
        {
            Err(errors::route_not_found())
        }
        _ => Err(errors::unauthorized()),
    }
}

/// The request's `Idempotency-Key`, if any.
fn idempotency_key(req: &HttpRequest) -> Option<String> {
    api::idempotency_key(req, "idempotency-key")
}

fn answer(run: Run) -> HttpResponse {
    run.plain_answer(errors::in_flight, errors::key_reused)
}

/// Who may make a mutating request: the secret key's provider, or (tokens) the public key's.
enum Access {
    Secret,
    Public,
}

/// A mutating request: authenticate, let `validate` turn it into a request at the sandbox clock's now (an error
/// answer executes nothing and saves nothing), then execute it under the request's `Idempotency-Key`, if any.
async fn mutate(
    req: HttpRequest,
    shared: web::Data<Shared>,
    access: Access,
    validate: impl FnOnce(time::OffsetDateTime) -> Result<Request, Reply>,
) -> HttpResponse {
    let shared: Arc<Shared> = shared.into_inner();
    let (p, now) = {
        let state = shared.lock();
        let p = match access {
            Access::Secret => authenticate(&req, &state),
            Access::Public => authenticate_public(&req, &state),
        };
        match p {
            Ok(p) => (p, state.clock.now()),
            Err(reply) => return reply.into_response(),
        }
    };
    let request = match validate(now) {
        Ok(request) => request,
        Err(reply) => return reply.into_response(),
    };
    let key = idempotency_key(&req);
    let edge_url = shared.edge_url.clone();
    let op_key = key.clone();
    // Keys are scoped to the endpoint; the body is not compared (Pagar.me answers a key's retries with the first
    // answer, whatever they carry).
    let endpoint = format!("{} {}", req.method(), req.path());
    let run = api::run(&shared, p, key.as_deref(), &endpoint, "", move |state| {
        ops::execute(state, &edge_url, p, request, op_key.as_deref())
    })
    .await;
    answer(run)
}

/// A read: authenticate, then `answer` under the state lock.
fn read(
    req: &HttpRequest,
    shared: &Shared,
    answer: impl FnOnce(&State, usize) -> Reply,
) -> HttpResponse {
    let mut state = shared.lock();
    let reply = match authenticate(req, &state) {
        Ok(p) => {
            // An authorization that expired is cancelled (and its webhooks queued) before anything is read.
            settle::expire_authorizations(&mut state, &shared.edge_url, p);
            answer(&state, p)
        }
        Err(reply) => reply,
    };
    drop(state);
    shared.wake.notify_one();
    reply.into_response()
}

/// The URL the paging links of a list start with: this request's scheme, host and path.
fn list_base(req: &HttpRequest) -> String {
    let info = req.connection_info();
    format!("{}://{}{}", info.scheme(), info.host(), req.path())
}

async fn create_order(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    mutate(req, shared, Access::Secret, |now| {
        validate::validate_order(&body, now).map(|order| Request::CreateOrder(Box::new(order)))
    })
    .await
}

async fn cancel_charge(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let charge_id = id.into_inner();
    mutate(req, shared, Access::Secret, move |_| {
        let amount = validate::validate_cancel(&body)?;
        Ok(Request::CancelCharge { charge_id, amount })
    })
    .await
}

/// `POST /core/v5/charges/{id}/capture` `{amount?}`: the capture of an `auth_only` charge.
async fn capture_charge(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let charge_id = id.into_inner();
    mutate(req, shared, Access::Secret, move |_| {
        let amount = validate::validate_capture(&body)?;
        Ok(Request::CaptureCharge { charge_id, amount })
    })
    .await
}

async fn create_customer(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    mutate(req, shared, Access::Secret, |_| {
        let mut errors = errors::FieldErrors::default();
        let body: serde_json::Value =
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        let new = customers::validate_customer(&body, "customer", &mut errors);
        errors.or(Request::CreateCustomer(new))
    })
    .await
}

async fn create_card(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let customer_id = id.into_inner();
    mutate(req, shared, Access::Secret, move |now| {
        let mut errors = errors::FieldErrors::default();
        let body: serde_json::Value =
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        let year_now = cards::year_month(now);
        let source = cards::validate_source(&body, "", None, year_now, &mut errors);
        match source {
            Some(source) if errors.is_empty() => Ok(Request::SaveCard {
                customer_id,
                source,
            }),
            _ => Err(errors.reply()),
        }
    })
    .await
}

async fn create_token(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    mutate(req, shared, Access::Public, |now| {
        let body: serde_json::Value =
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        cards::validate_token(&body, cards::year_month(now)).map(Request::CreateToken)
    })
    .await
}

async fn get_order(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    read(&req, &shared, |state, p| {
        let book = &state.providers[p].pagarme;
        match book.orders.get(id.as_str()) {
            Some(order) => Reply::json(200, &render::order_json(book, order)),
            None => errors::not_found("Order"),
        }
    })
}

async fn get_charge(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    read(&req, &shared, |state, p| {
        let book = &state.providers[p].pagarme;
        match book.charges.get(id.as_str()) {
            Some(charge) => Reply::json(200, &render::charge_json(book, charge)),
            None => errors::not_found("Charge"),
        }
    })
}

async fn list_orders(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let base = list_base(&req);
    read(&req, &shared, |state, p| {
        list::orders(state, p, req.query_string(), &base)
    })
}

async fn list_charges(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let base = list_base(&req);
    read(&req, &shared, |state, p| {
        list::charges(state, p, req.query_string(), &base)
    })
}

async fn get_customer(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    read(&req, &shared, |state, p| {
        match state.providers[p].pagarme.customers.get(id.as_str()) {
            Some(c) => Reply::json(200, &render::customer_json(c)),
            None => errors::not_found("Customer"),
        }
    })
}

async fn list_cards(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    read(&req, &shared, |state, p| {
        list::cards(state, p, id.as_str()).unwrap_or_else(|| errors::not_found("Customer"))
    })
}

async fn get_card(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let (customer, card_id) = path.into_inner();
    read(&req, &shared, |state, p| {
        let book = &state.providers[p].pagarme;
        match book
            .cards
            .get(&card_id)
            .filter(|c| c.customer_id == customer)
        {
            Some(card) => Reply::json(200, &render::card_json(book, card)),
            None => errors::not_found("Card"),
        }
    })
}

async fn get_token(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let state = shared.lock();
    match authenticate_public(&req, &state) {
        Ok(p) => match state.providers[p].pagarme.tokens.get(id.as_str()) {
            Some(token) => Reply::json(200, &render::token_json(token)),
            None => errors::not_found("Token"),
        },
        Err(reply) => reply,
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_keys_pair_with_secret_keys() {
        assert_eq!(public_key_of("sk_test_abc"), "pk_test_abc");
        assert_eq!(public_key_of("custom"), "pk_custom");
    }
}
