//! Correctness, checked on the way: what the edge acknowledged against what PostgreSQL holds once everything
//! has drained. A benchmark that got faster by losing or double-applying events must fail, not win.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use serde::Serialize;
use sqlx::PgPool;

use crate::gen::Plan;
use crate::load::{Answer, RunResult};

/// What the edge answered for one event over the whole run.
#[derive(Debug, Clone, Default)]
struct EventAcks {
    /// The id every acknowledgement carried (`None` until one carried an id).
    id: Option<i64>,
    /// Two acknowledgements carried different ids.
    conflicting_ids: bool,
    /// Acknowledgements (200).
    acks: u32,
    /// Acknowledgements that said `"duplicate":false` (the one that stored it).
    stored: u32,
}

/// Every answer of the run, by event.
#[derive(Debug, Default)]
pub struct AckBook {
    events: HashMap<Arc<str>, EventAcks>,
    /// Requests answered 4xx: the benchmark signs correctly, so these are bugs.
    pub client_errors: u64,
    /// Requests answered 5xx (503 = overload or database budget exceeded; the provider would retry).
    pub server_errors: u64,
    /// Requests without an answer.
    pub transport_errors: u64,
    /// Acknowledged requests.
    pub acked_requests: u64,
}

impl AckBook {
    /// Records the answers of one run of `plan`.
    pub fn record(&mut self, plan: &Plan, run: &RunResult) {
        for s in &run.samples {
            let Some(d) = plan.deliveries.get(s.index as usize) else {
                continue;
            };
            let (id, stored) = match s.answer {
                Answer::Stored(id) => (Some(id), true),
                Answer::Duplicate(id) => (id, false),
                Answer::Status(c) if (400..500).contains(&c) => {
                    self.client_errors += 1;
                    continue;
                }
                Answer::Status(_) => {
                    self.server_errors += 1;
                    continue;
                }
                Answer::Transport => {
                    self.transport_errors += 1;
                    continue;
                }
            };
            self.acked_requests += 1;
            let e = self.events.entry(d.event_id.clone()).or_default();
            e.acks += 1;
            e.stored += u32::from(stored);
            match (e.id, id) {
                (Some(a), Some(b)) if a != b => e.conflicting_ids = true,
                (None, Some(b)) => e.id = Some(b),
                _ => {}
            }
        }
    }

    /// Distinct events acknowledged at least once.
    pub fn acked_events(&self) -> usize {
        self.events.len()
    }
}

/// One named check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// Whether it held.
    pub pass: bool,
    /// Numbers behind the verdict.
    pub detail: String,
}

fn check(name: &str, pass: bool, detail: String) -> Check {
    Check {
        name: name.to_string(),
        pass,
        detail,
    }
}

async fn scalar(pool: &PgPool, sql: &str) -> anyhow::Result<i64> {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .with_context(|| format!("correctness query failed: {sql}"))
}

/// Compares the book with the database (after the worker has drained everything).
pub async fn verify(pool: &PgPool, book: &AckBook) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    let rows: Vec<(String, i64, bool)> = sqlx::query_as(
        "SELECT e.provider_event_id, e.id,
                EXISTS (SELECT 1 FROM processed_events p WHERE p.consumer = 'payments' AND p.event_id = e.id)
         FROM webhook_events e",
    )
    .fetch_all(pool)
    .await
    .context("load stored events")?;
    let stored: HashMap<&str, (i64, bool)> = rows
        .iter()
        .map(|(k, id, m)| (k.as_str(), (*id, *m)))
        .collect();

    let (mut missing, mut wrong_id, mut unprocessed, mut conflicting, mut double_stored) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for (event_id, acks) in &book.events {
        match stored.get(&**event_id) {
            None => missing += 1,
            Some((id, marker)) => {
                if acks.id.is_some_and(|a| a != *id) {
                    wrong_id += 1;
                }
                if !marker {
                    unprocessed += 1;
                }
            }
        }
        conflicting += u64::from(acks.conflicting_ids);
        double_stored += u64::from(acks.stored > 1);
    }
    let acked = book.acked_events();
    checks.push(check(
        "every acknowledged event is stored, under the id it was acknowledged with",
        missing == 0 && wrong_id == 0 && conflicting == 0,
        format!("{acked} acknowledged events: {missing} missing, {wrong_id} under another id, {conflicting} acknowledged with two ids"),
    ));
    checks.push(check(
        "every acknowledged event is processed (marker present)",
        unprocessed == 0,
        format!("{unprocessed} of {acked} without a processed marker"),
    ));
    checks.push(check(
        "at most one \"duplicate\":false answer per event",
        double_stored == 0,
        format!("{double_stored} events answered as newly stored more than once"),
    ));

    let stored_rows = rows.len() as i64;
    let markers = scalar(
        pool,
        "SELECT count(*) FROM processed_events WHERE consumer = 'payments'",
    )
    .await?;
    let applied = scalar(
        pool,
        "SELECT count(*) FROM processed_events WHERE consumer = 'payments' AND outcome = 'applied'",
    )
    .await?;
    // Stored but never acknowledged can happen (an answer lost to a timeout after the commit); it must still
    // be processed, exactly once.
    checks.push(check(
        "processed markers = stored events = acknowledged events (each processed once)",
        markers == stored_rows
            && applied == markers
            && stored_rows >= acked as i64
            && (stored_rows == acked as i64 || book.transport_errors + book.server_errors > 0),
        format!(
            "{markers} markers ({applied} applied), {stored_rows} stored, {acked} acknowledged"
        ),
    ));

    let dead = scalar(pool, "SELECT count(*) FROM dead_letters").await?;
    checks.push(check(
        "no dead letters",
        dead == 0,
        format!("{dead} dead letters"),
    ));

    let txns = scalar(pool, "SELECT count(*) FROM ledger_transactions").await?;
    let entries = scalar(pool, "SELECT count(*) FROM ledger_entries").await?;
    let doubled = scalar(
        pool,
        "SELECT count(*) FROM (SELECT payment_id FROM ledger_transactions GROUP BY payment_id HAVING count(*) > 1) d",
    )
    .await?;
    let succeeded = scalar(
        pool,
        "SELECT count(*) FROM payments WHERE status = 'succeeded'",
    )
    .await?;
    let transitions = scalar(pool, "SELECT count(*) FROM payment_transitions").await?;
    // Each event is a distinct payment: one payment, one transition, one ledger transaction of three entries.
    checks.push(check(
        "no duplicate ledger posting (one transaction of 3 entries per payment)",
        doubled == 0
            && txns == markers
            && entries == 3 * txns
            && succeeded == markers
            && transitions == markers,
        format!("{txns} ledger transactions, {entries} entries, {succeeded} payments succeeded, {transitions} transitions, {doubled} payments posted twice"),
    ));

    let unbalanced = scalar(
        pool,
        "SELECT count(*) FROM (SELECT t.id FROM ledger_transactions t
                                JOIN ledger_entries e ON e.transaction_id = t.id
                                GROUP BY t.id HAVING sum(e.amount) <> 0) u",
    )
    .await?;
    let total = scalar(
        pool,
        "SELECT coalesce(sum(amount), 0)::bigint FROM ledger_entries",
    )
    .await?;
    checks.push(check(
        "ledger balanced",
        unbalanced == 0 && total == 0,
        format!("{unbalanced} unbalanced transactions, total {total}"),
    ));

    checks.push(check(
        "no request refused as invalid (4xx)",
        book.client_errors == 0,
        format!(
            "{} answered 4xx; {} answered 5xx and {} unanswered (overload, retried by a provider: not a failure)",
            book.client_errors, book.server_errors, book.transport_errors
        ),
    ));
    Ok(checks)
}
