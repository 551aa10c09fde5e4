//! `hookline console`: the operator web console's process (`serve`, [`hookline_console::serve`]) and its
//! helpers (`hash-password`).
//!
//! The console is its own process, not a listener of the edge, so that an operator-facing flood (logins are
//! Argon2 checks by design) can never slow a webhook acknowledgement.

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHasher};
use clap::Subcommand;
use hookline_core::Config;

/// Console commands.
#[derive(Subcommand, Debug)]
pub enum ConsoleCommand {
    /// Read a password from standard input (one line) and print its Argon2id PHC string, for
    /// `[[console.operators]] password_hash = "…"`. The password never appears in arguments or the history.
    HashPassword,
    /// Serve the operator web console (`[console] listen`) until SIGTERM/SIGINT, in this process: its own
    /// database pool, supervisor and `/healthz`. Exits 3 if the listener cannot be bound or a supervised loop
    /// dies, 2 without a `[console]` section.
    Serve,
}

/// Shortest accepted password.
const MIN_PASSWORD_CHARS: usize = 12;

/// Runs a console command that needs no configuration (`hash-password`); `None` for one that does.
pub fn run_without_config(cmd: &ConsoleCommand) -> Option<ExitCode> {
    match cmd {
        ConsoleCommand::HashPassword => Some(hash_password()),
        ConsoleCommand::Serve => None,
    }
}

/// Runs a console command with the loaded configuration.
pub async fn run(config: &Config, cmd: &ConsoleCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ConsoleCommand::HashPassword => Ok(hash_password()),
        ConsoleCommand::Serve => serve(config).await,
    }
}

/// `hookline console serve`: exit 2 without `[console]` (a usage error: nothing to serve), otherwise the
/// console's own process until SIGTERM/SIGINT (0) or a failure (3, with the cause chain on stderr).
async fn serve(config: &Config) -> anyhow::Result<ExitCode> {
    // Validated at start-up (see `crate::validate_sections`); read again here for whether it is present.
    let console =
        hookline_console::ConsoleConfig::from_config(config, &hookline_core::config::ProcessEnv)?;
    if console.is_none() {
        eprintln!(
            "error: no [console] section in the configuration: add [console] with at least one \
             [[console.operators]] (password hashes from `hookline console hash-password`)"
        );
        return Ok(ExitCode::from(2));
    }
    match hookline_console::serve(config.clone()).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("error: the console stopped: {e:#}");
            Ok(ExitCode::from(3))
        }
    }
}

fn hash_password() -> ExitCode {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("password (one line; it is echoed, prefer a pipe such as `pass show x | hookline console hash-password`):");
    }
    let mut line = String::new();
    if let Err(e) = stdin.lock().read_line(&mut line) {
        eprintln!("error: cannot read the password from standard input: {e}");
        return ExitCode::from(2);
    }
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    match hash(password) {
        Ok(phc) => {
            println!("{phc}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("error: {why}");
            ExitCode::from(2)
        }
    }
}

/// The Argon2id PHC string of `password` (default parameters, random salt).
pub fn hash(password: &str) -> Result<String, String> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(format!(
            "the password must have at least {MIN_PASSWORD_CHARS} characters"
        ));
    }
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::{PasswordHash, PasswordVerifier};

    #[test]
    fn hashes_are_argon2id_salted_and_verify() {
        let a = hash("correct horse battery").expect("hash");
        let b = hash("correct horse battery").expect("hash");
        assert!(a.starts_with("$argon2id$"), "{a}");
        assert_ne!(a, b, "each hash has its own salt");
        let parsed = PasswordHash::new(&a).expect("PHC string");
        assert!(Argon2::default()
            .verify_password(b"correct horse battery", &parsed)
            .is_ok());
        assert!(Argon2::default()
            .verify_password(b"wrong horse battery", &parsed)
            .is_err());
        assert!(hash("short").is_err());
    }
}
