//! The control API bounds its values: a control request cannot queue unbounded work (4294967295 duplicate
//! copies, a fault firing forever, millions of forced outcomes). Each bound answers 400 and changes nothing.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn control_values_past_their_bounds_are_refused_with_400_and_change_nothing() {
    let sandbox = start(settings(None)).await;
    let put = |body: serde_json::Value| {
        let url = sandbox.url("/_sandbox/delivery");
        async move { client().put(url).json(&body).send().await.expect("sent") }
    };
    for body in [
        json!({"duplicates": 4294967295u32}),
        json!({"duplicates": hookline_sandbox::MAX_DUPLICATES + 1}),
        json!({"delay_ms": 600_001}),
        json!({"shuffle_ms": u64::MAX}),
        json!({"drop_next": 4294967295u32}),
    ] {
        let res = put(body.clone()).await;
        assert_eq!(res.status(), 400, "{body}");
    }
    assert_eq!(
        sandbox.control().delivery_behaviour().duplicates,
        0,
        "nothing changed"
    );
    let ok = put(json!({"duplicates": hookline_sandbox::MAX_DUPLICATES})).await;
    assert_eq!(ok.status(), 200, "the bound itself is accepted");

    for fault in [
        json!({"action": {"kind": "status", "status": 500}, "count": 4294967295u32}),
        json!({"action": {"kind": "status", "status": 429, "retry_after_secs": 99_999_999}}),
        json!({"action": {"kind": "delay", "delay_ms": 600_001}}),
        json!({"action": {"kind": "reset"}, "path": "x".repeat(10_000)}),
    ] {
        let res = control_post(&sandbox, "/_sandbox/faults", &fault).await;
        assert_eq!(res.status(), 400, "{fault}");
    }
    assert!(sandbox.control().faults().is_empty(), "no fault armed");

    let res = control_post(
        &sandbox,
        "/_sandbox/outcomes",
        &json!({"provider": "stripe", "status": "declined", "count": 4294967295u32}),
    )
    .await;
    assert_eq!(res.status(), 400);
    sandbox.stop().await;
}
