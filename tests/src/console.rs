//! The operator console's test harness, shared by the console's test modules: the real binary hashes the
//! password, and an edge without broker is started with the console (its own process, `hookline console
//! serve`, started by [`crate::TestEdge::spawn_on`] when the configuration has `[console]`).

use crate::{binary, parse_config, test_config_toml, TestDb, TestEdge};

/// The password of the console's test operator, `alice`.
pub const PASSWORD: &str = "correct horse battery staple";

/// The Argon2id hash of `password`, made by the real `hookline console hash-password` (password on stdin).
pub async fn hash_password(password: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(binary("hookline"))
        .args(["console", "hash-password"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run hookline console hash-password");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(format!("{password}\n").as_bytes())
        .await
        .expect("write the password");
    drop(stdin);
    let out = child
        .wait_with_output()
        .await
        .expect("hash-password output");
    assert!(out.status.success(), "hash-password failed");
    let hash = String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    hash
}

/// A `[console]` section on an ephemeral port with one operator, `alice`, whose hash is `hash`.
pub fn console_toml(hash: &str) -> String {
    format!(
        "[console]\nlisten = \"127.0.0.1:0\"\n[[console.operators]]\nname = \"alice\"\npassword_hash = \"{hash}\"\n"
    )
}

/// An edge without broker (no relay) and with the console.
pub async fn console_edge() -> TestEdge {
    let hash = hash_password(PASSWORD).await;
    let db = TestDb::new().await;
    let config = parse_config(&test_config_toml(
        &db.url,
        "",
        &format!("[relay]\nembedded = false\n{}", console_toml(&hash)),
    ));
    TestEdge::spawn_on(db, config).await
}
