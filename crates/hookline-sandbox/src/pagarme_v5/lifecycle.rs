//! What happens to a charge after it is created — paid, failed, cancelled unpaid, refunded (in full or in part),
//! charged back — and to its order, with the webhooks each change sends. Shared by the API's operations
//! ([`super::ops`]) and the control API's ([`super::settle`]); every change happens under the state lock, so two
//! concurrent refunds can never give back more than was paid.
//!
//! Order status follows its charge (one payment per order): `paid`/`overpaid` → `paid`, `failed` → `failed`,
//! `canceled` → `canceled`, a chargeback leaves the order `paid`, anything else `pending`.

use url::Url;

use super::book::{Decline, Method, PgCharge};
use super::emit;
use crate::state::State;

/// The acquirer's answer to a captured card transaction (what Pagar.me's simulator answers).
pub(crate) const CAPTURED: (&str, &str) = ("0000", "Transação capturada com sucesso");
/// The acquirer's answer to an authorization (`auth_only`; the sandbox's wording).
pub(crate) const AUTHORIZED: (&str, &str) = ("0000", "Transação autorizada com sucesso");
/// A card transaction authorized and not yet captured (`auth_only`).
pub(crate) const AUTHORIZED_PENDING_CAPTURE: &str = "authorized_pending_capture";
/// How long an `auth_only` authorization waits for its capture before Pagar.me cancels it: 5 days
/// (<https://pagarme.helpjuice.com/pt_BR/p1-transa%C3%A7%C3%B5es-e-estornos/transa%C3%A7%C3%A3o-como-capturar-uma-transa%C3%A7%C3%A3o-manualmente>,
/// and Stone's reference of `POST /core/v5/charges/{id}/capture`: "nossa API faz automaticamente o cancelamento
/// … capture_timeout"; Visa merchant-initiated transactions 4 days, not played).
pub(crate) const AUTHORIZATION_LIFETIME: time::Duration = time::Duration::days(5);

/// A charge becomes paid with `paid_amount` (its amount, or an under/overpayment): status `status` (`paid`,
/// `underpaid`, `overpaid`), its transaction `captured` (card) or `paid`/`underpaid`/`overpaid`.
pub(crate) fn mark_paid(
    state: &mut State,
    p: usize,
    charge_id: &str,
    paid_amount: i64,
    status: &str,
) {
    let now = state.clock.now();
    let Some(charge) = state.providers[p].pagarme.charges.get_mut(charge_id) else {
        return;
    };
    charge.status = status.to_owned();
    charge.paid_amount = paid_amount;
    charge.paid_at = Some(now);
    charge.updated_at = now;
    let t = &mut charge.transaction;
    t.success = true;
    t.updated_at = now;
    t.gateway_errors.clear();
    match charge.method {
        Method::CreditCard { .. } => {
            t.status = "captured".into();
            t.acquirer = Some(CAPTURED);
        }
        Method::Pix { .. } => t.status = "paid".into(),
        Method::Boleto { .. } => {
            t.status = if status == "paid" {
                "paid".into()
            } else {
                status.to_owned()
            };
        }
    }
}

/// A charge fails: card with `decline`; Pix (expired) and boleto `failed`.
pub(crate) fn mark_failed(state: &mut State, p: usize, charge_id: &str, decline: Decline) {
    let now = state.clock.now();
    let Some(charge) = state.providers[p].pagarme.charges.get_mut(charge_id) else {
        return;
    };
    charge.status = "failed".into();
    charge.updated_at = now;
    let t = &mut charge.transaction;
    t.success = false;
    t.updated_at = now;
    if matches!(charge.method, Method::CreditCard { .. }) {
        apply_decline(t, decline);
    } else {
        t.status = "failed".into();
    }
}

/// Writes a decline into a card transaction.
pub(crate) fn apply_decline(t: &mut super::book::PgTransaction, decline: Decline) {
    t.status = decline.transaction_status.into();
    t.success = false;
    t.acquirer = Some((decline.code, decline.message));
    t.gateway_errors = if decline.transaction_status == "with_error" {
        vec![decline.message.to_owned()]
    } else {
        Vec::new()
    };
}

/// A charge that was never paid is cancelled: its whole amount is `canceled_amount`, nothing is refunded.
pub(crate) fn cancel_unpaid(state: &mut State, p: usize, charge_id: &str) {
    let now = state.clock.now();
    let Some(charge) = state.providers[p].pagarme.charges.get_mut(charge_id) else {
        return;
    };
    charge.status = "canceled".into();
    charge.canceled_amount = charge.amount;
    charge.canceled_at = Some(now);
    charge.updated_at = now;
    let t = &mut charge.transaction;
    t.updated_at = now;
    t.status = match charge.method {
        Method::CreditCard { .. } => "voided",
        Method::Pix { .. } => "canceled",
        Method::Boleto { .. } => "voided",
    }
    .into();
}

/// Why a refund was refused, for a 412.
pub(crate) struct RefundRefused(pub(crate) &'static str);

/// Refunds `amount` (default: what is left) of a paid charge: in full it becomes `canceled` (transaction
/// `refunded`), in part it stays as it is with `canceled_amount` grown (transaction `partial_refunded`). The
/// amount refunded and whether that emptied the charge.
pub(crate) fn refund(
    charge: &mut PgCharge,
    amount: Option<i64>,
    now: time::OffsetDateTime,
) -> Result<(i64, bool), RefundRefused> {
    let left = charge.refundable();
    let amount = amount.unwrap_or(left);
    if left == 0 {
        return Err(RefundRefused("The charge has no amount left to cancel."));
    }
    if amount > left {
        return Err(RefundRefused(
            "The amount to cancel is greater than the amount available to cancel.",
        ));
    }
    charge.canceled_amount += amount;
    charge.refunded += amount;
    charge.refunds += 1;
    charge.updated_at = now;
    charge.transaction.updated_at = now;
    let total = charge.refundable() == 0;
    if total {
        charge.status = "canceled".into();
        charge.canceled_at = Some(now);
        charge.transaction.status = "refunded".into();
    } else {
        charge.transaction.status = "partial_refunded".into();
    }
    Ok((amount, total))
}

/// The order status its charge gives it.
fn order_status(charge_status: &str, current: &str) -> String {
    match charge_status {
        "paid" | "overpaid" => "paid",
        "failed" => "failed",
        "canceled" => "canceled",
        "chargedback" => current,
        _ => "pending",
    }
    .to_owned()
}

/// Brings charge `charge_id`'s order in line with it and sends the order's webhook when its status changed
/// (`order.paid`, `order.payment_failed`, `order.canceled`).
pub(crate) fn sync_order(state: &mut State, edge_url: &Url, p: usize, charge_id: &str) {
    let now = state.clock.now();
    let book = &mut state.providers[p].pagarme;
    let Some(charge) = book.charges.get(charge_id) else {
        return;
    };
    let (order_id, charge_status) = (charge.order_id.clone(), charge.status.clone());
    let Some(order) = book.orders.get_mut(&order_id) else {
        return;
    };
    let status = order_status(&charge_status, &order.status);
    if status == order.status {
        return;
    }
    order.status = status.clone();
    order.updated_at = now;
    if status == "paid" && order.closed_at.is_none() {
        order.closed_at = Some(now);
    }
    let event = match status.as_str() {
        "paid" => "paid",
        "failed" => "payment_failed",
        "canceled" => "canceled",
        _ => return,
    };
    emit::order_hook(state, edge_url, p, &order_id, event);
}

/// Sends `charge.{event}` for charge `charge_id`, then brings its order in line ([`sync_order`]).
pub(crate) fn notify(state: &mut State, edge_url: &Url, p: usize, charge_id: &str, event: &str) {
    emit::charge_hook(state, edge_url, p, charge_id, event);
    sync_order(state, edge_url, p, charge_id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_follow_their_charge() {
        assert_eq!(order_status("paid", "pending"), "paid");
        assert_eq!(order_status("overpaid", "pending"), "paid");
        assert_eq!(order_status("underpaid", "pending"), "pending");
        assert_eq!(order_status("processing", "pending"), "pending");
        assert_eq!(order_status("chargedback", "paid"), "paid");
        assert_eq!(order_status("canceled", "paid"), "canceled");
    }
}
