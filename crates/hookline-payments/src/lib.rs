//! `hookline-payments`: everything hookline knows about money, and nothing about how messages travel.
//!
//! It owns:
//! * the payment model ([`model`]): statuses, facts, money;
//! * inbound effects: provider events → normalized facts ([`normalize`]) → the payment state machine and the
//!   append-only double-entry ledger ([`apply`], [`ledger`]), behind the worker's `Handler` seam
//!   ([`hookline_core::handler`]), with the one read it may need from a provider first ([`fetch`]);
//! * outbound effects: payment intents, refunds and the merchant API's idempotency keys ([`intents`]), the
//!   requests to the gateways and their retries ([`outbound_requests`], [`dispatch`]), billing — subscriptions,
//!   their cycles and dunning ([`billing`]) and reconciliation against the providers' APIs ([`reconcile`]), all through one API client
//!   per provider ([`gateway`]: requests, lookups and how each provider's objects read);
//! * the read-only views of those tables for operators ([`view`]) and the per-provider currency lists
//!   ([`currency`]).
//!
//! It must never: import an HTTP server (actix) or the AMQP transport (lapin, `hookline-bus`) — the processes
//! that carry events compose it, not the other way round; write a table another crate owns; decide a duplicate
//! anywhere but in a UNIQUE constraint.

pub mod apply;
pub mod billing;
pub mod currency;
pub mod dispatch;
pub mod facts;
pub mod fetch;
pub mod gateway;
pub mod intents;
pub mod ledger;
pub mod model;
pub mod normalize;
pub mod outbound_requests;
pub mod params;
pub mod reconcile;
pub mod view;

pub use apply::{PaymentsHandler, CONSUMER};
