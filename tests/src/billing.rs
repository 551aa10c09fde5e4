//! The rig of the billing proof (issue 28, `tests/it/billing_dunning.rs`): the REAL `hookline-edge` (with the
//! merchant API on its own listener) and `hookline-worker` (consumer, dispatcher, fact delivery) of a fault-suite
//! [`Cluster`], the provider sandbox in-process as the Stripe gateway (saved cards, card-use scripts, charges
//! counted per idempotency key), a merchant's receiver that verifies Standard Webhooks signatures, and the
//! operator's `hookline` CLI run as real processes. It also reads what the proof asserts on: the cycles' claims,
//! the runs' summaries, the facts the receiver acted on.

use std::collections::BTreeMap;
use std::time::Duration;

use hookline_sandbox::{RunningSandbox, Sandbox, SandboxProvider, SandboxSettings, Scheme};
use serde_json::{json, Value};
use time::OffsetDateTime;

use crate::faults::{free_port, Cluster, ClusterOptions};
use crate::receiver::{Behaviour, Receiver};
use crate::{secrets, wait_for};

/// The Stripe provider every subscription bills through.
pub const PROVIDER: &str = "st";
/// The merchant's destination of facts (every type).
pub const DESTINATION: &str = "billing";
/// The merchant API client's key.
pub const API_KEY: &str = "sk_hl_billing_proof_key";
/// The anchor of every subscription: periods start on the first of each month, 00:00 UTC.
pub const ANCHOR: &str = "2026-10-01T00:00:00Z";
/// How long anything in flight may take to settle (debug binaries on a loaded machine).
pub const WAIT: Duration = Duration::from_secs(90);
/// The Stripe provider's webhook signing secret.
pub const WEBHOOK_SECRET: &str = "whsec_billing_proof";
/// The Stripe API key the dispatcher sends.
pub const STRIPE_KEY: &str = "sk_test_billing_proof";

/// The totals of one `hookline billing run --json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunTotals {
    /// New cycles charged.
    pub charged: u64,
    /// Scheduled retries charged.
    pub retried: u64,
    /// Cycles already claimed, nothing due.
    pub already_claimed: u64,
    /// Cycles with a live charge made through another channel (followed, not charged).
    pub paid_elsewhere: u64,
    /// Parked subscriptions (past due, needing a payment method).
    pub parked: u64,
    /// Canceled subscriptions skipped.
    pub canceled_skipped: u64,
    /// Subscriptions canceled at the end of their period by this run.
    pub canceled_at_period_end: u64,
    /// Subscriptions whose cycle has not started or is not theirs.
    pub not_due: u64,
}

impl std::ops::Add for RunTotals {
    type Output = RunTotals;
    fn add(self, o: RunTotals) -> RunTotals {
        RunTotals {
            charged: self.charged + o.charged,
            retried: self.retried + o.retried,
            already_claimed: self.already_claimed + o.already_claimed,
            paid_elsewhere: self.paid_elsewhere + o.paid_elsewhere,
            parked: self.parked + o.parked,
            canceled_skipped: self.canceled_skipped + o.canceled_skipped,
            canceled_at_period_end: self.canceled_at_period_end + o.canceled_at_period_end,
            not_due: self.not_due + o.not_due,
        }
    }
}

/// A cycle's claim as the database holds it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimRow {
    /// The subscription.
    pub subscription_id: i64,
    /// `YYYY-MM`.
    pub billing_cycle: String,
    /// `charging`, `retry_scheduled`, `paid`, …
    pub status: String,
    /// Charges made for it.
    pub attempts: i32,
    /// When the next attempt is due.
    pub next_attempt_at: Option<OffsetDateTime>,
    /// Its latest charge (internal id).
    pub intent_id: i64,
    /// Its latest charge (public id).
    pub intent: String,
}

/// One fact the receiver acted on.
#[derive(Debug, Clone)]
pub struct Fact {
    /// `webhook-id` (the fact's id).
    pub webhook_id: String,
    /// Its type (`subscription.charged`, …).
    pub ty: String,
    /// Its `data`.
    pub data: Value,
}

/// The running rig (see the module documentation).
pub struct BillingRig {
    /// The real edge and workers on a private database and RabbitMQ prefix.
    pub cluster: Cluster,
    /// The Stripe gateway.
    pub sandbox: RunningSandbox,
    /// The merchant's fact receiver.
    pub receiver: Receiver,
    /// The merchant API's base URL.
    pub api: String,
    http: reqwest::Client,
}

impl BillingRig {
    /// Starts the receiver, the cluster's edge (no worker yet: [`Cluster::start_worker`] when the test wants
    /// charges sent) and the sandbox; `dunning_retry_secs` is the provider's schedule, the dispatcher's lease is
    /// 2 s (a killed dispatcher's charge is sent again soon).
    pub async fn start(name: &str, dunning_retry_secs: &[u32]) -> BillingRig {
        Self::start_with(name, dunning_retry_secs, "").await
    }

    /// [`BillingRig::start`] with more configuration (sections not set above, e.g. `[telemetry]`). The workers'
    /// billing scheduler is off (`[billing] enabled = false`): these proofs drive `hookline billing run` by hand
    /// and count what each run did.
    pub async fn start_with(name: &str, dunning_retry_secs: &[u32], extra: &str) -> BillingRig {
        Self::start_billing(name, dunning_retry_secs, "enabled = false", "", extra).await
    }

    /// [`BillingRig::start`] with the workers billing by themselves every `schedule_secs`; with `metrics_port`,
    /// the worker serves `/metrics` there (one worker at a time, then).
    pub async fn start_scheduled(
        name: &str,
        dunning_retry_secs: &[u32],
        schedule_secs: u32,
        metrics_port: Option<u16>,
    ) -> BillingRig {
        let worker = metrics_port
            .map(|port| format!("listen = \"127.0.0.1:{port}\"\n"))
            .unwrap_or_default();
        Self::start_billing(
            name,
            dunning_retry_secs,
            &format!("schedule_secs = {schedule_secs}"),
            &worker,
            "",
        )
        .await
    }

    async fn start_billing(
        name: &str,
        dunning_retry_secs: &[u32],
        billing: &str,
        worker: &str,
        extra: &str,
    ) -> BillingRig {
        let receiver = Receiver::start();
        receiver.configure(DESTINATION, Behaviour::Ok, &[secrets::STANDARD]);
        let sandbox_port = free_port();
        let api_port = free_port();
        let schedule: Vec<String> = dunning_retry_secs.iter().map(u32::to_string).collect();
        // `worker` lands in the cluster's `[worker]` section, which the tail follows.
        let tail = format!(
            "{worker}[providers.{PROVIDER}]\nscheme = \"stripe\"\nsecrets = [\"{WEBHOOK_SECRET}\"]\n\
             fee_bps = 399\nfee_fixed = 39\n\
             api_base = \"http://127.0.0.1:{sandbox_port}\"\napi_token = \"{STRIPE_KEY}\"\n\
             dunning_retry_secs = [{schedule}]\n\
             [dispatcher]\nlease_secs = 2\n[billing]\n{billing}\n\
             [delivery]\ntimeout_ms = 5000\nbackoff_base_ms = 50\nbackoff_max_secs = 1\npoll_interval_ms = 50\n\
             [[destinations]]\nname = \"{DESTINATION}\"\nurl = \"{url}\"\nsecrets = [\"{secret}\"]\n\
             events = [\"*\"]\n\
             [api]\nlisten = \"127.0.0.1:{api_port}\"\n\
             [[api.clients]]\nname = \"shop\"\nkeys = [\"{API_KEY}\"]\n{extra}",
            schedule = schedule.join(", "),
            url = receiver.url(DESTINATION),
            secret = secrets::STANDARD,
        );
        let mut cluster = Cluster::new(
            name,
            ClusterOptions {
                tail,
                ..ClusterOptions::default()
            },
        )
        .await;
        let mut settings = SandboxSettings::new(
            format!("127.0.0.1:{sandbox_port}").parse().expect("addr"),
            cluster.base.parse().expect("edge url"),
            vec![SandboxProvider {
                name: PROVIDER.into(),
                scheme: Scheme::Stripe,
                webhook_secret: WEBHOOK_SECRET.as_bytes().to_vec(),
                api_token: Some(STRIPE_KEY.into()),
                webhook_basic_auth: None,
            }],
        );
        settings.webhook_backoff = Duration::from_millis(100);
        settings.webhook_max_backoff = Duration::from_millis(500);
        let sandbox = Sandbox::start(settings).await.expect("sandbox");
        cluster.start_edge(None).await;
        let rig = BillingRig {
            cluster,
            sandbox,
            receiver,
            api: format!("http://127.0.0.1:{api_port}"),
            http: reqwest::Client::new(),
        };
        // The destination is in the database before anything records a fact: the worker's delivery task syncs
        // it at start, but its dispatcher may complete a charge (and record facts) before that sync.
        rig.cli(&["destinations", "list"]).await;
        rig
    }

    /// `hookline ARGS…`, a real process; asserts exit 0 and returns what it printed on stdout.
    pub async fn cli(&self, args: &[&str]) -> String {
        let out = self.cluster.hookline(args).await;
        assert!(
            out.status.success(),
            "hookline {args:?} exited {:?}:\n{}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("the CLI prints UTF-8")
    }

    /// `hookline subscriptions add` for a Stripe customer and saved card, anchored on [`ANCHOR`]; its id.
    pub async fn add_subscription(&self, customer: &str, method: &str, amount: i64) -> i64 {
        let amount = amount.to_string();
        let out = self
            .cli(&[
                "subscriptions",
                "add",
                "--provider",
                PROVIDER,
                "--customer",
                customer,
                "--payment-method",
                method,
                "--amount",
                &amount,
                "--currency",
                "brl",
                "--interval",
                "month",
                "--anchor",
                ANCHOR,
            ])
            .await;
        let id = out.trim().parse().expect("subscriptions add prints the id");
        // A subscription that existed since the anchor (the CLI stamps its creation now): its periods from the
        // anchor on are its own.
        sqlx::query(
            "UPDATE subscriptions SET created_at = anchor, next_cycle = to_char(anchor AT TIME ZONE 'UTC', 'YYYY-MM'),
                    next_period_at = anchor
              WHERE id = $1",
        )
        .bind(id)
        .execute(self.cluster.pool())
        .await
        .expect("backdate the subscription");
        id
    }

    /// `hookline subscriptions add` for a Stripe customer and saved card anchored at `anchor`, created now (no
    /// backdating: the scheduler's own rule decides its first period); its id.
    pub async fn subscribe(
        &self,
        customer: &str,
        method: &str,
        amount: i64,
        anchor: OffsetDateTime,
    ) -> i64 {
        let amount = amount.to_string();
        let anchor = anchor
            .format(&time::format_description::well_known::Rfc3339)
            .expect("an RFC 3339 anchor");
        let out = self
            .cli(&[
                "subscriptions",
                "add",
                "--provider",
                PROVIDER,
                "--customer",
                customer,
                "--payment-method",
                method,
                "--amount",
                &amount,
                "--currency",
                "brl",
                "--interval",
                "month",
                "--anchor",
                &anchor,
            ])
            .await;
        out.trim().parse().expect("subscriptions add prints the id")
    }

    /// `hookline billing run --json`, for `cycle` (`--cycle C --allow-cycle C`) or each subscription's running
    /// period (`None`); asserts exit 0 and no subscription needing attention.
    pub async fn billing_run(&self, cycle: Option<&str>) -> RunTotals {
        let mut args = vec!["billing", "run", "--json"];
        if let Some(c) = cycle {
            args.extend(["--cycle", c, "--allow-cycle", c]);
        }
        let out = self.cli(&args).await;
        let s: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(s["errors"], json!([]), "{s}");
        assert_eq!(s["dry_run"], false, "{s}");
        let n = |k: &str| {
            s[k].as_u64()
                .unwrap_or_else(|| panic!("the summary's {k}: {s}"))
        };
        RunTotals {
            charged: n("charged"),
            retried: n("retried"),
            already_claimed: n("already_claimed"),
            paid_elsewhere: n("paid_elsewhere"),
            parked: n("parked"),
            canceled_skipped: n("canceled_skipped"),
            canceled_at_period_end: n("canceled_at_period_end"),
            not_due: n("not_due"),
        }
    }

    /// `hookline billing status --json`.
    pub async fn billing_status(&self) -> Value {
        let out = self.cli(&["billing", "status", "--json"]).await;
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// A new customer at the Stripe sandbox with a saved card: `(cus_…, pm_…)`.
    pub async fn saved_card(&self, name: &str) -> (String, String) {
        crate::sandboxed::stripe_saved_card(&self.sandbox, STRIPE_KEY, name).await
    }

    /// Another saved card of `customer`: its `pm_…`.
    pub async fn new_card(&self, customer: &str) -> String {
        crate::sandboxed::stripe_attach_card(&self.sandbox, STRIPE_KEY, customer).await
    }

    /// A POST to the merchant API as the client `shop` (with an `Idempotency-Key` when given): status and JSON.
    pub async fn api_post(&self, path: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
        self.api_post_with(path, key, &[], body).await
    }

    /// [`BillingRig::api_post`] with more headers (a caller's `traceparent`).
    pub async fn api_post_with(
        &self,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .post(format!("{}{path}", self.api))
            .bearer_auth(API_KEY)
            .json(body);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(key) = key {
            req = req.header("idempotency-key", key);
        }
        let res = req.send().await.expect("the merchant API answers");
        let status = res.status().as_u16();
        let text = res.text().await.expect("body");
        let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        (status, json)
    }

    /// Every claim, by subscription and cycle.
    pub async fn claims(&self) -> Vec<ClaimRow> {
        sqlx::query_as(
            "SELECT b.subscription_id, b.billing_cycle, b.status, b.attempts, b.next_attempt_at, b.intent_id,
                    p.public_id AS intent
               FROM billing_claims b JOIN payment_intents p ON p.id = b.intent_id
              ORDER BY b.subscription_id, b.billing_cycle",
        )
        .fetch_all(self.cluster.pool())
        .await
        .expect("read the claims")
    }

    /// The claim of `(subscription, cycle)`.
    pub async fn claim(&self, subscription_id: i64, cycle: &str) -> Option<ClaimRow> {
        self.claims()
            .await
            .into_iter()
            .find(|c| c.subscription_id == subscription_id && c.billing_cycle == cycle)
    }

    /// A subscription's status.
    pub async fn subscription_status(&self, id: i64) -> String {
        sqlx::query_scalar("SELECT status FROM subscriptions WHERE id = $1")
            .bind(id)
            .fetch_one(self.cluster.pool())
            .await
            .expect("read the subscription")
    }

    /// `SELECT count(*) …`.
    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(self.cluster.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Waits until nothing is in flight: no cycle `charging`, no outbound request pending or unknown, and every
    /// succeeded intent posted once in the ledger by its webhook. A request that needs attention fails the test.
    pub async fn settled(&self, what: &str) {
        let pool = self.cluster.pool().clone();
        let failed: Vec<(i64, Option<String>)> =
            sqlx::query_as("SELECT id, last_error FROM outbound_requests WHERE status = 'failed'")
                .fetch_all(&pool)
                .await
                .expect("read outbound requests");
        assert!(failed.is_empty(), "requests need attention: {failed:?}");
        wait_for(
            WAIT,
            &format!("{what}: (charging cycles, requests in flight, succeeded intents, postings)"),
            || {
                let pool = pool.clone();
                async move {
                    sqlx::query_as::<_, (i64, i64, i64, i64)>(
                        "SELECT (SELECT count(*) FROM billing_claims WHERE status = 'charging'),
                                (SELECT count(*) FROM outbound_requests WHERE status IN ('pending', 'unknown')),
                                (SELECT count(*) FROM payment_intents WHERE status = 'succeeded'),
                                (SELECT count(*) FROM ledger_transactions WHERE kind = 'payment')",
                    )
                    .fetch_one(&pool)
                    .await
                    .map_err(|e| e.to_string())
                }
            },
            |r| matches!(r, Ok((0, 0, succeeded, postings)) if succeeded == postings),
        )
        .await
        .expect("settled");
    }

    /// Waits until every scheduled retry is due — sleeping until the latest `next_attempt_at` the database
    /// holds, a known time — and returns how many cycles are `retry_scheduled`.
    pub async fn until_retries_due(&self) -> i64 {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (scheduled, wait_ms): (i64, f64) = sqlx::query_as(
                "SELECT count(*),
                        COALESCE(EXTRACT(EPOCH FROM max(next_attempt_at) - clock_timestamp()) * 1000, 0)::float8
                   FROM billing_claims WHERE status = 'retry_scheduled'",
            )
            .fetch_one(self.cluster.pool())
            .await
            .expect("read the scheduled retries");
            if wait_ms <= 0.0 {
                return scheduled;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "retries scheduled too far ahead"
            );
            // Just past the due time (the CLI reads its own clock, the same machine's).
            tokio::time::sleep(Duration::from_millis(wait_ms.ceil() as u64 + 20)).await;
        }
    }

    /// The facts the receiver acted on, one per `webhook-id`, after asserting that every request it received
    /// carried a valid Standard Webhooks signature and that a redelivered id carried the same body.
    pub fn facts(&self) -> Vec<Fact> {
        let mut by_id: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for r in self.receiver.received() {
            assert!(
                r.signature_valid,
                "an unsigned or badly signed request: {r:?}"
            );
            assert_eq!(r.destination, DESTINATION);
            if r.status != 200 {
                continue;
            }
            if let Some(body) = by_id.get(&r.webhook_id) {
                assert_eq!(
                    body, &r.body,
                    "{} redelivered with another body",
                    r.webhook_id
                );
            }
            by_id.insert(r.webhook_id.clone(), r.body);
        }
        let acted = self.receiver.acted(DESTINATION);
        assert_eq!(acted.len(), by_id.len());
        by_id
            .into_iter()
            .map(|(webhook_id, body)| {
                let v: Value = serde_json::from_slice(&body).expect("a fact is JSON");
                assert_eq!(v["id"], webhook_id.as_str(), "{v}");
                Fact {
                    ty: v["type"].as_str().expect("a fact's type").to_owned(),
                    data: v["data"].clone(),
                    webhook_id,
                }
            })
            .collect()
    }

    /// Waits until every fact recorded is delivered to [`DESTINATION`], then asserts the receiver acted on
    /// exactly the facts the database holds (one `webhook-id` each, none missing, none extra) and returns them.
    pub async fn all_facts_delivered(&self) -> Vec<Fact> {
        let pool = self.cluster.pool().clone();
        wait_for(
            WAIT,
            "every fact delivered (deliveries not delivered yet)",
            || {
                let pool = pool.clone();
                async move {
                    sqlx::query_scalar::<_, i64>(
                        "SELECT count(*) FROM domain_deliveries WHERE status <> 'delivered'",
                    )
                    .fetch_one(&pool)
                    .await
                    .map_err(|e| e.to_string())
                }
            },
            |pending| matches!(pending, Ok(0)),
        )
        .await
        .expect("delivered");
        let recorded: Vec<String> = sqlx::query_scalar("SELECT id FROM domain_events ORDER BY id")
            .fetch_all(self.cluster.pool())
            .await
            .expect("read the facts");
        let facts = self.facts();
        let acted: Vec<&str> = facts.iter().map(|f| f.webhook_id.as_str()).collect();
        assert_eq!(
            acted, recorded,
            "the receiver acted on the facts recorded, once each"
        );
        facts
    }

    /// Stops everything and drops the database.
    pub async fn teardown(self) {
        self.sandbox.stop().await;
        self.receiver.stop().await;
        self.cluster.teardown().await;
    }
}
