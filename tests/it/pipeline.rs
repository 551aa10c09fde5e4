//! End-to-end tests through the HTTP edge, the outbox relay, RabbitMQ and the worker, on real services.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use hookline_core::handler::{HandleError, Handler, Outcome, StoredEvent};
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use hookline_payments::PaymentsHandler;
use hookline_tests::stripe;
use hookline_tests::*;
use lapin::types::FieldTable;
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;

/// Generous: a wait ends on its outcome, the bound only catches a hang (a slow broker must not fail CI).
const DRAIN: Duration = Duration::from_secs(120);

async fn scalar(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// The source documents' test: the same approved-payment webhook posted twice in parallel gives exactly one
/// ledger transaction of three entries summing to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_duplicate_approved_payment_posts_once() {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    let body = stripe::payment_intent("evt_approved_1", "succeeded", "pi_approved_1", 10_000);
    let (a, b) = tokio::join!(p.edge.post_stripe(&body), p.edge.post_stripe(&body));
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    p.drain(DRAIN).await;

    let pool = p.pool();
    assert_eq!(assert_ledger_balanced(pool).await, 1);
    let rows = ledger_rows(pool).await;
    // fee = 10000 × 3.99% + 39 = 438
    assert_eq!(
        rows,
        vec![
            (
                "payment".into(),
                "pi_approved_1".into(),
                "provider_fees".into(),
                438
            ),
            (
                "payment".into(),
                "pi_approved_1".into(),
                "provider_receivable".into(),
                9_562
            ),
            (
                "payment".into(),
                "pi_approved_1".into(),
                "revenue".into(),
                -10_000
            ),
        ]
    );
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM processed_events").await,
        1
    );
    let status: String = sqlx::query_scalar(
        "SELECT status FROM payments WHERE provider_payment_id = 'pi_approved_1'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(status, "succeeded");
    worker.stop().await;
    p.teardown().await;
}

/// Two workers on one queue, many events with concurrent duplicates: every event is processed exactly once and
/// every payment posts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_never_double_apply() {
    let p = Arc::new(TestPipeline::start().await);
    let w1 = p.spawn_worker();
    let w2 = p.spawn_worker();
    let posts = (0..40).flat_map(|i| {
        let body = stripe::payment_intent(
            &format!("evt_two_{i}"),
            "succeeded",
            &format!("pi_two_{i}"),
            1_000 + i,
        );
        // Each event three times, concurrently.
        (0..3).map(move |_| (body.clone(), i))
    });
    let results = join_all(posts.map(|(body, _)| {
        let p = p.clone();
        async move { p.edge.deliver_stripe(&body).await }
    }))
    .await;
    assert!(results.iter().all(|s| *s == 200), "{results:?}");
    p.drain(DRAIN).await;
    let pool = p.pool();
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM webhook_events").await,
        40
    );
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM processed_events").await,
        40
    );
    assert_eq!(assert_ledger_balanced(pool).await, 40);
    assert_eq!(
        scalar(
            pool,
            "SELECT coalesce(sum(amount), 0)::bigint FROM ledger_entries WHERE account = 'revenue'"
        )
        .await,
        -(0..40).map(|i| 1_000 + i).sum::<i64>()
    );
    w1.stop().await;
    w2.stop().await;
    p.teardown().await;
}

/// `hookline status`'s (parked, applied) totals.
async fn parked_and_applied(p: &TestPipeline) -> (i64, i64) {
    let report = hookline_ops::status::report(p.pool(), &p.config, None, "test-status")
        .await
        .expect("status report");
    (report.totals.parked, report.totals.applied)
}

/// A refund and a lost dispute that arrive before their payment succeeded are parked, not dropped, and applied
/// by the transaction that makes the payment succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn early_refund_and_dispute_are_parked_then_applied() {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    let pool = p.pool();
    for body in [
        stripe::refund("evt_early_r", "re_early", "pi_early", 2_500),
        stripe::dispute(
            "evt_early_d",
            "closed",
            "dp_early",
            "pi_early",
            1_000,
            "lost",
        ),
    ] {
        assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    }
    p.drain(DRAIN).await;
    assert_eq!(
        assert_ledger_balanced(pool).await,
        0,
        "nothing posted before the payment succeeded"
    );
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM processed_events WHERE outcome = 'parked'"
        )
        .await,
        2
    );
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM refunds WHERE status = 'parked'").await,
        1
    );
    assert_eq!(parked_and_applied(&p).await, (2, 0), "status: both wait");

    let body = stripe::payment_intent("evt_early_ok", "succeeded", "pi_early", 10_000);
    assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    p.drain(DRAIN).await;
    // The markers still say `parked` (they record the first processing); status says what waits now: nothing,
    // the three events applied.
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM processed_events WHERE outcome = 'parked'"
        )
        .await,
        2
    );
    assert_eq!(parked_and_applied(&p).await, (0, 3), "status: all applied");
    assert_eq!(assert_ledger_balanced(pool).await, 3);
    let kinds: Vec<(String, String)> =
        sqlx::query_as("SELECT kind, reference FROM ledger_transactions ORDER BY kind")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(
        kinds,
        vec![
            ("dispute".into(), "dp_early".into()),
            ("payment".into(), "pi_early".into()),
            ("refund".into(), "re_early".into()),
        ]
    );
    assert_eq!(
        scalar(
            pool,
            "SELECT amount_refunded FROM payments WHERE provider_payment_id = 'pi_early'"
        )
        .await,
        2_500
    );
    worker.stop().await;
    p.teardown().await;
}

/// Business key: two different events for the same subscription cycle charge once; unknown types are recorded
/// as ignored and acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invoice_cycle_charged_once_and_unknown_types_ignored() {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    for body in [
        stripe::invoice_paid("evt_inv_1", "in_1", "sub_1", 1_767_225_600, 4_990),
        stripe::invoice_paid("evt_inv_2", "in_1", "sub_1", 1_767_225_600, 4_990),
        stripe::invoice_paid("evt_inv_3", "in_2", "sub_1", 1_769_904_000, 4_990),
        br#"{"id":"evt_cust","type":"customer.created","data":{"object":{"id":"cus_1"}}}"#.to_vec(),
    ] {
        assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    }
    p.drain(DRAIN).await;
    let pool = p.pool();
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM subscription_charges").await,
        2
    );
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM processed_events WHERE outcome = 'ignored'"
        )
        .await,
        1
    );
    assert_eq!(scalar(pool, "SELECT count(*) FROM dead_letters").await, 0);
    worker.stop().await;
    p.teardown().await;
}

/// A signed event with an invalid amount is stored (the provider delivered it), then dead-lettered by the worker
/// with its reason recorded; it writes nothing to the ledger and the events after it keep flowing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_amount_is_dead_lettered_with_reason() {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    let bad = stripe::payment_intent("evt_bad_amount", "succeeded", "pi_bad", -500);
    assert_eq!(p.edge.deliver_stripe(&bad).await, 200);
    let good = stripe::payment_intent("evt_good_after", "succeeded", "pi_good", 700);
    assert_eq!(p.edge.deliver_stripe(&good).await, 200);
    p.drain(DRAIN).await;
    let pool = p.pool();
    let reason: String = sqlx::query_scalar("SELECT reason FROM dead_letters")
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(reason.contains("amount"), "{reason}");
    assert_eq!(assert_ledger_balanced(pool).await, 1);
    let dlq = p.topology().dead_letter_queue;
    wait_until(DRAIN, "dead letter in the DLQ", || async {
        p.queue_depth(&dlq).await == 1
    })
    .await;
    worker.stop().await;
    p.teardown().await;
}

/// Wraps the payments handler and panics on one event: a poison message that no code path can finish.
struct PoisonOn {
    inner: PaymentsHandler,
    provider_event_id: &'static str,
    attempts: Arc<AtomicUsize>,
}

impl Handler for PoisonOn {
    fn consumer(&self) -> &'static str {
        self.inner.consumer()
    }

    async fn handle(
        &self,
        tx: &mut PgConnection,
        event: &StoredEvent,
    ) -> Result<Outcome, HandleError> {
        if event.provider_event_id == self.provider_event_id {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            panic!("poison event {}", event.provider_event_id);
        }
        self.inner.handle(tx, event).await
    }
}

/// Delivers the poison event (`evt_poison`) and then ten good ones (`evt_{prefix}_{i}`, payment `pi_{prefix}_{i}`)
/// through the edge, each answered 200.
async fn deliver_poison_and_ten(p: &TestPipeline, prefix: &str) {
    let poison = stripe::payment_intent("evt_poison", "succeeded", "pi_poison", 100);
    assert_eq!(p.edge.deliver_stripe(&poison).await, 200);
    for i in 0..10 {
        let body = stripe::payment_intent(
            &format!("evt_{prefix}_{i}"),
            "succeeded",
            &format!("pi_{prefix}_{i}"),
            100,
        );
        assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    }
}

/// A poison message is retried until the delivery limit (3 in tests: RabbitMQ dead-letters a message returned
/// more than 3 times, so it is delivered 4 times), then lands in the dead-letter queue with a recorded reason,
/// while the other events keep flowing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_message_reaches_dlq_after_delivery_limit() {
    let p = TestPipeline::start().await;
    let attempts = Arc::new(AtomicUsize::new(0));
    let worker = p.spawn_worker_with(PoisonOn {
        inner: hookline_billing::payments_handler(p.config.providers.values()),
        provider_event_id: "evt_poison",
        attempts: attempts.clone(),
    });
    deliver_poison_and_ten(&p, "flow").await;
    let dlq = p.topology().dead_letter_queue;
    wait_until(DRAIN, "poison message in the DLQ", || async {
        p.queue_depth(&dlq).await == 1
    })
    .await;
    p.drain(DRAIN).await;
    let pool = p.pool();
    assert_eq!(
        assert_ledger_balanced(pool).await,
        10,
        "every other event was applied"
    );
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        4,
        "delivered delivery_limit + 1 times"
    );
    let reason: String = sqlx::query_scalar("SELECT reason FROM dead_letters")
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(reason.contains("panicked"), "{reason}");
    worker.stop().await;
    p.teardown().await;
}

/// The relay's publish is `mandatory`: with the queue unbound, RabbitMQ returns the message and the row stays
/// unpublished; once the binding is back the sweeper publishes it and the worker applies it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unroutable_publish_stays_in_outbox_until_routable() {
    let p = TestPipeline::start().await;
    let t = p.topology();
    // Declare the topology by starting (and stopping) a worker, and make sure the relay's publisher is open
    // BEFORE the binding is removed: opening it declares the topology, binding included, which would route the
    // message this test wants returned. A first event through the whole pipeline proves both.
    let warmup = p.spawn_worker();
    let conn = hookline_bus::connect(&p.config.amqp_urls, "hookline-test")
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let first = stripe::payment_intent("evt_routable", "succeeded", "pi_routable", 100);
    assert_eq!(p.edge.deliver_stripe(&first).await, 200);
    p.drain(DRAIN).await;
    warmup.stop().await;
    ch.queue_unbind(
        t.payments_queue.as_str().into(),
        t.exchange.as_str().into(),
        "#".into(),
        FieldTable::default(),
    )
    .await
    .unwrap();

    let body = stripe::payment_intent("evt_unroutable", "succeeded", "pi_unroutable", 100);
    assert_eq!(p.edge.deliver_stripe(&body).await, 200);
    let metrics_url = format!("{}/metrics", p.edge.base);
    wait_until(DRAIN, "the relay saw the message returned", || async {
        let text = p
            .edge
            .client
            .get(&metrics_url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.contains("hookline_relay_not_confirmed_total{reason=\"returned\"}")
    })
    .await;
    assert_eq!(
        scalar(p.pool(), "SELECT count(*) FROM event_outbox").await,
        1,
        "a returned message is not published"
    );
    // Starting a worker re-declares the topology (binding included); the sweeper then publishes the row.
    let worker = p.spawn_worker();
    p.drain(DRAIN).await;
    assert_eq!(assert_ledger_balanced(p.pool()).await, 2);
    assert_eq!(
        scalar(p.pool(), "SELECT count(*) FROM event_outbox").await,
        0
    );
    conn.close(200, "".into()).await.ok();
    worker.stop().await;
    p.teardown().await;
}

/// Events committed while the edge cannot reach RabbitMQ are answered 200 and published later by a relay
/// (here a standalone one, as `hookline relay` runs it), then applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn committed_but_unpublished_events_are_swept_by_a_standalone_relay() {
    let db = TestDb::new().await;
    // The edge's relay points at a closed port: every publish fails.
    let toml = test_config_toml(&db.url, "", FAST_PIPELINE).replace(
        "[amqp]",
        "amqp_url = \"amqp://guest:guest@127.0.0.1:1/%2f\"\n[amqp]",
    );
    let broken = parse_config(&toml);
    let edge = TestEdge::spawn_on(db, broken.clone()).await;
    for i in 0..20 {
        let body = stripe::payment_intent(
            &format!("evt_out_{i}"),
            "succeeded",
            &format!("pi_out_{i}"),
            100 + i,
        );
        assert_eq!(edge.deliver_stripe(&body).await, 200);
    }
    assert_eq!(
        scalar(&edge.db.pool, "SELECT count(*) FROM event_outbox").await,
        20
    );
    // The real broker for the relay and the worker.
    let mut good = broken.clone();
    good.amqp_urls = parse_config(&test_config_toml(&edge.db.url, "", "")).amqp_urls;
    let p = TestPipeline {
        edge,
        config: good,
        toml: String::new(),
    };
    let worker = p.spawn_worker();
    let mut relay = test_relay(&p, Duration::ZERO, "hookline-test-relay");
    let published = relay.sweep().await.expect("sweep");
    assert_eq!(published, 20);
    p.drain(DRAIN).await;
    assert_eq!(assert_ledger_balanced(p.pool()).await, 20);
    worker.stop().await;
    p.teardown().await;
}

/// A pipeline whose edge stores events but publishes none (no embedded relay): the test publishes them itself.
async fn pipeline_without_relay() -> TestPipeline {
    let db = TestDb::new().await;
    let toml = test_config_toml(
        &db.url,
        "",
        "[relay]\nembedded = false\n[worker]\nprefetch = 16\nconcurrency = 4\ndb_max_connections = 6",
    );
    let config = parse_config(&toml);
    let edge = TestEdge::spawn_on(db, config.clone()).await;
    TestPipeline { edge, config, toml }
}

/// Stores ten good events and a poison one (`evt_poison`) and publishes all eleven as ONE bundle; returns the
/// poison event's id.
async fn one_bundle_with_a_poison_event(p: &TestPipeline) -> i64 {
    deliver_poison_and_ten(p, "bundled").await;
    let rows: Vec<(i64, String, String, Option<String>)> = sqlx::query_as(
        "SELECT id, provider, provider_event_id, event_type FROM webhook_events ORDER BY id",
    )
    .fetch_all(p.pool())
    .await
    .unwrap();
    let msgs: Vec<hookline_bus::EventMessage> = rows.into_iter().map(Into::into).collect();
    let topology = p.topology();
    let publisher = hookline_bus::Publisher::open(&p.config.amqp_urls, &topology, "test-bundle")
        .await
        .expect("open publisher");
    let packing = hookline_bus::Packing {
        per_message: 32,
        prior_deliveries: 0,
    };
    let published = publisher
        .publish_packed(&topology, &msgs, packing, Duration::from_secs(10))
        .await
        .expect("publish");
    assert_eq!(published.acked.len(), 11);
    publisher.close().await;
    assert_eq!(
        p.queue_depth(&topology.payments_queue).await,
        1,
        "eleven events in one message"
    );
    scalar(
        p.pool(),
        "SELECT id FROM webhook_events WHERE provider_event_id = 'evt_poison'",
    )
    .await
}

/// What must hold once a bundle with a poison event has been handled: the ten others applied once, the poison
/// one alone in the DLQ (as a single message) with its reason recorded, after `attempts` handler runs.
async fn only_the_poison_event_dead_lettered(
    p: &TestPipeline,
    poison_id: i64,
    attempts: &AtomicUsize,
) -> usize {
    let dlq = p.topology().dead_letter_queue;
    wait_until(DRAIN, "the poison event in the DLQ", || async {
        p.queue_depth(&dlq).await == 1
    })
    .await;
    p.drain(DRAIN).await;
    assert_eq!(
        assert_ledger_balanced(p.pool()).await,
        10,
        "the ten others applied once"
    );
    assert_eq!(
        p.queued_event_ids(&dlq).await,
        vec![poison_id],
        "the DLQ holds the poison event alone"
    );
    let dead: Vec<(i64, String)> = sqlx::query_as("SELECT event_id, reason FROM dead_letters")
        .fetch_all(p.pool())
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].0, poison_id);
    assert!(dead[0].1.contains("panicked"), "{dead:?}");
    assert_eq!(
        p.queue_depth(&p.topology().payments_queue).await,
        0,
        "the bundle and every single split from it settled"
    );
    attempts.load(Ordering::SeqCst)
}

/// Several events in one message (a bundle) whose batch fails on a poison event: the worker splits the bundle
/// into single messages, so the ten others are applied and the poison one is retried and dead-lettered alone —
/// after delivery_limit + 1 attempts in all, the one inside the bundle counted, as for a single message.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poison_event_in_a_bundle_is_dead_lettered_alone_after_the_same_attempts() {
    let p = pipeline_without_relay().await;
    let poison_id = one_bundle_with_a_poison_event(&p).await;
    let attempts = Arc::new(AtomicUsize::new(0));
    let worker = p.spawn_worker_with(PoisonOn {
        inner: hookline_billing::payments_handler(p.config.providers.values()),
        provider_event_id: "evt_poison",
        attempts: attempts.clone(),
    });
    let attempts = only_the_poison_event_dead_lettered(&p, poison_id, &attempts).await;
    assert_eq!(attempts, 4, "delivery_limit + 1 attempts in all");
    worker.stop().await;
    p.teardown().await;
}

/// A bundle delivered before and returned unsettled (here: taken and its channel closed, as a crash does) is
/// split before anything is applied, and the delivery it had counts against the limit: the poison event is
/// attempted delivery_limit times, not delivery_limit + 1 more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_returned_bundle_is_split_before_it_is_applied_and_its_delivery_counts() {
    use lapin::options::BasicGetOptions;
    let p = pipeline_without_relay().await;
    let poison_id = one_bundle_with_a_poison_event(&p).await;
    let queue = p.topology().payments_queue;
    let conn = hookline_bus::connect(&p.config.amqp_urls, "test-taker")
        .await
        .unwrap();
    let channel = conn.create_channel().await.unwrap();
    let taken = channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("the bundle");
    assert!(!taken.delivery.redelivered);
    conn.close(200, "crashed".into()).await.unwrap();
    let attempts = Arc::new(AtomicUsize::new(0));
    let worker = p.spawn_worker_with(PoisonOn {
        inner: hookline_billing::payments_handler(p.config.providers.values()),
        provider_event_id: "evt_poison",
        attempts: attempts.clone(),
    });
    let attempts = only_the_poison_event_dead_lettered(&p, poison_id, &attempts).await;
    assert_eq!(
        attempts, 3,
        "the returned delivery of the bundle was one of delivery_limit + 1"
    );
    worker.stop().await;
    p.teardown().await;
}

/// A relay of the pipeline's configuration whose sweeper takes rows older than `min_age`.
fn test_relay(p: &TestPipeline, min_age: Duration, name: &str) -> hookline_bus::Relay {
    hookline_bus::Relay::new(
        p.pool().clone(),
        p.config.amqp_urls.clone(),
        p.topology(),
        hookline_bus::RelayConfig {
            sweep_min_age: min_age,
            ..hookline_bus::RelayConfig::from_config(&p.config).expect("valid [relay]")
        },
        name,
    )
}

/// Several relays sweeping at once (several edge processes) share the backlog through `FOR UPDATE SKIP LOCKED`:
/// every committed event is published, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sweepers_publish_each_row_once() {
    let db = TestDb::new().await;
    let toml = test_config_toml(&db.url, "", "[relay]\nembedded = false\nbatch_size = 50");
    let config = parse_config(&toml);
    let edge = TestEdge::spawn_on(db, config.clone()).await;
    for i in 0..200 {
        let body = stripe::payment_intent(
            &format!("evt_sw_{i}"),
            "succeeded",
            &format!("pi_sw_{i}"),
            100,
        );
        assert_eq!(edge.deliver_stripe(&body).await, 200);
    }
    let p = TestPipeline { edge, config, toml };
    let relay = |name: &str| test_relay(&p, Duration::ZERO, name);
    let (mut a, mut b, mut c) = (relay("relay-a"), relay("relay-b"), relay("relay-c"));
    let (ra, rb, rc) = tokio::join!(a.sweep(), b.sweep(), c.sweep());
    let total = ra.unwrap() + rb.unwrap() + rc.unwrap();
    assert_eq!(total, 200, "each row published by exactly one sweeper");
    let mut queued = p.queued_event_ids(&p.topology().payments_queue).await;
    assert!(
        (p.queue_depth(&p.topology().payments_queue).await as usize) < queued.len(),
        "events that share a routing key travel in bundles"
    );
    assert_eq!(queued.len(), 200, "no duplicate on the queue");
    queued.sort_unstable();
    queued.dedup();
    assert_eq!(queued.len(), 200, "every event on the queue, none twice");
    assert_eq!(
        scalar(p.pool(), "SELECT count(*) FROM event_outbox").await,
        0
    );
    p.teardown().await;
}

/// The fast path claims its events in the outbox before publishing: an event the sweeper already published
/// (the edge's notification was slower than `sweep_min_age`, e.g. on a loaded machine) is not published again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fast_path_skips_events_the_sweeper_already_published() {
    let db = TestDb::new().await;
    let toml = test_config_toml(&db.url, "", "[relay]\nembedded = false");
    let config = parse_config(&toml);
    let edge = TestEdge::spawn_on(db, config.clone()).await;
    let edge_ref = &edge;
    let post = |i: usize| async move {
        let body = stripe::payment_intent(
            &format!("evt_fs_{i}"),
            "succeeded",
            &format!("pi_fs_{i}"),
            100,
        );
        edge_ref.deliver_stripe(&body).await
    };
    for status in join_all((0..30).map(post)).await {
        assert_eq!(status, 200);
    }
    let p = TestPipeline { edge, config, toml };
    let relay = |min_age: Duration| test_relay(&p, min_age, "hookline-test-relay");
    // The sweeper gets there first.
    assert_eq!(relay(Duration::ZERO).sweep().await.expect("sweep"), 30);
    // One more event, that only the fast path will publish (this relay's sweeper waits an hour).
    let last = stripe::payment_intent("evt_fs_last", "succeeded", "pi_fs_last", 100);
    assert_eq!(p.edge.deliver_stripe(&last).await, 200);
    let stored: Vec<(i64, String, String, Option<String>)> = sqlx::query_as(
        "SELECT id, provider, provider_event_id, event_type FROM webhook_events ORDER BY id",
    )
    .fetch_all(p.pool())
    .await
    .unwrap();
    assert_eq!(stored.len(), 31);
    let (handle, inbox) = hookline_bus::relay::fast_path();
    let cancel = CancellationToken::new();
    let supervisor = Supervisor::new(Liveness::new(), RestartPolicy::default());
    let running = {
        let relay = relay(Duration::from_secs(3600));
        let cancel = cancel.clone();
        tokio::spawn(async move { relay.run(Some(inbox), cancel, &supervisor).await })
    };
    // The late notifications of the 30 swept events, then the new one's: the inbox is FIFO, so once the last
    // is on the queue every earlier notification has been handled.
    for row in stored {
        handle.notify(row.into());
    }
    let queue = p.topology().payments_queue;
    let last_id = scalar(p.pool(), "SELECT max(id) FROM webhook_events").await;
    wait_until(DRAIN, "the fast path's event on the queue", || async {
        p.queued_event_ids(&queue).await.contains(&last_id)
    })
    .await;
    cancel.cancel();
    running.await.expect("relay stopped");
    let queued = p.queued_event_ids(&queue).await;
    let distinct: std::collections::HashSet<i64> = queued.iter().copied().collect();
    assert_eq!(
        (queued.len(), distinct.len()),
        (31, 31),
        "each event on the queue once: the fast path skipped the 30 the sweeper had published"
    );
    assert_eq!(
        scalar(p.pool(), "SELECT count(*) FROM event_outbox").await,
        0
    );
    p.teardown().await;
}

/// Pagar.me postbacks (form-encoded): a paid transaction posts once with Pagar.me's fee; its later `refunded`
/// postback posts the refund as its own transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pagarme_postbacks_paid_then_refunded() {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    let postback = |status: &str, refunded: i64| {
        format!(
            "id=4242&fingerprint=abc&event=transaction_status_changed&old_status=processing&desired_status={status}\
             &current_status={status}&object=transaction&transaction%5Bid%5D=4242&transaction%5Bamount%5D=20000\
             &transaction%5Bpaid_amount%5D=20000&transaction%5Brefunded_amount%5D={refunded}"
        )
        .into_bytes()
    };
    for body in [
        postback("paid", 0),
        postback("paid", 0),
        postback("refunded", 20000),
    ] {
        let headers = vec![
            (
                "X-Hub-Signature".to_string(),
                hookline_signature::sign::pagarme(secrets::PAGARME.as_bytes(), &body),
            ),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ];
        assert_eq!(
            p.edge.post("pagarme", "", &headers, body).await.status(),
            200
        );
    }
    p.drain(DRAIN).await;
    let pool = p.pool();
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM webhook_events").await,
        2,
        "the repeated postback is a duplicate"
    );
    assert_eq!(assert_ledger_balanced(pool).await, 2);
    let rows = ledger_rows(pool).await;
    // fee = 20000 × 2.99% = 598
    assert!(
        rows.contains(&("payment".into(), "4242".into(), "provider_fees".into(), 598)),
        "{rows:?}"
    );
    assert!(
        rows.contains(&(
            "refund".into(),
            "4242:refund:20000".into(),
            "revenue".into(),
            20_000
        )),
        "{rows:?}"
    );
    worker.stop().await;
    p.teardown().await;
}

/// `amqp_urls`: a connection goes to the first node that accepts, past nodes that refuse; when none accepts, the
/// error names each node as `host:port` and never the credentials of its URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connect_moves_past_unreachable_nodes_and_never_shows_credentials() {
    use hookline_core::config::AmqpEndpoints;
    use secrecy::ExposeSecret;
    let good = parse_config(&test_config_toml("postgres://unused/x", "", ""))
        .amqp_urls
        .first()
        .url
        .expose_secret()
        .to_string();
    let dead = |port: u16| format!("amqp://hookline:SUPERSECRET@127.0.0.1:{port}/%2f");
    // The live node between two closed ports: whichever the rotation starts with, a connection is made.
    let endpoints = AmqpEndpoints::new(&[dead(1), good.clone(), dead(2)], "amqp_urls").unwrap();
    for _ in 0..3 {
        let conn = hookline_bus::connect(&endpoints, "hookline-test")
            .await
            .expect("the live node accepts");
        assert!(conn.status().connected());
        conn.close(200, "".into()).await.ok();
    }
    let none = AmqpEndpoints::new(&[dead(1), dead(2)], "amqp_urls").unwrap();
    let err = format!(
        "{:#}",
        hookline_bus::connect(&none, "hookline-test")
            .await
            .expect_err("no node accepts")
    );
    assert!(
        err.contains("127.0.0.1:1") && err.contains("127.0.0.1:2"),
        "{err}"
    );
    assert!(err.contains("tried 2 node(s)"), "{err}");
    assert!(
        !err.contains("SUPERSECRET") && !err.contains("hookline:"),
        "{err}"
    );
}

/// Queues declared by a version without `x-quorum-initial-group-size` (or with another size) are declared again
/// without PRECONDITION_FAILED: RabbitMQ does not compare the group size, so upgrading or changing
/// `amqp.quorum_initial_group_size` needs no queue deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn topology_with_replication_redeclares_over_older_queues() {
    use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::{AMQPValue, ShortString};
    let config = parse_config(&test_config_toml("postgres://unused/x", "", ""));
    let t = hookline_bus::Topology::from_config(&config.amqp);
    assert_eq!(t.initial_group_size, 3);
    let conn = hookline_bus::connect(&config.amqp_urls, "hookline-test")
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    // The shape an older version declared: the same arguments without the group size.
    let older = |mut args: FieldTable| {
        let mut kept = FieldTable::default();
        for (k, v) in args.inner().iter() {
            if k.as_str() != "x-quorum-initial-group-size" {
                kept.insert(k.clone(), v.clone());
            }
        }
        args = kept;
        args
    };
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(
        t.dead_letter_queue.as_str().into(),
        durable,
        older(t.dead_letter_queue_arguments()),
    )
    .await
    .unwrap();
    ch.queue_declare(
        t.payments_queue.as_str().into(),
        durable,
        older(t.payments_queue_arguments()),
    )
    .await
    .unwrap();
    t.declare(&conn)
        .await
        .expect("redeclared with the group size");
    let other = hookline_bus::Topology {
        initial_group_size: 1,
        ..t.clone()
    };
    other
        .declare(&conn)
        .await
        .expect("redeclared with another group size");
    let args = t.payments_queue_arguments();
    assert_eq!(
        args.inner()
            .get(&ShortString::from("x-quorum-initial-group-size")),
        Some(&AMQPValue::LongLongInt(3))
    );
    for q in [&t.payments_queue, &t.dead_letter_queue] {
        ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await
            .ok();
    }
    for x in [&t.exchange, &t.dead_letter_exchange] {
        ch.exchange_delete(x.as_str().into(), Default::default())
            .await
            .ok();
    }
    conn.close(200, "".into()).await.ok();
}
