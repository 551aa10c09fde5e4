//! `hookline-edge`: the first stage of hookline.
//!
//! For each `POST /webhooks/{provider}` it reads the raw body (bounded in size and time), verifies the
//! provider's signature over those exact bytes, stores the event in PostgreSQL where a UNIQUE constraint decides
//! duplicates, and answers: 200 once the row is committed (also for duplicates), 400 for input that retrying will
//! not fix, 503 when the database is unavailable so the provider retries.
//!
//! With an `[api]` section it also serves the merchant-facing API ([`hookline_api`]) on a second listener, and
//! with a `[console]` section the operator web console ([`hookline_console`]) on a third.

mod error;
mod routes;
mod startup;
mod writer;

pub use error::IngestError;
pub use startup::{AppState, Application};
