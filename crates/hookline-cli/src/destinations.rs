//! `hookline destinations …`, `hookline events redeliver` and `hookline deliver`: the operators' side of domain
//! events out.
//!
//! Destinations live in the configuration (`[[destinations]]`, with their secrets); `add` and `rotate-secret`
//! edit that file (comments and layout kept, the result validated before it is written, then written
//! atomically) and print the new secret once — it is never logged. The running worker picks the change up when
//! it restarts. `list` and `status` read the database (what is queued, failing, dead; the last success and
//! failure), not the process's memory.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use base64::Engine as _;
use clap::{Args, Subcommand};
use hookline_core::config::CONFIG_ENV;
use hookline_core::domain_events::EventType;
use hookline_core::input::redacted_url;
use hookline_core::Config;
use hookline_delivery::destinations::{self, RedeliverFilter};
use time::OffsetDateTime;

use crate::ops::{self, terminal_safe};

/// `hookline destinations …`.
#[derive(Subcommand, Debug)]
pub enum DestinationsCommand {
    /// The destinations and their subscriptions, as the database knows them.
    List {
        /// JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Backlog, failures, dead deliveries and last success per destination; exits 1 when one needs attention
    /// (dead deliveries, disabled, or a backlog older than --max-age).
    Status(StatusArgs),
    /// Add a destination to the configuration file with a newly generated secret (printed once).
    Add(AddArgs),
    /// Generate a new secret for a destination and put it first; the old one keeps signing too (two
    /// signatures per request) until `--drop-old`, so receivers can switch without losing a request.
    RotateSecret {
        /// Destination name
        name: String,
        /// Remove every secret but the newest instead of adding one (the end of a rotation)
        #[arg(long)]
        drop_old: bool,
    },
    /// Re-enable a destination disabled by a 410 Gone (or by `disable`): its waiting deliveries are sent.
    Enable {
        /// Destination name
        name: String,
    },
    /// Stop sending to a destination (its deliveries wait; nothing is dropped).
    Disable {
        /// Destination name
        name: String,
        /// Why (recorded)
        #[arg(long)]
        reason: String,
    },
}

/// Arguments of `hookline destinations status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Only this destination, with its latest attempts
    name: Option<String>,
    /// A pending delivery older than this needs attention
    #[arg(long, default_value = "15m", value_parser = ops::parse_duration)]
    max_age: std::time::Duration,
    /// Attempts shown for one destination
    #[arg(long, default_value_t = 10)]
    attempts: u16,
    /// JSON instead of text
    #[arg(long)]
    json: bool,
}

/// Arguments of `hookline destinations add`.
#[derive(Args, Debug)]
pub struct AddArgs {
    /// Name (A-Z, a-z, 0-9, '-', '_'; at most 64)
    name: String,
    /// http(s) URL the events are POSTed to
    #[arg(long)]
    url: String,
    /// Event types to send (repeat or comma-separate; '*' = all)
    #[arg(long, value_delimiter = ',', required = true)]
    events: Vec<String>,
    /// Print the TOML block instead of writing the configuration file
    #[arg(long)]
    print: bool,
}

/// `hookline events …`.
#[derive(Subcommand, Debug)]
pub enum EventsCommand {
    /// Send domain events again (dead, delivered, or never queued for a destination added later), audited.
    /// Receivers get the same webhook-id as before and deduplicate.
    Redeliver(RedeliverArgs),
    /// The latest domain events recorded.
    List {
        /// How many
        #[arg(long, default_value_t = 20)]
        limit: u16,
        /// Only this type
        #[arg(long = "type")]
        event_type: Option<String>,
    },
}

/// Arguments of `hookline events redeliver`.
#[derive(Args, Debug)]
pub struct RedeliverArgs {
    /// Only this destination (default: every destination subscribed to each event's type)
    #[arg(long)]
    destination: Option<String>,
    /// Only events of this type
    #[arg(long = "type")]
    event_type: Option<String>,
    /// Only events recorded since (RFC 3339, or a duration ago like 2h)
    #[arg(long, value_parser = ops::parse_instant)]
    since: Option<OffsetDateTime>,
    /// Only these events (evt_…): `--id evt_a evt_b` or `--id evt_a --id evt_b`
    #[arg(long = "id", num_args = 1..)]
    pub(crate) ids: Vec<String>,
    /// Why (recorded in the audit table)
    #[arg(long)]
    reason: Option<String>,
    /// Count what would be queued; change nothing
    #[arg(long)]
    dry_run: bool,
    /// Who runs it (default $SUDO_USER, then $USER)
    #[arg(long)]
    operator: Option<String>,
}

/// Arguments of `hookline deliver`.
#[derive(Args, Debug)]
pub struct DeliverArgs {}

/// `hookline destinations …`.
pub async fn destinations(
    config: &Config,
    config_path: Option<&Path>,
    cmd: &DestinationsCommand,
) -> anyhow::Result<ExitCode> {
    match cmd {
        DestinationsCommand::Add(args) => add(config_path, args),
        DestinationsCommand::RotateSecret { name, drop_old } => {
            rotate(config_path, name, *drop_old)
        }
        DestinationsCommand::List { json } => {
            let pool = ops::pool(config).await?;
            let configured = hookline_delivery::destinations_from_config(
                config,
                &hookline_core::config::ProcessEnv,
            )?;
            hookline_delivery::deliver::sync_destinations(&pool, &configured).await?;
            let all = destinations::status(&pool).await?;
            if *json {
                let rows: Vec<_> = all
                    .iter()
                    .map(|d| {
                        serde_json::json!({
                            "name": d.name, "url": redacted_url(&d.url), "events": d.events,
                            "disabled": d.disabled_at.is_some(), "removed": d.removed_at.is_some(),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!("{:<24} {:<10} {:<48} EVENTS", "NAME", "STATE", "URL");
                for d in &all {
                    println!(
                        "{:<24} {:<10} {:<48} {}",
                        d.name,
                        state(d),
                        redacted_url(&d.url),
                        d.events.join(",")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        DestinationsCommand::Status(args) => status(config, args).await,
        DestinationsCommand::Enable { name } => {
            let pool = ops::pool(config).await?;
            if destinations::set_disabled(&pool, name, None).await? {
                println!("destination {name} enabled");
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("error: no destination {}", terminal_safe(name));
                Ok(ExitCode::from(2))
            }
        }
        DestinationsCommand::Disable { name, reason } => {
            let pool = ops::pool(config).await?;
            if destinations::set_disabled(&pool, name, Some(reason)).await? {
                println!("destination {name} disabled");
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("error: no destination {}", terminal_safe(name));
                Ok(ExitCode::from(2))
            }
        }
    }
}

fn state(d: &destinations::Status) -> &'static str {
    if d.removed_at.is_some() {
        "removed"
    } else if d.disabled_at.is_some() {
        "disabled"
    } else {
        "active"
    }
}

async fn status(config: &Config, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let pool = ops::pool(config).await?;
    let (unpublished, oldest_unpublished) =
        hookline_core::domain_events::unpublished_backlog(&pool).await?;
    let all: Vec<_> = destinations::status(&pool)
        .await?
        .into_iter()
        .filter(|d| args.name.as_ref().is_none_or(|n| &d.name == n))
        .collect();
    if let Some(name) = &args.name {
        if all.is_empty() {
            eprintln!("error: no destination {}", terminal_safe(name));
            return Ok(ExitCode::from(2));
        }
    }
    let max_age = args.max_age.as_secs_f64();
    // A merchant's own endpoint (made through the API) failing or disabled is the merchant's to fix (it sees its
    // deliveries through the API): listed, but it does not make the operator's check fail.
    let needs_attention = |d: &destinations::Status| {
        d.removed_at.is_none()
            && d.client.is_none()
            && (d.dead > 0 || d.disabled_at.is_some() || d.oldest_pending_secs > max_age)
    };
    let attention = all.iter().any(needs_attention);
    if args.json {
        let rows: Vec<_> = all
            .iter()
            .map(|d| {
                serde_json::json!({
                    "name": d.name, "client": d.client, "state": state(d), "url": redacted_url(&d.url),
                    "pending": d.pending, "failing": d.failing, "dead": d.dead, "delivered": d.delivered,
                    "oldest_pending_secs": d.oldest_pending_secs,
                    "last_success_at": d.last_success_at.map(rfc3339),
                    "last_failure_at": d.last_failure_at.map(rfc3339),
                    "last_failure_status": d.last_failure_status,
                    "last_failure_error": d.last_failure_error,
                    "disabled_reason": d.disabled_reason,
                    "needs_attention": needs_attention(d),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "domain_relay": {"unpublished": unpublished, "oldest_unpublished_secs": oldest_unpublished},
                "destinations": rows,
            }))?
        );
    } else {
        println!(
            "domain relay (RabbitMQ {}.domain): {unpublished} unpublished, oldest {oldest_unpublished:.0}s",
            config.amqp.prefix
        );
        for d in &all {
            println!("\n{} [{}] {}", d.name, state(d), redacted_url(&d.url));
            if let Some(reason) = &d.disabled_reason {
                println!("  disabled: {}", terminal_safe(reason));
            }
            println!(
                "  pending {} (failing {}), oldest {:.0}s; dead {}; delivered {}",
                d.pending, d.failing, d.oldest_pending_secs, d.dead, d.delivered
            );
            println!(
                "  last success: {}",
                d.last_success_at
                    .map(rfc3339)
                    .unwrap_or_else(|| "never".into())
            );
            if let Some(at) = d.last_failure_at {
                println!(
                    "  last failure: {} {} {}",
                    rfc3339(at),
                    d.last_failure_status
                        .map(|s| format!("HTTP {s}"))
                        .unwrap_or_default(),
                    terminal_safe(d.last_failure_error.as_deref().unwrap_or(""))
                );
            }
            if needs_attention(d) {
                println!("  NEEDS ATTENTION");
            }
        }
        if let Some(name) = &args.name {
            println!("\nlatest attempts:");
            for a in destinations::recent_attempts(&pool, name, i64::from(args.attempts)).await? {
                println!(
                    "  {} {} #{} {:<9} {:>4} {:>6}ms {}",
                    rfc3339(a.at),
                    a.event_id,
                    a.attempt,
                    a.outcome,
                    a.http_status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "-".into()),
                    a.latency_ms,
                    terminal_safe(a.error.as_deref().or(a.response.as_deref()).unwrap_or(""))
                        .chars()
                        .take(120)
                        .collect::<String>()
                );
            }
        }
    }
    Ok(if attention {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// `hookline events …`.
pub async fn events(config: &Config, cmd: &EventsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        EventsCommand::Redeliver(args) => redeliver(config, args).await,
        EventsCommand::List { limit, event_type } => {
            let pool = ops::pool(config).await?;
            let rows =
                hookline_core::domain_events::list(&pool, event_type.as_deref(), u32::from(*limit))
                    .await
                    .context("list domain events")?;
            println!(
                "{:<8} {:<36} {:<26} {:<26} PUBLISHED",
                "SEQ", "ID", "TYPE", "CREATED"
            );
            for row in rows {
                println!(
                    "{:<8} {:<36} {:<26} {:<26} {}",
                    row.seq,
                    row.id,
                    row.ty,
                    rfc3339(row.created_at),
                    // Since the outbox became its own table the time of the confirm is not kept: whether it
                    // came ("yes"), or the fact still waits in the outbox ("-").
                    if row.published { "yes" } else { "-" }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn redeliver(config: &Config, args: &RedeliverArgs) -> anyhow::Result<ExitCode> {
    if let Some(t) = &args.event_type {
        if EventType::parse(t).is_none() {
            eprintln!("error: --type {} is not an event type", terminal_safe(t));
            return Ok(ExitCode::from(2));
        }
    }
    if let Some(id) = args.ids.iter().find(|id| !is_fact_id(id)) {
        eprintln!(
            "error: --id {} is not an event id (evt_ and 32 hex digits)",
            terminal_safe(id)
        );
        return Ok(ExitCode::from(2));
    }
    if args.destination.is_none()
        && args.event_type.is_none()
        && args.since.is_none()
        && args.ids.is_empty()
    {
        eprintln!("error: say what to redeliver: --destination, --type, --since or --id");
        return Ok(ExitCode::from(2));
    }
    let filter = RedeliverFilter {
        destination: args.destination.clone(),
        event_type: args.event_type.clone(),
        since: args.since,
        ids: args.ids.clone(),
    };
    let pool = ops::pool(config).await?;
    let configured =
        hookline_delivery::destinations_from_config(config, &hookline_core::config::ProcessEnv)?;
    hookline_delivery::deliver::sync_destinations(&pool, &configured).await?;
    if let Some(d) = &args.destination {
        if destinations::get(&pool, d).await?.is_none() {
            eprintln!("error: no destination {}", terminal_safe(d));
            return Ok(ExitCode::from(2));
        }
    }
    if args.dry_run {
        let n = destinations::redeliver_count(&pool, &filter).await?;
        println!("would queue up to {n} deliveries (dry run; nothing changed)");
        return Ok(ExitCode::SUCCESS);
    }
    let Some(reason) = args.reason.as_deref().filter(|r| !r.trim().is_empty()) else {
        eprintln!("error: --reason is required (it is recorded with the redelivery)");
        return Ok(ExitCode::from(2));
    };
    let operator = ops::operator(args.operator.as_deref());
    let mut tx = pool.begin().await?;
    let (run, queued) = destinations::redeliver(&mut tx, &filter, &operator, reason).await?;
    tx.commit().await?;
    println!("queued {queued} deliveries (audit run {run})");
    Ok(ExitCode::SUCCESS)
}

fn is_fact_id(id: &str) -> bool {
    id.len() == 36
        && id.starts_with("evt_")
        && id[4..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `hookline deliver`: the domain relay and the HTTP delivery on their own, until SIGTERM/SIGINT.
pub async fn deliver(config: &Config, _args: &DeliverArgs) -> anyhow::Result<ExitCode> {
    use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
    let pool = ops::pool(config).await?;
    let liveness = Liveness::new();
    let supervisor = Supervisor::new(liveness.clone(), RestartPolicy::default());
    let cancel = hookline_core::supervisor::shutdown_signal();
    let tasks = hookline_delivery::spawn(config, pool, &supervisor, &cancel)?;
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = liveness.fatal() => cancel.cancel(),
    }
    for t in tasks {
        t.await.ok();
    }
    if liveness.is_alive() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("error: delivery kept failing and was stopped; see the log");
        Ok(ExitCode::from(3))
    }
}

/// A new Standard Webhooks secret: `whsec_` + base64 of 32 random bytes.
fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The configuration file `add` and `rotate-secret` edit: `--config`, else `$HOOKLINE_CONFIG`.
fn config_file(explicit: Option<&Path>) -> Option<PathBuf> {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from))
}

fn add(config_path: Option<&Path>, args: &AddArgs) -> anyhow::Result<ExitCode> {
    let secret = new_secret();
    let mut table = toml_edit::Table::new();
    table["name"] = toml_edit::value(args.name.as_str());
    table["url"] = toml_edit::value(args.url.as_str());
    let mut secrets = toml_edit::Array::new();
    secrets.push(secret.as_str());
    table["secrets"] = toml_edit::value(secrets);
    let mut events = toml_edit::Array::new();
    for e in &args.events {
        events.push(e.trim());
    }
    table["events"] = toml_edit::value(events);
    let path = config_file(config_path);
    // With a file, `--print` still reads it: the name is checked against its destinations and the result
    // validated as the services will read it; only the writing is left to the operator.
    let mut doc: toml_edit::DocumentMut = match &path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            text.parse()
                .with_context(|| format!("{} is not valid TOML", p.display()))?
        }
        None => toml_edit::DocumentMut::new(),
    };
    let list = doc
        .entry("destinations")
        .or_insert(toml_edit::Item::ArrayOfTables(
            toml_edit::ArrayOfTables::new(),
        ));
    let Some(list) = list.as_array_of_tables_mut() else {
        eprintln!(
            "error: `destinations` in the configuration is not a list of [[destinations]] tables"
        );
        return Ok(ExitCode::from(2));
    };
    if list
        .iter()
        .any(|t| t.get("name").and_then(|v| v.as_str()) == Some(args.name.as_str()))
    {
        eprintln!(
            "error: destination {} already exists (use rotate-secret for a new secret)",
            terminal_safe(&args.name)
        );
        return Ok(ExitCode::from(2));
    }
    list.push(table.clone());
    let Some(new_text) = validated(&doc) else {
        return Ok(ExitCode::from(2));
    };
    match (&path, args.print) {
        (Some(p), false) => {
            write_atomically(p, &new_text)?;
            eprintln!(
                "added destination {} to {}; restart the worker (or `hookline deliver`) to start sending",
                args.name,
                p.display()
            );
        }
        (Some(p), true) => {
            eprintln!(
                "--print: {} left unchanged; add this block to it, then restart the worker:",
                p.display()
            );
            println!("{}", destination_block(table));
        }
        (None, _) => {
            eprintln!(
                "no configuration file given (--config or ${CONFIG_ENV}): add this block to it:"
            );
            println!("{}", destination_block(table));
        }
    }
    eprintln!("the destination's signing secret (shown once; give it to the receiver):");
    println!("{secret}");
    Ok(ExitCode::SUCCESS)
}

/// The `[[destinations]]` block of one destination alone, as TOML to paste into a configuration file.
fn destination_block(table: toml_edit::Table) -> String {
    let mut list = toml_edit::ArrayOfTables::new();
    list.push(table);
    let mut doc = toml_edit::DocumentMut::new();
    doc.insert("destinations", toml_edit::Item::ArrayOfTables(list));
    doc.to_string().trim_end().to_string()
}

fn rotate(config_path: Option<&Path>, name: &str, drop_old: bool) -> anyhow::Result<ExitCode> {
    let Some(path) = config_file(config_path) else {
        eprintln!("error: give the configuration file (--config or ${CONFIG_ENV}) whose destination to rotate");
        return Ok(ExitCode::from(2));
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", path.display()))?;
    let Some(table) = doc
        .get_mut("destinations")
        .and_then(|d| d.as_array_of_tables_mut())
        .and_then(|list| {
            list.iter_mut()
                .find(|t| t.get("name").and_then(|v| v.as_str()) == Some(name))
        })
    else {
        eprintln!(
            "error: no destination {} in {}",
            terminal_safe(name),
            path.display()
        );
        return Ok(ExitCode::from(2));
    };
    let Some(secrets) = table.get_mut("secrets").and_then(|s| s.as_array_mut()) else {
        eprintln!(
            "error: destination {} has no secrets list",
            terminal_safe(name)
        );
        return Ok(ExitCode::from(2));
    };
    let secret = if drop_old {
        while secrets.len() > 1 {
            secrets.remove(secrets.len() - 1);
        }
        None
    } else {
        if secrets.len() >= hookline_delivery::MAX_SECRETS {
            eprintln!(
                "error: {} secrets are active already; finish the rotation first (--drop-old)",
                secrets.len()
            );
            return Ok(ExitCode::from(2));
        }
        let s = new_secret();
        secrets.insert(0, s.as_str());
        Some(s)
    };
    let Some(new_text) = validated(&doc) else {
        return Ok(ExitCode::from(2));
    };
    write_atomically(&path, &new_text)?;
    match secret {
        Some(s) => {
            eprintln!(
                "new secret added first for {name} in {}; both sign each request until `rotate-secret {name} --drop-old`. Restart the worker to use it. The new secret (shown once):",
                path.display()
            );
            println!("{s}");
        }
        None => eprintln!("kept only the newest secret of {name}; restart the worker to apply"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The edited document as text, validated as the services will read it (an error is printed; it never contains a
/// secret).
fn validated(doc: &toml_edit::DocumentMut) -> Option<String> {
    let text = doc.to_string();
    let env = hookline_core::config::ProcessEnv;
    // Every section, core's and the owners', exactly as `hookline` checks a file at start-up.
    match Config::from_toml_str(&text, "the edited configuration", &env)
        .and_then(|config| crate::validate_sections(&config, &env))
    {
        Ok(()) => Some(text),
        Err(e) => {
            eprintln!("error: {e}");
            None
        }
    }
}

/// Writes `text` to `path` through a temporary file in the same directory and a rename, keeping the file's
/// permissions: a crash leaves the old or the new file, never half of one.
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.hookline-edit",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("config")
    ));
    let perms = std::fs::metadata(path).map(|m| m.permissions()).ok();
    {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    if let Some(p) = perms {
        std::fs::set_permissions(&tmp, p).ok();
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}
