//! `hookline-payments`: what hookline knows about money — its tables and the state machine that writes them —
//! and nothing about how messages travel or how a provider's API is spoken.
//!
//! It owns:
//! * the payment model ([`model`]): statuses, facts, money, and the per-provider currency lists ([`currency`]);
//! * inbound effects: provider events → normalized facts ([`normalize`]) → the payment state machine and the
//!   append-only double-entry ledger ([`apply`], [`ledger`]), behind the worker's `Handler` seam
//!   ([`hookline_core::handler`]), and the domain facts they hand on ([`facts`]);
//! * the outbound tables: payment intents, refunds and the merchant API's idempotency keys ([`intents`]), what a
//!   gateway needs to charge an intent ([`params`]), and the outbox of calls to the gateways
//!   ([`outbound_requests`]);
//! * the read-only views of those tables for operators ([`view`]).
//!
//! Why the intent tables live here and not with the gateway clients: a webhook's transaction completes the intent
//! it pays (`apply` → `intents`), so they stand below the state machine. What stands above this crate reaches in
//! through two seams, never by being called up: [`apply::ProviderRead`] (the one read the payments effect may
//! need from a provider's API before its transaction, implemented by `hookline-gateways`) and
//! [`intents::ChargeFinal`] (what a subscription cycle's charge reaching a final status does in the same
//! transaction: `hookline-billing`'s dunning).
//!
//! Dependencies point one way: `hookline-billing` → `hookline-gateways` → `hookline-payments` → `hookline-core`.
//!
//! It must never: import an HTTP server (actix) or the AMQP transport (lapin, `hookline-bus`) — the processes
//! that carry events compose it, not the other way round; write a table another crate owns; decide a duplicate
//! anywhere but in a UNIQUE constraint.

pub mod apply;
pub mod currency;
pub mod facts;
pub mod intents;
pub mod ledger;
pub mod model;
pub mod normalize;
pub mod outbound_requests;
pub mod params;
pub mod view;

pub use apply::{PaymentsHandler, CONSUMER};
