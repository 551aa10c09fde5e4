//! Mercado Pago notifications (JSON `type` plus `data.id`) → a resource to fetch.
//!
//! Owns the one rule for this dialect: the body is not signed, so it is only trusted to name a resource, and
//! that name is restricted to the characters real ids use before it can reach an API URL.

use serde_json::Value;

use super::json::{parse_json_object, render, Obj};
use super::{field_error, quoted};
use crate::payments::model::{PaymentFact, PermanentError};

/// Longest resource id accepted for a fetch.
const MAX_RESOURCE_ID_LEN: usize = 128;

/// The body is not signed (only the query `data.id` is), so it is never trusted for amounts or statuses:
/// it only says which resource to fetch from the API.
pub(super) fn normalize(body: &[u8]) -> Result<Vec<PaymentFact>, PermanentError> {
    let map = parse_json_object(body)?;
    let root = Obj::root(&map);
    let data = root.object("data")?;
    let path = data.path_of("id");
    let resource_id = match data.value("id") {
        None => return Err(field_error(&path, "missing")),
        Some(Value::String(id)) => id.clone(),
        // Older notifications send the id as a JSON number.
        Some(Value::Number(n)) if n.is_u64() => n.to_string(),
        Some(other) => {
            return Err(field_error(
                &path,
                format!("{} is not a resource id", render(other)),
            ))
        }
    };
    // The id ends up in an API URL path. Restricting it to the characters real ids use (numbers, `ORD01…`,
    // hex ids) keeps an unsigned body from steering the fetch elsewhere (`../`, `?`, `/`).
    check_token(&path, &resource_id, MAX_RESOURCE_ID_LEN, &['-', '_'])?;
    let resource = root.text("type")?;
    check_token("type", resource, 64, &['-', '_', '.'])?;
    Ok(vec![PaymentFact::NeedsFetch {
        resource: resource.to_owned(),
        resource_id,
    }])
}

fn check_token(
    path: &str,
    value: &str,
    max_len: usize,
    extra: &[char],
) -> Result<(), PermanentError> {
    if value.is_empty() {
        return Err(field_error(path, "is empty"));
    }
    if value.len() > max_len {
        return Err(field_error(
            path,
            format!("is {} bytes long, more than {max_len}", value.len()),
        ));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    {
        let allowed: Vec<String> = extra.iter().map(|c| format!("'{c}'")).collect();
        return Err(field_error(
            path,
            format!(
                "{} has characters other than ASCII letters, digits and {}",
                quoted(value),
                allowed.join(", ")
            ),
        ));
    }
    Ok(())
}
