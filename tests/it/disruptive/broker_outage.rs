//! RabbitMQ faults during load: the broker app stopped and started, and every connection closed. Acknowledged
//! events are all processed once after it returns. These tests disturb the shared broker, so they are ignored
//! by a plain run and run alone, and take the disruptive tests' lock (see `super`).

use std::time::Duration;

use hookline_tests::faults::rabbitmqctl;
use hookline_tests::stripe;
use hookline_tests::*;

use super::SERVICES as BROKER;
const DRAIN: Duration = Duration::from_secs(120);

async fn post_batch(p: &TestPipeline, from: i64, to: i64) {
    for i in from..to {
        let body = stripe::payment_intent(
            &format!("evt_b_{i}"),
            "succeeded",
            &format!("pi_b_{i}"),
            100 + i,
        );
        let res = p.edge.post_stripe(&body).await;
        assert_eq!(
            res.status(),
            200,
            "the edge answers from the database, broker or not"
        );
    }
}

async fn assert_all_once(p: &TestPipeline, n: i64) {
    p.drain(DRAIN).await;
    let pool = p.pool();
    let processed: i64 = sqlx::query_scalar("SELECT count(*) FROM processed_events")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(processed, n);
    assert_eq!(assert_ledger_balanced(pool).await, n);
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(dead, 0, "nothing dead-lettered by the outage");
}

/// `rabbitmqctl stop_app` while events arrive, then `start_app`: all acknowledged events are processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "disturbs the shared services: deploy/test.sh runs it alone (--ignored --test-threads=1 disruptive::)"]
async fn broker_app_stopped_during_load() {
    let _guard = BROKER.lock().await;
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    post_batch(&p, 0, 20).await;
    rabbitmqctl(&["stop_app"]).await;
    let result = std::panic::AssertUnwindSafe(post_batch(&p, 20, 70));
    let posted = futures::FutureExt::catch_unwind(result).await;
    rabbitmqctl(&["start_app"]).await; // always restore the broker for the other tests
    posted.expect("posting during the outage");
    post_batch(&p, 70, 90).await;
    assert_all_once(&p, 90).await;
    worker.stop().await;
    p.teardown().await;
}

/// `rabbitmqctl close_all_connections` during load: the worker and the relay reconnect by themselves, the worker
/// re-applies its prefetch, and every event is processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "disturbs the shared services: deploy/test.sh runs it alone (--ignored --test-threads=1 disruptive::)"]
async fn all_connections_closed_during_load() {
    let _guard = BROKER.lock().await;
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    post_batch(&p, 0, 30).await;
    rabbitmqctl(&["close_all_connections", "test: connection loss"]).await;
    post_batch(&p, 30, 60).await;
    rabbitmqctl(&["close_all_connections", "test: connection loss again"]).await;
    post_batch(&p, 60, 80).await;
    assert_all_once(&p, 80).await;
    worker.stop().await;
    p.teardown().await;
}
