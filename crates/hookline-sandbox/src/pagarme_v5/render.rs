//! Pagar.me's objects as its API renders them (the field names of the v5 reference and of Pagar.me's own SDK
//! models): customers, cards, tokens, orders with their items and charges, charges with their last transaction
//! and their order. Dates are UTC with seconds (`2024-01-15T10:20:30Z`), amounts integers in cents.

use serde_json::{json, Map, Value};

use super::book::{CardData, Method, PgBook, PgCard, PgCharge, PgCustomer, PgOrder, PgToken};
use crate::clock::pagarme_date;

pub(crate) fn customer_json(c: &PgCustomer) -> Value {
    let created = pagarme_date(c.created_at);
    json!({
        "id": c.id,
        "name": c.name,
        "email": c.email,
        "code": c.code,
        "document": c.document,
        "document_type": c.document_type,
        "type": c.kind,
        "delinquent": false,
        "created_at": created,
        "updated_at": created,
        "phones": c.phones,
        "metadata": c.metadata,
    })
}

/// A card's fields (shared by saved cards, tokens' cards and transactions' cards).
fn card_fields(card: &CardData) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("first_six_digits".into(), json!(card.first_six));
    fields.insert("last_four_digits".into(), json!(card.last_four));
    fields.insert("brand".into(), json!(card.brand));
    fields.insert("holder_name".into(), json!(card.holder_name));
    fields.insert("holder_document".into(), json!(card.holder_document));
    fields.insert("exp_month".into(), json!(card.exp_month));
    fields.insert("exp_year".into(), json!(card.exp_year));
    fields.insert("type".into(), json!("credit"));
    fields
}

/// A saved card, with its customer.
pub(crate) fn card_json(book: &PgBook, card: &PgCard) -> Value {
    let mut fields = card_fields(&card.card);
    let created = pagarme_date(card.created_at);
    fields.insert("id".into(), json!(card.id));
    fields.insert("status".into(), json!("active"));
    fields.insert("created_at".into(), json!(created));
    fields.insert("updated_at".into(), json!(created));
    if let Some(customer) = book.customers.get(&card.customer_id) {
        fields.insert("customer".into(), customer_json(customer));
    }
    Value::Object(fields)
}

pub(crate) fn token_json(token: &PgToken) -> Value {
    json!({
        "id": token.id,
        "type": "card",
        "created_at": pagarme_date(token.created_at),
        "expires_at": pagarme_date(token.expires_at),
        "card": Value::Object(card_fields(&token.card)),
    })
}

/// The charge's `last_transaction`, with the fields of its method.
pub(crate) fn transaction_json(charge: &PgCharge) -> Value {
    let t = &charge.transaction;
    let gateway_id = t.id.trim_start_matches("tran_").to_owned();
    let errors: Vec<Value> = t
        .gateway_errors
        .iter()
        .map(|m| json!({ "message": m }))
        .collect();
    let mut fields = Map::new();
    fields.insert("id".into(), json!(t.id));
    fields.insert("transaction_type".into(), json!(charge.method.name()));
    fields.insert("gateway_id".into(), json!(gateway_id));
    fields.insert("amount".into(), json!(charge.amount));
    fields.insert("status".into(), json!(t.status));
    fields.insert("success".into(), json!(t.success));
    fields.insert("created_at".into(), json!(pagarme_date(t.created_at)));
    fields.insert("updated_at".into(), json!(pagarme_date(t.updated_at)));
    fields.insert(
        "gateway_response".into(),
        json!({"code": if errors.is_empty() { "200" } else { "400" }, "errors": errors}),
    );
    fields.insert("antifraud_response".into(), json!({}));
    fields.insert("metadata".into(), json!({}));
    match &charge.method {
        Method::CreditCard {
            card,
            card_id,
            installments,
            statement_descriptor,
            operation_type,
        } => {
            let (code, message) = t.acquirer.unwrap_or(("", ""));
            let mut card_fields = card_fields(card);
            card_fields.insert("id".into(), json!(card_id));
            card_fields.insert("status".into(), json!("active"));
            fields.insert("installments".into(), json!(installments));
            fields.insert("statement_descriptor".into(), json!(statement_descriptor));
            fields.insert("acquirer_name".into(), json!("simulator"));
            fields.insert("acquirer_tid".into(), json!(gateway_id));
            fields.insert("acquirer_nsu".into(), json!(gateway_id));
            fields.insert(
                "acquirer_auth_code".into(),
                json!(t
                    .success
                    .then(|| gateway_id.chars().take(6).collect::<String>())),
            );
            fields.insert("acquirer_message".into(), json!(message));
            fields.insert("acquirer_return_code".into(), json!(code));
            fields.insert("operation_type".into(), json!(operation_type));
            fields.insert("card".into(), Value::Object(card_fields));
        }
        Method::Pix {
            qr_code,
            qr_code_url,
            expires_at,
        } => {
            fields.insert("qr_code".into(), json!(qr_code));
            fields.insert("qr_code_url".into(), json!(qr_code_url));
            fields.insert("expires_at".into(), json!(pagarme_date(*expires_at)));
        }
        Method::Boleto {
            url,
            pdf,
            line,
            barcode,
            nosso_numero,
            due_at,
            instructions,
        } => {
            fields.insert("url".into(), json!(url));
            fields.insert("pdf".into(), json!(pdf));
            fields.insert("line".into(), json!(line));
            fields.insert("barcode".into(), json!(barcode));
            fields.insert("nosso_numero".into(), json!(nosso_numero));
            fields.insert("bank".into(), json!("001"));
            fields.insert("document_number".into(), json!(nosso_numero));
            fields.insert("instructions".into(), json!(instructions));
            fields.insert("due_at".into(), json!(pagarme_date(*due_at)));
            fields.insert("type".into(), json!("DM"));
        }
    }
    Value::Object(fields)
}

/// The summary of an order a charge carries.
fn order_summary(order: &PgOrder) -> Value {
    json!({
        "id": order.id,
        "code": order.code,
        "amount": order.amount,
        "currency": "BRL",
        "closed": order.closed,
        "status": order.status,
        "customer_id": order.customer_id,
        "created_at": pagarme_date(order.created_at),
        "updated_at": pagarme_date(order.updated_at),
        "closed_at": order.closed_at.map(pagarme_date),
    })
}

/// The charge's fields, without its order.
fn charge_fields(book: &PgBook, charge: &PgCharge) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("id".into(), json!(charge.id));
    fields.insert("code".into(), json!(charge.code));
    fields.insert(
        "gateway_id".into(),
        json!(charge.id.trim_start_matches("ch_")),
    );
    fields.insert("amount".into(), json!(charge.amount));
    fields.insert("paid_amount".into(), json!(charge.paid_amount));
    if charge.canceled_amount > 0 {
        fields.insert("canceled_amount".into(), json!(charge.canceled_amount));
    }
    fields.insert("status".into(), json!(charge.status));
    fields.insert("currency".into(), json!("BRL"));
    fields.insert("payment_method".into(), json!(charge.method.name()));
    fields.insert("paid_at".into(), json!(charge.paid_at.map(pagarme_date)));
    fields.insert(
        "canceled_at".into(),
        json!(charge.canceled_at.map(pagarme_date)),
    );
    fields.insert("created_at".into(), json!(pagarme_date(charge.created_at)));
    fields.insert("updated_at".into(), json!(pagarme_date(charge.updated_at)));
    if let Some(customer) = book.customers.get(&charge.customer_id) {
        fields.insert("customer".into(), customer_json(customer));
    }
    fields.insert("last_transaction".into(), transaction_json(charge));
    fields.insert("metadata".into(), charge.metadata.clone());
    fields
}

/// A charge as `GET /core/v5/charges/{id}` and the `charge.*` webhooks show it: with its order's summary.
pub(crate) fn charge_json(book: &PgBook, charge: &PgCharge) -> Value {
    let mut fields = charge_fields(book, charge);
    if let Some(order) = book.orders.get(&charge.order_id) {
        fields.insert("order".into(), order_summary(order));
    }
    Value::Object(fields)
}

/// An order as `POST`/`GET /core/v5/orders…` and the `order.*` webhooks show it: items, customer, charges.
pub(crate) fn order_json(book: &PgBook, order: &PgOrder) -> Value {
    let created = pagarme_date(order.created_at);
    let items: Vec<Value> = order
        .items
        .iter()
        .map(|i| {
            json!({
                "id": i.id,
                "type": "product",
                "description": i.description,
                "amount": i.amount,
                "quantity": i.quantity,
                "code": i.code,
                "status": "active",
                "created_at": created,
                "updated_at": created,
            })
        })
        .collect();
    let charges: Vec<Value> = order
        .charges
        .iter()
        .filter_map(|id| book.charges.get(id))
        .map(|c| Value::Object(charge_fields(book, c)))
        .collect();
    json!({
        "id": order.id,
        "code": order.code,
        "amount": order.amount,
        "currency": "BRL",
        "closed": order.closed,
        "items": items,
        "customer": book.customers.get(&order.customer_id).map(customer_json),
        "status": order.status,
        "created_at": created,
        "updated_at": pagarme_date(order.updated_at),
        "closed_at": order.closed_at.map(pagarme_date),
        "charges": charges,
        "metadata": order.metadata,
    })
}
