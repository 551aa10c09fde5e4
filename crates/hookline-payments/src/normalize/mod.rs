//! Raw provider events → provider-neutral [`PaymentFact`]s: the one place that knows each provider's payload.
//!
//! [`normalize`] is pure (no I/O, no clock), so a stored event can be normalized again at any time, e.g. when
//! it is replayed after a bug fix, and yields the same facts.
//!
//! Two outcomes are kept apart on purpose:
//! - `Ok([PaymentFact::Ignored { .. }])`: the event is well-formed but means nothing for payments (an unhandled
//!   type, a failed refund, a one-off invoice). The worker records it and acknowledges it.
//! - `Err(PermanentError)`: the payload can never be applied (not JSON, a missing id, a malformed amount). It
//!   becomes a dead letter that a person reads, so every message starts with the field's path in the payload
//!   (`data.object.amount_received`, `transaction[paid_amount]`) and shows the offending value.
//!
//! Validation is strict because a lenient reading of money is worse than a dead letter: an amount is an integer
//! number of minor units in `1..=`[`MAX_AMOUNT`] (no floats, no strings in JSON, digits only in forms) and a
//! currency is three ASCII letters. Every [`Money`](super::model::Money) returned therefore has `amount > 0`
//! and a lower-case three-letter currency. Only the fields a mapping needs are read: an event type that is not
//! handled is ignored without looking at the rest of its body.
//!
//! This module owns the entry point, the dispatch on the signature scheme, and the error and validation helpers
//! every dialect shares (field paths in messages, ids, amounts, currencies), so all of them refuse the same bad
//! values with the same words. Each dialect has its own file, as in `hookline-signature`'s `schemes/`:
//! `stripe.rs` (JSON events), `pagarme.rs` (form-urlencoded postbacks), `mercadopago.rs` (notifications that
//! only name a resource to fetch) and `pagarme_v5.rs` (the charge or order a v5 webhook names, read from the API). The two payload formats have theirs too: `json.rs` (the path-tracking
//! accessor `Obj`) and `form.rs` (the strict form parser).

mod form;
mod json;
mod mercadopago;
pub use mercadopago::payment_resource;
mod pagarme;
mod pagarme_v5;
pub use pagarme_v5::{
    keyed_object as pagarme_v5_object, object_resource as pagarme_v5_object_resource,
};
mod stripe;

use std::fmt::Display;

use hookline_signature::Scheme;

use super::model::{PaymentFact, PermanentError};

/// The largest amount accepted, in minor units (10^15, i.e. 10 trillion in a two-decimal currency).
///
/// No real payment comes near it; a larger value means a unit mix-up or a corrupt payload, and keeping amounts
/// this small leaves ledger sums far from `i64` overflow.
pub const MAX_AMOUNT: i64 = 1_000_000_000_000_000;

/// Longest provider id accepted. Ids become database keys and log fields; real ones are far shorter.
const MAX_ID_LEN: usize = 255;

/// How much of an offending value an error message or ignore reason quotes: enough to recognise it, while a
/// hostile payload cannot blow up the dead-letter record.
const EXCERPT_CHARS: usize = 80;

/// Turns one stored provider event into payment facts. Pure: no I/O.
///
/// - `scheme`: the provider's signature scheme, which decides the payload format and mapping (the configured
///   provider name is irrelevant here).
/// - `event_type`: what the edge extracted at ingest (Stripe: body `type`; Pagar.me: form field `event`). The
///   body stays the source of truth; for Stripe and Pagar.me a value that disagrees with the body is an error,
///   because both were read from the same stored bytes and a mismatch means the record is corrupt. Mercado
///   Pago's ingest value (`type`, else `action`) is not compared.
/// - `body`: the raw stored body.
///
/// Returns usually one fact; `charge.refunded` may yield several refunds, and a Pagar.me `refunded` or
/// `chargedback` postback yields the payment plus the refund or dispute. Events without meaning for payments
/// yield `[Ignored { reason }]`. Never panics, whatever the input.
///
/// # Errors
///
/// A [`PermanentError`] naming the field when the body cannot be parsed, a required field is missing or has the
/// wrong type, an amount is not an integer in `1..=`[`MAX_AMOUNT`], a currency is not three letters, or the body
/// contradicts itself or `event_type`.
pub fn normalize(
    scheme: Scheme,
    event_type: Option<&str>,
    body: &[u8],
) -> Result<Vec<PaymentFact>, PermanentError> {
    match scheme {
        Scheme::Stripe => stripe::normalize(event_type, body),
        Scheme::Pagarme => pagarme::normalize(event_type, body),
        Scheme::MercadoPago => mercadopago::normalize(body),
        Scheme::PagarmeV5 => pagarme_v5::normalize(event_type),
        // Listed one by one rather than `_`, so that adding a scheme forces a decision here.
        Scheme::StandardWebhooks
        | Scheme::Svix
        | Scheme::Github
        | Scheme::Shopify
        | Scheme::Adyen => Ok(vec![ignored(format!(
            "no payments mapping for scheme {scheme}"
        ))]),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------------------------

fn ignored(reason: String) -> PaymentFact {
    PaymentFact::Ignored { reason }
}

/// `"{path}: {message}"`: every dead letter starts with the field it is about.
fn field_error(path: &str, message: impl Display) -> PermanentError {
    PermanentError(format!("{path}: {message}"))
}

/// The ingest-time event type must match the body it was extracted from.
fn check_event_type(recorded: Option<&str>, field: &str, body: &str) -> Result<(), PermanentError> {
    match recorded {
        Some(recorded) if recorded != body => Err(field_error(
            field,
            format!(
                "{} differs from the event type {} recorded at ingest",
                quoted(body),
                quoted(recorded)
            ),
        )),
        _ => Ok(()),
    }
}

/// At most [`EXCERPT_CHARS`] characters of `s`, cut on a character boundary.
fn excerpt(s: &str) -> String {
    match s.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

/// An excerpt in double quotes with control characters escaped, so a value is unambiguous in a message.
fn quoted(s: &str) -> String {
    format!("{:?}", excerpt(s))
}

/// A provider id used as a key: non-empty, bounded, without whitespace or control characters (none of the
/// providers' ids have them, and they would make keys ambiguous in logs and URLs).
fn check_id(path: &str, id: &str) -> Result<String, PermanentError> {
    if id.is_empty() {
        return Err(field_error(path, "is empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(field_error(
            path,
            format!("is {} bytes long, more than {MAX_ID_LEN}", id.len()),
        ));
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(field_error(
            path,
            format!("{} contains whitespace or control characters", quoted(id)),
        ));
    }
    Ok(id.to_owned())
}

/// Range check shared by both encodings. `allow_zero` is only for totals where 0 means "nothing happened"
/// (the caller then ignores the event); a [`Money`] is never built from 0.
fn check_amount(path: &str, value: i64, allow_zero: bool) -> Result<i64, PermanentError> {
    if value < 0 || (value == 0 && !allow_zero) {
        return Err(field_error(
            path,
            format!("{value} is not a positive amount"),
        ));
    }
    if value > MAX_AMOUNT {
        return Err(field_error(
            path,
            format!("{value} exceeds the maximum amount {MAX_AMOUNT}"),
        ));
    }
    Ok(value)
}

fn check_currency(path: &str, code: &str) -> Result<String, PermanentError> {
    if code.len() == 3 && code.bytes().all(|b| b.is_ascii_alphabetic()) {
        Ok(code.to_ascii_lowercase())
    } else {
        Err(field_error(
            path,
            format!("{} is not a 3-letter currency code", quoted(code)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_cuts_on_char_boundaries() {
        let long = "ã".repeat(EXCERPT_CHARS + 5);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt("short"), "short");
    }

    #[test]
    fn currency_is_lower_cased_and_checked() {
        assert_eq!(check_currency("c", "USD").unwrap(), "usd");
        assert!(check_currency("c", "us").is_err());
        assert!(check_currency("c", "u1d").is_err());
        // Three bytes but not three letters.
        assert!(check_currency("c", "é1").is_err());
    }
}
