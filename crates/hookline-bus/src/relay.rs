//! The transactional-outbox relay: publishes committed events to RabbitMQ and marks them published only on a
//! clean confirm.
//!
//! Two paths feed it:
//! - **fast path**: the edge hands over each event right after its commit ([`RelayHandle::notify`], never
//!   blocking the HTTP answer); the relay publishes whatever has accumulated as one pipelined batch;
//! - **sweeper**: every `sweep_interval`, `event_outbox` rows older than `sweep_min_age` are claimed.
//!
//! Both paths work the same way, one transaction per batch ([`hookline_core::event_outbox`]): claim the outbox
//! rows (`FOR UPDATE SKIP LOCKED`, so the two paths — or several edges' relays — never publish one event at the
//! same time, and the fast path skips what the sweeper already published), publish them as one pipelined batch
//! (events sharing a routing key packed up to `relay.events_per_message` per message, see [`crate::message`]),
//! put back what was not confirmed, commit. An event leaves the outbox only when RabbitMQ acked it *and* did not
//! return it (mandatory publish with no route gives an ack carrying the returned message). A crash, broker
//! outage or missing confirm leaves the row in the outbox and the sweeper retries it: delivery is at least once,
//! and the worker deduplicates.

use hookline_core::retry::Backoff;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::RelayConfig;
use anyhow::Context;
use hookline_core::config::AmqpEndpoints;
use hookline_core::event_outbox::{self, Claimed, ClaimedEvent};
use hookline_core::supervisor::Supervisor;
use sqlx::{PgPool, Postgres, Transaction};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::publisher::{Packing, Published, Publisher};
use crate::{EventMessage, Topology};

/// Metric names of the relay (fixed); the publisher counts `NOT_CONFIRMED` too.
pub use crate::metric;

/// Name of the relay's loop for the supervisor (metrics label `task`).
pub const TASK: &str = "relay";

/// Capacity of the fast-path queue between the edge's handlers and the relay.
const INBOX_CAPACITY: usize = 16 * 1024;

/// Cheap, cloneable sender the edge uses after each commit.
#[derive(Clone, Debug)]
pub struct RelayHandle {
    tx: mpsc::Sender<EventMessage>,
}

impl RelayHandle {
    /// Hands a committed event to the relay without waiting. When the relay is saturated the notification is
    /// dropped: the row is still unpublished in the database and the sweeper will publish it.
    pub fn notify(&self, msg: EventMessage) {
        if self.tx.try_send(msg).is_err() {
            metrics::counter!(metric::DROPPED).increment(1);
        }
    }
}

/// Receiving end of the fast path, consumed by [`Relay::run`].
pub struct RelayInbox(mpsc::Receiver<EventMessage>);

/// Creates the fast-path pair.
pub fn fast_path() -> (RelayHandle, RelayInbox) {
    let (tx, rx) = mpsc::channel(INBOX_CAPACITY);
    (RelayHandle { tx }, RelayInbox(rx))
}

/// The relay's state: database pool, broker connection (re-opened on failure) and settings.
pub struct Relay {
    pool: PgPool,
    amqp_urls: AmqpEndpoints,
    topology: Topology,
    config: RelayConfig,
    connection_name: String,
    publisher: Option<Publisher>,
    retry_at: Option<Instant>,
    backoff: Backoff,
}

impl Relay {
    /// A relay publishing to `topology` through any node of `amqp_urls`, reading the outbox through `pool`.
    pub fn new(
        pool: PgPool,
        amqp_urls: AmqpEndpoints,
        topology: Topology,
        config: RelayConfig,
        connection_name: &str,
    ) -> Relay {
        Relay {
            pool,
            amqp_urls,
            topology,
            config,
            connection_name: connection_name.to_string(),
            publisher: None,
            retry_at: None,
            backoff: Backoff::reconnect(),
        }
    }

    /// Runs until `cancel`, under `supervisor`: publishes fast-path batches as they arrive and sweeps
    /// periodically. A panic or error inside the loop is contained, counted
    /// (`hookline_supervisor_restarts_total{task="relay"}`) and followed by a restart with a fresh broker
    /// channel; the fast-path inbox survives restarts. A relay that keeps failing is declared dead, which fails
    /// the process's liveness and stops it (see [`hookline_core::supervisor`]).
    pub async fn run(
        self,
        inbox: Option<RelayInbox>,
        cancel: CancellationToken,
        supervisor: &Supervisor,
    ) {
        let state = Arc::new(tokio::sync::Mutex::new((self, inbox.map(|i| i.0))));
        supervisor
            .run(TASK, cancel.clone(), |attempt| {
                let state = state.clone();
                let cancel = cancel.clone();
                async move {
                    // tokio's mutex is not poisoned by a panic: a restarted attempt gets the same state back.
                    let mut guard = state.lock().await;
                    let (relay, inbox) = &mut *guard;
                    if attempt > 0 {
                        // Whatever the failed attempt left half-done on the channel is dropped with it; the rows
                        // it had not marked are still unpublished and will be swept.
                        relay.publisher = None;
                    }
                    relay.run_loop(inbox, &cancel).await;
                    Ok(())
                }
            })
            .await;
        if let Some(p) = state.lock().await.0.publisher.take() {
            p.close().await;
        }
        tracing::info!("relay stopped");
    }

    async fn run_loop(
        &mut self,
        inbox: &mut Option<mpsc::Receiver<EventMessage>>,
        cancel: &CancellationToken,
    ) {
        let mut tick = tokio::time::interval(self.config.sweep_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Vec::with_capacity(self.config.batch_size as usize);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                n = recv_many(inbox, &mut batch, self.config.batch_size as usize) => {
                    if n == 0 {
                        *inbox = None; // all senders gone: only the sweeper remains
                        continue;
                    }
                    linger(inbox, &mut batch, self.config.batch_size as usize, self.config.linger).await;
                    self.publish_fast(&batch).await;
                    batch.clear();
                }
                _ = tick.tick() => {
                    if let Err(e) = self.sweep().await {
                        tracing::warn!(error.cause_chain = %format!("{e:#}"), "relay sweep failed; will retry");
                    }
                }
            }
        }
    }

    /// Sweeps until no eligible outbox row is left (or publishing fails). Returns how many were published.
    pub async fn sweep(&mut self) -> anyhow::Result<u64> {
        self.report_backlog().await;
        let mut total = 0;
        loop {
            if !self.ensure_publisher().await {
                return Ok(total);
            }
            let mut tx = begin(&self.pool).await?;
            let rows = event_outbox::claim_due(
                &mut tx,
                self.config.sweep_min_age.as_secs_f64(),
                i64::from(self.config.batch_size),
            )
            .await
            .context("claim due outbox rows")?;
            let n = rows.len();
            if n == 0 {
                // Orphans (rows whose event was deleted by hand) may have been claimed: dropping them is right.
                tx.commit().await.context("end sweep transaction")?;
                return Ok(total);
            }
            let claimed: Vec<Claimed> = rows.iter().map(ClaimedEvent::claimed).collect();
            let msgs: Vec<EventMessage> = rows
                .into_iter()
                .map(|r| EventMessage {
                    id: r.event_id,
                    provider: r.provider,
                    provider_event_id: r.provider_event_id,
                    event_type: r.event_type,
                    // Stored with the event: a sweep after a crash continues the trace it was received in.
                    traceparent: r.traceparent,
                })
                .collect();
            let Some(acked) = self.publish_claimed(tx, &claimed, &msgs).await? else {
                return Ok(total);
            };
            metrics::counter!(metric::PUBLISHED, "path" => "sweep").increment(acked as u64);
            total += acked as u64;
            if acked < n || n < self.config.batch_size as usize {
                // Some were not confirmed (returned or nacked): stop this round rather than spin on them.
                return Ok(total);
            }
        }
    }

    /// Publishes what the edge handed over, after claiming it in the outbox: an event the sweeper (or another
    /// relay) already published, or is publishing now, is not claimed and not published again.
    async fn publish_fast(&mut self, batch: &[EventMessage]) {
        if !self.ensure_publisher().await {
            return; // broker unavailable: the sweeper publishes these once it is back
        }
        let round = async {
            let mut tx = begin(&self.pool).await?;
            let ids: Vec<i64> = batch.iter().map(|m| m.id).collect();
            let claimed = event_outbox::claim(&mut tx, &ids)
                .await
                .context("claim outbox rows")?;
            let mut wanted: HashSet<i64> = claimed.iter().map(|c| c.event_id).collect();
            let msgs: Vec<EventMessage> = batch
                .iter()
                .filter(|m| wanted.remove(&m.id))
                .cloned()
                .collect();
            self.publish_claimed(tx, &claimed, &msgs).await
        };
        match round.await {
            Ok(Some(acked)) => {
                metrics::counter!(metric::PUBLISHED, "path" => "fast").increment(acked as u64)
            }
            Ok(None) => {}
            // Nothing was published or the claim was undone: the rows are still in the outbox, and the sweeper
            // publishes them.
            Err(e) => {
                tracing::warn!(error.cause_chain = %format!("{e:#}"), "relay batch not recorded; the sweeper retries it")
            }
        }
    }

    /// Publishes `msgs` (the events of the `claimed` outbox rows of `tx`), puts back what RabbitMQ did not
    /// confirm and commits; returns how many were confirmed. `None` when no publisher is open. A failed publish
    /// rolls the transaction back, replaces the publisher and is returned as the error; an error after a publish
    /// (put back, commit) leaves the rows in the outbox: they are published again, which the worker deduplicates.
    async fn publish_claimed(
        &mut self,
        mut tx: Transaction<'static, Postgres>,
        claimed: &[Claimed],
        msgs: &[EventMessage],
    ) -> anyhow::Result<Option<usize>> {
        if msgs.is_empty() {
            tx.commit().await.context("end relay transaction")?;
            return Ok(Some(0));
        }
        let Some(publisher) = self.publisher.as_ref() else {
            tx.rollback().await.ok();
            return Ok(None);
        };
        let packing = Packing {
            per_message: self.config.events_per_message,
            prior_deliveries: 0,
        };
        let Published { acked, nacked } = match publisher
            .publish_packed(&self.topology, msgs, packing, self.config.confirm_timeout)
            .await
        {
            Ok(published) => published,
            Err(e) => {
                tx.rollback().await.ok();
                self.publisher_failed(&e);
                return Err(e);
            }
        };
        if nacked > 0 {
            self.publisher_nacked(nacked);
        }
        let confirmed: HashSet<i64> = acked.iter().copied().collect();
        let unconfirmed: Vec<Claimed> = claimed
            .iter()
            .filter(|c| !confirmed.contains(&c.event_id))
            .copied()
            .collect();
        event_outbox::put_back(&mut tx, &unconfirmed)
            .await
            .context("put unconfirmed events back in the outbox")?;
        tx.commit().await.context("commit relay transaction")?;
        Ok(Some(acked.len()))
    }

    /// True when a publisher is open, (re)opening it unless a recent attempt failed and the backoff has not
    /// elapsed.
    async fn ensure_publisher(&mut self) -> bool {
        if self.publisher.as_ref().is_some_and(|p| !p.is_open()) {
            // The broker closed it (or a heartbeat was missed) since the last batch: replace it now rather than
            // find out by a publish that fails or, on a closing connection, never returns (see `publisher`).
            tracing::warn!(
                messaging.system = "rabbitmq",
                "relay connection lost; reconnecting"
            );
            self.discard_publisher();
        }
        if self.publisher.is_none() {
            if self.retry_at.is_some_and(|t| Instant::now() < t) {
                return false;
            }
            match Publisher::open(&self.amqp_urls, &self.topology, &self.connection_name).await {
                Ok(p) => {
                    tracing::info!(messaging.system = "rabbitmq", "relay connected");
                    self.publisher = Some(p);
                    self.retry_at = None;
                    self.backoff.reset();
                }
                Err(e) => {
                    tracing::warn!(
                        messaging.system = "rabbitmq",
                        error.message = %e,
                        retry_in_ms = self.backoff.current().as_millis() as u64,
                        "relay cannot reach RabbitMQ; events stay in the outbox"
                    );
                    self.retry_at = Some(Instant::now() + self.backoff.failed());
                    return false;
                }
            }
        }
        true
    }

    fn publisher_failed(&mut self, e: &anyhow::Error) {
        tracing::warn!(messaging.system = "rabbitmq", error.cause_chain = %format!("{e:#}"), "publish failed; reconnecting");
        metrics::counter!(metric::NOT_CONFIRMED, "reason" => "channel_error").increment(1);
        // Close the channel: its pending confirms are lost, the rows stay unpublished.
        self.discard_publisher();
    }

    /// Closes the current publisher in the background (bounded; see [`crate::abandon`]).
    fn discard_publisher(&mut self) {
        if let Some(p) = self.publisher.take() {
            tokio::spawn(p.close());
        }
    }

    /// RabbitMQ refused some of a batch. With quorum queues this is what a channel whose idea of the queue's
    /// leader went stale does with every later publish (seen when the leader's node was killed): replace the
    /// channel and connection (through [`crate::connect`], i.e. the next node), after the usual backoff. The
    /// nacked rows stay unpublished; the sweeper publishes them.
    fn publisher_nacked(&mut self, nacked: usize) {
        tracing::warn!(
            messaging.system = "rabbitmq",
            nacked,
            retry_in_ms = self.backoff.current().as_millis() as u64,
            "publishes nacked; reopening the publisher"
        );
        self.discard_publisher();
        self.retry_at = Some(Instant::now() + self.backoff.failed());
    }

    async fn report_backlog(&self) {
        if let Ok(backlog) = event_outbox::backlog(&self.pool).await {
            backlog.report();
        }
    }
}

async fn recv_many(
    inbox: &mut Option<mpsc::Receiver<EventMessage>>,
    buf: &mut Vec<EventMessage>,
    limit: usize,
) -> usize {
    match inbox {
        Some(rx) => rx.recv_many(buf, limit).await,
        None => std::future::pending().await,
    }
}

/// Lets a fast-path batch that is not full gather what the edge commits within `linger` (`relay.linger_ms`).
///
/// Why: a publish round costs a claim statement, a commit and a confirm wait whatever its size, and the relay
/// shares the cores with the edge's request handling. Without a linger, a relay that keeps up runs a round every
/// one or two events at moderate rates (measured: PostgreSQL and RabbitMQ CPU per event at a quarter of the
/// edge's max 2–3× what they cost at max); with one, its rounds grow, for a few milliseconds of relay lag.
async fn linger(
    inbox: &mut Option<mpsc::Receiver<EventMessage>>,
    batch: &mut Vec<EventMessage>,
    limit: usize,
    linger: Duration,
) {
    let Some(rx) = inbox.as_mut() else {
        return;
    };
    let until = tokio::time::Instant::now() + linger;
    while batch.len() < limit && !linger.is_zero() {
        let room = limit - batch.len();
        match tokio::time::timeout_at(until, rx.recv_many(batch, room)).await {
            Ok(0) | Err(_) => return, // senders gone (the next receive notices) or the linger is over
            Ok(_) => {}
        }
    }
}

/// Begins a relay transaction. Index plans only: the outbox is tiny most of the time and holds the whole
/// backlog after a broker outage, and a cached plan made while it was tiny must not scan it whole then (see
/// [`hookline_core::db::begin_without_seqscan`]).
async fn begin(pool: &PgPool) -> anyhow::Result<Transaction<'static, Postgres>> {
    hookline_core::db::begin_without_seqscan(pool)
        .await
        .context("begin relay transaction")
}
