//! Stripe's lists and search for the objects a merchant's SDK looks up: `GET /v1/payment_intents` and
//! `GET /v1/refunds` (cursor pagination, <https://docs.stripe.com/api/pagination>) and
//! `GET /v1/payment_intents/search` (the search query language,
//! <https://docs.stripe.com/search#search-query-language>). Newest first, as Stripe lists them.
//!
//! Not faithful: Stripe's search is eventually consistent (an object can take up to a minute to be found); the
//! sandbox's finds it at once. Only `AND` (no `OR`), and the fields `status`, `customer`, `currency`, `amount`
//! and `metadata['key']` (exact match, `-` negation).

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::book::{PaymentIntent, Refund, StripeBook};
use super::errors::{self, StripeError};
use super::form::Form;
use super::get;
use crate::state::{Shared, State};

/// Longest search query accepted (Stripe's queries are short: ten clauses at most).
const MAX_QUERY_LEN: usize = 2_000;
/// Most clauses joined with `AND` (Stripe's limit is 10).
const MAX_CLAUSES: usize = 10;

/// `limit`: 1 to 100, 10 by default.
fn limit(form: &Form) -> Result<usize, StripeError> {
    match form.get("limit") {
        None => Ok(10),
        Some(text) => match text.trim().parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) => Ok(n),
            _ => Err(errors::invalid_uncoded(
                format!(
                    "Invalid limit: must be between 1 and 100 (it is '{}')",
                    text.chars().take(40).collect::<String>()
                ),
                Some("limit"),
            )),
        },
    }
}

/// One page of `ids` (creation order) kept by `keep`, newest first, after `starting_after` or before
/// `ending_before` (ids that must exist: Stripe answers 400 `resource_missing` otherwise); and whether more
/// follow in that direction.
fn page<'a>(
    ids: &'a [String],
    form: &Form,
    object: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<(Vec<&'a str>, bool), StripeError> {
    let limit = limit(form)?;
    let cursor = |name: &str| -> Result<Option<usize>, StripeError> {
        match form.get(name) {
            None => Ok(None),
            Some(id) => ids
                .iter()
                .position(|i| i == id)
                .map(Some)
                .ok_or_else(|| StripeError {
                    status: 400,
                    ..errors::missing(object, id, name)
                }),
        }
    };
    let after = cursor("starting_after")?;
    let before = cursor("ending_before")?;
    let indexed = ids.iter().enumerate();
    Ok(match (after, before) {
        (_, Some(before)) => {
            let newer: Vec<&str> = indexed
                .filter(|(i, id)| *i > before && keep(id))
                .map(|(_, id)| id.as_str())
                .collect();
            let has_more = newer.len() > limit;
            let mut page: Vec<&str> = newer.into_iter().take(limit).collect();
            page.reverse();
            (page, has_more)
        }
        (after, None) => {
            let mut older = indexed
                .rev()
                .filter(|(i, id)| after.is_none_or(|a| *i < a) && keep(id))
                .map(|(_, id)| id.as_str());
            let page: Vec<&str> = older.by_ref().take(limit).collect();
            (page, older.next().is_some())
        }
    })
}

fn list_envelope(data: Vec<Value>, has_more: bool, url: &str) -> Value {
    json!({"object": "list", "data": data, "has_more": has_more, "url": url})
}

fn intents_page(state: &State, p: usize, form: &Form) -> Result<Value, StripeError> {
    form.check_known(&[
        "created",
        "customer",
        "ending_before",
        "expand",
        "limit",
        "starting_after",
    ])?;
    let book = &state.providers[p].stripe;
    let customer = form.get("customer");
    let created = form.timestamp("created")?;
    let (ids, has_more) = page(&book.intent_order, form, "payment_intent", |id| {
        book.intents.get(id).is_some_and(|i| {
            customer.is_none_or(|c| i.customer.as_deref() == Some(c))
                && created.is_none_or(|t| i.created == t)
        })
    })?;
    let data = ids
        .iter()
        .filter_map(|id| book.intents.get(*id).map(PaymentIntent::json))
        .collect();
    Ok(list_envelope(data, has_more, "/v1/payment_intents"))
}

/// `GET /v1/payment_intents`: `limit`, `starting_after`, `ending_before`, `customer`, `created`.
pub(crate) async fn list_intents(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let form = Form::parse(req.query_string().as_bytes());
    get(&req, &shared, |state, p| intents_page(state, p, &form))
}

fn refunds_page(state: &State, p: usize, form: &Form) -> Result<Value, StripeError> {
    form.check_known(&[
        "charge",
        "created",
        "ending_before",
        "expand",
        "limit",
        "payment_intent",
        "starting_after",
    ])?;
    let book = &state.providers[p].stripe;
    let intent = form.get("payment_intent");
    let charge = form.get("charge");
    let (ids, has_more) = page(&book.refund_order, form, "refund", |id| {
        book.refunds.get(id).is_some_and(|r| {
            intent.is_none_or(|pi| r.payment_intent == pi) && charge.is_none_or(|c| r.charge == c)
        })
    })?;
    let data = ids
        .iter()
        .filter_map(|id| book.refunds.get(*id).map(Refund::json))
        .collect();
    Ok(list_envelope(data, has_more, "/v1/refunds"))
}

/// `GET /v1/refunds`: `payment_intent`, `charge`, `limit`, `starting_after`, `ending_before`.
pub(crate) async fn list_refunds(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let form = Form::parse(req.query_string().as_bytes());
    get(&req, &shared, |state, p| refunds_page(state, p, &form))
}

/// One clause of a search query: `field:value`, `metadata['key']:'value'`, `-` negating it.
#[derive(Debug, PartialEq, Eq)]
struct Clause {
    negated: bool,
    field: Field,
    value: String,
}

#[derive(Debug, PartialEq, Eq)]
enum Field {
    Status,
    Customer,
    Currency,
    Amount,
    Metadata(String),
}

fn query_error(message: impl Into<String>) -> StripeError {
    errors::invalid_uncoded(message, Some("query"))
}

/// A quoted (`'…'` or `"…"`) or bare value.
fn unquote(text: &str) -> Option<String> {
    let text = text.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = text.strip_prefix(q) {
            let inner = inner.strip_suffix(q)?;
            return (!inner.contains(q)).then(|| inner.to_owned());
        }
    }
    (!text.is_empty() && !text.contains(['\'', '"', ' '])).then(|| text.to_owned())
}

/// Parses a query of clauses joined by `AND`.
fn parse_query(query: &str) -> Result<Vec<Clause>, StripeError> {
    if query.trim().is_empty() {
        return Err(errors::invalid(
            "parameter_missing",
            "Missing required param: query.",
            Some("query"),
        ));
    }
    if query.len() > MAX_QUERY_LEN {
        return Err(query_error(format!(
            "The query is too long (at most {MAX_QUERY_LEN} characters)."
        )));
    }
    let parts: Vec<&str> = query.split(" AND ").collect();
    if parts.len() > MAX_CLAUSES {
        return Err(query_error(format!(
            "A query can have at most {MAX_CLAUSES} clauses."
        )));
    }
    parts
        .into_iter()
        .map(|part| {
            let part = part.trim();
            if part.contains(" OR ") {
                return Err(query_error(
                    "The sandbox's search supports only clauses joined with AND.",
                ));
            }
            let (negated, part) = match part.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, part),
            };
            let bad = || query_error(format!("Invalid search query clause: {part}"));
            let (field, value) = if let Some(rest) = part.strip_prefix("metadata[") {
                let (key, rest) = rest.split_once(']').ok_or_else(bad)?;
                let value = rest.strip_prefix(':').ok_or_else(bad)?;
                (Field::Metadata(unquote(key).ok_or_else(bad)?), value)
            } else {
                let (name, value) = part.split_once(':').ok_or_else(bad)?;
                let field = match name.trim() {
                    "status" => Field::Status,
                    "customer" => Field::Customer,
                    "currency" => Field::Currency,
                    "amount" => Field::Amount,
                    other => {
                        return Err(query_error(format!(
                            "Field `{other}` is an unsupported search field for resource `payment_intents`."
                        )))
                    }
                };
                (field, value)
            };
            Ok(Clause {
                negated,
                field,
                value: unquote(value).ok_or_else(bad)?,
            })
        })
        .collect()
}

fn matches(intent: &PaymentIntent, clauses: &[Clause]) -> bool {
    clauses.iter().all(|c| {
        let equal = match &c.field {
            Field::Status => intent.status == c.value,
            Field::Customer => intent.customer.as_deref() == Some(c.value.as_str()),
            Field::Currency => intent.currency.eq_ignore_ascii_case(&c.value),
            Field::Amount => c.value.parse::<i64>().is_ok_and(|a| a == intent.amount),
            Field::Metadata(key) => intent.metadata.get(key) == Some(&c.value),
        };
        equal != c.negated
    })
}

/// The opaque `page` token of the results after the first `n`.
fn page_token(n: usize) -> String {
    format!("sandbox_page_{n}")
}

fn search_page(book: &StripeBook, form: &Form) -> Result<Value, StripeError> {
    form.check_known(&["expand", "limit", "page", "query"])?;
    let clauses = parse_query(form.get("query").unwrap_or(""))?;
    let limit = limit(form)?;
    let skip = match form.get("page") {
        None => 0,
        Some(token) => token
            .strip_prefix("sandbox_page_")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| errors::invalid_uncoded("Invalid page.", Some("page")))?,
    };
    let mut found = book
        .intent_order
        .iter()
        .rev()
        .filter_map(|id| book.intents.get(id))
        .filter(|i| matches(i, &clauses))
        .skip(skip);
    let data: Vec<Value> = found
        .by_ref()
        .take(limit)
        .map(PaymentIntent::json)
        .collect();
    let has_more = found.next().is_some();
    Ok(json!({
        "object": "search_result",
        "data": data,
        "has_more": has_more,
        "next_page": has_more.then(|| page_token(skip + limit)),
        "url": "/v1/payment_intents/search",
    }))
}

/// `GET /v1/payment_intents/search?query=…&limit=…&page=…`.
pub(crate) async fn search_intents(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let form = Form::parse(req.query_string().as_bytes());
    get(&req, &shared, |state, p| {
        search_page(&state.providers[p].stripe, &form)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_metadata_status_and_negation() {
        let q = parse_query(
            "metadata['hookline_intent']:'pi_hl_1' AND status:\"succeeded\" AND -currency:usd",
        )
        .unwrap();
        assert_eq!(
            q,
            vec![
                Clause {
                    negated: false,
                    field: Field::Metadata("hookline_intent".into()),
                    value: "pi_hl_1".into()
                },
                Clause {
                    negated: false,
                    field: Field::Status,
                    value: "succeeded".into()
                },
                Clause {
                    negated: true,
                    field: Field::Currency,
                    value: "usd".into()
                },
            ]
        );
        assert!(parse_query("").is_err());
        assert!(parse_query("email:'a@b'").is_err());
        assert!(parse_query("status:'a' OR status:'b'").is_err());
        assert!(parse_query("metadata['k':'v'").is_err());
        assert!(parse_query(&"status:'x' AND ".repeat(11)).is_err());
    }
}
