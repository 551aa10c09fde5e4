//! `hookline-ops`: what operators do to a running pipeline, shared by the CLI and the console so that each
//! operation has one implementation.
//!
//! It owns the pipeline report ([`status`]), replay and dead-letter redrive ([`replay`]), retention ([`retention`]: `purge_runs` and the purge's deletes,
//! and its periodic loop [`purge_loop`]) and the broker-side inspection of queues ([`inspect`]).
//!
//! It must never: apply a business effect itself (a replay re-publishes, the worker decides, marker first);
//! serve HTTP (the console is its own crate over this one).

pub mod config;
pub mod inspect;
pub mod purge_loop;
pub mod replay;
pub mod retention;
pub mod status;
