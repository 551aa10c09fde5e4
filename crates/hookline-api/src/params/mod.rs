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
        Scheme::PagarmeV5 => Some(PAGARME),
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
    /// The JSON field it came in (`stripe`, `mercadopago`, `pagarme`).
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

mod pagarme_v5;
use pagarme_v5::pagarme;

#[cfg(test)]
mod tests;
