//! The merchant API's OpenAPI 3.1 document, derived from the handlers' own types by `utoipa`: every route's
//! `#[utoipa::path]` sits on its handler, every body is a Rust type (`Intent`, `IntentList`, `RefundCreated`,
//! `ErrorBody`, the request bodies beside their parsers), and the facts hookline hands on are the `webhooks`
//! section, built from [`EventType::ALL`] and the facts' own payload types. Served without authentication at
//! `GET /v1/openapi.json`; `docs/openapi.json` is its committed copy, and a unit test fails when the two differ
//! (`HOOKLINE_WRITE_OPENAPI=1 cargo test -p hookline-api openapi` rewrites it).

use actix_web::HttpResponse;
use hookline_core::domain_events::EventType;
use serde_json::{json, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, RefOr, Schema};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::schema::{event_schema_name, AnyEvent, EventTypeName};

/// The document's route (and `docs/openapi.json`'s source).
pub const PATH: &str = "/v1/openapi.json";

/// The security scheme every route but the document itself requires.
const BEARER: &str = "bearer";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "hookline merchant API",
        description = "Payment intents, their confirmation, cancel, capture and refunds, charged exactly once \
through the merchant's gateway (Stripe, Mercado Pago, Pagar.me). Every request carries `Authorization: Bearer KEY` \
(a key of one `[[api.clients]]` entry) and sees only that client's objects: another client's is 404. Writes take \
an `Idempotency-Key`: its first answer is stored and replayed for 24 h. The facts hookline hands on are in \
`webhooks`, signed per Standard Webhooks.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        crate::intents::create,
        crate::list::list,
        crate::intents::get,
        crate::intents::confirm,
        crate::intents::cancel,
        crate::intents::capture,
        crate::intents::refund,
        crate::events::list,
        crate::events::get,
        crate::endpoints::resend,
        crate::endpoints::create,
        crate::endpoints::list,
        crate::endpoints::get,
        crate::endpoints::update,
        crate::endpoints::delete,
        crate::endpoints::rotate_secret,
        crate::endpoints::deliveries,
        crate::subscriptions::create,
        crate::subscriptions::list,
        crate::subscriptions::get,
        crate::subscriptions::update,
        crate::subscriptions::cancel,
        openapi_json,
    ),
    components(schemas(crate::error::ErrorBody, crate::error::ErrorType, EventTypeName, AnyEvent)),
    modifiers(&Bearer),
    security(("bearer" = [])),
    tags(
        (name = "payment_intents", description = "A payment, from checkout to its outcome"),
        (name = "refunds", description = "Money back, never beyond what was captured"),
        (name = "subscriptions", description = "Charged every cycle with the payment method saved at the provider"),
        (name = "events", description = "The facts hookline hands on, to read again: the same payload as pushed"),
        (name = "webhook_endpoints", description = "Where the client's facts are POSTed, signed per Standard Webhooks"),
        (name = "meta", description = "This document"),
    ),
)]
struct ApiDoc;

/// `GET /v1/openapi.json`: this document, without authentication (a client generator or a fuzzer reads it first).
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "get_openapi_document",
    tag = "meta",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json", body = Object)),
)]
pub async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(text())
}

/// The document as JSON.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    optional_bodies(&mut doc);
    add_links(&mut doc);
    add_webhooks(&mut doc);
    doc
}

/// A body declared `Option<T>` is one the request may leave out (an empty confirm, cancel or capture), not a JSON
/// `null` (which the API refuses as `invalid_json`): utoipa spells it `oneOf: [null, T]`, required; this makes it
/// `T`, not required.
fn optional_bodies(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for op in item.values_mut() {
            let Some(body) = op.get_mut("requestBody") else {
                continue;
            };
            let Some(schema) = body.pointer_mut("/content/application~1json/schema") else {
                continue;
            };
            let inner = match schema.get("oneOf").and_then(Value::as_array) {
                Some(one_of) if one_of.len() == 2 && one_of[0] == json!({"type": "null"}) => {
                    one_of[1].clone()
                }
                _ => continue,
            };
            *schema = inner;
            body["required"] = Value::Bool(false);
        }
    }
}

/// The document as the bytes served and committed: pretty-printed, with a final newline.
pub fn text() -> String {
    let mut s = serde_json::to_string_pretty(&document()).unwrap_or_default();
    s.push('\n');
    s
}

/// The `bearer` scheme: `Authorization: Bearer KEY`.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A key of one `[[api.clients]]` entry; every object belongs to that client",
                    ))
                    .build(),
            ),
        );
    }
}

/// OpenAPI links from a created intent or webhook endpoint to what can be done with it: a client (or a stateful
/// fuzzer) follows `id` from the 201 of `create_payment_intent` into the other operations. Written as JSON: utoipa 5 spells a
/// link's `operationId` as `operation_id`.
fn add_links(doc: &mut Value) {
    // (the answer's pointer, the id it yields, the operations that take it as `id`)
    // (A page of events is not linked to one event: an empty page has no first id, and a fuzzer following the
    // link reports it as a failure.)
    let links: [(&str, &str, &[&str]); 3] = [
        (
            "/paths/~1v1~1payment_intents/post/responses/201",
            "$response.body#/id",
            &[
                "get_payment_intent",
                "confirm_payment_intent",
                "cancel_payment_intent",
                "capture_payment_intent",
                "create_refund",
            ],
        ),
        (
            "/paths/~1v1~1webhook_endpoints/post/responses/201",
            "$response.body#/id",
            &[
                "get_webhook_endpoint",
                "update_webhook_endpoint",
                "rotate_webhook_endpoint_secret",
                "list_webhook_deliveries",
                "delete_webhook_endpoint",
            ],
        ),
        (
            "/paths/~1v1~1subscriptions/post/responses/201",
            "$response.body#/id",
            &[
                "get_subscription",
                "update_subscription",
                "cancel_subscription",
            ],
        ),
    ];
    for (pointer, id, ops) in links {
        let Some(answer) = doc.pointer_mut(pointer) else {
            continue;
        };
        let mut map = serde_json::Map::new();
        for op in ops {
            map.insert(
                (*op).to_owned(),
                json!({"operationId": op, "parameters": {"id": id}}),
            );
        }
        answer["links"] = Value::Object(map);
    }
}

/// A schema and the schemas it refers to.
type Named = (String, RefOr<Schema>, Vec<(String, RefOr<Schema>)>);

/// `T`'s schema, under its name, with the schemas it refers to.
fn named<T: ToSchema>() -> Named {
    let mut deps = Vec::new();
    T::schemas(&mut deps);
    (T::name().into_owned(), T::schema(), deps)
}

/// What a fact's `data` carries, per type: the payload types the facts are serialised from.
fn fact_data(ty: EventType) -> Named {
    use hookline_billing::claims;
    use hookline_payments::facts;
    match ty {
        EventType::PaymentSucceeded | EventType::PaymentFailed | EventType::PaymentCanceled => {
            named::<facts::PaymentFact<'static>>()
        }
        EventType::RefundApplied => named::<facts::RefundFact<'static>>(),
        EventType::DisputeOpened | EventType::DisputeWon | EventType::DisputeLost => {
            named::<facts::DisputeFact<'static>>()
        }
        EventType::SubscriptionCharged => {
            let (billed, billed_schema, mut deps) = named::<claims::ChargedFact<'static>>();
            let (invoiced, invoiced_schema, more) = named::<facts::SubscriptionFact<'static>>();
            deps.extend(more);
            deps.push((billed.clone(), billed_schema));
            deps.push((invoiced.clone(), invoiced_schema));
            // anyOf, not oneOf: nothing forbids one payload from matching both shapes.
            let one_of = utoipa::openapi::schema::AnyOfBuilder::new()
                .item(utoipa::openapi::Ref::from_schema_name(billed))
                .item(utoipa::openapi::Ref::from_schema_name(invoiced))
                .description(Some(
                    "billed by hookline (`billed_by: \"hookline\"`) or by Stripe's own invoice",
                ));
            ("SubscriptionChargedFact".to_owned(), one_of.into(), deps)
        }
        EventType::SubscriptionPaymentFailed => named::<claims::PaymentFailedFact<'static>>(),
        EventType::SubscriptionPastDue => named::<claims::PastDueFact<'static>>(),
        EventType::SubscriptionCreated => named::<hookline_billing::manage::CreatedFact<'static>>(),
        EventType::SubscriptionUpdated => named::<hookline_billing::manage::UpdatedFact<'static>>(),
        EventType::SubscriptionCanceled => {
            named::<hookline_billing::manage::CanceledFact<'static>>()
        }
        EventType::PaymentIntentSucceeded
        | EventType::PaymentIntentFailed
        | EventType::PaymentIntentCanceled
        | EventType::PaymentIntentAmountCapturableUpdated => {
            named::<hookline_payments::intents::IntentFact<'static>>()
        }
    }
}

/// The OpenAPI 3.1 `webhooks` section: one entry per fact type hookline hands on ([`EventType::ALL`]), the POST
/// a merchant's endpoint receives — the Standard Webhooks headers and the envelope `{id, type, created_at, data}`
/// whose `data` is the fact's own payload type.
fn add_webhooks(doc: &mut Value) {
    let mut webhooks = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for ty in EventType::ALL {
        let (data_name, data_schema, deps) = fact_data(ty);
        for (name, schema) in deps.into_iter().chain([(data_name.clone(), data_schema)]) {
            schemas.insert(name, serde_json::to_value(schema).unwrap_or(Value::Null));
        }
        let event_name = event_schema_name(ty);
        schemas.insert(
            event_name.clone(),
            json!({
                "type": "object",
                "description": format!("The `{}` fact, as POSTed and as listed", ty.as_str()),
                "required": ["id", "type", "created_at", "data"],
                "properties": {
                    "id": {"type": "string", "pattern": "^evt_[0-9a-f]{32}$",
                           "description": "The fact's id, derived from the fact: also the `webhook-id` header; deduplicate by it"},
                    "type": {"type": "string", "const": ty.as_str()},
                    "created_at": {"type": "string", "format": "date-time"},
                    "data": {"$ref": format!("#/components/schemas/{data_name}")},
                },
                "additionalProperties": false,
            }),
        );
        webhooks.insert(
            ty.as_str().to_owned(),
            json!({"post": {
                "operationId": format!("on_{}", ty.as_str().replace('.', "_")),
                "summary": format!("The `{}` fact", ty.as_str()),
                "description": "Delivered at least once, signed per Standard Webhooks with the endpoint's secret: \
verify `webhook-signature` over `{webhook-id}.{webhook-timestamp}.{body}` before anything else, deduplicate by \
`webhook-id`, answer 2xx quickly. Order is not promised: keep the highest `payment_version` applied.",
                "parameters": [
                    {"name": "webhook-id", "in": "header", "required": true,
                     "schema": {"type": "string", "pattern": "^evt_[0-9a-f]{32}$"},
                     "description": "The fact's id: the same on every attempt and every resend"},
                    {"name": "webhook-timestamp", "in": "header", "required": true,
                     "schema": {"type": "string", "pattern": "^[0-9]{1,12}$"},
                     "description": "Unix seconds of this attempt; refuse one far from your clock"},
                    {"name": "webhook-signature", "in": "header", "required": true,
                     "schema": {"type": "string", "maxLength": 1024},
                     "description": "`v1,<base64 HMAC-SHA256>` per active secret, space-separated (two during a secret's rotation)"},
                ],
                "requestBody": {"required": true, "content": {"application/json": {
                    "schema": {"$ref": format!("#/components/schemas/{event_name}")}}}},
                "responses": {
                    "2XX": {"description": "Received: not sent again"},
                    "410": {"description": "Gone for good: hookline stops sending to this endpoint"},
                    "default": {"description": "Any other answer (or none): retried with backoff"},
                },
            }}),
        );
    }
    if let Some(components) = doc
        .get_mut("components")
        .and_then(|c| c.get_mut("schemas"))
        .and_then(Value::as_object_mut)
    {
        components.extend(schemas);
    }
    if let Some(root) = doc.as_object_mut() {
        root.insert("webhooks".to_owned(), Value::Object(webhooks));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema<'a>(doc: &'a Value, name: &str) -> &'a Value {
        &doc["components"]["schemas"][name]
    }

    /// The committed copy is what the code generates: `HOOKLINE_WRITE_OPENAPI=1` rewrites it.
    #[test]
    fn openapi_committed_copy_matches_the_code() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
        let generated = text();
        if std::env::var_os("HOOKLINE_WRITE_OPENAPI").is_some() {
            std::fs::write(&path, &generated).expect("write docs/openapi.json");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json differs from the document the code generates: run \
             `HOOKLINE_WRITE_OPENAPI=1 cargo test -p hookline-api openapi` and commit it"
        );
    }

    #[test]
    fn openapi_is_3_1_with_every_route_and_fact() {
        let doc = document();
        assert!(doc["openapi"].as_str().unwrap_or("").starts_with("3.1"));
        for (path, method) in [
            ("/v1/payment_intents", "post"),
            ("/v1/payment_intents", "get"),
            ("/v1/payment_intents/{id}", "get"),
            ("/v1/payment_intents/{id}/confirm", "post"),
            ("/v1/payment_intents/{id}/cancel", "post"),
            ("/v1/payment_intents/{id}/capture", "post"),
            ("/v1/payment_intents/{id}/refunds", "post"),
            ("/v1/events", "get"),
            ("/v1/events/{id}", "get"),
            ("/v1/events/{id}/resend", "post"),
            ("/v1/webhook_endpoints", "post"),
            ("/v1/webhook_endpoints", "get"),
            ("/v1/webhook_endpoints/{id}", "get"),
            ("/v1/webhook_endpoints/{id}", "post"),
            ("/v1/webhook_endpoints/{id}", "delete"),
            ("/v1/webhook_endpoints/{id}/rotate_secret", "post"),
            ("/v1/webhook_endpoints/{id}/deliveries", "get"),
            ("/v1/subscriptions", "post"),
            ("/v1/subscriptions", "get"),
            ("/v1/subscriptions/{id}", "get"),
            ("/v1/subscriptions/{id}", "post"),
            ("/v1/subscriptions/{id}/cancel", "post"),
            ("/v1/openapi.json", "get"),
        ] {
            assert!(doc["paths"][path][method].is_object(), "{method} {path}");
        }
        for ty in EventType::ALL {
            let hook = &doc["webhooks"][ty.as_str()]["post"];
            assert!(hook.is_object(), "{}", ty.as_str());
            let event = hook["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                .as_str()
                .unwrap_or_default()
                .trim_start_matches("#/components/schemas/");
            let data = schema(&doc, event)["properties"]["data"]["$ref"]
                .as_str()
                .unwrap_or_default()
                .trim_start_matches("#/components/schemas/");
            assert!(
                schema(&doc, data).is_object(),
                "{} data {data}",
                ty.as_str()
            );
        }
        // Every reference resolves.
        let text = text();
        for (i, _) in text.match_indices("\"#/components/schemas/") {
            let name: String = text[i + 22..].chars().take_while(|c| *c != '"').collect();
            assert!(schema(&doc, &name).is_object(), "unresolved {name}");
        }
        assert_eq!(
            doc["components"]["securitySchemes"][BEARER]["scheme"],
            "bearer"
        );
        assert_eq!(
            doc["paths"]["/v1/openapi.json"]["get"]["security"],
            json!([{}])
        );
        // An empty confirm is a confirm: its body is optional, never `null`.
        let confirm = &doc["paths"]["/v1/payment_intents/{id}/confirm"]["post"]["requestBody"];
        assert_eq!(confirm["required"], json!(false));
        assert_eq!(
            confirm["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ConfirmPaymentIntent"
        );
    }

    /// The create body's schema names exactly the fields the parser takes, with the parser's bounds.
    #[test]
    fn openapi_create_body_holds_to_the_parser() {
        use crate::intents::{
            CREATE_FIELDS, MAX_AMOUNT, MAX_CUSTOMER_CHARS, MAX_DESCRIPTION_CHARS,
            MAX_ORDER_REFERENCE_CHARS, MAX_REASON_CHARS,
        };
        let doc = document();
        let create = schema(&doc, "CreatePaymentIntent");
        let mut documented: Vec<&str> = create["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        documented.sort_unstable();
        let mut parsed = CREATE_FIELDS.to_vec();
        parsed.sort_unstable();
        assert_eq!(documented, parsed);
        assert_eq!(create["additionalProperties"], json!(false));
        let p = &create["properties"];
        assert_eq!(p["amount"]["maximum"], json!(MAX_AMOUNT));
        assert_eq!(p["customer"]["maxLength"], json!(MAX_CUSTOMER_CHARS));
        assert_eq!(p["description"]["maxLength"], json!(MAX_DESCRIPTION_CHARS));
        assert_eq!(
            p["order_reference"]["maxLength"],
            json!(MAX_ORDER_REFERENCE_CHARS)
        );
        let refund = schema(&doc, "CreateRefund");
        assert_eq!(refund["properties"]["amount"]["maximum"], json!(MAX_AMOUNT));
        assert_eq!(
            refund["properties"]["reason"]["maxLength"],
            json!(MAX_REASON_CHARS)
        );
        let capture = schema(&doc, "CapturePaymentIntent");
        assert_eq!(
            capture["properties"]["amount_to_capture"]["maximum"],
            json!(MAX_AMOUNT)
        );
        // The list's parameters are the ones it parses.
        let list = &doc["paths"]["/v1/payment_intents"]["get"]["parameters"];
        let mut names: Vec<&str> = list
            .as_array()
            .map(|a| a.iter().filter_map(|p| p["name"].as_str()).collect())
            .unwrap_or_default();
        names.sort_unstable();
        let mut params = crate::list::PARAMS.to_vec();
        params.sort_unstable();
        assert_eq!(names, params);
        let feed = &doc["paths"]["/v1/events"]["get"]["parameters"];
        let mut names: Vec<&str> = feed
            .as_array()
            .map(|a| a.iter().filter_map(|p| p["name"].as_str()).collect())
            .unwrap_or_default();
        names.sort_unstable();
        let mut params = crate::events::PARAMS.to_vec();
        params.sort_unstable();
        assert_eq!(names, params);
    }

    /// The subscription bodies' schemas name exactly the fields their parsers take, with the same bounds.
    #[test]
    fn openapi_subscription_bodies_hold_to_the_parsers() {
        use crate::subscriptions::{CANCEL_FIELDS, CREATE_FIELDS, LIST_PARAMS, UPDATE_FIELDS};
        let doc = document();
        let fields = |name: &str| {
            let mut f: Vec<String> = schema(&doc, name)["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            f.sort_unstable();
            f
        };
        let sorted = |f: &[&str]| {
            let mut f: Vec<String> = f.iter().map(|s| (*s).to_owned()).collect();
            f.sort_unstable();
            f
        };
        assert_eq!(fields("CreateSubscription"), sorted(CREATE_FIELDS));
        assert_eq!(fields("UpdateSubscription"), sorted(UPDATE_FIELDS));
        assert_eq!(fields("CancelSubscription"), sorted(CANCEL_FIELDS));
        for name in [
            "CreateSubscription",
            "UpdateSubscription",
            "CancelSubscription",
        ] {
            assert_eq!(
                schema(&doc, name)["additionalProperties"],
                json!(false),
                "{name}"
            );
        }
        // The saved method's names are the payment-intent create's for a saved card.
        assert_eq!(
            fields("SubscriptionStripeParams"),
            sorted(&["customer", "payment_method"])
        );
        assert_eq!(
            fields("SubscriptionSavedCardParams"),
            sorted(&["card_id", "customer_id"])
        );
        assert_eq!(
            schema(&doc, "CreateSubscription")["properties"]["amount"]["maximum"],
            json!(hookline_billing::manage::MAX_AMOUNT)
        );
        assert_eq!(
            schema(&doc, "IntervalName")["enum"],
            json!(["month", "year"])
        );
        let list = &doc["paths"]["/v1/subscriptions"]["get"]["parameters"];
        let mut names: Vec<&str> = list
            .as_array()
            .map(|a| a.iter().filter_map(|p| p["name"].as_str()).collect())
            .unwrap_or_default();
        names.sort_unstable();
        let mut params = LIST_PARAMS.to_vec();
        params.sort_unstable();
        assert_eq!(names, params);
        let statuses: Vec<&str> = hookline_billing::SubscriptionStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(schema(&doc, "SubscriptionStatus")["enum"], json!(statuses));
        // A created subscription links to what can be done with it.
        let links = &doc["paths"]["/v1/subscriptions"]["post"]["responses"]["201"]["links"];
        for op in [
            "get_subscription",
            "update_subscription",
            "cancel_subscription",
        ] {
            assert_eq!(links[op]["operationId"], op);
        }
    }

    /// Every status and capture method the code can answer, and only those.
    #[test]
    fn openapi_enums_are_the_codes() {
        let doc = document();
        let statuses: Vec<&str> = hookline_payments::model::IntentStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(
            schema(&doc, "IntentStatus")["enum"],
            json!(statuses),
            "IntentStatus"
        );
    }
}
