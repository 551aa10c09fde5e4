//! PostgreSQL faults during load, against the real binaries: the cluster restarted (`-m fast`), stopped for a
//! few seconds then started (E7, E8, W8, D2), and `webhook_events` locked against an edge with a pool of two
//! (E9). While the database is unavailable the edge answers 503 within 2 s, never 200; afterwards the edge and
//! the worker recover by themselves and every acknowledged event is processed once.
//!
//! Restarting PostgreSQL kills the connections of every test running at that moment: these tests are ignored by a
//! plain run and run alone (see `super`), serialized by the disruptive tests' lock; a [`PostgresGuard`] starts
//! the cluster again even if a test fails.

use std::time::{Duration, Instant};

use hookline_tests::faults::*;

use super::SERVICES as SERIAL;
const WAIT: Duration = Duration::from_secs(60);
/// Longest acceptable answer while the database is unavailable (`edge.db_timeout_ms` is 1.5 s).
const BUDGET: Duration = Duration::from_secs(2);

/// Every failed answer of the run was a 503 within the budget (never a 500, never a hang).
fn assert_failures_are_fast_503(report: &LoadReport) {
    let bad: Vec<&Attempt> = report
        .attempts
        .iter()
        .filter(|a| !a.is_2xx() && (a.status != Some(503) || a.latency > BUDGET))
        .collect();
    assert!(
        bad.is_empty(),
        "answers other than 2xx or a 503 within {BUDGET:?}: {:?}",
        bad.iter().take(5).collect::<Vec<_>>()
    );
}

/// Requests sent and answered inside `[from, to]`: all 503 within the budget, and at least `min` of them.
fn assert_unavailable_window(report: &LoadReport, from: Instant, to: Instant, min: usize) {
    let during: Vec<&Attempt> = report
        .attempts
        .iter()
        .filter(|a| a.within(from, to))
        .collect();
    assert!(
        during.len() >= min,
        "only {} requests fell inside the fault window",
        during.len()
    );
    let wrong: Vec<&&Attempt> = during
        .iter()
        .filter(|a| a.status != Some(503) || a.latency > BUDGET)
        .collect();
    assert!(
        wrong.is_empty(),
        "while the database was unavailable: {:?}",
        wrong.iter().take(5).collect::<Vec<_>>()
    );
    let slowest = during.iter().map(|a| a.latency).max().unwrap_or_default();
    report_line(&format!(
        "[faults] {} requests inside the {:.1}s fault window: all 503, slowest {slowest:?}",
        during.len(),
        (to - from).as_secs_f64()
    ));
}

/// Flushes dirty buffers first, so the shutdown checkpoint of the fault is short (with many test databases
/// around, an unprepared fast shutdown can spend half a minute syncing files).
async fn checkpoint(c: &Cluster) {
    sqlx::query("CHECKPOINT").execute(c.pool()).await.unwrap();
}

/// After recovery: new events are accepted at the first attempt (no pooled connection left broken or inside an
/// aborted transaction).
async fn after_recovery(c: &Cluster, tag: &str) -> LoadReport {
    let after = send_all(&Load::new(tag, 30).unique_only(), &c.base).await;
    assert_eq!(
        after.non_2xx() + after.transport_errors(),
        0,
        "the edge did not recover: {:?}",
        after.statuses()
    );
    after
}

/// `pg_ctlcluster … restart -m fast` during load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "disturbs the shared services: deploy/test.sh runs it alone (--ignored --test-threads=1 disruptive::)"]
async fn postgres_restarted_during_load() {
    let _serial = SERIAL.lock().await;
    let _pg = PostgresGuard::new();
    let mut c = Cluster::new("postgres_restarted_during_load", ClusterOptions::default()).await;
    checkpoint(&c).await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    let run = Load::new("pgr", 240).rate(60.0).start(&c.base);
    run.progress.wait_acked(60, WAIT).await;
    pg_ctlcluster("restart", &["-m", "fast"]).await;
    wait_postgres_up(WAIT).await;
    let report = run.finish().await;
    assert_failures_are_fast_503(&report);
    let after = after_recovery(&c, "pgr_after").await;
    c.check(&[&report, &after]).await;
    c.teardown().await;
}

/// `pg_ctlcluster … stop -m fast`, 3 s down, `start`, during load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "disturbs the shared services: deploy/test.sh runs it alone (--ignored --test-threads=1 disruptive::)"]
async fn postgres_stopped_then_started_during_load() {
    let _serial = SERIAL.lock().await;
    let pg = PostgresGuard::new();
    let mut c = Cluster::new(
        "postgres_stopped_then_started_during_load",
        ClusterOptions::default(),
    )
    .await;
    checkpoint(&c).await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    let mut load = Load::new("pgs", 240).rate(40.0);
    // More requests in flight, so that more of them fall inside the outage (each waits ~1.5 s for its 503).
    load.concurrency = 16;
    let run = load.start(&c.base);
    run.progress.wait_acked(40, WAIT).await;
    pg_ctlcluster("stop", &["-m", "fast"]).await;
    let down_from = Instant::now();
    // Hold the outage open.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let down_until = Instant::now();
    pg_ctlcluster("start", &[]).await;
    drop(pg);
    wait_postgres_up(WAIT).await;
    let report = run.finish().await;
    assert_unavailable_window(&report, down_from, down_until, 5);
    assert_failures_are_fast_503(&report);
    let after = after_recovery(&c, "pgs_after").await;
    c.check(&[&report, &after]).await;
    c.teardown().await;
}

/// `LOCK TABLE webhook_events IN ACCESS EXCLUSIVE MODE` held for 3 s during load, against an edge whose pool has
/// two connections: bounded waits (503 within 2 s), `/healthz` still 200, and every retried event stored and
/// processed once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "disturbs the shared services: deploy/test.sh runs it alone (--ignored --test-threads=1 disruptive::)"]
async fn table_locked_against_a_small_pool() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(
        "table_locked_against_a_small_pool",
        ClusterOptions {
            extra_edge: "db_max_connections = 2".into(),
            ..ClusterOptions::default()
        },
    )
    .await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    let run = Load::new("lock", 200).rate(50.0).start(&c.base);
    run.progress.wait_acked(50, WAIT).await;
    let mut lock = c.pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE webhook_events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let locked_from = Instant::now();
    // Hold the lock for 3 s, probing /healthz meanwhile: it never touches the database.
    let mut probes = 0;
    while locked_from.elapsed() < Duration::from_secs(3) {
        let (status, latency) = c.healthz().await.expect("/healthz answers");
        assert_eq!(status, 200, "/healthz while the table is locked");
        assert!(
            latency < Duration::from_secs(1),
            "/healthz took {latency:?}"
        );
        probes += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let locked_until = Instant::now();
    lock.commit().await.unwrap();
    let report = run.finish().await;
    assert!(probes >= 5);
    assert_unavailable_window(&report, locked_from, locked_until, 3);
    assert_failures_are_fast_503(&report);
    c.check(&[&report]).await;
    c.teardown().await;
}
