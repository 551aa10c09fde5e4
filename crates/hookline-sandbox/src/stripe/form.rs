//! Stripe's request encoding: `application/x-www-form-urlencoded` with bracketed names for nested values
//! (`metadata[order]=42`, `payment_method_types[]=card`, `created[gte]=…`).

use std::collections::BTreeMap;

use super::errors::{self, StripeError};

/// The parameters of one request, in the order sent.
#[derive(Debug, Clone, Default)]
pub(crate) struct Form {
    pairs: Vec<(String, String)>,
}

impl Form {
    pub(crate) fn parse(bytes: &[u8]) -> Form {
        Form {
            pairs: form_urlencoded::parse(bytes)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        }
    }

    /// The first value of `name`, if sent.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every `metadata[key]=value`.
    pub(crate) fn metadata(&self) -> BTreeMap<String, String> {
        self.pairs
            .iter()
            .filter_map(|(k, v)| {
                let key = k.strip_prefix("metadata[")?.strip_suffix(']')?;
                Some((key.to_owned(), v.clone()))
            })
            .collect()
    }

    /// The parameters sorted: what the idempotency layer compares (order of fields does not matter).
    pub(crate) fn canonical(&self) -> String {
        let mut pairs = self.pairs.clone();
        pairs.sort();
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish()
    }

    /// Stripe refuses parameters it does not know; `allowed` lists top-level names (`metadata` covers
    /// `metadata[…]`).
    pub(crate) fn check_known(&self, allowed: &[&str]) -> Result<(), StripeError> {
        for (name, _) in &self.pairs {
            let top = name.split('[').next().unwrap_or(name);
            if !allowed.contains(&top) {
                return Err(errors::invalid(
                    "parameter_unknown",
                    format!("Received unknown parameter: {name}"),
                    Some(name),
                ));
            }
        }
        Ok(())
    }

    /// A required positive integer amount (minor units).
    pub(crate) fn amount(&self, name: &str) -> Result<Option<i64>, StripeError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        match text.trim().parse::<i64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            Ok(_) => Err(errors::invalid(
                "parameter_invalid_integer",
                format!(
                    "This value must be greater than or equal to 1 (it currently is '{text}')."
                ),
                Some(name),
            )),
            Err(_) => Err(errors::invalid(
                "parameter_invalid_integer",
                format!("Invalid integer: {text}"),
                Some(name),
            )),
        }
    }

    /// An optional boolean (`true`/`false`).
    pub(crate) fn boolean(&self, name: &str) -> Result<Option<bool>, StripeError> {
        match self.get(name) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(errors::invalid(
                "parameter_invalid_boolean",
                format!("Invalid boolean: {other}"),
                Some(name),
            )),
        }
    }

    /// An optional unix timestamp.
    pub(crate) fn timestamp(&self, name: &str) -> Result<Option<i64>, StripeError> {
        match self.get(name) {
            None => Ok(None),
            Some(text) => text.trim().parse::<i64>().map(Some).map_err(|_| {
                errors::invalid(
                    "parameter_invalid_integer",
                    format!("Invalid integer: {text}"),
                    Some(name),
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_names_metadata_and_canonical_order() {
        let a = Form::parse(b"amount=100&metadata%5Border%5D=42&currency=brl");
        let b = Form::parse(b"currency=brl&amount=100&metadata[order]=42");
        assert_eq!(a.canonical(), b.canonical());
        assert_eq!(a.metadata().get("order").map(String::as_str), Some("42"));
        assert!(a.check_known(&["amount", "currency", "metadata"]).is_ok());
        let err = a.check_known(&["amount", "currency"]).unwrap_err();
        assert!(err.message.contains("metadata[order]"), "{}", err.message);
        assert_eq!(a.amount("amount").unwrap(), Some(100));
        assert!(Form::parse(b"amount=abc").amount("amount").is_err());
        assert!(Form::parse(b"amount=0").amount("amount").is_err());
    }
}
