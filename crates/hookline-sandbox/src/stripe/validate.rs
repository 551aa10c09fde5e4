//! Stripe parameter validation, before execution: nothing is saved under the idempotency key when it fails, as
//! Stripe documents. Each `validate_*` turns a form into an [`ops::Request`](super::ops::Request) or Stripe's
//! error for it.

use super::book::money;
use super::confirm::off_session_without_customer;
use super::errors::{self, StripeError};
use super::form::Form;
use super::request::*;
use url::Url;

const MIN_AMOUNT: i64 = 50;
const MAX_AMOUNT: i64 = 99_999_999;

/// The parameters of `POST /v1/payment_intents/{id}/confirm`, which creating an intent takes as well.
const CONFIRM_PARAMS: &[&str] = &[
    "expand",
    "off_session",
    "payment_method",
    "payment_method_types",
    "receipt_email",
    "return_url",
    "setup_future_usage",
];

fn text(form: &Form, name: &str) -> Option<String> {
    form.get(name)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

pub(crate) fn validate_create_intent(form: &Form) -> Result<Request, StripeError> {
    let creation_only = [
        "amount",
        "automatic_payment_methods",
        "capture_method",
        "confirm",
        "currency",
        "customer",
        "description",
        "metadata",
        "statement_descriptor",
        "statement_descriptor_suffix",
    ];
    form.check_known(&[&creation_only[..], CONFIRM_PARAMS].concat())?;
    let amount = form.amount("amount")?.ok_or_else(|| {
        errors::invalid(
            "parameter_missing",
            "Missing required param: amount.",
            Some("amount"),
        )
    })?;
    let currency = text(form, "currency").ok_or_else(|| {
        errors::invalid(
            "parameter_missing",
            "Missing required param: currency.",
            Some("currency"),
        )
    })?;
    if currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(errors::invalid_uncoded(
            format!("Invalid currency: {}.", currency.to_ascii_lowercase()),
            Some("currency"),
        ));
    }
    let currency = currency.to_ascii_lowercase();
    if amount < MIN_AMOUNT {
        return Err(errors::invalid(
            "amount_too_small",
            format!("Amount must be at least {}", money(MIN_AMOUNT, &currency)),
            Some("amount"),
        ));
    }
    if amount > MAX_AMOUNT {
        return Err(errors::invalid(
            "amount_too_large",
            format!(
                "Amount must be no more than {}",
                money(MAX_AMOUNT, &currency)
            ),
            Some("amount"),
        ));
    }
    // `automatic_async` captures at once as `automatic` does (the sandbox has no asynchronous balance updates).
    let capture_method = match form.get("capture_method") {
        None | Some("automatic") => "automatic",
        Some("automatic_async") => "automatic_async",
        Some("manual") => "manual",
        Some(other) => {
            return Err(errors::invalid_uncoded(
                format!(
                    "Invalid capture_method: must be one of automatic, automatic_async, or manual (it is '{}')",
                    other.chars().take(40).collect::<String>()
                ),
                Some("capture_method"),
            ))
        }
    };
    let confirm = form.boolean("confirm")?.unwrap_or(false);
    let customer = bounded_id(form, "customer")?;
    let confirmation = confirmation(form)?;
    // Stripe: `off_session` "can only be set to true when `confirm=true`", and a merchant-initiated charge
    // needs the customer the saved payment method is attached to
    // (https://docs.stripe.com/api/payment_intents/create#create_payment_intent-off_session): refused naming
    // `payment_method`, like a method not saved to the customer (`confirm::check_off_session`). The messages
    // are the sandbox's wording.
    if confirmation.off_session && !confirm {
        return Err(errors::invalid_uncoded(
            "You can only set `off_session` when `confirm` is true.",
            Some("off_session"),
        ));
    }
    if confirmation.off_session && customer.is_none() {
        let given = confirmation.payment_method.as_deref().unwrap_or("given");
        return Err(off_session_without_customer(given));
    }
    Ok(Request::CreateIntent(NewIntent {
        amount,
        currency,
        customer,
        description: form.get("description").map(str::to_owned),
        metadata: form.metadata(),
        confirm,
        payment_method: confirmation.payment_method,
        off_session: confirmation.off_session,
        return_url: confirmation.return_url,
        capture_method,
    }))
}

/// Longest id or free-text value the sandbox takes (Stripe's own limits are 5000 characters for free text).
const MAX_TEXT: usize = 5000;

/// An optional object id (`cus_…`, `pm_…`): bounded, printable.
fn bounded_id(form: &Form, name: &str) -> Result<Option<String>, StripeError> {
    match text(form, name) {
        Some(v) if v.len() > 255 || v.chars().any(|c| c.is_control() || c.is_whitespace()) => {
            Err(errors::invalid_uncoded(
                format!("Invalid {name}: must be an object id of at most 255 characters."),
                Some(name),
            ))
        }
        other => Ok(other),
    }
}

/// An optional free-text value, at most [`MAX_TEXT`] characters.
fn bounded_text(form: &Form, name: &str) -> Result<Option<String>, StripeError> {
    match text(form, name) {
        Some(v) if v.chars().count() > MAX_TEXT => Err(errors::invalid_uncoded(
            format!("Invalid {name}: must be at most {MAX_TEXT} characters."),
            Some(name),
        )),
        other => Ok(other),
    }
}

/// `payment_method`, `off_session` (Stripe takes `true`/`false`, or `one_off`/`recurring` meaning true) and
/// `return_url` (an absolute URL; Stripe redirects the customer back to it after 3-D Secure).
fn confirmation(form: &Form) -> Result<Confirmation, StripeError> {
    let off_session = match form.get("off_session") {
        None | Some("false") => false,
        Some("true" | "one_off" | "recurring") => true,
        Some(other) => {
            return Err(errors::invalid(
                "parameter_invalid_boolean",
                format!("Invalid boolean: {other}"),
                Some("off_session"),
            ))
        }
    };
    let return_url = bounded_text(form, "return_url")?;
    if let Some(u) = &return_url {
        let ok = u.len() <= 2048
            && Url::parse(u)
                .is_ok_and(|p| matches!(p.scheme(), "http" | "https") || !p.cannot_be_a_base());
        if !ok {
            return Err(errors::invalid(
                "url_invalid",
                "Not a valid URL",
                Some("return_url"),
            ));
        }
    }
    Ok(Confirmation {
        payment_method: bounded_id(form, "payment_method")?,
        off_session,
        return_url,
    })
}

pub(crate) fn validate_confirm(id: &str, form: &Form) -> Result<Request, StripeError> {
    form.check_known(CONFIRM_PARAMS)?;
    Ok(Request::ConfirmIntent {
        id: id.to_owned(),
        confirmation: confirmation(form)?,
    })
}

/// `POST /v1/payment_intents/{id}/cancel` (<https://docs.stripe.com/api/payment_intents/cancel>): an optional
/// `cancellation_reason` among the four a caller may give.
pub(crate) fn validate_cancel(id: &str, form: &Form) -> Result<Request, StripeError> {
    form.check_known(&["cancellation_reason", "expand"])?;
    let reason = text(form, "cancellation_reason");
    if let Some(r) = &reason {
        if !matches!(
            r.as_str(),
            "duplicate" | "fraudulent" | "requested_by_customer" | "abandoned"
        ) {
            return Err(errors::invalid_uncoded(
                format!(
                    "Invalid cancellation_reason: must be one of duplicate, fraudulent, requested_by_customer, or \
                     abandoned (it is '{r}')"
                ),
                Some("cancellation_reason"),
            ));
        }
    }
    Ok(Request::CancelIntent {
        id: id.to_owned(),
        reason,
    })
}

/// `POST /v1/payment_intents/{id}/capture` (<https://docs.stripe.com/api/payment_intents/capture>): an optional
/// `amount_to_capture` (a positive integer; whether it exceeds what is capturable is decided when it executes)
/// and `metadata[…]`.
pub(crate) fn validate_capture(id: &str, form: &Form) -> Result<Request, StripeError> {
    form.check_known(&[
        "amount_to_capture",
        "expand",
        "metadata",
        "statement_descriptor",
        "statement_descriptor_suffix",
    ])?;
    bounded_text(form, "statement_descriptor")?;
    bounded_text(form, "statement_descriptor_suffix")?;
    Ok(Request::CaptureIntent {
        id: id.to_owned(),
        amount: form.amount("amount_to_capture")?,
        metadata: form.metadata(),
    })
}

/// `POST /v1/customers` (<https://docs.stripe.com/api/customers/create>): every parameter optional.
pub(crate) fn validate_customer(form: &Form) -> Result<Request, StripeError> {
    form.check_known(&[
        "address",
        "description",
        "email",
        "expand",
        "invoice_settings",
        "metadata",
        "name",
        "payment_method",
        "phone",
        "preferred_locales",
        "shipping",
    ])?;
    let email = bounded_text(form, "email")?;
    if email
        .as_ref()
        .is_some_and(|e| e.len() > 512 || !e.contains('@'))
    {
        return Err(errors::invalid(
            "email_invalid",
            "Invalid email address",
            Some("email"),
        ));
    }
    Ok(Request::CreateCustomer(NewCustomer {
        email,
        name: bounded_text(form, "name")?,
        description: bounded_text(form, "description")?,
        metadata: form.metadata(),
        payment_method: bounded_id(form, "payment_method")?,
    }))
}

/// `POST /v1/payment_methods/{id}/attach` with `customer`
/// (<https://docs.stripe.com/api/payment_methods/attach>).
pub(crate) fn validate_attach(id: &str, form: &Form) -> Result<Request, StripeError> {
    form.check_known(&["customer", "expand"])?;
    let customer = bounded_id(form, "customer")?.ok_or_else(|| {
        errors::invalid(
            "parameter_missing",
            "Missing required param: customer.",
            Some("customer"),
        )
    })?;
    Ok(Request::AttachPaymentMethod {
        id: id.to_owned(),
        customer,
    })
}

pub(crate) fn validate_refund(form: &Form) -> Result<Request, StripeError> {
    form.check_known(&[
        "amount",
        "charge",
        "expand",
        "instructions_email",
        "metadata",
        "payment_intent",
        "reason",
        "refund_application_fee",
        "reverse_transfer",
    ])?;
    let target = match (text(form, "payment_intent"), text(form, "charge")) {
        (Some(pi), None) => RefundTarget::Intent(pi),
        (None, Some(ch)) => RefundTarget::Charge(ch),
        (Some(_), Some(_)) => {
            return Err(errors::invalid_uncoded(
                "You can only specify one of these parameters: charge, payment_intent.",
                None,
            ))
        }
        (None, None) => {
            return Err(errors::invalid(
                "parameter_missing",
                "One of the following params should be provided for this request: payment_intent or charge.",
                None,
            ))
        }
    };
    let reason = text(form, "reason");
    if let Some(r) = &reason {
        if !matches!(
            r.as_str(),
            "duplicate" | "fraudulent" | "requested_by_customer"
        ) {
            return Err(errors::invalid_uncoded(
                format!("Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer (it is '{r}')"),
                Some("reason"),
            ));
        }
    }
    Ok(Request::CreateRefund(NewRefund {
        target,
        amount: form.amount("amount")?,
        reason,
        metadata: form.metadata(),
    }))
}
