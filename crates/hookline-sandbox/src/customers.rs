//! The paths both providers serve — `POST /v1/customers` and `GET /v1/customers/{id}` are Stripe's customers
//! and Mercado Pago's — sent to the provider each request is for ([`auth::scheme_of`]: its API key, else the
//! only scheme configured, else its shape). Every other path belongs to one provider's own routes.

use actix_web::{web, HttpRequest, HttpResponse};

use crate::auth;
use crate::mercadopago;
use crate::settings::Scheme;
use crate::state::Shared;
use crate::stripe;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/customers", web::post().to(create))
        .route("/v1/customers/{id}", web::get().to(get));
}

/// The scheme of the provider a request to a shared path is for.
fn scheme(req: &HttpRequest, shared: &Shared) -> Scheme {
    let state = shared.lock();
    auth::scheme_of(&state, req.path(), req.headers()).unwrap_or(Scheme::Stripe)
}

async fn create(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    match scheme(&req, &shared) {
        Scheme::MercadoPago => mercadopago::customers::create(req, body, shared).await,
        Scheme::Stripe => stripe::create_customer(req, body, shared).await,
    }
}

async fn get(req: HttpRequest, id: web::Path<String>, shared: web::Data<Shared>) -> HttpResponse {
    let id = id.into_inner();
    match scheme(&req, &shared) {
        Scheme::MercadoPago => mercadopago::customers::get(req, id, shared).await,
        Scheme::Stripe => stripe::get_customer(&req, &id, &shared),
    }
}
