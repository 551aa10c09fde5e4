//! Helpers shared by the operator commands.

use std::time::Duration;

use anyhow::Context;
use hookline_bus::Topology;
use hookline_core::db::{self, PoolSettings};
use hookline_core::Config;
use sqlx::PgPool;

/// The deployment's RabbitMQ names.
pub fn topology(config: &Config) -> Topology {
    Topology::from_config(&config.amqp)
}

/// A pool for a command-line tool, checked to be reachable (a CLI should fail fast and clearly).
pub async fn pool(config: &Config) -> anyhow::Result<PgPool> {
    let pool = db::lazy_pool(&config.database_url, &PoolSettings::cli())?;
    sqlx::query("SELECT 1")
        .execute(&pool)
        .await
        .context("cannot reach the database (database_url)")?;
    Ok(pool)
}

/// Who runs the command, for audit rows: `--operator`, else `$SUDO_USER`, else `$USER`, else "unknown".
pub fn operator(explicit: Option<&str>) -> String {
    explicit
        .map(str::to_string)
        .or_else(|| std::env::var("SUDO_USER").ok())
        .or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Parses a human duration such as `30d`, `12h`, `90m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration like 30d, 12h or 15m: {e}"))
}

/// Parses a point in time: RFC 3339 (`2026-11-30T04:00:00Z`) or a duration ago (`2h` = two hours ago).
pub fn parse_instant(s: &str) -> Result<time::OffsetDateTime, String> {
    if let Ok(t) = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        return Ok(t);
    }
    let ago = humantime::parse_duration(s)
        .map_err(|_| format!("'{s}' is neither an RFC 3339 time nor a duration ago like 2h"))?;
    Ok(time::OffsetDateTime::now_utc() - ago)
}

/// Stored text (ids, headers, bodies, reasons) as it may be printed on an operator's terminal: every control
/// character but newline and tab is shown escaped (`\u{1b}`), so a hostile payload cannot move the cursor,
/// recolour the screen or forge output lines.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_safe_escapes_control_characters_but_keeps_lines() {
        assert_eq!(terminal_safe("plain\nline\ttab"), "plain\nline\ttab");
        assert_eq!(
            terminal_safe("a\u{1b}[31mred\r\u{0}"),
            "a\\u{1b}[31mred\\u{d}\\u{0}"
        );
    }
}
