//! Field readers shared by the validation of orders, customers and cards: bounded strings with Pagar.me's
//! messages, and `metadata` (an object of strings).

use serde_json::Value;

use super::errors::FieldErrors;

/// Longest `metadata` or `phones` object (serialised) the sandbox keeps.
pub(crate) const MAX_OBJECT_BYTES: usize = 4096;

pub(crate) fn text<'a>(body: &'a Value, name: &str) -> Option<&'a str> {
    body.get(name).and_then(Value::as_str)
}

/// A string field no longer than `max` characters; `required` adds the required error when absent.
pub(crate) fn string_field(
    body: &Value,
    name: &str,
    path: &str,
    max: usize,
    required: bool,
    errors: &mut FieldErrors,
) -> Option<String> {
    match body.get(name) {
        None | Some(Value::Null) => {
            if required {
                errors.required(path);
            }
            None
        }
        Some(Value::String(s)) if s.trim().is_empty() && required => {
            errors.required(path);
            None
        }
        Some(Value::String(s)) if s.chars().count() <= max => Some(s.clone()),
        Some(Value::String(_)) => {
            errors.add(
                path,
                format!("The field {name} must be a string with a maximum length of {max}."),
            );
            None
        }
        Some(_) => {
            errors.add(path, format!("The field {name} is invalid."));
            None
        }
    }
}

/// `metadata`: an object of string values (Pagar.me's `Dictionary<string, string>`), echoed back.
pub(crate) fn metadata(body: &Value, path: &str, errors: &mut FieldErrors) -> Value {
    match body.get("metadata") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(m @ Value::Object(map))
            if map.values().all(Value::is_string) && m.to_string().len() <= MAX_OBJECT_BYTES =>
        {
            m.clone()
        }
        Some(_) => {
            errors.add(
                path,
                format!("The field metadata must be an object of strings of at most {MAX_OBJECT_BYTES} bytes."),
            );
            Value::Object(Default::default())
        }
    }
}
