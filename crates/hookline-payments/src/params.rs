//! What a gateway needs to charge a payment intent: the provider object the merchant sends with the intent
//! (`"stripe": {…}` or `"mercadopago": {…}`), stored with it (`payment_intents.payment_params`) and read by the
//! dispatcher when it builds the charge.
//!
//! One rule, two readers: [`PaymentParams::missing_for_confirm`] is what the merchant API answers 400 with when
//! an intent is confirmed without what its gateway requires, and what the dispatcher refuses to send (an intent
//! of an older version has no parameters at all; the dispatcher never invents a payment method, as the
//! placeholders `"visa"` and `payer@example.com` once did).
//!
//! Bounds (lengths, characters) are checked by the API before a value gets here; the database bounds the whole
//! object (`payment_intents_payment_params_size`).

use serde::{Deserialize, Serialize};

/// Mercado Pago payment methods that are not cards: no card token (Pix, boleto, lottery-house payment).
pub const MERCADOPAGO_NON_CARD_METHODS: &[&str] = &["pix", "bolbradesco", "pec"];

/// The provider object of an intent, externally tagged as the API receives it: `{"stripe": {…}}`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum PaymentParams {
    /// Stripe: a PaymentMethod, optionally a Customer, off-session for merchant-initiated charges.
    #[serde(rename = "stripe")]
    Stripe(StripeParams),
    /// Mercado Pago: a card token (or a non-card method such as Pix), the payer.
    #[serde(rename = "mercadopago")]
    MercadoPago(MercadoPagoParams),
}

/// Stripe's charge parameters (PaymentIntent create/confirm).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StripeParams {
    /// `pm_…`: required to confirm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_method: Option<String>,
    /// `cus_…`: required with `off_session` (a saved method belongs to a customer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer: Option<String>,
    /// A merchant-initiated charge (the customer is not present: billing runs).
    #[serde(default)]
    pub off_session: bool,
    /// Where the customer comes back after a redirect (3-D Secure); https.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_url: Option<String>,
}

/// Mercado Pago's charge parameters (`POST /v1/payments`).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MercadoPagoParams {
    /// The card token made by the merchant's front end (single use); required for card methods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `visa`, `master`, `pix`, …: required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_method_id: Option<String>,
    /// Number of installments (cards); 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installments: Option<u32>,
    /// The card's issuer, when the front end chose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_id: Option<String>,
    /// Who pays: `email` is required.
    #[serde(default)]
    pub payer: Payer,
}

/// Mercado Pago's payer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payer {
    /// Required by Mercado Pago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// A document (CPF, CNPJ, …), required by Mercado Pago for some methods (Pix, boleto) in Brazil.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identification: Option<Identification>,
}

/// A payer's document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identification {
    /// `CPF`, `CNPJ`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// The document number.
    pub number: String,
}

impl PaymentParams {
    /// The scheme spelling of the provider object (`"stripe"`, `"mercadopago"`): the JSON field it comes in.
    pub fn scheme_name(&self) -> &'static str {
        match self {
            PaymentParams::Stripe(_) => "stripe",
            PaymentParams::MercadoPago(_) => "mercadopago",
        }
    }

    /// The first parameter the gateway requires to charge that is missing (as the API names it:
    /// `stripe.payment_method`), or `None` when the intent can be sent.
    pub fn missing_for_confirm(&self) -> Option<&'static str> {
        match self {
            PaymentParams::Stripe(s) => {
                if s.payment_method.is_none() {
                    Some("stripe.payment_method")
                } else if s.off_session && s.customer.is_none() {
                    Some("stripe.customer")
                } else {
                    None
                }
            }
            PaymentParams::MercadoPago(m) => match m.payment_method_id.as_deref() {
                None => Some("mercadopago.payment_method_id"),
                Some(method) => {
                    if m.payer.email.is_none() {
                        Some("mercadopago.payer.email")
                    } else if m.token.is_none() && !MERCADOPAGO_NON_CARD_METHODS.contains(&method) {
                        Some("mercadopago.token")
                    } else {
                        None
                    }
                }
            },
        }
    }

    /// Whether the method completes later, by a webhook, once the customer pays (Pix, boleto): the charge's
    /// first answer is `pending` with what to show the customer.
    pub fn is_asynchronous(&self) -> bool {
        match self {
            PaymentParams::Stripe(_) => false,
            PaymentParams::MercadoPago(m) => m
                .payment_method_id
                .as_deref()
                .is_some_and(|p| MERCADOPAGO_NON_CARD_METHODS.contains(&p)),
        }
    }
}

/// Stripe's documented prefixes of what its `payment_method` parameter takes: a PaymentMethod (`pm_…`), or a
/// Card or Source of older integrations (`card_…`, `src_…`).
pub const STRIPE_PAYMENT_METHOD_PREFIXES: &[&str] = &["pm_", "card_", "src_"];

/// Stripe's documented prefix of a Customer.
pub const STRIPE_CUSTOMER_PREFIXES: &[&str] = &["cus_"];

/// Whether `value` is shaped like a Stripe object id with one of `prefixes`: the prefix, then at least one
/// letter, digit or underscore, 255 bytes at most (Stripe's ids are short; the bound keeps a pasted document
/// out). One rule for the merchant API and the CLI (`subscriptions add`).
pub fn is_stripe_id(value: &str, prefixes: &[&str]) -> bool {
    value.len() <= 255
        && prefixes.iter().any(|p| {
            value.strip_prefix(p).is_some_and(|rest| {
                !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            })
        })
}

// The card token is single-use but still a credential for one charge: never in a log line.
impl std::fmt::Debug for MercadoPagoParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MercadoPagoParams")
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("payment_method_id", &self.payment_method_id)
            .field("installments", &self.installments)
            .field("issuer_id", &self.issuer_id)
            .field("payer", &self.payer)
            .finish()
    }
}

impl std::fmt::Debug for PaymentParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PaymentParams::Stripe(s) => f.debug_tuple("Stripe").field(s).finish(),
            PaymentParams::MercadoPago(m) => f.debug_tuple("MercadoPago").field(m).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_shape_is_the_api_shape() {
        let p: PaymentParams = serde_json::from_str(
            r#"{"mercadopago": {"token": "t", "payment_method_id": "visa", "installments": 2,
                "payer": {"email": "a@b.c", "identification": {"type": "CPF", "number": "1"}}}}"#,
        )
        .expect("parses");
        assert_eq!(p.missing_for_confirm(), None);
        let back: PaymentParams =
            serde_json::from_value(serde_json::to_value(&p).expect("json")).expect("again");
        assert_eq!(back, p);
        assert!(!format!("{p:?}").contains("\"t\""), "{p:?}");
        assert!(serde_json::from_str::<PaymentParams>(r#"{"stripe": {"pm": "x"}}"#).is_err());
    }

    #[test]
    fn what_each_gateway_requires() {
        let stripe = |pm: Option<&str>, customer: Option<&str>, off_session| {
            PaymentParams::Stripe(StripeParams {
                payment_method: pm.map(str::to_owned),
                customer: customer.map(str::to_owned),
                off_session,
                return_url: None,
            })
            .missing_for_confirm()
        };
        assert_eq!(stripe(None, None, false), Some("stripe.payment_method"));
        assert_eq!(stripe(Some("pm_1"), None, false), None);
        assert_eq!(stripe(Some("pm_1"), None, true), Some("stripe.customer"));
        assert_eq!(stripe(Some("pm_1"), Some("cus_1"), true), None);

        let mp = |token: Option<&str>, method: Option<&str>, email: Option<&str>| {
            PaymentParams::MercadoPago(MercadoPagoParams {
                token: token.map(str::to_owned),
                payment_method_id: method.map(str::to_owned),
                payer: Payer {
                    email: email.map(str::to_owned),
                    identification: None,
                },
                ..MercadoPagoParams::default()
            })
        };
        assert_eq!(
            mp(Some("t"), None, Some("e")).missing_for_confirm(),
            Some("mercadopago.payment_method_id")
        );
        assert_eq!(
            mp(None, Some("visa"), Some("e")).missing_for_confirm(),
            Some("mercadopago.token")
        );
        assert_eq!(
            mp(Some("t"), Some("visa"), None).missing_for_confirm(),
            Some("mercadopago.payer.email")
        );
        assert_eq!(mp(None, Some("pix"), Some("e")).missing_for_confirm(), None);
        assert!(mp(None, Some("pix"), Some("e")).is_asynchronous());
        assert!(!mp(Some("t"), Some("visa"), Some("e")).is_asynchronous());
    }

    #[test]
    fn stripe_ids_carry_their_documented_prefix() {
        for ok in [
            "pm_card_visa",
            "pm_1Q0PsIJvEtkwdCNYMSaVuRz6",
            "card_1",
            "src_x",
        ] {
            assert!(is_stripe_id(ok, STRIPE_PAYMENT_METHOD_PREFIXES), "{ok}");
        }
        for bad in ["pm_", "cus_1", "pm_a b", "pm_é", "PM_1", "", "pm_1;drop"] {
            assert!(!is_stripe_id(bad, STRIPE_PAYMENT_METHOD_PREFIXES), "{bad}");
        }
        assert!(is_stripe_id("cus_NffrFeUfNV2Hib", STRIPE_CUSTOMER_PREFIXES));
        assert!(!is_stripe_id(
            &format!("cus_{}", "a".repeat(252)),
            STRIPE_CUSTOMER_PREFIXES
        ));
    }
}
