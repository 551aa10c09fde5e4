//! The events feed: `GET /v1/events` — `?type=&created[gte]=&starting_after=&limit=` →
//! `{"object": "list", "url": "/v1/events", "data": [...], "has_more": bool}`, newest first — and
//! `GET /v1/events/{id}`. Each event is the fact exactly as it was pushed (`{"id", "type", "created_at", "data"}`,
//! the stored body's bytes), so a merchant who missed a delivery reads the same thing it would have received.
//!
//! A client reads the facts it owns (`domain_events.client`: its intents, their payments and refunds); a client
//! configured with `all_events = true` (a back office) reads every fact, those of payments that arrived only by
//! webhook included. Another client's event is 404 `event_not_found` on its own, and 422 `resource_missing` as a
//! cursor: neither tells one client what another has. Every parameter is checked before the database is asked,
//! in the payment intents list's way ([`super::list`]): an unknown or repeated one, a value out of its bounds, a
//! NUL or a control character is a 4xx naming it (`param`).

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use hookline_core::domain_events::{self, EventType, FeedError, FeedFilter, FeedPage, Reader};
use time::OffsetDateTime;

use super::error::ApiError;
use super::list::{cursor, each_param, page_limit, unix_secs, DEFAULT_LIMIT};
use super::{serve, ApiState, Reply, Route};

/// The parameters the list takes.
pub(crate) const PARAMS: &[&str] = &["type", "created[gte]", "starting_after", "limit"];
/// Longest path id looked at (a fact's id is 36 characters; longer text names no event).
const MAX_ID_BYTES: usize = 255;

/// A page of `GET /v1/events` (the OpenAPI schema `EventList`; [`list_body`] writes it around the stored bytes).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // a schema: the list is written by list_body
pub(crate) struct EventList {
    /// Always `list`.
    #[schema(value_type = String, example = "list")]
    object: &'static str,
    /// Always `/v1/events`.
    #[schema(value_type = String, example = "/v1/events")]
    url: &'static str,
    /// The page, newest first: each fact exactly as it was pushed.
    data: Vec<crate::schema::AnyEvent>,
    /// Whether older facts follow (ask again with `starting_after` = the last id).
    has_more: bool,
}

/// The query of `GET /v1/events` (the OpenAPI parameters; [`parse`] reads the query string itself, and a unit test
/// holds these names to [`PARAMS`]).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // a schema: the parser reads the query itself
pub(crate) struct EventsQuery {
    /// Only facts of this type.
    #[param(rename = "type", value_type = Option<crate::schema::EventTypeName>)]
    kind: Option<String>,
    /// Only facts recorded at or after this second (Unix time).
    #[param(rename = "created[gte]", minimum = 0, maximum = 253_402_300_799_i64)]
    created_gte: Option<i64>,
    /// A fact id: the page starts after it (older facts).
    #[param(pattern = "^evt_[0-9a-f]{32}$")]
    starting_after: Option<String>,
    /// Page size, 1 to 100 (default 10).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
}

/// The event's path id.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // a schema: the handler reads the path itself
pub(crate) struct EventId {
    /// The fact's id (`evt_…`, also its `webhook-id`).
    #[param(
        pattern = "^evt_[0-9a-f]{32}$",
        example = "evt_3f0c9a2b4d6e8f1a3c5e7a9b1d3f5a7c"
    )]
    id: String,
}

/// `GET /v1/events`.
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "list_events",
    tag = "events",
    params(EventsQuery),
    responses(
        (status = 200, description = "A page of the facts this client may see, newest first", body = EventList),
        crate::schema::ReadErrors,
    ),
)]
pub async fn list(req: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    serve(Route::ListEvents, async {
        let client = state.keys.authenticate(&req)?;
        let query = parse(req.query_string())?;
        let reader = reader(&state, client);
        let page = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                domain_events::list_for_client(
                    &mut *conn,
                    reader,
                    &query.filter,
                    query.starting_after.as_deref(),
                    query.limit,
                )
                .await
                .map_err(|e| match e {
                    FeedError::UnknownCursor => {
                        ApiError::field("resource_missing", "starting_after", "no such event")
                    }
                    FeedError::Database(e) => ApiError::database(e, "list the events"),
                })
            })
            .await?;
        Ok(Reply {
            status: StatusCode::OK,
            body: list_body(&page),
            replayed: false,
        })
    })
    .await
}

/// `GET /v1/events/{id}`.
#[utoipa::path(
    get,
    path = "/v1/events/{id}",
    operation_id = "get_event",
    tag = "events",
    params(EventId),
    responses(
        (status = 200, description = "The fact, exactly as it was pushed", body = crate::schema::AnyEvent),
        crate::schema::ReadErrors,
    ),
)]
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<ApiState>,
) -> HttpResponse {
    serve(Route::GetEvent, async {
        let client = state.keys.authenticate(&req)?;
        let id = path.into_inner();
        super::object_id("id", &id, MAX_ID_BYTES, ApiError::EventNotFound)?;
        // Any other shape names no fact: no query needed to say so.
        if !domain_events::is_fact_id(&id) {
            return Err(ApiError::EventNotFound);
        }
        let reader = reader(&state, client);
        let body = state
            .within_budget(async {
                let mut conn = state.conn().await?;
                domain_events::get_for_client(&mut *conn, reader, &id)
                    .await
                    .map_err(|e| ApiError::database(e, "read the event"))
            })
            .await?
            .ok_or(ApiError::EventNotFound)?;
        Ok(Reply {
            status: StatusCode::OK,
            body,
            replayed: false,
        })
    })
    .await
}

/// What the client `client` may read: every fact for a back office (`all_events`), else its own.
fn reader<'a>(state: &ApiState, client: &'a str) -> Reader<'a> {
    if state.keys.sees_all_events(client) {
        Reader::Everything
    } else {
        Reader::Client(client)
    }
}

/// The list's JSON, with each event's stored bytes as they are: they are the body every destination received
/// and every signature covered, and parsing them to write them again could only change them. (They were written
/// by `serde_json` when the fact was recorded and a fact's row is never updated: each is one JSON object.)
fn list_body(page: &FeedPage) -> Vec<u8> {
    let events: usize = page.bodies.iter().map(|b| b.len() + 1).sum();
    let mut body = Vec::with_capacity(64 + events);
    body.extend_from_slice(br#"{"object":"list","url":"/v1/events","data":["#);
    for (i, event) in page.bodies.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(event);
    }
    body.extend_from_slice(if page.has_more {
        br#"],"has_more":true}"#
    } else {
        br#"],"has_more":false}"#
    });
    body
}

/// The list's parameters, checked.
#[derive(Debug)]
struct FeedQuery {
    limit: i64,
    starting_after: Option<String>,
    filter: FeedFilter,
}

/// Reads and checks the query string (percent-encoded, as the request carries it).
fn parse(query: &str) -> Result<FeedQuery, ApiError> {
    let mut q = FeedQuery {
        limit: DEFAULT_LIMIT,
        starting_after: None,
        filter: FeedFilter::default(),
    };
    each_param(query, PARAMS, |param, value| {
        match param {
            "limit" => q.limit = page_limit(&value, domain_events::MAX_FEED_LIMIT)?,
            "starting_after" => {
                let id = cursor(param, &value, "no such event")?;
                // An id no fact can have is simply not one the client may see.
                if !domain_events::is_fact_id(&id) {
                    return Err(ApiError::field("resource_missing", param, "no such event"));
                }
                q.starting_after = Some(id);
            }
            "type" => {
                q.filter.ty = Some(EventType::parse(&value).ok_or_else(|| {
                    let all: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                    ApiError::field(
                        "type_invalid",
                        "type",
                        format!("type must be one of {}", all.join(", ")),
                    )
                })?)
            }
            created => {
                let secs = unix_secs(created, &value)?;
                let from = OffsetDateTime::from_unix_timestamp(secs).map_err(|_| {
                    ApiError::field("created_invalid", created, "not a representable time")
                })?;
                q.filter.created_from = Some(from);
            }
        }
        Ok(())
    })?;
    Ok(q)
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
        let q = parse("").unwrap();
        assert_eq!(
            (q.limit, q.starting_after, q.filter.ty),
            (DEFAULT_LIMIT, None, None)
        );
        let id = domain_events::fact_id(EventType::PaymentSucceeded, "st/pi_1");
        let q = parse(&format!(
            "limit=100&starting_after={id}&type=payment_intent.canceled&created%5Bgte%5D=10"
        ))
        .unwrap();
        assert_eq!(q.limit, 100);
        assert_eq!(q.starting_after.as_deref(), Some(id.as_str()));
        assert_eq!(q.filter.ty, Some(EventType::PaymentIntentCanceled));
        assert_eq!(q.filter.created_from.unwrap().unix_timestamp(), 10);
        for t in EventType::ALL {
            assert_eq!(
                parse(&format!("type={}", t.as_str())).unwrap().filter.ty,
                Some(t)
            );
        }
    }

    #[test]
    fn hostile_parameters_are_refused_by_name() {
        for limit in ["0", "101", "-1", "abc", "", "99999999999999999999999"] {
            assert_eq!(
                code(&format!("limit={limit}")),
                ("limit_invalid", "limit".into()),
                "{limit}"
            );
        }
        assert_eq!(
            code("limit=1&limit=2"),
            ("duplicate_parameter", "limit".into())
        );
        assert_eq!(
            code("type=payment.succeeded&type=payment.failed"),
            ("duplicate_parameter", "type".into())
        );
        assert_eq!(code("offset=3"), ("unknown_parameter", "offset".into()));
        assert_eq!(
            code("created[gt]=1"),
            ("unknown_parameter", "created[gt]".into())
        );
        assert_eq!(
            code("ending_before=evt_1"),
            ("unknown_parameter", "ending_before".into())
        );
        for t in [
            "payment.refunded",
            "",
            "PAYMENT.SUCCEEDED",
            "payment.succeeded%00",
            "*",
        ] {
            assert_eq!(
                code(&format!("type={t}")),
                ("type_invalid", "type".into()),
                "{t}"
            );
        }
        assert_eq!(
            code("created[gte]=-1"),
            ("created_invalid", "created[gte]".into())
        );
        assert_eq!(
            code("created[gte]=253402300800"),
            ("created_invalid", "created[gte]".into())
        );
        assert_eq!(code("starting_after=evt_%00").0, "invalid_text");
        assert_eq!(code("starting_after=evt_%0A").0, "control_character");
        for cursor in [
            String::new(),
            "pi_hl_1".into(),
            "evt_XYZ".into(),
            format!("evt_{}", "a".repeat(10_000)),
        ] {
            assert_eq!(
                code(&format!("starting_after={cursor}")),
                ("resource_missing", "starting_after".into()),
                "{cursor:.40}"
            );
        }
    }

    #[test]
    fn the_list_embeds_the_stored_bodies_as_they_are() {
        let a =
            br#"{"id":"evt_a","type":"payment.succeeded","created_at":"x","data":{"b":1,"a":2}}"#;
        let b = br#"{"id":"evt_b" ,"data":{}}"#;
        let page = FeedPage {
            bodies: vec![a.to_vec(), b.to_vec()],
            has_more: true,
        };
        let body = list_body(&page);
        let text = String::from_utf8(body.clone()).unwrap();
        // Byte for byte: key order and spacing kept.
        assert!(text.contains(std::str::from_utf8(a).unwrap()), "{text}");
        assert!(text.contains(r#"{"id":"evt_b" ,"data":{}}"#), "{text}");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["url"], "/v1/events");
        assert_eq!(v["has_more"], true);
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        let empty = list_body(&FeedPage {
            bodies: vec![],
            has_more: false,
        });
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&empty).unwrap(),
            serde_json::json!({"object": "list", "url": "/v1/events", "data": [], "has_more": false})
        );
    }
}
