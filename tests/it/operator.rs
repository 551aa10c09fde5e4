//! Operator commands (`hookline replay`, `dlq`, `status`) run as the real binary against real services.

use std::process::Output;
use std::time::Duration;

use futures::StreamExt;
use hookline_tests::stripe;
use hookline_tests::*;

const DRAIN: Duration = Duration::from_secs(60);

async fn scalar(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// Runs `hookline --config FILE args…` to completion.
async fn hookline(p: &TestPipeline, args: &[&str]) -> Output {
    let config = p.config_file();
    let mut cmd = tokio::process::Command::new(binary("hookline"));
    cmd.env_remove("DATABASE_URL")
        .env_remove("AMQP_URL")
        .env_remove("HOOKLINE_CONFIG")
        .arg("--config")
        .arg(&config)
        .args(args);
    cmd.output_within(CLI_TIMEOUT).await
}

/// Ready + unacknowledged messages of `queue` (`rabbitmqctl list_queues`), `None` when not listed.
async fn messages_in_queue(queue: &str) -> Option<u64> {
    let out = tokio::process::Command::new("rabbitmqctl")
        .args(["-q", "list_queues", "name", "messages"])
        .output()
        .await
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let mut cols = l.split_whitespace();
        (cols.next()? == queue).then(|| cols.next()?.parse().ok())?
    })
}

/// Runs `hookline` and asserts it succeeded.
async fn hookline_ok(p: &TestPipeline, args: &[&str]) -> Output {
    let out = hookline(p, args).await;
    assert!(out.status.success(), "hookline {args:?}: {}", text(&out));
    out
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn post_many(p: &TestPipeline, n: usize, prefix: &str) {
    let statuses: Vec<u16> = futures::stream::iter(0..n)
        .map(|i| async move {
            let body = stripe::payment_intent(
                &format!("evt_{prefix}_{i}"),
                "succeeded",
                &format!("pi_{prefix}_{i}"),
                1_000 + i as i64,
            );
            p.edge.deliver_stripe(&body).await
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}

/// Pipeline whose edge does not publish (no embedded relay): stored events reach the queue only by replay.
async fn pipeline_without_relay() -> TestPipeline {
    let db = TestDb::new().await;
    let toml = test_config_toml(
        &db.url,
        "",
        "[relay]\nembedded = false\n[worker]\nprefetch = 32\nconcurrency = 8",
    );
    let config = parse_config(&toml);
    let edge = TestEdge::spawn_on(db, config.clone()).await;
    TestPipeline { edge, config, toml }
}

/// Replaying 1,000 already-processed events re-delivers them all and leaves the ledger byte-for-byte unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_of_processed_events_leaves_ledger_unchanged() {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    post_many(&p, 1000, "rp").await;
    p.drain(DRAIN).await;
    let pool = p.pool();
    assert_eq!(assert_ledger_balanced(pool).await, 1000);
    let before = ledger_checksum(pool).await;
    let payments_before = scalar(pool, "SELECT count(*) FROM payment_transitions").await;

    let out = hookline(
        &p,
        &[
            "replay",
            "--all",
            "--rate",
            "0",
            "--reason",
            "test: replay processed",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("1000 events re-delivered"),
        "{}",
        text(&out)
    );
    // Let the worker consume every replayed message, then stop it gracefully (waits for in-flight acks).
    let queue = p.topology().payments_queue;
    wait_until(DRAIN, "replayed messages consumed", || async {
        p.queue_depth(&queue).await == 0
    })
    .await;
    worker.stop().await;
    assert_eq!(
        p.queue_depth(&queue).await,
        0,
        "every replayed message was acked"
    );
    assert_eq!(ledger_checksum(pool).await, before, "ledger unchanged");
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM payment_transitions").await,
        payments_before
    );
    let audit: (String, i64, i64, bool) = sqlx::query_as(
        "SELECT reason, selected, published, finished_at IS NOT NULL FROM replay_runs WHERE kind = 'replay'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(audit, ("test: replay processed".into(), 1000, 1000, true));
    p.teardown().await;
}

/// Replaying events that were never published or processed applies each exactly once; a dry run before it
/// reports the count and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_of_unprocessed_events_applies_them_once() {
    let p = pipeline_without_relay().await;
    post_many(&p, 50, "un").await;
    let pool = p.pool();
    let dry = hookline(
        &p,
        &[
            "replay",
            "--unprocessed",
            "--dry-run",
            "--reason",
            "look first",
        ],
    )
    .await;
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(
        text(&dry).contains("50 events would be re-delivered"),
        "{}",
        text(&dry)
    );
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM replay_runs").await,
        0,
        "dry run changes nothing"
    );

    let missing_reason = hookline(&p, &["replay", "--unprocessed"]).await;
    assert_eq!(
        missing_reason.status.code(),
        Some(2),
        "{}",
        text(&missing_reason)
    );

    let out = hookline(
        &p,
        &[
            "replay",
            "--unprocessed",
            "--provider",
            "stripe",
            "--rate",
            "0",
            "--reason",
            "relay was off",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    // Replay the same selection again before any worker ran: the queue now holds every event twice.
    let again = hookline(
        &p,
        &[
            "replay",
            "--unprocessed",
            "--rate",
            "0",
            "--reason",
            "twice on purpose",
        ],
    )
    .await;
    assert!(again.status.success(), "{}", text(&again));
    let worker = p.spawn_worker();
    p.drain(DRAIN).await;
    let queue = p.topology().payments_queue;
    wait_until(DRAIN, "queue drained", || async {
        p.queue_depth(&queue).await == 0
    })
    .await;
    worker.stop().await;
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM processed_events").await,
        50
    );
    assert_eq!(
        assert_ledger_balanced(pool).await,
        50,
        "each applied once despite two replays"
    );
    p.teardown().await;
}

/// `--unprocessed` selects exactly the events without a marker: with 10 of 30 already processed, the run
/// selects and publishes 20, and the queue holds those 20 and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_unprocessed_selects_only_events_without_a_marker() {
    let p = pipeline_without_relay().await;
    post_many(&p, 30, "mix").await;
    let pool = p.pool();
    let handler = hookline_billing::payments_handler(p.config.providers.values());
    let processed: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM webhook_events ORDER BY id LIMIT 10")
            .fetch_all(pool)
            .await
            .unwrap();
    for id in &processed {
        let r = hookline_consumer::process_event(pool, &handler, *id).await;
        assert!(
            matches!(r, Ok(hookline_consumer::Processed::Applied(_))),
            "{r:?}"
        );
    }
    let out = hookline_ok(
        &p,
        &[
            "replay",
            "--unprocessed",
            "--rate",
            "0",
            "--reason",
            "mixed",
        ],
    )
    .await;
    assert!(text(&out).contains("20 events selected"), "{}", text(&out));
    assert_eq!(
        scalar(pool, "SELECT published FROM replay_runs").await,
        20,
        "only the unprocessed are published"
    );
    let queue = p.topology().payments_queue;
    assert_eq!(p.queue_depth(&queue).await, 20);
    // Exactly the unprocessed ones: apply the queue and count markers per event.
    let worker = p.spawn_worker();
    p.drain(DRAIN).await;
    wait_until(DRAIN, "queue drained", || async {
        p.queue_depth(&queue).await == 0
    })
    .await;
    worker.stop().await;
    assert_eq!(
        scalar(pool, "SELECT count(*) FROM processed_events").await,
        30
    );
    assert_eq!(assert_ledger_balanced(pool).await, 30);
    p.teardown().await;
}

/// A redelivery of an applied event changes nothing in the database: one marker (not rewritten), no second
/// transition, no second posting; `process_event` reports it as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redelivery_changes_nothing_in_the_database() {
    let p = pipeline_without_relay().await;
    post_many(&p, 5, "redeliver").await;
    let pool = p.pool();
    let worker = p.spawn_worker();
    let replay = |reason: &'static str| {
        let p = &p;
        async move {
            hookline_ok(p, &["replay", "--all", "--rate", "0", "--reason", reason]).await;
        }
    };
    replay("first delivery").await;
    p.drain(DRAIN).await;
    let snapshot = || async {
        (
            scalar(pool, "SELECT count(*) FROM processed_events").await,
            scalar(
                pool,
                "SELECT count(*) FROM processed_events WHERE outcome = 'applied'",
            )
            .await,
            scalar(pool, "SELECT count(*) FROM payment_transitions").await,
            scalar(pool, "SELECT count(*) FROM ledger_transactions").await,
            scalar(pool, "SELECT count(*) FROM ledger_entries").await,
            scalar(
                pool,
                "SELECT coalesce(extract(epoch FROM max(processed_at))::bigint * 1000000
                        + extract(microseconds FROM max(processed_at))::bigint, 0)
                 FROM processed_events",
            )
            .await,
        )
    };
    let before = snapshot().await;
    assert_eq!((before.0, before.1, before.3), (5, 5, 5));
    replay("redelivery 1").await;
    replay("redelivery 2").await;
    let queue = p.topology().payments_queue;
    // Ready AND unacknowledged: every redelivered message was processed and acknowledged.
    wait_until(DRAIN, "both redeliveries consumed and acked", || async {
        messages_in_queue(&queue).await == Some(0)
    })
    .await;
    worker.stop().await;
    assert_eq!(snapshot().await, before, "a redelivery wrote something");
    let handler = hookline_billing::payments_handler(p.config.providers.values());
    let id: i64 = scalar(pool, "SELECT min(id) FROM webhook_events").await;
    let again = hookline_consumer::process_event(pool, &handler, id).await;
    assert!(
        matches!(again, Ok(hookline_consumer::Processed::Duplicate)),
        "{again:?}"
    );
    assert_eq!(snapshot().await, before);
    p.teardown().await;
}

/// An interrupted replay (SIGINT) resumes from its cursor: every selected event reaches the queue exactly once
/// across the two runs — nothing skipped, nothing doubled — and is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interrupted_replay_resumes_without_skipping_or_doubling() {
    let p = pipeline_without_relay().await;
    post_many(&p, 300, "int").await;
    let pool = p.pool().clone();
    let config = p.config_file();
    let mut child = Child::spawn(
        "hookline",
        &[
            "--config",
            config.to_str().unwrap(),
            "replay",
            "--unprocessed",
            "--rate",
            "100",
            "--reason",
            "interrupt me",
        ],
        &[],
    );
    wait_until(DRAIN, "the replay is under way", || {
        let pool = pool.clone();
        async move { scalar(&pool, "SELECT coalesce(max(published), 0) FROM replay_runs").await >= 100 }
    })
    .await;
    let pid = child.0.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::task::spawn_blocking(move || child.0.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(1), "interrupted runs exit 1");
    let (run_id, published, finished): (i64, i64, bool) =
        sqlx::query_as("SELECT id, published, finished_at IS NOT NULL FROM replay_runs")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        !finished && published < 300,
        "stopped part-way: {published}"
    );
    let queue = p.topology().payments_queue;
    assert_eq!(
        p.queue_depth(&queue).await as i64,
        published,
        "the cursor matches what was published"
    );

    let out = hookline(&p, &["replay", "--resume", &run_id.to_string()]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        p.queue_depth(&queue).await,
        300,
        "each event exactly once on the queue"
    );
    let worker = p.spawn_worker();
    p.drain(DRAIN).await;
    worker.stop().await;
    assert_eq!(assert_ledger_balanced(&pool).await, 300);
    p.teardown().await;
}

/// A worker deployed without the stripe-eu provider: that provider's events are dead-lettered.
fn spawn_worker_without_stripe_eu(p: &TestPipeline) -> hookline_tests::pipeline::WorkerGuard {
    p.spawn_worker_with(hookline_billing::payments_handler(
        p.config
            .providers
            .values()
            .filter(|c| c.name != "stripe-eu"),
    ))
}

/// `n` succeeded payments (`evt_{prefix}_{i}`, `pi_{prefix}_{i}`) posted to stripe-eu, each acknowledged.
async fn post_stripe_eu(p: &TestPipeline, prefix: &str, n: usize) {
    for i in 0..n {
        let body = stripe::payment_intent(
            &format!("evt_{prefix}_{i}"),
            "succeeded",
            &format!("pi_{prefix}_{i}"),
            500,
        );
        let h = stripe_headers("whsec_second_account", now(), &body);
        assert_eq!(p.edge.post("stripe-eu", "", &h, body).await.status(), 200);
    }
}

/// Dead letters caused by a fixable problem (the worker lacked a provider's configuration) are listed with
/// their reason, shown with their payload, and after the fix a redrive applies each exactly once, resolves them
/// and empties the dead-letter queue. `hookline status` exits 1 while they exist and 0 after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dlq_redrive_after_fix_applies_each_once() {
    let p = TestPipeline::start().await;
    // A worker deployed without the stripe-eu provider: its events are dead-lettered.
    let broken = spawn_worker_without_stripe_eu(&p);
    post_stripe_eu(&p, "eu", 5).await;
    post_many(&p, 5, "ok").await;
    p.drain(DRAIN).await;
    broken.stop().await;
    let pool = p.pool();
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL"
        )
        .await,
        5
    );
    let dlq = p.topology().dead_letter_queue;
    wait_until(DRAIN, "5 messages in the DLQ", || async {
        p.queue_depth(&dlq).await == 5
    })
    .await;

    let status = hookline(&p, &["status", "--json"]).await;
    assert_eq!(
        status.status.code(),
        Some(1),
        "dead letters need attention: {}",
        text(&status)
    );
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(report["totals"]["dead_lettered"], 5);
    assert_eq!(report["queues"]["dead_letter_ready"], 5);

    let list = hookline(&p, &["dlq", "list"]).await;
    assert!(list.status.success());
    assert!(
        text(&list).contains("not configured in this worker"),
        "{}",
        text(&list)
    );
    let id: i64 = sqlx::query_scalar("SELECT min(event_id) FROM dead_letters")
        .fetch_one(pool)
        .await
        .unwrap();
    let show = hookline(&p, &["dlq", "show", &id.to_string()]).await;
    assert!(show.status.success());
    assert!(text(&show).contains("\"id\":\"evt_eu_"), "{}", text(&show));

    // The fix: a worker with the full configuration. Then redrive.
    let fixed = p.spawn_worker();
    let out = hookline(
        &p,
        &[
            "dlq",
            "redrive",
            "--all",
            "--reason",
            "stripe-eu configured",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("5 events re-delivered")
            && text(&out).contains("5 redriven copies removed"),
        "{}",
        text(&out)
    );
    // Audited like a replay, with the same cursor (resumable with `hookline replay --resume`).
    assert_eq!(
        scalar(
            pool,
            "SELECT published FROM replay_runs WHERE kind = 'dlq_redrive' AND finished_at IS NOT NULL"
        )
        .await,
        5
    );
    wait_until(DRAIN, "dead letters resolved", || async {
        scalar(
            pool,
            "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL",
        )
        .await
            == 0
    })
    .await;
    // Redriving again finds nothing; a second copy of an event would not apply twice anyway.
    let again = hookline(&p, &["dlq", "redrive", "--all", "--reason", "again"]).await;
    assert!(
        text(&again).contains("no unresolved dead letter"),
        "{}",
        text(&again)
    );
    let queue = p.topology().payments_queue;
    wait_until(DRAIN, "queue drained", || async {
        p.queue_depth(&queue).await == 0
    })
    .await;
    fixed.stop().await;
    assert_eq!(
        assert_ledger_balanced(pool).await,
        10,
        "5 + 5 payments, each once"
    );
    assert_eq!(p.queue_depth(&dlq).await, 0);
    let status = hookline(&p, &["status"]).await;
    assert_eq!(status.status.code(), Some(0), "{}", text(&status));
    assert_eq!(
        scalar(
            pool,
            "SELECT count(*) FROM replay_runs WHERE kind = 'dlq_redrive'"
        )
        .await,
        2,
        "both redrives audited"
    );
    p.teardown().await;
}

/// Dead-letter bookkeeping, as an operator with docs/operations.md in hand: two events dead-lettered (the worker lacks
/// their provider). `dlq redrive --id A` while the cause is NOT fixed: A fails again at once and gets a fresh
/// DLQ copy, which must stay (the old code removed "every copy of A" after re-publishing, the fresh one too,
/// and printed `2 redriven copies removed`). Afterwards the DLQ holds exactly what `status` says. Then `dlq
/// discard --id B`: `status` shows it in its own column, `received = processed + dead + discarded +
/// in_flight`, and `purge` deletes B like a processed event (the old code kept it as "unprocessed").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redrive_removes_only_its_copies_and_discarded_events_are_counted_and_purged() {
    let p = TestPipeline::start().await;
    let broken = spawn_worker_without_stripe_eu(&p);
    post_stripe_eu(&p, "dl", 2).await;
    post_many(&p, 3, "fine").await;
    p.drain(DRAIN).await;
    let pool = p.pool();
    let dlq = p.topology().dead_letter_queue;
    wait_until(DRAIN, "2 messages in the DLQ", || async {
        p.queue_depth(&dlq).await == 2
    })
    .await;
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT event_id FROM dead_letters WHERE resolved_at IS NULL ORDER BY event_id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let (redriven, discarded) = (ids[0], ids[1]);
    let attempts_before = scalar(
        pool,
        &format!("SELECT attempts::bigint FROM dead_letters WHERE event_id = {redriven}"),
    )
    .await;

    // Redrive A with the broken worker still running: it is dead-lettered again at once.
    let out = hookline_ok(
        &p,
        &[
            "dlq",
            "redrive",
            "--id",
            &redriven.to_string(),
            "--reason",
            "try again",
        ],
    )
    .await;
    assert!(
        text(&out).contains("1 redriven copies removed"),
        "only A's one old copy is removed: {}",
        text(&out)
    );
    wait_until(DRAIN, "A dead-lettered again", || async {
        scalar(
            pool,
            &format!(
                "SELECT count(*) FROM dead_letters WHERE event_id = {redriven} AND resolved_at IS NULL \
                 AND attempts > {attempts_before}"
            ),
        )
        .await
            == 1
    })
    .await;
    p.drain(DRAIN).await;
    // The fresh copy of A is dead-lettered by the broker right after the worker records the failure.
    wait_until(DRAIN, "A's fresh copy and B's copy in the DLQ", || async {
        p.queue_depth(&dlq).await >= 2
    })
    .await;
    let status = hookline(&p, &["status", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let depth = p.queue_depth(&dlq).await;
    assert_eq!(
        (
            report["totals"]["dead_lettered"].as_i64(),
            report["queues"]["dead_letter_ready"].as_u64(),
            depth
        ),
        (Some(2), Some(2), 2),
        "status (dead letters, DLQ ready) and the broker's queue depth agree: {report}"
    );

    // Discard B: its copy leaves the DLQ; status counts it as discarded, not dead, not in flight.
    hookline_ok(
        &p,
        &[
            "dlq",
            "discard",
            "--id",
            &discarded.to_string(),
            "--reason",
            "hostile",
        ],
    )
    .await;
    broken.stop().await;
    let status = hookline(&p, &["status", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let totals = &report["totals"];
    let n = |k: &str| {
        totals[k]
            .as_i64()
            .unwrap_or_else(|| panic!("{k} in {report}"))
    };
    assert_eq!(
        (
            n("received"),
            n("processed"),
            n("dead_lettered"),
            n("discarded"),
            n("in_flight")
        ),
        (5, 3, 1, 1, 0),
        "{report}"
    );
    for row in report["providers"].as_array().expect("providers") {
        let v = |k: &str| row[k].as_i64().unwrap_or_else(|| panic!("{k} in {row}"));
        assert_eq!(
            v("received"),
            v("processed") + v("dead_lettered") + v("discarded") + v("in_flight"),
            "every gap between received and processed is explained: {row}"
        );
    }
    assert_eq!(p.queue_depth(&dlq).await, 1, "only A's fresh copy is left");
    assert_eq!(report["queues"]["dead_letter_ready"], 1);
    let table = hookline(&p, &["status"]).await;
    assert!(text(&table).contains("discarded"), "{}", text(&table));

    // Purge: B is done (discarded) and deleted; A (still dead-lettered) is kept. Every event is made 2 days
    // old (the test runs in seconds), purged with a 1-day window.
    sqlx::query("UPDATE webhook_events SET received_at = received_at - interval '2 days'")
        .execute(pool)
        .await
        .expect("backdate events");
    let out = hookline_ok(&p, &["purge", "--older-than", "1d", "--force"]).await;
    assert_eq!(
        scalar(
            pool,
            &format!("SELECT count(*) FROM webhook_events WHERE id = {discarded}")
        )
        .await,
        0,
        "the discarded event is purged: {}",
        text(&out)
    );
    assert_eq!(
        scalar(
            pool,
            &format!("SELECT count(*) FROM webhook_events WHERE id = {redriven}")
        )
        .await,
        1,
        "the dead-lettered event is kept"
    );
    assert_eq!(scalar(pool, "SELECT count(*) FROM webhook_events").await, 1);
    p.teardown().await;
}
