//! A pipeline whose providers `mp` (Mercado Pago), `st` (Stripe) and `pg` (Pagar.me v5) call the provider sandbox
//! (a real HTTP server playing their APIs), and the sandbox sending their webhooks to the pipeline's edge. Used by
//! the provider-API, reconciliation and outbound suites.

use std::time::Duration;

use hookline_sandbox::{RunningSandbox, Sandbox, SandboxProvider, SandboxSettings, Scheme};

use crate::TestPipeline;

/// The Mercado Pago access token the sandbox requires from `mp`.
pub const MP_TOKEN: &str = "TEST-mp-access-token";
/// The Stripe secret key the sandbox requires from `st`.
pub const STRIPE_KEY: &str = "sk_test_sandbox_key";
/// The Pagar.me secret key the sandbox requires from `pg` (HTTP Basic user, empty password).
pub const PAGARME_KEY: &str = "sk_test_pagarme_key";
/// The `user:password` the sandbox's Pagar.me webhooks carry and `pg` requires.
pub const PAGARME_WEBHOOK_AUTH: &str = "hookline:pg_webhook_password";

/// Starts the pipeline (edge + relay; workers separately) and the sandbox, seeded with `seed`, with fast webhook
/// retries.
pub async fn start(seed: u64) -> (TestPipeline, RunningSandbox) {
    start_with_window(seed, Duration::from_secs(24 * 3600)).await
}

/// [`start`] with the sandbox keeping idempotency keys for `window` (Stripe's 24 h by default): a few seconds lets
/// a test outlive a key.
pub async fn start_with_window(seed: u64, window: Duration) -> (TestPipeline, RunningSandbox) {
    start_with_tail(seed, window, "").await
}

/// [`start_with_window`] with `extra` TOML appended to the pipeline's configuration (an `[api]` section, say).
pub async fn start_with_tail(
    seed: u64,
    window: Duration,
    extra: &str,
) -> (TestPipeline, RunningSandbox) {
    // The sandbox's port goes into the pipeline's configuration, the edge's address into the sandbox's.
    let sandbox_port = crate::free_port();
    let api = format!("http://127.0.0.1:{sandbox_port}");
    let tail = format!(
        "[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"mp_sandbox_secret\"]\nfee_bps = 499\n\
         api_base = \"{api}\"\napi_token = \"{MP_TOKEN}\"\n\
         [providers.st]\nscheme = \"stripe\"\nsecrets = [\"whsec_sandbox\"]\nfee_bps = 399\nfee_fixed = 39\n\
         api_base = \"{api}\"\napi_token = \"{STRIPE_KEY}\"\n\
         [providers.pg]\nscheme = \"pagarme-v5\"\nwebhook_basic_auth = [\"{PAGARME_WEBHOOK_AUTH}\"]\n\
         fee_bps = 299\napi_base = \"{api}\"\napi_token = \"{PAGARME_KEY}\"\n{extra}"
    );
    let p = TestPipeline::start_with(&tail).await;
    let mut settings = SandboxSettings::new(
        format!("127.0.0.1:{sandbox_port}").parse().expect("addr"),
        p.edge.base.parse().expect("edge url"),
        vec![
            SandboxProvider {
                name: "mp".into(),
                scheme: Scheme::MercadoPago,
                webhook_secret: b"mp_sandbox_secret".to_vec(),
                api_token: Some(MP_TOKEN.into()),
                webhook_basic_auth: None,
            },
            SandboxProvider {
                name: "st".into(),
                scheme: Scheme::Stripe,
                webhook_secret: b"whsec_sandbox".to_vec(),
                api_token: Some(STRIPE_KEY.into()),
                webhook_basic_auth: None,
            },
            SandboxProvider::new("pg", Scheme::PagarmeV5, Vec::new())
                .with_api_token(PAGARME_KEY)
                .with_webhook_basic_auth(PAGARME_WEBHOOK_AUTH),
        ],
    );
    settings.seed = seed;
    settings.idempotency_window = window;
    settings.webhook_backoff = Duration::from_millis(100);
    settings.webhook_max_backoff = Duration::from_millis(500);
    let sandbox = Sandbox::start(settings).await.expect("sandbox");
    (p, sandbox)
}

/// A customer created at the Stripe sandbox with `pm_card_visa` attached, as a merchant's checkout saves a card
/// for later off-session charges: `(cus_…, pm_…)`. `key` is the provider's `api_token`.
pub async fn stripe_saved_card(
    sandbox: &RunningSandbox,
    key: &str,
    name: &str,
) -> (String, String) {
    let customer = stripe_post(sandbox, key, "/v1/customers", &[("name", name)]).await;
    let customer = customer["id"].as_str().expect("a customer id").to_owned();
    let method = stripe_attach_card(sandbox, key, &customer).await;
    (customer, method)
}

/// Another card (`pm_card_visa`) saved for `customer` at the Stripe sandbox, as a customer replacing a card that
/// stopped working: its new `pm_…`.
pub async fn stripe_attach_card(sandbox: &RunningSandbox, key: &str, customer: &str) -> String {
    let method = stripe_post(
        sandbox,
        key,
        "/v1/payment_methods/pm_card_visa/attach",
        &[("customer", customer)],
    )
    .await;
    method["id"]
        .as_str()
        .expect("a payment method id")
        .to_owned()
}

/// A form POST to the Stripe sandbox that must succeed; its JSON answer.
async fn stripe_post(
    sandbox: &RunningSandbox,
    key: &str,
    path: &str,
    form: &[(&str, &str)],
) -> serde_json::Value {
    let res = reqwest::Client::new()
        .post(sandbox.url(path))
        .bearer_auth(key)
        .form(form)
        .send()
        .await
        .expect("the sandbox answers");
    assert!(res.status().is_success(), "{path}: {}", res.status());
    res.json().await.expect("json")
}

/// The sandbox fault on `provider`'s requests `method path…` (a path prefix): `action` for the next `count`
/// matching requests, or at `rate` (see [`hookline_sandbox::FaultSpec`]).
pub fn fault(
    provider: &str,
    method: &str,
    path: &str,
    action: hookline_sandbox::FaultAction,
    count: Option<u32>,
    rate: Option<f64>,
) -> hookline_sandbox::FaultSpec {
    hookline_sandbox::FaultSpec {
        provider: Some(provider.to_owned()),
        method: Some(method.to_owned()),
        path: Some(path.to_owned()),
        action,
        count,
        rate,
    }
}

/// Arms the key-lifetime scenario on `provider`'s `POST path…`: when `reached`, the next request is made at the
/// gateway but its answer is lost (the connection dropped after it); then every matching request answers 500 — the
/// gateway keeps failing, so the request's retries run into its key's lifetime.
pub fn arm_lost_then_failing(
    control: &hookline_sandbox::SandboxControl,
    provider: &str,
    path: &str,
    reached: bool,
) {
    use hookline_sandbox::FaultAction;
    if reached {
        control
            .arm_fault(fault(
                provider,
                "POST",
                path,
                FaultAction::DropResponse,
                Some(1),
                None,
            ))
            .expect("arm the lost answer");
    }
    let failing = FaultAction::Status {
        status: 500,
        retry_after_secs: None,
    };
    control
        .arm_fault(fault(provider, "POST", path, failing, None, Some(1.0)))
        .expect("arm the failing gateway");
}
