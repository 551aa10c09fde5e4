//! The total-queue checker and what it reads: the cluster's stored events, processed markers, dead letters and
//! queue counts, and [`Cluster::check`], which drains and then asserts goals G1/G2 of
//! `shared/docs/reliability-scenarios.md` against the model computed from the load reports — `lost = acked −
//! processed = ∅`, `unexpected = processed − sent = ∅`, one row / marker / payment posting / transition per event,
//! every 2xx backed by a stored row, a balanced ledger equal to the model, and dead letters exactly the expected
//! poison. Also the prefetch check (W9) and the stuck-transaction probe.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::{
    model_fee, rabbitmqctl, rabbitmqctl_any, report_line, send_all, Attempt, Cluster, Load,
    LoadReport, SentEvent, CONSUMER, DRAIN_TIMEOUT,
};
use crate::{assert_ledger_balanced, ledger_rows, queue_depths};

/// Live message counts of the cluster's queues (passive declare).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Payments queue: ready messages.
    pub ready: u32,
    /// Payments queue: consumers.
    pub consumers: u32,
    /// Dead-letter queue: messages.
    pub dlq: u32,
}

/// Message counts of the cluster's queues (from `rabbitmqctl list_queues`, lagging).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Payments queue: ready messages.
    pub ready: u64,
    /// Payments queue: delivered, not yet acknowledged.
    pub unacked: u64,
    /// Payments queue: consumers.
    pub consumers: u64,
    /// Dead-letter queue: all messages.
    pub dlq: u64,
}

/// What [`Cluster::check`] found (after asserting it).
#[derive(Debug, Clone, Default)]
pub struct Checked {
    /// Events with a processed marker.
    pub processed: usize,
    /// Events dead-lettered.
    pub dead_lettered: usize,
    /// Stored raw events.
    pub stored: usize,
}

impl Cluster {
    /// Provider event ids stored in `webhook_events` (provider `stripe`).
    pub async fn stored_ids(&self) -> HashSet<String> {
        sqlx::query_scalar("SELECT provider_event_id FROM webhook_events WHERE provider = 'stripe'")
            .fetch_all(self.pool())
            .await
            .expect("read stored events")
            .into_iter()
            .collect()
    }

    /// Provider event ids with a payments processed marker.
    pub async fn processed_ids(&self) -> HashSet<String> {
        sqlx::query_scalar(
            "SELECT e.provider_event_id FROM webhook_events e
             JOIN processed_events p ON p.event_id = e.id AND p.consumer = $1",
        )
        .bind(CONSUMER)
        .fetch_all(self.pool())
        .await
        .expect("read processed events")
        .into_iter()
        .collect()
    }

    /// Provider event ids with an (unresolved) payments dead letter.
    pub async fn dead_letter_ids(&self) -> HashSet<String> {
        sqlx::query_scalar(
            "SELECT e.provider_event_id FROM dead_letters d JOIN webhook_events e ON e.id = d.event_id
             WHERE d.consumer = $1 AND d.resolved_at IS NULL",
        )
        .bind(CONSUMER)
        .fetch_all(self.pool())
        .await
        .expect("read dead letters")
        .into_iter()
        .collect()
    }

    /// Provider event ids of stored events still in the outbox after `min_age`.
    pub async fn unpublished_ids(&self, min_age: Duration) -> HashSet<String> {
        sqlx::query_scalar(
            "SELECT e.provider_event_id FROM event_outbox o JOIN webhook_events e ON e.id = o.event_id
             WHERE o.enqueued_at <= now() - make_interval(secs => $1)",
        )
        .bind(min_age.as_secs_f64())
        .fetch_all(self.pool())
        .await
        .expect("read unpublished events")
        .into_iter()
        .collect()
    }

    /// Number of payments processed markers.
    pub async fn marker_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM processed_events WHERE consumer = $1")
            .bind(CONSUMER)
            .fetch_one(self.pool())
            .await
            .expect("count markers")
    }

    /// Stored events with neither a processed marker nor a dead letter.
    /// The events referred to by the messages ready on the payments queue (see [`crate::queued_event_ids`]).
    pub async fn queued_event_ids(&self) -> Vec<i64> {
        crate::queued_event_ids(&self.config.amqp_urls, &self.topology().payments_queue).await
    }

    pub async fn unprocessed_count(&self) -> i64 {
        crate::pending_events(self.pool()).await
    }

    /// Waits until the payments queue has exactly `consumers` consumers (live, over AMQP) and returns the live
    /// counts. After a kill, a consumer count of 0 means the broker noticed the dead connection and returned its
    /// unacknowledged deliveries to the queue (one queue command does both).
    pub async fn wait_consumers(&self, consumers: u32, timeout: Duration) -> LiveCounts {
        let deadline = Instant::now() + timeout;
        loop {
            let counts = self.live_counts().await;
            if counts.consumers == consumers {
                return counts;
            }
            assert!(
                Instant::now() < deadline,
                "the payments queue never had {consumers} consumers: {counts:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the workers stopped making progress (no new processed marker for `quiet`, at least
    /// `min_markers` already) while at least `backlog` stored events wait: the fail point holds every runtime
    /// thread.
    pub async fn wait_workers_frozen(
        &self,
        min_markers: i64,
        backlog: i64,
        quiet: Duration,
        timeout: Duration,
    ) {
        let deadline = Instant::now() + timeout;
        let mut seen = (-1, Instant::now());
        loop {
            let markers = self.marker_count().await;
            if markers != seen.0 {
                seen = (markers, Instant::now());
            } else if seen.1.elapsed() >= quiet
                && markers >= min_markers
                && self.unprocessed_count().await >= backlog
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the workers never froze ({markers} markers)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Live counts (passive `queue.declare` over AMQP, see [`queue_depths`]): ready messages and consumers of the
    /// payments queue, messages in the DLQ; 0 for a queue not declared (yet).
    pub async fn live_counts(&self) -> LiveCounts {
        let t = self.topology();
        let queues = [t.payments_queue.as_str(), t.dead_letter_queue.as_str()];
        let [payments, dlq] = queue_depths(&self.config.amqp_urls, queues).await;
        LiveCounts {
            ready: payments.map_or(0, |q| q.messages),
            consumers: payments.map_or(0, |q| q.consumers),
            dlq: dlq.map_or(0, |q| q.messages),
        }
    }

    /// Counts of the payments queue and its DLQ from `rabbitmqctl list_queues` (absent queues count 0). For
    /// quorum queues these statistics are refreshed on the queue's tick (5 s on RabbitMQ 3.10): they lag, so
    /// wait for them to reflect a known state before trusting them. The only source of the unacked count.
    pub async fn queue_stats(&self) -> QueueCounts {
        let t = self.topology();
        let args = [
            "-q",
            "list_queues",
            "name",
            "messages_ready",
            "messages_unacknowledged",
            "messages",
            "consumers",
            "--no-table-headers",
        ];
        let out = if self.rabbitmq_nodes.is_empty() {
            rabbitmqctl(&args).await
        } else {
            rabbitmqctl_any(&self.rabbitmq_nodes, &args).await
        };
        let mut counts = QueueCounts::default();
        for line in out.lines() {
            let cols: Vec<&str> = line.split('\t').collect();
            if cols.len() < 5 {
                continue;
            }
            let n = |i: usize| cols[i].trim().parse::<u64>().unwrap_or(0);
            if cols[0] == t.payments_queue {
                counts.ready = n(1);
                counts.unacked = n(2);
                counts.consumers = n(4);
            } else if cols[0] == t.dead_letter_queue {
                counts.dlq = n(3);
            }
        }
        counts
    }

    /// The total-queue checker. Waits for a full drain (every acknowledged event processed, every expected poison
    /// dead-lettered, nothing left unpublished, queued or unacknowledged), then asserts G1/G2 against the model
    /// and prints a one-line summary. Every event of `reports` must have been acknowledged in the end.
    pub async fn check(&mut self, reports: &[&LoadReport]) -> Checked {
        self.assert_running();
        let mut sent: HashMap<String, &SentEvent> = HashMap::new();
        for r in reports {
            for e in &r.events {
                assert!(
                    sent.insert(e.provider_event_id.clone(), e).is_none(),
                    "two load runs used the event id {}",
                    e.provider_event_id
                );
            }
        }
        let acked: HashSet<String> = reports.iter().flat_map(|r| r.acked_ids()).collect();
        let poison: HashSet<String> = sent
            .values()
            .filter(|e| e.poison)
            .map(|e| e.provider_event_id.clone())
            .collect();
        let unacked: Vec<&String> = sent.keys().filter(|id| !acked.contains(*id)).collect();
        assert!(
            unacked.is_empty(),
            "{}: {} events never got a 2xx despite the retries (e.g. {:?}); logs in {}",
            self.name,
            unacked.len(),
            unacked.iter().take(5).collect::<Vec<_>>(),
            self.log_dir.display()
        );

        // G1 at the request level, checked first (a row never disappears): every 2xx answer is backed by a
        // stored row.
        let stored_now = self.stored_ids().await;
        let ok_without_row: Vec<&Attempt> = reports
            .iter()
            .flat_map(|r| r.attempts.iter())
            .filter(|a| a.is_2xx() && !stored_now.contains(&a.provider_event_id))
            .collect();
        assert!(
            ok_without_row.is_empty(),
            "{}: {} 2xx answers for events that are not stored, e.g. {:?}",
            self.name,
            ok_without_row.len(),
            ok_without_row.iter().take(3).collect::<Vec<_>>()
        );

        // Drain: every acknowledged event processed (or, for poison, dead-lettered).
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            let processed = self.processed_ids().await;
            let dead = self.dead_letter_ids().await;
            let missing: Vec<&String> = acked
                .iter()
                .filter(|id| {
                    if poison.contains(*id) {
                        !dead.contains(*id) && !processed.contains(*id)
                    } else {
                        !processed.contains(*id)
                    }
                })
                .collect();
            if missing.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                self.assert_running();
                panic!(
                    "{}: LOST? drain timed out after {DRAIN_TIMEOUT:?}: {} acknowledged events not \
                     processed (e.g. {:?}); unpublished: {}; logs in {}",
                    self.name,
                    missing.len(),
                    missing.iter().take(5).collect::<Vec<_>>(),
                    self.unpublished_ids(Duration::ZERO).await.len(),
                    self.log_dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Quiesce: nothing left to publish or queued (live counts), nothing unacknowledged (statistics, which may
        // lag), so no late duplicate can still change the ledger.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = (LiveCounts::default(), QueueCounts::default());
        loop {
            let unpublished = self.unpublished_ids(Duration::ZERO).await.len();
            if unpublished == 0 {
                last.0 = self.live_counts().await;
                if last.0.ready == 0 && last.0.dlq as usize >= poison.len() {
                    last.1 = self.queue_stats().await;
                    if last.1.unacked == 0 {
                        break;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "{}: the pipeline did not quiesce: {unpublished} unpublished, queues {last:?}; logs in {}",
                self.name,
                self.log_dir.display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.assert_running();

        let pool = self.pool().clone();
        // One row per event, and nothing stored that was never sent.
        let stored: Vec<(String, i64)> = sqlx::query_as(
            "SELECT provider || ':' || provider_event_id, count(*) FROM webhook_events GROUP BY 1",
        )
        .fetch_all(&pool)
        .await
        .expect("count stored events");
        let more_than_once: Vec<&(String, i64)> = stored.iter().filter(|(_, n)| *n > 1).collect();
        assert!(
            more_than_once.is_empty(),
            "events stored twice: {more_than_once:?}"
        );
        let stored_ids: HashSet<String> = stored
            .iter()
            .filter_map(|(k, _)| k.strip_prefix("stripe:").map(str::to_string))
            .collect();
        assert_eq!(
            stored_ids.len(),
            stored.len(),
            "events of other providers were stored"
        );
        let stored_unsent: Vec<&String> = stored_ids
            .iter()
            .filter(|id| !sent.contains_key(*id))
            .collect();
        assert!(
            stored_unsent.is_empty(),
            "stored but never sent: {stored_unsent:?}"
        );

        // Markers: at most one per event; lost and unexpected empty.
        let markers: Vec<(String, i64, String)> = sqlx::query_as(
            "SELECT e.provider_event_id, count(*), min(p.outcome) FROM processed_events p
             JOIN webhook_events e ON e.id = p.event_id WHERE p.consumer = $1 GROUP BY 1",
        )
        .bind(CONSUMER)
        .fetch_all(&pool)
        .await
        .expect("read markers");
        let orphan_markers: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM processed_events p
             WHERE NOT EXISTS (SELECT 1 FROM webhook_events e WHERE e.id = p.event_id)",
        )
        .fetch_one(&pool)
        .await
        .expect("count orphan markers");
        assert_eq!(
            orphan_markers, 0,
            "processed markers without a stored event"
        );
        let twice: Vec<&(String, i64, String)> = markers.iter().filter(|m| m.1 > 1).collect();
        assert!(
            twice.is_empty(),
            "events processed more than once: {twice:?}"
        );
        let not_applied: Vec<&(String, i64, String)> =
            markers.iter().filter(|m| m.2 != "applied").collect();
        assert!(
            not_applied.is_empty(),
            "processed with an unexpected outcome: {not_applied:?}"
        );
        let processed: HashSet<String> = markers.into_iter().map(|m| m.0).collect();
        let mut lost: Vec<&String> = acked
            .iter()
            .filter(|id| !processed.contains(*id) && !poison.contains(*id))
            .collect();
        lost.sort();
        assert!(
            lost.is_empty(),
            "LOST (acknowledged, never processed): {lost:?}"
        );
        let mut unexpected: Vec<&String> = processed
            .iter()
            .filter(|id| !sent.contains_key(*id))
            .collect();
        unexpected.sort();
        assert!(
            unexpected.is_empty(),
            "UNEXPECTED (processed, never sent): {unexpected:?}"
        );

        // Poison: dead-lettered exactly, never processed; the DLQ holds exactly those.
        let dead = self.dead_letter_ids().await;
        assert_eq!(dead, poison, "dead letters differ from the expected poison");
        let processed_poison: Vec<&String> = poison.intersection(&processed).collect();
        assert!(
            processed_poison.is_empty(),
            "poison events were processed: {processed_poison:?}"
        );
        let dlq = self.live_counts().await.dlq;
        assert_eq!(
            dlq as usize,
            poison.len(),
            "DLQ messages differ from the expected poison"
        );

        // Ledger: balanced, one payment posting per payment, exactly the model of the processed events.
        assert_ledger_balanced(&pool).await;
        let double: Vec<(String, i64)> = sqlx::query_as(
            "SELECT reference, count(*) FROM ledger_transactions WHERE kind = 'payment'
             GROUP BY 1 HAVING count(*) > 1",
        )
        .fetch_all(&pool)
        .await
        .expect("count postings");
        assert!(double.is_empty(), "payments posted twice: {double:?}");
        let mut model: Vec<(String, String, String, i64)> = Vec::new();
        let (mut revenue, mut fees, mut receivable) = (0i64, 0i64, 0i64);
        for id in &processed {
            let e = sent[id];
            let fee = model_fee(e.amount);
            revenue -= e.amount;
            fees += fee;
            receivable += e.amount - fee;
            for (account, amount) in [
                ("provider_fees", fee),
                ("provider_receivable", e.amount - fee),
                ("revenue", -e.amount),
            ] {
                model.push((
                    "payment".into(),
                    e.payment_id.clone(),
                    account.into(),
                    amount,
                ));
            }
        }
        model.sort();
        let mut actual = ledger_rows(&pool).await;
        actual.sort();
        let totals: BTreeMap<String, i64> = actual.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.2.clone()).or_default() += r.3;
            m
        });
        assert_eq!(
            totals.get("revenue").copied().unwrap_or(0),
            revenue,
            "revenue total"
        );
        assert_eq!(
            totals.get("provider_fees").copied().unwrap_or(0),
            fees,
            "fees total"
        );
        assert_eq!(
            totals.get("provider_receivable").copied().unwrap_or(0),
            receivable,
            "receivable total"
        );
        if actual != model {
            let a: HashSet<&(String, String, String, i64)> = actual.iter().collect();
            let m: HashSet<&(String, String, String, i64)> = model.iter().collect();
            panic!(
                "ledger differs from the model: extra {:?}, missing {:?}",
                a.difference(&m).take(6).collect::<Vec<_>>(),
                m.difference(&a).take(6).collect::<Vec<_>>()
            );
        }
        // One state transition per payment (created → succeeded), one payment per processed event.
        let transitions: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT p.provider_payment_id, count(t.id),
                    count(t.id) FILTER (WHERE t.to_status = 'succeeded')
             FROM payments p LEFT JOIN payment_transitions t ON t.payment_id = p.id GROUP BY 1",
        )
        .fetch_all(&pool)
        .await
        .expect("read transitions");
        let odd: Vec<&(String, i64, i64)> = transitions
            .iter()
            .filter(|(_, n, s)| *n != 1 || *s != 1)
            .collect();
        assert!(
            odd.is_empty(),
            "payments with other than one transition: {odd:?}"
        );
        let expected_payments: HashSet<String> = processed
            .iter()
            .map(|id| sent[id].payment_id.clone())
            .collect();
        let payments: HashSet<String> = transitions.into_iter().map(|t| t.0).collect();
        assert_eq!(
            payments, expected_payments,
            "payments differ from the processed events"
        );

        let checked = Checked {
            processed: processed.len(),
            dead_lettered: dead.len(),
            stored: stored_ids.len(),
        };
        let requests: usize = reports.iter().map(|r| r.attempts.len()).sum();
        let retries: usize = reports.iter().map(|r| r.retries()).sum();
        let duplicates: usize = reports.iter().map(|r| r.duplicate_deliveries()).sum();
        let non_2xx: usize = reports.iter().map(|r| r.non_2xx()).sum();
        let transport: usize = reports.iter().map(|r| r.transport_errors()).sum();
        let load_secs: f64 = reports.iter().map(|r| r.elapsed.as_secs_f64()).sum();
        report_line(&format!(
            "[faults] {}: sent={} acked={} requests={requests} retries={retries} duplicates={duplicates} \
             non_2xx={non_2xx} transport_errors={transport} stored={} processed={} dead_lettered={} \
             load={load_secs:.1}s elapsed={:.1}s",
            self.name,
            sent.len(),
            acked.len(),
            checked.stored,
            checked.processed,
            checked.dead_lettered,
            self.started.elapsed().as_secs_f64()
        ));
        checked
    }
}

/// Sessions of this database's workers inside a transaction that has not moved for `min_idle`.
pub async fn stuck_worker_transactions(c: &Cluster, min_idle: Duration) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = $1 AND application_name = 'hookline-worker' AND state = 'idle in transaction'
           AND state_change <= now() - make_interval(secs => $2)",
    )
    .bind(c.db_name())
    .bind(min_idle.as_secs_f64())
    .fetch_one(c.pool())
    .await
    .expect("read pg_stat_activity")
}

/// W9: with a backlog larger than the prefetch, the (reconnected) worker holds at most `prefetch` unacked
/// deliveries. Processing is held by an exclusive lock on `processed_events` (the first table the worker's
/// transaction writes), new events are sent — enough for more messages than the prefetch even when the relay packs
/// `relay.events_per_message` into one — and once every one of them is published, `messages_unacknowledged` must
/// not exceed the prefetch. Returns the load's report for the checker.
pub async fn assert_prefetch_honoured(c: &Cluster, tag: &str) -> LoadReport {
    let worker = hookline_worker::WorkerConfig::from_config(&c.config).expect("valid [worker]");
    let relay = hookline_bus::RelayConfig::from_config(&c.config).expect("valid [relay]");
    let prefetch = u64::from(worker.prefetch);
    let per_message = relay.events_per_message as u64;
    // At least prefetch + 2 messages, however the relay packs them.
    let messages = prefetch + 2;
    let events = (messages * per_message) as usize;
    let mut lock = c.pool().begin().await.expect("begin");
    sqlx::query("LOCK TABLE processed_events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock processed_events");
    let report = send_all(&Load::new(tag, events).unique_only(), &c.base).await;
    assert!(
        report.unacked().is_empty(),
        "backlog events not acknowledged"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let counts = loop {
        let counts = c.queue_stats().await;
        // Everything published, and the worker took what its prefetch allows.
        if counts.ready + counts.unacked >= messages
            && counts.unacked >= prefetch
            && c.unpublished_ids(Duration::ZERO).await.is_empty()
        {
            break counts;
        }
        assert!(
            counts.unacked <= prefetch,
            "the worker holds {} unacked deliveries, more than its prefetch {prefetch}: {counts:?}",
            counts.unacked
        );
        assert!(
            Instant::now() < deadline,
            "the backlog never built up: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        counts.unacked <= prefetch,
        "the worker holds {} unacked deliveries, more than its prefetch {prefetch}: {counts:?}",
        counts.unacked
    );
    assert!(
        counts.ready >= messages - prefetch,
        "expected a backlog of ready messages: {counts:?}"
    );
    lock.rollback().await.expect("release the lock");
    report_line(&format!(
        "[faults] {}: prefetch {prefetch} honoured with a backlog of {events}: {counts:?}",
        c.name
    ));
    report
}
