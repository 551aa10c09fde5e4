//! Domain events out under process death, with the real `hookline-worker` binary:
//! 1. a worker SIGKILLed after the effects (and their facts) committed but before anything was sent: a fresh worker
//!    sends every fact — nothing was lost with the process;
//! 2. a worker SIGKILLed after sending a batch but before recording the answers: after the lease the facts are
//!    sent again with the same `webhook-id`, and the receiver, deduplicating by it, acts on each once;
//! 3. a receiver that answers 500 to the first attempt of every message, with the DEFAULT `[delivery]` settings:
//!    the burst of first attempts opens the circuit breaker once (not once per failure, doubling), and every
//!    fact is delivered, once, within a few minutes.

use std::collections::HashSet;
use std::time::Duration;

use hookline_tests::faults::*;
use hookline_tests::receiver::{Behaviour, Receiver};
use hookline_tests::{secrets, stripe, stripe_headers};

const WAIT: Duration = Duration::from_secs(90);
const FACTS: usize = 24;

async fn fact_ids(c: &Cluster) -> HashSet<String> {
    sqlx::query_scalar::<_, String>("SELECT id FROM domain_events")
        .fetch_all(c.pool())
        .await
        .expect("facts")
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_before_or_after_sending_loses_and_doubles_nothing() {
    let receiver = Receiver::start();
    receiver.configure("erp", Behaviour::Ok, &[secrets::STANDARD]);
    let mut c = Cluster::new(
        "delivery_killed",
        ClusterOptions {
            tail: format!(
                "[delivery]\ntimeout_ms = 1000\nbackoff_base_ms = 50\nbackoff_max_secs = 1\npoll_interval_ms = 50\n\
                 [[destinations]]\nname = \"erp\"\nurl = \"{}\"\nsecrets = [\"{}\"]\nevents = [\"*\"]\n",
                receiver.url("erp"),
                secrets::STANDARD
            ),
            ..ClusterOptions::default()
        },
    )
    .await;
    c.start_edge(None).await;

    // 1. Effects and facts commit; this worker never sends (its delivery loop claims nothing); SIGKILL.
    let slot = c.start_worker(Some("deliver.before_claim=return")).await;
    let pool = post_payments_until_facts(&c, "k", FACTS).await;
    c.kill_worker(slot);
    assert!(
        receiver.received().is_empty(),
        "nothing was sent before the kill"
    );

    // 2. A worker that sends a batch and hangs before recording the answers; SIGKILL once the receiver saw it.
    c.restart_worker(slot, Some("deliver.after_send=sleep(600000)"))
        .await;
    let deadline = std::time::Instant::now() + WAIT;
    while receiver.received().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the hung worker never sent"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.kill_worker(slot);
    let sent_before_kill: HashSet<String> = receiver
        .received()
        .into_iter()
        .map(|r| r.webhook_id)
        .collect();
    let unrecorded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM domain_deliveries WHERE status = 'pending' AND lease_until IS NOT NULL",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(unrecorded > 0, "the killed worker recorded nothing it sent");

    // 3. A healthy worker: after the lease, everything arrives; the re-sent ones carry the same id.
    c.restart_worker(slot, None).await;
    let everything = fact_ids(&c).await;
    hookline_tests::wait_until(WAIT, "every fact reached the receiver", || {
        let done = receiver.acted("erp") == everything;
        async move { done }
    })
    .await;
    hookline_tests::wait_for_count(
        &pool,
        WAIT,
        "every delivery recorded as delivered",
        "SELECT count(*) FROM domain_deliveries WHERE status = 'delivered'",
        FACTS as i64,
    )
    .await;
    let received = receiver.received();
    assert!(received.iter().all(|r| r.signature_valid));
    for id in &sent_before_kill {
        let n = received.iter().filter(|r| &r.webhook_id == id).count();
        assert!(
            n >= 2,
            "{id} was sent again after the kill, with the same webhook-id"
        );
    }
    let distinct: HashSet<&str> = received.iter().map(|r| r.webhook_id.as_str()).collect();
    assert_eq!(distinct.len(), FACTS, "no new id for a re-sent fact");
    assert_eq!(receiver.max_acted_per_id(), 1, "each fact acted on once");
    assert_eq!(fact_ids(&c).await.len(), FACTS, "no fact doubled");
    c.teardown().await;
    receiver.stop().await;
}

/// A destination that fails the first attempt of every message still receives every fact within its backoff
/// schedule: the first round (8 first attempts, all 500) opens the breaker once for the default 30 s; the
/// half-open trial is the oldest fact (a retry, accepted); the next burst of first attempts opens it once more
/// for 30 s, not 30·2ⁿ. On the old code one round of 8 failures opened it for 240 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_failing_every_first_attempt_gets_every_fact_with_default_settings() {
    const BURST: usize = 20;
    const DEADLINE: Duration = Duration::from_secs(150);
    let receiver = Receiver::start();
    receiver.configure("erp", Behaviour::FailFirstAttempt, &[secrets::STANDARD]);
    let mut c = Cluster::new(
        "delivery_breaker",
        ClusterOptions {
            // No [delivery] table: every delivery setting is its default (8 in flight, threshold 5, 30 s).
            tail: format!(
                "[[destinations]]\nname = \"erp\"\nurl = \"{}\"\nsecrets = [\"{}\"]\nevents = [\"*\"]\n",
                receiver.url("erp"),
                secrets::STANDARD
            ),
            ..ClusterOptions::default()
        },
    )
    .await;
    c.start_edge(None).await;
    // The facts commit while this worker sends nothing, so the first round is one burst of first attempts.
    let slot = c.start_worker(Some("deliver.before_claim=return")).await;
    let pool = post_payments_until_facts(&c, "b", BURST).await;
    c.kill_worker(slot);
    let everything = fact_ids(&c).await;
    assert_eq!(everything.len(), BURST);

    c.restart_worker(slot, None).await;
    let started = std::time::Instant::now();
    loop {
        let acted = receiver.acted("erp");
        if acted == everything {
            break;
        }
        if started.elapsed() > DEADLINE {
            let attempts: Vec<(String, i64)> = sqlx::query_as(
                "SELECT status, count(*) FROM domain_deliveries GROUP BY status ORDER BY status",
            )
            .fetch_all(&pool)
            .await
            .unwrap_or_default();
            panic!(
                "after {:?} with the default settings the receiver acted on {} of {BURST} facts \
                 ({} requests; deliveries by status: {attempts:?})",
                started.elapsed(),
                acted.len(),
                receiver.received().len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    hookline_tests::wait_for_count(
        &pool,
        WAIT,
        "every delivery recorded as delivered",
        "SELECT count(*) FROM domain_deliveries WHERE status = 'delivered'",
        BURST as i64,
    )
    .await;
    let received = receiver.received();
    assert!(
        received.iter().all(|r| r.signature_valid),
        "every request carried a valid Standard Webhooks signature"
    );
    assert_eq!(receiver.max_acted_per_id(), 1, "each fact acted on once");
    for id in &everything {
        let ok = received
            .iter()
            .filter(|r| &r.webhook_id == id && r.status == 200)
            .count();
        assert_eq!(ok, 1, "{id} was delivered (answered 2xx) exactly once");
    }
    eprintln!(
        "all {BURST} facts delivered in {took:?}, {} requests",
        received.len()
    );
    c.teardown().await;
    receiver.stop().await;
}

/// Posts `n` succeeded Stripe payments (`evt_{prefix}{i}`, amount 1000 + i) to the cluster's edge, each acked,
/// and waits until their `n` facts are committed; returns the cluster's pool.
async fn post_payments_until_facts(c: &Cluster, prefix: &str, n: usize) -> sqlx::PgPool {
    let http = reqwest::Client::new();
    for i in 0..n {
        let body = stripe::payment_intent(
            &format!("evt_{prefix}{i}"),
            "succeeded",
            &format!("pi_{prefix}{i}"),
            1000 + i as i64,
        );
        let mut req = http
            .post(format!("{}/webhooks/stripe", c.base))
            .body(body.clone());
        for (name, value) in stripe_headers(secrets::STRIPE, hookline_tests::now(), &body) {
            req = req.header(name, value);
        }
        assert_eq!(req.send().await.expect("post").status().as_u16(), 200);
    }
    let pool = c.pool().clone();
    hookline_tests::wait_for_count(
        &pool,
        WAIT,
        "every fact committed",
        "SELECT count(*) FROM domain_events",
        n as i64,
    )
    .await;
    pool
}
