//! The RabbitMQ definitions file shipped in `deploy/` describes exactly what the code declares (default prefix
//! `hookline`, default delivery limit 20), so provisioning the broker up front and declaring at start-up agree.

use hookline_bus::Topology;
use lapin::types::AMQPValue;

fn definitions() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/rabbitmq-definitions.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("definitions file"))
        .expect("valid JSON")
}

fn named<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing from deploy/rabbitmq-definitions.json"))
}

#[test]
fn definitions_file_matches_declared_topology() {
    let t = Topology::new("hookline", 20);
    let d = definitions();
    assert_eq!(named(&d["exchanges"], &t.exchange)["type"], "topic");
    assert_eq!(
        named(&d["exchanges"], &t.dead_letter_exchange)["type"],
        "fanout"
    );
    let q = named(&d["queues"], &t.payments_queue);
    assert_eq!(q["durable"], true);
    let args = q["arguments"].as_object().unwrap();
    let declared = t.payments_queue_arguments();
    assert_eq!(
        args.len(),
        declared.inner().len(),
        "same number of queue arguments"
    );
    for (key, value) in declared.inner() {
        let file = &args[key.as_str()];
        match value {
            AMQPValue::LongString(s) => assert_eq!(file, &s.to_string(), "{key}"),
            AMQPValue::LongLongInt(n) => assert_eq!(file, n, "{key}"),
            other => panic!("unexpected argument type for {key}: {other:?}"),
        }
    }
    let dlq = named(&d["queues"], &t.dead_letter_queue);
    assert_eq!(dlq["arguments"]["x-queue-type"], "quorum");
    assert_eq!(
        dlq["arguments"]["x-quorum-initial-group-size"],
        i64::from(t.initial_group_size)
    );
    let bindings = d["bindings"].as_array().unwrap();
    assert!(bindings.iter().any(|b| b["source"] == t.exchange.as_str()
        && b["destination"] == t.payments_queue.as_str()
        && b["routing_key"] == "#"));
    assert!(bindings
        .iter()
        .any(|b| b["source"] == t.dead_letter_exchange.as_str()
            && b["destination"] == t.dead_letter_queue.as_str()));
}
