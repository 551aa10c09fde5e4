//! Pagar.me's objects as the sandbox keeps them — customers, saved cards, card tokens, orders, charges and their
//! last transaction — and the vocabularies that decide a card charge: Pagar.me's test card numbers and the
//! declines a card-use script or a forced outcome can name. Data only: it imports nothing of the crate, so that
//! the state and the card-use scripts can hold and check these without importing the handlers. Their JSON is
//! [`super::render`]. Amounts are integers in cents, as the API has them.

use std::collections::BTreeMap;

use serde_json::Value;
use time::OffsetDateTime;

/// Pagar.me's test card that approves every operation: order `paid`, charge `paid`, transaction `captured`
/// (<https://docs.pagar.me/docs/simulador-de-cartão-de-crédito>).
pub(crate) const APPROVED_CARD: &str = "4000000000000010";
/// Pagar.me's test card that fails every transaction: order `failed`, charge `failed`, transaction
/// `not_authorized`.
pub(crate) const DECLINED_CARD: &str = "4000000000000028";
/// Pagar.me's "processing → success" test card: order `pending`, charge `processing`, transaction `with_error`
/// until the acquirer confirms it (here: the control API, `POST /_sandbox/payments/{provider}/{charge}/status`).
pub(crate) const PROCESSING_CARD: &str = "4000000000000036";

/// What charging a card does when no script or forced outcome says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CardBehaviour {
    /// Captured: [`APPROVED_CARD`], and any other valid number.
    Approve,
    /// `not_authorized`: [`DECLINED_CARD`].
    Decline,
    /// `processing` until settled: [`PROCESSING_CARD`].
    Processing,
}

/// The behaviour of card `number` (digits only).
pub(crate) fn behaviour(number: &str) -> CardBehaviour {
    match number {
        APPROVED_CARD => CardBehaviour::Approve,
        DECLINED_CARD => CardBehaviour::Decline,
        PROCESSING_CARD => CardBehaviour::Processing,
        _ => CardBehaviour::Approve,
    }
}

/// A decline a card charge can end with: the name a script or forced outcome uses, and the acquirer's return
/// code and message the transaction shows (`acquirer_return_code`, `acquirer_message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decline {
    pub(crate) name: &'static str,
    /// The transaction's status: `not_authorized`, or `with_error` when the gateway itself failed.
    pub(crate) transaction_status: &'static str,
    pub(crate) code: &'static str,
    pub(crate) message: &'static str,
}

/// The declines the sandbox can give a card charge. `not_authorized` is what Pagar.me's failure test card gives;
/// the others' return codes and messages follow the acquirer's (ABECS-style) codes and are plausible, not
/// verified against Pagar.me.
pub(crate) const DECLINES: &[Decline] = &[
    Decline {
        name: "not_authorized",
        transaction_status: "not_authorized",
        code: "1000",
        message: "Transação não autorizada",
    },
    Decline {
        name: "insufficient_funds",
        transaction_status: "not_authorized",
        code: "1016",
        message: "Saldo insuficiente",
    },
    Decline {
        name: "expired_card",
        transaction_status: "not_authorized",
        code: "1001",
        message: "Cartão vencido",
    },
    Decline {
        name: "invalid_card",
        transaction_status: "not_authorized",
        code: "1011",
        message: "Cartão inválido",
    },
    Decline {
        name: "invalid_cvv",
        transaction_status: "not_authorized",
        code: "1045",
        message: "Código de segurança inválido",
    },
    Decline {
        name: "restricted_card",
        transaction_status: "not_authorized",
        code: "1004",
        message: "Cartão com restrição",
    },
    Decline {
        name: "suspected_fraud",
        transaction_status: "not_authorized",
        code: "1019",
        message: "Transação não permitida - suspeita de fraude",
    },
    Decline {
        name: "with_error",
        transaction_status: "with_error",
        code: "9999",
        message: "Erro ao processar a transação",
    },
];

/// The decline named `name`, if [`DECLINES`] has it.
pub(crate) fn decline(name: &str) -> Option<Decline> {
    DECLINES.iter().copied().find(|d| d.name == name)
}

/// The names of [`DECLINES`].
pub(crate) fn decline_names() -> impl Iterator<Item = &'static str> {
    DECLINES.iter().map(|d| d.name)
}

/// A card as Pagar.me shows it: never the number or the security code.
#[derive(Debug, Clone)]
pub(crate) struct CardData {
    pub(crate) first_six: String,
    pub(crate) last_four: String,
    /// `Visa`, `Mastercard`, `Amex`, `Elo`, `Hipercard`.
    pub(crate) brand: &'static str,
    pub(crate) holder_name: String,
    pub(crate) holder_document: Option<String>,
    pub(crate) exp_month: u32,
    pub(crate) exp_year: u32,
    pub(crate) behaviour: CardBehaviour,
}

/// A card token (`POST /core/v5/tokens?appId=pk_…`): single use, 60 seconds
/// (<https://docs.pagar.me/reference/alternativas-ao-pagarme-js>).
#[derive(Debug)]
pub(crate) struct PgToken {
    pub(crate) id: String,
    pub(crate) card: CardData,
    pub(crate) created_at: OffsetDateTime,
    pub(crate) expires_at: OffsetDateTime,
    pub(crate) used: bool,
}

/// A card saved to a customer (`card_…`).
#[derive(Debug)]
pub(crate) struct PgCard {
    pub(crate) id: String,
    pub(crate) customer_id: String,
    pub(crate) card: CardData,
    pub(crate) created_at: OffsetDateTime,
}

/// A customer (`cus_…`).
#[derive(Debug)]
pub(crate) struct PgCustomer {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) email: Option<String>,
    pub(crate) document: Option<String>,
    pub(crate) document_type: Option<String>,
    /// `individual` or `company`.
    pub(crate) kind: String,
    pub(crate) code: Option<String>,
    pub(crate) phones: Value,
    pub(crate) metadata: Value,
    pub(crate) created_at: OffsetDateTime,
    /// Its cards' ids, in the order saved.
    pub(crate) cards: Vec<String>,
}

/// One item of an order (`oi_…`).
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) id: String,
    pub(crate) description: String,
    pub(crate) amount: i64,
    pub(crate) quantity: i64,
    pub(crate) code: Option<String>,
}

/// How a charge is paid, with what its last transaction shows for that method.
#[derive(Debug, Clone)]
pub(crate) enum Method {
    CreditCard {
        card: CardData,
        /// The saved card charged (`card_id`, or the card a token was saved as).
        card_id: Option<String>,
        installments: u32,
        statement_descriptor: Option<String>,
        operation_type: String,
    },
    Pix {
        qr_code: String,
        qr_code_url: String,
        expires_at: OffsetDateTime,
    },
    Boleto {
        url: String,
        pdf: String,
        line: String,
        barcode: String,
        nosso_numero: String,
        due_at: OffsetDateTime,
        instructions: Option<String>,
    },
}

impl Method {
    /// `credit_card`, `pix` or `boleto` (the charge's `payment_method`, the transaction's `transaction_type`).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Method::CreditCard { .. } => "credit_card",
            Method::Pix { .. } => "pix",
            Method::Boleto { .. } => "boleto",
        }
    }
}

/// A charge's last transaction (`tran_…`).
#[derive(Debug, Clone)]
pub(crate) struct PgTransaction {
    pub(crate) id: String,
    /// Card: `captured`, `not_authorized`, `with_error`, `refunded`, `partial_refunded`; Pix: `waiting_payment`,
    /// `paid`, `failed`, `refunded`, `partial_refunded`; boleto: `generated`, `paid`, `underpaid`, `overpaid`,
    /// `voided`, `failed`, `refunded`, `partial_refunded`.
    pub(crate) status: String,
    pub(crate) success: bool,
    /// Card: the acquirer's return code and message.
    pub(crate) acquirer: Option<(&'static str, &'static str)>,
    /// The gateway's errors (`gateway_response.errors[].message`), for a transaction `with_error`.
    pub(crate) gateway_errors: Vec<String>,
    pub(crate) created_at: OffsetDateTime,
    pub(crate) updated_at: OffsetDateTime,
}

/// A charge (`ch_…`): one payment of an order.
#[derive(Debug)]
pub(crate) struct PgCharge {
    pub(crate) id: String,
    /// The order's `code` (Pagar.me's charges carry their order's code).
    pub(crate) code: Option<String>,
    pub(crate) order_id: String,
    pub(crate) customer_id: String,
    pub(crate) amount: i64,
    pub(crate) paid_amount: i64,
    /// What was cancelled: refunded after payment, or the whole amount of a charge cancelled unpaid.
    pub(crate) canceled_amount: i64,
    /// Of `canceled_amount`, what was refunded after payment, and in how many cancellations.
    pub(crate) refunded: i64,
    pub(crate) refunds: u32,
    /// `pending`, `processing`, `paid`, `failed`, `canceled`, `underpaid`, `overpaid`, `chargedback`.
    pub(crate) status: String,
    pub(crate) method: Method,
    pub(crate) transaction: PgTransaction,
    pub(crate) metadata: Value,
    pub(crate) created_at: OffsetDateTime,
    pub(crate) updated_at: OffsetDateTime,
    pub(crate) paid_at: Option<OffsetDateTime>,
    pub(crate) canceled_at: Option<OffsetDateTime>,
    /// Creation order, for listing newest first.
    pub(crate) seq: u64,
}

impl PgCharge {
    /// What can still be refunded of a paid charge.
    pub(crate) fn refundable(&self) -> i64 {
        (self.paid_amount - self.canceled_amount).max(0)
    }

    /// The saved card this charge used, if any.
    pub(crate) fn card_id(&self) -> Option<&str> {
        match &self.method {
            Method::CreditCard { card_id, .. } => card_id.as_deref(),
            _ => None,
        }
    }
}

/// An order (`or_…`).
#[derive(Debug)]
pub(crate) struct PgOrder {
    pub(crate) id: String,
    /// The merchant's code (hookline: the intent's public id).
    pub(crate) code: Option<String>,
    pub(crate) amount: i64,
    pub(crate) items: Vec<Item>,
    pub(crate) customer_id: String,
    pub(crate) closed: bool,
    /// `pending`, `paid`, `failed`, `canceled`.
    pub(crate) status: String,
    pub(crate) charges: Vec<String>,
    pub(crate) metadata: Value,
    pub(crate) created_at: OffsetDateTime,
    pub(crate) updated_at: OffsetDateTime,
    pub(crate) closed_at: Option<OffsetDateTime>,
    pub(crate) seq: u64,
}

/// One Pagar.me account's objects.
#[derive(Debug)]
pub(crate) struct PgBook {
    /// The account (`acc_…`) its webhooks name.
    pub(crate) account_id: String,
    pub(crate) customers: BTreeMap<String, PgCustomer>,
    pub(crate) cards: BTreeMap<String, PgCard>,
    pub(crate) tokens: BTreeMap<String, PgToken>,
    pub(crate) orders: BTreeMap<String, PgOrder>,
    pub(crate) charges: BTreeMap<String, PgCharge>,
    /// The next creation sequence number.
    pub(crate) next_seq: u64,
}

impl PgBook {
    pub(crate) fn new(account_id: String) -> PgBook {
        PgBook {
            account_id,
            customers: BTreeMap::new(),
            cards: BTreeMap::new(),
            tokens: BTreeMap::new(),
            orders: BTreeMap::new(),
            charges: BTreeMap::new(),
            next_seq: 1,
        }
    }

    /// A fresh creation sequence number.
    pub(crate) fn seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_cards_and_declines() {
        assert_eq!(behaviour(APPROVED_CARD), CardBehaviour::Approve);
        assert_eq!(behaviour(DECLINED_CARD), CardBehaviour::Decline);
        assert_eq!(behaviour(PROCESSING_CARD), CardBehaviour::Processing);
        assert_eq!(behaviour("5555555555554444"), CardBehaviour::Approve);
        assert_eq!(decline("insufficient_funds").map(|d| d.code), Some("1016"));
        assert!(decline("cc_rejected_other_reason").is_none());
        assert_eq!(decline_names().count(), DECLINES.len());
    }
}
