//! `GET /v1/payment_intents`: the client's intents, newest first, a page at a time —
//! `?limit=&starting_after=&ending_before=&status=&order_reference=&created=&created[gt]=&created[gte]=&created[lt]=&created[lte]=`
//! → `{"object": "list", "url": "/v1/payment_intents", "data": [...], "has_more": bool}`.
//!
//! Every parameter is checked before the database is asked: an unknown or repeated one, a value out of its
//! bounds, a NUL or a control character is a 4xx naming it (`param`). A cursor that is not one of the client's
//! intents (another client's included) is 422 `resource_missing`: the list never tells one client what another has.

use std::borrow::Cow;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use hookline_core::input;
use hookline_payments::intents::{self, IntentPage, ListCursor, ListError, ListFilter};
use hookline_payments::model::IntentStatus;
use time::OffsetDateTime;

use super::error::ApiError;
use super::intents::MAX_ORDER_REFERENCE_CHARS;
use super::{serve, ApiState, Reply, Route};

/// A page's size when `limit` is not given.
pub const DEFAULT_LIMIT: i64 = 10;
/// Longest cursor accepted (longer ids cannot exist).
const MAX_CURSOR_BYTES: usize = 255;
/// The last second `created` may name: the end of the year 9999, as far as a timestamp column goes sensibly.
const MAX_CREATED_SECS: i64 = 253_402_300_799;
/// The parameters the list takes.
pub(crate) const PARAMS: &[&str] = &[
    "limit",
    "starting_after",
    "ending_before",
    "status",
    "order_reference",
    "created",
    "created[gt]",
    "created[gte]",
    "created[lt]",
    "created[lte]",
];

/// A page of `GET /v1/payment_intents` (the OpenAPI schema `PaymentIntentList`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = PaymentIntentList)]
pub struct IntentList {
    /// Always `list`.
    #[schema(value_type = String, example = "list")]
    pub object: &'static str,
    /// Always `/v1/payment_intents`.
    #[schema(value_type = String, example = "/v1/payment_intents")]
    pub url: &'static str,
    /// The page, newest first.
    pub data: Vec<intents::Intent>,
    /// Whether more intents follow the last of this page (ask again with `starting_after` = its id).
    pub has_more: bool,
}

/// The query of `GET /v1/payment_intents` (the OpenAPI parameters; [`parse`] reads the query string itself, and a
/// unit test holds these names to [`PARAMS`]).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // a schema: the parser reads the query itself
pub(crate) struct ListParams {
    /// Page size, 1 to 100 (default 10).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
    /// A payment intent id: the page starts after it (older ones).
    #[param(max_length = 255)]
    starting_after: Option<String>,
    /// A payment intent id: the page ends before it (newer ones).
    #[param(max_length = 255)]
    ending_before: Option<String>,
    /// Only intents in this status.
    status: Option<hookline_payments::model::IntentStatus>,
    /// Only the intents of this order.
    #[param(max_length = 200)]
    order_reference: Option<String>,
    /// Created at exactly this second (Unix time).
    #[param(minimum = 0, maximum = 253_402_300_799_i64)]
    created: Option<i64>,
    /// Created after this second.
    #[param(rename = "created[gt]", minimum = 0, maximum = 253_402_300_799_i64)]
    created_gt: Option<i64>,
    /// Created at or after this second.
    #[param(rename = "created[gte]", minimum = 0, maximum = 253_402_300_799_i64)]
    created_gte: Option<i64>,
    /// Created before this second.
    #[param(rename = "created[lt]", minimum = 0, maximum = 253_402_300_799_i64)]
    created_lt: Option<i64>,
    /// Created at or before this second.
    #[param(rename = "created[lte]", minimum = 0, maximum = 253_402_300_799_i64)]
    created_lte: Option<i64>,
}

/// `GET /v1/payment_intents`.
#[utoipa::path(
    get,
    path = "/v1/payment_intents",
    operation_id = "list_payment_intents",
    tag = "payment_intents",
    params(ListParams),
    responses(
        (status = 200, description = "A page of the client's intents, newest first", body = IntentList),
        crate::schema::ReadErrors,
    ),
)]
pub async fn list(req: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    serve(Route::ListIntents, async {
        let client = state.keys.authenticate(&req)?;
        let query = parse(req.query_string())?;
        let page = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                intents::list_for_client(
                    &mut conn,
                    client,
                    &query.filter(),
                    query.cursor(),
                    query.limit,
                )
                .await
                .map_err(|e| match e {
                    ListError::UnknownCursor => ApiError::field(
                        "resource_missing",
                        query.cursor_param(),
                        "no such payment intent",
                    ),
                    ListError::Database(e) => ApiError::database(e, "list the payment intents"),
                })
            })
            .await?;
        let IntentPage { intents, has_more } = page;
        Reply::json(
            StatusCode::OK,
            &IntentList {
                object: "list",
                url: "/v1/payment_intents",
                data: intents,
                has_more,
            },
        )
    })
    .await
}

/// The list's parameters, checked.
#[derive(Debug, Default, PartialEq)]
struct ListQuery {
    limit: i64,
    starting_after: Option<String>,
    ending_before: Option<String>,
    status: Option<IntentStatus>,
    order_reference: Option<String>,
    created_from: Option<OffsetDateTime>,
    created_until: Option<OffsetDateTime>,
}

impl ListQuery {
    fn filter(&self) -> ListFilter<'_> {
        ListFilter {
            status: self.status,
            order_reference: self.order_reference.as_deref(),
            created_from: self.created_from,
            created_until: self.created_until,
        }
    }

    fn cursor(&self) -> ListCursor<'_> {
        match (&self.starting_after, &self.ending_before) {
            (Some(after), _) => ListCursor::After(after),
            (None, Some(before)) => ListCursor::Before(before),
            (None, None) => ListCursor::Newest,
        }
    }

    fn cursor_param(&self) -> &'static str {
        if self.starting_after.is_some() {
            "starting_after"
        } else {
            "ending_before"
        }
    }
}

/// Reads and checks the query string (percent-encoded, as the request carries it).
fn parse(query: &str) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery {
        limit: DEFAULT_LIMIT,
        ..ListQuery::default()
    };
    each_param(query, PARAMS, |param, value| {
        match param {
            "limit" => q.limit = page_limit(&value, intents::MAX_LIST_LIMIT)?,
            "starting_after" | "ending_before" => {
                let id = cursor(param, &value, "no such payment intent")?;
                if param == "starting_after" {
                    q.starting_after = Some(id);
                } else {
                    q.ending_before = Some(id);
                }
            }
            "status" => {
                q.status = Some(IntentStatus::parse(&value).map_err(|_| {
                    let all: Vec<&str> = IntentStatus::ALL.iter().map(|s| s.as_str()).collect();
                    ApiError::field(
                        "status_invalid",
                        "status",
                        format!("status must be one of {}", all.join(", ")),
                    )
                })?)
            }
            "order_reference" => {
                if value.is_empty() || value.chars().count() > MAX_ORDER_REFERENCE_CHARS {
                    return Err(ApiError::field(
                        "order_reference_invalid",
                        "order_reference",
                        format!(
                            "order_reference must be 1 to {MAX_ORDER_REFERENCE_CHARS} characters"
                        ),
                    ));
                }
                q.order_reference =
                    Some(input::line(param, &value, MAX_ORDER_REFERENCE_CHARS)?.to_owned());
            }
            created => {
                let secs = unix_secs(created, &value)?;
                // Every form is a half-open range [from, until) of whole seconds.
                let (from, until) = match created {
                    "created" => (Some(secs), Some(secs + 1)),
                    "created[gt]" => (Some(secs + 1), None),
                    "created[gte]" => (Some(secs), None),
                    "created[lt]" => (None, Some(secs)),
                    _ => (None, Some(secs + 1)),
                };
                let at = |s: i64| OffsetDateTime::from_unix_timestamp(s).ok();
                if let Some(from) = from.and_then(at) {
                    q.created_from = Some(q.created_from.map_or(from, |f| f.max(from)));
                }
                if let Some(until) = until.and_then(at) {
                    q.created_until = Some(q.created_until.map_or(until, |u| u.min(until)));
                }
            }
        }
        Ok(())
    })?;
    if q.starting_after.is_some() && q.ending_before.is_some() {
        return Err(ApiError::field(
            "cursor_conflict",
            "ending_before",
            "starting_after and ending_before cannot be used together",
        ));
    }
    Ok(q)
}

/// Walks a list's query string (percent-encoded, as the request carries it), handing `each` every parameter with
/// its value: an unknown parameter (`accepted` lists the known ones) or one given twice is refused naming it,
/// before `each` sees it.
pub(crate) fn each_param<'q>(
    query: &'q str,
    accepted: &[&'static str],
    mut each: impl FnMut(&'static str, Cow<'q, str>) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let mut seen: Vec<&'static str> = Vec::new();
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let Some(&param) = accepted.iter().find(|p| **p == name) else {
            // The name is the caller's text: bounded, and without control characters, before it is echoed as
            // `param`.
            let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
            return Err(ApiError::field(
                "unknown_parameter",
                name,
                format!("unknown parameter; accepted: {}", accepted.join(", ")),
            ));
        };
        if seen.contains(&param) {
            return Err(ApiError::field(
                "duplicate_parameter",
                param,
                "this parameter is given more than once",
            ));
        }
        seen.push(param);
        each(param, value)?;
    }
    Ok(())
}

/// A page's size: an integer from 1 to `max`, or 422 naming `limit`.
pub(crate) fn page_limit(value: &str, max: i64) -> Result<i64, ApiError> {
    value
        .parse::<i64>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            ApiError::field(
                "limit_invalid",
                "limit",
                format!("limit must be an integer from 1 to {max}"),
            )
        })
}

/// A cursor's id (`starting_after`, `ending_before`): one no row can have (empty, longer than any id) is 422
/// `resource_missing` with `missing` as its message, like an id of nobody's; a NUL or a control character is 400.
pub(crate) fn cursor(
    param: &'static str,
    value: &str,
    missing: &'static str,
) -> Result<String, ApiError> {
    if value.is_empty() || value.len() > MAX_CURSOR_BYTES {
        return Err(ApiError::field("resource_missing", param, missing));
    }
    Ok(input::line(param, value, MAX_CURSOR_BYTES)?.to_owned())
}

/// A `created` bound: whole Unix seconds from 0 to the end of the year 9999, or 422 naming `param`.
pub(crate) fn unix_secs(param: &'static str, value: &str) -> Result<i64, ApiError> {
    value
        .parse::<i64>()
        .ok()
        .filter(|s| (0..=MAX_CREATED_SECS).contains(s))
        .ok_or_else(|| {
            ApiError::field(
                "created_invalid",
                param,
                format!("{param} must be a Unix time in seconds from 0 to {MAX_CREATED_SECS}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(query: &str) -> (&'static str, String) {
        match parse(query) {
            Err(ApiError::InvalidField { code, param, .. }) => (code, param),
            Err(ApiError::InvalidInput(e)) => (e.code(), e.field().to_owned()),
            other => panic!("{query}: {other:?}"),
        }
    }

    #[test]
    fn defaults_and_every_parameter() {
        assert_eq!(parse("").unwrap().limit, DEFAULT_LIMIT);
        let q = parse(
            "limit=100&starting_after=pi_hl_1&status=succeeded&order_reference=o%201&created[gte]=10&created[lt]=20",
        )
        .unwrap();
        assert_eq!(q.limit, 100);
        assert_eq!(q.starting_after.as_deref(), Some("pi_hl_1"));
        assert_eq!(q.status, Some(IntentStatus::Succeeded));
        assert_eq!(q.order_reference.as_deref(), Some("o 1"));
        assert_eq!(q.created_from.unwrap().unix_timestamp(), 10);
        assert_eq!(q.created_until.unwrap().unix_timestamp(), 20);
        // Percent-encoded brackets, as a client library sends them.
        let q = parse("created%5Bgt%5D=10&created%5Blte%5D=20").unwrap();
        assert_eq!(q.created_from.unwrap().unix_timestamp(), 11);
        assert_eq!(q.created_until.unwrap().unix_timestamp(), 21);
        let q = parse("created=5").unwrap();
        assert_eq!(
            (
                q.created_from.unwrap().unix_timestamp(),
                q.created_until.unwrap().unix_timestamp()
            ),
            (5, 6)
        );
    }

    #[test]
    fn hostile_parameters_are_refused_by_name() {
        assert_eq!(code("limit=0"), ("limit_invalid", "limit".into()));
        assert_eq!(code("limit=101"), ("limit_invalid", "limit".into()));
        assert_eq!(code("limit=ten"), ("limit_invalid", "limit".into()));
        assert_eq!(
            code("limit=99999999999999999999999"),
            ("limit_invalid", "limit".into())
        );
        assert_eq!(
            code("limit=1&limit=2"),
            ("duplicate_parameter", "limit".into())
        );
        assert_eq!(code("offset=3"), ("unknown_parameter", "offset".into()));
        assert_eq!(code("status=paid"), ("status_invalid", "status".into()));
        assert_eq!(
            code("created[gte]=-1"),
            ("created_invalid", "created[gte]".into())
        );
        assert_eq!(
            code("created[eq]=1"),
            ("unknown_parameter", "created[eq]".into())
        );
        assert_eq!(
            code("starting_after=a&ending_before=b"),
            ("cursor_conflict", "ending_before".into())
        );
        assert_eq!(code("starting_after=pi%00x").0, "invalid_text");
        assert_eq!(code("order_reference=a%0Ab").0, "control_character");
        let huge = format!("starting_after={}", "x".repeat(10_000));
        assert_eq!(code(&huge), ("resource_missing", "starting_after".into()));
        let long_order = format!("order_reference={}", "o".repeat(201));
        assert_eq!(
            code(&long_order),
            ("order_reference_invalid", "order_reference".into())
        );
    }
}
