//! Issue 30, traces end to end: the REAL `hookline-edge`, `hookline-worker` and `hookline` CLI export their spans
//! over OTLP HTTP/protobuf to a collector in the test ([`hookline_tests::otlp::Collector`], which decodes them
//! with the official OpenTelemetry protobuf definitions). What is asserted is what an operator relies on when an
//! event is "stuck somewhere": one trace per event across processes, with correct parent links; a duplicate,
//! a replay and a redelivery attributable; an intent's gateway attempts in the merchant's own trace, the
//! completing webhook linked to it; the merchant's endpoint receiving the trace; no secret in any attribute.

use std::collections::HashSet;
use std::time::Duration;

use hookline_tests::billing::{BillingRig, API_KEY, PROVIDER, STRIPE_KEY, WEBHOOK_SECRET};
use hookline_tests::otlp::{Collector, Span};
use hookline_tests::{now, secrets, stripe_event, stripe_headers};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

fn telemetry(collector: &Collector) -> String {
    format!(
        "[telemetry]\notlp_endpoint = \"{}\"\nbatch_delay_ms = 100\nsampling_ratio = 1.0\n",
        collector.base
    )
}

/// Whether `spans` hold a span named `name` whose attribute `key` is `value` (any value when `key` is empty).
/// Processes export on their own schedules: a test waits for every span it reads, never for one as a proxy.
fn has(spans: &[Span], name: &str, key: &str, value: &str) -> bool {
    spans
        .iter()
        .any(|s| s.name == name && (key.is_empty() || s.attr(key) == Some(value)))
}

fn one<'a>(spans: &'a [Span], service: &str, name: &str) -> &'a Span {
    let found: Vec<&Span> = spans
        .iter()
        .filter(|s| s.service == service && s.name == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {service} {name} expected: {:#?}",
        spans
            .iter()
            .map(|s| (&s.service, &s.name, &s.span_id, &s.parent_span_id))
            .collect::<Vec<_>>()
    );
    found[0]
}

/// No attribute of any span holds a secret, a credential or a raw body.
fn assert_nothing_secret(spans: &[Span], body_marker: &str) {
    let forbidden = [
        WEBHOOK_SECRET,
        STRIPE_KEY,
        API_KEY,
        secrets::STANDARD,
        body_marker,
    ];
    for s in spans {
        for (k, v) in &s.attributes {
            for f in forbidden {
                assert!(
                    !v.contains(f),
                    "{} {}: attribute {k} holds {f:?}: {v}",
                    s.service,
                    s.name
                );
            }
        }
    }
}

async fn post_webhook(rig: &BillingRig, body: &[u8]) -> serde_json::Value {
    let mut req = reqwest::Client::new()
        .post(format!("{}/webhooks/{PROVIDER}", rig.cluster.base))
        .body(body.to_vec());
    for (name, value) in stripe_headers(WEBHOOK_SECRET, now(), body) {
        req = req.header(name, value);
    }
    let res = req.send().await.expect("the edge answers");
    assert_eq!(res.status(), 200);
    res.json().await.expect("json")
}

/// One webhook → one trace: the edge's request (and its group commit), the relay's publish, the worker's apply,
/// the fact's delivery attempt, with each span the child of the one before it across three processes; the
/// merchant's endpoint receives a `traceparent` naming the delivery attempt. A duplicate is its own short trace
/// (no publish). A replay by `hookline replay` continues the event's trace (publish linked to the replay run,
/// apply `duplicate`), so everything that ever happened to the event is found from its first trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_webhook_is_one_trace_from_the_edge_to_the_merchants_endpoint() {
    let collector = Collector::start();
    let mut rig = BillingRig::start_with("traces_webhook", &[1], &telemetry(&collector)).await;
    rig.cluster.start_worker(None).await;
    let body = stripe_event("evt_trace_one", "pi_trace_one", 4242);
    let answer = post_webhook(&rig, &body).await;
    let event_id = answer["id"].as_i64().expect("stored id");

    let spans = collector
        .wait_for(WAIT, "the webhook's spans, edge to delivery", |spans| {
            has(spans, "webhook.receive", "outcome", "stored")
                && has(spans, "edge.group_commit", "", "")
                && has(spans, "relay.publish", "outcome", "confirmed")
                && has(spans, "worker.apply", "outcome", "applied")
                && has(spans, "payment.transition", "", "")
                && has(spans, "delivery.attempt", "outcome", "delivered")
        })
        .await;
    let receive = spans
        .iter()
        .find(|s| s.name == "webhook.receive" && s.attr("outcome") == Some("stored"))
        .expect("the edge's request span");
    let trace = collector.trace(&receive.trace_id);
    assert_eq!(receive.service, "hookline-edge");
    assert_eq!(
        receive.parent_span_id, "",
        "the request is the trace's root"
    );
    assert_eq!(receive.attr("provider"), Some(PROVIDER));
    assert_eq!(
        receive.attr("event_id"),
        Some(event_id.to_string().as_str())
    );
    assert_eq!(receive.attr("http.response.status_code"), Some("200"));
    let commit = one(&trace, "hookline-edge", "edge.group_commit");
    assert_eq!(commit.parent_span_id, receive.span_id);
    let publish = one(&trace, "hookline-edge", "relay.publish");
    assert_eq!(publish.parent_span_id, receive.span_id);
    assert_eq!(publish.attr("outcome"), Some("confirmed"));
    assert_eq!(publish.attr("messaging.system"), Some("rabbitmq"));
    let apply = one(&trace, "hookline-worker", "worker.apply");
    assert_eq!(
        apply.parent_span_id, publish.span_id,
        "through the AMQP header"
    );
    assert_eq!(apply.attr("event_id"), Some(event_id.to_string().as_str()));
    assert_eq!(apply.attr("outcome"), Some("applied"));
    assert_eq!(apply.attr("redelivered"), Some("false"));
    let transition = one(&trace, "hookline-worker", "payment.transition");
    assert_eq!(transition.parent_span_id, apply.span_id);
    assert_eq!(transition.attr("to"), Some("succeeded"));
    assert_eq!(transition.attr("posting"), Some("payment"));
    let delivery = one(&trace, "hookline-worker", "delivery.attempt");
    assert_eq!(
        delivery.parent_span_id, apply.span_id,
        "through the fact's row"
    );
    assert_eq!(delivery.attr("event_type"), Some("payment.succeeded"));
    assert_eq!(delivery.attr("http.response.status_code"), Some("200"));
    let sent = rig
        .receiver
        .received()
        .into_iter()
        .find(|r| r.status == 200)
        .expect("the merchant received the fact");
    assert_eq!(
        sent.traceparent.as_deref(),
        Some(format!("00-{}-{}-01", receive.trace_id, delivery.span_id).as_str()),
        "the merchant's endpoint continues the trace"
    );
    // The trace as an operator reads it (printed: docs/operations.md's example comes from here).
    let mut ordered: Vec<&Span> = trace.iter().collect();
    ordered.sort_by_key(|s| s.start_ns);
    for s in ordered {
        eprintln!(
            "{:<16} {:<20} {:>8.2} ms",
            s.service,
            s.name,
            (s.end_ns.saturating_sub(s.start_ns)) as f64 / 1e6
        );
    }
    // Children end inside their parents' process order: the publish starts after the request began.
    assert!(publish.start_ns >= receive.start_ns && apply.start_ns >= publish.start_ns);

    // The same webhook again: a duplicate, answered 200 in its own trace, published nowhere.
    let again = post_webhook(&rig, &body).await;
    assert_eq!(again["duplicate"], true);
    let spans = collector
        .wait_for(WAIT, "the duplicate's request span", |spans| {
            spans
                .iter()
                .any(|s| s.name == "webhook.receive" && s.attr("outcome") == Some("duplicate"))
        })
        .await;
    let dup = spans
        .iter()
        .find(|s| s.name == "webhook.receive" && s.attr("outcome") == Some("duplicate"))
        .expect("duplicate");
    assert_ne!(dup.trace_id, receive.trace_id);
    assert_eq!(dup.attr("duplicate"), Some("true"));
    assert_eq!(dup.attr("event_id"), Some(event_id.to_string().as_str()));
    assert!(!collector
        .trace(&dup.trace_id)
        .iter()
        .any(|s| s.name == "relay.publish"));

    // A replay continues the event's own trace: a second publish (by the CLI, linked to the run) and a second
    // apply, a duplicate for the worker.
    rig.cli(&[
        "replay",
        "--all",
        "--id",
        &event_id.to_string(),
        "--reason",
        "trace test",
        "--rate",
        "0",
    ])
    .await;
    collector
        .wait_for(WAIT, "the replayed event's publish and apply", |spans| {
            has(spans, "replay.page", "", "")
                && spans.iter().any(|s| {
                    s.trace_id == receive.trace_id
                        && s.name == "worker.apply"
                        && s.attr("outcome") == Some("duplicate")
                })
                && spans.iter().any(|s| {
                    s.trace_id == receive.trace_id
                        && s.name == "relay.publish"
                        && s.service == "hookline-replay"
                })
        })
        .await;
    let trace = collector.trace(&receive.trace_id);
    let replayed = trace
        .iter()
        .find(|s| s.name == "relay.publish" && s.service == "hookline-replay")
        .expect("the replay's publish in the event's trace");
    assert_eq!(replayed.parent_span_id, receive.span_id);
    let page = collector
        .spans()
        .into_iter()
        .find(|s| s.name == "replay.page")
        .expect("the replay run's span");
    assert!(page.attr("replay_run").is_some());
    assert_eq!(
        replayed.links,
        vec![(page.trace_id.clone(), page.span_id.clone())],
        "linked to the run that re-delivered it"
    );
    let second = trace
        .iter()
        .find(|s| s.name == "worker.apply" && s.attr("outcome") == Some("duplicate"))
        .expect("second apply");
    assert_eq!(second.parent_span_id, replayed.span_id);
    assert_eq!(
        trace
            .iter()
            .filter(|s| s.name == "delivery.attempt")
            .count(),
        1,
        "a replay changes nothing: no second fact"
    );

    assert_nothing_secret(&collector.spans(), "\"object\"");
    let (requests, undecodable) = collector.requests();
    assert!(requests > 0);
    assert_eq!(undecodable, 0);
    assert!(collector
        .content_types()
        .iter()
        .all(|c| c == "application/x-protobuf"));
    collector.stop().await;
    rig.teardown().await;
}

/// A redelivery stays in the event's trace: a worker killed after its commit and before its ack; RabbitMQ
/// redelivers the message to the next worker, whose `worker.apply` (`redelivered`, `duplicate`: the marker
/// found) is the child of the same publish, in the trace the webhook started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redelivery_after_a_crash_stays_in_the_events_trace() {
    let collector = Collector::start();
    let mut rig = BillingRig::start_with("traces_redelivery", &[1], &telemetry(&collector)).await;
    let slot = rig
        .cluster
        .start_worker(Some("worker.after_commit=sleep(600000)"))
        .await;
    let body = stripe_event("evt_trace_redelivered", "pi_trace_redelivered", 1500);
    let answer = post_webhook(&rig, &body).await;
    let event_id = answer["id"].as_i64().expect("stored id");
    // Committed (the marker is there), not acknowledged (held by the fail point).
    hookline_tests::wait_for_count(
        rig.cluster.pool(),
        WAIT,
        "the first worker's commit",
        &format!("SELECT count(*) FROM processed_events WHERE event_id = {event_id}"),
        1,
    )
    .await;
    rig.cluster.kill_worker(slot);
    rig.cluster.start_worker(None).await;
    let spans = collector
        .wait_for(
            WAIT,
            "the request, the publish and the redelivered apply",
            |spans| {
                has(spans, "webhook.receive", "outcome", "stored")
                    && has(spans, "relay.publish", "", "")
                    && has(spans, "worker.apply", "redelivered", "true")
            },
        )
        .await;
    let receive = spans
        .iter()
        .find(|s| s.name == "webhook.receive" && s.attr("outcome") == Some("stored"))
        .expect("the request span");
    let trace = collector.trace(&receive.trace_id);
    let publish = one(&trace, "hookline-edge", "relay.publish");
    let again = trace
        .iter()
        .find(|s| s.name == "worker.apply" && s.attr("redelivered") == Some("true"))
        .expect("the redelivery in the event's trace");
    assert_eq!(again.parent_span_id, publish.span_id);
    assert_eq!(again.attr("outcome"), Some("duplicate"));
    assert_eq!(again.attr("event_id"), Some(event_id.to_string().as_str()));
    collector.stop().await;
    rig.teardown().await;
}

/// One merchant call → one trace: the API requests are children of the merchant's own span (its `traceparent`
/// honoured), the dispatcher's attempt to the gateway is their child (with the key sent, the gateway's status
/// and the classification), and the 3-D Secure payment the webhook completes later shows up in the same trace as
/// `payment.intent_completed`, linked to the webhook's own trace, whose apply, fact and delivery it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_intent_is_one_trace_from_the_merchants_call_to_the_gateway_and_back() {
    let collector = Collector::start();
    let mut rig = BillingRig::start_with("traces_intent", &[1], &telemetry(&collector)).await;
    rig.cluster.start_worker(None).await;
    let merchant_trace = format!("{:032x}", 0x4b1d_0000_0000_0000_0000_0000_0000_0042u128);
    let merchant_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{merchant_trace}-{merchant_span}-01");
    let (status, intent) = rig
        .api_post_with(
            "/v1/payment_intents",
            Some("trace-intent-1"),
            &[("traceparent", &traceparent)],
            &json!({"provider": PROVIDER, "amount": 4100, "currency": "brl", "customer": "cliente-trace",
                    "stripe": {"payment_method": "pm_card_threeDSecure2Required",
                               "return_url": "https://loja.example/retorno"},
                    "confirm": true}),
        )
        .await;
    assert_eq!(status, 201, "{intent}");
    let public_id = intent["id"].as_str().expect("id").to_owned();

    let spans = collector
        .wait_for(
            WAIT,
            "the merchant's request and the dispatcher's attempt",
            |spans| {
                let mine: Vec<Span> = spans
                    .iter()
                    .filter(|s| s.trace_id == merchant_trace)
                    .cloned()
                    .collect();
                has(&mine, "api.request", "", "") && has(&mine, "dispatch.attempt", "", "")
            },
        )
        .await;
    let trace: Vec<Span> = spans
        .into_iter()
        .filter(|s| s.trace_id == merchant_trace)
        .collect();
    let request = one(&trace, "hookline-edge", "api.request");
    assert_eq!(
        request.parent_span_id, merchant_span,
        "the merchant's span is the parent"
    );
    assert_eq!(request.attr("http.route"), Some("/v1/payment_intents"));
    assert_eq!(request.attr("http.response.status_code"), Some("201"));
    let attempt = one(&trace, "hookline-worker", "dispatch.attempt");
    assert_eq!(attempt.parent_span_id, request.span_id);
    assert_eq!(attempt.attr("provider"), Some(PROVIDER));
    assert_eq!(attempt.attr("classification"), Some("accepted"));
    assert_eq!(attempt.attr("http.response.status_code"), Some("200"));
    assert_eq!(attempt.attr("attempt"), Some("1"));
    let key = attempt.attr("idempotency_key").expect("the key sent");
    assert!(!key.is_empty());
    // The key in the span is the one the gateway counted the charge under.
    let charges = rig.sandbox.control().charges();
    let stats = charges.key(PROVIDER, key).expect("the gateway saw the key");
    assert_eq!((stats.requests, stats.executed), (1, 1), "{key}: {stats:?}");

    // The customer passes 3-D Secure; Stripe's webhook completes the intent.
    let payment: String =
        sqlx::query_scalar("SELECT provider_payment_id FROM payment_intents WHERE public_id = $1")
            .bind(&public_id)
            .fetch_one(rig.cluster.pool())
            .await
            .expect("the gateway's id");
    let res = reqwest::Client::new()
        .post(rig.sandbox.url(&format!(
            "/_sandbox/payment_intents/{PROVIDER}/{payment}/authenticate"
        )))
        .json(&json!({"outcome": "succeed"}))
        .send()
        .await
        .expect("control");
    assert!(res.status().is_success());
    let spans = collector
        .wait_for(
            WAIT,
            "the intent's completion and the webhook that completed it",
            |spans| {
                let completed = spans
                    .iter()
                    .find(|s| s.trace_id == merchant_trace && s.name == "payment.intent_completed");
                let linked = completed
                    .and_then(|c| c.links.first())
                    .is_some_and(|(t, _)| {
                        let webhook: Vec<Span> =
                            spans.iter().filter(|s| &s.trace_id == t).cloned().collect();
                        has(&webhook, "webhook.receive", "outcome", "stored")
                            && has(&webhook, "worker.apply", "", "")
                    });
                linked
                    && spans.iter().any(|s| {
                        s.trace_id == merchant_trace
                            && s.name == "delivery.attempt"
                            && s.attr("event_type") == Some("payment_intent.succeeded")
                            && s.attr("outcome") == Some("delivered")
                    })
            },
        )
        .await;
    let trace: Vec<Span> = spans
        .iter()
        .filter(|s| s.trace_id == merchant_trace)
        .cloned()
        .collect();
    let completed = one(&trace, "hookline-worker", "payment.intent_completed");
    assert_eq!(completed.attr("intent_id"), Some(public_id.as_str()));
    assert_eq!(completed.parent_span_id, request.span_id);
    let delivery = trace
        .iter()
        .find(|s| {
            s.name == "delivery.attempt" && s.attr("event_type") == Some("payment_intent.succeeded")
        })
        .expect("the intent's fact delivered in its trace");
    assert_eq!(delivery.parent_span_id, completed.span_id);
    // The link names the webhook's apply, in the webhook's own trace (received from the gateway).
    assert_eq!(completed.links.len(), 1, "{completed:?}");
    let (webhook_trace, webhook_span) = &completed.links[0];
    let webhook: Vec<&Span> = spans
        .iter()
        .filter(|s| &s.trace_id == webhook_trace)
        .collect();
    let apply = webhook
        .iter()
        .find(|s| &s.span_id == webhook_span)
        .expect("the linked span is in the collector");
    assert_eq!(apply.name, "worker.apply");
    assert!(webhook
        .iter()
        .any(|s| s.name == "webhook.receive" && s.attr("outcome") == Some("stored")));
    let services: HashSet<&str> = trace.iter().map(|s| s.service.as_str()).collect();
    assert_eq!(
        services,
        HashSet::from(["hookline-edge", "hookline-worker"]),
        "{trace:#?}"
    );
    assert_nothing_secret(&collector.spans(), "\"object\"");
    collector.stop().await;
    rig.teardown().await;
}

/// Issue 44: the OTLP exporter follows no redirect, like every other outbound client of hookline. The configured
/// endpoint answers every export `307` to a real collector: the edge counts the export as failed
/// (`hookline_trace_spans_total{outcome="failed"}`), and the collector the redirect names never receives a
/// request. An exporter that followed it would have delivered the spans there and counted them exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_trace_exporter_follows_no_redirect() {
    let collector = Collector::start();
    let redirector = Collector::start_redirecting(&collector.base);
    let rig = BillingRig::start_with("traces_redirect", &[1], &telemetry(&redirector)).await;
    let body = stripe_event("evt_trace_redirect", "pi_trace_redirect", 4242);
    post_webhook(&rig, &body).await;
    let metrics = format!("{}/metrics", rig.cluster.base);
    let failed = "hookline_trace_spans_total{outcome=\"failed\"}";
    hookline_tests::wait_until(WAIT, "the edge counted its export failed", || {
        let metrics = metrics.clone();
        async move {
            let Ok(res) = reqwest::get(&metrics).await else {
                return false;
            };
            let text = res.text().await.unwrap_or_default();
            text.lines().any(|l| {
                l.starts_with(failed)
                    && l.rsplit(' ')
                        .next()
                        .and_then(|n| n.parse::<f64>().ok())
                        .is_some_and(|n| n > 0.0)
            })
        }
    })
    .await;
    assert!(redirector.requests().0 >= 1, "the endpoint was asked");
    assert_eq!(collector.requests().0, 0, "the redirect was followed");
    assert!(collector.spans().is_empty());
    rig.teardown().await;
    redirector.stop().await;
    collector.stop().await;
}
