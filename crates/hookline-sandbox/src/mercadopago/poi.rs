//! A payment's `point_of_interaction` as a merchant sends it: for a recurring charge with a saved card,
//! `{"type": "SUBSCRIPTIONS", "transaction_data": {"first_time_use", "subscription_id", "billing_date",
//! "subscription_sequence": {"number", "total"}, "invoice_period": {"period", "type"}, "payment_reference":
//! {"id"}, "user_present"}}` — Mercado Pago's automatic payments messaging
//! (<https://www.mercadopago.com.br/developers/en/docs/automatic-payments/recurring-charges/subscription-messaging>).
//! Checked for shape and size (the sandbox refuses what it cannot read, so that a misspelt field fails a test
//! instead of being ignored), then kept and echoed in the payment.

use serde_json::{json, Map, Value};

use super::errors;
use crate::reply::Reply;

/// Largest `point_of_interaction` (serialised) a payment takes.
const MAX_BYTES: usize = 4096;
/// Longest text value in it (`subscription_id`, `payment_reference.id`, `type`s).
const MAX_TEXT: usize = 256;
/// Highest `subscription_sequence.number` / `total` and `invoice_period.period`.
const MAX_SEQUENCE: u64 = 1_000_000;

/// A 400 naming the field at fault.
fn invalid(field: &str) -> Reply {
    errors::bad_request(
        json!(1),
        &format!("point_of_interaction.{field} is invalid"),
    )
}

/// Refuses keys of `object` outside `known` (`path` names the object in the error).
fn only(object: &Map<String, Value>, known: &[&str], path: &str) -> Result<(), Reply> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(invalid(&format!("{path}{unknown}"))),
        None => Ok(()),
    }
}

fn short_text(value: Option<&Value>, field: &str) -> Result<(), Reply> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= MAX_TEXT => Ok(()),
        Some(_) => Err(invalid(field)),
    }
}

fn bounded_number(
    value: Option<&Value>,
    field: &str,
    nullable: bool,
) -> Result<Option<u64>, Reply> {
    match value {
        None => Ok(None),
        Some(Value::Null) if nullable => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_SEQUENCE).contains(n))
            .map(Some)
            .ok_or_else(|| invalid(field)),
    }
}

/// An object field (absent is fine), with its keys limited to `known`.
fn sub_object<'a>(
    data: &'a Map<String, Value>,
    name: &str,
    known: &[&str],
) -> Result<Option<&'a Map<String, Value>>, Reply> {
    match data.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => {
            only(o, known, &format!("transaction_data.{name}."))?;
            Ok(Some(o))
        }
        Some(_) => Err(invalid(&format!("transaction_data.{name}"))),
    }
}

/// `YYYY-MM-DD`, a real date.
fn date(value: Option<&Value>, field: &str) -> Result<(), Reply> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if time::Date::parse(s, format).is_ok() => Ok(()),
        Some(_) => Err(invalid(field)),
    }
}

fn boolean(value: Option<&Value>, field: &str) -> Result<(), Reply> {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(_)) => Ok(()),
        Some(_) => Err(invalid(field)),
    }
}

/// Checks a payment's `point_of_interaction`; the value to keep.
pub(crate) fn validate(value: &Value) -> Result<Value, Reply> {
    let Value::Object(poi) = value else {
        return Err(invalid("type"));
    };
    if value.to_string().len() > MAX_BYTES {
        return Err(errors::bad_request(
            json!(1),
            &format!("point_of_interaction must be at most {MAX_BYTES} bytes"),
        ));
    }
    only(
        poi,
        &["type", "sub_type", "linked_to", "transaction_data"],
        "",
    )?;
    let kind = poi
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| {
            !t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        })
        .ok_or_else(|| invalid("type"))?;
    short_text(poi.get("sub_type"), "sub_type")?;
    short_text(poi.get("linked_to"), "linked_to")?;
    if kind == "SUBSCRIPTIONS" {
        let data = match poi.get("transaction_data") {
            Some(Value::Object(data)) => data,
            _ => return Err(invalid("transaction_data")),
        };
        subscription_data(data)?;
    } else if poi
        .get("transaction_data")
        .is_some_and(|d| !d.is_object() && !d.is_null())
    {
        return Err(invalid("transaction_data"));
    }
    Ok(value.clone())
}

/// The `transaction_data` of a `SUBSCRIPTIONS` point of interaction.
fn subscription_data(data: &Map<String, Value>) -> Result<(), Reply> {
    only(
        data,
        &[
            "first_time_use",
            "subscription_id",
            "billing_date",
            "subscription_sequence",
            "invoice_period",
            "payment_reference",
            "user_present",
        ],
        "transaction_data.",
    )?;
    boolean(
        data.get("first_time_use"),
        "transaction_data.first_time_use",
    )?;
    boolean(data.get("user_present"), "transaction_data.user_present")?;
    short_text(
        data.get("subscription_id"),
        "transaction_data.subscription_id",
    )?;
    date(data.get("billing_date"), "transaction_data.billing_date")?;
    if let Some(sequence) = sub_object(data, "subscription_sequence", &["number", "total"])? {
        let field = "transaction_data.subscription_sequence";
        let number = bounded_number(sequence.get("number"), &format!("{field}.number"), false)?
            .ok_or_else(|| invalid(&format!("{field}.number")))?;
        let total = bounded_number(sequence.get("total"), &format!("{field}.total"), true)?;
        if total.is_some_and(|t| t < number) {
            return Err(invalid(&format!("{field}.total")));
        }
    }
    if let Some(period) = sub_object(data, "invoice_period", &["period", "type"])? {
        bounded_number(
            period.get("period"),
            "transaction_data.invoice_period.period",
            false,
        )?;
        short_text(period.get("type"), "transaction_data.invoice_period.type")?;
    }
    if let Some(reference) = sub_object(data, "payment_reference", &["id"])? {
        match reference.get("id") {
            Some(Value::Number(n)) if n.is_u64() => {}
            id => short_text(id, "transaction_data.payment_reference.id")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_messaging_is_checked_for_shape() {
        let ok = json!({"type": "SUBSCRIPTIONS", "transaction_data": {
            "first_time_use": false, "subscription_id": "hookline-sub-12", "billing_date": "2026-12-01",
            "subscription_sequence": {"number": 3, "total": null},
            "invoice_period": {"period": 1, "type": "monthly"}, "payment_reference": {"id": "123"}}});
        assert_eq!(validate(&ok).ok(), Some(ok.clone()));
        assert!(validate(&json!({"type": "CHECKOUT"})).is_ok());
        let bad = [
            json!("SUBSCRIPTIONS"),
            json!({"type": "subscriptions"}),
            json!({"type": "SUBSCRIPTIONS"}),
            json!({"type": "SUBSCRIPTIONS", "transaction_data": {"billing_date": "2026-02-30"}}),
            json!({"type": "SUBSCRIPTIONS", "transaction_data": {"first_time_use": "no"}}),
            json!({"type": "SUBSCRIPTIONS", "transaction_data": {"subscription_sequense": {"number": 1}}}),
            json!({"type": "SUBSCRIPTIONS", "transaction_data": {"subscription_sequence": {"number": 0}}}),
            json!({"type": "SUBSCRIPTIONS", "transaction_data": {"subscription_sequence": {"number": 3, "total": 2}}}),
            json!({"type": "SUBSCRIPTIONS", "transaction_data": {"subscription_id": "x".repeat(300)}}),
            json!({"type": "SUBSCRIPTIONS", "extra": 1, "transaction_data": {}}),
            json!({"type": "SUBSCRIPTIONS", "transaction_data": {"subscription_id": "x".repeat(5000)}}),
        ];
        for b in bad {
            assert!(validate(&b).is_err(), "{b}");
        }
    }
}
