//! The dispatcher's process tests' common set-up: a [`Cluster`] whose provider `st` is Stripe, played by an
//! in-process provider sandbox, and a charge queued as the merchant API queues it.

use std::time::Duration;

use hookline_payments::intents::{self, Intent, NewIntent};
use hookline_payments::params::{PaymentParams, StripeParams};
use hookline_sandbox::{RunningSandbox, Sandbox, SandboxProvider, SandboxSettings, Scheme};

use super::{Cluster, ClusterOptions};
use crate::free_port;

/// A cluster named `name` (its edge started, no worker yet) whose provider `st` is the sandbox playing Stripe,
/// with a 2 s dispatcher lease — a dead dispatcher's request is claimed again soon — and the sandbox.
pub async fn stripe_sandbox_cluster(name: &str) -> (Cluster, RunningSandbox) {
    const SECRET: &str = "whsec_dispatch";
    const TOKEN: &str = "sk_test_dispatch";
    let sandbox_port = free_port();
    let api = format!("http://127.0.0.1:{sandbox_port}");
    let mut c = Cluster::new(
        name,
        ClusterOptions {
            tail: format!(
                "[providers.st]\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\n\
                 api_base = \"{api}\"\napi_token = \"{TOKEN}\"\n\
                 [dispatcher]\nlease_secs = 2\n"
            ),
            ..ClusterOptions::default()
        },
    )
    .await;
    let mut settings = SandboxSettings::new(
        format!("127.0.0.1:{sandbox_port}").parse().expect("addr"),
        c.base.parse().expect("edge url"),
        vec![SandboxProvider {
            name: "st".into(),
            scheme: Scheme::Stripe,
            webhook_secret: SECRET.as_bytes().to_vec(),
            api_token: Some(TOKEN.into()),
            webhook_basic_auth: None,
        }],
    );
    settings.webhook_backoff = Duration::from_millis(100);
    let sandbox = Sandbox::start(settings).await.expect("sandbox");
    c.start_edge(None).await;
    (c, sandbox)
}

/// A Stripe intent of `amount` at provider `st` paid with Stripe's test card `pm_card_visa`, and its outbound
/// request, written in one transaction as the merchant API writes them.
pub async fn stripe_charge(c: &Cluster, amount: i64, customer: &str) -> Intent {
    let params = PaymentParams::Stripe(StripeParams {
        payment_method: Some("pm_card_visa".into()),
        ..Default::default()
    });
    let mut tx = c.pool().begin().await.expect("begin");
    let intent = intents::create_intent(
        &mut tx,
        &NewIntent {
            provider: "st",
            amount,
            currency: "brl",
            customer: Some(customer),
            description: Some("pedido"),
            order_reference: None,
            payment_params: Some(&params),
            confirm: true,
            cycle: None,
            capture_method: Default::default(),
        },
    )
    .await
    .expect("create the intent");
    tx.commit().await.expect("commit");
    intent
}
