//! What a gateway needs to charge a payment intent: the provider object the merchant sends with the intent
//! (`"stripe": {…}`, `"mercadopago": {…}` or `"pagarme": {…}`), stored with it (`payment_intents.payment_params`) and read by the
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
    /// Mercado Pago: a card token (or a non-card method such as Pix) and the payer, or a saved card.
    #[serde(rename = "mercadopago")]
    MercadoPago(MercadoPagoParams),
    /// Pagar.me Core API v5: a saved card (`card_id`) or a card token, the customer (new or `customer_id`), or Pix
    /// or boleto.
    #[serde(rename = "pagarme")]
    Pagarme(PagarmeParams),
}

/// Stripe's charge parameters (PaymentIntent create/confirm).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StripeParams {
    /// `pm_…`: required to confirm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 255, example = "pm_card_visa")]
    pub payment_method: Option<String>,
    /// `cus_…`: required with `off_session` (a saved method belongs to a customer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer: Option<String>,
    /// A merchant-initiated charge (the customer is not present: billing runs).
    #[serde(default)]
    #[schema(nullable)] // the API takes null for absent, in every field of a provider object
    pub off_session: bool,
    /// Where the customer comes back after a redirect (3-D Secure); https.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 2000, example = "https://shop.example/return")]
    pub return_url: Option<String>,
}

/// Mercado Pago's charge parameters (`POST /v1/payments`). Two ways to pay by card, never both:
///
/// - a **new card**: `token`, made by the merchant's front end from the card form (single use), with
///   `payment_method_id` and `payer.email`;
/// - a **saved card** (merchant-initiated, no CVV: Mercado Pago's "Pagamentos automáticos" / Card on File,
///   <https://www.mercadopago.com.br/developers/en/docs/automatic-payments/recurring-charges>): `card_id` +
///   `customer_id`, the card saved with `POST /v1/customers/{customer_id}/cards`. The dispatcher mints the
///   single-use token itself, per key generation (`POST /v1/card_tokens {card_id, customer_id}`), takes the card's
///   `payment_method.id` when `payment_method_id` is not given, and pays as `payer {type: customer, id}`
///   (`hookline_gateways::gateway::mercadopago`). Billing runs charge subscriptions this way.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MercadoPagoParams {
    /// The card token made by the merchant's front end (single use); required for card methods unless a saved
    /// card is charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 128)]
    pub token: Option<String>,
    /// A saved card's id at Mercado Pago (digits, see [`is_mercadopago_card_id`]); with `customer_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 32)]
    pub card_id: Option<String>,
    /// The Mercado Pago customer the saved card belongs to (see [`is_mercadopago_customer_id`]); with `card_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64)]
    pub customer_id: Option<String>,
    /// `visa`, `master`, `pix`, …: required, except for a saved card (then the card's own when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 50, example = "visa")]
    pub payment_method_id: Option<String>,
    /// Number of installments (cards); 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 24)]
    pub installments: Option<u32>,
    /// The card's issuer, when the front end chose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 32)]
    pub issuer_id: Option<String>,
    /// Who pays: `email` is required, except for a saved card (the payer is then the customer).
    #[serde(default)]
    #[schema(nullable)] // the API takes null for absent, in every field of a provider object
    pub payer: Payer,
}

impl MercadoPagoParams {
    /// Whether these parameters charge a saved card (`card_id` or `customer_id` given): the dispatcher mints the
    /// card token; [`PaymentParams::missing_for_confirm`] then requires both ids and nothing else.
    pub fn is_saved_card(&self) -> bool {
        self.card_id.is_some() || self.customer_id.is_some()
    }
}

/// Pagar.me's payment methods (`payments[0].payment_method` of `POST /core/v5/orders`).
pub const PAGARME_METHODS: &[&str] = &["credit_card", "pix", "boleto"];

/// Pagar.me v5's charge parameters (`POST /core/v5/orders`, <https://docs.pagar.me/reference/criar-pedido-2>):
/// the order's one payment and its customer.
///
/// - `payment_method`: `credit_card` (with `card_id`, a card saved to the customer, or `card_token`, made by
///   the merchant's checkout with the public key; never both), `pix` or `boleto` (asynchronous: paid later, by
///   the customer; the order's first answer is `pending` with the QR code or the boleto's line);
/// - the customer: `customer_id` (`cus_…`, a saved customer; required with a `card_id`) or a new `customer`
///   `{name, email, document, type}` (Pagar.me requires a customer on every order).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PagarmeParams {
    /// `credit_card`, `pix` or `boleto` ([`PAGARME_METHODS`]); required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "credit_card")]
    pub payment_method: Option<String>,
    /// A card saved to the customer (`card_…`); with `customer_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64)]
    pub card_id: Option<String>,
    /// A card token (`token_…`, single use) made by the merchant's checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64)]
    pub card_token: Option<String>,
    /// Number of installments (cards); 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 12)]
    pub installments: Option<u32>,
    /// A saved customer (`cus_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64)]
    pub customer_id: Option<String>,
    /// A new customer, when no `customer_id` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer: Option<PagarmeCustomer>,
    /// What the card statement shows (at most 13 characters at Pagar.me).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement_descriptor: Option<String>,
}

/// A Pagar.me order's new customer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PagarmeCustomer {
    /// The customer's name (required by Pagar.me).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64)]
    pub name: Option<String>,
    /// E-mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 254)]
    pub email: Option<String>,
    /// CPF or CNPJ digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 16)]
    pub document: Option<String>,
    /// `individual` or `company`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl PagarmeParams {
    /// Whether these parameters charge a card saved at Pagar.me (`card_id`).
    pub fn is_saved_card(&self) -> bool {
        self.card_id.is_some()
    }
}

/// Longest Pagar.me object id accepted (`cus_…`, `card_…`, `token_…`: a prefix and 16 characters).
pub const MAX_PAGARME_ID_BYTES: usize = 64;

/// Whether `value` is shaped like a Pagar.me object id with `prefix` (`cus_`, `card_`, `token_`, `ch_`, `or_`):
/// the prefix, then 1 to [`MAX_PAGARME_ID_BYTES`] letters and digits in all. It goes into a URL path: nothing
/// else gets through. One rule for the merchant API, the CLI, billing and the dispatcher.
pub fn is_pagarme_id(value: &str, prefix: &str) -> bool {
    value.len() <= MAX_PAGARME_ID_BYTES
        && value
            .strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

// A card token is a credential for one charge; a document is personal data: never in a log line.
impl std::fmt::Debug for PagarmeParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagarmeParams")
            .field("payment_method", &self.payment_method)
            .field("card_id", &self.card_id)
            .field(
                "card_token",
                &self.card_token.as_ref().map(|_| "[redacted]"),
            )
            .field("installments", &self.installments)
            .field("customer_id", &self.customer_id)
            .field("customer", &self.customer.as_ref().map(|_| "[redacted]"))
            .field("statement_descriptor", &self.statement_descriptor)
            .finish()
    }
}

/// Mercado Pago's payer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Payer {
    /// Required by Mercado Pago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 254, example = "buyer@example.com")]
    pub email: Option<String>,
    /// A document (CPF, CNPJ, …), required by Mercado Pago for some methods (Pix, boleto) in Brazil.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identification: Option<Identification>,
}

/// A payer's document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
            PaymentParams::Pagarme(_) => "pagarme",
        }
    }

    /// The parameter naming a method that cannot be authorized without being captured (Pix, boleto: only
    /// cards are), as the API names it, or `None` (a card, or a method the merchant supplies at confirm).
    pub fn not_a_card(&self) -> Option<&'static str> {
        match self {
            PaymentParams::Stripe(_) => None,
            PaymentParams::MercadoPago(m) => m
                .payment_method_id
                .as_deref()
                .filter(|method| MERCADOPAGO_NON_CARD_METHODS.contains(method))
                .map(|_| "mercadopago.payment_method_id"),
            PaymentParams::Pagarme(p) => p
                .payment_method
                .as_deref()
                .filter(|method| *method != "credit_card")
                .map(|_| "pagarme.payment_method"),
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
            // A saved card: the dispatcher mints the token and reads the card's payment method; the customer is
            // the payer. (A token beside a saved card is refused by the API; the dispatcher refuses it too.)
            PaymentParams::MercadoPago(m) if m.is_saved_card() => {
                if m.card_id.is_none() {
                    Some("mercadopago.card_id")
                } else if m.customer_id.is_none() {
                    Some("mercadopago.customer_id")
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
            PaymentParams::Pagarme(p) => match p.payment_method.as_deref() {
                None => Some("pagarme.payment_method"),
                Some("credit_card") if p.card_id.is_none() && p.card_token.is_none() => {
                    Some("pagarme.card_id")
                }
                // A saved card belongs to a customer: the order must name it.
                Some(_) if p.card_id.is_some() && p.customer_id.is_none() => {
                    Some("pagarme.customer_id")
                }
                Some(_) if p.customer_id.is_none() && p.customer.is_none() => {
                    Some("pagarme.customer")
                }
                Some(_) => match &p.customer {
                    Some(c) if p.customer_id.is_none() && c.name.is_none() => {
                        Some("pagarme.customer.name")
                    }
                    _ => None,
                },
            },
        }
    }

    /// Whether the method completes later, by a webhook, once the customer pays (Pix, boleto): the charge's
    /// first answer is `pending` with what to show the customer.
    pub fn is_asynchronous(&self) -> bool {
        match self {
            PaymentParams::Stripe(_) => false,
            PaymentParams::MercadoPago(m) => {
                !m.is_saved_card()
                    && m.payment_method_id
                        .as_deref()
                        .is_some_and(|p| MERCADOPAGO_NON_CARD_METHODS.contains(&p))
            }
            PaymentParams::Pagarme(p) => {
                matches!(p.payment_method.as_deref(), Some("pix" | "boleto"))
            }
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

/// Longest Mercado Pago saved-card id accepted (its card ids are numbers of 13 digits or so).
pub const MAX_MERCADOPAGO_CARD_ID_BYTES: usize = 32;

/// Longest Mercado Pago customer id accepted (`448870796-7ZjwhKGxILixxN`).
pub const MAX_MERCADOPAGO_CUSTOMER_ID_BYTES: usize = 64;

/// Whether `value` is shaped like a Mercado Pago saved-card id: 1 to [`MAX_MERCADOPAGO_CARD_ID_BYTES`] ASCII
/// digits. It goes into a URL path (`/v1/customers/{customer}/cards/{card}`): nothing else gets through. One rule
/// for the merchant API, the CLI and the dispatcher.
pub fn is_mercadopago_card_id(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_MERCADOPAGO_CARD_ID_BYTES
        && value.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `value` is shaped like a Mercado Pago customer id: 1 to [`MAX_MERCADOPAGO_CUSTOMER_ID_BYTES`] ASCII
/// letters, digits and `-` (a URL path segment, like the card id).
pub fn is_mercadopago_customer_id(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_MERCADOPAGO_CUSTOMER_ID_BYTES
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

// The card token is single-use but still a credential for one charge: never in a log line.
impl std::fmt::Debug for MercadoPagoParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MercadoPagoParams")
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("card_id", &self.card_id)
            .field("customer_id", &self.customer_id)
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
            PaymentParams::Pagarme(p) => f.debug_tuple("Pagarme").field(p).finish(),
        }
    }
}

/// What the dispatcher minted for ONE key generation of a saved card's charge, stored with the outbound request
/// (`outbound_requests.saved_card`) before the payment is sent: the payment body is built from it, so every
/// attempt of the generation is identical. A new key generation mints a new one.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MintedCard {
    /// The single-use card token (`POST /v1/card_tokens`).
    pub token: String,
    /// The card's payment method (`visa`, `master`, …): the intent's, else the saved card's own.
    pub payment_method_id: String,
    /// The subscription messaging's `billing_date` (`YYYY-MM-DD`, UTC: the day the token was minted).
    pub billing_date: String,
}

// The token pays once: never in a log line.
impl std::fmt::Debug for MintedCard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MintedCard")
            .field("token", &"[redacted]")
            .field("payment_method_id", &self.payment_method_id)
            .field("billing_date", &self.billing_date)
            .finish()
    }
}

impl MintedCard {
    /// `billing_date` for `at` (UTC): `YYYY-MM-DD`.
    pub fn billing_date_of(at: time::OffsetDateTime) -> String {
        let d = at.to_offset(time::UtcOffset::UTC).date();
        format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
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
    fn a_saved_mercadopago_card_needs_its_two_ids_and_nothing_else() {
        let saved = |card: Option<&str>, customer: Option<&str>| {
            PaymentParams::MercadoPago(MercadoPagoParams {
                card_id: card.map(str::to_owned),
                customer_id: customer.map(str::to_owned),
                installments: Some(1),
                ..MercadoPagoParams::default()
            })
        };
        // What billing::charge_params builds: no token, no payment method, no e-mail — chargeable.
        let both = saved(Some("1562188766852"), Some("448870796-7ZjwhKGxILixxN"));
        assert_eq!(both.missing_for_confirm(), None);
        assert!(!both.is_asynchronous());
        assert_eq!(
            saved(Some("1"), None).missing_for_confirm(),
            Some("mercadopago.customer_id")
        );
        assert_eq!(
            saved(None, Some("c-1")).missing_for_confirm(),
            Some("mercadopago.card_id")
        );
        // Stored and read back as the API shape.
        let json = serde_json::to_value(&both).expect("json");
        assert_eq!(json["mercadopago"]["card_id"], "1562188766852");
        assert_eq!(json["mercadopago"].get("token"), None);
        let back: PaymentParams = serde_json::from_value(json).expect("back");
        assert_eq!(back, both);
        let PaymentParams::MercadoPago(m) = &both else {
            panic!("scheme")
        };
        assert!(m.is_saved_card());
        assert!(!MercadoPagoParams::default().is_saved_card());
    }

    #[test]
    fn mercadopago_saved_card_ids_are_path_safe() {
        for ok in ["1", "1562188766852", &"9".repeat(32)] {
            assert!(is_mercadopago_card_id(ok), "{ok}");
        }
        for bad in ["", "12a", "1/2", "../1", " 1", &"9".repeat(33)] {
            assert!(!is_mercadopago_card_id(bad), "{bad}");
        }
        for ok in ["448870796-7ZjwhKGxILixxN", "c", &"a".repeat(64)] {
            assert!(is_mercadopago_customer_id(ok), "{ok}");
        }
        for bad in ["", "a/b", "a b", "a_b", "a?x=1", "é", &"a".repeat(65)] {
            assert!(!is_mercadopago_customer_id(bad), "{bad}");
        }
    }

    #[test]
    fn what_pagarme_requires() {
        let pg = |json: serde_json::Value| {
            serde_json::from_value::<PaymentParams>(serde_json::json!({ "pagarme": json }))
                .expect("parses")
        };
        let customer = serde_json::json!({"name": "Tony", "email": "t@x.com", "document": "12345678909", "type": "individual"});
        assert_eq!(
            pg(serde_json::json!({})).missing_for_confirm(),
            Some("pagarme.payment_method")
        );
        assert_eq!(
            pg(serde_json::json!({"payment_method": "credit_card", "customer": customer}))
                .missing_for_confirm(),
            Some("pagarme.card_id")
        );
        assert_eq!(
            pg(serde_json::json!({"payment_method": "credit_card", "card_id": "card_1"}))
                .missing_for_confirm(),
            Some("pagarme.customer_id")
        );
        assert_eq!(
            pg(serde_json::json!({"payment_method": "pix"})).missing_for_confirm(),
            Some("pagarme.customer")
        );
        assert_eq!(
            pg(serde_json::json!({"payment_method": "pix", "customer": {"email": "a@b.c"}}))
                .missing_for_confirm(),
            Some("pagarme.customer.name")
        );
        let saved = pg(
            serde_json::json!({"payment_method": "credit_card", "card_id": "card_1",
            "customer_id": "cus_1", "installments": 1}),
        );
        assert_eq!(saved.missing_for_confirm(), None);
        assert!(!saved.is_asynchronous());
        let token = pg(
            serde_json::json!({"payment_method": "credit_card", "card_token": "token_secret",
            "customer": customer}),
        );
        assert_eq!(token.missing_for_confirm(), None);
        assert!(!format!("{token:?}").contains("token_secret"));
        assert!(!format!("{token:?}").contains("12345678909"));
        let pix = pg(serde_json::json!({"payment_method": "pix", "customer": customer}));
        assert_eq!(pix.missing_for_confirm(), None);
        assert!(pix.is_asynchronous());
        assert_eq!(pix.scheme_name(), "pagarme");
        let back: PaymentParams =
            serde_json::from_value(serde_json::to_value(&saved).expect("json")).expect("back");
        assert_eq!(back, saved);
        assert!(serde_json::from_value::<PaymentParams>(
            serde_json::json!({"pagarme": {"card_number": "4000000000000010"}})
        )
        .is_err());
        assert!(is_pagarme_id("cus_xK8yZ3m", "cus_"));
        for bad in [
            "cus_",
            "card_1",
            "cus_a/b",
            "cus_a_b",
            &format!("cus_{}", "a".repeat(61)),
        ] {
            assert!(!is_pagarme_id(bad, "cus_"), "{bad}");
        }
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
