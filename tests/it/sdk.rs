//! The official Python SDKs (`stripe`, `mercadopago`; `hookline_tests::sdk`) drive the provider sandbox as a
//! merchant's code would: if the sandbox served something no real gateway serves, or refused what the SDKs send,
//! these scripts — written against the SDKs' documented calls, not against the sandbox — would fail. Each test
//! asserts the script passed and what the sandbox itself counted (charges, refunds, replays per key).
//!
//! Pagar.me's official Node SDK (npm `@pagarme/pagarme-nodejs-sdk`) has its base URL fixed at
//! `https://api.pagar.me/core/v5`: its script reaches the sandbox through `HTTPS_PROXY`, a TLS-terminating
//! forward proxy for `api.pagar.me` whose test CA the script trusts through `NODE_EXTRA_CA_CERTS`
//! ([`PagarmeProxy`]), as a deployment behind an inspecting egress proxy would; the SDK and the script are
//! unchanged.
//!
//! The `*_sdk_*` tests go end to end: the merchant's Python code (`hookline_stripe.py`,
//! `hookline_mercadopago.py`) charges through hookline's merchant API and uses the SDKs at the gateway (card
//! tokens, counting payments by hookline's reference), with hookline's API, dispatcher, relay and worker live and
//! the sandbox's webhooks flowing to the edge; each test then checks rows, facts, ledger postings and the
//! sandbox's own count.
//!
//! The first run on a machine makes the venv (`pip install` from PyPI, about a minute) and the Node modules
//! (`npm ci`, some seconds); later runs reuse them.

use std::time::Duration;

use hookline_sandbox::{RunningSandbox, Sandbox, SandboxProvider, SandboxSettings, Scheme, Url};
use hookline_tests::sdk::{run_node_script, run_script, PagarmeProxy, ScriptRun};

const STRIPE_KEY: &str = "sk_test_sdk_harness";
const MP_TOKEN: &str = "TEST-sdk-harness-token";
/// Pagar.me's secret key (its public key, for card tokens, is `pk_test_sdk_harness_pg`).
const PAGARME_KEY: &str = "sk_test_sdk_harness_pg";

/// A sandbox playing `stripe` and `mercadopago` (webhooks to a closed port: the deliveries are recorded and fail).
async fn sandbox(seed: u64) -> RunningSandbox {
    let mut settings = SandboxSettings::new(
        "127.0.0.1:0".parse().expect("addr"),
        Url::parse("http://127.0.0.1:9").expect("url"),
        vec![
            SandboxProvider {
                name: "stripe".into(),
                scheme: Scheme::Stripe,
                webhook_secret: b"whsec_sdk".to_vec(),
                api_token: Some(STRIPE_KEY.into()),
                webhook_basic_auth: None,
            },
            SandboxProvider {
                name: "mercadopago".into(),
                scheme: Scheme::MercadoPago,
                webhook_secret: b"mp_sdk".to_vec(),
                api_token: Some(MP_TOKEN.into()),
                webhook_basic_auth: None,
            },
            SandboxProvider {
                name: "pagarme".into(),
                scheme: Scheme::PagarmeV5,
                webhook_secret: b"pg_sdk".to_vec(),
                api_token: Some(PAGARME_KEY.into()),
                webhook_basic_auth: Some("hookline:sdk".into()),
            },
        ],
    );
    settings.seed = seed;
    settings.webhook_max_attempts = 1;
    settings.webhook_timeout = Duration::from_secs(1);
    Sandbox::start(settings).await.expect("sandbox")
}

/// What a script needs to reach the sandbox, tagged with `run` (its idempotency keys and metadata).
fn env(sandbox: &RunningSandbox, run: &str) -> Vec<(&'static str, String)> {
    let base = sandbox.base_url().as_str().trim_end_matches('/').to_owned();
    vec![
        ("STRIPE_API_BASE", base.clone()),
        ("STRIPE_API_KEY", STRIPE_KEY.to_owned()),
        ("STRIPE_PROVIDER", "stripe".to_owned()),
        ("MP_API_BASE", base.clone()),
        ("MP_ACCESS_TOKEN", MP_TOKEN.to_owned()),
        ("MP_PROVIDER", "mercadopago".to_owned()),
        ("SANDBOX_CONTROL_BASE", base),
        ("SDK_RUN", run.to_owned()),
    ]
}

fn assert_passed(run: &ScriptRun, at_least: usize) {
    assert!(run.passed, "the SDK script failed:\n{}", run.output);
    assert!(
        run.passed_checks() >= at_least,
        "only {} checks passed (expected at least {at_least}):\n{}",
        run.passed_checks(),
        run.output
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_sdk_drives_the_sandbox_as_a_merchant() {
    let sandbox = sandbox(2701).await;
    let run = run_script("stripe_merchant.py", &env(&sandbox, "st27"))
        .await
        .expect("run the script");
    assert_passed(&run, 32);
    let report = sandbox.control().charges();
    let stripe = report.provider("stripe").expect("stripe");
    // Charged: the saved card, the 3-D Secure one and the manual intent captured; declined: two test cards and
    // the off-session 3-D Secure; authorized and voided: one.
    assert_eq!(
        (stripe.charges, stripe.captured_charges),
        (7, 3),
        "{stripe:?}"
    );
    let capture = report.key("stripe", "st27-capture").expect("capture key");
    assert_eq!((capture.executed, capture.replays), (1, 1));
    assert_eq!((stripe.refunds, stripe.refunded_amount), (1, 500));
    // The retried create and refund replayed: one object each under their key.
    let create = report.key("stripe", "st27-order-1").expect("create key");
    assert_eq!(
        (create.executed, create.replays, create.objects.len()),
        (1, 1, 1)
    );
    let refund = report.key("stripe", "st27-refund").expect("refund key");
    assert_eq!((refund.executed, refund.replays), (1, 1));
    let confirm = report
        .key("stripe", "st27-order-1-confirm")
        .expect("confirm key");
    assert_eq!((confirm.charges, confirm.replays), (1, 1));
    // The 3-D Secure completion sent its webhook, as any other change.
    assert!(sandbox
        .control()
        .deliveries()
        .iter()
        .any(|d| d.event_type == "payment_intent.requires_action"));
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercadopago_python_sdk_drives_the_sandbox_as_a_merchant() {
    let sandbox = sandbox(2702).await;
    let run = run_script("mercadopago_merchant.py", &env(&sandbox, "mp27"))
        .await
        .expect("run the script");
    assert_passed(&run, 22);
    let report = sandbox.control().charges();
    let mp = report.provider("mercadopago").expect("mercadopago");
    // Approved card, rejected card, Pix (paid), authorized then captured, authorized then cancelled: five
    // payments, three captured; the refused ones created nothing.
    assert_eq!((mp.charges, mp.captured_charges), (5, 3), "{mp:?}");
    assert_eq!((mp.refunds, mp.refunded_amount), (1, 3000));
    let pay = report
        .key("mercadopago", "mp27-pay-1")
        .expect("payment key");
    assert_eq!((pay.charges, pay.replays), (1, 1));
    // Every payment change was notified (created ×5, Pix paid, refund, capture, cancel).
    let notified = sandbox
        .control()
        .deliveries()
        .iter()
        .filter(|d| d.provider == "mercadopago")
        .count();
    assert_eq!(notified, 9);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagarme_node_sdk_drives_the_sandbox_as_a_merchant() {
    let sandbox = sandbox(2703).await;
    let proxy = PagarmeProxy::start(sandbox.local_addr())
        .await
        .expect("the api.pagar.me proxy");
    let mut env = proxy.env();
    env.push(("PAGARME_SECRET_KEY", PAGARME_KEY.to_owned()));
    env.push(("SDK_RUN", "pg29".to_owned()));
    let run = run_node_script("pagarme_merchant.mjs", &env)
        .await
        .expect("run the script");
    assert_passed(&run, 30);
    // The SDK went through the proxy (it knows no other way to the sandbox).
    assert!(proxy.tunnels() >= 1, "no CONNECT reached the proxy");
    let report = sandbox.control().charges();
    let pagarme = report.provider("pagarme").expect("pagarme");
    // One paid order although the create was sent twice, refunded in two parts, 1500 then 3500; then two
    // auth_only orders: one captured (3000 of 5000), one voided (neither captured nor refunded).
    assert_eq!(
        (pagarme.orders, pagarme.charges, pagarme.captured_charges),
        (3, 3, 2),
        "{pagarme:?}"
    );
    assert_eq!((pagarme.refunds, pagarme.refunded_amount), (2, 5000));
    // The capture sent twice under one key executed once.
    let capture = report
        .key("pagarme", "pg29-capture-1")
        .expect("capture key");
    assert_eq!((capture.executed, capture.replays), (1, 1), "{capture:?}");
    // The key made the order and its charge once, the ones the script printed; the second send replayed them.
    let printed = |what: &str| {
        run.output
            .lines()
            .find_map(|l| l.strip_prefix(what))
            .unwrap_or_else(|| panic!("the script printed no {what:?} line"))
            .trim()
            .to_owned()
    };
    let (order, charge) = (printed("= order "), printed("= charge "));
    let create = report.key("pagarme", "pg29-order-1").expect("order key");
    assert_eq!(
        (create.executed, create.replays, create.charges),
        (1, 1, 1),
        "{create:?}"
    );
    assert_eq!(create.objects, vec![order, charge.clone()]);
    for key in ["pg29-refund-1", "pg29-refund-2"] {
        let refund = report.key("pagarme", key).expect("refund key");
        assert_eq!(
            (refund.executed, refund.replays),
            (1, 0),
            "{key}: {refund:?}"
        );
    }
    // The charge as the sandbox holds it, read by the test itself (Basic auth, the secret key as user).
    let read: serde_json::Value = reqwest::Client::new()
        .get(sandbox.url(&format!("/core/v5/charges/{charge}")))
        .basic_auth(PAGARME_KEY, Some(""))
        .send()
        .await
        .expect("GET the charge")
        .json()
        .await
        .expect("charge JSON");
    assert_eq!(
        (&read["status"], &read["amount"], &read["canceled_amount"]),
        (
            &serde_json::json!("canceled"),
            &serde_json::json!(5000),
            &serde_json::json!(5000)
        ),
        "{read}"
    );
    sandbox.stop().await;
}

// --- End to end: the merchant's Python code charges through hookline ---------------------------------------
//
// Hookline's merchant API (an edge with `[api]`, the embedded relay), the real dispatcher and a payments worker
// in this process, on PostgreSQL and RabbitMQ; the sandbox plays Stripe (`st`) and Mercado Pago (`mp`) and
// sends their webhooks to the edge, so the webhook path is live (sandbox → edge → relay → worker). The scripts
// `hookline_stripe.py` / `hookline_mercadopago.py` charge through hookline and read the gateway with the
// official SDKs; each test then asserts what it can read itself: rows, facts, ledger postings, the sandbox's
// own count of charges and refunds, and the requests it received.

use hookline_gateways::dispatch::{DispatchSettings, Dispatcher};
use hookline_sandbox::{FaultAction, FaultSpec};
use hookline_tests::sandboxed::{MP_TOKEN as LIVE_MP_TOKEN, STRIPE_KEY as LIVE_STRIPE_KEY};
use hookline_tests::{
    assert_ledger_balanced, free_port, parse_config, test_config_toml, wait_for_count, wait_until,
    within, TestDb, TestEdge, TestPipeline, WorkerGuard, FAST_PIPELINE,
};
use tokio_util::sync::CancellationToken;

/// How long a test waits for an outcome it reads itself.
const WAIT: Duration = Duration::from_secs(90);
/// The merchant's key for hookline's API (client `shop`).
const MERCHANT_KEY: &str = "sk_hl_sdk_merchant_key";
/// The key lifetime of the key-lifetime scenario: the sandbox forgets a key after it, and the dispatcher is
/// told so (the configuration accepts 60 s at least; the test sets the parsed value, as outbound.rs does).
const KEY_TTL: Duration = Duration::from_secs(3);

/// Hookline (API, pipeline, dispatcher, worker) in front of the sandbox.
struct Live {
    p: TestPipeline,
    api: String,
    sandbox: RunningSandbox,
    worker: WorkerGuard,
    cancel: CancellationToken,
    dispatcher: tokio::task::JoinHandle<()>,
}

impl Live {
    /// Starts everything; `key_ttl` shortens both the sandbox's idempotency window and the dispatcher's key
    /// lifetime (default: Stripe's 24 h).
    async fn start(seed: u64, key_ttl: Option<Duration>) -> Live {
        // The sandbox's port goes into hookline's configuration, the edge's address into the sandbox's.
        let sandbox_port = free_port();
        let gateway = format!("http://127.0.0.1:{sandbox_port}");
        let tail = format!(
            "{FAST_PIPELINE}\n\
             [providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"mp_sdk_secret\"]\nfee_bps = 499\n\
             api_base = \"{gateway}\"\napi_token = \"{LIVE_MP_TOKEN}\"\n\
             [providers.st]\nscheme = \"stripe\"\nsecrets = [\"whsec_sdk_live\"]\nfee_bps = 399\nfee_fixed = 39\n\
             api_base = \"{gateway}\"\napi_token = \"{LIVE_STRIPE_KEY}\"\n\
             [api]\nlisten = \"127.0.0.1:0\"\n\
             [[api.clients]]\nname = \"shop\"\nkeys = [\"{MERCHANT_KEY}\"]\n"
        );
        let db = TestDb::new().await;
        let toml = test_config_toml(&db.url, "", &tail);
        let config = parse_config(&toml);
        // TestEdge::spawn_on does not keep the API's port: the edge is built here, the same way.
        let app = hookline_edge::Application::build(config.clone())
            .await
            .expect("build the edge");
        let port = app.port();
        let api_port = app.api_port().expect("the API listener is bound");
        tokio::spawn(app.run_until_stopped());
        let p = TestPipeline {
            edge: TestEdge {
                base: format!("http://127.0.0.1:{port}"),
                port,
                db,
                client: reqwest::Client::new(),
                console: None,
                console_process: None,
            },
            config,
            toml,
        };
        let mut settings = SandboxSettings::new(
            format!("127.0.0.1:{sandbox_port}").parse().expect("addr"),
            p.edge.base.parse().expect("edge url"),
            vec![
                SandboxProvider {
                    name: "mp".into(),
                    scheme: Scheme::MercadoPago,
                    webhook_secret: b"mp_sdk_secret".to_vec(),
                    api_token: Some(LIVE_MP_TOKEN.into()),
                    webhook_basic_auth: None,
                },
                SandboxProvider {
                    name: "st".into(),
                    scheme: Scheme::Stripe,
                    webhook_secret: b"whsec_sdk_live".to_vec(),
                    api_token: Some(LIVE_STRIPE_KEY.into()),
                    webhook_basic_auth: None,
                },
            ],
        );
        settings.seed = seed;
        settings.idempotency_window = key_ttl.unwrap_or(Duration::from_secs(24 * 3600));
        settings.webhook_backoff = Duration::from_millis(100);
        settings.webhook_max_backoff = Duration::from_millis(500);
        let sandbox = Sandbox::start(settings).await.expect("sandbox");
        let worker = p.spawn_worker();
        let providers: Vec<hookline_core::ProviderConfig> = p
            .config
            .providers
            .values()
            .cloned()
            .map(|mut c| {
                if let Some(ttl) = key_ttl {
                    c.idempotency_key_ttl = ttl;
                }
                c
            })
            .collect();
        let dispatcher = Dispatcher::new(
            p.pool().clone(),
            providers.iter(),
            DispatchSettings {
                idle_interval: Duration::from_millis(50),
                min_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(500),
                request_timeout: Duration::from_secs(10),
                ..DispatchSettings::default()
            },
            std::sync::Arc::new(hookline_billing::Dunning),
        );
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let dispatcher =
            tokio::spawn(async move { dispatcher.run(token).await.expect("dispatcher") });
        Live {
            p,
            api: format!("http://127.0.0.1:{api_port}"),
            sandbox,
            worker,
            cancel,
            dispatcher,
        }
    }

    /// The environment of a `hookline_*.py` script running `scenario`.
    fn env(&self, scenario: &str, run: &str) -> Vec<(&'static str, String)> {
        let base = self
            .sandbox
            .base_url()
            .as_str()
            .trim_end_matches('/')
            .to_owned();
        vec![
            ("STRIPE_API_BASE", base.clone()),
            ("STRIPE_API_KEY", LIVE_STRIPE_KEY.to_owned()),
            ("STRIPE_PROVIDER", "st".to_owned()),
            ("MP_API_BASE", base.clone()),
            ("MP_ACCESS_TOKEN", LIVE_MP_TOKEN.to_owned()),
            ("MP_PROVIDER", "mp".to_owned()),
            ("SANDBOX_CONTROL_BASE", base),
            ("HOOKLINE_API_BASE", self.api.clone()),
            ("HOOKLINE_API_KEY", MERCHANT_KEY.to_owned()),
            ("SDK_SCENARIO", scenario.to_owned()),
            ("SDK_RUN", run.to_owned()),
        ]
    }

    /// Runs `scenario` of the provider's script. Whether it passed is asserted by the test after its own
    /// checks, so a failed check of the script does not hide what the test would have found.
    async fn run(&self, provider: &str, scenario: &str) -> ScriptRun {
        script_run(
            provider,
            scenario,
            &self.env(scenario, &format!("{provider}-{scenario}")),
        )
        .await
    }

    fn book(&self, provider: &str) -> hookline_sandbox::ProviderReport {
        self.sandbox
            .control()
            .charges()
            .provider(provider)
            .expect("provider")
            .clone()
    }

    async fn scalar(&self, sql: &str, id: &str) -> i64 {
        sqlx::query_scalar(sql)
            .bind(id)
            .fetch_one(self.p.pool())
            .await
            .expect(sql)
    }

    /// (status, provider payment id, failure_code) of an intent.
    async fn intent(&self, id: &str) -> (String, Option<String>, Option<String>) {
        sqlx::query_as(
            "SELECT status, provider_payment_id, failure_code FROM payment_intents WHERE public_id = $1",
        )
        .bind(id)
        .fetch_one(self.p.pool())
        .await
        .expect("the intent")
    }

    /// The intent's facts (domain events naming it), in order.
    async fn facts(&self, id: &str) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT type FROM domain_events
              WHERE convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'intent_id' = $1 ORDER BY id",
        )
        .bind(id)
        .fetch_all(self.p.pool())
        .await
        .expect("facts")
    }

    /// The intent succeeded, once: one `payment` posting for its gateway id (waited for: the webhook's), one
    /// `payment_intent.succeeded` fact.
    async fn assert_paid_once(&self, provider: &str, id: &str) -> String {
        let (status, payment, _) = self.intent(id).await;
        assert_eq!(status, "succeeded", "{id}");
        let payment = payment.expect("the gateway's payment id");
        let pool = self.p.pool().clone();
        let (provider_name, reference) = (provider.to_owned(), payment.clone());
        wait_until(WAIT, "the webhook's payment posting", || {
            let (pool, provider_name, reference) =
                (pool.clone(), provider_name.clone(), reference.clone());
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM ledger_transactions
                      WHERE provider = $1 AND kind = 'payment' AND reference = $2",
                )
                .bind(&provider_name)
                .bind(&reference)
                .fetch_one(&pool)
                .await
                .is_ok_and(|n| n >= 1)
            }
        })
        .await;
        self.p.drain(WAIT).await;
        let postings: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM ledger_transactions WHERE provider = $1 AND kind = 'payment' AND reference = $2",
        )
        .bind(provider)
        .bind(&payment)
        .fetch_one(self.p.pool())
        .await
        .expect("postings");
        assert_eq!(postings, 1, "{id}: one payment posting");
        assert_eq!(
            self.facts(id).await,
            vec!["payment_intent.succeeded".to_string()],
            "{id}"
        );
        assert_ledger_balanced(self.p.pool()).await;
        payment
    }

    async fn stop(self) {
        self.cancel.cancel();
        within(WAIT, "the dispatcher's stop", self.dispatcher)
            .await
            .expect("dispatcher task");
        self.worker.stop().await;
        self.sandbox.stop().await;
    }
}

async fn script_run(provider: &str, scenario: &str, env: &[(&'static str, String)]) -> ScriptRun {
    let script = match provider {
        "st" => "hookline_stripe.py",
        _ => "hookline_mercadopago.py",
    };
    run_script(script, env)
        .await
        .unwrap_or_else(|e| panic!("run {script} {scenario}: {e:#}"))
}

/// Values a script reported (`= name value` lines), in order.
fn reported(run: &ScriptRun, name: &str) -> Vec<String> {
    let prefix = format!("= {name} ");
    run.output
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_owned()))
        .collect()
}

fn one_reported(run: &ScriptRun, name: &str) -> String {
    let mut values = reported(run, name);
    values.dedup();
    assert_eq!(values.len(), 1, "{name}: {values:?}\n{}", run.output);
    values.remove(0)
}

/// Issue 27, 3-D Secure through hookline: the merchant creates the intent with Stripe's 3-D Secure test card;
/// it shows `requires_action` with Stripe's `next_action`; the customer authenticates (sandbox control); Stripe's
/// webhook completes it: `succeeded`, one PaymentIntent charged at the gateway (the SDK's search and the
/// sandbox's own count), one posting, one fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_sdk_3ds_requires_action_then_the_webhook_completes_it_once() {
    let live = Live::start(2711, None).await;
    let run = live.run("st", "3ds").await;
    let id = one_reported(&run, "intent");
    let payment = live.assert_paid_once("st", &id).await;
    let book = live.book("st");
    assert_eq!(
        (book.payment_intents, book.captured_charges),
        (1, 1),
        "{book:?}"
    );
    assert!(live
        .sandbox
        .control()
        .deliveries()
        .iter()
        .any(|d| d.provider == "st"
            && d.event_type == "payment_intent.succeeded"
            && d.resource_id == payment));
    assert_passed(&run, 12);
    live.stop().await;
}

/// Issue 27, Pix through hookline: `requires_action` with Mercado Pago's QR data; paid (sandbox control); the
/// notification completes it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_sdk_pix_pending_then_the_webhook_completes_it_once() {
    let live = Live::start(2712, None).await;
    let run = live.run("mp", "pix").await;
    let id = one_reported(&run, "intent");
    live.assert_paid_once("mp", &id).await;
    let book = live.book("mp");
    assert_eq!((book.charges, book.captured_charges), (1, 1), "{book:?}");
    assert_passed(&run, 12);
    live.stop().await;
}

/// Issue 27, declines are outcomes: the declined card's intent is `failed` with the gateway's code (the script
/// compared it with what the SDK reads at the gateway), its request `declined`, one `payment_intent.failed`
/// fact; `hookline status` stays healthy (nothing for an operator). The same order then paid with another card.
async fn decline_is_an_outcome(provider: &str, seed: u64) {
    let live = Live::start(seed, None).await;
    let run = live.run(provider, "decline").await;
    let declined = one_reported(&run, "declined");
    let paid = one_reported(&run, "intent");
    let (status, _, code) = live.intent(&declined).await;
    assert_eq!(status, "failed");
    assert!(code.is_some_and(|c| !c.is_empty()));
    assert_eq!(
        live.facts(&declined).await,
        vec!["payment_intent.failed".to_string()]
    );
    assert_eq!(
        live.scalar(
            "SELECT count(*) FROM outbound_requests o JOIN payment_intents i ON i.id = o.intent_id
              WHERE i.public_id = $1 AND o.status = 'declined' AND o.attempts = 1",
            &declined
        )
        .await,
        1
    );
    live.assert_paid_once(provider, &paid).await;
    let book = live.book(provider);
    assert_eq!(book.captured_charges, 1, "{book:?}");
    let report = hookline_ops::status::report(live.p.pool(), &live.p.config, None, "test-status")
        .await
        .expect("status");
    assert_eq!(
        (report.outbound.declined, report.outbound.failed),
        (1, 0),
        "{report:?}"
    );
    assert!(
        report.attention.is_empty(),
        "a decline needs no operator: {:?}",
        report.attention
    );
    assert_passed(&run, 10);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_sdk_decline_is_failed_with_its_code_and_status_stays_healthy() {
    decline_is_an_outcome("st", 2713).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_sdk_rejection_is_failed_with_its_code_and_status_stays_healthy() {
    decline_is_an_outcome("mp", 2714).await;
}

/// Issue 27, a gateway error on the first charge and the first refund (`charge` / `refund` status: 500 or 429
/// with Retry-After): hookline retries with the same key; the gateway saw each key twice (the error, then one
/// execution); one charge and one refund (the SDK's view and the sandbox's count), each posted once.
async fn gateway_errors_are_retried_with_the_same_key(
    provider: &str,
    seed: u64,
    charge: u16,
    refund: u16,
) {
    let live = Live::start(seed, None).await;
    let (charge_path, refund_path) = match provider {
        "st" => ("/v1/payment_intents", "/v1/refunds"),
        // `/v1/payments` also matches a refund's path: armed first, the charge consumes it.
        _ => ("/v1/payments", "/v1/payments/"),
    };
    for (path, status) in [(charge_path, charge), (refund_path, refund)] {
        live.sandbox
            .control()
            .arm_fault(FaultSpec {
                provider: Some(provider.to_owned()),
                method: Some("POST".into()),
                ..FaultSpec::next(
                    path,
                    1,
                    FaultAction::Status {
                        status,
                        retry_after_secs: (status == 429).then_some(1),
                    },
                )
            })
            .expect("arm");
    }
    let run = live.run(provider, "faults").await;
    let id = one_reported(&run, "intent");
    let refund_id = one_reported(&run, "refund");
    live.assert_paid_once(provider, &id).await;
    wait_for_count(
        live.p.pool(),
        WAIT,
        "every outbound request done",
        "SELECT count(*) FROM outbound_requests WHERE status <> 'succeeded'",
        0,
    )
    .await;
    let intent_id: i64 = sqlx::query_scalar("SELECT id FROM payment_intents WHERE public_id = $1")
        .bind(&id)
        .fetch_one(live.p.pool())
        .await
        .unwrap();
    let refund_row: i64 = refund_id
        .strip_prefix("re_hl_")
        .and_then(|n| n.parse().ok())
        .expect("re_hl_N");
    let requests = live.sandbox.control().requests();
    for (key, first) in [
        (hookline_payments::intents::charge_key(intent_id), charge),
        (hookline_payments::intents::refund_key(refund_row), refund),
    ] {
        let statuses: Vec<u16> = requests
            .iter()
            .filter(|r| r.method == "POST" && r.idempotency_key.as_deref() == Some(key.as_str()))
            .map(|r| r.status)
            .collect();
        assert_eq!(statuses.len(), 2, "{key}: {statuses:?}");
        assert_eq!(statuses[0], first, "{key}: {statuses:?}");
        assert!((200..300).contains(&statuses[1]), "{key}: {statuses:?}");
    }
    let book = live.book(provider);
    assert_eq!(
        (book.captured_charges, book.refunds, book.refunded_amount),
        (1, 1, 2500),
        "{book:?}"
    );
    assert_eq!(
        live.scalar(
            "SELECT count(*) FROM outbound_refunds WHERE status = 'succeeded' AND provider_refund_id IS NOT NULL
               AND intent_id = (SELECT id FROM payment_intents WHERE public_id = $1)",
            &id
        )
        .await,
        1
    );
    // The gateway's refund webhook posts it, once.
    let refund_postings = format!(
        "SELECT count(*) FROM ledger_transactions WHERE provider = '{provider}' AND kind = 'refund'"
    );
    wait_for_count(
        live.p.pool(),
        WAIT,
        "the refund posted",
        &refund_postings,
        1,
    )
    .await;
    live.p.drain(WAIT).await;
    let postings: i64 = sqlx::query_scalar(&refund_postings)
        .fetch_one(live.p.pool())
        .await
        .expect("refund postings");
    assert_eq!(postings, 1, "the refund posted once");
    assert_ledger_balanced(live.p.pool()).await;
    assert_passed(&run, 8);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_sdk_429_on_the_charge_and_500_on_the_refund_move_money_once() {
    gateway_errors_are_retried_with_the_same_key("st", 2715, 429, 500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_sdk_500_on_the_charge_and_429_on_the_refund_move_money_once() {
    gateway_errors_are_retried_with_the_same_key("mp", 2716, 500, 429).await;
}

/// Issue 27, a front end making a key per click (ten Python threads at once, one order_reference): one intent,
/// one outbound request, one charge; only the created answer is stored on its key.
async fn key_per_click_charges_once(provider: &str, seed: u64) {
    let live = Live::start(seed, None).await;
    let run = live.run(provider, "key_per_click").await;
    let id = one_reported(&run, "intent");
    live.assert_paid_once(provider, &id).await;
    let count = |table: &'static str| {
        let pool = live.p.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(&pool)
                .await
                .expect("count")
        }
    };
    assert_eq!(count("payment_intents").await, 1);
    assert_eq!(count("outbound_requests").await, 1);
    assert_eq!(count("api_idempotency_keys").await, 1);
    let book = live.book(provider);
    assert_eq!((book.charges, book.captured_charges), (1, 1), "{book:?}");
    assert_passed(&run, 7);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_sdk_key_per_click_with_one_order_reference_charges_once() {
    key_per_click_charges_once("st", 2717).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_sdk_key_per_click_with_one_order_reference_charges_once() {
    key_per_click_charges_once("mp", 2718).await;
}

/// Issue 27, the key born with the intent: created at checkout (`confirm: false`, nothing sent), confirmed by
/// two Python threads at once (each bringing the method) and once more late: one outbound request, one charge.
async fn confirmed_twice_charges_once(provider: &str, seed: u64) {
    let live = Live::start(seed, None).await;
    let run = live.run(provider, "confirm_twice").await;
    let id = one_reported(&run, "intent");
    live.assert_paid_once(provider, &id).await;
    assert_eq!(
        live.scalar(
            "SELECT count(*) FROM outbound_requests o JOIN payment_intents i ON i.id = o.intent_id
              WHERE i.public_id = $1",
            &id
        )
        .await,
        1
    );
    let book = live.book(provider);
    assert_eq!((book.charges, book.captured_charges), (1, 1), "{book:?}");
    assert_passed(&run, 9);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_sdk_intent_confirmed_twice_in_parallel_charges_once() {
    confirmed_twice_charges_once("st", 2719).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_sdk_intent_confirmed_twice_in_parallel_charges_once() {
    confirmed_twice_charges_once("mp", 2720).await;
}

/// Issue 27, a gateway failing past the key's lifetime ([`KEY_TTL`], the sandbox's window too): the charge is
/// executed but its answer dropped (`reached`), or never executed, then every POST answers 500 until the
/// dispatcher stops before the key's end (`unknown`); the gateway recovers; after the expiry hookline looks the
/// charge up by its own reference: found → recorded (generation 0); not found → sent under `{key}-g1`
/// (generation 1). Nothing is sent under the expired key after the lookup. The merchant's script only waits:
/// `succeeded`, one payment (the SDK's search by hookline's reference and the sandbox's count).
async fn failing_past_the_key_lifetime(provider: &str, seed: u64, reached: bool) {
    let live = Live::start(seed, Some(KEY_TTL)).await;
    let path = match provider {
        "st" => "/v1/payment_intents",
        _ => "/v1/payments",
    };
    let control = live.sandbox.control();
    hookline_tests::sandboxed::arm_lost_then_failing(control, provider, path, reached);
    let env = live.env("key_lifetime", &format!("{provider}-key-lifetime"));
    let script = {
        let provider = provider.to_owned();
        tokio::spawn(async move { script_run(&provider, "key_lifetime", &env).await })
    };
    wait_for_count(
        live.p.pool(),
        WAIT,
        "the charge unknown before its key's lifetime ends",
        "SELECT count(*) FROM outbound_requests WHERE status = 'unknown'",
        1,
    )
    .await;
    // The gateway works again; a resend under the expired key would now charge twice.
    control.clear_faults();
    let run = within(
        hookline_tests::sdk::SCRIPT_TIMEOUT + WAIT,
        "the merchant's script",
        script,
    )
    .await
    .expect("script task");
    assert_passed(&run, 5);
    let id = one_reported(&run, "intent");
    live.assert_paid_once(provider, &id).await;
    let (intent_id, generation): (i64, i32) = sqlx::query_as(
        "SELECT i.id, o.key_generation FROM payment_intents i JOIN outbound_requests o ON o.intent_id = i.id
          WHERE i.public_id = $1",
    )
    .bind(&id)
    .fetch_one(live.p.pool())
    .await
    .unwrap();
    // Reached: found by the lookup (generation 0). Not reached: a new key — generation 1, or a later one when the
    // gateway still failed while generation 1 lived (the test clears its faults when the request turns unknown,
    // which a loaded machine can do after the dispatcher's lookup and first resend): each generation is resolved
    // the same way, and only the last one charges.
    if reached {
        assert_eq!(generation, 0, "reached: found by the lookup");
    } else {
        assert!(generation >= 1, "not reached: sent under a new key");
    }
    let base = hookline_payments::intents::charge_key(intent_id);
    let requests = control.requests();
    let lookup = requests
        .iter()
        .find(|r| r.method == "GET" && r.path.contains("search") && r.query.contains(&id))
        .map(|r| r.at_ms)
        .expect("hookline's lookup by its reference");
    assert!(
        requests
            .iter()
            .filter(|r| r.method == "POST" && r.idempotency_key.as_deref() == Some(base.as_str()))
            .all(|r| r.at_ms < lookup),
        "sent under the expired key after the lookup"
    );
    let stats = control.charges();
    let charged_under = |key: &str| stats.key(provider, key).map_or(0, |k| k.charges);
    let last = if generation == 0 {
        base.clone()
    } else {
        format!("{base}-g{generation}")
    };
    assert_eq!(
        (charged_under(&base), charged_under(&last)),
        if reached { (1, 1) } else { (0, 1) },
        "{stats:?}"
    );
    let book = live.book(provider);
    assert_eq!((book.charges, book.captured_charges), (1, 1), "{book:?}");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_sdk_lost_answer_then_failing_past_the_key_lifetime_charges_once() {
    failing_past_the_key_lifetime("st", 2721, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_sdk_lost_answer_then_failing_past_the_key_lifetime_charges_once() {
    failing_past_the_key_lifetime("mp", 2722, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_sdk_never_reached_then_failing_past_the_key_lifetime_charges_once() {
    failing_past_the_key_lifetime("st", 2723, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_sdk_never_reached_then_failing_past_the_key_lifetime_charges_once() {
    failing_past_the_key_lifetime("mp", 2724, false).await;
}

/// Issue 27, the asynchronous step fails: the customer fails 3-D Secure (Stripe: the intent `failed`, one
/// `payment_intent.failed`) or lets the Pix QR code expire (Mercado Pago cancels it: since issue 46 the intent is
/// `canceled` as `expired`, one `payment_intent.canceled`) — no posting, no charge; the same order is then paid
/// with a card (one posting for that payment).
async fn failed_action_is_an_outcome(provider: &str, scenario: &str, seed: u64, ended: &str) {
    let live = Live::start(seed, None).await;
    let run = live.run(provider, scenario).await;
    let failed = one_reported(&run, "declined");
    let paid = one_reported(&run, "intent");
    let (status, _, _) = live.intent(&failed).await;
    assert_eq!(status, ended, "{failed}");
    live.assert_paid_once(provider, &paid).await;
    assert_eq!(
        live.facts(&failed).await,
        vec![format!("payment_intent.{ended}")]
    );
    assert_eq!(
        live.scalar(
            "SELECT count(*) FROM ledger_transactions l JOIN payment_intents i
                 ON i.provider = l.provider AND i.provider_payment_id = l.reference
              WHERE i.public_id = $1 AND l.kind = 'payment'",
            &failed
        )
        .await,
        0,
        "nothing posted for the failed intent"
    );
    let book = live.book(provider);
    assert_eq!(book.captured_charges, 1, "{book:?}");
    assert_passed(&run, 10);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_sdk_failed_3ds_challenge_fails_the_intent() {
    failed_action_is_an_outcome("st", "3ds_failed", 2725, "failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mercadopago_sdk_expired_pix_cancels_the_intent() {
    failed_action_is_an_outcome("mp", "pix_expired", 2726, "canceled").await;
}
