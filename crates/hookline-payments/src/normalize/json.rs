//! The JSON accessor the JSON dialects (Stripe, Mercado Pago) read payloads with.
//!
//! [`Obj`] carries its path from the payload root, so every error names the exact field
//! (`data.object.amount_received`); it owns the JSON reading rules: null is absent, ids and amounts are checked
//! with the shared validators, and floats are never amounts.

use serde_json::{Map, Value};

use super::{check_amount, check_currency, check_id, field_error, quoted};
use crate::model::{Money, PermanentError};

/// Parses a JSON body whose top level must be an object.
pub(super) fn parse_json_object(body: &[u8]) -> Result<Map<String, Value>, PermanentError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        PermanentError(format!(
            "body: not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    // serde_json bounds nesting depth itself, so a deeply nested body is an error, not a stack overflow.
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(PermanentError(format!(
            "body: is {}, expected a JSON object",
            render(&other)
        ))),
        Err(e) => Err(PermanentError(format!("body: not valid JSON ({e})"))),
    }
}

/// A JSON object together with its path from the payload root, so every error can name the exact field.
#[derive(Clone)]
pub(super) struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    pub(super) fn root(map: &'a Map<String, Value>) -> Self {
        Obj {
            map,
            path: String::new(),
        }
    }

    pub(super) fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// A present, non-null value. Stripe sends `null` for every unset field, so null and absent are one case.
    pub(super) fn value(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn has(&self, key: &str) -> bool {
        self.value(key).is_some()
    }

    fn missing(&self, key: &str) -> PermanentError {
        field_error(&self.path_of(key), "missing")
    }

    fn wrong_type(&self, key: &str, value: &Value, expected: &str) -> PermanentError {
        field_error(
            &self.path_of(key),
            format!("is {}, expected {expected}", render(value)),
        )
    }

    pub(super) fn opt_object(&self, key: &str) -> Result<Option<Obj<'a>>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj {
                map,
                path: self.path_of(key),
            })),
            Some(other) => Err(self.wrong_type(key, other, "an object")),
        }
    }

    pub(super) fn object(&self, key: &str) -> Result<Obj<'a>, PermanentError> {
        self.opt_object(key)?.ok_or_else(|| self.missing(key))
    }

    /// An optional array whose items must all be objects (Stripe lists only hold objects).
    pub(super) fn opt_array(&self, key: &str) -> Result<Option<Vec<Obj<'a>>>, PermanentError> {
        let items = match self.value(key) {
            None => return Ok(None),
            Some(Value::Array(items)) => items,
            Some(other) => return Err(self.wrong_type(key, other, "an array")),
        };
        let base = self.path_of(key);
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let path = format!("{base}[{i}]");
                match item {
                    Value::Object(map) => Ok(Obj { map, path }),
                    other => Err(field_error(
                        &path,
                        format!("is {}, expected an object", render(other)),
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// An optional non-empty string.
    pub(super) fn opt_text(&self, key: &str) -> Result<Option<&'a str>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => {
                Err(field_error(&self.path_of(key), "is an empty string"))
            }
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong_type(key, other, "a string")),
        }
    }

    pub(super) fn text(&self, key: &str) -> Result<&'a str, PermanentError> {
        self.opt_text(key)?.ok_or_else(|| self.missing(key))
    }

    pub(super) fn opt_id(&self, key: &str) -> Result<Option<String>, PermanentError> {
        self.opt_text(key)?
            .map(|id| check_id(&self.path_of(key), id))
            .transpose()
    }

    pub(super) fn id(&self, key: &str) -> Result<String, PermanentError> {
        self.opt_id(key)?.ok_or_else(|| self.missing(key))
    }

    pub(super) fn opt_bool(&self, key: &str) -> Result<Option<bool>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong_type(key, other, "a boolean")),
        }
    }

    /// An integer from JSON. Floats are refused even when whole (`10.0`): providers send integers, and a
    /// float means someone converted units on the way.
    fn integer(&self, key: &str, value: &Value, what: &str) -> Result<i64, PermanentError> {
        let path = self.path_of(key);
        match value {
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Ok(i)
                } else if n.is_u64() || n.as_f64().is_some_and(|f| f.abs() >= 9.2e18) {
                    Err(field_error(&path, format!("{n} is too large for {what}")))
                } else {
                    Err(field_error(&path, format!("{n} is not an integer {what}")))
                }
            }
            other => Err(field_error(
                &path,
                format!("{} is not an integer {what}", render(other)),
            )),
        }
    }

    fn opt_amount(&self, key: &str) -> Result<Option<i64>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(value) => {
                let amount = self.integer(key, value, "amount in minor units")?;
                check_amount(&self.path_of(key), amount, false).map(Some)
            }
        }
    }

    /// A required total that may legitimately be 0 (`amount_paid`, `amount_refunded`).
    pub(super) fn amount_or_zero(&self, key: &str) -> Result<i64, PermanentError> {
        let value = self.value(key).ok_or_else(|| self.missing(key))?;
        let amount = self.integer(key, value, "amount in minor units")?;
        check_amount(&self.path_of(key), amount, true)
    }

    pub(super) fn currency(&self, key: &str) -> Result<String, PermanentError> {
        check_currency(&self.path_of(key), self.text(key)?)
    }

    /// Required amount plus currency.
    pub(super) fn money(
        &self,
        amount_key: &str,
        currency_key: &str,
    ) -> Result<Money, PermanentError> {
        let amount = self
            .opt_amount(amount_key)?
            .ok_or_else(|| self.missing(amount_key))?;
        Ok(Money {
            amount,
            currency: self.currency(currency_key)?,
        })
    }

    /// Optional amount; the currency is only required (and checked) when the amount is there.
    pub(super) fn opt_money(
        &self,
        amount_key: &str,
        currency_key: &str,
    ) -> Result<Option<Money>, PermanentError> {
        match self.opt_amount(amount_key)? {
            None => Ok(None),
            Some(amount) => Ok(Some(Money {
                amount,
                currency: self.currency(currency_key)?,
            })),
        }
    }

    /// An optional unix timestamp in seconds (a positive integer).
    pub(super) fn opt_timestamp(&self, key: &str) -> Result<Option<i64>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(value) => {
                let ts = self.integer(key, value, "unix timestamp")?;
                if ts <= 0 {
                    return Err(field_error(
                        &self.path_of(key),
                        format!("{ts} is not a positive unix timestamp"),
                    ));
                }
                Ok(Some(ts))
            }
        }
    }

    pub(super) fn timestamp(&self, key: &str) -> Result<i64, PermanentError> {
        self.opt_timestamp(key)?.ok_or_else(|| self.missing(key))
    }
}

/// How a JSON value is shown in an error message.
pub(super) fn render(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string {}", quoted(s)),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}
