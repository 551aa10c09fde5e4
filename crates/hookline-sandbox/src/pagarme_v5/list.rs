//! `GET /core/v5/orders` and `GET /core/v5/charges`: filters, newest first, page-number paging in Pagar.me's
//! envelope `{"data": […], "paging": {"total", "previous", "next"}}` where `previous`/`next` are the URLs of the
//! neighbouring pages (<https://docs.pagar.me/reference/paginação-1>). Filters: orders `code`, `status`,
//! `customer_id`, `created_since`, `created_until`; charges also `payment_method` and `order_id`. `page` starts
//! at 1, `size` defaults to 10 (at most 100 here: Pagar.me's maximum is not documented). Other parameters are
//! ignored, as an ASP.NET API ignores them.

use serde_json::{json, Value};
use time::OffsetDateTime;

use super::errors::FieldErrors;
use super::render;
use super::validate::parse_date;
use crate::reply::Reply;
use crate::state::State;

const DEFAULT_SIZE: usize = 10;
const MAX_SIZE: usize = 100;

/// What orders and charges are filtered on.
struct Row<'a> {
    code: Option<&'a str>,
    status: &'a str,
    customer_id: &'a str,
    created_at: OffsetDateTime,
    payment_method: Option<&'static str>,
    order_id: Option<&'a str>,
}

/// The parsed query: filters, page, size, and what the paging URLs carry over.
struct Query {
    params: Vec<(String, String)>,
    page: usize,
    size: usize,
    since: Option<OffsetDateTime>,
    until: Option<OffsetDateTime>,
}

impl Query {
    fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn parse(query: &str) -> Result<Query, Reply> {
        let params: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .take(64)
            .collect();
        let mut errors = FieldErrors::default();
        let number = |name: &str, default: usize, max: usize, errors: &mut FieldErrors| match params
            .iter()
            .find(|(k, _)| k == name)
        {
            None => default,
            Some((_, v)) => match v.parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => n,
                _ => {
                    errors.add(
                        name,
                        format!("The field {name} must be between 1 and {max}."),
                    );
                    default
                }
            },
        };
        let page = number("page", 1, 1_000_000, &mut errors);
        let size = number("size", DEFAULT_SIZE, MAX_SIZE, &mut errors);
        let mut date = |name: &str| {
            let text = params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())?;
            let parsed = parse_date(&text);
            if parsed.is_none() {
                errors.add(
                    name,
                    format!(
                        "The value '{}' is not valid for {name}.",
                        text.chars().take(40).collect::<String>()
                    ),
                );
            }
            parsed
        };
        let since = date("created_since");
        let until = date("created_until");
        errors.or(Query {
            params,
            page,
            size,
            since,
            until,
        })
    }

    fn matches(&self, row: &Row<'_>) -> bool {
        let eq = |name: &str, value: Option<&str>| {
            self.get(name).is_none_or(|wanted| value == Some(wanted))
        };
        eq("code", row.code)
            && eq("status", Some(row.status))
            && eq("customer_id", Some(row.customer_id))
            && eq("payment_method", row.payment_method)
            && eq("order_id", row.order_id)
            && self.since.is_none_or(|t| row.created_at >= t)
            && self.until.is_none_or(|t| row.created_at <= t)
    }

    /// The URL of page `page` with the same filters.
    fn page_url(&self, base: &str, page: usize) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &self.params {
            if k != "page" && k != "size" {
                out.append_pair(k, v);
            }
        }
        out.append_pair("page", &page.to_string());
        out.append_pair("size", &self.size.to_string());
        format!("{base}?{}", out.finish())
    }

    /// The envelope of one page of `rows` (already filtered, newest first).
    fn envelope(&self, base: &str, rows: Vec<Value>) -> Value {
        let total = rows.len();
        let start = (self.page - 1).saturating_mul(self.size);
        let data: Vec<Value> = rows.into_iter().skip(start).take(self.size).collect();
        let previous =
            (self.page > 1 && start <= total).then(|| self.page_url(base, self.page - 1));
        let next = (start + self.size < total).then(|| self.page_url(base, self.page + 1));
        json!({"data": data, "paging": {"total": total, "previous": previous, "next": next}})
    }
}

/// `GET /core/v5/orders?…`; `base` is the URL the paging links start with.
pub(crate) fn orders(state: &State, p: usize, query: &str, base: &str) -> Reply {
    let query = match Query::parse(query) {
        Ok(q) => q,
        Err(reply) => return reply,
    };
    let book = &state.providers[p].pagarme;
    let mut found: Vec<_> = book
        .orders
        .values()
        .filter(|o| {
            query.matches(&Row {
                code: o.code.as_deref(),
                status: &o.status,
                customer_id: &o.customer_id,
                created_at: o.created_at,
                payment_method: None,
                order_id: None,
            })
        })
        .collect();
    found.sort_by_key(|row| std::cmp::Reverse(row.seq));
    let rows = found
        .into_iter()
        .map(|o| render::order_json(book, o))
        .collect();
    Reply::json(200, &query.envelope(base, rows))
}

/// `GET /core/v5/charges?…`.
pub(crate) fn charges(state: &State, p: usize, query: &str, base: &str) -> Reply {
    let query = match Query::parse(query) {
        Ok(q) => q,
        Err(reply) => return reply,
    };
    let book = &state.providers[p].pagarme;
    let mut found: Vec<_> = book
        .charges
        .values()
        .filter(|c| {
            query.matches(&Row {
                code: c.code.as_deref(),
                status: &c.status,
                customer_id: &c.customer_id,
                created_at: c.created_at,
                payment_method: Some(c.method.name()),
                order_id: Some(&c.order_id),
            })
        })
        .collect();
    found.sort_by_key(|row| std::cmp::Reverse(row.seq));
    let rows = found
        .into_iter()
        .map(|c| render::charge_json(book, c))
        .collect();
    Reply::json(200, &query.envelope(base, rows))
}

/// `GET /core/v5/customers/{id}/cards`: the customer's cards in the same envelope (one page).
pub(crate) fn cards(state: &State, p: usize, customer: &str) -> Option<Reply> {
    let book = &state.providers[p].pagarme;
    let owner = book.customers.get(customer)?;
    let data: Vec<Value> = owner
        .cards
        .iter()
        .filter_map(|id| book.cards.get(id))
        .map(|c| render::card_json(book, c))
        .collect();
    let total = data.len();
    Some(Reply::json(
        200,
        &json!({"data": data, "paging": {"total": total, "previous": null, "next": null}}),
    ))
}
