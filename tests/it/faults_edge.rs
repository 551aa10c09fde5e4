//! Edge crashes (SIGKILL of the real `hookline-edge` process, held at a fail point) during load, each followed by
//! a restart on the same port while the provider-like driver keeps retrying (reliability-scenarios.md E1–E3).
//! Each test has its own database, RabbitMQ prefix and port, so they run in parallel.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hookline_tests::faults::*;

const STALL: Duration = Duration::from_secs(60);
const QUIET: Duration = Duration::from_millis(500);

/// E1: the edge dies before the commit. The requests held at `edge.before_commit` stored nothing and got no
/// answer; after the restart the driver's retry stores each of them for the first time (one row) and it is
/// processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn e1_edge_killed_before_commit() {
    let mut c = Cluster::new("e1_edge_killed_before_commit", ClusterOptions::default()).await;
    c.start_worker(None).await;
    // The first 40 passes go through; every later request hangs inside the handler, before the INSERT.
    c.start_edge(Some("edge.before_commit=40*off->sleep(60000)"))
        .await;
    let run = Load::new("e1", 150).rate(100.0).start(&c.base);
    let hung = run.progress.wait_stalled(20, QUIET, STALL).await;
    let acked = run.progress.acked_ids();
    let stored = c.stored_ids().await;
    // Held before the commit: in flight, never acknowledged, nothing stored. (Others in flight may be stuck
    // behind a held thread after their commit: those are E2 cases, checked by the checker like the rest.)
    let held: HashSet<String> = hung
        .iter()
        .filter(|id| !acked.contains(*id) && !stored.contains(*id))
        .cloned()
        .collect();
    assert!(
        !held.is_empty(),
        "no request was held before its commit (in flight: {hung:?})"
    );
    let acked_not_stored: Vec<&String> = acked.difference(&stored).collect();
    assert!(
        acked_not_stored.is_empty(),
        "acknowledged but not stored: {acked_not_stored:?}"
    );
    c.kill_edge();
    c.start_edge(None).await;
    let report = run.finish().await;

    // Every held request was cut by the kill and retried until a 2xx, and that retry stored it first.
    for id in &held {
        let attempts = report.attempts_of(id);
        assert!(
            attempts.iter().any(|a| a.status.is_none()),
            "{id}: the kill cut a request"
        );
        assert!(
            attempts
                .iter()
                .any(|a| a.is_2xx() && a.duplicate == Some(false)),
            "{id}: stored by a retry after the restart: {attempts:?}"
        );
    }
    report_line(&format!(
        "[faults] e1: {} requests held before their commit when the edge was killed",
        held.len()
    ));
    let checked = c.check(&[&report]).await;
    assert_eq!(checked.stored, 150, "one row per event");
    c.teardown().await;
}

/// E2: the edge dies after the commit, before answering. The held requests' rows are committed; the driver's
/// retry gets 200 `duplicate: true`, and the effect happens once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn e2_edge_killed_after_commit_before_answer() {
    let mut c = Cluster::new(
        "e2_edge_killed_after_commit_before_answer",
        ClusterOptions::default(),
    )
    .await;
    c.start_worker(None).await;
    c.start_edge(Some("edge.after_commit=40*off->sleep(60000)"))
        .await;
    let run = Load::new("e2", 150).rate(100.0).start(&c.base);
    let hung = run.progress.wait_stalled(20, QUIET, STALL).await;
    let acked = run.progress.acked_ids();
    let stored = c.stored_ids().await;
    // Committed but never answered: stored, not acknowledged.
    let committed_unanswered: HashSet<String> = hung
        .intersection(&stored)
        .filter(|id| !acked.contains(*id))
        .cloned()
        .collect();
    assert!(
        !committed_unanswered.is_empty(),
        "some held request had committed its row (hung {hung:?})"
    );
    c.kill_edge();
    c.start_edge(None).await;
    let report = run.finish().await;

    for id in &committed_unanswered {
        let attempts = report.attempts_of(id);
        let first_ok = attempts
            .iter()
            .find(|a| a.is_2xx())
            .unwrap_or_else(|| panic!("{id} never acknowledged: {attempts:?}"));
        assert_eq!(
            first_ok.duplicate,
            Some(true),
            "{id}: the retry after the restart is a duplicate of the committed row: {attempts:?}"
        );
    }
    report_line(&format!(
        "[faults] e2: {} requests committed but unanswered when the edge was killed; their retries were \
         answered as duplicates",
        committed_unanswered.len()
    ));
    let checked = c.check(&[&report]).await;
    assert_eq!(checked.stored, 150, "one row per event");
    c.teardown().await;
}

/// E3: commit and 2xx done, but the publish never happens (the embedded relay is held at
/// `relay.before_publish`, then the edge is killed). The acknowledged rows stay unpublished; after the restart
/// the sweeper publishes them and each is processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn e3_acknowledged_but_never_published() {
    let mut c = Cluster::new(
        "e3_acknowledged_but_never_published",
        ClusterOptions::default(),
    )
    .await;
    c.start_worker(None).await;
    c.start_edge(Some("relay.before_publish=5*off->sleep(60000)"))
        .await;
    let run = Load::new("e3", 150).rate(60.0).start(&c.base);
    // Stranded: acknowledged, yet still unpublished well past the sweeper's minimum age (300 ms) and longer
    // than a relay round takes on a loaded 2-core machine (a round let through by the fail point before it
    // stalls can still publish rows that are a second old, which are then not stranded at all).
    let deadline = Instant::now() + STALL;
    let stranded = loop {
        let acked = run.progress.acked_ids();
        let stranded: HashSet<String> = c
            .unpublished_ids(Duration::from_secs(3))
            .await
            .intersection(&acked)
            .cloned()
            .collect();
        if !stranded.is_empty() {
            break stranded;
        }
        assert!(Instant::now() < deadline, "the relay never got stuck");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let held_from = Instant::now();
    // Let the load run against the stuck relay for a while (the fault window: longer than the edge's 1.5 s
    // store budget, so what the edge answers meanwhile is visible), then crash the edge.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held_until = Instant::now();
    c.kill_edge();
    let unpublished = c.unpublished_ids(Duration::ZERO).await;
    assert!(
        stranded.is_subset(&unpublished),
        "the stranded rows are still unpublished after the crash"
    );
    c.start_edge(None).await;
    let report = run.finish().await;
    let checked = c.check(&[&report]).await;
    assert_eq!(checked.stored, 150, "one row per event");
    let published: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM webhook_events e
             WHERE NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = e.id)",
    )
    .fetch_one(c.pool())
    .await
    .unwrap();
    assert_eq!(published, 150, "the sweeper published every stranded row");
    // Answers received while the relay was held (whenever their request was sent).
    let during: Vec<&Attempt> = report
        .attempts
        .iter()
        .filter(|a| a.ended_at() >= held_from && a.ended_at() <= held_until)
        .collect();
    report_line(&format!(
        "[faults] e3: {} acknowledged rows stranded by the held relay; answers received while it was held: \
         {} 2xx, {} 503, {} other",
        stranded.len(),
        during.iter().filter(|a| a.is_2xx()).count(),
        during.iter().filter(|a| a.status == Some(503)).count(),
        during
            .iter()
            .filter(|a| !a.is_2xx() && a.status != Some(503))
            .count()
    ));
    c.teardown().await;
}
