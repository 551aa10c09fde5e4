//! `hookline`, the operator command line.
//!
//! Exit codes are part of the interface: 0 success, 1 the operation ran and found a problem (an invalid
//! signature, something needing attention), 2 a usage error (clap's convention), 3 an operational failure
//! (database or broker unreachable, …).
//!
//! It must never: hold a rule of its own — each command calls the crate that owns the operation (ops,
//! payments, delivery, the sandbox for `sandbox`/`simulate` only), so the console and the CLI cannot disagree.

mod billing;
mod console;
mod destinations;
mod dlq;
mod ops;
mod outbound;
mod purge;
mod reconcile;
mod replay;
mod sandbox;
mod simulate;
mod status;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hookline_core::config::{Env, ProcessEnv};
use hookline_core::{Config, ConfigError};

/// The hookline operator command line.
#[derive(Parser, Debug)]
#[command(name = "hookline", version, about, propagate_version = true)]
pub struct Cli {
    /// Configuration file (TOML). Defaults to $HOOKLINE_CONFIG, then built-in defaults.
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create the database if it is missing and apply pending migrations. Safe to run repeatedly.
    Migrate,
    /// Check a webhook signature offline, exactly as the edge would, and say precisely why it fails.
    Verify(verify::VerifyArgs),
    /// Run the outbox relay on its own: publish committed-but-unpublished events to RabbitMQ until stopped
    /// (SIGTERM/Ctrl-C). Safe beside the edge's embedded relay and other relays (rows are claimed with
    /// FOR UPDATE SKIP LOCKED). `--once` sweeps the backlog once and exits.
    Relay {
        /// Sweep once and exit instead of running until stopped.
        #[arg(long)]
        once: bool,
    },
    /// Show the state of the pipeline; exits 1 when something needs attention (usable as a probe).
    Status(status::StatusArgs),
    /// Re-deliver stored events to the workers. A replay RE-DELIVERS: the worker's deduplication means an
    /// event whose effect was already applied changes nothing, and one never applied is applied once. No flag
    /// re-applies an applied effect.
    Replay(replay::ReplayArgs),
    /// Inspect and redrive dead letters.
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// Delete old raw events and their processed markers, in bounded batches. Never touches the ledger,
    /// payments, or events not yet processed.
    Purge(purge::PurgeArgs),
    /// Send realistic signed provider events to a running edge, as the provider would.
    Simulate(simulate::SimulateArgs),
    /// Run a local Stripe / Mercado Pago double (API, idempotency, signed webhooks to the edge, fault injection)
    /// for the configured stripe and mercadopago providers, until SIGTERM/SIGINT.
    Sandbox(sandbox::SandboxArgs),
    /// Compare the provider's record (its API) with what was stored, and store what never arrived.
    Reconcile(reconcile::ReconcileArgs),
    /// The operator web console: `serve` runs it in its own process; `hash-password` makes an operator's hash.
    #[command(subcommand)]
    Console(console::ConsoleCommand),
    /// Manage the subscriptions billed through hookline.
    #[command(subcommand)]
    Subscriptions(billing::SubscriptionsCommand),
    /// Billing runs (each cycle charged once, declines retried on a schedule) and what is behind.
    #[command(subcommand)]
    Billing(billing::BillingCommand),
    /// Request a refund of a payment intent (sent to the gateway by the dispatcher), under a required
    /// --idempotency-key: the same command run twice refunds once. Prints the refund id (re_hl_…).
    Refund(outbound::RefundArgs),
    /// Run the outbound dispatcher on its own (it also runs inside hookline-worker): send queued charges and
    /// refunds to the gateways, with the same idempotency key on every attempt, until SIGTERM/SIGINT.
    Dispatch(outbound::DispatchArgs),
    /// Outbound requests needing an operator: `resolve` records what the gateway shows for an unknown refund
    /// the lookup could not decide.
    #[command(subcommand)]
    Outbound(outbound::OutboundCommand),
    /// Domain events' HTTP destinations: list, status, add (generates the secret), rotate-secret, enable.
    #[command(subcommand)]
    Destinations(destinations::DestinationsCommand),
    /// Domain events (the facts hookline hands on): list, redeliver.
    #[command(subcommand)]
    Events(destinations::EventsCommand),
    /// Run the delivery of domain events on its own (it also runs inside hookline-worker): publish them to
    /// RabbitMQ `{prefix}.domain` and POST them to the destinations, until SIGTERM/SIGINT.
    Deliver(destinations::DeliverArgs),
}

/// The `service.name` of a command's traces: `hookline-{command}` (`hookline-dispatch`, `hookline-deliver`,
/// `hookline-replay`, …), so that a standalone dispatcher is told apart from the worker that embeds one.
fn service_name(command: &Command) -> &'static str {
    match command {
        Command::Relay { .. } => "hookline-relay",
        Command::Dispatch(_) => "hookline-dispatch",
        Command::Deliver(_) => "hookline-deliver",
        Command::Console(_) => "hookline-console",
        Command::Replay(_) => "hookline-replay",
        Command::Dlq(_) => "hookline-dlq",
        Command::Sandbox(_) => "hookline-sandbox",
        Command::Reconcile(_) => "hookline-reconcile",
        Command::Billing(_) => "hookline-billing",
        _ => "hookline",
    }
}

/// Parses the arguments, runs the command and maps the result to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Verify(args) = &cli.command {
        hookline_core::telemetry::init_tracing();
        return verify::run(args);
    }
    // Needs no configuration: a password hash is made before the config that will hold it exists.
    if let Command::Console(cmd) = &cli.command {
        if let Some(code) = console::run_without_config(cmd) {
            return code;
        }
    }
    // Core's sections, then every section the feature crates own: `hookline` composes them all, so a bad one
    // is refused here, before any command runs, as when core validated the whole file.
    let config = match Config::load(cli.config.as_deref())
        .and_then(|config| validate_sections(&config, &ProcessEnv).map(|()| config))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Dropped after the runtime (declared before it): the last spans are flushed outside any runtime.
    let _telemetry = hookline_core::telemetry::init(&config.telemetry, service_name(&cli.command));
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let config_path = cli.config.clone();
    let result = rt.block_on(async {
        match cli.command {
            Command::Verify(args) => Ok(verify::run(&args)),
            Command::Console(cmd) => console::run(&config, &cmd).await,
            Command::Migrate => {
                hookline_core::db::migrate(&config.database_url).await?;
                println!("database migrated");
                Ok(ExitCode::SUCCESS)
            }
            Command::Relay { once } => relay(&config, once).await,
            Command::Status(args) => status::run(&config, &args).await,
            Command::Replay(args) => replay::run(&config, &args).await,
            Command::Dlq(cmd) => dlq::run(&config, &cmd).await,
            Command::Purge(args) => purge::run(&config, &args).await,
            Command::Simulate(args) => simulate::run(&config, &args).await,
            Command::Sandbox(args) => sandbox::run(&config, config_path.as_deref(), &args).await,
            Command::Reconcile(args) => reconcile::run(&config, &args).await,
            Command::Subscriptions(cmd) => billing::subscriptions(&config, &cmd).await,
            Command::Billing(cmd) => billing::billing(&config, &cmd).await,
            Command::Refund(args) => outbound::refund(&config, &args).await,
            Command::Dispatch(args) => outbound::dispatch(&config, &args).await,
            Command::Outbound(cmd) => outbound::outbound(&config, &cmd).await,
            Command::Destinations(cmd) => {
                destinations::destinations(&config, config_path.as_deref(), &cmd).await
            }
            Command::Events(cmd) => destinations::events(&config, &cmd).await,
            Command::Deliver(args) => destinations::deliver(&config, &args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(3)
        }
    }
}

/// Validates every section a feature crate owns (core's are validated by [`Config::load`]), each by its owner,
/// in the order core used to check them: `[edge]` (`hookline-web`'s, which the listeners' sections are checked
/// against), `[api]`, `[console]`, `[relay]`, `[worker]`, `[retention]`,
/// `[[destinations]]`, `[delivery]`. `env` resolves `env:NAME` references. (`[sandbox]` is read by
/// `hookline sandbox` only, as before.)
pub(crate) fn validate_sections(config: &Config, env: &dyn Env) -> Result<(), ConfigError> {
    hookline_web::EdgeConfig::from_config(config)?;
    hookline_api::ApiConfig::from_config(config, env)?;
    hookline_console::ConsoleConfig::from_config(config, env)?;
    hookline_bus::RelayConfig::from_config(config)?;
    hookline_worker::WorkerConfig::from_config(config)?;
    hookline_ops::config::RetentionConfig::from_config(config)?;
    hookline_delivery::destinations_from_config(config, env)?;
    hookline_delivery::DeliveryConfig::from_config(config)?;
    hookline_gateways::config::DispatcherConfig::from_config(config, env)?;
    hookline_gateways::config::ReconcileConfig::from_config(config)?;
    hookline_billing::BillingConfig::from_config(config)?;
    Ok(())
}

async fn relay(config: &Config, once: bool) -> anyhow::Result<ExitCode> {
    use hookline_core::db::{self, PoolSettings};
    let pool = db::lazy_pool(&config.database_url, &PoolSettings::relay())?;
    let mut relay_config = hookline_bus::RelayConfig::from_config(config)?;
    if once {
        // An operator asking for a sweep wants everything unpublished, however fresh.
        relay_config.sweep_min_age = std::time::Duration::ZERO;
    }
    let relay = hookline_bus::Relay::new(
        pool,
        config.amqp_urls.clone(),
        ops::topology(config),
        relay_config,
        "hookline-relay",
    );
    if once {
        let mut relay = relay;
        let n = relay.sweep().await?;
        println!("published {n} events");
        return Ok(ExitCode::SUCCESS);
    }
    let liveness = hookline_core::supervisor::Liveness::new();
    let supervisor = hookline_core::supervisor::Supervisor::new(
        liveness.clone(),
        hookline_core::supervisor::RestartPolicy::default(),
    );
    relay
        .run(
            None,
            hookline_core::supervisor::shutdown_signal(),
            &supervisor,
        )
        .await;
    if liveness.is_alive() {
        Ok(ExitCode::SUCCESS)
    } else {
        // The relay kept failing: exit non-zero so the process supervisor restarts it.
        eprintln!("error: the relay kept failing and was stopped; see the log");
        Ok(ExitCode::from(3))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables the compose deployment sets for the sample configurations.
    const COMPOSE_ENV: [(&str, &str); 1] = [("HOOKLINE_API_KEY", "sk_local_development_api_key")];

    #[test]
    fn the_sample_configurations_are_valid_in_every_section() {
        // `hookline` composes every section, so it is where the whole sample files are checked (core checks
        // only its own sections since the others moved to their crates).
        for (name, text) in [
            (
                "deploy/hookline.toml",
                include_str!("../../../deploy/hookline.toml"),
            ),
            (
                "deploy/container/hookline.toml",
                include_str!("../../../deploy/container/hookline.toml"),
            ),
        ] {
            let checked = Config::from_toml_str(text, name, &COMPOSE_ENV)
                .and_then(|config| validate_sections(&config, &COMPOSE_ENV));
            assert!(checked.is_ok(), "{name}: {checked:?}");
        }
    }

    #[test]
    fn every_owned_section_is_validated_with_its_field_path() {
        const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$oGPB3w1RZHGHqBCLw06GGA$9TRg8+jFrd4mZMR+dWYoXgG0eNgIA02msXcGYuY56wU";
        let no_env: [(&str, &str); 0] = [];
        let check = |text: &str| {
            Config::from_toml_str(text, "t", &no_env)
                .and_then(|config| validate_sections(&config, &no_env))
        };
        assert!(check("").is_ok());
        for (text, field) in [
            (
                "[api]\nlisten = \"127.0.0.1:8081\"\nkeys = [\"env:UNSET_KEY\"]",
                "api.keys[0]:",
            ),
            (
                "[[console.operators]]\nname = \"alice\"\npassword_hash = \"plaintext\"",
                "console.operators[0].password_hash:",
            ),
            (
                "[relay]\nevents_per_message = 0",
                "relay.events_per_message:",
            ),
            ("[edge]\nlisten = \"nope\"", "edge.listen:"),
            ("[edge]\nbatch_max = 0", "edge.batch_max:"),
            ("[worker]\nprefetch = 0", "worker.prefetch:"),
            ("[retention]\nbatch_size = 0", "retention.batch_size:"),
            ("[[destinations]]\nname = \"a b\"", "destinations[0].name:"),
            ("[delivery]\ntimeout_ms = 0", "delivery.timeout_ms:"),
        ] {
            let message = check(text).expect_err(text).to_string();
            assert!(message.starts_with(field), "{text}: {message}");
        }
        let console = format!(
            "[console]\n[[console.operators]]\nname = \"alice\"\npassword_hash = \"{HASH}\"\n"
        );
        assert!(check(&console).is_ok());
    }

    fn parse(args: &[&str]) -> Command {
        match Cli::try_parse_from(std::iter::once("hookline").chain(args.iter().copied())) {
            Ok(cli) => cli.command,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    /// `--id` takes several values after one flag as well as one value per flag, on every command that has it.
    #[test]
    fn id_takes_several_values_after_one_flag_or_repeated() {
        for args in [
            &["replay", "--id", "1", "2", "--reason", "x"][..],
            &["replay", "--id", "1", "--id", "2", "--reason", "x"],
        ] {
            let Command::Replay(r) = parse(args) else {
                panic!("replay")
            };
            assert_eq!(r.ids, vec![1, 2], "{args:?}");
        }
        let Command::Dlq(dlq::DlqCommand::Redrive(r)) = parse(&[
            "dlq", "redrive", "--id", "3", "4", "--id", "5", "--reason", "x",
        ]) else {
            panic!("dlq redrive")
        };
        assert_eq!(r.ids, vec![3, 4, 5]);
        let Command::Dlq(dlq::DlqCommand::Discard(d)) =
            parse(&["dlq", "discard", "--id", "6", "7", "--reason", "x"])
        else {
            panic!("dlq discard")
        };
        assert_eq!(d.ids, vec![6, 7]);
        let Command::Events(destinations::EventsCommand::Redeliver(e)) = parse(&[
            "events",
            "redeliver",
            "--id",
            "evt_a",
            "evt_b",
            "--reason",
            "x",
        ]) else {
            panic!("events redeliver")
        };
        assert_eq!(e.ids, vec!["evt_a", "evt_b"]);
        // A value that is not an id is still refused, not taken as the next argument.
        assert!(Cli::try_parse_from(["hookline", "replay", "--id", "1", "x"]).is_err());
    }
}
