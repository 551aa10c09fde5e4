//! Stripe events: recorded on the provider's book and queued as webhooks to the edge.

use std::time::Instant;

use serde_json::Value;

use super::book::Event;
use super::request::At;
use crate::clock;
use crate::state::State;
use crate::webhooks::{self, NewDelivery};

/// Now, as Stripe's `created` (Unix seconds).
pub(super) fn now_unix() -> i64 {
    clock::now().unix_timestamp()
}

/// Records an event and queues its webhook.
pub(super) fn emit(state: &mut State, at: At<'_>, kind: &str, object: Value, resource_id: &str) {
    let At { edge_url, p, ctx } = at;
    let event = Event {
        id: state.rng.id("evt", 24),
        kind: kind.to_owned(),
        created: now_unix(),
        object,
        request_id: ctx.map(|c| c.request_id.clone()),
        idempotency_key: ctx.and_then(|c| c.idempotency_key.clone()),
        delivered: false,
    };
    let body = serde_json::to_string_pretty(&event.json()).unwrap_or_default();
    let new = NewDelivery {
        provider: p,
        event_id: event.id.clone(),
        event_type: event.kind.clone(),
        resource_id: resource_id.to_owned(),
        body,
        request_id: None,
        data_id: None,
    };
    state.providers[p].stripe.push_event(event);
    webhooks::enqueue(state, edge_url, new, Instant::now());
}
