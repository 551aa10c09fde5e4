//! Text from outside — a path segment, a query or form value, a header, a string inside a JSON body — checked
//! once, here, before it reaches SQL or a log line.
//!
//! Why one module: PostgreSQL `text` (and `jsonb`) cannot hold U+0000, so a NUL that reaches a query is not a
//! "no match" but a `22021 invalid byte sequence` error, which a handler that did not expect it turns into a 500.
//! Checks sprinkled per handler miss one field sooner or later (they did: the API's ids and the console's
//! filters). Every surface — the merchant API, every console handler, the CLI — calls [`text`] (one value) or
//! [`json_strings`] (every string of a JSON document), and maps [`InputError`] to its own 400.
//!
//! Rust strings are UTF-8, so lone surrogates cannot occur; NUL is the one character PostgreSQL's UTF8 text
//! refuses. Other control characters are storable and escaped when logged; fields that must not hold them (a
//! reason, a name) say so with [`InputError::ControlCharacter`] through [`line`].

/// Why a value from outside was refused. Each variant has a stable [`InputError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// The value holds U+0000, which PostgreSQL text cannot store.
    #[error("{field}: contains a NUL character")]
    Nul {
        /// The field (parameter, form field, header) that held it.
        field: String,
    },
    /// The value is longer than its bound.
    #[error("{field}: at most {max} characters")]
    TooLong {
        /// The field.
        field: String,
        /// The bound, in characters.
        max: usize,
    },
    /// A one-line value holds a control character (a line break, an escape).
    #[error("{field}: contains a control character")]
    ControlCharacter {
        /// The field.
        field: String,
    },
}

impl InputError {
    /// Stable machine-readable code (`invalid_text`, `too_long`, `control_character`).
    pub fn code(&self) -> &'static str {
        match self {
            InputError::Nul { .. } => "invalid_text",
            InputError::TooLong { .. } => "too_long",
            InputError::ControlCharacter { .. } => "control_character",
        }
    }

    /// The field that was refused.
    pub fn field(&self) -> &str {
        match self {
            InputError::Nul { field }
            | InputError::TooLong { field, .. }
            | InputError::ControlCharacter { field } => field,
        }
    }
}

/// Longest field name kept in an [`InputError`] (a form's key is outside data too).
const MAX_FIELD_CHARS: usize = 64;

fn field_name(field: &str) -> String {
    field
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_FIELD_CHARS)
        .collect()
}

/// `value` if PostgreSQL can store it and it has at most `max_chars` characters.
pub fn text<'a>(field: &str, value: &'a str, max_chars: usize) -> Result<&'a str, InputError> {
    if value.contains('\0') {
        return Err(InputError::Nul {
            field: field_name(field),
        });
    }
    // Counting stops one past the bound: a megabyte of text costs no more than the bound to refuse.
    if value.chars().take(max_chars.saturating_add(1)).count() > max_chars {
        return Err(InputError::TooLong {
            field: field_name(field),
            max: max_chars,
        });
    }
    Ok(value)
}

/// [`text`], and no control character at all: for one-line values (names, ids, types, URLs).
pub fn line<'a>(field: &str, value: &'a str, max_chars: usize) -> Result<&'a str, InputError> {
    let value = text(field, value, max_chars)?;
    if value.chars().any(char::is_control) {
        return Err(InputError::ControlCharacter {
            field: field_name(field),
        });
    }
    Ok(value)
}

/// Every key and string value of a JSON document is storable (no NUL): `jsonb` refuses `\u0000` as text does.
/// `field` names the document in the error; the offending key or value is named by its JSON pointer.
pub fn json_strings(field: &str, value: &serde_json::Value) -> Result<(), InputError> {
    fn walk(path: &mut String, value: &serde_json::Value) -> Result<(), String> {
        match value {
            serde_json::Value::String(s) if s.contains('\0') => Err(path.clone()),
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("/{i}"));
                    walk(path, item)?;
                    path.truncate(len);
                }
                Ok(())
            }
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let len = path.len();
                    path.push('/');
                    path.push_str(k);
                    if k.contains('\0') {
                        return Err(path.clone());
                    }
                    walk(path, v)?;
                    path.truncate(len);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    let mut path = String::new();
    walk(&mut path, value).map_err(|at| InputError::Nul {
        field: field_name(&format!("{field}{at}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_and_length_are_refused_with_the_field() {
        assert_eq!(text("id", "pi_hl_1", 10), Ok("pi_hl_1"));
        assert_eq!(
            text("id", "pi_\0x", 10).unwrap_err(),
            InputError::Nul { field: "id".into() }
        );
        assert_eq!(text("id", "ééé", 3), Ok("ééé"), "characters, not bytes");
        let long = "x".repeat(1_000_000);
        let e = text("q", &long, 200).unwrap_err();
        assert_eq!(e.code(), "too_long");
        assert_eq!(e.to_string(), "q: at most 200 characters");
    }

    #[test]
    fn lines_refuse_control_characters_text_keeps_them() {
        assert!(text("reason", "two\nlines", 100).is_ok());
        assert_eq!(
            line("type", "a\nb", 100).unwrap_err().code(),
            "control_character"
        );
        assert_eq!(
            line("type", "a\0b", 100).unwrap_err().code(),
            "invalid_text"
        );
    }

    #[test]
    fn json_documents_are_walked_to_the_offending_string() {
        let ok = serde_json::json!({"a": ["x", {"b": "y"}], "n": 1});
        assert!(json_strings("body", &ok).is_ok());
        let bad = serde_json::json!({"a": ["x", {"b": "y\u{0}"}]});
        assert_eq!(
            json_strings("body", &bad).unwrap_err(),
            InputError::Nul {
                field: "body/a/1/b".into()
            }
        );
        let bad_key = serde_json::json!({"k\u{0}": 1});
        assert_eq!(
            json_strings("body", &bad_key).unwrap_err().code(),
            "invalid_text"
        );
    }

    #[test]
    fn field_names_from_outside_are_bounded_and_cleaned() {
        let key = format!("{}\n", "k".repeat(500));
        let e = text(&key, "\0", 10).unwrap_err();
        assert_eq!(e.field().len(), MAX_FIELD_CHARS);
    }
}

/// Longest request-derived value written to a log line.
pub const LOG_TEXT_CHARS: usize = 256;

/// Request-derived text as it may appear in a log line: at most [`LOG_TEXT_CHARS`] characters. Record it with
/// `?` so that `Debug` escapes every control character (`\n`, `\u{1b}`, …): a client cannot forge log lines or
/// send terminal escapes through a provider name, an event id or an error message that quotes them. Every
/// listener (the edge, the merchant API) uses this one rule.
pub fn log_text(value: &str) -> &str {
    match value.char_indices().nth(LOG_TEXT_CHARS) {
        Some((end, _)) => &value[..end],
        None => value,
    }
}

/// `url` fit to show an operator or write to a log: a password or user name (`https://user:pw@host`) and every
/// query value (`?token=…`) and a fragment are replaced by `***`; the scheme, host, port, path and query keys
/// stay, so an operator still recognises the destination. A credential in a destination URL (a receiver's
/// `?token=`) otherwise ends up on the console's pages, in `hookline destinations list` and in logs. Text that
/// is not a URL is not shown at all.
pub fn redacted_url(url: &str) -> String {
    const HIDDEN: &str = "***";
    let Ok(mut u) = url::Url::parse(url.trim()) else {
        return "(not a valid URL)".to_string();
    };
    if !u.username().is_empty() || u.password().is_some() {
        // Only URLs without a host (`mailto:`) refuse userinfo, and those never carry one.
        let _ = u.set_password(None);
        let _ = u.set_username(HIDDEN);
    }
    if let Some(query) = u.query().map(str::to_string) {
        let mut ser = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            if v.is_empty() {
                ser.append_key_only(&k);
            } else {
                ser.append_pair(&k, HIDDEN);
            }
        }
        let redacted = ser.finish();
        u.set_query((!redacted.is_empty()).then_some(redacted.as_str()));
    }
    if u.fragment().is_some() {
        u.set_fragment(Some(HIDDEN));
    }
    u.to_string()
}

#[cfg(test)]
mod redacted_url_tests {
    use super::redacted_url;

    #[test]
    fn userinfo_query_values_and_fragments_are_hidden() {
        assert_eq!(
            redacted_url("https://user:pw@h/p?token=abc&x=1"),
            "https://***@h/p?token=***&x=***"
        );
        assert_eq!(
            redacted_url("https://user@h:8443/p"),
            "https://***@h:8443/p"
        );
        assert_eq!(redacted_url("https://:pw@h/"), "https://***@h/");
        assert_eq!(redacted_url("https://h/p#secret"), "https://h/p#***");
        assert_eq!(redacted_url("https://h/p?flag"), "https://h/p?flag");
    }

    #[test]
    fn plain_urls_are_unchanged_and_non_urls_not_shown() {
        assert_eq!(
            redacted_url("https://erp.example/hooks"),
            "https://erp.example/hooks"
        );
        assert_eq!(redacted_url("not a url token=abc"), "(not a valid URL)");
        assert!(!redacted_url("http://127.0.0.1:9/<script>?k=v").contains('<'));
    }
}
