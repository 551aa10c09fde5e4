//! The payments effect: provider events → payment state machine and double-entry ledger.

pub mod apply;
pub mod facts;
pub mod fetch;
pub mod ledger;
pub mod model;
pub mod normalize;

pub use apply::{PaymentsHandler, CONSUMER};
