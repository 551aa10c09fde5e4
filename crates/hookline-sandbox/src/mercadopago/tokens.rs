//! `POST /v1/card_tokens`: card tokens — what the card form makes of a card's number (the card's data never
//! reaches the merchant's server), or what a merchant makes of a card saved to a customer to charge it again
//! without its security code ("Card on File", automatic payments). Single use, 7 days.

use serde_json::{json, Value};

use super::book::{CardToken, SavedCardRef};
use super::errors;
use crate::clock;
use crate::reply::Reply;
use crate::state::State;

/// A card to tokenise (`POST /v1/card_tokens`).
pub(crate) struct NewCardToken {
    card_number: String,
    expiration_month: u64,
    expiration_year: u64,
    security_code_length: usize,
    holder_name: String,
    holder_identification: Value,
}

/// A token to make of a saved card (`{"card_id", "customer_id"?, "security_code"?}`).
pub(crate) struct NewSavedCardToken {
    card_id: String,
    customer_id: Option<String>,
    security_code_length: Option<usize>,
}

/// What `POST /v1/card_tokens` is asked to tokenise.
pub(crate) enum NewToken {
    Card(NewCardToken),
    Saved(NewSavedCardToken),
}

/// The body of `POST /v1/card_tokens`: a card's number and holder, or `card_id` (a saved card).
pub(crate) fn validate_token(bytes: &[u8]) -> Result<NewToken, Reply> {
    let body: Value = serde_json::from_slice(bytes)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| errors::bad_request(json!(1), "Params Error"))?;
    if body.get("card_id").is_some_and(|v| !v.is_null()) {
        validate_saved(&body).map(NewToken::Saved)
    } else {
        validate_card(&body).map(NewToken::Card)
    }
}

/// A security code's length: 3–4 digits, as text or number.
fn security_code(value: &Value) -> Result<usize, Reply> {
    value
        .as_str()
        .map(str::to_owned)
        .or_else(|| value.as_u64().map(|n| n.to_string()))
        .filter(|c| (3..=4).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_digit()))
        .map(|c| c.len())
        .ok_or_else(|| errors::bad_request(json!("E302"), "invalid security_code"))
}

/// A saved card's token (<https://www.mercadopago.com.br/developers/en/docs/automatic-payments/recurring-charges>):
/// `card_id` (digits, as text or number), optionally `customer_id` (the card's customer) and `security_code`
/// (absent for a merchant-initiated charge).
fn validate_saved(body: &Value) -> Result<NewSavedCardToken, Reply> {
    let card_id = match body.get("card_id") {
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    if card_id.is_empty() || card_id.len() > 32 || !card_id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(errors::bad_request(json!(121), "the card is invalid."));
    }
    let customer_id = match body.get("customer_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= 64 => {
            Some(s.trim().to_owned())
        }
        Some(_) => {
            return Err(errors::bad_request(
                json!(105),
                "the customer id is invalid.",
            ))
        }
    };
    let security_code_length = match body.get("security_code") {
        None | Some(Value::Null) => None,
        Some(v) => Some(security_code(v)?),
    };
    Ok(NewSavedCardToken {
        card_id,
        customer_id,
        security_code_length,
    })
}

/// A new token's id: 32 hex digits.
fn token_id(state: &mut State) -> String {
    format!(
        "{:016x}{:016x}",
        state.rng.between(0, u64::MAX - 1),
        state.rng.between(0, u64::MAX - 1)
    )
}

/// Creates the token asked for: 201 with it; a saved card that does not exist is 404, one of another customer
/// than `customer_id` 400 (cause 140 "invalid card owner.").
pub(crate) fn create_token(state: &mut State, p: usize, new: NewToken) -> Reply {
    match new {
        NewToken::Card(card) => create_card_token(state, p, card),
        NewToken::Saved(saved) => create_saved_card_token(state, p, saved),
    }
}

fn create_saved_card_token(state: &mut State, p: usize, new: NewSavedCardToken) -> Reply {
    let id = token_id(state);
    let book = &mut state.providers[p].mp;
    let Some(card) = book.cards.get(&new.card_id) else {
        return errors::error(
            404,
            "not_found",
            "card not found",
            &[(json!(120), "card not found.")],
        );
    };
    if new
        .customer_id
        .as_ref()
        .is_some_and(|c| *c != card.customer_id)
    {
        return errors::bad_request(json!(140), "invalid card owner.");
    }
    let token = CardToken {
        id: id.clone(),
        first_six: card.first_six.clone(),
        last_four: card.last_four.clone(),
        expiration_month: card.expiration_month,
        expiration_year: card.expiration_year,
        security_code_length: new
            .security_code_length
            .unwrap_or(card.security_code_length),
        card_number_length: card.card_number_length,
        holder_name: card.holder_name.clone(),
        holder_identification: card.holder_identification.clone(),
        date_created: clock::now(),
        used: false,
        saved: Some(SavedCardRef {
            card_id: card.id.clone(),
            customer_id: card.customer_id.clone(),
        }),
    };
    let body = token.json();
    book.card_tokens.insert(id, token);
    Reply::json(201, &body)
}

/// `POST /v1/card_tokens` — what the official SDKs' `card_token().create` and the card form call
/// (<https://www.mercadopago.com.br/developers/en/docs/checkout-api/integration-configuration/card/integrate-via-cardform>):
/// `card_number` (13–19 digits), `expiration_month`, `expiration_year`, `security_code` (3–4 digits),
/// `cardholder: {name, identification: {type, number}}`. Errors as Mercado Pago's card-token API answers them
/// (400 with cause codes `E301` card number, `E302` security code, `325`/`326` month/year, `221` holder name).
/// With `card_id` instead: a token of that saved card ([`validate_saved`]).
fn validate_card(body: &Value) -> Result<NewCardToken, Reply> {
    let number = |name: &str| -> Option<u64> {
        match body.get(name)? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    };
    let card_number = body
        .get("card_number")
        .and_then(Value::as_str)
        .map(|c| c.replace([' ', '-'], ""))
        .filter(|c| (13..=19).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| errors::bad_request(json!("E301"), "invalid card_number"))?;
    let expiration_month = number("expiration_month")
        .filter(|m| (1..=12).contains(m))
        .ok_or_else(|| errors::bad_request(json!(325), "invalid expiration_month"))?;
    let expiration_year = number("expiration_year")
        .filter(|y| (2000..=2100).contains(y))
        .ok_or_else(|| errors::bad_request(json!(326), "invalid expiration_year"))?;
    let security_code_length = match body.get("security_code") {
        None | Some(Value::Null) => 3,
        Some(v) => security_code(v)?,
    };
    let cardholder = body.get("cardholder").cloned().unwrap_or(Value::Null);
    let holder_name = cardholder
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.chars().count() <= 100)
        .ok_or_else(|| {
            errors::bad_request(
                json!(221),
                "parameter cardholder.name can not be null/empty",
            )
        })?
        .to_owned();
    let holder_identification = match cardholder.get("identification") {
        Some(id @ Value::Object(_)) if id.to_string().len() <= 200 => id.clone(),
        _ => json!({"number": null, "type": null}),
    };
    Ok(NewCardToken {
        card_number,
        expiration_month,
        expiration_year,
        security_code_length,
        holder_name,
        holder_identification,
    })
}

fn create_card_token(state: &mut State, p: usize, new: NewCardToken) -> Reply {
    let id = token_id(state);
    let n = new.card_number.len();
    let token = CardToken {
        id: id.clone(),
        first_six: new.card_number[..6].to_owned(),
        last_four: new.card_number[n - 4..].to_owned(),
        expiration_month: new.expiration_month,
        expiration_year: new.expiration_year,
        security_code_length: new.security_code_length,
        card_number_length: n,
        holder_name: new.holder_name,
        holder_identification: new.holder_identification,
        date_created: clock::now(),
        used: false,
        saved: None,
    };
    let body = token.json();
    state.providers[p].mp.card_tokens.insert(id, token);
    Reply::json(201, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_tokens_need_a_card_and_a_holder() {
        let ok = validate_token(
            br#"{"card_number":"4235647728025682","expiration_month":11,"expiration_year":2030,"security_code":"123","cardholder":{"name":"APRO"}}"#,
        );
        assert!(ok.is_ok());
        for bad in [
            r#"{"card_number":"42","expiration_month":11,"expiration_year":2030,"cardholder":{"name":"APRO"}}"#,
            r#"{"card_number":"4235647728025682","expiration_month":13,"expiration_year":2030,"cardholder":{"name":"APRO"}}"#,
            r#"{"card_number":"4235647728025682","expiration_month":11,"expiration_year":2030,"cardholder":{}}"#,
            r#"{"card_number":"4235647728025682","expiration_month":11,"expiration_year":2030,"security_code":"12345","cardholder":{"name":"A"}}"#,
        ] {
            assert!(validate_token(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
