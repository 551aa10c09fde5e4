//! Retention: `hookline purge` (the real binary) and the worker's periodic purge, on real PostgreSQL.
//!
//! Events go through the real code paths — stored with `insert_one` (the edge's statement), processed with `process_event` and the
//! payments handler, dead-lettered with `record_dead_letter` — then `received_at` is backdated to simulate age
//! and the event taken out of `event_outbox` as the relay would.

use std::path::PathBuf;
use std::time::Duration;

use hookline_consumer::process::record_dead_letter;
use hookline_consumer::{process_event, ProcessError};
use hookline_core::events::{insert_one, OwnedEvent, StoreOutcome};
use hookline_core::handler::reason_text;
use hookline_core::Config;
use hookline_ops::config::RetentionConfig;
use hookline_ops::retention::{self, PurgeOptions};
use hookline_payments::PaymentsHandler;
use hookline_payments::CONSUMER;
use hookline_tests::stripe;
use hookline_tests::*;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const DAY: Duration = Duration::from_secs(86_400);

/// A private database, its configuration, and that configuration as a file for the `hookline` binary.
struct Fixture {
    db: TestDb,
    config: Config,
    handler: PaymentsHandler,
    config_path: PathBuf,
}

impl Fixture {
    async fn new() -> Fixture {
        let db = TestDb::new().await;
        let toml = test_config_toml(&db.url, "", "[relay]\nembedded = false");
        let config = parse_config(&toml);
        let config_path = std::env::temp_dir().join(format!(
            "hookline-purge-{}.toml",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&config_path, toml).expect("write config file");
        let handler = hookline_billing::payments_handler(config.providers.values());
        Fixture {
            db,
            config,
            handler,
            config_path,
        }
    }

    fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// Stores event `evt_id` with a payload the handler rejects permanently, processes it and records its dead
    /// letter, as the worker would; returns its id.
    async fn dead_lettered_broken(&self, evt_id: &str) -> i64 {
        let body = format!(
            "{{\"id\": \"{evt_id}\", \"type\": \"payment_intent.succeeded\", \"data\": 42}}"
        );
        let id = self.store(body.as_bytes()).await;
        match process_event(self.pool(), &self.handler, id).await {
            Err(ProcessError::Permanent(e)) => {
                record_dead_letter(self.pool(), CONSUMER, id, &reason_text(&e))
                    .await
                    .expect("record dead letter")
            }
            other => panic!("the broken payload must fail permanently, got {other:?}"),
        }
        id
    }

    /// Stores a Stripe event as the edge would; returns its id.
    async fn store(&self, body: &[u8]) -> i64 {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let evt_id = v["id"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("evt_raw_{}", uuid::Uuid::new_v4().simple()));
        let ev = OwnedEvent {
            provider: "stripe".into(),
            provider_event_id: evt_id.clone(),
            event_type: v["type"].as_str().map(str::to_owned),
            signed_at: Some(now()),
            headers: vec![("content-type".into(), "application/json".into())],
            query: String::new(),
            body: body.to_vec().into(),
            traceparent: None,
        };
        match insert_one(self.pool(), &ev).await.expect("store event") {
            StoreOutcome::Inserted(id) => id,
            StoreOutcome::Duplicate(_) => panic!("{evt_id} stored twice"),
        }
    }

    /// Processes a stored event with the payments handler, as the worker would; must apply.
    async fn process(&self, id: i64) {
        process_event(self.pool(), &self.handler, id)
            .await
            .unwrap_or_else(|e| panic!("event {id} must process: {e:#}"));
    }

    /// Backdates an event by `age` and takes it out of the outbox (published, as the relay does) or leaves it
    /// there.
    async fn age(&self, id: i64, age: Duration, published: bool) {
        sqlx::query("UPDATE webhook_events SET received_at = now() - make_interval(secs => $2) WHERE id = $1")
            .bind(id)
            .bind(age.as_secs_f64())
            .execute(self.pool())
            .await
            .expect("backdate event");
        if published {
            sqlx::query("DELETE FROM event_outbox WHERE event_id = $1")
                .bind(id)
                .execute(self.pool())
                .await
                .expect("publish event");
        }
    }

    /// A done event: stored, processed, published, `age` old.
    async fn done(&self, body: &[u8], age: Duration) -> i64 {
        let id = self.store(body).await;
        self.process(id).await;
        self.age(id, age, true).await;
        id
    }

    /// Runs `hookline --config FILE purge ARGS…`; returns (exit code, stdout, stderr).
    async fn purge_cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = tokio::process::Command::new(binary("hookline"))
            .arg("--config")
            .arg(&self.config_path)
            .arg("purge")
            .args(args)
            // The file must decide which database: these would override it.
            .env_remove("DATABASE_URL")
            .env_remove("AMQP_URL")
            .env_remove("HOOKLINE_CONFIG")
            .env("RUST_LOG", "warn")
            .output_within(CLI_TIMEOUT)
            .await;
        let code = out.status.code().expect("hookline exited normally");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (code, stdout, stderr)
    }

    async fn event_ids(&self) -> Vec<i64> {
        sqlx::query_scalar("SELECT id FROM webhook_events ORDER BY id")
            .fetch_all(self.pool())
            .await
            .expect("list events")
    }

    async fn marker_ids(&self) -> Vec<i64> {
        sqlx::query_scalar("SELECT event_id FROM processed_events ORDER BY event_id")
            .fetch_all(self.pool())
            .await
            .expect("list markers")
    }

    /// Every purge_runs row as (operator, older_than_secs, forced, dry_run, events, markers, finished).
    async fn purge_runs(&self) -> Vec<PurgeRun> {
        sqlx::query_as(
            "SELECT operator, older_than_secs, forced, dry_run, events_deleted, markers_deleted,
                    finished_at IS NOT NULL
             FROM purge_runs ORDER BY id",
        )
        .fetch_all(self.pool())
        .await
        .expect("read purge_runs")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        std::fs::remove_file(&self.config_path).ok();
    }
}

type PurgeRun = (String, i64, bool, bool, i64, i64, bool);

/// A picture of everything a purge must never change: the ledger checksum and a digest of every history table.
async fn history(pool: &PgPool) -> Vec<(String, String)> {
    let mut out = vec![("ledger".to_string(), ledger_checksum(pool).await)];
    for table in [
        "payments",
        "payment_transitions",
        "refunds",
        "disputes",
        "subscription_charges",
        "pending_fetches",
        "dead_letters",
        "ledger_transactions",
        "ledger_entries",
    ] {
        let digest: String = sqlx::query_scalar(&format!(
            "SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {table} t"
        ))
        .fetch_one(pool)
        .await
        .expect(table);
        out.push((table.to_string(), digest));
    }
    out
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// The mixed population most tests purge with `--older-than 40d`.
struct Mixed {
    /// Old and done: must go, with their markers.
    eligible: Vec<i64>,
    /// Everything else: must stay.
    kept: Vec<i64>,
}

/// Old (50 days) done events — payments, a refund, one whose dead letter was resolved by a later success — plus
/// young done events and old events that are not done (unpublished, unprocessed, dead-lettered).
async fn seed_mixed(f: &Fixture) -> Mixed {
    let old = 50 * DAY;
    let mut eligible = Vec::new();
    for i in 0..4 {
        let body = stripe::payment_intent(
            &format!("evt_old_{i}"),
            "succeeded",
            &format!("pi_old_{i}"),
            10_000 + i,
        );
        eligible.push(f.done(&body, old).await);
    }
    eligible.push(
        f.done(
            &stripe::refund("evt_old_refund", "re_old_0", "pi_old_0", 2_500),
            old,
        )
        .await,
    );
    // Failed once (dead letter), then applied by a redrive: the dead letter is resolved, the event is done.
    let redriven = f
        .store(&stripe::payment_intent(
            "evt_old_redriven",
            "succeeded",
            "pi_old_redriven",
            7_000,
        ))
        .await;
    record_dead_letter(f.pool(), CONSUMER, redriven, "database was restarting")
        .await
        .expect("record dead letter");
    f.process(redriven).await;
    f.age(redriven, old, true).await;
    eligible.push(redriven);

    let mut kept = Vec::new();
    // Young and done.
    for i in 0..2 {
        let body = stripe::payment_intent(
            &format!("evt_young_{i}"),
            "succeeded",
            &format!("pi_young_{i}"),
            5_000,
        );
        kept.push(f.done(&body, 10 * DAY).await);
    }
    // Old, never published, never processed (the relay never got to it).
    let id = f
        .store(&stripe::payment_intent(
            "evt_old_unpublished",
            "succeeded",
            "pi_unpub",
            3_000,
        ))
        .await;
    f.age(id, old, false).await;
    kept.push(id);
    // Old, processed but not marked published (relay died between the broker's confirm and its commit).
    let id = f
        .store(&stripe::payment_intent(
            "evt_old_unmarked",
            "succeeded",
            "pi_unmarked",
            3_100,
        ))
        .await;
    f.process(id).await;
    f.age(id, old, false).await;
    kept.push(id);
    // Old, published, never processed (stuck in a queue).
    let id = f
        .store(&stripe::payment_intent(
            "evt_old_unprocessed",
            "succeeded",
            "pi_unproc",
            3_200,
        ))
        .await;
    f.age(id, old, true).await;
    kept.push(id);
    // Old, published, dead-lettered and never resolved: a payload the handler rejects permanently.
    let id = f.dead_lettered_broken("evt_old_broken").await;
    f.age(id, old, true).await;
    kept.push(id);

    Mixed { eligible, kept }
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

/// `--older-than 7d` on events 10 days old is inside the 30-day floor: refused with exit 2 naming
/// retention.floor_days, nothing deleted, not even a connection's worth of audit. `--force` overrides.
#[tokio::test]
async fn refuses_a_window_inside_the_floor_without_force() {
    let f = Fixture::new().await;
    for i in 0..3 {
        let body =
            stripe::payment_intent(&format!("evt_{i}"), "succeeded", &format!("pi_{i}"), 1_000);
        f.done(&body, 10 * DAY).await;
    }
    let events = f.event_ids().await;
    let markers = f.marker_ids().await;

    for args in [
        &["--older-than", "7d"][..],
        &["--older-than", "7d", "--dry-run"][..],
        &["--older-than", "29d", "--operator", "alice"][..],
    ] {
        let (code, stdout, stderr) = f.purge_cli(args).await;
        assert_eq!(
            code, 2,
            "{args:?} must be refused; stdout: {stdout} stderr: {stderr}"
        );
        assert!(
            stderr.contains("retention.floor_days = 30"),
            "the refusal names the setting and its value: {stderr}"
        );
        assert!(stderr.contains("--force"), "{stderr}");
    }
    // Malformed durations are usage errors too.
    let (code, _, stderr) = f.purge_cli(&["--older-than", "7"]).await;
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = f
        .purge_cli(&["--older-than", "40d", "--batch-size", "0"])
        .await;
    assert_eq!(code, 2, "{stderr}");

    assert_eq!(f.event_ids().await, events, "no event deleted");
    assert_eq!(f.marker_ids().await, markers, "no marker deleted");
    assert!(
        f.purge_runs().await.is_empty(),
        "a refused run changes nothing"
    );

    // The override works, warns, and is audited as forced.
    let (code, stdout, stderr) = f
        .purge_cli(&["--older-than", "7d", "--force", "--operator", "alice"])
        .await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert!(stderr.contains("warning: --force"), "{stderr}");
    assert!(
        stdout.contains("deleted 3 events and 3 processed markers"),
        "{stdout}"
    );
    assert!(f.event_ids().await.is_empty());
    assert!(f.marker_ids().await.is_empty());
    assert_eq!(
        f.purge_runs().await,
        vec![("alice".into(), 7 * 86_400, true, false, 3, 3, true)]
    );
}

/// `--older-than 40d` deletes exactly the old done events and their markers; young, unpublished, unprocessed
/// and dead-lettered events stay, and no history row changes.
#[tokio::test]
async fn deletes_exactly_the_old_done_events_and_keeps_history() {
    let f = Fixture::new().await;
    let m = seed_mixed(&f).await;
    let before = history(f.pool()).await;
    let payments_before = count(f.pool(), "SELECT count(*) FROM payments").await;
    assert!(payments_before >= 8, "the seed created payments");
    let markers_kept: Vec<i64> = f
        .marker_ids()
        .await
        .into_iter()
        .filter(|id| !m.eligible.contains(id))
        .collect();

    let (code, stdout, stderr) = f
        .purge_cli(&["--older-than", "40d", "--operator", "bob"])
        .await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");

    assert_eq!(
        f.event_ids().await,
        sorted(m.kept.clone()),
        "exactly the eligible events are gone"
    );
    assert_eq!(
        f.marker_ids().await,
        markers_kept,
        "exactly their markers are gone"
    );
    assert_eq!(
        history(f.pool()).await,
        before,
        "ledger and history untouched"
    );
    assert_eq!(
        count(f.pool(), "SELECT count(*) FROM payments").await,
        payments_before
    );
    // The resolved dead letter of the redriven event stays as history.
    assert_eq!(
        count(f.pool(), "SELECT count(*) FROM dead_letters").await,
        2
    );

    let n = m.eligible.len() as i64;
    assert!(
        stdout.contains(&format!("deleted {n} events and {n} processed markers")),
        "{stdout}"
    );
    assert!(
        stdout.contains("kept 4 older events that are not done: 2 unpublished, 1 unprocessed, 1 with an unresolved dead letter"),
        "{stdout}"
    );
    assert_eq!(
        f.purge_runs().await,
        vec![("bob".into(), 40 * 86_400, false, false, n, n, true)]
    );

    // A second run finds nothing more, and says so.
    let (code, stdout, _) = f
        .purge_cli(&["--older-than", "40d", "--operator", "bob"])
        .await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("deleted 0 events and 0 processed markers"),
        "{stdout}"
    );
    assert_eq!(f.event_ids().await, sorted(m.kept));
}

/// `--dry-run` changes nothing (but is audited) and predicts exactly what the real run then deletes.
#[tokio::test]
async fn dry_run_changes_nothing_and_predicts_the_real_run() {
    let f = Fixture::new().await;
    let m = seed_mixed(&f).await;
    let before = history(f.pool()).await;
    let events = f.event_ids().await;
    let markers = f.marker_ids().await;
    let n = m.eligible.len() as i64;

    let (code, stdout, stderr) = f
        .purge_cli(&["--older-than", "40d", "--dry-run", "--operator", "carol"])
        .await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert!(
        stdout.contains(&format!(
            "would delete {n} events and {n} processed markers"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("nothing was changed"), "{stdout}");
    assert!(stdout.contains("eligible events received from"), "{stdout}");
    assert_eq!(f.event_ids().await, events);
    assert_eq!(f.marker_ids().await, markers);
    assert_eq!(history(f.pool()).await, before);

    let (code, stdout, stderr) = f
        .purge_cli(&["--older-than", "40d", "--operator", "carol"])
        .await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert!(
        stdout.contains(&format!("deleted {n} events and {n} processed markers")),
        "{stdout}"
    );
    assert_eq!(f.event_ids().await, sorted(m.kept));
    assert_eq!(
        f.purge_runs().await,
        vec![
            ("carol".into(), 40 * 86_400, false, true, n, n, true),
            ("carol".into(), 40 * 86_400, false, false, n, n, true),
        ]
    );
}

/// 50 eligible events with `--batch-size 7`: eight transactions, all 50 gone, the audit row counts them all.
#[tokio::test]
async fn batches_until_nothing_is_left() {
    let f = Fixture::new().await;
    for i in 0..50 {
        let body = stripe::payment_intent(
            &format!("evt_b{i}"),
            "succeeded",
            &format!("pi_b{i}"),
            1_000 + i,
        );
        f.done(&body, 45 * DAY).await;
    }
    let young = f
        .done(
            &stripe::payment_intent("evt_young", "succeeded", "pi_young", 900),
            DAY,
        )
        .await;
    let before = history(f.pool()).await;

    let (code, stdout, stderr) = f
        .purge_cli(&[
            "--older-than",
            "40d",
            "--batch-size",
            "7",
            "--operator",
            "dave",
        ])
        .await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert!(
        stdout.contains("deleted 50 events and 50 processed markers"),
        "{stdout}"
    );
    assert!(stdout.contains("in 8 batches of at most 7"), "{stdout}");
    assert_eq!(f.event_ids().await, vec![young]);
    assert_eq!(f.marker_ids().await, vec![young]);
    assert_eq!(history(f.pool()).await, before);
    assert_eq!(
        f.purge_runs().await,
        vec![("dave".into(), 40 * 86_400, false, false, 50, 50, true)]
    );
}

fn options(batch_size: u32, operator: &str) -> PurgeOptions {
    PurgeOptions {
        older_than: 40 * DAY,
        floor: 30 * DAY,
        dry_run: false,
        batch_size,
        operator: operator.into(),
        forced: false,
    }
}

/// Two purgers at once (FOR UPDATE SKIP LOCKED) share the work: every eligible event is deleted exactly once,
/// neither fails, and the two audit rows add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_purgers_share_the_work() {
    let f = Fixture::new().await;
    for i in 0..60 {
        let body = stripe::payment_intent(
            &format!("evt_c{i}"),
            "succeeded",
            &format!("pi_c{i}"),
            2_000 + i,
        );
        f.done(&body, 60 * DAY).await;
    }
    let purger = |name: &'static str| {
        let pool = f.pool().clone();
        tokio::spawn(async move { retention::purge(&pool, &options(5, name)).await })
    };
    let (a, b) = tokio::join!(purger("one"), purger("two"));
    let (a, b) = (a.expect("first task"), b.expect("second task"));
    let (a, b) = (a.expect("first purger"), b.expect("second purger"));
    assert_eq!(a.events + b.events, 60, "{a:?} {b:?}");
    assert_eq!(a.markers + b.markers, 60);
    assert!(f.event_ids().await.is_empty());
    assert!(f.marker_ids().await.is_empty());
    let audited: i64 = count(
        f.pool(),
        "SELECT sum(events_deleted)::bigint FROM purge_runs",
    )
    .await;
    assert_eq!(audited, 60);
}

/// The library refuses a window inside the floor too (defence in depth): nothing deleted, nothing audited.
#[tokio::test]
async fn library_refuses_inside_the_floor() {
    let f = Fixture::new().await;
    f.done(
        &stripe::payment_intent("evt_l", "succeeded", "pi_l", 1_000),
        10 * DAY,
    )
    .await;
    let opts = PurgeOptions {
        older_than: 7 * DAY,
        ..options(100, "lib")
    };
    let err = retention::purge(f.pool(), &opts)
        .await
        .expect_err("must be refused");
    assert!(
        err.to_string().contains("retention.floor_days = 30"),
        "{err}"
    );
    assert_eq!(f.event_ids().await.len(), 1);
    assert!(f.purge_runs().await.is_empty());
}

/// The worker's periodic purge (100 ms interval) deletes eligible events on its own, keeps the rest, audits
/// each run as the worker, and returns once cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_purge_runs_until_cancelled() {
    let f = Fixture::new().await;
    let mut eligible = Vec::new();
    for i in 0..10 {
        let body = stripe::payment_intent(
            &format!("evt_p{i}"),
            "succeeded",
            &format!("pi_p{i}"),
            3_000 + i,
        );
        eligible.push(f.done(&body, Duration::from_secs(3 * 3_600)).await);
    }
    // Just received and done, but younger than the window.
    let young = f
        .done(
            &stripe::payment_intent("evt_p_young", "succeeded", "pi_p_young", 900),
            Duration::ZERO,
        )
        .await;
    // Old but never processed.
    let stuck = f
        .store(&stripe::payment_intent(
            "evt_p_stuck",
            "succeeded",
            "pi_p_stuck",
            901,
        ))
        .await;
    f.age(stuck, Duration::from_secs(3 * 3_600), true).await;
    let before = history(f.pool()).await;

    let retention = RetentionConfig {
        floor: Duration::from_secs(3_600),
        auto_purge_older_than: Some(Duration::from_secs(2 * 3_600)),
        auto_purge_interval: Duration::from_millis(100),
        batch_size: 3,
    };
    let cancel = CancellationToken::new();
    let task = tokio::spawn(hookline_ops::purge_loop::run_periodic(
        f.pool().clone(),
        retention,
        cancel.clone(),
    ));
    let pool = f.pool().clone();
    wait_until(
        Duration::from_secs(15),
        "the periodic purge deleted the eligible events",
        || {
            let pool = pool.clone();
            async move { count(&pool, "SELECT count(*) FROM webhook_events").await == 2 }
        },
    )
    .await;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("run_periodic returns once cancelled")
        .expect("run_periodic did not panic");

    assert_eq!(f.event_ids().await, sorted(vec![young, stuck]));
    assert_eq!(f.marker_ids().await, vec![young]);
    assert_eq!(history(f.pool()).await, before);
    let runs = f.purge_runs().await;
    assert!(!runs.is_empty());
    assert!(
        runs.iter()
            .all(|r| r.0 == hookline_ops::purge_loop::OPERATOR && r.1 == 7_200 && !r.2 && !r.3),
        "{runs:?}"
    );
    assert_eq!(runs.iter().map(|r| r.4).sum::<i64>(), 10, "{runs:?}");
    assert!(runs.iter().all(|r| r.6), "every run finished: {runs:?}");
}

/// Without `auto_purge_older_than` the periodic purge does nothing and still returns when cancelled.
#[tokio::test]
async fn periodic_purge_disabled_waits_for_cancel() {
    let f = Fixture::new().await;
    f.done(
        &stripe::payment_intent("evt_d", "succeeded", "pi_d", 1_000),
        400 * DAY,
    )
    .await;
    let retention = RetentionConfig {
        auto_purge_older_than: None,
        auto_purge_interval: Duration::from_millis(50),
        ..RetentionConfig::from_config(&f.config).expect("valid [retention]")
    };
    let cancel = CancellationToken::new();
    // On tokio's paused clock (this test's runtime is single-threaded): forty of its intervals pass at once, and
    // every timer they reach has fired before `advance` returns — no sleep racing the machine's load.
    tokio::time::pause();
    let task = tokio::spawn(hookline_ops::purge_loop::run_periodic(
        f.pool().clone(),
        retention,
        cancel.clone(),
    ));
    tokio::time::advance(Duration::from_millis(50 * 40)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!task.is_finished(), "returns only when cancelled");
    tokio::time::resume();
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("returns once cancelled")
        .expect("no panic");
    assert_eq!(f.event_ids().await.len(), 1);
    assert!(f.purge_runs().await.is_empty());
}

/// An event given up on with `dlq discard` is done: `purge` deletes it like a processed one (with no marker to
/// delete), instead of keeping it forever as "unprocessed" — the only event, so no consumer has any marker yet.
#[tokio::test]
async fn a_discarded_event_is_purged_like_a_processed_one() {
    let f = Fixture::new().await;
    let id = f.dead_lettered_broken("evt_old_hostile").await;
    f.age(id, 50 * DAY, true).await;
    // Dead-lettered and unresolved: kept.
    let (code, stdout, stderr) = f.purge_cli(&["--older-than", "40d"]).await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert_eq!(f.event_ids().await, vec![id], "{stdout}");
    assert!(
        stdout.contains("1 with an unresolved dead letter"),
        "{stdout}"
    );

    let discarded =
        hookline_core::dead_letters::discard(f.pool(), hookline_core::consumers::ALL, &[id])
            .await
            .expect("discard");
    assert_eq!(discarded, vec![id]);
    let (code, stdout, stderr) = f.purge_cli(&["--older-than", "40d"]).await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert!(
        f.event_ids().await.is_empty(),
        "the discarded event is purged: {stdout}"
    );
    assert!(
        stdout.contains("deleted 1 events and 0 processed markers"),
        "{stdout}"
    );
    assert!(!stdout.contains("unprocessed"), "{stdout}");
    // Its dead letter stays, resolved, as history.
    assert_eq!(
        count(
            f.pool(),
            "SELECT count(*) FROM dead_letters WHERE resolution = 'discarded'"
        )
        .await,
        1
    );
}
