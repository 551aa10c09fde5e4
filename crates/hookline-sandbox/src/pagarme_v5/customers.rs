//! Customers: `POST /core/v5/customers` and an order's `customer` (or `customer_id`) — validated before anything
//! executes, created under the state lock.

use serde_json::Value;

use super::book::PgCustomer;
use super::errors::{self, FieldErrors};
use super::fields::{metadata, string_field, MAX_OBJECT_BYTES};
use super::render;
use crate::reply::Reply;
use crate::state::State;

/// A validated customer.
#[derive(Debug)]
pub(crate) struct NewCustomer {
    name: String,
    email: Option<String>,
    document: Option<String>,
    document_type: Option<String>,
    kind: String,
    code: Option<String>,
    phones: Value,
    metadata: Value,
}

/// A customer object (an order's `customer`, or the body of `POST /core/v5/customers`); fields reported under
/// `prefix` (`order.customer`, `customer`).
pub(crate) fn validate_customer(
    body: &Value,
    prefix: &str,
    errors: &mut FieldErrors,
) -> NewCustomer {
    let path = |f: &str| format!("{prefix}.{f}");
    if !body.is_object() {
        errors.add(prefix, "The customer must be an object.");
    }
    let name = string_field(body, "name", &path("name"), 64, true, errors).unwrap_or_default();
    let email = string_field(body, "email", &path("email"), 64, false, errors);
    if let Some(email) = &email {
        let valid = email
            .split_once('@')
            .is_some_and(|(user, host)| !user.is_empty() && host.contains('.'));
        if !valid {
            errors.add(
                &path("email"),
                "The email field is not a valid e-mail address.",
            );
        }
    }
    let document = string_field(body, "document", &path("document"), 50, false, errors);
    if document
        .as_deref()
        .is_some_and(|d| d.is_empty() || !d.chars().all(|c| c.is_ascii_alphanumeric()))
    {
        errors.add(&path("document"), "The field document is invalid.");
    }
    let document_type = string_field(
        body,
        "document_type",
        &path("document_type"),
        16,
        false,
        errors,
    );
    if document_type
        .as_deref()
        .is_some_and(|t| !matches!(t.to_ascii_uppercase().as_str(), "CPF" | "CNPJ" | "PASSPORT"))
    {
        errors.add(
            &path("document_type"),
            "The field document_type must be CPF, CNPJ or PASSPORT.",
        );
    }
    let kind = string_field(body, "type", &path("type"), 16, false, errors)
        .unwrap_or_else(|| "individual".into());
    if !matches!(kind.as_str(), "individual" | "company") {
        errors.add(
            &path("type"),
            "The field type must be individual or company.",
        );
    }
    let code = string_field(body, "code", &path("code"), 52, false, errors);
    let phones = match body.get("phones") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) if p.to_string().len() <= MAX_OBJECT_BYTES => p.clone(),
        Some(_) => {
            errors.add(&path("phones"), "The field phones is invalid.");
            Value::Null
        }
    };
    let metadata = metadata(body, &path("metadata"), errors);
    NewCustomer {
        name,
        email,
        document,
        document_type: document_type.map(|t| t.to_ascii_uppercase()),
        kind,
        code,
        phones,
        metadata,
    }
}

fn new_customer(state: &mut State, p: usize, new: NewCustomer) -> String {
    let id = state.rng.id("cus", 16);
    let now = state.clock.now();
    let customer = PgCustomer {
        id: id.clone(),
        name: new.name,
        email: new.email,
        document: new.document,
        document_type: new.document_type,
        kind: new.kind,
        code: new.code,
        phones: new.phones,
        metadata: new.metadata,
        created_at: now,
        cards: Vec::new(),
    };
    state.providers[p]
        .pagarme
        .customers
        .insert(id.clone(), customer);
    id
}

/// `POST /core/v5/customers`: 200 with the customer.
pub(crate) fn create_customer(state: &mut State, p: usize, new: NewCustomer) -> Reply {
    let id = new_customer(state, p, new);
    let book = &state.providers[p].pagarme;
    match book.customers.get(&id) {
        Some(c) => Reply::json(200, &render::customer_json(c)),
        None => errors::not_found("Customer"),
    }
}

/// Creates the order's customer (a new one) or checks it exists (`customer_id`); its id.
pub(crate) fn order_customer(
    state: &mut State,
    p: usize,
    customer: OrderCustomer,
) -> Result<String, Reply> {
    match customer {
        OrderCustomer::Id(id) => {
            if state.providers[p].pagarme.customers.contains_key(&id) {
                Ok(id)
            } else {
                Err(errors::not_found("Customer"))
            }
        }
        OrderCustomer::New(new) => Ok(new_customer(state, p, new)),
    }
}

/// An order's customer: an existing one, or one to create.
#[derive(Debug)]
pub(crate) enum OrderCustomer {
    Id(String),
    New(NewCustomer),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn customers_need_a_name_and_take_string_metadata() {
        let mut errors = FieldErrors::default();
        validate_customer(
            &json!({"email": "nope", "metadata": {"a": 1}}),
            "customer",
            &mut errors,
        );
        let body: Value = serde_json::from_slice(&errors.reply().body).unwrap();
        assert!(body["errors"]["customer.name"].is_array());
        assert!(body["errors"]["customer.email"].is_array());
        assert!(body["errors"]["customer.metadata"].is_array());
    }
}
