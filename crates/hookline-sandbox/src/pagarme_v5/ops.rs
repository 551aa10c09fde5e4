//! Pagar.me's mutating operations, executed under the state lock once validated: an order with its one charge
//! (`POST /core/v5/orders`), the capture of an `auth_only` charge (`POST /core/v5/charges/{id}/capture`), a
//! charge's cancellation — the void of an authorization, the refund in full or in part (`DELETE
//! /core/v5/charges/{id}`) — and customers, saved cards and tokens ([`super::customers`]).
//!
//! A card charge's outcome: the saved card's script ([`crate::SandboxControl::script_payment_method`]), else an
//! outcome forced by the control API, else the card's own number (Pagar.me's test cards: `4000000000000010`
//! paid, `4000000000000028` failed `not_authorized`, `4000000000000036` processing; any other valid number
//! paid). Pix is `pending` with its QR code (transaction `waiting_payment`), a boleto `pending` with its line
//! (transaction `generated`), until the control API settles them.

use url::Url;

use super::book::{
    decline, CardData, Decline, Item, Method, PgCharge, PgOrder, PgTransaction, DECLINES,
};
use super::cards::{self, CardSource, NewCard};
use super::customers::{self, NewCustomer, OrderCustomer};
use super::errors;
use super::lifecycle::{self, AUTHORIZED_PENDING_CAPTURE, CAPTURED};
use super::render;
use super::validate::{NewMethod, NewOrder};
use crate::pix::pix_code;
use crate::reply::Reply;
use crate::scripts::SUCCEED;
use crate::state::State;

/// A validated request, ready to execute.
pub(crate) enum Request {
    CreateOrder(Box<NewOrder>),
    CancelCharge {
        charge_id: String,
        amount: Option<i64>,
    },
    CaptureCharge {
        charge_id: String,
        amount: Option<i64>,
    },
    CreateCustomer(NewCustomer),
    SaveCard {
        customer_id: String,
        source: CardSource,
    },
    CreateToken(NewCard),
}

/// Executes a validated request under the idempotency key `key`, if any.
pub(crate) fn execute(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    request: Request,
    key: Option<&str>,
) -> Reply {
    // An authorization that expired meanwhile is cancelled first.
    super::settle::expire_authorizations(state, edge_url, p);
    match request {
        Request::CreateOrder(new) => create_order(state, edge_url, p, *new, key),
        Request::CaptureCharge { charge_id, amount } => {
            capture_charge(state, edge_url, p, &charge_id, amount, key)
        }
        Request::CancelCharge { charge_id, amount } => {
            cancel_charge(state, edge_url, p, &charge_id, amount, key)
        }
        Request::CreateCustomer(new) => customers::create_customer(state, p, new),
        Request::SaveCard {
            customer_id,
            source,
        } => cards::save_card(state, p, &customer_id, source),
        Request::CreateToken(new) => cards::create_token(state, p, new),
    }
}

/// How a new charge starts.
enum Start {
    Paid,
    /// `auth_only`: the card authorized, nothing captured (transaction `authorized_pending_capture`).
    Authorized,
    Failed(Decline),
    /// A card the acquirer has not confirmed (transaction `with_error`, charge `processing`).
    Processing,
    /// Pix or boleto waiting for the payer: the transaction's status.
    Waiting(&'static str),
}

/// The outcome of charging `card` (saved as `card_id`, if it is): script, forced outcome, test card.
fn card_start(state: &mut State, p: usize, card: &CardData, card_id: Option<&str>) -> Start {
    let book = &mut state.providers[p];
    // Every executed charge of a saved card is one use of it (a replay never gets here).
    if let Some(outcome) = card_id.and_then(|id| book.scripts.next_use(id)) {
        return match decline(&outcome) {
            _ if outcome == SUCCEED => Start::Paid,
            Some(d) => Start::Failed(d),
            None => Start::Failed(DECLINES[0]),
        };
    }
    if let Some(forced) = book.outcomes.pop_front() {
        return match forced.status.as_str() {
            "paid" => Start::Paid,
            "processing" => Start::Processing,
            _ => Start::Failed(
                forced
                    .status_detail
                    .as_deref()
                    .and_then(decline)
                    .unwrap_or(DECLINES[0]),
            ),
        };
    }
    match card.behaviour {
        super::book::CardBehaviour::Approve => Start::Paid,
        super::book::CardBehaviour::Decline => Start::Failed(DECLINES[0]),
        super::book::CardBehaviour::Processing => Start::Processing,
    }
}

/// The FEBRABAN modulo-10 check digit of `digits`.
fn mod10(digits: &str) -> char {
    let sum: u32 = digits
        .chars()
        .rev()
        .filter_map(|c| c.to_digit(10))
        .enumerate()
        .map(|(i, d)| {
            let d = if i % 2 == 0 { d * 2 } else { d };
            d / 10 + d % 10
        })
        .sum();
    char::from_digit((10 - sum % 10) % 10, 10).unwrap_or('0')
}

/// A boleto's digitable line (47 digits: three fields with their check digits, the general check digit, due
/// factor and amount) and barcode (44 digits), for bank 001 and the charge's amount. Shaped like a real one, but
/// not payable: its free field is random and its general check digit is not FEBRABAN's modulo 11.
fn boleto_numbers(seed: u64, cents: i64) -> (String, String) {
    let amount = format!("{:010}", cents.clamp(0, 9_999_999_999));
    let free = format!("{:025}", u128::from(seed) * 1_000_003 % 10u128.pow(25));
    let factor = "9999";
    let general = mod10(&format!("0019{factor}{amount}{free}"));
    let barcode = format!("0019{general}{factor}{amount}{free}");
    let field1 = format!("0019{}", &free[..5]);
    let field2 = &free[5..15];
    let field3 = &free[15..25];
    let line = format!(
        "{field1}{}{field2}{}{field3}{}{general}{factor}{amount}",
        mod10(&field1),
        mod10(field2),
        mod10(field3)
    );
    (line, barcode)
}

/// `POST /core/v5/orders`: 200 with the order, whatever the outcome (a declined card is an order `failed`).
fn create_order(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    new: NewOrder,
    key: Option<&str>,
) -> Reply {
    // Everything that can refuse the request is checked before anything is created.
    let known_customer = match &new.customer {
        OrderCustomer::Id(id) => {
            if !state.providers[p].pagarme.customers.contains_key(id) {
                return errors::not_found("Customer");
            }
            Some(id.clone())
        }
        OrderCustomer::New(_) => None,
    };
    let checked = match &new.payment.method {
        NewMethod::Card { source, .. } => {
            let path = "order.payments[0].credit_card.card_token";
            match cards::check_card(state, p, source, known_customer.as_deref(), path) {
                Ok(checked) => Some(checked),
                Err(reply) => return reply,
            }
        }
        _ => None,
    };
    let customer_id = match customers::order_customer(state, p, new.customer) {
        Ok(id) => id,
        Err(reply) => return reply,
    };
    let now = state.clock.now();
    let order_id = state.rng.id("or", 16);
    let charge_id = state.rng.id("ch", 16);
    let tran_id = state.rng.id("tran", 16);
    let (method, start) = match (new.payment.method, checked) {
        (
            NewMethod::Card {
                installments,
                statement_descriptor,
                operation_type,
                ..
            },
            Some(checked),
        ) => {
            let (card, card_id) = cards::use_card(state, p, checked, &customer_id);
            let start = match card_start(state, p, &card, card_id.as_deref()) {
                Start::Paid if operation_type == "auth_only" => Start::Authorized,
                start => start,
            };
            (
                Method::CreditCard {
                    card,
                    card_id,
                    installments,
                    statement_descriptor,
                    operation_type,
                },
                start,
            )
        }
        (NewMethod::Pix { expires_at }, _) => {
            let code = pix_code(
                &format!("sandbox-{order_id}"),
                tran_id.trim_start_matches("tran_"),
                new.amount,
            );
            let qr_code_url = format!(
                "https://api.pagar.me/core/v5/transactions/{tran_id}/qrcode?payment_method=pix"
            );
            (
                Method::Pix {
                    qr_code: code,
                    qr_code_url,
                    expires_at,
                },
                Start::Waiting("waiting_payment"),
            )
        }
        (
            NewMethod::Boleto {
                due_at,
                instructions,
            },
            _,
        ) => {
            let seed = state.rng.next_u64();
            let (line, barcode) = boleto_numbers(seed, new.amount);
            let nosso_numero = format!("{}", seed % 100_000_000_000);
            let url = format!("https://api.pagar.me/core/v5/transactions/{tran_id}/pdf");
            let barcode_url = format!(
                "https://api.pagar.me/core/v5/transactions/{tran_id}/barcode?code={barcode}"
            );
            let method = Method::Boleto {
                pdf: url.clone(),
                url,
                line,
                barcode: barcode_url,
                nosso_numero,
                due_at,
                instructions,
            };
            (method, Start::Waiting("generated"))
        }
        // A card payment always has its checked card.
        (NewMethod::Card { .. }, None) => return errors::message(500, "An error has occurred."),
    };
    let mut transaction = PgTransaction {
        id: tran_id,
        status: String::new(),
        success: true,
        acquirer: None,
        gateway_errors: Vec::new(),
        created_at: now,
        updated_at: now,
    };
    let (charge_status, order_status) = match &start {
        Start::Paid => {
            transaction.status = "captured".into();
            transaction.acquirer = Some(CAPTURED);
            ("paid", "paid")
        }
        Start::Authorized => {
            transaction.status = AUTHORIZED_PENDING_CAPTURE.into();
            transaction.acquirer = Some(lifecycle::AUTHORIZED);
            ("pending", "pending")
        }
        Start::Failed(d) => {
            lifecycle::apply_decline(&mut transaction, *d);
            ("failed", "failed")
        }
        Start::Processing => {
            transaction.status = "with_error".into();
            transaction.success = false;
            ("processing", "pending")
        }
        Start::Waiting(status) => {
            transaction.status = (*status).into();
            ("pending", "pending")
        }
    };
    let paid = matches!(start, Start::Paid);
    let items: Vec<Item> = new
        .items
        .into_iter()
        .map(|i| Item {
            id: state.rng.id("oi", 16),
            description: i.description,
            amount: i.amount,
            quantity: i.quantity,
            code: i.code,
        })
        .collect();
    let book = &mut state.providers[p];
    let seq = book.pagarme.seq();
    let charge = PgCharge {
        id: charge_id.clone(),
        code: new.code.clone(),
        order_id: order_id.clone(),
        customer_id: customer_id.clone(),
        amount: new.amount,
        paid_amount: if paid { new.amount } else { 0 },
        canceled_amount: 0,
        refunded: 0,
        refunds: 0,
        status: charge_status.into(),
        method,
        transaction,
        metadata: new.payment.metadata,
        created_at: now,
        updated_at: now,
        paid_at: paid.then_some(now),
        canceled_at: None,
        seq,
    };
    let order = PgOrder {
        id: order_id.clone(),
        code: new.code,
        amount: new.amount,
        items,
        customer_id,
        closed: new.closed,
        status: order_status.into(),
        charges: vec![charge_id.clone()],
        metadata: new.metadata,
        created_at: now,
        updated_at: now,
        closed_at: paid.then_some(now),
        seq,
    };
    book.pagarme.charges.insert(charge_id.clone(), charge);
    book.pagarme.orders.insert(order_id.clone(), order);
    book.created(key, &order_id, false);
    book.created(key, &charge_id, true);
    super::emit::order_hook(state, edge_url, p, &order_id, "created");
    super::emit::charge_hook(state, edge_url, p, &charge_id, "created");
    match start {
        Start::Paid => {
            super::emit::charge_hook(state, edge_url, p, &charge_id, "paid");
            super::emit::order_hook(state, edge_url, p, &order_id, "paid");
        }
        Start::Failed(_) => {
            super::emit::charge_hook(state, edge_url, p, &charge_id, "payment_failed");
            super::emit::order_hook(state, edge_url, p, &order_id, "payment_failed");
        }
        // Stone's documentation of the same API: the capture follows the `charge.pending` webhook.
        Start::Authorized => {
            super::emit::charge_hook(state, edge_url, p, &charge_id, "pending");
        }
        Start::Processing | Start::Waiting(_) => {}
    }
    let book = &state.providers[p].pagarme;
    match book.orders.get(&order_id) {
        Some(order) => Reply::json(200, &render::order_json(book, order)),
        None => errors::not_found("Order"),
    }
}

/// `DELETE /core/v5/charges/{id}` `{amount?}`: a paid charge is refunded (in full: `canceled` and
/// `charge.refunded`, the order `canceled`; in part: still `paid`, `canceled_amount` grown,
/// `charge.partial_canceled`); a pending or processing one is cancelled whole (`charge.updated`, the order
/// `canceled`). 200 with the charge; 412 for a charge that cannot be cancelled or an amount beyond what is left.
fn cancel_charge(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    charge_id: &str,
    amount: Option<i64>,
    key: Option<&str>,
) -> Reply {
    let now = state.clock.now();
    let Some(charge) = state.providers[p].pagarme.charges.get_mut(charge_id) else {
        return errors::not_found("Charge");
    };
    let event = match charge.status.as_str() {
        "paid" | "overpaid" | "underpaid" => match lifecycle::refund(charge, amount, now) {
            Ok((_, true)) => "refunded",
            Ok((_, false)) => "partial_canceled",
            Err(refused) => return errors::precondition(refused.0),
        },
        "pending" | "processing" => {
            if amount.is_some_and(|a| a != charge.amount) {
                return errors::precondition(
                    "A charge that was not paid can only be canceled in full.",
                );
            }
            lifecycle::cancel_unpaid(state, p, charge_id);
            "updated"
        }
        "canceled" => return errors::precondition("The charge is already canceled."),
        other => {
            return errors::precondition(match other {
                "chargedback" => "A charged back charge cannot be canceled.",
                _ => "A failed charge cannot be canceled.",
            })
        }
    };
    state.providers[p].created(key, charge_id, false);
    lifecycle::notify(state, edge_url, p, charge_id, event);
    let book = &state.providers[p].pagarme;
    match book.charges.get(charge_id) {
        Some(charge) => Reply::json(200, &render::charge_json(book, charge)),
        None => errors::not_found("Charge"),
    }
}

/// `POST /core/v5/charges/{id}/capture` `{amount?}`: an `auth_only` charge whose authorization waits
/// (`pending`, transaction `authorized_pending_capture`) is captured — all of it, or `amount` ≤ what was
/// authorized — and becomes `paid` (transaction `captured`, `paid_amount` the amount captured; `charge.paid`,
/// `order.paid`). 412 for any other charge or a larger amount; 404 for an unknown one. 200 with the charge.
fn capture_charge(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    charge_id: &str,
    amount: Option<i64>,
    key: Option<&str>,
) -> Reply {
    let Some(charge) = state.providers[p].pagarme.charges.get(charge_id) else {
        return errors::not_found("Charge");
    };
    if charge.status != "pending" || charge.transaction.status != AUTHORIZED_PENDING_CAPTURE {
        return errors::precondition(&format!(
            "The charge cannot be captured: its status is {} (only a charge authorized and pending capture can be).",
            charge.status
        ));
    }
    let amount = amount.unwrap_or(charge.amount);
    if amount > charge.amount {
        return errors::precondition(&format!(
            "The amount to capture ({amount}) is greater than the amount authorized ({}).",
            charge.amount
        ));
    }
    lifecycle::mark_paid(state, p, charge_id, amount, "paid");
    state.providers[p].created(key, charge_id, false);
    lifecycle::notify(state, edge_url, p, charge_id, "paid");
    let book = &state.providers[p].pagarme;
    match book.charges.get(charge_id) {
        Some(charge) => Reply::json(200, &render::charge_json(book, charge)),
        None => errors::not_found("Charge"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boleto_numbers_have_their_lengths() {
        for seed in [0, 7, 123_456_789, u64::MAX] {
            let (line, barcode) = boleto_numbers(seed, 15_000);
            assert_eq!((line.len(), barcode.len()), (47, 44), "{seed}");
            assert!(line
                .chars()
                .chain(barcode.chars())
                .all(|c| c.is_ascii_digit()));
            assert!(line.ends_with("99990000015000") && barcode.contains("99990000015000"));
        }
        assert_eq!(mod10("001900000"), '9'); // FEBRABAN's example line 00190.00009 …
    }
}
