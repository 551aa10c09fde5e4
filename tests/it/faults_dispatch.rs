//! The dispatcher SIGKILLed between sending a charge and recording the gateway's answer, with the real
//! `hookline-worker` binary: the gateway (the sandbox) charged, hookline never learned it. After the lease expires
//! another worker claims the request and sends it again WITH THE SAME KEY: the gateway replays its first answer,
//! and the sandbox holds exactly one charge.

use std::time::Duration;

use hookline_tests::faults::*;

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dispatcher_killed_between_send_and_record_charges_once() {
    let (mut c, sandbox) =
        stripe_sandbox_cluster("dispatcher_killed_between_send_and_record").await;
    // The intent and its outbound request, as the merchant API writes them (one transaction), with the payment
    // method a checkout sends (Stripe's test card).
    let intent = stripe_charge(&c, 4200, "cliente-1").await;

    // A worker that hangs right after the gateway answered, before recording anything; then SIGKILL.
    let slot = c
        .start_worker(Some("dispatch.after_send=sleep(600000)"))
        .await;
    let charged = || sandbox.control().charges().total_charges;
    let deadline = std::time::Instant::now() + WAIT;
    while charged() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway never saw the charge"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.kill_worker(slot);
    let status: String = sqlx::query_scalar("SELECT status FROM outbound_requests")
        .fetch_one(c.pool())
        .await
        .unwrap();
    assert_eq!(status, "pending", "nothing was recorded before the kill");

    // A fresh worker: after the lease it sends again with the same key, the gateway replays.
    c.restart_worker(slot, None).await;
    let pool = c.pool().clone();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (status, intent_status): (String, String) = sqlx::query_as(
            "SELECT o.status, i.status FROM outbound_requests o JOIN payment_intents i ON i.id = o.intent_id",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if status == "succeeded" && intent_status == "succeeded" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the request was not completed after the restart: {status} / {intent_status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = sandbox.control().charges();
    let key = hookline_payments::intents::charge_key(intent.id);
    let stats = report.key("st", &key).expect("the key reached the gateway");
    assert_eq!(report.total_charges, 1, "{report:?}");
    assert_eq!(stats.executed, 1, "{stats:?}");
    assert!(
        stats.requests >= 2,
        "the retry used the same key: {stats:?}"
    );
    // The webhook posted the payment once.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let postings: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM ledger_transactions WHERE provider = 'st' AND kind = 'payment'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if postings == 1 {
            break;
        }
        assert!(postings < 2, "posted twice");
        assert!(
            std::time::Instant::now() < deadline,
            "no payment posting after the webhook"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sandbox.stop().await;
    c.teardown().await;
}
