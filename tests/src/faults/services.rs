//! Service faults and the tools behind them: `rabbitmqctl` and `pg_ctlcluster`, waiting for PostgreSQL, and the
//! guards ([`PostgresGuard`], [`BrokerGuard`]) that restore a stopped service when dropped, panics included.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `rabbitmqctl ARGS`, asserting success; returns stdout.
pub async fn rabbitmqctl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .await
        .expect("run rabbitmqctl");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `rabbitmqctl -n NODE ARGS` against each of `nodes` until one succeeds (a cluster with a node down);
/// returns its stdout. Panics when none answers.
pub async fn rabbitmqctl_any(nodes: &[String], args: &[&str]) -> String {
    let mut errors = Vec::new();
    for node in nodes {
        let out = tokio::process::Command::new("rabbitmqctl")
            .args(["-n", node.as_str()])
            .args(args)
            .output()
            .await
            .expect("run rabbitmqctl");
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        errors.push(format!(
            "{node}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    panic!("rabbitmqctl {args:?} failed on every node: {errors:?}");
}

/// Runs `pg_ctlcluster --skip-systemctl-redirect 15 main ACTION EXTRA…`, asserting success.
pub async fn pg_ctlcluster(action: &str, extra: &[&str]) {
    let version = pg_cluster_version();
    let out = tokio::process::Command::new("pg_ctlcluster")
        .args([
            "--skip-systemctl-redirect",
            version.as_str(),
            "main",
            action,
        ])
        .args(extra)
        .output()
        .await
        .expect("run pg_ctlcluster");
    assert!(
        out.status.success(),
        "pg_ctlcluster {action} {extra:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Debian cluster version to control (the newest under /etc/postgresql; 15 on the machines of this project,
/// but a fresh machine may install another).
fn pg_cluster_version() -> String {
    std::fs::read_dir("/etc/postgresql")
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|v| v.parse::<u32>().ok())
        .max()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "15".to_string())
}

/// Waits until PostgreSQL accepts connections (a fresh connection to the maintenance database answers).
pub async fn wait_postgres_up(timeout: Duration) {
    let url = format!("{}/postgres", crate::pg_base_url());
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await {
            if sqlx::query("SELECT 1").execute(&mut conn).await.is_ok() {
                sqlx::Connection::close(conn).await.ok();
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "PostgreSQL did not come back within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Restores PostgreSQL when dropped (a failing test must not leave the cluster stopped for the others).
pub struct PostgresGuard(());

impl PostgresGuard {
    /// Arms the guard.
    pub fn new() -> PostgresGuard {
        PostgresGuard(())
    }
}

impl Default for PostgresGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for PostgresGuard {
    fn drop(&mut self) {
        // `start` on a running cluster fails harmlessly ("already running"); then wait until it accepts.
        let _ = Command::new("pg_ctlcluster")
            .args(["--skip-systemctl-redirect", "15", "main", "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for _ in 0..300 {
            let ready = Command::new("pg_isready")
                .args(["-h", "127.0.0.1", "-p", "5432", "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Restores the RabbitMQ application when dropped.
pub struct BrokerGuard(());

impl BrokerGuard {
    /// Arms the guard.
    pub fn new() -> BrokerGuard {
        BrokerGuard(())
    }
}

impl Default for BrokerGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for BrokerGuard {
    fn drop(&mut self) {
        // Idempotent: starting a running app is a no-op.
        let _ = Command::new("rabbitmqctl")
            .arg("start_app")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("rabbitmqctl")
            .args(["await_startup", "--timeout", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
