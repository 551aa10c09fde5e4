//! Validation of `POST /core/v5/orders` and `DELETE /core/v5/charges/{id}` bodies, before anything executes (an
//! invalid request executes nothing and saves nothing under its idempotency key). Errors are Pagar.me's 422
//! `{"message": "The request is invalid.", "errors": {"order.items[0].amount": ["…"]}}`, every field at once.

use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Date, Duration, OffsetDateTime};

use super::cards::{self, CardSource};
use super::customers::{self, NewCustomer, OrderCustomer};
use super::errors::{self, FieldErrors};
use super::fields;
use crate::reply::Reply;

/// Most items in one order.
const MAX_ITEMS: usize = 100;
/// Largest amount (cents) of an item, a payment or an order: Pagar.me's amounts are 32-bit integers.
const MAX_AMOUNT: i64 = i32::MAX as i64;
/// A Pix QR code's lifetime when the payment sets none (`pix.expires_in`, seconds).
const DEFAULT_PIX_EXPIRES_IN: i64 = 86_400;
/// Longest Pix lifetime accepted.
const MAX_PIX_EXPIRES_IN: i64 = 30 * 86_400;
/// A boleto's due date when the payment sets none: three days on.
const DEFAULT_BOLETO_DAYS: i64 = 3;

/// A validated order.
#[derive(Debug)]
pub(crate) struct NewOrder {
    pub(crate) code: Option<String>,
    pub(crate) customer: OrderCustomer,
    pub(crate) items: Vec<NewItem>,
    pub(crate) amount: i64,
    pub(crate) payment: NewPayment,
    pub(crate) closed: bool,
    pub(crate) metadata: Value,
}

#[derive(Debug)]
pub(crate) struct NewItem {
    pub(crate) description: String,
    pub(crate) amount: i64,
    pub(crate) quantity: i64,
    pub(crate) code: Option<String>,
}

/// The order's one payment.
#[derive(Debug)]
pub(crate) struct NewPayment {
    pub(crate) method: NewMethod,
    pub(crate) metadata: Value,
}

#[derive(Debug)]
pub(crate) enum NewMethod {
    Card {
        source: CardSource,
        installments: u32,
        statement_descriptor: Option<String>,
        operation_type: String,
    },
    Pix {
        expires_at: OffsetDateTime,
    },
    Boleto {
        due_at: OffsetDateTime,
        instructions: Option<String>,
    },
}

/// An integer field within `min..=max`.
fn integer(
    value: Option<&Value>,
    path: &str,
    min: i64,
    max: i64,
    errors: &mut FieldErrors,
) -> Option<i64> {
    let name = path.rsplit('.').next().unwrap_or(path);
    match value {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_i64().filter(|n| (min..=max).contains(n)) {
            Some(n) => Some(n),
            None => {
                errors.add(
                    path,
                    format!("The field {name} must be between {min} and {max}."),
                );
                None
            }
        },
    }
}

/// An ISO 8601 date (`2024-08-23`) or RFC 3339 date-time.
pub(crate) fn parse_date(text: &str) -> Option<OffsetDateTime> {
    let text = text.trim();
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Some(t);
    }
    if let Ok(t) = time::PrimitiveDateTime::parse(
        text,
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]"),
    ) {
        return Some(t.assume_utc());
    }
    Date::parse(text, format_description!("[year]-[month]-[day]"))
        .ok()
        .map(|d| d.midnight().assume_utc())
}

fn validate_items(body: &Value, errors: &mut FieldErrors) -> Vec<NewItem> {
    let Some(list) = body
        .get("items")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
    else {
        errors.required("order.items");
        return Vec::new();
    };
    if list.len() > MAX_ITEMS {
        errors.add(
            "order.items",
            format!("An order has at most {MAX_ITEMS} items."),
        );
        return Vec::new();
    }
    let mut items = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let path = |f: &str| format!("order.items[{i}].{f}");
        let amount = integer(item.get("amount"), &path("amount"), 0, MAX_AMOUNT, errors);
        if item.get("amount").is_none() {
            errors.required(&path("amount"));
        }
        let description =
            fields::string_field(item, "description", &path("description"), 256, true, errors);
        let quantity = match item.get("quantity") {
            None | Some(Value::Null) => {
                errors.required(&path("quantity"));
                None
            }
            // Pagar.me's own examples send it as a string ("quantity": "1").
            Some(Value::String(s)) => s
                .parse::<i64>()
                .ok()
                .filter(|q| (1..=100_000).contains(q))
                .or_else(|| {
                    errors.add(
                        &path("quantity"),
                        "The field quantity must be between 1 and 100000.",
                    );
                    None
                }),
            q => integer(q, &path("quantity"), 1, 100_000, errors),
        };
        let code = fields::string_field(item, "code", &path("code"), 52, false, errors);
        if let (Some(amount), Some(description), Some(quantity)) = (amount, description, quantity) {
            items.push(NewItem {
                description,
                amount,
                quantity,
                code,
            });
        }
    }
    items
}

fn validate_card_payment(
    payment: &Value,
    path: &str,
    year_now: (i32, u8),
    errors: &mut FieldErrors,
) -> Option<NewMethod> {
    let card_path = format!("{path}.credit_card");
    let Some(card) = payment.get("credit_card").filter(|c| c.is_object()) else {
        errors.required(&card_path);
        return None;
    };
    let installments = integer(
        card.get("installments"),
        &format!("{card_path}.installments"),
        1,
        24,
        errors,
    )
    .unwrap_or(1);
    let statement_descriptor = fields::string_field(
        card,
        "statement_descriptor",
        &format!("{card_path}.statement_descriptor"),
        22,
        false,
        errors,
    );
    let operation_type = fields::string_field(
        card,
        "operation_type",
        &format!("{card_path}.operation_type"),
        32,
        false,
        errors,
    )
    .unwrap_or_else(|| "auth_and_capture".into());
    // `auth_and_capture` captures at once; `auth_only` (or `capture: false`) only authorizes, and the charge waits
    // for `POST /core/v5/charges/{id}/capture`. `pre_auth` is not played (refused rather than played wrong).
    let capture = match card.get("capture") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.add(
                &format!("{card_path}.capture"),
                "The field capture must be a boolean.",
            );
            true
        }
    };
    if !matches!(operation_type.as_str(), "auth_and_capture" | "auth_only") {
        errors.add(
            &format!("{card_path}.operation_type"),
            "The sandbox plays auth_and_capture and auth_only.",
        );
    }
    let operation_type = if capture {
        operation_type
    } else {
        "auth_only".to_owned()
    };
    let source = cards::validate_source(card, &card_path, Some("card"), year_now, errors)?;
    Some(NewMethod::Card {
        source,
        installments: installments as u32,
        statement_descriptor,
        operation_type,
    })
}

fn validate_payment(
    body: &Value,
    now: OffsetDateTime,
    errors: &mut FieldErrors,
) -> (Option<NewPayment>, Option<i64>) {
    let Some(list) = body
        .get("payments")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
    else {
        errors.required("order.payments");
        return (None, None);
    };
    if list.len() > 1 {
        errors.add("order.payments", "The sandbox takes one payment per order.");
        return (None, None);
    }
    let payment = &list[0];
    let path = "order.payments[0]";
    let amount = integer(
        payment.get("amount"),
        &format!("{path}.amount"),
        1,
        MAX_AMOUNT,
        errors,
    );
    let year_now = cards::year_month(now);
    let method = match payment.get("payment_method").and_then(Value::as_str) {
        Some("credit_card") => validate_card_payment(payment, path, year_now, errors),
        Some("pix") => {
            let pix = payment.get("pix").cloned().unwrap_or(Value::Null);
            let expires_at = match pix.get("expires_at").and_then(Value::as_str) {
                Some(text) => parse_date(text).filter(|t| *t > now).or_else(|| {
                    errors.add(
                        &format!("{path}.pix.expires_at"),
                        "The field expires_at must be a future date.",
                    );
                    None
                }),
                None => {
                    let secs = integer(
                        pix.get("expires_in"),
                        &format!("{path}.pix.expires_in"),
                        1,
                        MAX_PIX_EXPIRES_IN,
                        errors,
                    );
                    Some(now + Duration::seconds(secs.unwrap_or(DEFAULT_PIX_EXPIRES_IN)))
                }
            };
            expires_at.map(|expires_at| NewMethod::Pix { expires_at })
        }
        Some("boleto") => {
            let boleto = payment.get("boleto").cloned().unwrap_or(Value::Null);
            let due_at = match boleto.get("due_at").and_then(Value::as_str) {
                Some(text) => parse_date(text).or_else(|| {
                    errors.add(
                        &format!("{path}.boleto.due_at"),
                        "The field due_at is not a valid date.",
                    );
                    None
                }),
                None => Some(now + Duration::days(DEFAULT_BOLETO_DAYS)),
            };
            let instructions = fields::string_field(
                &boleto,
                "instructions",
                &format!("{path}.boleto.instructions"),
                256,
                false,
                errors,
            );
            due_at.map(|due_at| NewMethod::Boleto {
                due_at,
                instructions,
            })
        }
        Some(_) => {
            errors.add(
                &format!("{path}.payment_method"),
                "The sandbox plays credit_card, pix and boleto.",
            );
            None
        }
        None => {
            errors.required(&format!("{path}.payment_method"));
            None
        }
    };
    let metadata = fields::metadata(payment, &format!("{path}.metadata"), errors);
    (method.map(|method| NewPayment { method, metadata }), amount)
}

/// The body of `POST /core/v5/orders`, at the sandbox clock's `now`.
pub(crate) fn validate_order(bytes: &[u8], now: OffsetDateTime) -> Result<NewOrder, Reply> {
    let mut errors = FieldErrors::default();
    let Some(body) = serde_json::from_slice::<Value>(bytes)
        .ok()
        .filter(Value::is_object)
    else {
        errors.add("order", "The request body must be a JSON object.");
        return Err(errors.reply());
    };
    let code = fields::string_field(&body, "code", "order.code", 52, false, &mut errors);
    let customer_id = fields::string_field(
        &body,
        "customer_id",
        "order.customer_id",
        64,
        false,
        &mut errors,
    );
    let customer: Option<NewCustomer> = body
        .get("customer")
        .filter(|c| !c.is_null())
        .map(|c| customers::validate_customer(c, "order.customer", &mut errors));
    let items = validate_items(&body, &mut errors);
    let amount: i64 = items
        .iter()
        .map(|i| i.amount.saturating_mul(i.quantity))
        .fold(0, i64::saturating_add);
    if amount > MAX_AMOUNT {
        errors.add(
            "order.items",
            format!("The order amount must be at most {MAX_AMOUNT}."),
        );
    }
    let (payment, payment_amount) = validate_payment(&body, now, &mut errors);
    if payment_amount.is_some_and(|a| a != amount) && !items.is_empty() {
        errors.add(
            "order.payments[0].amount",
            "The sum of the payments' amounts must be equal to the order amount.",
        );
    }
    let closed = match body.get("closed") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.add("order.closed", "The field closed must be a boolean.");
            true
        }
    };
    let metadata = fields::metadata(&body, "order.metadata", &mut errors);
    if !errors.is_empty() {
        return Err(errors.reply());
    }
    let customer = match (customer_id, customer) {
        (Some(id), _) => OrderCustomer::Id(id),
        (None, Some(new)) => OrderCustomer::New(new),
        // "Ocorre quando não identificamos o objeto customer ou customer_id" (https://docs.pagar.me/reference/erros-1).
        (None, None) => return Err(errors::not_found("Customer")),
    };
    let payment = payment.ok_or_else(|| errors.reply())?;
    Ok(NewOrder {
        code,
        customer,
        items,
        amount,
        payment,
        closed,
        metadata,
    })
}

/// The optional body of `POST /core/v5/charges/{id}/capture` (<https://docs.pagar.me/reference/capturar-cobrança>):
/// `{"amount": cents}` (absent: what was authorized), `code`, `split`, `operation_reference` (taken, not played).
pub(crate) fn validate_capture(bytes: &[u8]) -> Result<Option<i64>, Reply> {
    validate_cancel(bytes)
}

/// The optional body of `DELETE /core/v5/charges/{id}`: `{"amount": cents}` (absent: what is left).
pub(crate) fn validate_cancel(bytes: &[u8]) -> Result<Option<i64>, Reply> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let mut errors = FieldErrors::default();
    let Some(body) = serde_json::from_slice::<Value>(bytes)
        .ok()
        .filter(Value::is_object)
    else {
        errors.add("request", "The request body must be a JSON object.");
        return Err(errors.reply());
    };
    let amount = integer(body.get("amount"), "amount", 1, MAX_AMOUNT, &mut errors);
    errors.or(amount)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap() // 2026-01-01
    }

    fn order(payment: Value) -> Value {
        json!({
            "code": "pi_1",
            "customer": {"name": "Tony Stark", "email": "tony@example.com", "document": "12345678909", "type": "individual"},
            "items": [{"amount": 1500, "description": "Chaveiro", "quantity": 2, "code": "k1"}],
            "payments": [payment],
        })
    }

    #[test]
    fn orders_are_checked_field_by_field() {
        let ok = validate_order(
            order(json!({"payment_method": "credit_card", "credit_card": {"card_token": "token_x", "installments": 1}})).to_string().as_bytes(),
            now(),
        )
        .unwrap();
        assert_eq!(ok.amount, 3000);
        assert!(matches!(
            ok.payment.method,
            NewMethod::Card {
                source: CardSource::Token(_),
                ..
            }
        ));
        let pix = validate_order(
            order(json!({"payment_method": "pix", "pix": {"expires_in": 60}}))
                .to_string()
                .as_bytes(),
            now(),
        )
        .unwrap();
        assert!(
            matches!(pix.payment.method, NewMethod::Pix { expires_at } if expires_at == now() + Duration::seconds(60))
        );
        let bad = validate_order(
            json!({"customer": {}, "items": [{"amount": -1}], "payments": [{"payment_method": "credit_card", "amount": 5}]}).to_string().as_bytes(),
            now(),
        )
        .unwrap_err();
        assert_eq!(bad.status, 422);
        let body: Value = serde_json::from_slice(&bad.body).unwrap();
        for field in [
            "order.customer.name",
            "order.items[0].amount",
            "order.items[0].description",
            "order.payments[0].credit_card",
        ] {
            assert!(body["errors"][field].is_array(), "{field}: {body}");
        }
        let no_customer = validate_order(
            json!({"items": [{"amount": 1, "description": "x", "quantity": 1}], "payments": [{"payment_method": "pix"}]}).to_string().as_bytes(),
            now(),
        )
        .unwrap_err();
        assert_eq!(no_customer.status, 404);
    }

    #[test]
    fn cancel_bodies() {
        assert_eq!(validate_cancel(b"").unwrap(), None);
        assert_eq!(validate_cancel(b"{}").unwrap(), None);
        assert_eq!(validate_cancel(br#"{"amount": 500}"#).unwrap(), Some(500));
        assert_eq!(
            validate_cancel(br#"{"amount": 0}"#).unwrap_err().status,
            422
        );
        assert_eq!(validate_cancel(b"[1]").unwrap_err().status, 422);
    }
}
