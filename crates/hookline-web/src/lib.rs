//! `hookline-web`: what every hookline HTTP listener (the providers' edge, the merchant API, the console)
//! shares on top of actix-web, so that each rule exists once: the bounded body reader, the server builder and its
//! defences, `Retry-After`, and the `[edge]` settings they all read ([`EdgeConfig`]).
//!
//! It must never: know a route, a table or a provider.

pub mod body;
pub mod config;
pub mod server;

pub use body::{read_bounded, BodyError};
pub use config::EdgeConfig;
pub use server::{serve, Limits};

/// Seconds a client is asked to wait before retrying after a 503 (the providers' edge and the merchant API alike).
pub const RETRY_AFTER_SECS: u32 = 5;
