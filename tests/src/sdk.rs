//! The official Python SDKs (PyPI `stripe`, `mercadopago`, pinned in `tests/sdk/requirements.txt`) as clients
//! nobody here wrote: a venv made once per machine under the cargo target dir, and a runner for the scripts of
//! `tests/sdk/` (one line per check, non-zero exit on a failed one). See `tests/sdk/README.md`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

/// Longest a script may run before it is killed (its own HTTP calls time out after 20 s each).
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// `tests/sdk/`.
pub fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk")
}

/// The cargo target dir: `$CARGO_TARGET_DIR`, else the workspace's `target/`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

/// The venv's python, making the venv first if needed: `{target}/sdk-venv/`, with the requirements installed
/// by pip. A stamp (the requirements' SHA-256) says it is complete and current; a changed requirements file
/// re-creates it. Parallel tests (and parallel `cargo test` processes) serialise on `{target}/sdk-venv.lock`
/// through `flock(1)`: one makes it, the others wait and find the stamp.
pub fn python() -> anyhow::Result<PathBuf> {
    let requirements = sdk_dir().join("requirements.txt");
    let text =
        std::fs::read(&requirements).with_context(|| format!("read {}", requirements.display()))?;
    let digest = hex::encode(Sha256::digest(&text));
    let target = target_dir();
    std::fs::create_dir_all(&target).with_context(|| format!("create {}", target.display()))?;
    let venv = target.join("sdk-venv");
    let python = venv.join("bin").join("python");
    let stamp = venv.join("hookline-requirements.sha256");
    let current = || std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == digest);
    if current() {
        return Ok(python);
    }
    // Under the lock: check again, else (re)make the venv and write the stamp last.
    let script = format!(
        "set -e\n\
         if [ \"$(cat '{stamp}' 2>/dev/null)\" = '{digest}' ]; then exit 0; fi\n\
         rm -rf '{venv}'\n\
         python3 -m venv '{venv}'\n\
         '{venv}/bin/python' -m pip install --disable-pip-version-check --no-input -q -r '{req}'\n\
         echo '{digest}' > '{stamp}'\n",
        stamp = stamp.display(),
        venv = venv.display(),
        req = requirements.display(),
    );
    let output = Command::new("flock")
        .arg(target.join("sdk-venv.lock"))
        .args(["sh", "-c", &script])
        .output()
        .context("run flock sh (util-linux flock and python3 with venv are needed)")?;
    if !output.status.success() || !current() {
        bail!(
            "making the SDK venv failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(python)
}

/// What one script run printed, and whether every check passed.
#[derive(Debug, Clone)]
pub struct ScriptRun {
    /// Exit status 0: every check passed.
    pub passed: bool,
    /// stdout then stderr: one line per check, and any traceback.
    pub output: String,
}

impl ScriptRun {
    /// Lines of checks that passed (`ok - …`).
    pub fn passed_checks(&self) -> usize {
        self.output
            .lines()
            .filter(|l| l.starts_with("ok - "))
            .count()
    }
}

/// Runs `tests/sdk/{script}` with the venv's python and `env` added to the environment (nothing else of this
/// process's environment is changed), capturing its output; killed after [`SCRIPT_TIMEOUT`]. Blocking work runs
/// on tokio's blocking pool, so an in-process sandbox keeps serving meanwhile.
pub async fn run_script(script: &str, env: &[(&str, String)]) -> anyhow::Result<ScriptRun> {
    let script = sdk_dir().join(script);
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let python = python()?;
        let output = Command::new("timeout")
            .arg(format!("{}s", SCRIPT_TIMEOUT.as_secs()))
            .arg(&python)
            .arg(&script)
            .current_dir(sdk_dir())
            .envs(env)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .output()
            .with_context(|| format!("run {}", script.display()))?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Ok(ScriptRun {
            passed: output.status.success(),
            output: text,
        })
    })
    .await
    .context("script task")?
}
