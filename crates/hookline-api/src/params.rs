//! The provider object of a payment intent (`"stripe": {…}`, `"mercadopago": {…}` or `"pagarme": {…}`): what the gateway needs to
//! charge, checked field by field before it is stored (issue 27).
//!
//! Every field is bounded here, where the merchant can be told which one is wrong (`param` is its path, e.g.
//! `mercadopago.payer.email`); an unknown field is refused by its path too (a typo must not silently drop a
//! card). What each gateway *requires* to confirm is not decided here but by
//! [`PaymentParams::missing_for_confirm`], the one rule the dispatcher applies as well.
//!
//! The object is kept as validated JSON ([`ProviderObject`]) until it is stored, because a confirm may supply
//! only part of it: its fields are laid over the stored ones ([`ProviderObject::merged_over`]).
//!
//! Mercado Pago takes two ways to pay by card, never both in one object: a new card's `token` (made by the
//! merchant's card form), or a card saved at Mercado Pago, `card_id` + `customer_id` — its documented
//! merchant-initiated charge without the security code ("Pagamentos automáticos" / Card on File,
//! <https://www.mercadopago.com.br/developers/en/docs/automatic-payments/recurring-charges>): hookline mints the
//! card's token itself and pays as the customer, so `payment_method_id` is optional (the card's own) and
//! `payer` is not sent (the customer is the payer). A confirm sending one way replaces the other stored.

use hookline_payments::params::{self, PaymentParams};
use hookline_signature::Scheme;
use serde_json::{Map, Value};

use super::error::ApiError;

/// Longest `stripe.return_url`, in bytes.
pub const MAX_RETURN_URL_BYTES: usize = 2000;
/// Longest Mercado Pago card token, in bytes (Mercado Pago's are 32 hex characters).
pub const MAX_TOKEN_BYTES: usize = 128;
/// Most installments accepted (Mercado Pago offers up to 24 in some countries).
pub const MAX_INSTALLMENTS: u64 = 24;
/// Longest e-mail address (RFC 5321's path limit).
pub const MAX_EMAIL_BYTES: usize = 254;

/// The JSON field of each scheme that can be charged.
const STRIPE: &str = "stripe";
const MERCADOPAGO: &str = "mercadopago";
const PAGARME: &str = "pagarme";
/// Most installments Pagar.me takes on a credit card.
pub const MAX_PAGARME_INSTALLMENTS: u64 = 12;

/// The JSON field name of a scheme's provider object, when the scheme can be charged through the API.
pub fn field_of(scheme: Scheme) -> Option<&'static str> {
    match scheme {
        Scheme::Stripe => Some(STRIPE),
        Scheme::MercadoPago => Some(MERCADOPAGO),
        _ => None,
    }
}

/// A validated provider object: the scheme's field name and its (checked) fields.
#[derive(Clone)]
pub struct ProviderObject {
    field: &'static str,
    fields: Map<String, Value>,
}

// A card token is a credential: no Debug of the fields.
impl std::fmt::Debug for ProviderObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderObject")
            .field("field", &self.field)
            .field("fields", &self.fields.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ProviderObject {
    /// The JSON field it came in (`stripe`, `mercadopago`).
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The parameters to store: this object alone.
    pub fn to_params(&self) -> Result<PaymentParams, ApiError> {
        typed(self.field, self.fields.clone())
    }

    /// This object's fields laid over `stored` (a confirm supplying the payment method of an intent created
    /// with a customer, say): a field sent now replaces the stored one; `payer`'s fields are laid over the
    /// stored payer's.
    pub fn merged_over(&self, stored: Option<&PaymentParams>) -> Result<PaymentParams, ApiError> {
        let mut base = match stored.map(serde_json::to_value).transpose() {
            Ok(Some(Value::Object(mut outer))) => match outer.remove(self.field) {
                Some(Value::Object(inner)) => inner,
                // Stored for another scheme: the caller refuses that before; nothing to lay over.
                _ => Map::new(),
            },
            Ok(_) => Map::new(),
            Err(e) => {
                return Err(ApiError::Unexpected(
                    anyhow::Error::new(e).context("read the stored payment parameters"),
                ))
            }
        };
        // One way to pay by card: a new card's token replaces a stored saved card, and the other way round.
        if self.field == PAGARME {
            let sent = |k: &str| self.fields.contains_key(k);
            if sent("card_token") {
                base.remove("card_id");
            }
            if sent("card_id") {
                base.remove("card_token");
            }
            // A saved customer replaces a new one, and the other way round.
            if sent("customer_id") {
                base.remove("customer");
            }
            if sent("customer") {
                base.remove("customer_id");
            }
        }
        if self.field == MERCADOPAGO {
            let sent = |k: &str| self.fields.contains_key(k);
            if sent("token") {
                base.remove("card_id");
                base.remove("customer_id");
            }
            if sent("card_id") || sent("customer_id") {
                base.remove("token");
            }
        }
        for (k, v) in &self.fields {
            match (base.get_mut(k), v) {
                (Some(Value::Object(old)), Value::Object(new)) => {
                    for (nk, nv) in new {
                        old.insert(nk.clone(), nv.clone());
                    }
                }
                _ => {
                    base.insert(k.clone(), v.clone());
                }
            }
        }
        typed(self.field, base)
    }
}

/// The empty provider object of `scheme` (an intent created without one): what is missing is named by
/// [`PaymentParams::missing_for_confirm`].
pub fn empty(scheme: Scheme) -> Option<PaymentParams> {
    field_of(scheme).and_then(|f| typed(f, Map::new()).ok())
}

fn typed(field: &'static str, fields: Map<String, Value>) -> Result<PaymentParams, ApiError> {
    let mut outer = Map::new();
    outer.insert(field.to_owned(), Value::Object(fields));
    // Every field was checked against the same shape: a failure here is ours.
    serde_json::from_value(Value::Object(outer)).map_err(|e| {
        ApiError::Unexpected(anyhow::Error::new(e).context("build the payment parameters"))
    })
}

/// The provider object in `body` (`None` when absent or null). An object named after another scheme than
/// `scheme` is 400 `provider_object_mismatch`; `scheme` `None` accepts either (a confirm, before its intent is
/// read), but never both.
pub fn from_body(
    body: &Map<String, Value>,
    scheme: Option<Scheme>,
) -> Result<Option<ProviderObject>, ApiError> {
    let present: Vec<&'static str> = [STRIPE, MERCADOPAGO, PAGARME]
        .into_iter()
        .filter(|f| body.get(*f).is_some_and(|v| !v.is_null()))
        .collect();
    let expected = scheme.and_then(field_of);
    if let Some(other) = present.iter().find(|f| expected.is_some_and(|e| e != **f)) {
        return Err(ApiError::ProviderObjectMismatch {
            param: (*other).to_owned(),
            expected: expected.unwrap_or_default(),
        });
    }
    if present.len() > 1 {
        return Err(ApiError::ProviderObjectMismatch {
            param: present[1].to_owned(),
            expected: present[0],
        });
    }
    let Some(field) = present.first().copied() else {
        return Ok(None);
    };
    let Some(Value::Object(fields)) = body.get(field) else {
        return Err(invalid(field, "must be an object"));
    };
    let fields = match field {
        STRIPE => stripe(fields)?,
        PAGARME => pagarme(fields)?,
        _ => mercadopago(fields)?,
    };
    Ok(Some(ProviderObject { field, fields }))
}

fn invalid(param: impl Into<String>, what: &str) -> ApiError {
    let param = param.into();
    let message = format!("{param} {what}");
    ApiError::field("parameter_invalid", param, message)
}

/// Refuses a field not in `allowed`, naming its path.
fn refuse_unknown(
    prefix: &str,
    fields: &Map<String, Value>,
    allowed: &[&str],
) -> Result<(), ApiError> {
    match fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => {
            let name: String = k.chars().take(64).collect();
            Err(ApiError::field(
                "unknown_field",
                format!("{prefix}.{name}"),
                format!(
                    "unknown field; accepted in {prefix}: {}",
                    allowed.join(", ")
                ),
            ))
        }
    }
}

/// Copies the non-null fields (null means absent), checking each with `check`.
fn checked(
    prefix: &str,
    fields: &Map<String, Value>,
    mut check: impl FnMut(&str, &str, &Value) -> Result<Value, ApiError>,
) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    for (k, v) in fields.iter().filter(|(_, v)| !v.is_null()) {
        let path = format!("{prefix}.{k}");
        out.insert(k.clone(), check(&path, k, v)?);
    }
    Ok(out)
}

/// A string of 1..=`max` bytes whose every byte passes `ok`.
fn ascii(
    path: &str,
    v: &Value,
    max: usize,
    ok: fn(u8) -> bool,
    what: &str,
) -> Result<Value, ApiError> {
    match v.as_str() {
        Some(s) if !s.is_empty() && s.len() <= max && s.bytes().all(ok) => Ok(v.clone()),
        _ => Err(invalid(path, what)),
    }
}

fn stripe(fields: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    refuse_unknown(
        STRIPE,
        fields,
        &["payment_method", "customer", "off_session", "return_url"],
    )?;
    checked(STRIPE, fields, |path, k, v| match k {
        "payment_method" => match v.as_str() {
            Some(s) if params::is_stripe_id(s, params::STRIPE_PAYMENT_METHOD_PREFIXES) => {
                Ok(v.clone())
            }
            _ => Err(invalid(
                path,
                "must be a Stripe PaymentMethod id (pm_…; card_… or src_… of older integrations)",
            )),
        },
        "customer" => match v.as_str() {
            Some(s) if params::is_stripe_id(s, params::STRIPE_CUSTOMER_PREFIXES) => Ok(v.clone()),
            _ => Err(invalid(path, "must be a Stripe Customer id (cus_…)")),
        },
        "off_session" => match v {
            Value::Bool(_) => Ok(v.clone()),
            _ => Err(invalid(path, "must be true or false")),
        },
        _ => match v.as_str() {
            Some(s) if https_url(s) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!("must be an https URL of at most {MAX_RETURN_URL_BYTES} bytes"),
            )),
        },
    })
}

/// An absolute https URL with a host, at most [`MAX_RETURN_URL_BYTES`], without spaces or control characters
/// (the URL parser would quietly drop or encode them: what is stored must be what was sent).
fn https_url(s: &str) -> bool {
    s.len() <= MAX_RETURN_URL_BYTES
        && s.bytes().all(|b| b.is_ascii_graphic())
        && url::Url::parse(s)
            .is_ok_and(|u| u.scheme() == "https" && u.host_str().is_some_and(|h| !h.is_empty()))
}

fn mercadopago(fields: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    refuse_unknown(
        MERCADOPAGO,
        fields,
        &[
            "token",
            "card_id",
            "customer_id",
            "payment_method_id",
            "installments",
            "issuer_id",
            "payer",
        ],
    )?;
    let out = checked(MERCADOPAGO, fields, |path, k, v| match k {
        "token" => ascii(
            path,
            v,
            MAX_TOKEN_BYTES,
            |b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_',
            &format!("must be a card token: letters, digits, - and _, at most {MAX_TOKEN_BYTES}"),
        ),
        "payment_method_id" => ascii(
            path,
            v,
            50,
            |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_',
            "must be a Mercado Pago payment method id (visa, master, pix, bolbradesco, …)",
        ),
        "installments" => match v.as_u64() {
            Some(n) if (1..=MAX_INSTALLMENTS).contains(&n) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!("must be an integer from 1 to {MAX_INSTALLMENTS}"),
            )),
        },
        // Mercado Pago's issuer ids are numeric; its front-end SDKs hand them over as text or as a number.
        "issuer_id" => match v {
            Value::Number(n) if n.as_u64().is_some() => Ok(Value::String(n.to_string())),
            _ => ascii(
                path,
                v,
                32,
                |b| b.is_ascii_alphanumeric(),
                "must be an issuer id (letters and digits, at most 32)",
            ),
        },
        // Mercado Pago's card ids are numeric; its answers carry them as text or as a number.
        "card_id" => match v {
            Value::Number(n) if n.as_u64().is_some() => Ok(Value::String(n.to_string())),
            Value::String(s) if params::is_mercadopago_card_id(s) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!(
                    "must be a Mercado Pago saved card id (digits, at most {})",
                    params::MAX_MERCADOPAGO_CARD_ID_BYTES
                ),
            )),
        },
        "customer_id" => match v.as_str() {
            Some(s) if params::is_mercadopago_customer_id(s) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!(
                    "must be a Mercado Pago customer id (letters, digits and -, at most {})",
                    params::MAX_MERCADOPAGO_CUSTOMER_ID_BYTES
                ),
            )),
        },
        _ => payer(path, v),
    })?;
    saved_card_rules(&out)?;
    Ok(out)
}

/// A saved card (`card_id` / `customer_id`) is paid without the merchant's `token` (hookline mints one) and only
/// with a card method.
fn saved_card_rules(fields: &Map<String, Value>) -> Result<(), ApiError> {
    let saved = fields.contains_key("card_id") || fields.contains_key("customer_id");
    if !saved {
        return Ok(());
    }
    if fields.contains_key("token") {
        return Err(invalid(
            "mercadopago.token",
            "cannot be sent with mercadopago.card_id or mercadopago.customer_id: a new card is paid by its \
             token, a saved card by card_id + customer_id",
        ));
    }
    if let Some(Value::String(m)) = fields.get("payment_method_id") {
        if params::MERCADOPAGO_NON_CARD_METHODS.contains(&m.as_str()) {
            return Err(invalid(
                "mercadopago.payment_method_id",
                "must be a card method with a saved card (card_id)",
            ));
        }
    }
    Ok(())
}

/// Pagar.me v5's provider object ([`params::PagarmeParams`]): ids by their documented prefixes (they go into the
/// order as they are, and a saved card's into no path but still bounded), the method one of
/// [`params::PAGARME_METHODS`], a card by `card_id` or `card_token` (never both) and only with `credit_card`.
fn pagarme(fields: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    refuse_unknown(
        PAGARME,
        fields,
        &[
            "payment_method",
            "card_id",
            "card_token",
            "installments",
            "customer_id",
            "customer",
            "statement_descriptor",
        ],
    )?;
    let id = |path: &str, v: &Value, prefix: &str, what: &str| match v.as_str() {
        Some(s) if params::is_pagarme_id(s, prefix) => Ok(v.clone()),
        _ => Err(invalid(
            path,
            &format!(
                "must be a Pagar.me {what} id ({prefix}…: letters and digits, at most {})",
                params::MAX_PAGARME_ID_BYTES
            ),
        )),
    };
    let out = checked(PAGARME, fields, |path, k, v| match k {
        "payment_method" => match v.as_str() {
            Some(m) if params::PAGARME_METHODS.contains(&m) => Ok(v.clone()),
            _ => Err(invalid(path, "must be credit_card, pix or boleto")),
        },
        "card_id" => id(path, v, "card_", "card"),
        "card_token" => id(path, v, "token_", "card token"),
        "customer_id" => id(path, v, "cus_", "customer"),
        "installments" => match v.as_u64() {
            Some(n) if (1..=MAX_PAGARME_INSTALLMENTS).contains(&n) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!("must be an integer from 1 to {MAX_PAGARME_INSTALLMENTS}"),
            )),
        },
        // Pagar.me cuts the statement descriptor at 13 characters; letters, digits and spaces.
        "statement_descriptor" => ascii(
            path,
            v,
            13,
            |b| b.is_ascii_alphanumeric() || b == b' ',
            "must be at most 13 letters, digits or spaces",
        ),
        _ => pagarme_customer(path, v),
    })?;
    let card = out.contains_key("card_id") || out.contains_key("card_token");
    if out.contains_key("card_id") && out.contains_key("card_token") {
        return Err(invalid(
            "pagarme.card_token",
            "cannot be sent with pagarme.card_id: a saved card or a new card's token, not both",
        ));
    }
    if card && matches!(out.get("payment_method"), Some(Value::String(m)) if m != "credit_card") {
        return Err(invalid(
            "pagarme.payment_method",
            "must be credit_card with a card_id or card_token",
        ));
    }
    if out.contains_key("customer_id") && out.contains_key("customer") {
        return Err(invalid(
            "pagarme.customer",
            "cannot be sent with pagarme.customer_id: a saved customer or a new one, not both",
        ));
    }
    Ok(out)
}

fn pagarme_customer(path: &str, v: &Value) -> Result<Value, ApiError> {
    let Value::Object(fields) = v else {
        return Err(invalid(path, "must be an object"));
    };
    refuse_unknown(path, fields, &["name", "email", "document", "type"])?;
    let out = checked(path, fields, |path, k, v| match k {
        "name" => match v.as_str() {
            Some(s)
                if !s.trim().is_empty()
                    && s.chars().count() <= 64
                    && !s.chars().any(char::is_control) =>
            {
                Ok(v.clone())
            }
            _ => Err(invalid(path, "must be a name of 1 to 64 characters")),
        },
        "email" => match v.as_str() {
            Some(s) if email(s) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!("must be an e-mail address (name@domain.tld, at most {MAX_EMAIL_BYTES})"),
            )),
        },
        "document" => ascii(
            path,
            v,
            16,
            |b| b.is_ascii_digit(),
            "must be a CPF or CNPJ: digits only, at most 16",
        ),
        _ => match v.as_str() {
            Some("individual" | "company") => Ok(v.clone()),
            _ => Err(invalid(path, "must be individual or company")),
        },
    })?;
    Ok(Value::Object(out))
}

fn payer(path: &str, v: &Value) -> Result<Value, ApiError> {
    let Value::Object(fields) = v else {
        return Err(invalid(path, "must be an object"));
    };
    refuse_unknown(path, fields, &["email", "identification"])?;
    let out = checked(path, fields, |path, k, v| match k {
        "email" => match v.as_str() {
            Some(s) if email(s) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!("must be an e-mail address (name@domain.tld, at most {MAX_EMAIL_BYTES})"),
            )),
        },
        _ => identification(path, v),
    })?;
    Ok(Value::Object(out))
}

/// The shape of an address, not its existence: one `@`, a non-empty local part of at most 64 bytes, a domain
/// with a dot and no empty label, no spaces or control characters.
fn email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    s.len() <= MAX_EMAIL_BYTES
        && s.bytes().all(|b| b.is_ascii_graphic())
        && !local.is_empty()
        && local.len() <= 64
        && !domain.contains('@')
        && domain.contains('.')
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn identification(path: &str, v: &Value) -> Result<Value, ApiError> {
    let Value::Object(fields) = v else {
        return Err(invalid(path, "must be an object with type and number"));
    };
    refuse_unknown(path, fields, &["type", "number"])?;
    let out = checked(path, fields, |path, k, v| match k {
        "type" => ascii(
            path,
            v,
            20,
            |b| b.is_ascii_alphabetic(),
            "must be a document type (CPF, CNPJ, DNI, …: letters, at most 20)",
        ),
        _ => ascii(
            path,
            v,
            32,
            |b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'/'),
            "must be a document number (digits, letters, . - /, at most 32)",
        ),
    })?;
    for required in ["type", "number"] {
        if !out.contains_key(required) {
            return Err(ApiError::ParameterMissing {
                param: format!("{path}.{required}"),
            });
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod pagarme_tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Result<Option<ProviderObject>, ApiError> {
        from_body(v.as_object().expect("object"), None)
    }

    fn param_of(e: ApiError) -> String {
        match e {
            ApiError::InvalidField { param, .. } | ApiError::ParameterMissing { param } => param,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn a_pagarme_object_is_checked_field_by_field() {
        let ok = object(
            json!({"pagarme": {"payment_method": "credit_card", "card_id": "card_abc",
            "customer_id": "cus_x1", "installments": 1}}),
        )
        .expect("valid")
        .expect("present");
        assert_eq!(ok.field(), "pagarme");
        let params = ok.to_params().expect("params");
        assert_eq!(params.missing_for_confirm(), None);
        let new = object(json!({"pagarme": {"payment_method": "pix",
            "customer": {"name": "Tony", "email": "t@x.com", "document": "12345678909", "type": "individual"}}}))
        .expect("valid")
        .expect("present");
        assert_eq!(new.to_params().expect("params").missing_for_confirm(), None);
        for (body, param) in [
            (
                json!({"pagarme": {"payment_method": "debit"}}),
                "pagarme.payment_method",
            ),
            (
                json!({"pagarme": {"card_id": "card_a/b"}}),
                "pagarme.card_id",
            ),
            (
                json!({"pagarme": {"card_token": "card_1"}}),
                "pagarme.card_token",
            ),
            (
                json!({"pagarme": {"customer_id": "c_1"}}),
                "pagarme.customer_id",
            ),
            (
                json!({"pagarme": {"installments": 13}}),
                "pagarme.installments",
            ),
            (
                json!({"pagarme": {"card_number": "4000000000000010"}}),
                "pagarme.card_number",
            ),
            (
                json!({"pagarme": {"card_id": "card_1", "card_token": "token_1"}}),
                "pagarme.card_token",
            ),
            (
                json!({"pagarme": {"payment_method": "pix", "card_id": "card_1"}}),
                "pagarme.payment_method",
            ),
            (
                json!({"pagarme": {"customer_id": "cus_1", "customer": {"name": "x"}}}),
                "pagarme.customer",
            ),
            (
                json!({"pagarme": {"customer": {"document": "123.456"}}}),
                "pagarme.customer.document",
            ),
            (
                json!({"pagarme": {"customer": {"type": "person"}}}),
                "pagarme.customer.type",
            ),
            (
                json!({"pagarme": {"customer": {"cpf": "1"}}}),
                "pagarme.customer.cpf",
            ),
        ] {
            let e = object(body.clone()).expect_err("invalid");
            assert_eq!(param_of(e), param, "{body}");
        }
        // Named after another scheme than the provider's: refused.
        let e = from_body(
            json!({"pagarme": {}}).as_object().expect("object"),
            Some(Scheme::Stripe),
        )
        .expect_err("mismatch");
        assert!(
            matches!(e, ApiError::ProviderObjectMismatch { .. }),
            "{e:?}"
        );
    }

    #[test]
    fn a_confirm_replaces_the_other_way_to_pay() {
        let stored = object(
            json!({"pagarme": {"payment_method": "credit_card", "card_token": "token_1",
            "customer": {"name": "Tony"}}}),
        )
        .expect("valid")
        .expect("present")
        .to_params()
        .expect("params");
        let merged = object(json!({"pagarme": {"card_id": "card_2", "customer_id": "cus_2"}}))
            .expect("valid")
            .expect("present")
            .merged_over(Some(&stored))
            .expect("merged");
        let PaymentParams::Pagarme(p) = merged else {
            panic!("scheme")
        };
        assert_eq!(p.card_token, None);
        assert_eq!(p.customer, None);
        assert_eq!(p.card_id.as_deref(), Some("card_2"));
        assert_eq!(p.payment_method.as_deref(), Some("credit_card"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value, scheme: Option<Scheme>) -> Result<Option<ProviderObject>, ApiError> {
        from_body(body.as_object().expect("object"), scheme)
    }

    fn refused(body: Value, scheme: Option<Scheme>) -> (String, String) {
        let e = parse(body.clone(), scheme).expect_err(&body.to_string());
        let param = match &e {
            ApiError::InvalidField { param, .. } => param.clone(),
            ApiError::ProviderObjectMismatch { param, .. } => param.clone(),
            ApiError::ParameterMissing { param } => param.clone(),
            other => panic!("{other:?}"),
        };
        (e.code().to_owned(), param)
    }

    #[test]
    fn a_complete_object_of_each_scheme_is_accepted_as_sent() {
        let st = parse(
            json!({"stripe": {"payment_method": "pm_card_visa", "customer": "cus_1", "off_session": true,
                   "return_url": "https://shop.example/back?o=1"}}),
            Some(Scheme::Stripe),
        )
        .unwrap()
        .unwrap();
        assert_eq!(st.to_params().unwrap().missing_for_confirm(), None);
        let mp = parse(
            json!({"mercadopago": {"token": "ff8080814c11e237014c1ff593b57b4d", "payment_method_id": "visa",
                   "installments": 3, "issuer_id": 24,
                   "payer": {"email": "comprador@example.com.br",
                             "identification": {"type": "CPF", "number": "191.000.000-00"}}}}),
            Some(Scheme::MercadoPago),
        )
        .unwrap()
        .unwrap();
        let params = mp.to_params().unwrap();
        assert_eq!(params.missing_for_confirm(), None);
        let PaymentParams::MercadoPago(m) = params else {
            panic!("scheme")
        };
        assert_eq!(m.issuer_id.as_deref(), Some("24"));
        assert_eq!(
            parse(json!({"amount": 1, "stripe": null}), Some(Scheme::Stripe))
                .unwrap()
                .map(|o| o.field()),
            None
        );
    }

    #[test]
    fn each_bad_field_is_named_by_its_path() {
        let st = Some(Scheme::Stripe);
        let mp = Some(Scheme::MercadoPago);
        let long_url = format!("https://x.example/{}", "a".repeat(2000));
        for (body, scheme, code, param) in [
            (
                json!({"stripe": {"payment_method": "card_visa x"}}),
                st,
                "parameter_invalid",
                "stripe.payment_method",
            ),
            (
                json!({"stripe": {"payment_method": "cus_1"}}),
                st,
                "parameter_invalid",
                "stripe.payment_method",
            ),
            (
                json!({"stripe": {"customer": "pm_1"}}),
                st,
                "parameter_invalid",
                "stripe.customer",
            ),
            (
                json!({"stripe": {"off_session": "yes"}}),
                st,
                "parameter_invalid",
                "stripe.off_session",
            ),
            (
                json!({"stripe": {"return_url": "http://shop.example/back"}}),
                st,
                "parameter_invalid",
                "stripe.return_url",
            ),
            (
                json!({"stripe": {"return_url": "https://shop.example/a b"}}),
                st,
                "parameter_invalid",
                "stripe.return_url",
            ),
            (
                json!({"stripe": {"return_url": long_url}}),
                st,
                "parameter_invalid",
                "stripe.return_url",
            ),
            (
                json!({"stripe": {"pm": "pm_1"}}),
                st,
                "unknown_field",
                "stripe.pm",
            ),
            (json!({"stripe": "pm_1"}), st, "parameter_invalid", "stripe"),
            (
                json!({"mercadopago": {"token": "t"}}),
                st,
                "provider_object_mismatch",
                "mercadopago",
            ),
            (
                json!({"stripe": {}}),
                mp,
                "provider_object_mismatch",
                "stripe",
            ),
            (
                json!({"stripe": {}, "mercadopago": {}}),
                None,
                "provider_object_mismatch",
                "mercadopago",
            ),
            (
                json!({"mercadopago": {"installments": 0}}),
                mp,
                "parameter_invalid",
                "mercadopago.installments",
            ),
            (
                json!({"mercadopago": {"installments": 25}}),
                mp,
                "parameter_invalid",
                "mercadopago.installments",
            ),
            (
                json!({"mercadopago": {"installments": 1.5}}),
                mp,
                "parameter_invalid",
                "mercadopago.installments",
            ),
            (
                json!({"mercadopago": {"token": "a/b"}}),
                mp,
                "parameter_invalid",
                "mercadopago.token",
            ),
            (
                json!({"mercadopago": {"token": "t".repeat(129)}}),
                mp,
                "parameter_invalid",
                "mercadopago.token",
            ),
            (
                json!({"mercadopago": {"payment_method_id": "Visa"}}),
                mp,
                "parameter_invalid",
                "mercadopago.payment_method_id",
            ),
            (
                json!({"mercadopago": {"issuer_id": -1}}),
                mp,
                "parameter_invalid",
                "mercadopago.issuer_id",
            ),
            (
                json!({"mercadopago": {"payer": {"email": "a@b"}}}),
                mp,
                "parameter_invalid",
                "mercadopago.payer.email",
            ),
            (
                json!({"mercadopago": {"payer": {"email": "a b@c.de"}}}),
                mp,
                "parameter_invalid",
                "mercadopago.payer.email",
            ),
            (
                json!({"mercadopago": {"payer": {"email": "a@@c.de"}}}),
                mp,
                "parameter_invalid",
                "mercadopago.payer.email",
            ),
            (
                json!({"mercadopago": {"payer": {"mail": "a@c.de"}}}),
                mp,
                "unknown_field",
                "mercadopago.payer.mail",
            ),
            (
                json!({"mercadopago": {"payer": {"identification": {"type": "CPF"}}}}),
                mp,
                "parameter_missing",
                "mercadopago.payer.identification.number",
            ),
            (
                json!({"mercadopago": {"payer": {"identification": {"type": "C P F", "number": "1"}}}}),
                mp,
                "parameter_invalid",
                "mercadopago.payer.identification.type",
            ),
            (
                json!({"mercadopago": {"payer": {"identification": {"type": "CPF", "number": "1;2"}}}}),
                mp,
                "parameter_invalid",
                "mercadopago.payer.identification.number",
            ),
            (
                json!({"mercadopago": {"payer": {"identification": {"type": "CPF", "number": "1", "x": 1}}}}),
                mp,
                "unknown_field",
                "mercadopago.payer.identification.x",
            ),
            (
                json!({"mercadopago": {"card_id": "12a", "customer_id": "c-1"}}),
                mp,
                "parameter_invalid",
                "mercadopago.card_id",
            ),
            (
                json!({"mercadopago": {"card_id": "9".repeat(33), "customer_id": "c-1"}}),
                mp,
                "parameter_invalid",
                "mercadopago.card_id",
            ),
            (
                json!({"mercadopago": {"card_id": -1, "customer_id": "c-1"}}),
                mp,
                "parameter_invalid",
                "mercadopago.card_id",
            ),
            (
                json!({"mercadopago": {"card_id": "1", "customer_id": "../me"}}),
                mp,
                "parameter_invalid",
                "mercadopago.customer_id",
            ),
            (
                json!({"mercadopago": {"card_id": "1", "customer_id": "a".repeat(65)}}),
                mp,
                "parameter_invalid",
                "mercadopago.customer_id",
            ),
            (
                json!({"mercadopago": {"card_id": "1", "customer_id": "c-1", "token": "t1"}}),
                mp,
                "parameter_invalid",
                "mercadopago.token",
            ),
            (
                json!({"mercadopago": {"customer_id": "c-1", "token": "t1"}}),
                mp,
                "parameter_invalid",
                "mercadopago.token",
            ),
            (
                json!({"mercadopago": {"card_id": "1", "customer_id": "c-1", "payment_method_id": "pix"}}),
                mp,
                "parameter_invalid",
                "mercadopago.payment_method_id",
            ),
        ] {
            assert_eq!(
                refused(body.clone(), scheme),
                (code.to_owned(), param.to_owned()),
                "{body}"
            );
        }
    }

    #[test]
    fn a_saved_mercadopago_card_is_card_id_and_customer_id_without_a_token() {
        let mp = Some(Scheme::MercadoPago);
        let saved = parse(
            json!({"mercadopago": {"card_id": 1562188766852u64, "customer_id": "448870796-7ZjwhKGxILixxN"}}),
            mp,
        )
        .unwrap()
        .unwrap();
        let params = saved.to_params().unwrap();
        assert_eq!(params.missing_for_confirm(), None);
        let PaymentParams::MercadoPago(m) = &params else {
            panic!("scheme")
        };
        assert_eq!(m.card_id.as_deref(), Some("1562188766852"));
        assert_eq!(m.token, None);
        // Half a saved card is named by what is missing.
        let half = parse(json!({"mercadopago": {"card_id": "1"}}), mp)
            .unwrap()
            .unwrap();
        assert_eq!(
            half.to_params().unwrap().missing_for_confirm(),
            Some("mercadopago.customer_id")
        );
        // A confirm sending one way to pay replaces the other stored.
        let new_card = parse(
            json!({"mercadopago": {"token": "tok_1", "payment_method_id": "visa",
                   "payer": {"email": "a@b.co"}}}),
            mp,
        )
        .unwrap()
        .unwrap();
        let PaymentParams::MercadoPago(m) = new_card.merged_over(Some(&params)).unwrap() else {
            panic!("scheme")
        };
        assert_eq!(
            (m.token.as_deref(), m.card_id, m.customer_id),
            (Some("tok_1"), None, None)
        );
        let stored_token = new_card.to_params().unwrap();
        let PaymentParams::MercadoPago(m) = saved.merged_over(Some(&stored_token)).unwrap() else {
            panic!("scheme")
        };
        assert_eq!(m.token, None);
        assert_eq!(m.card_id.as_deref(), Some("1562188766852"));
        assert_eq!(m.payment_method_id.as_deref(), Some("visa"));
    }

    #[test]
    fn a_confirm_lays_its_fields_over_the_stored_ones() {
        let stored = parse(
            json!({"mercadopago": {"payment_method_id": "visa", "installments": 2,
                   "payer": {"email": "a@b.co", "identification": {"type": "CPF", "number": "1"}}}}),
            None,
        )
        .unwrap()
        .unwrap()
        .to_params()
        .unwrap();
        assert_eq!(stored.missing_for_confirm(), Some("mercadopago.token"));
        let supplied = parse(
            json!({"mercadopago": {"token": "tok_1", "payer": {"email": "c@d.co"}}}),
            None,
        )
        .unwrap()
        .unwrap();
        let PaymentParams::MercadoPago(m) = supplied.merged_over(Some(&stored)).unwrap() else {
            panic!("scheme")
        };
        assert_eq!(m.token.as_deref(), Some("tok_1"));
        assert_eq!(m.installments, Some(2));
        assert_eq!(m.payer.email.as_deref(), Some("c@d.co"));
        assert_eq!(
            m.payer.identification.map(|i| i.number).as_deref(),
            Some("1")
        );
        // Nothing stored: the supplied object alone.
        let st = parse(json!({"stripe": {"payment_method": "pm_card_visa"}}), None)
            .unwrap()
            .unwrap();
        assert_eq!(st.merged_over(None).unwrap().missing_for_confirm(), None);
        assert_eq!(
            empty(Scheme::Stripe).and_then(|p| p.missing_for_confirm()),
            Some("stripe.payment_method")
        );
        assert!(empty(Scheme::Github).is_none());
    }
}
