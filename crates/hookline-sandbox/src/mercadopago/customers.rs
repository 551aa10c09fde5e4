//! Mercado Pago customers and their saved cards (<https://www.mercadopago.com.br/developers/en/reference/customers/_customers/post>,
//! <https://www.mercadopago.com.br/developers/en/reference/cards/_customers_customer_id_cards/post>):
//! `POST /v1/customers {email}`, `GET /v1/customers/{id}`, `GET /v1/customers/search?email=`,
//! `POST /v1/customers/{id}/cards {token}`, `GET /v1/customers/{id}/cards[/{card_id}]`. A saved card keeps its
//! token's card — and so the test holder name that decides its payments (`APRO`, `OTHE`, `FUND`, …); a token
//! of it (`POST /v1/card_tokens {"card_id"}`, [`super::tokens`]) charges it again without its security code.
//!
//! `/v1/customers…` is also a Stripe path: the crate's `customers` module sends each request to the provider
//! it is for; these handlers serve the Mercado Pago ones.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::book::{brand, MpCard, MpCustomer};
use super::errors;
use super::ops::Request;
use crate::clock;
use crate::reply::Reply;
use crate::state::{Shared, State};

/// Most cards one customer holds (Mercado Pago's limit is not documented; the sandbox bounds it).
const MAX_CARDS: usize = 25;
/// Longest `metadata` object (serialised) kept on a customer.
const MAX_METADATA_BYTES: usize = 4096;

/// A customer to create.
pub(crate) struct NewCustomer {
    email: String,
    first_name: Option<String>,
    last_name: Option<String>,
    description: Option<String>,
    metadata: Value,
}

/// An optional text field of at most `max` characters; `code` is Mercado Pago's cause for it.
fn text(body: &Value, name: &str, max: usize, code: u32) -> Result<Option<String>, Reply> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= max => Ok(Some(s.clone())),
        Some(_) => Err(errors::bad_request(
            json!(code),
            &format!("the {name} is invalid."),
        )),
    }
}

/// `POST /v1/customers`: `email` required (400 cause 106 otherwise), `first_name`, `last_name`,
/// `description`, `metadata` (an object); the other documented fields (phone, identification, address) are
/// taken and not kept.
fn validate_customer(bytes: &[u8]) -> Result<NewCustomer, Reply> {
    let body: Value = serde_json::from_slice(bytes)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| errors::bad_request(json!(118), "the body must be a Json Object."))?;
    let email = body
        .get("email")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|e| {
            e.len() <= 256
                && e.split_once('@')
                    .is_some_and(|(user, host)| !user.is_empty() && host.contains('.'))
                && !e.chars().any(char::is_whitespace)
        })
        .ok_or_else(|| errors::bad_request(json!(106), "the email format is invalid."))?
        .to_owned();
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => json!({}),
        Some(m @ Value::Object(_)) if m.to_string().len() <= MAX_METADATA_BYTES => m.clone(),
        Some(_) => return Err(errors::bad_request(json!(117), "the metadata is invalid.")),
    };
    Ok(NewCustomer {
        email,
        first_name: text(&body, "first_name", 256, 107)?,
        last_name: text(&body, "last_name", 256, 108)?,
        description: text(&body, "description", 600, 116)?,
        metadata,
    })
}

/// Mercado Pago's 404 for a customer id it does not know.
fn customer_not_found() -> Reply {
    errors::error(
        404,
        "not_found",
        "customer not found",
        &[(json!(102), "the customer doesn't exist.")],
    )
}

/// Creates a customer: one per email, as Mercado Pago (400 cause 101 "the customer already exist." for a
/// second one; find it with `GET /v1/customers/search?email=`).
pub(crate) fn create_customer(state: &mut State, p: usize, new: NewCustomer) -> Reply {
    let suffix: String = state.rng.id("", 15).chars().skip(1).collect();
    let book = &mut state.providers[p].mp;
    if book
        .customers
        .values()
        .any(|c| c.email.eq_ignore_ascii_case(&new.email))
    {
        return errors::bad_request(json!(101), "the customer already exist.");
    }
    let id = format!("{}-{suffix}", book.user_id);
    let customer = MpCustomer {
        id: id.clone(),
        email: new.email,
        first_name: new.first_name,
        last_name: new.last_name,
        description: new.description,
        metadata: new.metadata,
        date_created: clock::now(),
        cards: Vec::new(),
    };
    let body = customer.json(&book.cards);
    book.customers.insert(id, customer);
    Reply::json(201, &body)
}

/// Saves the card of card token `token` to customer `customer_id` (`POST /v1/customers/{id}/cards`): the
/// token is used up, the card keeps its number's digits, expiry and holder. 404 for an unknown customer; 400
/// for a token that does not exist, has expired or was used, or is itself a saved card's.
pub(crate) fn save_card(state: &mut State, p: usize, customer_id: &str, token: &str) -> Reply {
    let mut card_id = state.rng.between(1_000_000_000_000, 9_999_999_999_999);
    let book = &mut state.providers[p].mp;
    while book.cards.contains_key(&card_id.to_string()) {
        card_id += 1;
    }
    let card_id = card_id.to_string();
    let Some(customer) = book.customers.get_mut(customer_id) else {
        return customer_not_found();
    };
    if customer.cards.len() >= MAX_CARDS {
        return errors::bad_request(
            json!(129),
            "the customer has reached the maximum allowed number of cards.",
        );
    }
    let now = clock::now();
    let token = match book.card_tokens.get_mut(token) {
        Some(t)
            if !t.used && t.saved.is_none() && now - t.date_created < time::Duration::days(7) =>
        {
            t
        }
        _ => return errors::bad_request(json!(122), "the card data is invalid."),
    };
    token.used = true;
    let card = MpCard {
        id: card_id.clone(),
        customer_id: customer.id.clone(),
        payment_method_id: brand(&token.first_six),
        first_six: token.first_six.clone(),
        last_four: token.last_four.clone(),
        expiration_month: token.expiration_month,
        expiration_year: token.expiration_year,
        security_code_length: token.security_code_length,
        card_number_length: token.card_number_length,
        holder_name: token.holder_name.clone(),
        holder_identification: token.holder_identification.clone(),
        date_created: now,
    };
    customer.cards.push(card_id.clone());
    let body = card.json();
    book.cards.insert(card_id, card);
    Reply::json(201, &body)
}

/// `POST /v1/customers` (Mercado Pago's).
pub(crate) async fn create(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    super::mutate(req, shared, |_| {
        validate_customer(&body).map(Request::CreateCustomer)
    })
    .await
}

/// `GET /v1/customers/{id}` (Mercado Pago's), and `GET /v1/customers/search?email=`.
pub(crate) async fn get(req: HttpRequest, id: String, shared: web::Data<Shared>) -> HttpResponse {
    let query = req.query_string().to_owned();
    super::read(&req, &shared, |state, p| {
        let book = &state.providers[p].mp;
        if id == "search" {
            return search(state, p, &query);
        }
        match book.customers.get(&id) {
            Some(customer) => Reply::json(200, &customer.json(&book.cards)),
            None => customer_not_found(),
        }
    })
}

/// `GET /v1/customers/search`: by `email` (exact), `limit` (10, at most 100) and `offset`, Mercado Pago's
/// `{"paging", "results"}`.
fn search(state: &State, p: usize, query: &str) -> Reply {
    let mut email = None;
    let (mut limit, mut offset) = (10usize, 0usize);
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "email" => email = Some(value.into_owned()),
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => limit = n,
                _ => return errors::bad_request(json!(125), "invalid parameters."),
            },
            "offset" => match value.parse::<usize>() {
                Ok(n) if n <= 10_000 => offset = n,
                _ => return errors::bad_request(json!(125), "invalid parameters."),
            },
            _ => {}
        }
    }
    let book = &state.providers[p].mp;
    let found: Vec<&MpCustomer> = book
        .customers
        .values()
        .filter(|c| {
            email
                .as_deref()
                .is_none_or(|e| c.email.eq_ignore_ascii_case(e))
        })
        .collect();
    let results: Vec<Value> = found
        .iter()
        .skip(offset)
        .take(limit)
        .map(|c| c.json(&book.cards))
        .collect();
    Reply::json(
        200,
        &json!({"paging": {"limit": limit, "offset": offset, "total": found.len()}, "results": results}),
    )
}

/// `POST /v1/customers/{id}/cards` `{"token"}`.
pub(crate) async fn create_card(
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let customer_id = id.into_inner();
    super::mutate(req, shared, move |_| {
        let body: Value = serde_json::from_slice(&body)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| errors::bad_request(json!(118), "the body must be a Json Object."))?;
        let token = body
            .get("token")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= 64)
            .ok_or_else(|| errors::bad_request(json!(119), "the card is required."))?;
        if customer_id.len() > 64 {
            return Err(customer_not_found());
        }
        Ok(Request::SaveCard {
            customer_id: customer_id.clone(),
            token: token.to_owned(),
        })
    })
    .await
}

/// `GET /v1/customers/{id}/cards`: the customer's cards, oldest first.
pub(crate) async fn list_cards(
    req: HttpRequest,
    id: web::Path<String>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    super::read(&req, &shared, |state, p| {
        let book = &state.providers[p].mp;
        match book.customers.get(id.as_str()) {
            Some(customer) => Reply::json(
                200,
                &customer
                    .cards
                    .iter()
                    .filter_map(|c| book.cards.get(c))
                    .map(MpCard::json)
                    .collect::<Value>(),
            ),
            None => customer_not_found(),
        }
    })
}

/// `GET /v1/customers/{id}/cards/{card_id}`: 404 unless the card is the customer's.
pub(crate) async fn get_card(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let (customer_id, card_id) = path.into_inner();
    super::read(&req, &shared, |state, p| {
        let book = &state.providers[p].mp;
        if !book.customers.contains_key(&customer_id) {
            return customer_not_found();
        }
        match book.cards.get(&card_id) {
            Some(card) if card.customer_id == customer_id => Reply::json(200, &card.json()),
            _ => errors::error(
                404,
                "not_found",
                "card not found",
                &[(json!(120), "card not found.")],
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn customers_need_an_email() {
        assert!(validate_customer(br#"{"email":"a@b.co","first_name":"Ana"}"#).is_ok());
        for bad in [
            r#"{}"#,
            r#"{"email":"nope"}"#,
            r#"{"email":"a@b"}"#,
            r#"{"email":"a@b.co","metadata":[1]}"#,
            r#"{"email":"a@b.co","first_name":7}"#,
            r#"[1]"#,
        ] {
            assert!(validate_customer(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
