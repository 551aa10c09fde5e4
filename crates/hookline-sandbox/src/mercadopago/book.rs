//! Mercado Pago's objects as the sandbox keeps them, and their JSON as the API renders them. Amounts are held in
//! cents and rendered as decimal numbers (`25.5`), as the API does.

use std::collections::BTreeMap;

use serde_json::{json, Number, Value};
use time::OffsetDateTime;

use crate::clock::mp_date;

/// Mercado Pago's fee in the sandbox: 3.99 % of the amount, rounded to the cent.
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
    pub(crate) issuer_id: Option<String>,
}

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
            "captured": true,
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
}

impl CardToken {
    pub(crate) fn json(&self) -> Value {
        let created = mp_date(self.date_created);
        json!({
            "id": self.id,
            "public_key": null,
            "card_id": null,
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
            "id": null,
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

/// One Mercado Pago account's payments.
pub(crate) struct MpBook {
    pub(crate) payments: BTreeMap<u64, MpPayment>,
    pub(crate) card_tokens: BTreeMap<String, CardToken>,
    /// The account's user id (`collector_id`, notifications' `user_id`).
    pub(crate) user_id: u64,
}

impl MpBook {
    pub(crate) fn new(user_id: u64) -> MpBook {
        MpBook {
            payments: BTreeMap::new(),
            card_tokens: BTreeMap::new(),
            user_id,
        }
    }
}
