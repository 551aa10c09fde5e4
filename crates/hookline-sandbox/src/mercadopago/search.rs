//! `GET /v1/payments/search`: date range on one date field, sort, equality filters, offset paging.

use serde_json::{json, Value};
use time::{Duration, OffsetDateTime};

use super::book::MpPayment;
use super::errors;
use crate::clock;
use crate::reply::Reply;
use crate::state::State;

const SORTS: &[&str] = &[
    "date_approved",
    "date_created",
    "date_last_updated",
    "id",
    "money_release_date",
];
const RANGES: &[&str] = &[
    "date_created",
    "date_last_updated",
    "date_approved",
    "money_release_date",
];
const FILTERS: &[&str] = &[
    "external_reference",
    "status",
    "status_detail",
    "id",
    "payment_method_id",
    "payment_type_id",
];

fn date_of(p: &MpPayment, field: &str) -> Option<OffsetDateTime> {
    match field {
        "date_created" => Some(p.date_created),
        "date_last_updated" => Some(p.date_last_updated),
        "date_approved" => p.date_approved,
        "money_release_date" => p.money_release_date(),
        _ => None,
    }
}

fn field_text(json: &Value, field: &str) -> Option<String> {
    match json.get(field)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(crate) fn search(state: &State, p: usize, query: &str) -> Reply {
    let params: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let sort = get("sort").unwrap_or("date_created");
    if !SORTS.contains(&sort) {
        return errors::bad_request(json!(1003), "Invalid sort value.");
    }
    let descending = match get("criteria").unwrap_or("desc") {
        "desc" => true,
        "asc" => false,
        _ => return errors::bad_request(json!(1004), "Invalid criteria value."),
    };
    let range = get("range").unwrap_or("date_created");
    if !RANGES.contains(&range) {
        return errors::bad_request(json!(1), "Params Error.");
    }
    let now = clock::now();
    let date = |name: &str, default: OffsetDateTime| match get(name) {
        None => Some(default),
        Some(text) => clock::parse_mp_search_date(text, now),
    };
    let (Some(begin), Some(end)) = (
        date("begin_date", now - Duration::days(90)),
        date("end_date", now),
    ) else {
        return errors::bad_request(
            json!(1001),
            "Date format must be yyyy-MM-dd'T'HH:mm:ss.SSSZ.",
        );
    };
    let number = |name: &str, default: usize| match get(name) {
        None => Some(default),
        Some(text) => text.trim().parse::<usize>().ok(),
    };
    let (Some(limit), Some(offset)) = (number("limit", 30), number("offset", 0)) else {
        return errors::bad_request(json!(1), "Params Error.");
    };
    if limit == 0 || limit > 1000 || offset + limit > 10_000 {
        return errors::bad_request(json!(1000), "Number of rows exceeded the limits.");
    }
    let book = &state.providers[p].mp;
    let collector = book.user_id;
    let mut found: Vec<(&MpPayment, Value)> = book
        .payments
        .values()
        .filter(|pay| date_of(pay, range).is_some_and(|d| d >= begin && d <= end))
        .map(|pay| (pay, pay.json(collector)))
        .filter(|(_, json)| {
            FILTERS.iter().all(|f| match get(f) {
                None => true,
                Some(wanted) => field_text(json, f).as_deref() == Some(wanted),
            })
        })
        .collect();
    found.sort_by(|(a, _), (b, _)| {
        let order = if sort == "id" {
            a.id.cmp(&b.id)
        } else {
            date_of(a, sort)
                .cmp(&date_of(b, sort))
                .then(a.id.cmp(&b.id))
        };
        if descending {
            order.reverse()
        } else {
            order
        }
    });
    let total = found.len();
    let results: Vec<Value> = found
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(_, json)| json)
        .collect();
    Reply::json(
        200,
        &json!({"paging": {"total": total, "limit": limit, "offset": offset}, "results": results}),
    )
}
