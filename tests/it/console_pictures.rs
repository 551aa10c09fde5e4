//! The console's pictures (issue 30): an event's timeline, a payment's transitions and postings over time, and
//! the overview's last hour and day — server-rendered SVG, read here as an operator's browser gets them, through
//! the real pipeline (edge, relay, RabbitMQ, worker) and the real console, then photographed in Chromium
//! (`target/console-screenshots/pictures-*.png`, kept as test artefacts).

use std::time::{Duration, Instant};

use fantoccini::Locator;
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use hookline_tests::console::{console_toml, hash_password, ConsoleHttp, PASSWORD};
use hookline_tests::receiver::{Behaviour, Receiver};
use hookline_tests::*;

use crate::console::Browser;

/// How long the test waits for the worker or the console's sampler.
const WAIT: Duration = Duration::from_secs(60);

/// The part of `html` from the element whose id is `id` to the end of its `</figure>` (the charts are figures).
fn figure<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in {html}"));
    let rest = &html[start..];
    let end = rest.find("</figure>").map_or(rest.len(), |e| e + 9);
    &rest[..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_overview_an_event_and_a_payment_are_drawn_as_pictures() {
    let hash = hash_password(PASSWORD).await;
    // One sample a second instead of a minute: the history's columns appear within the test.
    let console_section =
        console_toml(&hash).replacen("[console]\n", "[console]\nhistory_sample_secs = 1\n", 1);
    // The merchant's endpoint `crm`, which gets every fact: the timelines show each delivery attempt.
    let receiver = Receiver::start();
    receiver.configure("crm", Behaviour::Ok, &[secrets::STANDARD]);
    let destination = format!(
        "[delivery]\npoll_interval_ms = 50\n[[destinations]]\nname = \"crm\"\nurl = \"{}\"\n\
         secrets = [\"{}\"]\nevents = [\"*\"]\n",
        receiver.url("crm"),
        secrets::STANDARD
    );
    let p = TestPipeline::start_with(&format!("{console_section}{destination}")).await;
    let pool = p.pool().clone();
    let console = p.edge.console.clone().expect("the console listens");
    let worker = p.spawn_worker();
    // The domain relay and the delivery loops, as the worker process runs them.
    let cancel = tokio_util::sync::CancellationToken::new();
    let supervisor = Supervisor::new(Liveness::new(), RestartPolicy::default());
    let delivery = hookline_delivery::spawn(&p.config, pool.clone(), &supervisor, &cancel)
        .expect("the delivery loops");
    let mut http = ConsoleHttp::new(&console);
    http.login().await;

    let paid = stripe::payment_intent("evt_pictures_paid", "succeeded", "pi_pictures", 12_345);
    assert_eq!(p.edge.deliver_stripe(&paid).await, 200);
    // The refund after the payment is applied: the test is about pictures, not about early events.
    wait_for_count(
        &pool,
        WAIT,
        "the payment applied",
        "SELECT count(*) FROM processed_events WHERE outcome = 'applied'",
        1,
    )
    .await;
    let refund = stripe::refund("evt_pictures_refund", "re_pictures", "pi_pictures", 2_345);
    assert_eq!(p.edge.deliver_stripe(&refund).await, 200);
    wait_for_count(
        &pool,
        WAIT,
        "both events applied",
        "SELECT count(*) FROM processed_events WHERE outcome = 'applied'",
        2,
    )
    .await;
    wait_for_count(
        &pool,
        WAIT,
        "both facts delivered to crm",
        "SELECT count(*) FROM domain_deliveries WHERE destination = 'crm' AND status = 'delivered'",
        2,
    )
    .await;
    let paid_id: i64 = sqlx::query_scalar(
        "SELECT id FROM webhook_events WHERE provider_event_id = 'evt_pictures_paid'",
    )
    .fetch_one(&pool)
    .await
    .expect("the stored event");
    let payment_id: i64 =
        sqlx::query_scalar("SELECT id FROM payments WHERE provider_payment_id = 'pi_pictures'")
            .fetch_one(&pool)
            .await
            .expect("the payment");

    // The event's timeline: stored, applied, the transition and the posting it caused, in that order.
    let page = http.get(&format!("/events/{paid_id}")).await;
    assert_eq!(page.status, 200);
    let story = figure(&page.text, "event-timeline");
    assert!(story.contains("<svg"), "{story}");
    let stored = story.find(">stored by the edge<").expect("stored");
    let applied = story.find(">applied by payments<").expect("applied");
    assert!(stored < applied, "{story}");
    assert!(story.contains("→ succeeded"), "{story}");
    assert!(story.contains(">payment posted<"), "{story}");
    // The fact this event's processing recorded, and its delivery to the merchant's endpoint after it.
    let fact = story.find(">fact payment.succeeded<").expect("the fact");
    let delivered = story
        .find(">delivered to crm (200)<")
        .expect("its delivery");
    assert!(applied < fact && fact < delivered, "{story}");
    assert!(story.matches("<circle").count() >= 4, "{story}");
    assert!(
        !story.contains("refund"),
        "the refund is another event's: {story}"
    );

    // The payment's page: both events' postings and its transition, each titled with its clock time.
    let page = http.get(&format!("/payments/{payment_id}")).await;
    assert_eq!(page.status, 200);
    let story = figure(&page.text, "payment-timeline");
    assert!(story.contains("→ succeeded"), "{story}");
    assert!(
        story.contains("<title>payment pi_pictures posted at "),
        "{story}"
    );
    assert!(
        story.contains("<title>refund re_pictures posted at "),
        "{story}"
    );
    assert!(story.contains(">fact payment.succeeded<"), "{story}");
    assert!(story.contains(">fact refund.applied<"), "{story}");
    assert_eq!(
        story.matches(">delivered to crm (200)<").count(),
        2,
        "each fact's delivery: {story}"
    );
    assert!(page.text.contains("id=\"postings\""), "the tables follow");
    assert_eq!(http.get("/payments/999999999").await.status, 404);
    assert_eq!(http.get("/payments/abc").await.status, 404);
    let list = http.get("/payments").await;
    assert!(
        list.text
            .contains(&format!("href=\"/payments/{payment_id}\"")),
        "the list links each payment to its page"
    );

    // The overview's history: the sampler took a sample before the events and after them, so the last hour
    // has a column of received events (its tooltip names the series).
    let deadline = Instant::now() + WAIT;
    let figures = loop {
        let f = http.get("/overview/figures").await;
        assert_eq!(f.status, 200);
        if figure(&f.text, "chart-hour-flow").contains("<title>received ") {
            break f.text;
        }
        assert!(
            Instant::now() < deadline,
            "no received column in the last hour: {}",
            f.text
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(figure(&figures, "chart-hour-flow").contains("<title>processed "));
    for id in [
        "chart-hour-ack",
        "chart-hour-relay-lag",
        "chart-day-flow",
        "chart-day-ack",
    ] {
        assert!(figure(&figures, id).contains("<svg"), "{id}: {figures}");
    }
    assert!(figures.contains("sampled every 1 s since"), "{figures}");

    // The same pages in Chromium, for the artefacts and docs/http.md.
    let b = Browser::start().await;
    b.client
        .goto(&format!("{console}/"))
        .await
        .expect("open the console");
    b.fill("login-name", "alice").await;
    b.fill("login-password", PASSWORD).await;
    b.click("#login-submit").await;
    b.client
        .wait()
        .for_element(Locator::Id("history"))
        .await
        .expect("the overview's history");
    b.screenshot("pictures-overview").await;
    b.client
        .goto(&format!("{console}/events/{paid_id}"))
        .await
        .expect("the event");
    assert!(b
        .text_of("event-timeline")
        .await
        .contains("stored by the edge"));
    b.screenshot("pictures-event").await;
    b.client
        .goto(&format!("{console}/payments/{payment_id}"))
        .await
        .expect("the payment");
    assert!(b.text_of("payment-timeline").await.contains("succeeded"));
    b.screenshot("pictures-payment").await;
    cancel.cancel();
    for task in delivery {
        within(WAIT, "the delivery loops' stop", task).await.ok();
    }
    worker.stop().await;
}
