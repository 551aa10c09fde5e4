//! The worker binary killed (SIGKILL) at the two dangerous points, held there by fail points:
//! after the commit but before the ack (W1), and inside the transaction (W2). Either way the message is
//! redelivered and the effect happens exactly once.

use std::time::Duration;

use hookline_tests::stripe;
use hookline_tests::*;

const WAIT: Duration = Duration::from_secs(30);

async fn scalar(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// Sessions of the worker binary on this pipeline's database that match `condition` (SQL over pg_stat_activity).
async fn worker_sessions(p: &TestPipeline, condition: &str) -> i64 {
    let db_name = p.edge.db.url.rsplit('/').next().unwrap().to_string();
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = $1 AND application_name = 'hookline-worker' AND {condition}"
    ))
    .bind(&db_name)
    .fetch_one(p.pool())
    .await
    .unwrap()
}

/// Waits until the worker binary sits inside an open transaction on this pipeline's database (held there by a
/// `worker.before_commit` fail point): one that has written (the event's marker gives it an xid), so the worker's
/// other loops (domain relay, delivery) are never mistaken for it.
async fn wait_worker_in_transaction(p: &TestPipeline, what: &str) {
    wait_until(WAIT, what, || async {
        worker_sessions(
            p,
            "state = 'idle in transaction' AND backend_xid IS NOT NULL",
        )
        .await
            == 1
    })
    .await;
}

/// W1: killed between commit and ack → redelivered, the marker turns it into a no-op: one ledger posting.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_commit_before_ack_applies_once() {
    let p = TestPipeline::start().await;
    let config = p.config_file();
    let mut worker = Child::spawn(
        "hookline-worker",
        &["--config", config.to_str().unwrap()],
        &[("FAILPOINTS", "worker.after_commit=sleep(60000)")],
    );
    let body = stripe::payment_intent("evt_w1", "succeeded", "pi_w1", 5_000);
    assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    let pool = p.pool().clone();
    wait_until(WAIT, "the worker committed", || {
        let pool = pool.clone();
        async move { scalar(&pool, "SELECT count(*) FROM processed_events").await == 1 }
    })
    .await;
    worker.kill9();

    // The unacked message comes back; a fresh worker finds the marker and acks without a second effect.
    // The metrics recorder is global to the test process (one test binary), and other tests' in-process workers
    // count duplicates too: measure this test's by the difference.
    let duplicates_before = duplicate_deliveries();
    let fresh = p.spawn_worker();
    let queue = p.topology().payments_queue;
    wait_until(WAIT, "the redelivery consumed", || async {
        p.queue_depth(&queue).await == 0
    })
    .await;
    fresh.stop().await; // graceful: anything unacked would now be requeued
    assert_eq!(p.queue_depth(&queue).await, 0, "the redelivery was acked");
    // The kill happened before the ack (the fail point held the worker there): the fresh worker received the
    // message again and recognised it as a duplicate.
    let duplicates = duplicate_deliveries() - duplicates_before;
    assert!(
        duplicates >= 1,
        "expected the redelivery to be counted as a duplicate; counted {duplicates} more in:\n{}",
        hookline_core::telemetry::metrics_handle().render()
    );
    assert_eq!(assert_ledger_balanced(&pool).await, 1);
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM processed_events").await,
        1
    );
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM payment_transitions").await,
        1
    );
    p.teardown().await;
}

/// W2: killed inside the transaction → PostgreSQL rolls it back, the message is redelivered and applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_inside_transaction_applies_once() {
    let p = TestPipeline::start().await;
    let config = p.config_file();
    let mut worker = Child::spawn(
        "hookline-worker",
        &["--config", config.to_str().unwrap()],
        &[("FAILPOINTS", "worker.before_commit=sleep(60000)")],
    );
    let body = stripe::payment_intent("evt_w2", "succeeded", "pi_w2", 5_000);
    assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    let pool = p.pool().clone();
    wait_worker_in_transaction(&p, "the worker holds an open transaction").await;
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM processed_events").await,
        0,
        "not committed"
    );
    worker.kill9();

    let fresh = p.spawn_worker();
    p.drain(WAIT).await;
    fresh.stop().await;
    assert_eq!(assert_ledger_balanced(&pool).await, 1);
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM processed_events").await,
        1
    );
    p.teardown().await;
}

/// Graceful shutdown: SIGTERM while a delivery is inside its transaction lets it commit and ack, then the
/// process exits 0; nothing is redelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_finishes_in_flight_work_then_exits() {
    let p = TestPipeline::start().await;
    let config = p.config_file();
    let mut worker = Child::spawn(
        "hookline-worker",
        &["--config", config.to_str().unwrap()],
        &[("FAILPOINTS", "worker.before_commit=sleep(1500)")],
    );
    let body = stripe::payment_intent("evt_term", "succeeded", "pi_term", 5_000);
    assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    let pool = p.pool().clone();
    wait_worker_in_transaction(&p, "the worker is inside its transaction").await;
    let pid = worker.0.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exit = None;
    wait_until(WAIT, "the worker exits", || {
        let done = worker.0.try_wait().unwrap();
        if done.is_some() {
            exit = done;
        }
        async move { done.is_some() }
    })
    .await;
    assert!(exit.unwrap().success(), "clean exit: {exit:?}");
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM processed_events").await,
        1,
        "committed"
    );
    assert_eq!(
        p.queue_depth(&p.topology().payments_queue).await,
        0,
        "acked, not requeued"
    );
    assert_eq!(assert_ledger_balanced(&pool).await, 1);
    p.teardown().await;
}

/// Batches commit out of order on one channel: a later batch must not acknowledge an earlier delivery that is
/// still being processed (a `multiple` ack up to its own tag would). The first event's payment is locked by this
/// test, so its batch waits; forty later events commit and are acknowledged meanwhile; then the worker is
/// SIGKILLed. The held event must come back and be applied — had it been acked with the others it would be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn later_batches_never_acknowledge_an_earlier_delivery_still_in_flight() {
    let p = TestPipeline::start().await;
    let pool = p.pool().clone();
    // The held event's payment exists and is locked by an open transaction of the test.
    sqlx::query(
        "INSERT INTO payments (provider, provider_payment_id, status) VALUES ('stripe', 'pi_held', 'created')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM payments WHERE provider_payment_id = 'pi_held' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();

    let config = p.config_file();
    let mut worker = Child::spawn(
        "hookline-worker",
        &["--config", config.to_str().unwrap()],
        &[],
    );
    let held = stripe::payment_intent("evt_held", "succeeded", "pi_held", 5_000);
    assert_eq!(p.edge.deliver_stripe(&held).await, 200);
    wait_until(
        WAIT,
        "the worker waits for the held payment's lock",
        || async { worker_sessions(&p, "wait_event_type = 'Lock'").await == 1 },
    )
    .await;

    // Later deliveries on the same channel: other batches, which commit and are acknowledged.
    let posts = (0..40).map(|i| {
        let body = stripe::payment_intent(
            &format!("evt_later_{i}"),
            "succeeded",
            &format!("pi_later_{i}"),
            1_000,
        );
        let edge = &p.edge;
        async move { edge.post_stripe(&body).await.status() }
    });
    for status in futures::future::join_all(posts).await {
        assert_eq!(status, 200);
    }
    wait_until(WAIT, "the later events are applied", || {
        let pool = pool.clone();
        async move {
            scalar(&pool, "SELECT count(*) FROM processed_events WHERE event_id IN (SELECT id FROM webhook_events WHERE provider_event_id LIKE 'evt_later_%')").await == 40
        }
    })
    .await;
    let queue = p.topology().payments_queue;
    // Give the later batches' acks time to reach RabbitMQ: nothing but the held delivery may stay unacked.
    wait_until(WAIT, "only the held delivery is unacknowledged", || async {
        p.queue_depth(&queue).await == 0
    })
    .await;
    worker.kill9();
    holder.rollback().await.unwrap();

    // The held delivery was never acknowledged: closing the channel returned it, and a fresh worker applies it.
    // (The binary, not an in-process worker: redeliveries here must not count in this process's metrics, which
    // the other tests of this file read.)
    let mut fresh = Child::spawn(
        "hookline-worker",
        &["--config", config.to_str().unwrap()],
        &[],
    );
    p.drain(WAIT).await;
    fresh.kill9();
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM processed_events").await,
        41,
        "the held event and the forty later ones, each once"
    );
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM payments WHERE provider_payment_id = 'pi_held' AND status = 'succeeded'").await,
        1
    );
    assert_eq!(assert_ledger_balanced(&pool).await, 41);
    p.teardown().await;
}

/// The process-wide count of deliveries the payments consumer found already processed.
fn duplicate_deliveries() -> u64 {
    let metrics = hookline_core::telemetry::metrics_handle().render();
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "hookline_worker_deliveries_total{consumer=\"payments\",outcome=\"duplicate\"} ",
            )
        })
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Locks payment `payment_ref` (created first) in a transaction of the test, so that the batch applying its event
/// waits on the lock: a batch in flight that does not finish until the test lets it.
async fn hold_payment(
    pool: &sqlx::PgPool,
    payment_ref: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    sqlx::query(
        "INSERT INTO payments (provider, provider_payment_id, status) VALUES ('stripe', $1, 'created')",
    )
    .bind(payment_ref)
    .execute(pool)
    .await
    .unwrap();
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM payments WHERE provider_payment_id = $1 FOR UPDATE")
        .bind(payment_ref)
        .execute(&mut *holder)
        .await
        .unwrap();
    holder
}

/// Processed markers and distinct transaction start times (`processed_at` is `now()`: one per transaction) of
/// the events whose provider id starts with `prefix`.
async fn markers_and_transactions(pool: &sqlx::PgPool, prefix: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(DISTINCT p.processed_at) FROM processed_events p
           JOIN webhook_events e ON e.id = p.event_id
          WHERE starts_with(e.provider_event_id, $1)",
    )
    .bind(prefix)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Batches fill by themselves. While a batch is in flight (its payment locked by the test), deliveries that
/// arrive one at a time — each published on its own — gather into the next batch, which starts when the first
/// one finishes: one transaction for all four (`batch_linger_ms` 1000, so the linger does not start them). Then,
/// with the default linger, a batch that stays stuck holds the deliveries behind it back by the linger at most:
/// they are applied while it still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deliveries_gather_while_a_batch_is_in_flight_and_a_stuck_one_holds_none_back() {
    let p = TestPipeline::start().await;
    let pool = p.pool().clone();
    let toml = p
        .toml
        .replace("concurrency = 4", "concurrency = 4\nbatch_linger_ms = 1000");
    assert_ne!(
        toml, p.toml,
        "the test's configuration names the worker's concurrency"
    );
    let long_linger = std::env::temp_dir().join(format!(
        "hookline-test-{}-linger.toml",
        p.config.amqp.prefix
    ));
    std::fs::write(&long_linger, toml).unwrap();

    let holder = hold_payment(&pool, "pi_fill_held").await;
    let mut worker = Child::spawn(
        "hookline-worker",
        &["--config", long_linger.to_str().unwrap()],
        &[],
    );
    let held = stripe::payment_intent("evt_held_for_fill", "succeeded", "pi_fill_held", 5_000);
    assert_eq!(p.edge.deliver_stripe(&held).await, 200);
    wait_until(WAIT, "the held batch waits for its lock", || async {
        worker_sessions(&p, "wait_event_type = 'Lock'").await == 1
    })
    .await;
    let first_sent = std::time::Instant::now();
    for i in 0..4 {
        let body = stripe::payment_intent(
            &format!("evt_fill_{i}"),
            "succeeded",
            &format!("pi_fill_{i}"),
            1_000,
        );
        assert_eq!(p.edge.deliver_stripe(&body).await, 200);
        // Published before the next is sent: each reaches the worker on its own.
        wait_until(WAIT, "the relay published it", || async {
            scalar(&pool, "SELECT count(*) FROM event_outbox").await == 0
        })
        .await;
    }
    let gathering = first_sent.elapsed();
    holder.rollback().await.unwrap();
    wait_until(WAIT, "the four are applied", || async {
        markers_and_transactions(&pool, "evt_fill_").await.0 == 4
    })
    .await;
    let (markers, transactions) = markers_and_transactions(&pool, "evt_fill_").await;
    assert_eq!(markers, 4);
    // One transaction when all four arrived within the linger (the usual case: ~0.3 s); on a machine so loaded
    // that sending them took longer, the linger started those gathered so far, and the rest formed a second.
    let most = if gathering < Duration::from_millis(900) {
        1
    } else {
        2
    };
    assert!(
        transactions <= most,
        "the deliveries that arrived one by one while the held batch was in flight gathered into {most} \
         transaction(s), not {transactions} (sent over {gathering:?})"
    );
    worker.kill9();

    // The default linger (5 ms): a batch stuck on a lock does not hold the later deliveries until it ends.
    let holder = hold_payment(&pool, "pi_stuck").await;
    let config = p.config_file();
    let mut worker = Child::spawn(
        "hookline-worker",
        &["--config", config.to_str().unwrap()],
        &[],
    );
    let stuck = stripe::payment_intent("evt_stuck", "succeeded", "pi_stuck", 5_000);
    assert_eq!(p.edge.deliver_stripe(&stuck).await, 200);
    wait_until(WAIT, "the stuck batch waits for its lock", || async {
        worker_sessions(&p, "wait_event_type = 'Lock'").await == 1
    })
    .await;
    for i in 0..3 {
        let body = stripe::payment_intent(
            &format!("evt_behind_{i}"),
            "succeeded",
            &format!("pi_behind_{i}"),
            1_000,
        );
        assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    }
    wait_until(
        WAIT,
        "the deliveries behind the stuck batch are applied while it waits",
        || async { markers_and_transactions(&pool, "evt_behind_").await.0 == 3 },
    )
    .await;
    assert_eq!(
        worker_sessions(&p, "wait_event_type = 'Lock'").await,
        1,
        "the stuck batch still waits"
    );
    holder.rollback().await.unwrap();
    p.drain(WAIT).await;
    worker.kill9();
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM processed_events").await,
        9
    );
    assert_eq!(assert_ledger_balanced(&pool).await, 9);
    p.teardown().await;
}
