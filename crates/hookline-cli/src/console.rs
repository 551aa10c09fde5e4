//! `hookline console`: helpers for the operator web console served by hookline-edge (`[console]`).

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHasher};
use clap::Subcommand;

/// Console commands.
#[derive(Subcommand, Debug)]
pub enum ConsoleCommand {
    /// Read a password from standard input (one line) and print its Argon2id PHC string, for
    /// `[[console.operators]] password_hash = "…"`. The password never appears in arguments or the history.
    HashPassword,
}

/// Shortest accepted password.
const MIN_PASSWORD_CHARS: usize = 12;

/// Runs a console command.
pub fn run(cmd: &ConsoleCommand) -> ExitCode {
    match cmd {
        ConsoleCommand::HashPassword => hash_password(),
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
