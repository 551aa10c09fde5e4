//! The official Python SDKs (`stripe`, `mercadopago`; `hookline_tests::sdk`) drive the provider sandbox as a
//! merchant's code would: if the sandbox served something no real gateway serves, or refused what the SDKs send,
//! these scripts — written against the SDKs' documented calls, not against the sandbox — would fail. Each test
//! asserts the script passed and what the sandbox itself counted (charges, refunds, replays per key).
//!
//! The first run on a machine makes the venv (`pip install` from PyPI, about a minute); later runs reuse it.

use std::time::Duration;

use hookline_sandbox::{RunningSandbox, Sandbox, SandboxProvider, SandboxSettings, Scheme, Url};
use hookline_tests::sdk::{run_script, ScriptRun};

const STRIPE_KEY: &str = "sk_test_sdk_harness";
const MP_TOKEN: &str = "TEST-sdk-harness-token";

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
            },
            SandboxProvider {
                name: "mercadopago".into(),
                scheme: Scheme::MercadoPago,
                webhook_secret: b"mp_sdk".to_vec(),
                api_token: Some(MP_TOKEN.into()),
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
    assert_passed(&run, 25);
    let report = sandbox.control().charges();
    let stripe = report.provider("stripe").expect("stripe");
    // Charged: the saved card and the 3-D Secure one; declined: two test cards and the off-session 3-D Secure.
    assert_eq!(
        (stripe.charges, stripe.captured_charges),
        (5, 2),
        "{stripe:?}"
    );
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
    assert_passed(&run, 18);
    let report = sandbox.control().charges();
    let mp = report.provider("mercadopago").expect("mercadopago");
    // Approved card, rejected card, Pix (paid): three payments, two captured; the refused ones created nothing.
    assert_eq!((mp.charges, mp.captured_charges), (3, 2), "{mp:?}");
    assert_eq!((mp.refunds, mp.refunded_amount), (1, 3000));
    let pay = report
        .key("mercadopago", "mp27-pay-1")
        .expect("payment key");
    assert_eq!((pay.charges, pay.replays), (1, 1));
    // Every payment change was notified (created ×3, Pix paid, refund).
    let notified = sandbox
        .control()
        .deliveries()
        .iter()
        .filter(|d| d.provider == "mercadopago")
        .count();
    assert_eq!(notified, 5);
    sandbox.stop().await;
}
