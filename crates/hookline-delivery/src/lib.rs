//! `hookline-delivery`: the facts hookline hands on to the merchant's systems, once each.
//!
//! It owns the merchant's destinations — the configured ones and the webhook endpoints merchants make through the
//! API — and their deliveries ([`destinations`]), the address policy of the latter (no SSRF, [`address`]), and the
//! two ways out: the
//! RabbitMQ domain exchange ([`relay`], which reads `domain_events` past its cursor) and signed HTTP (Standard Webhooks) to
//! each destination ([`deliver`]). The facts themselves are written by the crate that decides them, in the same
//! transaction, through [`hookline_core::domain_events`] — the seam between effects and delivery, in core so
//! that an effect crate never links the transport.
//!
//! It must never: decide a business effect; import payments or any other feature crate.

pub mod address;
pub mod config;
pub mod deliver;
pub mod destinations;
pub mod relay;

use hookline_core::supervisor::Supervisor;
use hookline_core::Config;

pub use config::{
    destinations_from_config, DeliveryConfig, DestinationConfig, MAX_DESTINATIONS, MAX_SECRETS,
};

/// Starts, under `supervisor`, the two ways domain events leave: the domain relay (RabbitMQ `{prefix}.domain`,
/// task `domain_relay`) and the HTTP delivery to `[[destinations]]` (task `delivery`). Used by the worker and by
/// `hookline deliver`; stop them with `cancel` and await the handles.
pub fn spawn(
    config: &Config,
    pool: sqlx::PgPool,
    supervisor: &Supervisor,
    cancel: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let relay = std::sync::Arc::new(relay::DomainRelay::new(
        pool.clone(),
        config.amqp_urls.clone(),
        hookline_bus::Topology::new(&config.amqp.prefix, config.amqp.delivery_limit),
        DeliveryConfig::from_config(config)?.poll_interval,
        "hookline-domain-relay",
    ));
    let delivery = deliver::Delivery::from_config(pool, config)?;
    let relay_task = supervisor.spawn(relay::TASK, cancel, relay, |relay, cancel| async move {
        relay.run(cancel).await
    });
    let delivery_task = supervisor.spawn(deliver::TASK, cancel, delivery, |d, cancel| async move {
        d.run(cancel).await
    });
    Ok(vec![relay_task, delivery_task])
}
