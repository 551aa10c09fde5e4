//! Pagar.me's webhooks as it sends them (<https://docs.pagar.me/reference/exemplo-de-webhook-1>): a JSON POST
//! `{"id": "hook_…", "account": {"id": "acc_…", "name"}, "type": "order.paid", "created_at", "data": <the order or
//! the charge>}`. Nothing is signed; the delivery carries the webhook's Basic credentials when the provider has
//! them (see `crate::webhooks`). A retry or a duplicate repeats the same body, hence the same `hook_…` id.

use std::time::Instant;

use serde_json::{json, Value};
use url::Url;

use super::render;
use crate::clock::pagarme_date;
use crate::state::State;
use crate::webhooks::{self, NewDelivery};

/// The account name the sandbox's webhooks carry.
const ACCOUNT_NAME: &str = "Sandbox";

/// Queues webhook `kind` (`order.paid`, `charge.refunded`, …) about `data`, whose id is `resource_id`.
pub(crate) fn hook(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    kind: &str,
    data: Value,
    resource_id: &str,
) {
    let id = state.rng.id("hook", 16);
    let body = json!({
        "id": id,
        "account": {"id": state.providers[p].pagarme.account_id, "name": ACCOUNT_NAME},
        "type": kind,
        "created_at": pagarme_date(state.clock.now()),
        "data": data,
    });
    let new = NewDelivery {
        provider: p,
        event_id: id,
        event_type: kind.to_owned(),
        resource_id: resource_id.to_owned(),
        body: body.to_string(),
        request_id: None,
        data_id: None,
    };
    webhooks::enqueue(state, edge_url, new, Instant::now());
}

/// Queues `order.{event}` with the order as it now is.
pub(crate) fn order_hook(state: &mut State, edge_url: &Url, p: usize, order_id: &str, event: &str) {
    let book = &state.providers[p].pagarme;
    let Some(data) = book
        .orders
        .get(order_id)
        .map(|o| render::order_json(book, o))
    else {
        return;
    };
    hook(
        state,
        edge_url,
        p,
        &format!("order.{event}"),
        data,
        order_id,
    );
}

/// Queues `charge.{event}` with the charge as it now is.
pub(crate) fn charge_hook(
    state: &mut State,
    edge_url: &Url,
    p: usize,
    charge_id: &str,
    event: &str,
) {
    let book = &state.providers[p].pagarme;
    let Some(data) = book
        .charges
        .get(charge_id)
        .map(|c| render::charge_json(book, c))
    else {
        return;
    };
    hook(
        state,
        edge_url,
        p,
        &format!("charge.{event}"),
        data,
        charge_id,
    );
}
