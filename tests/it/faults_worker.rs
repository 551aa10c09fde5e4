//! Worker faults during load, against the real `hookline-worker` process: SIGKILL between the commit and the
//! acks (W1) and inside the transaction (W2), each followed by a restart, and a poison message among the load
//! (W7/B10). Each test has its own database and RabbitMQ prefix, so they run in parallel.

use std::time::Duration;

use hookline_tests::faults::*;

const FREEZE: Duration = Duration::from_secs(60);

/// W1: every batch after the 10th is held by `worker.after_commit` (committed, not acknowledged) until the
/// worker's runtime threads are all held; SIGKILL; the broker requeues the committed deliveries, the restarted
/// worker finds their markers and applies nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn w1_worker_killed_between_commit_and_ack() {
    let mut c = Cluster::new(
        "w1_worker_killed_between_commit_and_ack",
        ClusterOptions::default(),
    )
    .await;
    let w = c
        .start_worker(Some("worker.after_commit=10*off->sleep(60000)"))
        .await;
    c.start_edge(None).await;
    let run = Load::new("w1", 200).rate(80.0).start(&c.base);
    c.wait_workers_frozen(10, 5, Duration::from_secs(1), FREEZE)
        .await;
    c.kill_worker(w);
    // The load finishes with no worker running; then everything is published and the broker has requeued the
    // killed worker's deliveries: the system is still, so the counts below are exact.
    let report = run.finish().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !c.unpublished_ids(Duration::ZERO).await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the relay did not publish the backlog"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counts = c.wait_consumers(0, Duration::from_secs(30)).await;
    let unprocessed = c.unprocessed_count().await;
    // Events on the queue beyond the unprocessed ones were committed before the kill: the window between commit
    // and ack was really hit, and those deliveries come back. Counted in events, not messages (a message may
    // carry a bundle); with no consumer, peeking changes nothing but a delivery count.
    let queued = c.queued_event_ids().await.len() as i64;
    assert!(
        queued > unprocessed,
        "committed-but-unacknowledged deliveries were requeued: {queued} events queued ({counts:?}), \
         {unprocessed} unprocessed events"
    );
    report_line(&format!(
        "[faults] w1: {} deliveries of already-committed events requeued by the kill",
        queued - unprocessed
    ));
    c.restart_worker(w, None).await;
    c.check(&[&report]).await;
    c.teardown().await;
}

/// W2: one transaction is held by `worker.before_commit` (idle in transaction, marker and effects written but
/// not committed); SIGKILL; PostgreSQL rolls it back; the redelivery applies the event once. A second worker
/// keeps consuming throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn w2_worker_killed_inside_transaction() {
    let mut c = Cluster::new(
        "w2_worker_killed_inside_transaction",
        ClusterOptions::default(),
    )
    .await;
    let w = c
        .start_worker(Some("worker.before_commit=10*off->1*sleep(60000)"))
        .await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    let run = Load::new("w2", 200).rate(80.0).start(&c.base);
    let deadline = std::time::Instant::now() + FREEZE;
    while stuck_worker_transactions(&c, Duration::from_secs(1)).await < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "no worker transaction was ever held open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.kill_worker(w);
    // The killed session disappears: PostgreSQL rolled its transaction back.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stuck_worker_transactions(&c, Duration::ZERO).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed worker's transaction is still open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.restart_worker(w, None).await;
    let report = run.finish().await;
    c.check(&[&report]).await;
    c.teardown().await;
}

/// Poison: one signed event with a negative `amount_received` among the load. It is stored (2xx: the provider
/// delivered it), the worker dead-letters exactly that one (`dead_letters` + DLQ) and processes all the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_message_dead_lettered_alone() {
    let mut c = Cluster::new(
        "poison_message_dead_lettered_alone",
        ClusterOptions::default(),
    )
    .await;
    c.start_worker(None).await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    let report = send_all(&Load::new("poison", 150).rate(100.0).poison(37), &c.base).await;
    let checked = c.check(&[&report]).await;
    assert_eq!(checked.dead_lettered, 1);
    assert_eq!(checked.processed, 149);
    let reasons: Vec<String> = sqlx::query_scalar("SELECT reason FROM dead_letters")
        .fetch_all(c.pool())
        .await
        .unwrap();
    assert!(
        reasons[0].contains("amount_received"),
        "the reason names the offending field: {reasons:?}"
    );
    c.teardown().await;
}

/// W8/W9 variant: the same deliveries handed back to the queue more often than the delivery limit by crashes
/// that are not the message's fault (here four SIGKILLs of a worker holding them inside its transaction; a
/// broker connection loss returns them the same way). A good message must still be processed once.
/// RabbitMQ 3.10 counts every requeue caused by a crash against the delivery limit, so good messages held by a
/// crash-looping worker can reach the DLQ with no failure recorded. They must not be lost: `hookline dlq`
/// reconciles the DLQ into `dead_letters` (a reason for each), and a redrive applies each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_crashes_dead_letter_good_messages_visibly_and_redrive_applies_them() {
    let mut c = Cluster::new(
        "repeated_crashes_do_not_dead_letter_good_messages",
        ClusterOptions {
            prefetch: 4,
            concurrency: 1,
            ..ClusterOptions::default()
        },
    )
    .await;
    c.start_edge(None).await;
    let report = send_all(&Load::new("crash", 20).unique_only(), &c.base).await;
    let hold = Some("worker.before_commit=sleep(60000)");
    let w = c.start_worker(hold).await;
    // delivery_limit is 3 in the test configuration: four returns exceed it.
    for round in 0..4 {
        let deadline = std::time::Instant::now() + FREEZE;
        while stuck_worker_transactions(&c, Duration::from_millis(300)).await < 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no transaction held"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        c.kill_worker(w);
        c.wait_consumers(0, Duration::from_secs(30)).await;
        let next = if round < 3 { hold } else { None };
        c.restart_worker(w, next).await;
    }
    // The crashed-on messages exceeded the limit: they sit in the DLQ, visible after reconciliation.
    let list = c.hookline(&["dlq", "list", "--json"]).await;
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let listed = String::from_utf8_lossy(&list.stdout).lines().count();
    assert!(listed >= 1, "dead-lettered good messages are listed");
    assert!(
        String::from_utf8_lossy(&list.stdout)
            .contains("delivery limit was reached through worker crashes"),
        "{}",
        String::from_utf8_lossy(&list.stdout)
    );
    let redrive = c
        .hookline(&[
            "dlq",
            "redrive",
            "--all",
            "--reason",
            "worker crash loop fixed",
        ])
        .await;
    assert!(
        redrive.status.success(),
        "{}",
        String::from_utf8_lossy(&redrive.stdout)
    );
    let pool = c.pool().clone();
    hookline_tests::wait_until(
        Duration::from_secs(60),
        "redriven dead letters resolved",
        || {
            let pool = pool.clone();
            async move {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                n == 0
            }
        },
    )
    .await;
    c.check(&[&report]).await;
    c.teardown().await;
}

/// A broker that accepts the TCP connection and never answers AMQP holds the worker's connect for up to its
/// timeout (15 s): SIGTERM meanwhile stops the worker at once, with exit 0 (nothing was in flight), instead of
/// after the connect gave up — the stop budget of compose and systemd is not spent on a dead broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_while_its_broker_never_answers_exits_at_once() {
    // The silent broker: accepts, reads nothing, answers nothing; keeps the sockets open.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (accepted_tx, mut accepted) = tokio::sync::mpsc::unbounded_channel();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            accepted_tx.send(()).ok();
        }
    });
    let mut c = Cluster::new(
        "a_worker_stopped_while_its_broker_never_answers",
        ClusterOptions {
            amqp_url: Some(format!("amqp://guest:guest@127.0.0.1:{port}/%2f")),
            ..ClusterOptions::default()
        },
    )
    .await;
    let w = c.spawn_worker();
    // The worker is inside its connect: the broker has its connection and has said nothing.
    tokio::time::timeout(Duration::from_secs(60), accepted.recv())
        .await
        .expect("the worker connects to the broker within 60 s")
        .expect("the silent broker runs");
    let pid = c.worker_pid(w).expect("the worker runs");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -TERM {pid}: {status}");
    // Well inside the 15 s connect timeout: the stop did not wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    let exited = loop {
        if let Some(status) = c.worker_exit_status(w) {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker still runs 8 s after SIGTERM while its broker never answered:\n{}",
            std::fs::read_to_string(c.worker_log(w)).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(exited.code(), Some(0), "{exited}");
    silent.abort();
    c.teardown().await;
}
