//! `hookline-edge`: the first stage of hookline.
//!
//! It must never: hold a rule of another crate (payments, delivery, operations); answer 2xx before the row is
//! committed; serve the operator console.
//!
//! For each `POST /webhooks/{provider}` it reads the raw body (bounded in size and time), verifies the
//! provider's signature over those exact bytes, stores the event in PostgreSQL where a UNIQUE constraint decides
//! duplicates, and answers: 200 once the row is committed (also for duplicates), 400 for input that retrying will
//! not fix, 503 when the database is unavailable so the provider retries.
//!
//! With an `[api]` section it also serves the merchant-facing API ([`hookline_api`]) on a second listener. It
//! never serves the operator console, even with a `[console]` section: that is its own process (`hookline
//! console serve`), so an operator-facing flood (logins are Argon2 checks by design) can never slow an ack.

mod error;
mod routes;
mod startup;
mod writer;

pub use error::IngestError;
pub use startup::{AppState, Application};
