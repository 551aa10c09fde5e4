//! The proof of issue 28 ("billing for real"), end to end with the REAL processes: the operator's `hookline` CLI
//! (`subscriptions add/cancel/update`, `billing run`, `billing status --json`), `hookline-edge` (webhooks, the
//! merchant API) and `hookline-worker` (consumer, dispatcher, fact delivery), against the provider sandbox as
//! the Stripe gateway and a merchant's receiver that verifies Standard Webhooks signatures.
//!
//! Twelve subscriptions, each with its own customer and a card saved the way a merchant's checkout saves it
//! (charged off-session), anchored on 2026-10-01 (monthly). The sandbox's card-use scripts make some cards
//! decline: once then succeed, every time (two cycles × 1 + 2 retries), or as expired (the method unusable).
//! 1. Month A (2026-10): 15 sequential runs, then 3 at once, while no dispatcher runs: one claim and one charge
//!    per subscription. Then the dispatcher sends them.
//! 2. Dunning: runs without `--cycle` (which also bill the running period, the machine's current month) and with
//!    `--cycle 2026-10`, each once the scheduled retries are due: every decline is retried on the schedule
//!    `[1, 2]`, then the cycle and subscription are `past_due`; the expired card is `needs_payment_method` after
//!    one attempt; one subscription canceled at period end is canceled, not charged. `billing status --json`
//!    lists them.
//! 3. Month B (2026-11), 3 runs at once: parked subscriptions are not charged; a cycle a merchant API checkout
//!    is paying is followed (`paid_elsewhere`), and a second checkout for it is 409 `billing_cycle_in_use`.
//! 4. `subscriptions update` of a past-due subscription: its parked cycles are charged again by the next run.
//! 5. A worker hanging between the gateway's answer and its recording (`dispatch.after_send`) is SIGKILLed
//!    after the sandbox counted the charge; a fresh worker sends the same key again: one charge.
//!
//! Then, over everything: per (subscription, cycle) at most one succeeded intent and exactly the claims the
//! schedule implies; every charge key executed once at the gateway, the captured charges = the paid cycles, each
//! card charged exactly as often as the model says; one ledger payment posting per paid cycle; the receiver got
//! one `subscription.charged` per paid cycle, one `subscription.payment_failed` per declined attempt, one
//! `subscription.past_due` per past-due cycle, one `payment_intent.*` per completed intent, all validly signed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use futures::future::join_all;
use hookline_payments::intents::charge_key;
use hookline_tests::billing::{BillingRig, ClaimRow, Fact, RunTotals, PROVIDER, WAIT};
use hookline_tests::faults::report_line;
use hookline_tests::wait_for;
use serde_json::{json, Value};

const OCT: &str = "2026-10";
const NOV: &str = "2026-11";
/// The provider's dunning schedule: retries 1 s and 2 s after the 1st and 2nd decline, then past due.
const SCHEDULE: [u32; 2] = [1, 2];
/// Attempts of a cycle that declines every time.
const ALL_ATTEMPTS: i32 = 1 + SCHEDULE.len() as i32;

/// What a subscription's card does, and what the scenario does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Every charge succeeds.
    Pays,
    /// Pays, and its 2026-11 is paid through a merchant API checkout.
    PaidByCheckout,
    /// Declines its first charge (insufficient funds), then succeeds.
    DeclinesOnce,
    /// Declines every charge (insufficient funds); `replaced`: gets a new card after being past due.
    AlwaysDeclines { replaced: bool },
    /// The card is expired (the method unusable); gets a new card, charged by a dispatcher that is killed.
    CardExpired,
    /// Canceled at the end of its first period.
    EndsAtPeriodEnd,
}

const ROLES: [Role; 12] = [
    Role::Pays,
    Role::Pays,
    Role::Pays,
    Role::Pays,
    Role::PaidByCheckout,
    Role::DeclinesOnce,
    Role::DeclinesOnce,
    Role::DeclinesOnce,
    Role::AlwaysDeclines { replaced: true },
    Role::AlwaysDeclines { replaced: false },
    Role::CardExpired,
    Role::EndsAtPeriodEnd,
];

impl Role {
    /// The card-use script: the Nth executed charge of the card gets the Nth outcome. An always-declining card
    /// declines two cycles' worth of attempts, whichever cycle's charge reaches the gateway first.
    fn script(self) -> Vec<&'static str> {
        match self {
            Role::DeclinesOnce => vec!["insufficient_funds", "succeed"],
            Role::AlwaysDeclines { .. } => vec!["insufficient_funds"; 2 * ALL_ATTEMPTS as usize],
            Role::CardExpired => vec!["expired_card"],
            _ => Vec::new(),
        }
    }

    /// Executed charges of the original card at the end.
    fn card_uses(self) -> u32 {
        match self {
            Role::Pays => 3,
            Role::PaidByCheckout => 2, // its 2026-11 is the checkout's charge, with another method
            Role::DeclinesOnce => 4,   // 2026-10 twice, 2026-11, the running period
            Role::AlwaysDeclines { .. } => 2 * ALL_ATTEMPTS as u32,
            Role::CardExpired | Role::EndsAtPeriodEnd => 1,
        }
    }

    /// The final claims: cycle → (status, attempts). `running` is the running period's cycle.
    fn claims(self, running: &str) -> Vec<(String, &'static str, i32)> {
        let c = |cycle: &str, status, attempts| (cycle.to_owned(), status, attempts);
        match self {
            Role::Pays | Role::PaidByCheckout => {
                vec![c(OCT, "paid", 1), c(NOV, "paid", 1), c(running, "paid", 1)]
            }
            Role::DeclinesOnce => vec![c(OCT, "paid", 2), c(NOV, "paid", 1), c(running, "paid", 1)],
            Role::AlwaysDeclines { replaced: true } => vec![
                c(OCT, "paid", ALL_ATTEMPTS + 1),
                c(running, "paid", ALL_ATTEMPTS + 1),
            ],
            Role::AlwaysDeclines { replaced: false } => vec![
                c(OCT, "past_due", ALL_ATTEMPTS),
                c(running, "past_due", ALL_ATTEMPTS),
            ],
            Role::CardExpired => vec![c(OCT, "paid", 2)],
            Role::EndsAtPeriodEnd => vec![c(OCT, "paid", 1)],
        }
    }

    /// The declined attempts: cycle → attempt numbers, and the decline code.
    fn declines(self, running: &str) -> (Vec<(String, i32)>, &'static str) {
        let all = |cycle: &str| {
            let cycle = cycle.to_owned();
            (1..=ALL_ATTEMPTS).map(move |a| (cycle.clone(), a))
        };
        match self {
            Role::DeclinesOnce => (vec![(OCT.into(), 1)], "insufficient_funds"),
            Role::AlwaysDeclines { .. } => {
                (all(OCT).chain(all(running)).collect(), "insufficient_funds")
            }
            Role::CardExpired => (vec![(OCT.into(), 1)], "expired_card"),
            _ => (Vec::new(), ""),
        }
    }

    fn final_status(self) -> &'static str {
        match self {
            Role::AlwaysDeclines { replaced: false } => "past_due",
            Role::EndsAtPeriodEnd => "canceled",
            _ => "active",
        }
    }
}

/// One subscription of the scenario.
#[derive(Debug, Clone)]
struct Sub {
    id: i64,
    role: Role,
    customer: String,
    card: String,
    amount: i64,
}

/// The cycle of the running period (periods start on the 1st): what a run without `--cycle` bills.
fn running_cycle() -> String {
    let today = time::OffsetDateTime::now_utc().date();
    let running = format!("{:04}-{:02}", today.year(), u8::from(today.month()));
    assert!(
        running.as_str() > NOV,
        "the scenario needs 2026-10 and 2026-11 to be past months (today is {today})"
    );
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn billing_months_dunning_checkout_and_a_killed_dispatcher_charge_each_cycle_once() {
    let started = Instant::now();
    let mut rig = BillingRig::start("billing_dunning", &SCHEDULE).await;
    let running = running_cycle();
    let subs = subscribe(&rig).await;
    month_a(&mut rig, &subs).await;
    dunning(&rig, &subs, &running).await;
    month_b(&rig, &subs).await;
    past_due_gets_a_new_card(&rig, &subs, &running).await;
    killed_between_send_and_record(&mut rig, &subs).await;
    everything_once(&rig, &subs, &running).await;
    report_line(&format!(
        "billing_dunning: {} subscriptions, {} charges at the gateway, {} facts, {:.1} s",
        subs.len(),
        rig.sandbox.control().charges().total_charges,
        rig.facts().len(),
        started.elapsed().as_secs_f64()
    ));
    rig.teardown().await;
}

fn of(subs: &[Sub], pick: impl Fn(Role) -> bool) -> Vec<&Sub> {
    subs.iter().filter(|s| pick(s.role)).collect()
}

fn one(subs: &[Sub], role: Role) -> &Sub {
    subs.iter().find(|s| s.role == role).expect("the role")
}

/// Saved cards at the gateway, their scripts, and `hookline subscriptions add` for each.
async fn subscribe(rig: &BillingRig) -> Vec<Sub> {
    let mut subs = Vec::new();
    for (i, role) in ROLES.into_iter().enumerate() {
        let (customer, card) = rig.saved_card(&format!("cliente-{i}")).await;
        let script = role.script();
        if !script.is_empty() {
            rig.sandbox
                .control()
                .script_payment_method(PROVIDER, &card, &script)
                .expect("script the card");
        }
        let amount = 1000 + 100 * i as i64;
        let id = rig.add_subscription(&customer, &card, amount).await;
        subs.push(Sub {
            id,
            role,
            customer,
            card,
            amount,
        });
    }
    subs
}

/// 15 sequential runs of 2026-10, then 3 at once, with no dispatcher: one claim, intent and request per
/// subscription. Then a worker sends them; each first attempt's outcome decides the cycle.
async fn month_a(rig: &mut BillingRig, subs: &[Sub]) {
    let n = subs.len() as u64;
    let first = rig.billing_run(Some(OCT)).await;
    assert_eq!(
        first,
        RunTotals {
            charged: n,
            ..RunTotals::default()
        }
    );
    let nothing_new = RunTotals {
        already_claimed: n,
        ..RunTotals::default()
    };
    for _ in 1..15 {
        assert_eq!(rig.billing_run(Some(OCT)).await, nothing_new);
    }
    let parallel = join_all((0..3).map(|_| rig.billing_run(Some(OCT)))).await;
    assert_eq!(parallel, vec![nothing_new; 3]);
    for table in ["billing_claims", "payment_intents", "outbound_requests"] {
        let rows = rig.count(&format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(rows, n as i64, "{table}");
    }
    assert_eq!(rig.sandbox.control().charges().total_charges, 0);

    rig.cluster.start_worker(None).await;
    rig.settled("month A's first attempts").await;
    for s in subs {
        let claim = rig.claim(s.id, OCT).await.expect("claimed");
        assert_eq!(claim.attempts, 1, "{claim:?}");
        let (status, sub_status) = match s.role {
            Role::DeclinesOnce | Role::AlwaysDeclines { .. } => ("retry_scheduled", "active"),
            Role::CardExpired => ("needs_payment_method", "needs_payment_method"),
            _ => ("paid", "active"),
        };
        assert_eq!(claim.status, status, "{s:?}: {claim:?}");
        assert_eq!(claim.next_attempt_at.is_some(), status == "retry_scheduled");
        assert_eq!(rig.subscription_status(s.id).await, sub_status, "{s:?}");
    }
}

/// The retries, each run once the scheduled ones are due, alternating a run of the running period (no
/// `--cycle`) and one of 2026-10, until no cycle is in retry.
async fn dunning(rig: &BillingRig, subs: &[Sub], running: &str) {
    let ending = one(subs, Role::EndsAtPeriodEnd);
    let id = ending.id.to_string();
    rig.cli(&["subscriptions", "cancel", &id, "--at-period-end"])
        .await;
    let declined = of(subs, |r| {
        matches!(r, Role::DeclinesOnce | Role::AlwaysDeclines { .. })
    });
    assert_eq!(rig.until_retries_due().await, declined.len() as i64);
    // The running period is billed for the first time: every subscription neither parked nor ending.
    let first = rig.billing_run(None).await;
    assert_eq!(
        first,
        RunTotals {
            charged: (subs.len() - 2) as u64,
            retried: declined.len() as u64,
            parked: 1,
            canceled_at_period_end: 1,
            ..RunTotals::default()
        }
    );
    rig.settled("the first retries").await;
    let mut rounds = 1;
    loop {
        let scheduled = rig.until_retries_due().await;
        if scheduled == 0 {
            break;
        }
        rounds += 1;
        assert!(
            rounds <= ALL_ATTEMPTS,
            "more rounds than the schedule allows"
        );
        let cycle = (rounds % 2 == 0).then_some(OCT);
        let run = rig.billing_run(cycle).await;
        assert_eq!(run.retried, scheduled as u64, "round {rounds}: {run:?}");
        assert_eq!(run.charged, 0, "round {rounds}: {run:?}");
        rig.settled(&format!("dunning round {rounds}")).await;
    }
    assert_eq!(rounds, ALL_ATTEMPTS, "one round per attempt");

    for s in subs {
        let (oct, run) = match s.role {
            Role::DeclinesOnce => (Some(("paid", 2)), Some(("paid", 1))),
            Role::AlwaysDeclines { .. } => (
                Some(("past_due", ALL_ATTEMPTS)),
                Some(("past_due", ALL_ATTEMPTS)),
            ),
            Role::CardExpired => (Some(("needs_payment_method", 1)), None),
            Role::EndsAtPeriodEnd => (Some(("paid", 1)), None),
            _ => (Some(("paid", 1)), Some(("paid", 1))),
        };
        for (cycle, want) in [(OCT, oct), (running, run)] {
            let got = rig.claim(s.id, cycle).await;
            let got = got.as_ref().map(|c| (c.status.as_str(), c.attempts));
            assert_eq!(got, want, "{s:?} {cycle}");
        }
        let scripted = rig
            .sandbox
            .control()
            .payment_method_script(PROVIDER, &s.card)
            .expect("the card's script");
        let uses = match s.role {
            Role::DeclinesOnce => 3,
            Role::AlwaysDeclines { .. } => 2 * ALL_ATTEMPTS as u32,
            Role::CardExpired | Role::EndsAtPeriodEnd => 1,
            _ => 2,
        };
        assert_eq!(scripted.uses, uses, "{s:?}");
    }
    assert_eq!(rig.subscription_status(ending.id).await, "canceled");
    status_lists_the_parked(rig, subs, running).await;
}

/// `hookline billing status --json` after the dunning: the past-due subscriptions, the one needing a payment
/// method, their unpaid cycles; nothing in retry or in flight.
async fn status_lists_the_parked(rig: &BillingRig, subs: &[Sub], running: &str) {
    let status = rig.billing_status().await;
    let always = of(subs, |r| matches!(r, Role::AlwaysDeclines { .. }));
    let expired = one(subs, Role::CardExpired);
    let ids = |list: &Value| -> Vec<i64> {
        list.as_array()
            .expect("a list")
            .iter()
            .map(|s| s["id"].as_i64().expect("an id"))
            .collect()
    };
    assert_eq!(
        ids(&status["past_due"]),
        always.iter().map(|s| s.id).collect::<Vec<_>>(),
        "{status}"
    );
    assert_eq!(ids(&status["needs_payment_method"]), vec![expired.id]);
    assert_eq!(status["in_retry"], json!([]), "{status}");
    assert_eq!(status["charging"], json!([]), "{status}");
    let unpaid: BTreeSet<(i64, String, String)> = status["unpaid_cycles"]
        .as_array()
        .expect("unpaid cycles")
        .iter()
        .map(|c| {
            assert!(c["last_failure_code"].is_string(), "{c}");
            (
                c["subscription_id"].as_i64().expect("id"),
                c["billing_cycle"].as_str().expect("cycle").to_owned(),
                c["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect();
    let mut want = BTreeSet::new();
    for s in &always {
        for cycle in [OCT, running] {
            want.insert((s.id, cycle.to_owned(), "past_due".to_owned()));
        }
    }
    want.insert((
        expired.id,
        OCT.to_owned(),
        "needs_payment_method".to_owned(),
    ));
    assert_eq!(unpaid, want);
}

/// 2026-11: a merchant API checkout for one subscription's cycle is built first (not confirmed yet), a second
/// one is refused; three runs at once charge everyone else once, follow the checkout, skip the parked.
async fn month_b(rig: &BillingRig, subs: &[Sub]) {
    let paying = one(subs, Role::PaidByCheckout);
    let checkout = |confirm: bool| {
        json!({"provider": PROVIDER, "amount": paying.amount, "currency": "brl", "customer": paying.customer,
               "subscription_id": paying.id, "billing_cycle": NOV, "confirm": confirm,
               "stripe": {"payment_method": "pm_card_visa"}})
    };
    let (status, intent) = rig
        .api_post(
            "/v1/payment_intents",
            Some("checkout-nov"),
            &checkout(false),
        )
        .await;
    assert_eq!(status, 201, "{intent}");
    assert_eq!(intent["status"], "requires_confirmation", "{intent}");
    assert_eq!(intent["subscription_id"], paying.id, "{intent}");
    assert_eq!(intent["billing_cycle"], NOV, "{intent}");
    let checkout_id = intent["id"].as_str().expect("the intent's id").to_owned();
    let (status, second) = rig
        .api_post(
            "/v1/payment_intents",
            Some("checkout-nov-again"),
            &checkout(true),
        )
        .await;
    assert_eq!(status, 409, "{second}");
    assert_eq!(second["error"]["code"], "billing_cycle_in_use", "{second}");
    assert_eq!(second["error"]["intent"], checkout_id.as_str(), "{second}");

    let runs = join_all((0..3).map(|_| rig.billing_run(Some(NOV)))).await;
    let total = runs.iter().fold(RunTotals::default(), |a, r| a + *r);
    let charged = of(subs, |r| matches!(r, Role::Pays | Role::DeclinesOnce));
    let parked = 3; // two past due, one waiting for a payment method
    assert_eq!(total.charged, charged.len() as u64, "{runs:?}");
    assert_eq!(total.paid_elsewhere, 1, "{runs:?}");
    assert_eq!(total.retried, 0, "{runs:?}");
    assert_eq!(total.parked, 3 * parked, "{runs:?}");
    for r in &runs {
        // Each run saw every billable subscription once: charged by it or by another, or parked.
        assert_eq!(
            r.charged + r.paid_elsewhere + r.already_claimed + r.parked,
            (subs.len() - 1) as u64,
            "{r:?}"
        );
    }
    let followed = rig.claim(paying.id, NOV).await.expect("the claim follows");
    assert_eq!(
        (followed.status.as_str(), followed.intent.as_str()),
        ("charging", checkout_id.as_str())
    );

    // The checkout is confirmed: the dispatcher charges it, and the cycle it pays is paid.
    let (status, confirmed) = rig
        .api_post(
            &format!("/v1/payment_intents/{checkout_id}/confirm"),
            None,
            &json!({}),
        )
        .await;
    assert_eq!(status, 200, "{confirmed}");
    rig.settled("month B").await;
    for s in subs {
        let got = rig.claim(s.id, NOV).await;
        let want = match s.role {
            Role::Pays | Role::DeclinesOnce | Role::PaidByCheckout => Some(("paid", 1)),
            _ => None,
        };
        let got_status = got.as_ref().map(|c| (c.status.as_str(), c.attempts));
        assert_eq!(got_status, want, "{s:?}");
        if s.role == Role::PaidByCheckout {
            assert_eq!(got.expect("claimed").intent, checkout_id);
        }
    }
}

/// `subscriptions update` of the past-due subscription that gets a new card: both its parked cycles are charged
/// again by the next run (without `--cycle`: the running period's retry, and 2026-10's from the due list).
async fn past_due_gets_a_new_card(rig: &BillingRig, subs: &[Sub], running: &str) {
    let s = one(subs, Role::AlwaysDeclines { replaced: true });
    let card = rig.new_card(&s.customer).await;
    let id = s.id.to_string();
    rig.cli(&["subscriptions", "update", &id, "--payment-method", &card])
        .await;
    assert_eq!(rig.subscription_status(s.id).await, "active");
    let run = rig.billing_run(None).await;
    assert_eq!((run.charged, run.retried), (0, 2), "{run:?}");
    rig.settled("the past-due subscription's new card").await;
    for cycle in [OCT, running] {
        let claim = rig.claim(s.id, cycle).await.expect("claimed");
        assert_eq!(
            (claim.status.as_str(), claim.attempts),
            ("paid", ALL_ATTEMPTS + 1)
        );
    }
    let charges = rig.sandbox.control().charges();
    assert_eq!(charges.payment_method_charges(PROVIDER, &card), 2);
    assert_eq!(rig.subscription_status(s.id).await, "active");
}

/// The expired card's subscription gets a new card; its 2026-10 retry is sent by a worker that hangs right
/// after the gateway answered (`dispatch.after_send`) and is SIGKILLed once the sandbox counted the charge. A
/// fresh worker, after the lease, sends the same key again: the gateway replays, one charge.
async fn killed_between_send_and_record(rig: &mut BillingRig, subs: &[Sub]) {
    let s = one(subs, Role::CardExpired);
    let card = rig.new_card(&s.customer).await;
    rig.cluster
        .restart_worker(0, Some("dispatch.after_send=sleep(600000)"))
        .await;
    let id = s.id.to_string();
    rig.cli(&["subscriptions", "update", &id, "--payment-method", &card])
        .await;
    let run = rig.billing_run(Some(OCT)).await;
    assert_eq!((run.charged, run.retried), (0, 1), "{run:?}");
    let claim = rig.claim(s.id, OCT).await.expect("claimed");
    let key = charge_key(claim.intent_id);
    let control = rig.sandbox.control().clone();
    wait_for(
        WAIT,
        "the gateway executed the retry's charge",
        || {
            let control = control.clone();
            let key = key.clone();
            async move {
                control
                    .charges()
                    .key(PROVIDER, &key)
                    .map_or(0, |k| k.executed)
            }
        },
        |executed| *executed >= 1,
    )
    .await;
    rig.cluster.kill_worker(0);
    let recorded: String =
        sqlx::query_scalar("SELECT status FROM outbound_requests WHERE intent_id = $1")
            .bind(claim.intent_id)
            .fetch_one(rig.cluster.pool())
            .await
            .expect("the request");
    assert_eq!(
        recorded, "pending",
        "the dispatcher recorded nothing before the kill"
    );

    rig.cluster.restart_worker(0, None).await;
    rig.settled("the killed dispatcher's charge").await;
    let claim = rig.claim(s.id, OCT).await.expect("claimed");
    assert_eq!((claim.status.as_str(), claim.attempts), ("paid", 2));
    let report = rig.sandbox.control().charges();
    let stats = report
        .key(PROVIDER, &key)
        .expect("the key reached the gateway");
    assert_eq!((stats.executed, stats.charges), (1, 1), "{stats:?}");
    assert!(
        stats.requests >= 2 && stats.replays >= 1,
        "sent again with the same key: {stats:?}"
    );
    assert_eq!(report.payment_method_charges(PROVIDER, &card), 1);
    let status: String =
        sqlx::query_scalar("SELECT status FROM outbound_requests WHERE intent_id = $1")
            .bind(claim.intent_id)
            .fetch_one(rig.cluster.pool())
            .await
            .expect("the request");
    assert_eq!(status, "succeeded");
}

/// The invariants over the whole history: claims, intents, the gateway, the ledger, the facts.
async fn everything_once(rig: &BillingRig, subs: &[Sub], running: &str) {
    let mut want = BTreeMap::new();
    for s in subs {
        for (cycle, status, attempts) in s.role.claims(running) {
            want.insert((s.id, cycle), (status.to_owned(), attempts));
        }
        assert_eq!(
            rig.subscription_status(s.id).await,
            s.role.final_status(),
            "{s:?}"
        );
    }
    let claims = rig.claims().await;
    let got: BTreeMap<(i64, String), (String, i32)> = claims
        .iter()
        .map(|c| {
            (
                (c.subscription_id, c.billing_cycle.clone()),
                (c.status.clone(), c.attempts),
            )
        })
        .collect();
    assert_eq!(got, want);
    let paid: Vec<_> = claims.iter().filter(|c| c.status == "paid").collect();

    // Per (subscription, cycle) at most one succeeded intent: exactly one for a paid cycle, none otherwise.
    let succeeded: Vec<(i64, String, i64, String)> = sqlx::query_as(
        "SELECT subscription_id, billing_cycle, id, provider_payment_id FROM payment_intents
          WHERE status = 'succeeded' ORDER BY subscription_id, billing_cycle",
    )
    .fetch_all(rig.cluster.pool())
    .await
    .expect("succeeded intents");
    let per_cycle: BTreeMap<(i64, String), i64> = succeeded
        .iter()
        .map(|(s, c, id, _)| ((*s, c.clone()), *id))
        .collect();
    assert_eq!(
        per_cycle.len(),
        succeeded.len(),
        "a cycle succeeded twice: {succeeded:?}"
    );
    let paid_intents: BTreeMap<(i64, String), i64> = paid
        .iter()
        .map(|c| ((c.subscription_id, c.billing_cycle.clone()), c.intent_id))
        .collect();
    assert_eq!(per_cycle, paid_intents);

    // The gateway: every intent's key executed once (one charge each, declined ones included), the captured
    // charges are the paid cycles, and each card was charged as often as the model says.
    let intents: Vec<(i64, String, i64, Option<String>)> = sqlx::query_as(
        "SELECT id, status, subscription_id, billing_cycle FROM payment_intents ORDER BY id",
    )
    .fetch_all(rig.cluster.pool())
    .await
    .expect("intents");
    let report = rig.sandbox.control().charges();
    for (id, status, _, _) in &intents {
        assert!(
            status == "succeeded" || status == "failed",
            "intent {id}: {status}"
        );
        let stats = report
            .key(PROVIDER, &charge_key(*id))
            .unwrap_or_else(|| panic!("intent {id} reached the gateway"));
        assert_eq!(
            (stats.executed, stats.charges),
            (1, 1),
            "intent {id}: {stats:?}"
        );
    }
    let st = report.provider(PROVIDER).expect("the provider's report");
    assert_eq!(st.charges, intents.len(), "{report:?}");
    assert_eq!(st.captured_charges, paid.len(), "{report:?}");
    for s in subs {
        assert_eq!(
            report.payment_method_charges(PROVIDER, &s.card),
            s.role.card_uses(),
            "{s:?}"
        );
    }

    // The ledger: one payment posting per paid cycle, by its payment at the gateway.
    let postings: Vec<(String, i64)> = sqlx::query_as(
        "SELECT reference, count(*) FROM ledger_transactions WHERE kind = 'payment' GROUP BY reference",
    )
    .fetch_all(rig.cluster.pool())
    .await
    .expect("postings");
    let want_postings: BTreeMap<String, i64> = succeeded
        .iter()
        .map(|(_, _, _, pi)| (pi.clone(), 1))
        .collect();
    assert_eq!(
        postings.into_iter().collect::<BTreeMap<_, _>>(),
        want_postings
    );

    facts_once(rig, subs, running, &claims, intents.len()).await;
}

/// The facts the receiver acted on: exactly the ones the history implies, each once.
async fn facts_once(
    rig: &BillingRig,
    subs: &[Sub],
    running: &str,
    claims: &[ClaimRow],
    intents: usize,
) {
    let paid: Vec<_> = claims.iter().filter(|c| c.status == "paid").collect();
    let mut failed_want = BTreeMap::new();
    let mut past_due_want = BTreeSet::new();
    for s in subs {
        let (declines, code) = s.role.declines(running);
        for (cycle, attempt) in declines {
            failed_want.insert((s.id.to_string(), cycle.clone(), attempt), code.to_owned());
            if matches!(s.role, Role::AlwaysDeclines { .. }) && attempt == ALL_ATTEMPTS {
                past_due_want.insert((s.id.to_string(), cycle));
            }
        }
    }
    let facts = rig.all_facts_delivered().await;
    let of_type = |t: &'static str| facts.iter().filter(move |f| f.ty == t).map(|f| &f.data);

    charged_once(&facts, subs, &paid);

    let mut failed = BTreeMap::new();
    for d in of_type("subscription.payment_failed") {
        let key = (
            d["subscription_id"].as_str().expect("id").to_owned(),
            d["billing_cycle"].as_str().expect("cycle").to_owned(),
            d["attempt"].as_i64().expect("attempt") as i32,
        );
        let last = d["subscription_status"] != "active" && d["next_attempt_at"].is_null();
        let code = d["failure_code"].as_str().expect("code").to_owned();
        let retried = !d["next_attempt_at"].is_null();
        let final_attempt = code == "expired_card" || key.2 == ALL_ATTEMPTS;
        assert_eq!(retried, !final_attempt, "{d}");
        assert!(retried || last, "{d}");
        assert!(failed.insert(key, code).is_none(), "failed twice: {d}");
    }
    assert_eq!(failed, failed_want);
    let past_due: BTreeSet<(String, String)> = of_type("subscription.past_due")
        .map(|d| {
            assert_eq!(d["attempts"], ALL_ATTEMPTS, "{d}");
            (
                d["subscription_id"].as_str().expect("id").to_owned(),
                d["billing_cycle"].as_str().expect("cycle").to_owned(),
            )
        })
        .collect();
    assert_eq!(past_due, past_due_want);
    // The subscription canceled at its period's end: told once, when billing canceled it.
    let canceled: Vec<String> = of_type("subscription.canceled")
        .map(|d| d["subscription_id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(
        canceled,
        [one(subs, Role::EndsAtPeriodEnd).id.to_string()],
        "one subscription.canceled"
    );

    // payment_intent.* of every billing charge name its subscription and cycle.
    let mut intent_facts = BTreeSet::new();
    for d in of_type("payment_intent.succeeded").chain(of_type("payment_intent.failed")) {
        assert!(
            d["subscription_id"].is_string() && d["billing_cycle"].is_string(),
            "{d}"
        );
        assert!(
            intent_facts.insert(d["intent_id"].as_str().expect("intent").to_owned()),
            "{d}"
        );
    }
    assert_eq!(intent_facts.len(), intents);
}

/// One `subscription.charged` per paid cycle, naming the cycle's paying intent, its attempt and amount.
fn charged_once(facts: &[Fact], subs: &[Sub], paid: &[&ClaimRow]) {
    let of_type = |t: &'static str| facts.iter().filter(move |f| f.ty == t).map(|f| &f.data);
    let amount = |id: &str| {
        subs.iter()
            .find(|s| s.id.to_string() == id)
            .map(|s| s.amount)
    };
    let mut charged = BTreeMap::new();
    for d in of_type("subscription.charged") {
        let key = (
            d["subscription_id"].as_str().expect("id").to_owned(),
            d["billing_cycle"].as_str().expect("cycle").to_owned(),
        );
        assert_eq!(d["billed_by"], "hookline", "{d}");
        assert_eq!(d["provider"], PROVIDER, "{d}");
        assert_eq!(d["amount"].as_i64(), amount(&key.0), "{d}");
        assert!(
            charged.insert(key, d.clone()).is_none(),
            "charged twice: {d}"
        );
    }
    let paid_keys: BTreeMap<(String, String), (&str, i32)> = paid
        .iter()
        .map(|c| {
            (
                (c.subscription_id.to_string(), c.billing_cycle.clone()),
                (c.intent.as_str(), c.attempts),
            )
        })
        .collect();
    assert_eq!(
        charged.keys().collect::<Vec<_>>(),
        paid_keys.keys().collect::<Vec<_>>()
    );
    for (key, d) in &charged {
        let (intent, attempts) = paid_keys[key];
        assert_eq!(d["intent_id"], intent, "{d}");
        assert_eq!(d["attempt"], attempts, "{d}");
    }
}
