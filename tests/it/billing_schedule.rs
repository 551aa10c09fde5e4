//! Billing runs itself (issue 48), with the REAL processes of [`hookline_tests::billing::BillingRig`] and no
//! `hookline billing run`: the workers' scheduler (`[billing] schedule_secs = 1`) charges due periods and due
//! dunning retries, each `(subscription, cycle)` once — with two workers at once, with a worker killed in the
//! middle of a round, and after a worker was down across a period boundary.

use std::collections::BTreeMap;
use std::time::Duration;

use hookline_billing::period::{self, Cycle, Interval};
use hookline_tests::billing::{BillingRig, PROVIDER, WAIT};
use hookline_tests::faults::free_port;
use hookline_tests::wait_for;
use time::OffsetDateTime;

/// The provider's dunning schedule: retries 1 s and 2 s after the 1st and 2nd decline, then past due.
const SCHEDULE: [u32; 2] = [1, 2];

/// `(subscription, cycle) → (claim status, attempts)`.
async fn claims(rig: &BillingRig) -> BTreeMap<(i64, String), (String, i32)> {
    rig.claims()
        .await
        .into_iter()
        .map(|c| ((c.subscription_id, c.billing_cycle), (c.status, c.attempts)))
        .collect()
}

/// Charges of a subscription's cycles (every intent, whatever its status), oldest first: `(cycle, intent id)`.
async fn charges_of(rig: &BillingRig, subscription: i64) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT billing_cycle, id FROM payment_intents WHERE subscription_id = $1 ORDER BY id",
    )
    .bind(subscription)
    .fetch_all(rig.cluster.pool())
    .await
    .expect("read the charges")
}

/// The cycle of the period running now for a monthly subscription anchored at `anchor`.
fn running(anchor: OffsetDateTime) -> String {
    period::current_cycle(anchor, Interval::Month, OffsetDateTime::now_utc())
        .expect("a started period")
        .to_string()
}

/// Waits until `claims` says every subscription in `want` has exactly those claims.
async fn until_claims(rig: &BillingRig, what: &str, want: &BTreeMap<(i64, String), (String, i32)>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = claims(rig).await;
        let mine: BTreeMap<_, _> = now
            .iter()
            .filter(|((id, _), _)| want.keys().any(|(w, _)| w == id))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if &mine == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the claims are {mine:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A value of the worker's `/metrics` (`name` with its labels, as printed), 0 when absent.
async fn metric(port: u16, name: &str) -> f64 {
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .expect("scrape /metrics")
        .text()
        .await
        .expect("the metrics");
    body.lines()
        .find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == name).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// Waits until the worker on `port` finished `more` rounds after now (its rounds counter).
async fn rounds_pass(port: u16, more: f64) {
    let start = metric(port, "hookline_billing_rounds_total").await;
    wait_for(
        WAIT,
        "more billing rounds",
        || async move { metric(port, "hookline_billing_rounds_total").await },
        |n| *n >= start + more,
    )
    .await;
}

/// Two workers, no `billing run`: every due period charged once at the gateway, a subscription anchored months
/// before its creation charged for the running period only, one anchored in the future not at all, and the
/// always-declining card retried on the provider's schedule by the workers, then `past_due` with ONE fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_charge_each_due_period_once_and_dun_by_themselves() {
    let mut rig = BillingRig::start_scheduled("billing_schedule_two", &SCHEDULE, 1, None).await;
    let now = OffsetDateTime::now_utc();
    let day_ago = now - time::Duration::DAY;
    let mut paying = Vec::new();
    for i in 0..6 {
        let (customer, card) = rig.saved_card(&format!("pays{i}")).await;
        let id = rig.subscribe(&customer, &card, 1000 + i, day_ago).await;
        paying.push((id, card));
    }
    // Anchored 90 days before it was created: the periods that ended before are not its own.
    let (customer, card) = rig.saved_card("backdated").await;
    let backdated_anchor = now - time::Duration::days(90);
    let backdated = rig
        .subscribe(&customer, &card, 2000, backdated_anchor)
        .await;
    paying.push((backdated, card));
    let (customer, declining_card) = rig.saved_card("declines").await;
    rig.sandbox
        .control()
        .script_payment_method(PROVIDER, &declining_card, &["insufficient_funds"; 3])
        .expect("script the card");
    let declining = rig
        .subscribe(&customer, &declining_card, 3000, day_ago)
        .await;
    let (customer, future_card) = rig.saved_card("future").await;
    let future = rig
        .subscribe(
            &customer,
            &future_card,
            4000,
            now + time::Duration::days(10),
        )
        .await;
    // Nothing is charged before a worker runs.
    assert!(claims(&rig).await.is_empty());

    rig.cluster.start_worker(None).await;
    rig.cluster.start_worker(None).await;
    // And an operator's run at the same moment: the same claims decide.
    let run = rig.cli(&["billing", "run", "--json"]).await;
    let run: serde_json::Value = serde_json::from_str(&run).expect("the run's summary");
    assert_eq!(run["errors"], serde_json::json!([]), "{run}");
    let this = running(day_ago);
    let mut want: BTreeMap<(i64, String), (String, i32)> = paying
        .iter()
        .filter(|(id, _)| *id != backdated)
        .map(|(id, _)| ((*id, this.clone()), ("paid".to_owned(), 1)))
        .collect();
    want.insert((backdated, running(backdated_anchor)), ("paid".into(), 1));
    want.insert((declining, this.clone()), ("past_due".into(), 3));
    until_claims(&rig, "two workers, their schedule", &want).await;
    assert_eq!(rig.subscription_status(declining).await, "past_due");
    rig.settled("the scheduled charges").await;

    // Later rounds change nothing: a witness subscription created now is charged by them, the rest stays.
    let (customer, card) = rig.saved_card("witness").await;
    let witness = rig.subscribe(&customer, &card, 5000, day_ago).await;
    want.insert((witness, this.clone()), ("paid".into(), 1));
    paying.push((witness, card));
    until_claims(&rig, "the witness", &want).await;
    rig.settled("the witness").await;
    assert_eq!(
        claims(&rig).await,
        want,
        "no other claim, none for {future}"
    );
    let gateway = rig.sandbox.control().charges();
    for (id, card) in &paying {
        assert_eq!(
            gateway.payment_method_charges(PROVIDER, card),
            1,
            "subscription {id}"
        );
        assert_eq!(charges_of(&rig, *id).await.len(), 1, "subscription {id}");
    }
    assert_eq!(gateway.payment_method_charges(PROVIDER, &declining_card), 3);
    assert_eq!(gateway.payment_method_charges(PROVIDER, &future_card), 0);
    let facts = rig.all_facts_delivered().await;
    let of = |ty: &str| facts.iter().filter(|f| f.ty == ty).count();
    assert_eq!(of("subscription.charged"), paying.len());
    assert_eq!(of("subscription.payment_failed"), 3);
    assert_eq!(of("subscription.past_due"), 1);
    rig.teardown().await;
}

/// A worker killed in the middle of a scheduled round — holding one subscription's charge uncommitted after
/// deciding ten — and a fresh worker: the round resumes, every subscription charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_round_leaves_nothing_doubled() {
    const SUBSCRIPTIONS: usize = 24;
    let mut rig = BillingRig::start_scheduled("billing_schedule_killed", &SCHEDULE, 1, None).await;
    let day_ago = OffsetDateTime::now_utc() - time::Duration::DAY;
    let mut subs = Vec::new();
    for i in 0..SUBSCRIPTIONS {
        let (customer, card) = rig.saved_card(&format!("cliente{i}")).await;
        subs.push((rig.subscribe(&customer, &card, 990, day_ago).await, card));
    }
    // Ten subscriptions decided and committed, the eleventh's charge written and never committed.
    let slot = rig
        .cluster
        .start_worker(Some("billing.schedule.before_commit=10*off->sleep(600000)"))
        .await;
    let pool = rig.cluster.pool().clone();
    wait_for(
        WAIT,
        "ten claims and a round holding its eleventh charge",
        || {
            let pool = pool.clone();
            async move {
                sqlx::query_as::<_, (i64, i64)>(
                    "SELECT (SELECT count(*) FROM billing_claims),
                            (SELECT count(*) FROM pg_stat_activity
                              WHERE datname = current_database() AND state = 'idle in transaction')",
                )
                .fetch_one(&pool)
                .await
                .map_err(|e| e.to_string())
            }
        },
        |r| matches!(r, Ok((10, held)) if *held >= 1),
    )
    .await
    .expect("the round stopped mid-way");
    rig.cluster.kill_worker(slot);
    assert_eq!(rig.count("SELECT count(*) FROM billing_claims").await, 10);

    rig.cluster.start_worker(None).await;
    let this = running(day_ago);
    let want: BTreeMap<_, _> = subs
        .iter()
        .map(|(id, _)| ((*id, this.clone()), ("paid".to_owned(), 1)))
        .collect();
    until_claims(&rig, "the resumed round", &want).await;
    rig.settled("the resumed round").await;
    let gateway = rig.sandbox.control().charges();
    for (id, card) in &subs {
        assert_eq!(
            gateway.payment_method_charges(PROVIDER, card),
            1,
            "subscription {id}"
        );
        assert_eq!(charges_of(&rig, *id).await.len(), 1, "subscription {id}");
    }
    assert_eq!(gateway.total_charges as usize, SUBSCRIPTIONS);
    rig.teardown().await;
}

/// A monthly anchor in the past whose running period ends at `boundary` (a month back on the same day, or
/// further back when a month lacks that day: an anchor on the 31st starts December's period on the 31st).
fn anchor_ending_at(boundary: OffsetDateTime) -> OffsetDateTime {
    let before = boundary - time::Duration::SECOND;
    let mut cycle = Cycle::of(boundary);
    for _ in 0..12 {
        cycle = cycle.previous(Interval::Month);
        let Ok(date) = time::Date::from_calendar_date(cycle.year, cycle.month, boundary.day())
        else {
            continue;
        };
        let anchor = boundary.replace_date(date);
        let ends = period::current_cycle(anchor, Interval::Month, before)
            .and_then(|c| period::period_end(anchor, Interval::Month, c));
        if ends == Some(boundary) {
            return anchor;
        }
    }
    panic!("no monthly anchor has a period ending at {boundary}")
}

/// A subscription whose first period ends a few seconds after it is created, and no worker until that boundary
/// has passed: `hookline billing status` shows the period due (and the metrics say so once a worker serves
/// them); the worker then charges the missed period and the new one, oldest first, each once; later rounds
/// charge nothing more and the scheduler's metrics moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_down_across_a_period_boundary_catches_up_once() {
    let port = free_port();
    let mut rig =
        BillingRig::start_scheduled("billing_schedule_boundary", &SCHEDULE, 1, Some(port)).await;
    // The boundary: a few seconds from now.
    let boundary = OffsetDateTime::now_utc() + time::Duration::seconds(6);
    let anchor = anchor_ending_at(boundary);
    let previous = period::current_cycle(anchor, Interval::Month, OffsetDateTime::now_utc())
        .expect("its first period is running");
    let (customer, card) = rig.saved_card("cliente").await;
    let id = rig.subscribe(&customer, &card, 1990, anchor).await;
    let status = rig.billing_status().await;
    assert_eq!(status["schedule"]["due_periods"], 1, "{status}");

    // Past the boundary, still no worker: two periods are now due (the missed one and the new one).
    let ends = boundary;
    let pool = rig.cluster.pool().clone();
    wait_for(
        WAIT,
        "the period boundary",
        || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, OffsetDateTime>("SELECT clock_timestamp()")
                    .fetch_one(&pool)
                    .await
                    .map_err(|e| e.to_string())
            }
        },
        |t| matches!(t, Ok(t) if *t > ends),
    )
    .await
    .expect("the boundary passed");
    let status = rig.billing_status().await;
    assert_eq!(status["schedule"]["due_periods"], 1, "{status}");
    assert!(
        status["schedule"]["oldest_due_secs"].as_i64() >= Some(1),
        "{status}"
    );
    // `hookline status` says the same (its exit code is about attention, not asserted here).
    let out = rig.cluster.hookline(&["status", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json");
    for figure in ["due_periods", "due_retries", "in_retry", "past_due"] {
        assert_eq!(
            report["billing"][figure], status["schedule"][figure],
            "{figure}: {report}"
        );
    }
    assert!(
        report["billing"]["oldest_due_secs"].as_i64() >= Some(1),
        "{report}"
    );

    rig.cluster.start_worker(None).await;
    let (missed, new) = (
        previous.to_string(),
        previous.next(Interval::Month).to_string(),
    );
    let want: BTreeMap<_, _> = [
        ((id, missed.clone()), ("paid".to_owned(), 1)),
        ((id, new.clone()), ("paid".to_owned(), 1)),
    ]
    .into_iter()
    .collect();
    until_claims(&rig, "the catch-up", &want).await;
    rig.settled("the catch-up").await;
    rounds_pass(port, 2.0).await;
    assert_eq!(claims(&rig).await, want);
    let charges = charges_of(&rig, id).await;
    assert_eq!(
        charges.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>(),
        [missed.as_str(), new.as_str()],
        "oldest first, each once"
    );
    assert_eq!(
        rig.sandbox
            .control()
            .charges()
            .payment_method_charges(PROVIDER, &card),
        2
    );
    assert_eq!(
        metric(
            port,
            "hookline_billing_scheduled_charges_total{kind=\"period\"}"
        )
        .await,
        2.0
    );
    assert_eq!(metric(port, "hookline_billing_due_periods").await, 0.0);
    assert_eq!(
        metric(port, "hookline_billing_oldest_due_seconds").await,
        0.0
    );
    let status = rig.billing_status().await;
    assert_eq!(status["schedule"]["due_periods"], 0, "{status}");
    rig.teardown().await;
}

/// A round on its own (in process, no worker): what cannot be charged (a provider not configured) stays due and
/// counted, round after round, without stalling the round or charging anything for it; a pointer whose
/// `next_period_at` disagrees with its cycle (a row edited by hand) is set right instead of being picked forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_charged_stays_due_and_a_round_never_stalls() {
    use hookline_billing::{schedule, subscriptions, NewSubscription, ProviderBilling};
    let db = hookline_tests::TestDb::new().await;
    let now = OffsetDateTime::now_utc();
    let new = |provider: &'static str, anchor: OffsetDateTime| NewSubscription {
        provider,
        customer: "cus_round",
        payment_method: "pm_card_visa",
        amount: 1000,
        currency: "brl",
        interval: Interval::Month,
        anchor,
    };
    let day_ago = now - time::Duration::DAY;
    let mut conn = db.pool.acquire().await.expect("a connection");
    let good = subscriptions::add(&mut conn, None, &new("st", day_ago), now)
        .await
        .expect("add")
        .id;
    let unconfigured = subscriptions::add(&mut conn, None, &new("gone", day_ago), now)
        .await
        .expect("add")
        .id;
    // Its next period starts in ten days, but the row says it is due.
    let later = subscriptions::add(
        &mut conn,
        None,
        &new("st", now + time::Duration::days(10)),
        now,
    )
    .await
    .expect("add")
    .id;
    sqlx::query("UPDATE subscriptions SET next_period_at = now() - interval '1 day' WHERE id = $1")
        .bind(later)
        .execute(&mut *conn)
        .await
        .expect("a row edited by hand");
    let provider_of = |name: &str| {
        (name == "st").then(|| ProviderBilling {
            scheme: hookline_signature::Scheme::Stripe,
            retry_schedule_secs: vec![60],
        })
    };
    let never = || false;
    let first = schedule::round(&db.pool, &provider_of, now, &never)
        .await
        .expect("a round");
    assert_eq!(
        (first.charged, first.not_charged, first.not_due),
        (1, 1, 1),
        "{first:?}"
    );
    let second = schedule::round(&db.pool, &provider_of, now, &never)
        .await
        .expect("a round");
    assert_eq!(
        (second.charged, second.not_charged, second.not_due),
        (0, 1, 0),
        "{second:?}"
    );
    let gauges = hookline_billing::schedule_gauges(&mut conn, now)
        .await
        .expect("gauges");
    assert_eq!(
        gauges.due_periods, 1,
        "only the unconfigured one: {gauges:?}"
    );
    let claimed: Vec<i64> = sqlx::query_scalar("SELECT subscription_id FROM billing_claims")
        .fetch_all(&mut *conn)
        .await
        .expect("claims");
    assert_eq!(claimed, [good]);
    let (cycle, starts): (String, OffsetDateTime) =
        sqlx::query_as("SELECT next_cycle, next_period_at FROM subscriptions WHERE id = $1")
            .bind(later)
            .fetch_one(&mut *conn)
            .await
            .expect("the pointer");
    assert!(starts > now, "{cycle} {starts}");
    assert_ne!(unconfigured, good);
}
