//! The `application/x-www-form-urlencoded` parser Pagar.me postbacks are read with.
//!
//! Kept apart from the Pagar.me mapping because it is a format, not a dialect: it owns percent-decoding, the
//! rules for absent, null and repeated fields, and the strict digits-only reading of amounts.

use super::{check_amount, excerpt, field_error, quoted, MAX_AMOUNT};
use crate::model::PermanentError;

/// A decoded `application/x-www-form-urlencoded` body.
pub(super) struct Form {
    /// `(name, value)` in body order; the value is `None` when its percent-decoded bytes are not UTF-8.
    /// Pairs whose *name* is not UTF-8 are dropped: they cannot be a field we read.
    pairs: Vec<(String, Option<String>)>,
}

impl Form {
    /// Splits on `&` and each pair on its first `=`, decoding `+` and `%XX` like the WHATWG form parser
    /// (a `%` not followed by two hex digits stays literal). Unlike `form_urlencoded::parse`, invalid UTF-8
    /// is not replaced with U+FFFD: a mangled amount or id must be an error, not a silently altered value.
    pub(super) fn parse(text: &str) -> Form {
        let pairs = text
            .split('&')
            .filter(|segment| !segment.is_empty())
            .filter_map(|segment| {
                let (name, value) = segment.split_once('=').unwrap_or((segment, ""));
                let name = String::from_utf8(percent_decode(name)).ok()?;
                Some((name, String::from_utf8(percent_decode(value)).ok()))
            })
            .collect();
        Form { pairs }
    }

    /// The value of field `name`. Empty values and the literal `null` (how Pagar.me serialises a null
    /// field, e.g. `transaction[refuse_reason]=null`) count as absent. A field repeated with different
    /// values is an error: the edge keys dedupe on the first occurrence, and guessing which copy is right
    /// about money is not safe.
    pub(super) fn get(&self, name: &str) -> Result<Option<&str>, PermanentError> {
        let mut found: Option<&str> = None;
        for (key, value) in &self.pairs {
            if key != name {
                continue;
            }
            let value = value
                .as_deref()
                .ok_or_else(|| field_error(name, "not valid UTF-8 after percent-decoding"))?;
            if value.is_empty() || value == "null" {
                continue;
            }
            match found {
                None => found = Some(value),
                Some(first) if first == value => {}
                Some(first) => {
                    return Err(field_error(
                        name,
                        format!(
                            "appears more than once with different values ({} and {})",
                            quoted(first),
                            quoted(value)
                        ),
                    ))
                }
            }
        }
        Ok(found)
    }

    pub(super) fn required(&self, name: &str) -> Result<&str, PermanentError> {
        self.get(name)?.ok_or_else(|| field_error(name, "missing"))
    }

    /// An amount in cents. Pagar.me sends amounts as digit strings, parsed strictly: no sign, no decimal
    /// point, no spaces, because `10.50` or `1,050` would otherwise be misread by a factor of 100.
    pub(super) fn amount(&self, name: &str) -> Result<Option<i64>, PermanentError> {
        let Some(text) = self.get(name)? else {
            return Ok(None);
        };
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(field_error(
                name,
                format!(
                    "{} is not an integer amount in cents (digits only)",
                    quoted(text)
                ),
            ));
        }
        let significant = text.trim_start_matches('0');
        // 16 digits already exceed MAX_AMOUNT while still fitting in i64, so parse cannot overflow.
        if significant.len() > 16 {
            return Err(field_error(
                name,
                format!("{} exceeds the maximum amount {MAX_AMOUNT}", excerpt(text)),
            ));
        }
        let value = if significant.is_empty() {
            0
        } else {
            significant.parse::<i64>().map_err(|_| {
                field_error(
                    name,
                    format!("{} is not an integer amount in cents", quoted(text)),
                )
            })?
        };
        check_amount(name, value, false).map(Some)
    }
}

fn percent_decode(input: &str) -> Vec<u8> {
    fn hex(byte: Option<&u8>) -> Option<u8> {
        byte.and_then(|b| char::from(*b).to_digit(16))
            .and_then(|d| u8::try_from(d).ok())
    }
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => match (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                (Some(high), Some(low)) => {
                    out.push(high * 16 + low);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_plus_percent_and_keeps_stray_percent() {
        assert_eq!(percent_decode("a+b%20c"), b"a b c");
        assert_eq!(percent_decode("100%"), b"100%");
        assert_eq!(percent_decode("%4"), b"%4");
        assert_eq!(percent_decode("%zz%C3%A3"), "%zzã".as_bytes());
    }

    #[test]
    fn form_names_are_decoded_and_invalid_utf8_is_kept_apart() {
        let form = Form::parse("transaction%5Bamount%5D=1000&bad=%FF&=x&&k");
        assert_eq!(form.get("transaction[amount]").unwrap(), Some("1000"));
        assert!(form.get("bad").is_err());
        assert_eq!(form.get("k").unwrap(), None);
        assert_eq!(form.get("absent").unwrap(), None);
    }

    #[test]
    fn null_and_empty_are_absent_and_conflicts_are_errors() {
        let form = Form::parse("a=null&b=&c=1&c=1&d=1&d=2");
        assert_eq!(form.get("a").unwrap(), None);
        assert_eq!(form.get("b").unwrap(), None);
        assert_eq!(form.get("c").unwrap(), Some("1"));
        assert!(form.get("d").is_err());
    }

    #[test]
    fn amounts_are_strict_digits() {
        let form =
            Form::parse("a=0001000&b=10.50&c=-5&d=0&e=99999999999999999999&f=1000000000000000");
        assert_eq!(form.amount("a").unwrap(), Some(1000));
        assert!(form.amount("b").is_err());
        assert!(form.amount("c").is_err());
        assert!(form.amount("d").is_err());
        assert!(form.amount("e").is_err());
        assert_eq!(form.amount("f").unwrap(), Some(MAX_AMOUNT));
    }
}
