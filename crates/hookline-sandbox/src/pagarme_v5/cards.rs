//! Saved cards and card tokens: `POST /core/v5/customers/{id}/cards` (`{number, holder_name, exp_month,
//! exp_year, cvv}` or `{token}`), `POST /core/v5/tokens?appId=pk_…` — their validation (nothing is executed or
//! saved under the idempotency key for an invalid request), their execution under the state lock, and the card a
//! credit-card payment charges (`card_id`, `card_token` or `card`).
//!
//! A token is single use and lives 60 seconds; when an order uses it, its card is saved to the order's customer
//! ("ao ser utilizado, o cartão referente é adicionado à wallet do comprador",
//! <https://docs.pagar.me/docs/tokenizecard>).

use serde_json::Value;
use time::Duration;

use super::book::{behaviour, CardData, PgBook, PgCard, PgToken};
use super::errors::{self, FieldErrors};
use super::fields::{string_field, text};
use super::render;
use crate::reply::Reply;
use crate::state::State;

/// How long a card token can be used (Pagar.me: 60 seconds).
const TOKEN_LIFETIME: Duration = Duration::seconds(60);
/// Most cards one customer keeps (a bound on what one client can store; Pagar.me's own limit is not documented).
const MAX_CARDS_PER_CUSTOMER: usize = 50;

/// A validated card (number and security code are checked, never kept).
#[derive(Debug, Clone)]
pub(crate) struct NewCard {
    card: CardData,
}

/// What a credit-card payment (or a card to save) names.
#[derive(Debug, Clone)]
pub(crate) enum CardSource {
    /// A card saved to the customer (`card_id`).
    Saved(String),
    /// A token (`card_token`, or `token` when saving a card).
    Token(String),
    /// The card's data.
    Data(NewCard),
}

/// Whether `digits` passes the Luhn check card numbers carry.
fn luhn(digits: &str) -> bool {
    let mut sum = 0;
    for (i, c) in digits.chars().rev().enumerate() {
        let Some(mut d) = c.to_digit(10) else {
            return false;
        };
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    sum % 10 == 0
}

/// The brand of a card number, by its first digits.
pub(crate) fn brand(number: &str) -> &'static str {
    let starts = |p: &str| number.starts_with(p);
    const ELO: &[&str] = &[
        "401178", "401179", "431274", "438935", "451416", "457393", "457631", "457632", "504175",
        "506699", "5067", "509", "627780", "636297", "636368", "650", "6516", "6550",
    ];
    if ELO.iter().any(|p| starts(p)) {
        "Elo"
    } else if starts("606282") || starts("3841") {
        "Hipercard"
    } else if starts("34") || starts("37") {
        "Amex"
    } else if starts("4") {
        "Visa"
    } else if starts("5") || starts("2") {
        "Mastercard"
    } else {
        "Visa"
    }
}

/// A month or year field: an integer (or a string of digits, as the API also accepts).
fn number_field(body: &Value, name: &str) -> Option<u32> {
    match body.get(name)? {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) if !s.is_empty() && s.len() <= 4 => s.parse().ok(),
        _ => None,
    }
}

/// A card's data (`number`, `holder_name`, `exp_month`, `exp_year`, `cvv`, `holder_document`), fields reported
/// under `prefix`; `year_now` refuses an expired card.
pub(crate) fn validate_card(
    body: &Value,
    prefix: &str,
    year_now: (i32, u8),
    errors: &mut FieldErrors,
) -> NewCard {
    let path = |f: &str| {
        if prefix.is_empty() {
            f.to_owned()
        } else {
            format!("{prefix}.{f}")
        }
    };
    let number: String = string_field(body, "number", &path("number"), 19, true, errors)
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    if !number.is_empty() && !(13..=19).contains(&number.len())
        || !number.is_empty() && !luhn(&number)
    {
        errors.add(
            &path("number"),
            "The field number is not a valid card number.",
        );
    }
    let holder_name = string_field(body, "holder_name", &path("holder_name"), 64, true, errors)
        .unwrap_or_default();
    let holder_document = string_field(
        body,
        "holder_document",
        &path("holder_document"),
        16,
        false,
        errors,
    );
    let exp_month = number_field(body, "exp_month").filter(|m| (1..=12).contains(m));
    if exp_month.is_none() {
        errors.add(
            &path("exp_month"),
            "The field exp_month must be between 1 and 12.",
        );
    }
    let exp_year = number_field(body, "exp_year")
        .map(|y| if y < 100 { 2000 + y } else { y })
        .filter(|y| (2000..=2099).contains(y));
    if exp_year.is_none() {
        errors.add(&path("exp_year"), "The field exp_year is invalid.");
    }
    if let (Some(month), Some(year)) = (exp_month, exp_year) {
        let (now_year, now_month) = year_now;
        if (year as i32, month as u8) < (now_year, now_month) {
            errors.add(&path("exp_year"), "The card is expired.");
        }
    }
    if let Some(cvv) = string_field(body, "cvv", &path("cvv"), 4, false, errors) {
        if !(3..=4).contains(&cvv.len()) || !cvv.chars().all(|c| c.is_ascii_digit()) {
            errors.add(&path("cvv"), "The field cvv is invalid.");
        }
    }
    let first_six = number.chars().take(6).collect();
    let last_four = number
        .chars()
        .skip(number.len().saturating_sub(4))
        .collect();
    NewCard {
        card: CardData {
            brand: brand(&number),
            behaviour: behaviour(&number),
            first_six,
            last_four,
            holder_name,
            holder_document,
            exp_month: exp_month.unwrap_or(1),
            exp_year: exp_year.unwrap_or(2000),
        },
    }
}

/// The card a body names: `card_id` / `card_token` (orders), `token` (saving a card), or the card's own fields
/// (`card` object in orders, the body itself when saving a card).
pub(crate) fn validate_source(
    body: &Value,
    prefix: &str,
    card_field: Option<&str>,
    year_now: (i32, u8),
    errors: &mut FieldErrors,
) -> Option<CardSource> {
    let path = |f: &str| {
        if prefix.is_empty() {
            f.to_owned()
        } else {
            format!("{prefix}.{f}")
        }
    };
    for (name, saved) in [("card_id", true), ("card_token", false), ("token", false)] {
        if let Some(id) = string_field(body, name, &path(name), 64, false, errors) {
            return Some(if saved {
                CardSource::Saved(id)
            } else {
                CardSource::Token(id)
            });
        }
    }
    let card = match card_field {
        Some(field) => body.get(field).filter(|c| c.is_object()),
        None => Some(body),
    };
    match card {
        Some(card) => {
            let card_prefix = card_field.map_or(prefix.to_owned(), &path);
            Some(CardSource::Data(validate_card(
                card,
                &card_prefix,
                year_now,
                errors,
            )))
        }
        None => {
            errors.add(
                &path("card"),
                "One of card_id, card_token or card is required.",
            );
            None
        }
    }
}

/// The (year, month) of `state`'s clock, what an expiry is compared with.
pub(crate) fn year_month(state_now: time::OffsetDateTime) -> (i32, u8) {
    (state_now.year(), u8::from(state_now.month()))
}

/// A card source checked against the book, ready to be used with [`use_card`].
pub(crate) struct CheckedCard(CardSource);

/// Checks that `source` can be charged for `customer` (`None`: a customer the request creates): a saved card
/// must exist and be that customer's; a token must exist, be unused and unexpired. Changes nothing.
pub(crate) fn check_card(
    state: &State,
    p: usize,
    source: &CardSource,
    customer: Option<&str>,
    token_path: &str,
) -> Result<CheckedCard, Reply> {
    let book = &state.providers[p].pagarme;
    match source {
        CardSource::Saved(id) => match book.cards.get(id) {
            None => return Err(errors::not_found("Card")),
            Some(card) if Some(card.customer_id.as_str()) != customer => {
                return Err(errors::precondition(
                    "The card does not belong to the customer.",
                ))
            }
            Some(_) => {}
        },
        CardSource::Token(id) => {
            let usable = book
                .tokens
                .get(id)
                .is_some_and(|t| !t.used && state.clock.now() < t.expires_at);
            if !usable {
                let mut errors = FieldErrors::default();
                errors.add(
                    token_path,
                    "The token was not found, has expired or was already used.",
                );
                return Err(errors.reply());
            }
        }
        CardSource::Data(_) => {}
    }
    Ok(CheckedCard(source.clone()))
}

/// Uses a checked card for `customer`: a token is used up and its card saved to the customer (`save_token`);
/// the card's data and the saved card's id.
pub(crate) fn use_card(
    state: &mut State,
    p: usize,
    checked: CheckedCard,
    customer: &str,
) -> (CardData, Option<String>) {
    match checked.0 {
        CardSource::Saved(id) => {
            let card = state.providers[p]
                .pagarme
                .cards
                .get(&id)
                .map(|c| c.card.clone());
            (card.unwrap_or_else(placeholder_card), Some(id))
        }
        CardSource::Token(id) => {
            let card = match state.providers[p].pagarme.tokens.get_mut(&id) {
                Some(token) => {
                    token.used = true;
                    token.card.clone()
                }
                None => placeholder_card(),
            };
            let card_id = save(state, p, customer, card.clone());
            (card, card_id)
        }
        CardSource::Data(new) => (new.card, None),
    }
}

/// Never charged: [`check_card`] rules out the cases that would need it.
fn placeholder_card() -> CardData {
    CardData {
        first_six: String::new(),
        last_four: String::new(),
        brand: "Visa",
        holder_name: String::new(),
        holder_document: None,
        exp_month: 1,
        exp_year: 2000,
        behaviour: super::book::CardBehaviour::Decline,
    }
}

/// Saves `card` to `customer` (unless they already keep [`MAX_CARDS_PER_CUSTOMER`]); the new card's id.
fn save(state: &mut State, p: usize, customer: &str, card: CardData) -> Option<String> {
    let id = state.rng.id("card", 16);
    let now = state.clock.now();
    let book: &mut PgBook = &mut state.providers[p].pagarme;
    let owner = book.customers.get_mut(customer)?;
    if owner.cards.len() >= MAX_CARDS_PER_CUSTOMER {
        return None;
    }
    owner.cards.push(id.clone());
    book.cards.insert(
        id.clone(),
        PgCard {
            id: id.clone(),
            customer_id: customer.to_owned(),
            card,
            created_at: now,
        },
    );
    Some(id)
}

/// `POST /core/v5/customers/{id}/cards`: 200 with the card (404 for an unknown customer).
pub(crate) fn save_card(state: &mut State, p: usize, customer: &str, source: CardSource) -> Reply {
    if !state.providers[p].pagarme.customers.contains_key(customer) {
        return errors::not_found("Customer");
    }
    if matches!(source, CardSource::Saved(_)) {
        let mut errors = FieldErrors::default();
        errors.add("card_id", "A saved card cannot be saved again.");
        return errors.reply();
    }
    let checked = match check_card(state, p, &source, Some(customer), "token") {
        Ok(checked) => checked,
        Err(reply) => return reply,
    };
    let count = state.providers[p]
        .pagarme
        .customers
        .get(customer)
        .map_or(0, |c| c.cards.len());
    if count >= MAX_CARDS_PER_CUSTOMER {
        return errors::precondition("The customer has reached the maximum number of cards.");
    }
    let (_, card_id) = use_card(state, p, checked, customer);
    let card_id = match (card_id, source) {
        (Some(id), _) => Some(id),
        (None, CardSource::Data(new)) => save(state, p, customer, new.card),
        (None, _) => None,
    };
    let book = &state.providers[p].pagarme;
    match card_id.and_then(|id| book.cards.get(&id)) {
        Some(card) => Reply::json(200, &render::card_json(book, card)),
        None => errors::not_found("Card"),
    }
}

/// `POST /core/v5/tokens?appId=pk_…` `{"type": "card", "card": {…}}`: 200 with the token.
pub(crate) fn create_token(state: &mut State, p: usize, new: NewCard) -> Reply {
    let id = state.rng.id("token", 16);
    let now = state.clock.now();
    let token = PgToken {
        id: id.clone(),
        card: new.card,
        created_at: now,
        expires_at: now + TOKEN_LIFETIME,
        used: false,
    };
    let body = render::token_json(&token);
    state.providers[p].pagarme.tokens.insert(id, token);
    Reply::json(200, &body)
}

/// The body of `POST /core/v5/tokens`: `type` must be `card`, the card in `card`.
pub(crate) fn validate_token(body: &Value, year_now: (i32, u8)) -> Result<NewCard, Reply> {
    let mut errors = FieldErrors::default();
    match text(body, "type") {
        None | Some("card") => {}
        Some(_) => errors.add("type", "The field type must be card."),
    }
    let card = match body.get("card").filter(|c| c.is_object()) {
        Some(card) => Some(validate_card(card, "card", year_now, &mut errors)),
        None => {
            errors.required("card");
            None
        }
    };
    match card {
        Some(card) if errors.is_empty() => Ok(card),
        _ => Err(errors.reply()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cards_are_checked_like_the_api_checks_them() {
        assert!(luhn("4000000000000010") && luhn("4000000000000028"));
        assert!(!luhn("4000000000000011"));
        assert_eq!(brand("4000000000000010"), "Visa");
        assert_eq!(brand("5555555555554444"), "Mastercard");
        assert_eq!(brand("5067000000000000"), "Elo");
        let mut errors = FieldErrors::default();
        let card = validate_card(
            &json!({"number": "4000000000000028", "holder_name": "Tony", "exp_month": 12, "exp_year": 30, "cvv": "123"}),
            "card",
            (2026, 1),
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            (card.card.first_six.as_str(), card.card.last_four.as_str()),
            ("400000", "0028")
        );
        assert_eq!(card.card.exp_year, 2030);
        let mut errors = FieldErrors::default();
        validate_card(
            &json!({"number": "4000000000000011", "exp_month": 13, "exp_year": 2020}),
            "card",
            (2026, 1),
            &mut errors,
        );
        let body: Value = serde_json::from_slice(&errors.reply().body).unwrap();
        for field in ["card.number", "card.holder_name", "card.exp_month"] {
            assert!(body["errors"][field].is_array(), "{field}: {body}");
        }
    }
}
