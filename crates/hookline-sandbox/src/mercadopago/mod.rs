//! Mercado Pago's payments API subset at its own paths (`/v1/payments`, `/v1/payments/{id}`,
//! `/v1/payments/{id}/refunds`, `/v1/payments/search`, `/v1/card_tokens`, `/v1/customers…`): JSON requests and
//! answers, Mercado Pago's error body, a required `X-Idempotency-Key` on payment creation (honoured on refunds
//! and the other creations).

pub(crate) mod book;
pub(crate) mod customers;
pub(crate) mod errors;
pub(crate) mod ops;
mod poi;
mod search;
mod tokens;

use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};

use crate::api::{self, Run};
use crate::auth;
use crate::reply::Reply;
use crate::settings::Scheme;
use crate::state::{Shared, State};
use book::MpPayment;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/payments").route(web::post().to(create_payment)))
        .service(web::resource("/v1/payments/search").route(web::get().to(search)))
        .service(
            web::resource("/v1/payments/{id}")
                .route(web::get().to(get_payment))
                .route(web::put().to(update_payment)),
        )
        .service(
            web::resource("/v1/payments/{id}/refunds")
                .route(web::post().to(create_refund))
                .route(web::get().to(list_refunds)),
        )
        .service(
            web::resource("/v1/payments/{id}/refunds/{refund_id}").route(web::get().to(get_refund)),
        )
        .service(web::resource("/v1/card_tokens").route(web::post().to(create_card_token)))
        .service(web::resource("/v1/card_tokens/{id}").route(web::get().to(get_card_token)))
        // `/v1/customers` and `/v1/customers/{id}` are shared with Stripe (the crate's `customers` module);
        // the cards are Mercado Pago's alone.
        .service(
            web::resource("/v1/customers/{id}/cards")
                .route(web::post().to(create_card))
                .route(web::get().to(customers::list_cards)),
        )
        .service(
            web::resource("/v1/customers/{id}/cards/{card_id}")
                .route(web::get().to(customers::get_card)),
        );
}

/// The provider a request is for, or Mercado Pago's 401.
fn authenticate(req: &HttpRequest, state: &State) -> Result<usize, Reply> {
    let credential = auth::credential(req.headers());
    auth::resolve(state, Scheme::MercadoPago, credential.as_deref()).map_err(
        |failure| match failure {
            auth::AuthFailure::NotConfigured => errors::route_not_found(),
            _ => errors::unauthorized(),
        },
    )
}

/// The request's `X-Idempotency-Key`, if any.
fn idempotency_key(req: &HttpRequest) -> Option<String> {
    api::idempotency_key(req, "x-idempotency-key")
}

fn answer(run: Run) -> HttpResponse {
    run.plain_answer(errors::in_flight, errors::key_already_used)
}

/// `POST /v1/customers` (Mercado Pago's; the crate's `customers` module routes `/v1/customers` by provider).
pub(crate) async fn create_customer(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    mutate(req, shared, |_| {
        customers::validate_customer(&body).map(ops::Request::CreateCustomer)
    })
    .await
}

/// `POST /v1/customers/{id}/cards` `{"token"}`.
async fn create_card(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let customer_id = id.into_inner();
    mutate(req, shared, move |_| {
        customers::validate_card(customer_id, &body)
            .map(|(customer_id, token)| ops::Request::SaveCard { customer_id, token })
    })
    .await
}

/// A mutating request: authenticate, let `validate` turn it into a request (an error answer executes nothing and
/// saves nothing), then execute that under the request's `X-Idempotency-Key`, if any.
pub(super) async fn mutate(
    req: HttpRequest,
    shared: web::Data<Shared>,
    validate: impl FnOnce(Option<&str>) -> Result<ops::Request, Reply>,
) -> HttpResponse {
    let shared: Arc<Shared> = shared.into_inner();
    let p = match authenticate(&req, &shared.lock()) {
        Ok(p) => p,
        Err(reply) => return reply.into_response(),
    };
    let key = idempotency_key(&req);
    let request = match validate(key.as_deref()) {
        Ok(request) => request,
        Err(reply) => return reply.into_response(),
    };
    let edge_url = shared.edge_url.clone();
    let op_key = key.clone();
    // Keys are scoped to the endpoint: the body is not compared (a retry replays whatever it carries).
    let endpoint = format!("{} {}", req.method(), req.path());
    let run = api::run(&shared, p, key.as_deref(), &endpoint, "", move |state| {
        ops::execute(state, &edge_url, p, request, op_key.as_deref())
    })
    .await;
    answer(run)
}

async fn create_payment(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    mutate(req, shared, |key| {
        if key.is_none() {
            return Err(errors::missing_idempotency_key());
        }
        ops::validate_payment(&body).map(ops::Request::CreatePayment)
    })
    .await
}

/// `PUT /v1/payments/{id}`: capture an authorized payment or cancel an open one; `X-Idempotency-Key` honoured as
/// on the other mutating requests (a retry replays the first answer).
async fn update_payment(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    mutate(req, shared, |_| {
        let Ok(payment_id) = id.trim().parse::<u64>() else {
            return Err(errors::payment_not_found());
        };
        let update = ops::validate_update(&body)?;
        Ok(ops::Request::Update { payment_id, update })
    })
    .await
}

async fn create_refund(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    mutate(req, shared, |_| {
        let Ok(payment_id) = id.trim().parse::<u64>() else {
            return Err(errors::payment_not_found());
        };
        let (amount, metadata) = ops::validate_refund_body(&body)?;
        Ok(ops::Request::Refund {
            payment_id,
            amount,
            metadata,
        })
    })
    .await
}

/// `POST /v1/card_tokens`: no idempotency key needed (a token is a new object each time, and single use): a
/// card's number, or a saved card (`card_id`).
async fn create_card_token(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    mutate(req, shared, |_| {
        tokens::validate_token(&body).map(ops::Request::CreateCardToken)
    })
    .await
}

async fn get_card_token(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    read(&req, &shared, |state, p| {
        match state.providers[p].mp.card_tokens.get(id.as_str()) {
            Some(token) => Reply::json(200, &token.json()),
            None => errors::error(
                404,
                "not_found",
                "Card Token not found",
                &[(serde_json::json!(2006), "Card Token not found")],
            ),
        }
    })
}

/// `GET /v1/payments/{id}/refunds/{refund_id}`
/// (<https://www.mercadopago.com.br/developers/en/reference/chargebacks/_payments_id_refunds_refund_id/get>).
async fn get_refund(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let (id, refund_id) = path.into_inner();
    read(&req, &shared, |state, p| {
        let book = &state.providers[p].mp;
        let payment = id
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|id| book.payments.get(&id));
        let Some(payment) = payment else {
            return errors::payment_not_found();
        };
        let refund = refund_id
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|r| payment.refunds.iter().find(|x| x.id == r));
        match refund {
            Some(refund) => Reply::json(200, &refund.json(book.user_id)),
            None => errors::error(
                404,
                "not_found",
                "Refund not found",
                &[(serde_json::json!(2000), "Refund not found")],
            ),
        }
    })
}

pub(super) fn read(
    req: &HttpRequest,
    shared: &Shared,
    answer: impl FnOnce(&State, usize) -> Reply,
) -> HttpResponse {
    let mut state = shared.lock();
    let reply = match authenticate(req, &state) {
        Ok(p) => {
            // A reservation that expired is cancelled (and notified) before anything is read.
            ops::expire_authorizations(&mut state, &shared.edge_url, p);
            answer(&state, p)
        }
        Err(reply) => reply,
    };
    drop(state);
    shared.wake.notify_one();
    reply.into_response()
}

/// A GET of payment `id`: `answer` with the payment and the collector's user id, or 404.
fn read_payment(
    req: &HttpRequest,
    id: &str,
    shared: &Shared,
    answer: impl FnOnce(&MpPayment, u64) -> serde_json::Value,
) -> HttpResponse {
    read(req, shared, |state, p| {
        let book = &state.providers[p].mp;
        match id
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|id| book.payments.get(&id))
        {
            Some(payment) => Reply::json(200, &answer(payment, book.user_id)),
            None => errors::payment_not_found(),
        }
    })
}

async fn get_payment(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    read_payment(&req, &id, &shared, |payment, user_id| payment.json(user_id))
}

async fn list_refunds(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    read_payment(&req, &id, &shared, |payment, user_id| {
        payment.refunds.iter().map(|r| r.json(user_id)).collect()
    })
}

async fn search(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let query = req.query_string().to_owned();
    read(&req, &shared, |state, p| search::search(state, p, &query))
}
