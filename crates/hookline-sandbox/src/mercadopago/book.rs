//! Mercado Pago's objects as the sandbox keeps them, and their JSON as the API renders them. Amounts are held in
//! cents and rendered as decimal numbers (`25.5`), as the API does.

use std::collections::BTreeMap;

use serde_json::{json, Number, Value};
use time::OffsetDateTime;

use crate::clock::mp_date;

/// Mercado Pago's fee in the sandbox: 3.99 % of the amount, rounded to the cent. The sample configurations
/// (`deploy/hookline.toml`, `deploy/container/hookline.toml`) charge the same rate, so that the ledger's fee and the
/// sandbox's `fee_details` agree in the README's walkthrough (checked below).
const FEE_BPS: i64 = 399;

pub(crate) fn decimal(cents: i64) -> Value {
    Number::from_f64(cents as f64 / 100.0)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

pub(crate) fn fee(cents: i64) -> i64 {
    (cents * FEE_BPS + 5_000) / 10_000
}

pub(crate) struct MpRefund {
    pub(crate) id: u64,
    pub(crate) payment_id: u64,
    pub(crate) amount: i64,
    pub(crate) date_created: OffsetDateTime,
    /// The `metadata` object sent with the refund, echoed back (hookline matches its own refund id in it).
    pub(crate) metadata: Value,
}

impl MpRefund {
    pub(crate) fn json(&self, collector: u64) -> Value {
        json!({
            "id": self.id,
            "payment_id": self.payment_id,
            "amount": decimal(self.amount),
            "metadata": self.metadata,
            "source": {"id": collector.to_string(), "name": "Sandbox", "type": "collector"},
            "date_created": mp_date(self.date_created),
            "unique_sequence_number": null,
            "refund_mode": "standard",
            "adjustment_amount": 0,
            "status": "approved",
            "reason": null,
            "labels": [],
            "amount_refunded_to_payer": decimal(self.amount),
            "partition_details": [],
        })
    }
}

pub(crate) struct MpPayment {
    pub(crate) id: u64,
    pub(crate) status: String,
    pub(crate) status_detail: String,
    pub(crate) amount: i64,
    pub(crate) refunded: i64,
    pub(crate) description: Option<String>,
    pub(crate) payment_method_id: String,
    pub(crate) payment_type_id: &'static str,
    pub(crate) payer: Value,
    pub(crate) external_reference: Option<String>,
    pub(crate) installments: u64,
    pub(crate) metadata: Value,
    pub(crate) statement_descriptor: Option<String>,
    pub(crate) notification_url: Option<String>,
    pub(crate) date_created: OffsetDateTime,
    pub(crate) date_approved: Option<OffsetDateTime>,
    pub(crate) date_last_updated: OffsetDateTime,
    pub(crate) refunds: Vec<MpRefund>,
    /// When a pending Pix (or boleto) expires unpaid.
    pub(crate) date_of_expiration: Option<OffsetDateTime>,
    /// Pix: `{"type": "PIX", "transaction_data": {qr_code, qr_code_base64, ticket_url, …}}`.
    pub(crate) point_of_interaction: Option<Value>,
    /// The card of a card payment (from its token).
    pub(crate) card: Option<Value>,
    /// The saved card charged (a payment with a token of a saved card).
    pub(crate) card_id: Option<String>,
    pub(crate) issuer_id: Option<String>,
    /// `false` while an authorization (`"capture": false`) waits for its capture.
    pub(crate) captured: bool,
    /// When it was authorized without capture, on the sandbox clock: the reservation expires
    /// [`AUTHORIZATION_LIFETIME`] later.
    pub(crate) authorized_at: Option<OffsetDateTime>,
}

/// How long Mercado Pago keeps an authorized payment's reservation before cancelling it (7 days from its creation,
/// <https://www.mercadopago.com.br/developers/en/docs/checkout-api/payment-management/capture-authorized-payment>;
/// some of its pages say 5).
pub(crate) const AUTHORIZATION_LIFETIME: time::Duration = time::Duration::days(7);

impl MpPayment {
    pub(crate) fn remaining(&self) -> i64 {
        self.amount - self.refunded
    }

    /// The money-release date: approval plus 14 days (the default release schedule for card payments).
    pub(crate) fn money_release_date(&self) -> Option<OffsetDateTime> {
        self.date_approved.map(|d| d + time::Duration::days(14))
    }

    pub(crate) fn json(&self, collector: u64) -> Value {
        let was_approved = self.date_approved.is_some();
        let fee = if was_approved { fee(self.amount) } else { 0 };
        let fee_details = if was_approved {
            json!([{"type": "mercadopago_fee", "amount": decimal(fee), "fee_payer": "collector"}])
        } else {
            json!([])
        };
        json!({
            "id": self.id,
            "date_created": mp_date(self.date_created),
            "date_approved": self.date_approved.map(mp_date),
            "date_last_updated": mp_date(self.date_last_updated),
            "date_of_expiration": self.date_of_expiration.map(mp_date),
            "money_release_date": self.money_release_date().map(mp_date),
            "money_release_status": if was_approved { "pending" } else { "rejected" },
            "operation_type": "regular_payment",
            "issuer_id": self.issuer_id,
            "payment_method_id": self.payment_method_id,
            "payment_type_id": self.payment_type_id,
            "payment_method": {"id": self.payment_method_id, "type": self.payment_type_id},
            "status": self.status,
            "status_detail": self.status_detail,
            "currency_id": "BRL",
            "description": self.description,
            "live_mode": false,
            "sponsor_id": null,
            "authorization_code": null,
            "collector_id": collector,
            "payer": self.payer,
            "metadata": self.metadata,
            "additional_info": {},
            "external_reference": self.external_reference,
            "transaction_amount": decimal(self.amount),
            "transaction_amount_refunded": decimal(self.refunded),
            "coupon_amount": 0,
            "transaction_details": {
                "net_received_amount": decimal(self.amount - fee),
                "total_paid_amount": decimal(self.amount),
                "overpaid_amount": 0,
                "installment_amount": decimal(self.amount / self.installments.max(1) as i64),
            },
            "fee_details": fee_details,
            "captured": self.captured,
            "binary_mode": false,
            "statement_descriptor": self.statement_descriptor,
            "installments": self.installments,
            "notification_url": self.notification_url,
            "refunds": self.refunds.iter().map(|r| r.json(collector)).collect::<Vec<_>>(),
            "point_of_interaction": self.point_of_interaction.clone().unwrap_or_else(|| json!({})),
            "card": self.card.clone().unwrap_or_else(|| json!({})),
        })
    }
}

/// A card token (`POST /v1/card_tokens`): what the card form tokenised. Single use: a payment consumes it.
pub(crate) struct CardToken {
    pub(crate) id: String,
    pub(crate) first_six: String,
    pub(crate) last_four: String,
    pub(crate) expiration_month: u64,
    pub(crate) expiration_year: u64,
    pub(crate) security_code_length: usize,
    pub(crate) card_number_length: usize,
    /// `cardholder.name`: Mercado Pago's test cards decide the outcome by it (`APRO`, `OTHE`, …).
    pub(crate) holder_name: String,
    pub(crate) holder_identification: Value,
    pub(crate) date_created: OffsetDateTime,
    pub(crate) used: bool,
    /// The saved card it is a token of (`POST /v1/card_tokens {"card_id"}`), and that card's customer.
    pub(crate) saved: Option<SavedCardRef>,
}

/// The saved card a card token was made from.
#[derive(Debug, Clone)]
pub(crate) struct SavedCardRef {
    pub(crate) card_id: String,
    pub(crate) customer_id: String,
}

impl CardToken {
    pub(crate) fn json(&self) -> Value {
        let created = mp_date(self.date_created);
        json!({
            "id": self.id,
            "public_key": null,
            "card_id": self.saved.as_ref().map(|s| &s.card_id),
            "luhn_validation": true,
            "status": if self.used { "used" } else { "active" },
            "date_used": null,
            "card_number_length": self.card_number_length,
            "date_created": created,
            "first_six_digits": self.first_six,
            "last_four_digits": self.last_four,
            "security_code_length": self.security_code_length,
            "expiration_month": self.expiration_month,
            "expiration_year": self.expiration_year,
            "date_last_updated": created,
            "date_due": mp_date(self.date_created + time::Duration::days(7)),
            "live_mode": false,
            "require_esc": false,
            "cardholder": {"identification": self.holder_identification, "name": self.holder_name},
        })
    }

    /// The `card` object of a payment made with it.
    pub(crate) fn card_json(&self) -> Value {
        json!({
            "id": self.saved.as_ref().map(|s| &s.card_id),
            "first_six_digits": self.first_six,
            "last_four_digits": self.last_four,
            "expiration_month": self.expiration_month,
            "expiration_year": self.expiration_year,
            "date_created": mp_date(self.date_created),
            "date_last_updated": mp_date(self.date_created),
            "cardholder": {"identification": self.holder_identification, "name": self.holder_name},
        })
    }
}

/// A customer (`POST /v1/customers`): who saved cards belong to.
pub(crate) struct MpCustomer {
    /// `{user id}-{15 alphanumerics}`, as Mercado Pago's (`123456789-jxOV430go9fx2e`).
    pub(crate) id: String,
    pub(crate) email: String,
    pub(crate) first_name: Option<String>,
    pub(crate) last_name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: Value,
    pub(crate) date_created: OffsetDateTime,
    /// Its cards' ids, in the order saved.
    pub(crate) cards: Vec<String>,
}

impl MpCustomer {
    pub(crate) fn json(&self, cards: &BTreeMap<String, MpCard>) -> Value {
        let created = mp_date(self.date_created);
        json!({
            "id": self.id,
            "email": self.email,
            "first_name": self.first_name,
            "last_name": self.last_name,
            "phone": {"area_code": null, "number": null},
            "identification": {"type": null, "number": null},
            "address": {"id": null, "zip_code": null, "street_name": null, "street_number": null},
            "description": self.description,
            "date_created": created,
            "date_last_updated": created,
            "date_registered": null,
            "metadata": self.metadata,
            "default_card": self.cards.last(),
            "default_address": null,
            "cards": self.cards.iter().filter_map(|c| cards.get(c)).map(MpCard::json).collect::<Vec<_>>(),
            "addresses": [],
            "live_mode": false,
        })
    }
}

/// A card saved to a customer (`POST /v1/customers/{id}/cards {token}`): the token's card, and with it the
/// test holder name that decides its payments' outcome (`APRO`, `OTHE`, `FUND`, …).
pub(crate) struct MpCard {
    /// Digits, as Mercado Pago's card ids (`9876543210123`).
    pub(crate) id: String,
    pub(crate) customer_id: String,
    /// `visa`, `master`, `amex`, `elo`…, from the card number's first digits.
    pub(crate) payment_method_id: &'static str,
    pub(crate) first_six: String,
    pub(crate) last_four: String,
    pub(crate) expiration_month: u64,
    pub(crate) expiration_year: u64,
    pub(crate) security_code_length: usize,
    pub(crate) card_number_length: usize,
    pub(crate) holder_name: String,
    pub(crate) holder_identification: Value,
    pub(crate) date_created: OffsetDateTime,
}

impl MpCard {
    pub(crate) fn json(&self) -> Value {
        let created = mp_date(self.date_created);
        json!({
            "id": self.id,
            "customer_id": self.customer_id,
            "expiration_month": self.expiration_month,
            "expiration_year": self.expiration_year,
            "first_six_digits": self.first_six,
            "last_four_digits": self.last_four,
            "payment_method": {
                "id": self.payment_method_id,
                "name": brand_name(self.payment_method_id),
                "payment_type_id": "credit_card",
                "thumbnail": null,
                "secure_thumbnail": null,
            },
            "security_code": {"length": self.security_code_length, "card_location": "back"},
            "issuer": {"id": 25, "name": brand_name(self.payment_method_id)},
            "cardholder": {"name": self.holder_name, "identification": self.holder_identification},
            "date_created": created,
            "date_last_updated": created,
            "user_id": self.customer_id.split('-').next(),
            "live_mode": false,
        })
    }
}

/// The card brand (Mercado Pago `payment_method_id`) of a card number's first digits, as Mercado Pago's test
/// cards go: Visa `4…`, Amex `34…`/`37…`, Elo `5067…`/`4389…`/`6362…`, Mastercard `5…`/`2…`.
pub(crate) fn brand(first_six: &str) -> &'static str {
    let starts = |p: &str| first_six.starts_with(p);
    if starts("4389") || starts("5067") || starts("6362") || starts("509") {
        "elo"
    } else if starts("4") {
        "visa"
    } else if starts("34") || starts("37") {
        "amex"
    } else if starts("5") || starts("2") {
        "master"
    } else {
        "visa"
    }
}

fn brand_name(method: &str) -> &'static str {
    match method {
        "master" => "Mastercard",
        "amex" => "American Express",
        "elo" => "Elo",
        _ => "Visa",
    }
}

/// The `status_detail`s of a rejected card payment the sandbox can script
/// (<https://www.mercadopago.com.br/developers/en/docs/checkout-api/response-handling/collection-results>).
pub(crate) const REJECTIONS: &[&str] = &[
    "cc_rejected_bad_filled_card_number",
    "cc_rejected_bad_filled_date",
    "cc_rejected_bad_filled_other",
    "cc_rejected_bad_filled_security_code",
    "cc_rejected_blacklist",
    "cc_rejected_call_for_authorize",
    "cc_rejected_card_disabled",
    "cc_rejected_card_error",
    "cc_rejected_duplicated_payment",
    "cc_rejected_high_risk",
    "cc_rejected_insufficient_amount",
    "cc_rejected_invalid_installments",
    "cc_rejected_max_attempts",
    "cc_rejected_other_reason",
];

/// `detail` if it is a rejection [`REJECTIONS`] lists.
pub(crate) fn rejection(detail: &str) -> Option<&'static str> {
    REJECTIONS.iter().copied().find(|r| *r == detail)
}

/// One Mercado Pago account's payments, card tokens, customers and saved cards.
pub(crate) struct MpBook {
    pub(crate) payments: BTreeMap<u64, MpPayment>,
    pub(crate) card_tokens: BTreeMap<String, CardToken>,
    pub(crate) customers: BTreeMap<String, MpCustomer>,
    /// Saved cards by card id.
    pub(crate) cards: BTreeMap<String, MpCard>,
    /// The account's user id (`collector_id`, notifications' `user_id`).
    pub(crate) user_id: u64,
}

impl MpBook {
    pub(crate) fn new(user_id: u64) -> MpBook {
        MpBook {
            payments: BTreeMap::new(),
            card_tokens: BTreeMap::new(),
            customers: BTreeMap::new(),
            cards: BTreeMap::new(),
            user_id,
        }
    }
}

#[cfg(test)]
mod sample_config_tests {
    use super::FEE_BPS;

    /// The environment compose.yaml gives the container (its development API key); nothing else, so the sample
    /// files are otherwise read exactly as written.
    struct ComposeEnv;
    impl hookline_core::config::Env for ComposeEnv {
        fn var(&self, name: &str) -> Option<String> {
            (name == "HOOKLINE_API_KEY").then(|| "sk_local_development_api_key".to_string())
        }
    }

    #[test]
    fn the_sample_configurations_charge_mercado_pago_the_sandbox_fee() {
        for (name, text) in [
            (
                "deploy/hookline.toml",
                include_str!("../../../../deploy/hookline.toml"),
            ),
            (
                "deploy/container/hookline.toml",
                include_str!("../../../../deploy/container/hookline.toml"),
            ),
        ] {
            let config = hookline_core::Config::from_toml_str(text, name, &ComposeEnv)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let mercadopago = config
                .providers
                .values()
                .filter(|p| p.scheme == hookline_signature::Scheme::MercadoPago)
                .collect::<Vec<_>>();
            assert!(
                !mercadopago.is_empty(),
                "{name} has a Mercado Pago provider"
            );
            for p in mercadopago {
                assert_eq!(
                    (p.fee_bps, p.fee_fixed),
                    (FEE_BPS, 0),
                    "{name}: providers.{} charges what the sandbox reports",
                    p.name
                );
            }
        }
    }
}
