//! Replay storm during live traffic (R1/R3): `hookline replay --all --rate 0` re-delivers every stored event
//! while the load runs and the workers consume, racing live deliveries of the same ids. The ledger must be
//! exactly the model: a replay never applies an effect twice.

use std::time::Duration;

use hookline_tests::faults::*;
use hookline_tests::ledger_checksum;

const WAIT: Duration = Duration::from_secs(60);

async fn replay_all(c: &Cluster) -> i64 {
    let out = c
        .hookline(&["replay", "--all", "--reason", "storm test", "--rate", "0"])
        .await;
    assert!(
        out.status.success(),
        "hookline replay failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The audit row: a finished run, and how many events it re-delivered.
    let (published, finished): (i64, bool) = sqlx::query_as(
        "SELECT published, finished_at IS NOT NULL FROM replay_runs ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(c.pool())
    .await
    .expect("the replay run is audited");
    assert!(finished, "the replay run is recorded as finished");
    published
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_storm_during_live_traffic() {
    let mut c = Cluster::new(
        "replay_storm_during_live_traffic",
        ClusterOptions::default(),
    )
    .await;
    c.start_worker(None).await;
    c.start_worker(None).await;
    c.start_edge(None).await;
    let run = Load::new("storm", 240).rate(60.0).start(&c.base);
    run.progress.wait_acked(100, WAIT).await;
    let stored_before = c.stored_ids().await.len() as i64;
    let published = replay_all(&c).await;
    assert!(
        published >= stored_before,
        "the replay re-delivered every event stored before it started ({published} < {stored_before})"
    );
    let report = run.finish().await;
    c.check(&[&report]).await;

    // A second storm once everything is applied: the ledger does not change at all.
    let before = ledger_checksum(c.pool()).await;
    let published = replay_all(&c).await;
    assert_eq!(published, 240, "the second replay re-delivered every event");
    c.check(&[&report]).await;
    assert_eq!(
        ledger_checksum(c.pool()).await,
        before,
        "a replay changed the ledger"
    );
    report_line(&format!(
        "[faults] replay_storm_during_live_traffic: first replay re-delivered >= {stored_before} events during \
         the load, second replay {published}"
    ));
    c.teardown().await;
}
