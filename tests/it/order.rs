//! Order independence (property test): any permutation of a payment's event history, with duplicates, applied
//! through the worker's processing function, ends in the same status and the same ledger as the history in order.
//!
//! The events go through the real path after the broker: stored in `webhook_events` as the edge stores them,
//! then `process_event` (marker first, effects, commit) exactly as a worker runs it per delivery.
//!
//! The ledger's own rules, which those properties rest on, are checked at the end: the database refuses an
//! unbalanced statement and any rewrite of history.

use hookline_consumer::{process_event, Processed};
use hookline_core::events::{insert_one, OwnedEvent, StoreOutcome};
use hookline_payments::PaymentsHandler;
use hookline_tests::{parse_config, stripe, test_config_toml, TestDb};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use sqlx::PgPool;

/// A payment's full history: a failed attempt, success (reported twice, by two event types), two partial
/// refunds (one reported by two events), and a dispute opened then lost.
fn history(tag: &str) -> Vec<(String, Vec<u8>)> {
    let pi = format!("pi_{tag}");
    let ev = |n: &str| format!("evt_{tag}_{n}");
    let re1 = format!("re_{tag}_1");
    let re2 = format!("re_{tag}_2");
    let dp = format!("dp_{tag}");
    vec![
        (
            ev("created"),
            stripe::payment_intent(&ev("created"), "created", &pi, 10_000),
        ),
        (
            ev("processing"),
            stripe::payment_intent(&ev("processing"), "processing", &pi, 10_000),
        ),
        (
            ev("failed"),
            stripe::payment_intent(&ev("failed"), "payment_failed", &pi, 10_000),
        ),
        (
            ev("succeeded"),
            stripe::payment_intent(&ev("succeeded"), "succeeded", &pi, 10_000),
        ),
        (
            ev("charge"),
            stripe::charge_succeeded(&ev("charge"), &format!("ch_{tag}"), &pi, 10_000),
        ),
        (
            ev("refund1"),
            stripe::refund(&ev("refund1"), &re1, &pi, 3_000),
        ),
        (
            ev("charge_refunded"),
            stripe::charge_refunded(
                &ev("charge_refunded"),
                &format!("ch_{tag}"),
                &pi,
                &[(&re1, 3_000), (&re2, 2_000)],
            ),
        ),
        (
            ev("dispute_open"),
            stripe::dispute(
                &ev("dispute_open"),
                "created",
                &dp,
                &pi,
                4_000,
                "needs_response",
            ),
        ),
        (
            ev("dispute_lost"),
            stripe::dispute(&ev("dispute_lost"), "closed", &dp, &pi, 4_000, "lost"),
        ),
    ]
}

/// Final picture of one payment, with the per-case tag removed so cases compare.
async fn picture(pool: &PgPool, tag: &str) -> Picture {
    let pi = format!("pi_{tag}");
    let (status, refunded): (String, i64) = sqlx::query_as(
        "SELECT status, amount_refunded FROM payments WHERE provider_payment_id = $1",
    )
    .bind(&pi)
    .fetch_one(pool)
    .await
    .expect("payment exists");
    let ledger: Vec<(String, String, String, i64)> = sqlx::query_as(
        "SELECT t.kind, replace(t.reference, $2, 'TAG'), e.account, e.amount
         FROM ledger_entries e JOIN ledger_transactions t ON t.id = e.transaction_id
         JOIN payments p ON p.id = t.payment_id
         WHERE p.provider_payment_id = $1
         ORDER BY 1, 2, 3",
    )
    .bind(&pi)
    .bind(tag)
    .fetch_all(pool)
    .await
    .expect("ledger");
    let unbalanced: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT transaction_id FROM ledger_entries GROUP BY transaction_id
                               HAVING sum(amount) <> 0) u",
    )
    .fetch_one(pool)
    .await
    .expect("balance");
    assert_eq!(unbalanced, 0, "every ledger transaction balances");
    (status, refunded, ledger)
}

/// Stores the history's events as the edge would; returns their ids, in history order.
async fn store(pool: &PgPool, events: &[(String, Vec<u8>)]) -> Vec<i64> {
    let mut ids = Vec::with_capacity(events.len());
    for (event_id, body) in events {
        let ty: serde_json::Value = serde_json::from_slice(body).unwrap();
        let stored = insert_one(
            pool,
            &OwnedEvent {
                provider: "stripe".into(),
                provider_event_id: event_id.clone(),
                event_type: ty["type"].as_str().map(str::to_owned),
                signed_at: None,
                headers: vec![],
                query: String::new(),
                body: body.clone().into(),
                traceparent: None,
            },
        )
        .await
        .expect("store event");
        let StoreOutcome::Inserted(id) = stored else {
            panic!("fresh event expected")
        };
        ids.push(id);
    }
    ids
}

/// Stores the history's events, then processes them in `order` (indices, repeats allowed).
async fn apply(
    pool: &PgPool,
    handler: &PaymentsHandler,
    events: &[(String, Vec<u8>)],
    order: &[usize],
) {
    let ids = store(pool, events).await;
    let mut applied = vec![0; events.len()];
    for &i in order {
        match process_event(pool, handler, ids[i])
            .await
            .expect("processing succeeds")
        {
            Processed::Applied(_) => applied[i] += 1,
            Processed::Duplicate => {}
        }
    }
    assert!(
        applied.iter().all(|&n| n == 1),
        "each event applied exactly once: {applied:?}"
    );
}

/// What [`picture`] returns: status, refunded amount, ledger lines.
type Picture = (String, i64, Vec<(String, String, String, i64)>);

/// The final picture of one payment's history applied in order, one event at a time: what every other order and
/// batching must converge to. Returns the runtime, database and handler the property then uses.
fn reference() -> (tokio::runtime::Runtime, TestDb, PaymentsHandler, Picture) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (db, handler) = rt.block_on(async {
        let db = TestDb::new().await;
        let config = parse_config(&test_config_toml(&db.url, "", ""));
        let handler = hookline_billing::payments_handler(config.providers.values());
        (db, handler)
    });
    let n = history("x").len();
    let expected = rt.block_on(async {
        apply(
            &db.pool,
            &handler,
            &history("inorder"),
            &(0..n).collect::<Vec<_>>(),
        )
        .await;
        picture(&db.pool, "inorder").await
    });
    (rt, db, handler, expected)
}

#[test]
fn any_order_with_duplicates_converges_to_the_in_order_result() {
    let (rt, db, handler, expected) = reference();
    let n = history("x").len();
    assert_eq!(expected.0, "succeeded");
    assert_eq!(expected.1, 5_000, "both refunds applied once");
    assert_eq!(
        expected.2.len(),
        3 + 2 + 2 + 2,
        "payment(3) + two refunds(2 each) + dispute(2)"
    );

    // Permutation of every event, plus up to 6 duplicates inserted anywhere.
    let strategy = (
        Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
        prop::collection::vec((0..n, any::<prop::sample::Index>()), 0..6),
    )
        .prop_map(|(mut order, dups)| {
            for (event, at) in dups {
                let pos = at.index(order.len() + 1);
                order.insert(pos, event);
            }
            order
        });
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&strategy, |order| {
            let tag = format!(
                "c{}",
                case.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            );
            let got = rt.block_on(async {
                apply(&db.pool, &handler, &history(&tag), &order).await;
                picture(&db.pool, &tag).await
            });
            prop_assert_eq!(&got, &expected, "order {:?}", order);
            Ok(())
        })
        .unwrap();
}

/// Stores the history's events, then processes them in `order` cut into consecutive batches of the given sizes,
/// each batch through `process_batch` (one transaction; set-based when the batch holds only payment status
/// facts, one by one otherwise) — as a worker with `worker.batch_max` > 1 runs them.
async fn apply_in_batches(
    pool: &PgPool,
    handler: &PaymentsHandler,
    events: &[(String, Vec<u8>)],
    order: &[usize],
    sizes: &[usize],
) {
    let ids = store(pool, events).await;
    let mut applied = vec![0; events.len()];
    let mut rest = order;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let size = (*sizes.next().expect("cycle")).clamp(1, rest.len());
        let (batch, tail) = rest.split_at(size);
        rest = tail;
        let batch_ids: Vec<i64> = batch.iter().map(|&i| ids[i]).collect();
        let results = hookline_consumer::process_batch(pool, handler, &batch_ids)
            .await
            .unwrap_or_else(|f| panic!("batch {batch:?} failed at {:?}: {}", f.index, f.error));
        for (&i, r) in batch.iter().zip(results) {
            if let Processed::Applied(_) = r {
                applied[i] += 1;
            }
        }
    }
    assert!(
        applied.iter().all(|&n| n == 1),
        "each event applied exactly once: {applied:?}"
    );
}

#[test]
fn any_order_in_any_batches_converges_to_the_one_by_one_result() {
    let (rt, db, handler, expected) = reference();
    let n = history("x").len();
    // Permutations with duplicates (also inside one batch), cut into batches of 1 to 6 events: batches of
    // several status events of one payment go through the set-based path, and one that makes the payment
    // succeed after a refund or a lost dispute was parked applies what was waiting.
    let strategy = (
        Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
        prop::collection::vec((0..n, any::<prop::sample::Index>()), 0..6),
        prop::collection::vec(1usize..=6, 1..6),
    )
        .prop_map(|(mut order, dups, sizes)| {
            for (event, at) in dups {
                let pos = at.index(order.len() + 1);
                order.insert(pos, event);
            }
            (order, sizes)
        });
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&strategy, |(order, sizes)| {
            let tag = format!(
                "b{}",
                case.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            );
            let got = rt.block_on(async {
                apply_in_batches(&db.pool, &handler, &history(&tag), &order, &sizes).await;
                picture(&db.pool, &tag).await
            });
            prop_assert_eq!(&got, &expected, "order {:?} batches {:?}", order, sizes);
            Ok(())
        })
        .unwrap();
    // The facts handed on are the same too: one succeeded, two refunds, the dispute opened and lost per case.
    let per_type: Vec<(String, i64)> = rt.block_on(async {
        sqlx::query_as(
            "SELECT type, count(*) FROM domain_events
              WHERE type IN ('payment.succeeded', 'refund.applied', 'dispute.opened', 'dispute.lost')
              GROUP BY type ORDER BY type",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    });
    let cases = 1 + 48;
    assert_eq!(
        per_type,
        vec![
            ("dispute.lost".to_string(), cases),
            ("dispute.opened".to_string(), cases),
            ("payment.succeeded".to_string(), cases),
            ("refund.applied".to_string(), 2 * cases),
        ]
    );
}

/// SQLSTATE of the error `sql` fails with (panics if it succeeds).
async fn refused(pool: &PgPool, sql: &str) -> String {
    match sqlx::query(sql).execute(pool).await {
        Ok(done) => panic!("{sql} was accepted ({} rows)", done.rows_affected()),
        Err(sqlx::Error::Database(e)) => e.code().map(|c| c.into_owned()).unwrap_or_default(),
        Err(e) => panic!("{sql}: unexpected error {e}"),
    }
}

/// The ledger's own rules hold whatever a statement tries, since the order property above relies on them: a new
/// posting whose entries do not sum to zero, an entry added to an existing posting, and any rewrite of history
/// are refused by the database; the balanced history the worker wrote is left exactly as it was.
#[tokio::test]
async fn ledger_refuses_unbalanced_entries_and_rewrites() {
    let db = TestDb::new().await;
    let config = parse_config(&test_config_toml(&db.url, "", ""));
    let handler = hookline_billing::payments_handler(config.providers.values());
    let events = history("ledger");
    apply(
        &db.pool,
        &handler,
        &events,
        &(0..events.len()).collect::<Vec<_>>(),
    )
    .await;
    let before = picture(&db.pool, "ledger").await;
    assert!(
        before.2.len() >= 3,
        "the history posted entries: {before:?}"
    );

    // A whole new posting, one statement, off by one.
    let unbalanced = "WITH p AS (
             INSERT INTO ledger_transactions (provider, kind, reference, payment_id, event_id, currency)
             SELECT 'stripe', 'payment', 'pi_forged', id, 0, 'usd' FROM payments LIMIT 1 RETURNING id)
         INSERT INTO ledger_entries (transaction_id, account, amount)
         SELECT p.id, l.account, l.amount FROM p, (VALUES ('revenue', -1000::bigint), ('provider_receivable', 999))
                                                  AS l(account, amount)";
    assert_eq!(refused(&db.pool, unbalanced).await, "23514");
    // One more entry on an existing, balanced posting.
    let extra = "INSERT INTO ledger_entries (transaction_id, account, amount)
                 SELECT min(id), 'adjustment', 1 FROM ledger_transactions";
    assert_eq!(refused(&db.pool, extra).await, "23514");
    // History is never rewritten.
    for rewrite in [
        "UPDATE ledger_entries SET amount = amount * 2",
        "DELETE FROM ledger_entries",
        "UPDATE ledger_transactions SET currency = 'eur'",
        "DELETE FROM ledger_transactions",
        "TRUNCATE ledger_entries, ledger_transactions",
    ] {
        refused(&db.pool, rewrite).await;
    }
    assert_eq!(picture(&db.pool, "ledger").await, before);
    let postings: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ledger_transactions WHERE reference = 'pi_forged'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(postings, 0, "the refused posting left nothing behind");
}
