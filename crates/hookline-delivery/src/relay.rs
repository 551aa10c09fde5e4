//! The domain relay: publishes the facts of `domain_events` to the `{prefix}.domain` topic exchange (routing
//! key = fact type, AMQP `message_id` = the fact's id) for the merchant's internal consumers.
//!
//! Same guarantees as the webhook relay ([`hookline_bus::relay`]), with one write per round instead of two per
//! fact: the relay that holds the cursor's lock reads the facts past it whose transactions have ended (in
//! `(xid, seq)` order: a transaction's facts in the order it recorded them), publishes them as one pipelined
//! batch with `mandatory` and publisher confirms, puts what RabbitMQ did not confirm (nacked, returned, timed
//! out) in `domain_outbox`, and moves the cursor past the batch — all in one transaction, so a crash or a failed
//! publish moves nothing and the batch is published again (at least once; a consumer deduplicates by
//! `message_id`). Facts in `domain_outbox` are claimed `FOR UPDATE SKIP LOCKED` and retried by any relay, as
//! before. Nothing here runs inside the effect's transaction — the fact was committed with the effect; this
//! only hands it on. Why a cursor is correct under concurrent commits: migration 20.

use std::time::Duration;

use anyhow::Context;
use hookline_core::domain_events::{self, Unpublished};
use lapin::BasicProperties;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use hookline_bus::publisher::{with_traceparent, Outgoing};
use hookline_bus::{Publisher, Topology};
use hookline_core::retry::Backoff;
use hookline_core::telemetry;

/// Metric names of the domain relay.
pub mod metric {
    /// Counter: facts confirmed by RabbitMQ and marked published.
    pub const PUBLISHED: &str = "hookline_domain_published_total";
    /// Counter: facts not confirmed (nack, returned, timeout, channel error), by `reason`.
    pub const NOT_CONFIRMED: &str = "hookline_domain_not_confirmed_total";
}

/// Name of the loop for the supervisor (metrics label `task`).
pub const TASK: &str = "domain_relay";

/// Most facts published in one batch (one transaction).
const BATCH: i64 = 256;
/// How long a batch waits for its confirms.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

/// The domain relay's settings and broker connection.
pub struct DomainRelay {
    pool: PgPool,
    amqp_urls: hookline_core::config::AmqpEndpoints,
    topology: Topology,
    poll_interval: Duration,
    connection_name: String,
}

impl DomainRelay {
    /// A relay reading `domain_events` through `pool` and publishing to `topology.domain_exchange`.
    pub fn new(
        pool: PgPool,
        amqp_urls: hookline_core::config::AmqpEndpoints,
        topology: Topology,
        poll_interval: Duration,
        connection_name: &str,
    ) -> DomainRelay {
        DomainRelay {
            pool,
            amqp_urls,
            topology,
            poll_interval,
            connection_name: connection_name.to_owned(),
        }
    }

    /// Publishes until `cancel`. A broker or database failure is logged, the connection dropped and reopened
    /// after a backoff (200 ms doubling to 10 s), as the webhook relay does: an outage or a cluster failover is
    /// waited out here rather than counted as a crash by the supervisor (which still restarts the loop after a
    /// panic). The facts stay unpublished in the meantime.
    pub async fn run(&self, cancel: CancellationToken) -> anyhow::Result<()> {
        let mut backoff = Backoff::reconnect();
        while !cancel.is_cancelled() {
            let opened = tokio::select! {
                p = Publisher::open(&self.amqp_urls, &self.topology, &self.connection_name) => p,
                _ = cancel.cancelled() => return Ok(()),
            };
            let result = match opened {
                Ok(publisher) => {
                    let r = self.publish_loop(&publisher, &cancel).await;
                    publisher.close().await;
                    r
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => backoff.reset(),
                Err(e) => {
                    let wait = backoff.failed();
                    tracing::warn!(
                        messaging.system = "rabbitmq",
                        error.cause_chain = %format!("{e:#}"),
                        retry_in_ms = wait.as_millis() as u64,
                        "domain relay: cannot publish; facts stay in the outbox"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = cancel.cancelled() => {}
                    }
                }
            }
        }
        Ok(())
    }

    async fn publish_loop(
        &self,
        publisher: &Publisher,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        // The previous round found facts: the outbox is probably not empty, so go straight to the claim.
        let mut busy = false;
        while !cancel.is_cancelled() {
            // A connection the broker closed while the outbox was empty is replaced before facts wait on it.
            anyhow::ensure!(publisher.is_open(), "the connection to RabbitMQ was closed");
            let claimed = self.publish_batch(publisher, !busy).await?;
            busy = claimed > 0;
            if claimed < BATCH as usize {
                tokio::select! {
                    _ = tokio::time::sleep(self.poll_interval) => {}
                    _ = cancel.cancelled() => {}
                }
            }
        }
        Ok(())
    }

    /// One round: the facts past the cursor (when this relay gets its lock) and what the outbox holds, published
    /// together; what was not confirmed goes to the outbox, the cursor past the batch. Returns how many facts were
    /// published.
    ///
    /// With `look_first`, an outbox found empty by one statement ends the round without a transaction: an idle
    /// relay then costs one statement per poll. Under load that look is pure overhead — the claim that follows
    /// finds the same rows — and on a queue table full of not-yet-vacuumed deletes it cost as much as the claim
    /// (4.9–5.8 ms per round in `hookline-bench`'s pipeline phase), so a relay that found facts last round skips it.
    async fn publish_batch(
        &self,
        publisher: &Publisher,
        look_first: bool,
    ) -> anyhow::Result<usize> {
        if look_first
            && !domain_events::any_unpublished(&self.pool)
                .await
                .context("look for unpublished domain events")?
        {
            return Ok(0);
        }
        // Index plans only: the outbox is tiny most of the time and holds the whole backlog after an outage.
        let mut tx = hookline_core::db::begin_without_seqscan(&self.pool)
            .await
            .context("begin")?;
        let cursor = domain_events::lock_cursor(&mut tx)
            .await
            .context("lock the domain relay's cursor")?;
        let mut facts = match cursor {
            Some(cursor) => domain_events::read_after(&mut tx, cursor, BATCH)
                .await
                .context("read domain events past the cursor")?,
            None => Vec::new(),
        };
        let moved_to = facts.last().and_then(|f| {
            Some(domain_events::Cursor {
                xid: f.xid?,
                seq: f.seq,
            })
        });
        if facts.len() < BATCH as usize {
            let retries = domain_events::claim_unpublished(&mut tx, BATCH - facts.len() as i64)
                .await
                .context("claim unpublished domain events")?;
            facts.extend(retries);
        }
        if facts.is_empty() {
            return Ok(0);
        }
        // An error here drops the transaction: the claim is undone and the facts stay in the outbox.
        let (confirmed, nacked) = publish(publisher, &self.topology, &facts).await?;
        let confirmed: std::collections::HashSet<i64> = confirmed.into_iter().collect();
        let unconfirmed: Vec<&Unpublished> = facts
            .iter()
            .filter(|f| !confirmed.contains(&f.seq))
            .collect();
        domain_events::put_back(&mut tx, &unconfirmed)
            .await
            .context("put unconfirmed domain events back in the outbox")?;
        if let Some(to) = moved_to {
            domain_events::move_cursor(&mut tx, to)
                .await
                .context("move the domain relay's cursor")?;
        }
        tx.commit().await.context("commit")?;
        metrics::counter!(metric::PUBLISHED).increment(confirmed.len() as u64);
        // A channel that nacks tends to keep nacking after a leader change: replace it (see the relay).
        anyhow::ensure!(
            nacked == 0,
            "RabbitMQ nacked {nacked} domain events; reconnecting"
        );
        Ok(facts.len())
    }
}

/// Publishes `facts` pipelined (see [`Publisher::publish_confirmed`]) and returns the `seq`s RabbitMQ acked
/// without returning them, and how many it nacked.
async fn publish(
    publisher: &Publisher,
    topology: &Topology,
    facts: &[Unpublished],
) -> anyhow::Result<(Vec<i64>, usize)> {
    // One span per fact published, child of the trace it was decided in; a merchant's consumer of
    // `{prefix}.domain` continues it from the `traceparent` header.
    let spans: Vec<tracing::Span> = facts
        .iter()
        .map(|f| {
            let span = tracing::info_span!(
                "facts.publish",
                otel.kind = "producer",
                messaging.system = "rabbitmq",
                domain_event = %f.id,
                event_type = %f.ty,
            );
            telemetry::set_parent(&span, f.traceparent.as_deref());
            span
        })
        .collect();
    let outgoing = facts
        .iter()
        .zip(&spans)
        .map(|(f, span)| Outgoing {
            key: f.seq,
            routing_key: f.ty.as_str(),
            body: &f.body,
            properties: with_traceparent(
                BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_content_type("application/json".into())
                    .with_message_id(f.id.as_str().into())
                    .with_type(f.ty.as_str().into()),
                span,
            ),
        })
        .collect();
    let confirmed = publisher
        .publish_confirmed(topology.domain_exchange.as_str(), outgoing, CONFIRM_TIMEOUT)
        .await?;
    for (seq, _, _) in &confirmed.returned {
        metrics::counter!(metric::NOT_CONFIRMED, "reason" => "returned").increment(1);
        tracing::error!(
            domain_event_seq = seq,
            "RabbitMQ returned the domain event as unroutable; it stays unpublished (check {}'s alternate exchange)",
            topology.domain_exchange
        );
    }
    for seq in &confirmed.nacked {
        metrics::counter!(metric::NOT_CONFIRMED, "reason" => "nack").increment(1);
        tracing::warn!(
            domain_event_seq = seq,
            "RabbitMQ nacked the domain event; it stays unpublished"
        );
    }
    Ok((confirmed.acked, confirmed.nacked.len()))
}
