//! A redelivered batch changes nothing: the worker's batch entry point (`hookline_consumer::process_batch`, what a
//! worker with `worker.batch_max` > 1 runs per batch of deliveries) given events it already processed — as after
//! a broker redelivery of unacknowledged messages, or a replay — finds their markers and treats every one as
//! already processed. The payments and the ledger stay exactly as they were (row counts, sums, checksum), and so
//! do the markers, also when the redelivered batch takes the set-based path and when it carries one new event
//! among the old ones.
//!
//! Checked against a broken marker check (the batch's marker insert made to return existing markers as new):
//! the payments handler's own idempotency keeps the ledger's rows as they were, but the events are applied again
//! (`Processed::Applied`) and their markers' outcomes rewritten ("refund … already recorded"); this test fails on
//! that picture.

use hookline_consumer::{process_batch, Processed};
use hookline_core::events::{insert_one, OwnedEvent, StoreOutcome};
use hookline_payments::PaymentsHandler;
use hookline_tests::{ledger_checksum, parse_config, stripe, test_config_toml, TestDb};
use sqlx::PgPool;

/// Stores `body` as the edge would (a fresh row) and returns its id.
async fn store(pool: &PgPool, body: Vec<u8>) -> i64 {
    let json: serde_json::Value = serde_json::from_slice(&body).expect("a JSON event");
    let outcome = insert_one(
        pool,
        &OwnedEvent {
            provider: "stripe".into(),
            provider_event_id: json["id"].as_str().expect("an event id").to_owned(),
            event_type: json["type"].as_str().map(str::to_owned),
            signed_at: None,
            headers: vec![],
            query: String::new(),
            body: body.into(),
            traceparent: None,
        },
    )
    .await
    .expect("store the event");
    match outcome {
        StoreOutcome::Inserted(id) => id,
        other => panic!("a fresh event was expected, got {other:?}"),
    }
}

/// Everything a re-application would change, in numbers.
#[derive(Debug, PartialEq, Eq)]
struct Picture {
    /// `(provider_payment_id, status, amount, amount_refunded)` of every payment, by id.
    payments: Vec<(String, String, Option<i64>, i64)>,
    /// Ledger transactions and entries.
    transactions: i64,
    entries: i64,
    /// Sum of the positive entries: what the ledger moved.
    moved: i64,
    /// `(account, balance)` of every account.
    balances: Vec<(String, i64)>,
    /// Processed markers and recorded domain facts.
    markers: i64,
    facts: i64,
    /// `(event_id, outcome, detail)` of every marker: a re-application records its outcome again.
    marker_rows: Vec<(i64, String, Option<String>)>,
    /// Recorded status transitions of the payments.
    transitions: i64,
    /// [`ledger_checksum`]: every ledger row, ids included.
    checksum: String,
}

async fn picture(pool: &PgPool) -> Picture {
    let scalar = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    Picture {
        payments: sqlx::query_as(
            "SELECT provider_payment_id, status, amount, amount_refunded FROM payments ORDER BY id",
        )
        .fetch_all(pool)
        .await
        .expect("payments"),
        transactions: scalar("SELECT count(*) FROM ledger_transactions").await,
        entries: scalar("SELECT count(*) FROM ledger_entries").await,
        moved: scalar("SELECT coalesce(sum(amount) FILTER (WHERE amount > 0), 0)::bigint FROM ledger_entries")
            .await,
        balances: sqlx::query_as(
            "SELECT account, sum(amount)::bigint FROM ledger_entries GROUP BY account ORDER BY account",
        )
        .fetch_all(pool)
        .await
        .expect("balances"),
        markers: scalar("SELECT count(*) FROM processed_events").await,
        facts: scalar("SELECT count(*) FROM domain_events").await,
        marker_rows: sqlx::query_as(
            "SELECT event_id, outcome, detail FROM processed_events ORDER BY event_id",
        )
        .fetch_all(pool)
        .await
        .expect("markers"),
        transitions: scalar("SELECT count(*) FROM payment_transitions").await,
        checksum: ledger_checksum(pool).await,
    }
}

/// Runs one batch; a failed batch fails the test with the event and the reason.
async fn batch(pool: &PgPool, handler: &PaymentsHandler, ids: &[i64]) -> Vec<Processed> {
    process_batch(pool, handler, ids)
        .await
        .unwrap_or_else(|f| panic!("batch {ids:?} failed at {:?}: {}", f.index, f.error))
}

fn applied(results: &[Processed]) -> usize {
    results
        .iter()
        .filter(|r| matches!(r, Processed::Applied(_)))
        .count()
}

#[tokio::test]
async fn a_redelivered_batch_of_processed_events_changes_nothing() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let config = parse_config(&test_config_toml(&db.url, "", ""));
    let handler = hookline_billing::payments_handler(config.providers.values());

    // A mixed batch (one payment's whole history: handled one by one) ...
    let mut mixed = Vec::new();
    for body in [
        stripe::payment_intent("evt_rd_a1", "succeeded", "pi_rd_a", 10_000),
        stripe::refund("evt_rd_a2", "re_rd_a1", "pi_rd_a", 3_000),
        stripe::refund("evt_rd_a3", "re_rd_a2", "pi_rd_a", 2_000),
        stripe::dispute(
            "evt_rd_a4",
            "created",
            "du_rd_a",
            "pi_rd_a",
            4_000,
            "needs_response",
        ),
        stripe::dispute("evt_rd_a5", "closed", "du_rd_a", "pi_rd_a", 4_000, "lost"),
    ] {
        mixed.push(store(&pool, body).await);
    }
    // ... and a batch of payment status facts only (the set-based path).
    let mut statuses = Vec::new();
    for body in [
        stripe::payment_intent("evt_rd_b", "succeeded", "pi_rd_b", 2_000),
        stripe::payment_intent("evt_rd_c", "payment_failed", "pi_rd_c", 1_500),
        stripe::payment_intent("evt_rd_d", "succeeded", "pi_rd_d", 700),
    ] {
        statuses.push(store(&pool, body).await);
    }

    let first = [
        batch(&pool, &handler, &mixed).await,
        batch(&pool, &handler, &statuses).await,
    ];
    assert_eq!(
        first.iter().map(|r| applied(r)).collect::<Vec<_>>(),
        [mixed.len(), statuses.len()],
        "the first delivery applies every event: {first:?}"
    );
    let before = picture(&pool).await;
    // The outcome of the first delivery, in exact numbers: three payments succeeded and one failed; pi_rd_a's
    // payment (3 entries), two refunds and the lost dispute (2 each), pi_rd_b's and pi_rd_d's payments (3 each).
    assert_eq!(
        before
            .payments
            .iter()
            .map(|(pi, status, amount, refunded)| (
                pi.as_str(),
                status.as_str(),
                *amount,
                *refunded
            ))
            .collect::<Vec<_>>(),
        [
            ("pi_rd_a", "succeeded", Some(10_000), 5_000),
            ("pi_rd_b", "succeeded", Some(2_000), 0),
            ("pi_rd_c", "failed", Some(1_500), 0),
            ("pi_rd_d", "succeeded", Some(700), 0),
        ]
    );
    assert_eq!(
        (before.transactions, before.entries),
        (6, 3 + 2 + 2 + 2 + 3 + 3)
    );
    assert_eq!(before.markers, 8);
    assert_eq!(
        (before.moved, before.facts, before.transitions),
        (21_700, 8, 4),
        "{before:?}"
    );
    assert_eq!(
        before.balances,
        [
            ("dispute_losses".to_string(), 4_000),
            ("provider_fees".to_string(), 624),
            ("provider_receivable".to_string(), 3_076),
            ("revenue".to_string(), -7_700),
        ]
    );

    // The broker redelivers both batches (or a replay re-sends them), then once more as one batch with each
    // event twice (a redelivery racing a replay): every event is already processed.
    let twice: Vec<i64> = mixed
        .iter()
        .chain(&statuses)
        .chain(&mixed)
        .copied()
        .collect();
    let mut redelivered = Vec::new();
    for ids in [&mixed, &statuses, &twice] {
        redelivered.push(batch(&pool, &handler, ids).await);
        // The outcome first: nothing in the payments or the ledger moved.
        assert_eq!(
            picture(&pool).await,
            before,
            "payments, ledger, markers and facts changed by redelivering {ids:?}: {redelivered:?}"
        );
    }
    for results in &redelivered {
        assert!(
            results.iter().all(|r| *r == Processed::Duplicate),
            "every redelivered event found its marker: {results:?}"
        );
    }

    // A redelivered batch that also carries one new event: the new one applies, exactly once, the rest not.
    let fresh = store(
        &pool,
        stripe::payment_intent("evt_rd_e", "succeeded", "pi_rd_e", 900),
    )
    .await;
    let mut with_fresh = statuses.clone();
    with_fresh.push(fresh);
    with_fresh.extend(&statuses);
    let results = batch(&pool, &handler, &with_fresh).await;
    let applied_ids: Vec<i64> = with_fresh
        .iter()
        .zip(&results)
        .filter(|(_, r)| matches!(r, Processed::Applied(_)))
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(applied_ids, [fresh], "{results:?}");
    let after = picture(&pool).await;
    assert_eq!(
        (after.transactions, after.entries, after.markers),
        (
            before.transactions + 1,
            before.entries + 3,
            before.markers + 1
        ),
        "exactly the new payment was posted"
    );
    assert_eq!(
        after.payments[..before.payments.len()],
        before.payments[..],
        "the old payments unchanged"
    );
    assert_eq!(
        after
            .payments
            .last()
            .map(|(pi, s, a, r)| (pi.as_str(), s.as_str(), *a, *r)),
        Some(("pi_rd_e", "succeeded", Some(900), 0))
    );
}
