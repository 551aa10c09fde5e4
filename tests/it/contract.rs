//! The merchant's contract, checked by tools nobody here wrote (issue 47): the OpenAPI document the API serves is
//! the one committed (`docs/openapi.json`), schemathesis fuzzes the running API with it — no 5xx, every answer's
//! status, content type, headers and body as documented, schema-invalid input refused with 4xx, no route
//! answering without a valid key, a method a path does not take 405, stateful runs following the document's
//! links from a created intent — and a client generated from it by openapi-python-client drives a checkout.

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use hookline_tests::sdk;
use serde_json::Value;

use crate::merchant_api::{clients_section, Gatewayed, KEY_ONE};

/// The longest a tool may run (schemathesis with the budget below takes well under a minute here).
const TOOL_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `program args` from the contract venv's `bin/` with `env`, on tokio's blocking pool (the sandbox and the
/// API keep serving meanwhile), killed after [`TOOL_TIMEOUT`]; returns (passed, stdout + stderr).
async fn tool(
    program: &str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
) -> (bool, String) {
    let program = program.to_owned();
    // A fresh directory of its own (removed after): schemathesis and hypothesis keep caches in the working
    // directory, which must never be the source tree.
    let cwd = std::env::temp_dir().join(format!(
        "hookline-contract-cwd-{}-{}",
        std::process::id(),
        time::OffsetDateTime::now_utc().unix_timestamp_nanos()
    ));
    tokio::task::spawn_blocking(move || {
        let python = sdk::contract_python().context("the contract venv")?;
        let bin = python.parent().context("venv bin")?.to_path_buf();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        std::fs::create_dir_all(&cwd).context("the tool's directory")?;
        let out = Command::new("timeout")
            .arg(format!("{}s", TOOL_TIMEOUT.as_secs()))
            .arg(bin.join(&program))
            .args(&args)
            .current_dir(&cwd)
            .env("PATH", path)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .envs(env)
            .output()
            .with_context(|| format!("run {program}"))?;
        let _ = std::fs::remove_dir_all(&cwd);
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        anyhow::Ok((out.status.success(), text))
    })
    .await
    .expect("tool task")
    .expect("tool")
}

/// The document served is the committed one, and it needs no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_document_is_served_without_a_key_and_is_the_committed_one() {
    let gw = Gatewayed::start_with(&clients_section()).await;
    let res = reqwest::get(format!("{}/v1/openapi.json", gw.api.base()))
        .await
        .expect("GET openapi.json");
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap_or_default(),
        "application/json"
    );
    let served = res.text().await.expect("body");
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json"))
            .expect("docs/openapi.json");
    assert_eq!(served, committed, "the API serves docs/openapi.json");
    let doc: Value = serde_json::from_str(&served).expect("JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    // Every other route wants the key, a method a route does not take is 405 (after the key).
    let client = reqwest::Client::new();
    let anonymous = client
        .get(format!("{}/v1/payment_intents", gw.api.base()))
        .send()
        .await
        .expect("GET");
    assert_eq!(anonymous.status(), 401);
    let wrong_method = client
        .delete(format!("{}/v1/payment_intents", gw.api.base()))
        .bearer_auth(KEY_ONE)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(wrong_method.status(), 405);
    assert_eq!(
        wrong_method.headers()["allow"].to_str().unwrap_or_default(),
        "GET, POST"
    );
    gw.stop().await;
}

/// schemathesis, every phase (examples, coverage, fuzzing, stateful), finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_schemathesis_finds_nothing() {
    let gw = Gatewayed::start_with(&clients_section()).await;
    let base = gw.api.base().to_owned();
    let (passed, output) = tool(
        "st",
        vec![
            "run".into(),
            format!("{base}/v1/openapi.json"),
            "--url".into(),
            base.clone(),
            "-H".into(),
            format!("Authorization: Bearer {KEY_ONE}"),
            "--checks".into(),
            [
                "not_a_server_error",
                "status_code_conformance",
                "content_type_conformance",
                "response_schema_conformance",
                "response_headers_conformance",
                "negative_data_rejection",
                "ignored_auth",
                "missing_required_header",
                "unsupported_method",
                "use_after_free",
                "ensure_resource_availability",
            ]
            .join(","),
            "--max-examples".into(),
            "40".into(),
            "--no-color".into(),
        ],
        vec![
            ("SCHEMATHESIS_HOOKS", "hooks".into()),
            ("HOOKLINE_CONTRACT_PROVIDER", "st".into()),
            ("PYTHONPATH", sdk::contract_dir().display().to_string()),
        ],
    )
    .await;
    assert!(passed, "schemathesis found something:\n{output}");
    // It reached the API's logic: intents were created (through the hooks) and the stateful phase ran.
    let created: i64 = sqlx::query_scalar("SELECT count(*) FROM payment_intents")
        .fetch_one(&gw.api.db.pool)
        .await
        .expect("count");
    assert!(created > 0, "no intent was created:\n{output}");
    // The stateful phase followed the document's links from created intents (`API Links: N covered`).
    let covered: u32 = output
        .split("API Links:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        covered > 0,
        "the stateful phase followed no link:\n{output}"
    );
    gw.stop().await;
}

/// A client generated from the document drives the checkout: created at checkout, confirmed twice, succeeded
/// once — one charge at the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_generated_client_drives_the_checkout_once() {
    let gw = Gatewayed::start_with(&clients_section()).await;
    // A fresh directory of this run's own (removed at the end): the generated package `hookline_client`.
    let out = std::env::temp_dir().join(format!(
        "hookline-contract-{}-{}",
        std::process::id(),
        time::OffsetDateTime::now_utc().unix_timestamp_nanos()
    ));
    let package = out.join("hookline_client");
    let (generated, output) = tool(
        "openapi-python-client",
        vec![
            "generate".into(),
            "--path".into(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json").into(),
            "--output-path".into(),
            package.display().to_string(),
            "--meta".into(),
            "none".into(),
        ],
        vec![],
    )
    .await;
    assert!(generated, "the generator failed:\n{output}");
    assert!(
        !output.contains("Unable to process"),
        "the generator could not take part of the document:\n{output}"
    );
    let python = tokio::task::spawn_blocking(sdk::contract_python)
        .await
        .expect("task")
        .expect("venv");
    let (passed, output) = tool(
        python
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("python"),
        vec![sdk::contract_dir()
            .join("checkout.py")
            .display()
            .to_string()],
        vec![
            ("PYTHONPATH", out.display().to_string()),
            ("HOOKLINE_API_URL", gw.api.base().to_owned()),
            ("HOOKLINE_API_KEY", KEY_ONE.into()),
            ("HOOKLINE_PROVIDER", "st".into()),
            ("HOOKLINE_ORDER", "contract-order-1".into()),
        ],
    )
    .await;
    let _ = std::fs::remove_dir_all(&out);
    assert!(passed, "the generated client's checkout failed:\n{output}");
    assert_eq!(gw.charges(), 1, "one charge at the gateway:\n{output}");
    gw.stop().await;
}
