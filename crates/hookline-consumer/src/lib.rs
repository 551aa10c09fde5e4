//! `hookline-consumer`: the consumer engine — the second stage's exactly-once machinery, with no effect of its
//! own.
//!
//! Consumes event references from RabbitMQ with manual acks and, for each (or each batch), runs ONE database
//! transaction that inserts the processed marker first and then lets a [`Handler`] apply its effects
//! ([`process::process_event`], [`process::process_batch`]); it acks only after the commit. A redelivery finds
//! the marker and changes nothing.
//!
//! It must never: import a feature crate (payments, delivery, …): it is generic over
//! [`hookline_core::handler::Handler`], and the worker binary composes it with the effects.
//!
//! Its stages, one file each: [`consumer`] (the type, its settings, the reconnecting outer loop), `consuming`
//! (one AMQP session: qos, consume, the loop that takes deliveries), `gather` (deliveries into batches),
//! `apply_single` and `apply_batch` (the transaction, its retries and fallbacks), `bundles` and `splitter` (splitting a bundle
//! into single messages), [`acks`] and `dead_letter` (settling a delivery), `delivery` (what its headers say);
//! [`process`] is the transaction itself; `context` is what the stages share. [`dlq`] is the dead-letter reconciliation loop the process runs beside
//! the consumer.

pub mod acks;
mod apply_batch;
mod apply_single;
mod bundles;
pub mod consumer;
mod consuming;
mod context;
mod dead_letter;
mod delivery;
pub mod dlq;
mod gather;
pub mod process;
mod splitter;

pub use consumer::{Consumer, ConsumerSettings};
pub use hookline_core::handler::Handler;
pub use process::{
    process_batch, process_batch_prepared, process_event, process_prepared, BatchItem,
    ProcessError, Processed,
};
