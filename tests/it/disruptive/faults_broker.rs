//! RabbitMQ faults during load, against the real binaries: every connection closed twice, and the broker
//! application stopped and started (W9, E10). The edge keeps answering 2xx from the database; the worker and
//! the relay reconnect by themselves; after the drain the worker's prefetch is honoured again.
//!
//! These tests disturb the shared broker: they are ignored by a plain run and run alone (see `super`), and take
//! the disruptive tests' lock; a [`BrokerGuard`] restarts the broker app even if a test fails.

use std::time::Duration;

use hookline_tests::faults::*;
use hookline_tests::wait_until;

use super::SERVICES as SERIAL;
const WAIT: Duration = Duration::from_secs(60);

fn options() -> ClusterOptions {
    ClusterOptions {
        prefetch: 8,
        concurrency: 4,
        ..ClusterOptions::default()
    }
}

/// The broker is not the source of truth: every request got a 2xx at its first attempt.
fn assert_edge_always_2xx(report: &LoadReport) {
    assert_eq!(
        report.non_2xx() + report.transport_errors(),
        0,
        "the edge answered something other than 2xx while the broker was disturbed: {:?}",
        report.statuses()
    );
}

/// Waits until the worker and the relay have each connected `n` times (the first start included).
async fn reconnected(c: &Cluster, n: usize) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let sessions = c.log_messages("worker", "worker consuming").len();
        let relay = c.log_messages("edge", "relay connected").len();
        if sessions >= n && relay >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not reconnected {n} times within {WAIT:?}: worker {sessions}, relay {relay}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many times the worker's domain relay has connected to RabbitMQ.
fn domain_relay_connections(c: &Cluster) -> usize {
    c.log_messages("worker", "connected to RabbitMQ")
        .iter()
        .filter(|f| f["connection"] == "hookline-domain-relay")
        .count()
}

/// A connection the broker closes while nothing is being published is replaced by itself, before any event
/// needs it: the edge's relay and the worker's domain relay notice the closed connection (not a failed publish,
/// which on a closing connection may never return) and reconnect; events sent afterwards go all the way through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "disturbs the shared services: deploy/test.sh runs it alone (--ignored --test-threads=1 disruptive::)"]
async fn idle_publishers_reconnect_after_connection_loss() {
    let _serial = SERIAL.lock().await;
    let _broker = BrokerGuard::new();
    let mut c = Cluster::new("idle_publishers_reconnect_after_connection_loss", options()).await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    reconnected(&c, 1).await;
    wait_until(WAIT, "the domain relay connected", || async {
        domain_relay_connections(&c) >= 1
    })
    .await;
    rabbitmqctl(&["close_all_connections", "fault test: idle connection loss"]).await;
    reconnected(&c, 2).await;
    wait_until(WAIT, "the domain relay reconnected", || async {
        domain_relay_connections(&c) >= 2
    })
    .await;
    let run = Load::new("idle", 40).rate(40.0).start(&c.base);
    let report = run.finish().await;
    assert_edge_always_2xx(&report);
    c.check(&[&report]).await;
    c.teardown().await;
}

/// `rabbitmqctl close_all_connections`, twice during load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "disturbs the shared services: deploy/test.sh runs it alone (--ignored --test-threads=1 disruptive::)"]
async fn connections_closed_twice_during_load() {
    let _serial = SERIAL.lock().await;
    let _broker = BrokerGuard::new();
    let mut c = Cluster::new("connections_closed_twice_during_load", options()).await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    let run = Load::new("cc", 240).rate(60.0).start(&c.base);
    run.progress.wait_acked(60, WAIT).await;
    rabbitmqctl(&["close_all_connections", "fault test: connection loss 1"]).await;
    // The second loss only counts once both have come back from the first (on a loaded machine the relay may
    // still be reconnecting, and one reconnection would then cover both losses).
    reconnected(&c, 2).await;
    run.progress.wait_acked(140, WAIT).await;
    rabbitmqctl(&["close_all_connections", "fault test: connection loss 2"]).await;
    reconnected(&c, 3).await;
    let report = run.finish().await;
    assert_edge_always_2xx(&report);
    c.check(&[&report]).await;
    // Both reconnected by themselves, once per loss.
    let sessions = c.log_messages("worker", "worker consuming").len();
    let relay = c.log_messages("edge", "relay connected").len();
    assert!(sessions >= 3, "worker consumer sessions: {sessions}");
    assert!(relay >= 3, "relay connections: {relay}");
    let backlog = assert_prefetch_honoured(&c, "cc_backlog").await;
    c.check(&[&report, &backlog]).await;
    c.teardown().await;
}

/// `rabbitmqctl stop_app` during load, 60 events acknowledged while it is down, then `start_app`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "disturbs the shared services: deploy/test.sh runs it alone (--ignored --test-threads=1 disruptive::)"]
async fn broker_app_stopped_and_started_during_load() {
    let _serial = SERIAL.lock().await;
    let broker = BrokerGuard::new();
    let mut c = Cluster::new("broker_app_stopped_and_started_during_load", options()).await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    // 600 events at 60/s last 10 s: enough for 60 more after `stop_app` returns even when stopping the app takes
    // seconds on a loaded machine (with 240 the load once ended before it returned, and 60 more never came).
    let run = Load::new("app", 600).rate(60.0).start(&c.base);
    run.progress.wait_acked(60, WAIT).await;
    rabbitmqctl(&["stop_app"]).await;
    let down_at = run.progress.acked();
    assert!(
        down_at + 60 <= 600,
        "stop_app took the whole load ({down_at} acknowledged)"
    );
    // The edge keeps acknowledging from the database while the broker is away.
    run.progress.wait_acked(down_at + 60, WAIT).await;
    rabbitmqctl(&["start_app"]).await;
    drop(broker); // also waits for the broker to finish starting
    let report = run.finish().await;
    assert_edge_always_2xx(&report);
    c.check(&[&report]).await;
    let backlog = assert_prefetch_honoured(&c, "app_backlog").await;
    c.check(&[&report, &backlog]).await;
    c.teardown().await;
}
