//! What the control API does to Pagar.me charges, standing in for the payer, the acquirer and the card network:
//! a pending Pix paid or expired, a pending or processing charge moved to another status (a boleto paid, under-
//! or overpaid; a processing card confirmed or refused), a chargeback opened, won or lost. Each change sends its
//! webhooks as Pagar.me would. A charge is named by its `ch_…` id, or by its order's `or_…` id.

use serde_json::Value;
use url::Url;

use super::book::{decline, Method, DECLINES};
use super::lifecycle;
use super::render;
use crate::state::State;

/// The charge `id` names: itself, or the (one) charge of order `id`.
fn charge_of(state: &State, p: usize, id: &str) -> Result<String, String> {
    let book = &state.providers[p].pagarme;
    if book.charges.contains_key(id) {
        return Ok(id.to_owned());
    }
    book.orders
        .get(id)
        .and_then(|o| o.charges.first().cloned())
        .ok_or_else(|| format!("'{id}' is neither a Pagar.me charge nor an order of this provider"))
}

fn charge_json(state: &State, p: usize, id: &str) -> Value {
    let book = &state.providers[p].pagarme;
    book.charges
        .get(id)
        .map(|c| render::charge_json(book, c))
        .unwrap_or(Value::Null)
}

/// Cancels every `auth_only` charge of provider `p` whose authorization waited
/// [`lifecycle::AUTHORIZATION_LIFETIME`] on the sandbox clock without a capture, as Pagar.me does: charge
/// `canceled` (transaction `voided`), order `canceled`; `charge.updated` and `order.canceled`, as for any unpaid
/// charge cancelled. Runs when the sandbox clock moves and before each request to the provider is answered.
pub(crate) fn expire_authorizations(state: &mut State, edge_url: &Url, p: usize) {
    let now = state.clock.now();
    let due: Vec<String> = state.providers[p]
        .pagarme
        .charges
        .values()
        .filter(|c| {
            c.status == "pending"
                && c.transaction.status == lifecycle::AUTHORIZED_PENDING_CAPTURE
                && c.created_at + lifecycle::AUTHORIZATION_LIFETIME <= now
        })
        .map(|c| c.id.clone())
        .collect();
    for charge_id in due {
        lifecycle::cancel_unpaid(state, p, &charge_id);
        lifecycle::notify(state, edge_url, p, &charge_id, "updated");
    }
}

/// A pending Pix is paid (`charge.paid`, `order.paid`) or expires unpaid (charge and order `failed`,
/// `charge.payment_failed`, `order.payment_failed`). Refused for anything but a pending Pix.
pub(crate) fn settle_pix(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: &str,
    paid: bool,
) -> Result<Value, String> {
    let charge_id = charge_of(state, p, id)?;
    let book = &state.providers[p].pagarme;
    let charge = book.charges.get(&charge_id).ok_or("no such charge")?;
    if !matches!(charge.method, Method::Pix { .. }) || charge.status != "pending" {
        return Err(format!(
            "charge {charge_id} is a {} charge in status {}, not a pending Pix",
            charge.method.name(),
            charge.status
        ));
    }
    let amount = charge.amount;
    if paid {
        lifecycle::mark_paid(state, p, &charge_id, amount, "paid");
        lifecycle::notify(state, edge_url, p, &charge_id, "paid");
    } else {
        lifecycle::mark_failed(state, p, &charge_id, DECLINES[0]);
        lifecycle::notify(state, edge_url, p, &charge_id, "payment_failed");
    }
    Ok(charge_json(state, p, &charge_id))
}

/// Moves a `pending` or `processing` charge to `status`: `paid`; `failed` (a card with the decline named by
/// `detail`, default `not_authorized`); `canceled`; `underpaid` / `overpaid` (Pix or boleto; `detail` the paid
/// amount in cents, default one cent short / one real over). Sends `charge.paid`, `charge.payment_failed`,
/// `charge.updated`, `charge.underpaid` or `charge.overpaid`, and the order's webhook when its status changes.
pub(crate) fn set_status(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: &str,
    status: &str,
    detail: Option<&str>,
) -> Result<Value, String> {
    let charge_id = charge_of(state, p, id)?;
    let charge = state.providers[p]
        .pagarme
        .charges
        .get(&charge_id)
        .ok_or("no such charge")?;
    if !matches!(charge.status.as_str(), "pending" | "processing") {
        return Err(format!(
            "charge {charge_id} is {}: only a pending or processing charge can be moved (refunds go through DELETE /core/v5/charges/{{id}}, chargebacks through /_sandbox/chargebacks)",
            charge.status
        ));
    }
    let (amount, is_card) = (
        charge.amount,
        matches!(charge.method, Method::CreditCard { .. }),
    );
    let event = match status {
        "paid" => {
            lifecycle::mark_paid(state, p, &charge_id, amount, "paid");
            "paid"
        }
        "failed" => {
            let d = match detail {
                Some(name) => decline(name).ok_or_else(|| {
                    format!("unknown decline '{name}' (one of: {})", super::book::decline_names().collect::<Vec<_>>().join(", "))
                })?,
                None => DECLINES[0],
            };
            lifecycle::mark_failed(state, p, &charge_id, d);
            "payment_failed"
        }
        "canceled" => {
            lifecycle::cancel_unpaid(state, p, &charge_id);
            "updated"
        }
        "underpaid" | "overpaid" if !is_card => {
            let paid = match detail {
                Some(text) => text
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|&a| a > 0 && if status == "underpaid" { a < amount } else { a > amount })
                    .ok_or_else(|| format!("status_detail must be the paid amount in cents, {} the charge's {amount}", if status == "underpaid" { "below" } else { "above" }))?,
                None if status == "underpaid" => (amount - 1).max(1),
                None => amount + 100,
            };
            lifecycle::mark_paid(state, p, &charge_id, paid, status);
            status
        }
        other => {
            return Err(format!(
                "status '{other}' is not one the sandbox moves a charge to (paid, failed, canceled; underpaid, overpaid for Pix and boleto)"
            ))
        }
    };
    lifecycle::notify(state, edge_url, p, &charge_id, event);
    Ok(charge_json(state, p, &charge_id))
}

/// A chargeback on a paid charge: `opened` (default) and `lost` make it `chargedback` (`charge.chargedback`; a
/// lost one that already was is notified again); `lost` also marks the last transaction `chargedback`, which is
/// final; `won` returns an open chargeback's charge to `paid` (`charge.paid`). Pagar.me documents only the charge
/// status `chargedback` and `charge.chargedback`
/// (<https://docs.pagar.me/page/chargeback-novo-status-na-cobran%C3%A7a>); how an opened, a won and a lost
/// chargeback look apart is the sandbox's convention, which hookline reads the same way.
pub(crate) fn chargeback(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    id: &str,
    status: Option<&str>,
) -> Result<Value, String> {
    let charge_id = charge_of(state, p, id)?;
    let now = state.clock.now();
    let charge = state.providers[p]
        .pagarme
        .charges
        .get_mut(&charge_id)
        .ok_or("no such charge")?;
    let status = status.unwrap_or("opened");
    let lost = charge.transaction.status == "chargedback";
    let event = match (status, charge.status.as_str()) {
        ("opened" | "lost", "paid" | "overpaid") | ("lost", "chargedback") => {
            charge.status = "chargedback".into();
            if status == "lost" {
                charge.transaction.status = "chargedback".into();
                charge.transaction.updated_at = now;
            }
            "chargedback"
        }
        ("won", "chargedback") if lost => {
            return Err(format!(
                "charge {charge_id}'s chargeback is lost: a lost chargeback is final"
            ))
        }
        ("won", "chargedback") => {
            charge.status = "paid".into();
            "paid"
        }
        ("opened" | "lost" | "won", current) => {
            return Err(format!(
                "charge {charge_id} is {current}: a chargeback is {status} only on a {} charge",
                if status == "won" {
                    "chargedback"
                } else {
                    "paid"
                }
            ))
        }
        (other, _) => {
            return Err(format!(
                "chargeback status '{other}' is not opened, won or lost"
            ))
        }
    };
    charge.updated_at = now;
    lifecycle::notify(state, edge_url, p, &charge_id, event);
    Ok(charge_json(state, p, &charge_id))
}
