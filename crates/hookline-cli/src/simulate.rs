//! `hookline simulate`: sends realistic, correctly signed provider events to a running edge, exactly as the
//! provider would, to demonstrate the pipeline, smoke-test a deployment or put some load on it.
//!
//! The provider is a configured one (`[providers.NAME]`): its scheme decides the payloads and headers, its first
//! secret signs them, and requests go to `POST {url}/webhooks/{NAME}`. The payloads are the shapes the payments
//! worker understands (Stripe, Pagar.me), so a run ends in payments, refunds, disputes, subscription charges and
//! ledger postings that can be checked.
//!
//! - Every id (events, payments, refunds, disputes, invoices, transactions, deliveries) carries a per-run id
//!   taken from the clock, so repeated runs never collide. `--seed` fixes the random choices (amounts, which
//!   events are re-sent, the order), not the ids.
//! - `--duplicates F` re-sends that fraction of the events: the same bytes, re-signed with a fresh timestamp
//!   where the scheme signs one, as a provider's retry is. The edge must answer them `200` with
//!   `"duplicate": true`, and the pipeline must apply each event once.
//! - Exit codes: 0 every request got 200, 1 some did not, 2 usage error (unknown provider or scenario), 3 the
//!   edge is unreachable.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Args;
use futures::StreamExt;
use hookline_core::{Config, ProviderConfig};
use hookline_signature::{sign, Scheme};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

/// Arguments of `hookline simulate`.
#[derive(Args, Debug)]
#[command(after_help = scenario_help())]
pub struct SimulateArgs {
    /// Configured provider to impersonate ([providers.NAME]): its scheme and first secret sign the requests,
    /// which go to POST {URL}/webhooks/{PROVIDER}.
    #[arg(value_name = "PROVIDER")]
    pub provider: String,
    /// What to send; the valid scenarios depend on the provider's scheme (listed below).
    #[arg(value_name = "SCENARIO")]
    pub scenario: String,
    /// How many payments (Pagar.me transactions, subscription cycles, notifications) to simulate; a scenario
    /// may send several events for each.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub count: u32,
    /// Fraction (0.0-1.0) of extra re-sends of generated events: the exact same bytes, re-signed with a fresh
    /// timestamp where the scheme signs one, as a provider's retry. The edge must answer them 200 duplicate.
    #[arg(long, value_name = "F", default_value_t = 0.0, value_parser = parse_fraction)]
    pub duplicates: f64,
    /// Send everything (re-sends included) in random order; the pipeline's result must not depend on it.
    #[arg(long)]
    pub shuffle: bool,
    /// Requests in flight at once.
    #[arg(long, short = 'j', value_name = "C", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,
    /// Base URL of the edge [default: http://{edge.listen} from the configuration].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Seed of the random choices (amounts, re-sent events, order) for a reproducible run; ids still carry a
    /// per-run id [default: from the clock].
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("{value} is not between 0.0 and 1.0"));
    }
    Ok(value)
}

/// Runs `hookline simulate`: generates the scenario's events, sends them and prints a summary.
pub async fn run(config: &Config, args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let Some(provider) = config.providers.get(&args.provider) else {
        let names: Vec<&str> = config.providers.keys().map(String::as_str).collect();
        eprintln!(
            "error: provider '{}' is not configured (configured: {})",
            args.provider,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
        return Ok(ExitCode::from(2));
    };
    let scheme = provider.scheme;
    let Some(scenario) = scenarios(scheme).iter().find(|s| s.name == args.scenario) else {
        let valid: Vec<String> = scenarios(scheme)
            .iter()
            .map(|s| format!("  {:<18} {}", s.name, s.about))
            .collect();
        eprintln!(
            "error: unknown scenario '{}' for provider '{}' (scheme {scheme}); valid scenarios:\n{}",
            args.scenario,
            args.provider,
            valid.join("\n")
        );
        return Ok(ExitCode::from(2));
    };
    let base = match base_url(config, args.url.as_deref()) {
        Ok(base) => base,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let endpoint = format!("{base}/webhooks/{}", args.provider);

    let seed = args.seed.unwrap_or_else(clock_seed);
    let mut gen = Gen::new(seed, provider);
    let events = (scenario.generate)(&mut gen, args.count as usize)?;
    let plan = plan(&mut gen.rng, events.len(), args.duplicates, args.shuffle);

    let secret = provider
        .secret_bytes()
        .into_iter()
        .next()
        .context("the provider has no secret")?
        .to_vec();
    // A secret the scheme cannot use is a configuration problem: say so before sending anything.
    if let Some(first) = events.first() {
        if let Err(e) = signed_request(scheme, &secret, first) {
            eprintln!("error: cannot sign for provider '{}': {e:#}", args.provider);
            return Ok(ExitCode::from(2));
        }
    }

    let concurrency = args.concurrency as usize;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .user_agent(user_agent(scheme))
        .build()
        .context("cannot build the HTTP client")?;
    if let Err(e) = client
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        eprintln!(
            "error: the edge at {base} is unreachable: {:#}",
            anyhow::Error::new(e)
        );
        return Ok(ExitCode::from(3));
    }

    eprintln!(
        "simulate: {} {} -> {endpoint}: {} events, {} requests, concurrency {concurrency}, seed {seed}, run {}",
        args.provider,
        scenario.name,
        events.len(),
        plan.len(),
        gen.run
    );
    let bar = if std::io::stderr().is_terminal() {
        let bar =
            ProgressBar::with_draw_target(Some(plan.len() as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {per_sec} {msg}",
        ) {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };

    let started = Instant::now();
    let mut stats = Stats::default();
    let mut replies = futures::stream::iter(plan.iter().copied())
        .map(|i| send(&client, &endpoint, scheme, &secret, &events[i]))
        .buffer_unordered(concurrency);
    while let Some(reply) = replies.next().await {
        stats.record(reply);
        bar.inc(1);
        if stats.failures() > 0 {
            bar.set_message(format!("{} failed", stats.failures()));
        }
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();

    print!("{}", stats.summary(events.len(), plan.len(), elapsed));
    if stats.transport_errors == plan.len() {
        eprintln!("error: no request reached the edge at {base}");
        return Ok(ExitCode::from(3));
    }
    Ok(if stats.all_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

// -----------------------------------------------------------------------------------------------------------
// Scenarios
// -----------------------------------------------------------------------------------------------------------

/// One scenario: a name, a one-line description and its generator (`count` business objects → events).
struct Scenario {
    name: &'static str,
    about: &'static str,
    generate: fn(&mut Gen, usize) -> anyhow::Result<Vec<Event>>,
}

const STRIPE: &[Scenario] = &[
    Scenario {
        name: "payment-succeeded",
        about: "payment_intent.succeeded for N distinct payments",
        generate: stripe_payment_succeeded,
    },
    Scenario {
        name: "payment-lifecycle",
        about: "payment_intent.created, .processing and .succeeded per payment",
        generate: stripe_payment_lifecycle,
    },
    Scenario {
        name: "refund",
        about: "payment_intent.succeeded plus a partial refund.created (own re_ id) per payment",
        generate: stripe_refund,
    },
    Scenario {
        name: "dispute",
        about: "payment_intent.succeeded, charge.dispute.created, charge.dispute.closed (lost)",
        generate: stripe_dispute,
    },
    Scenario {
        name: "invoice",
        about: "invoice.paid per subscription cycle, each also sent as invoice.payment_succeeded",
        generate: stripe_invoice,
    },
];

const PAGARME: &[Scenario] = &[
    Scenario {
        name: "paid",
        about: "transaction_status_changed postbacks with current_status=paid",
        generate: pagarme_paid,
    },
    Scenario {
        name: "refunded",
        about: "a paid postback, then a refunded one, per transaction",
        generate: pagarme_refunded,
    },
];

const MERCADOPAGO: &[Scenario] = &[Scenario {
    name: "payment",
    about: "payment notifications (data.id in the query, x-signature and x-request-id)",
    generate: mercadopago_payment,
}];

const PING: &[Scenario] = &[Scenario {
    name: "ping",
    about: "generic events the payments worker ignores",
    generate: generic_ping,
}];

const ADYEN: &[Scenario] = &[Scenario {
    name: "authorisation",
    about: "AUTHORISATION notifications, HMAC inside the body (the payments worker ignores them)",
    generate: adyen_authorisation,
}];

fn scenarios(scheme: Scheme) -> &'static [Scenario] {
    match scheme {
        Scheme::Stripe => STRIPE,
        Scheme::Pagarme => PAGARME,
        Scheme::MercadoPago => MERCADOPAGO,
        Scheme::Github | Scheme::Shopify | Scheme::StandardWebhooks | Scheme::Svix => PING,
        Scheme::Adyen => ADYEN,
    }
}

/// The scenario list shown after `--help`, built from the same table the command uses.
fn scenario_help() -> String {
    // Schemes sharing a table are listed together; a table is known by its first scenario's name.
    let mut groups: Vec<(Vec<&str>, &'static [Scenario])> = Vec::new();
    for scheme in Scheme::ALL {
        let list = scenarios(scheme);
        match groups.iter_mut().find(|(_, l)| l[0].name == list[0].name) {
            Some((schemes, _)) => schemes.push(scheme.as_str()),
            None => groups.push((vec![scheme.as_str()], list)),
        }
    }
    let mut out = String::from("Scenarios, by the provider's scheme:\n");
    for (schemes, list) in groups {
        let _ = writeln!(out, "  {}:", schemes.join(", "));
        for s in list {
            let _ = writeln!(out, "    {:<18} {}", s.name, s.about);
        }
    }
    out.push_str(
        "\nExit status: 0 every request got 200, 1 some did not, 2 usage error, 3 edge unreachable.",
    );
    out
}

/// One generated provider event: the bytes to send and what the scheme's headers need besides them.
struct Event {
    /// The event type (Stripe `type`, GitHub `X-GitHub-Event`, Shopify topic, …).
    kind: String,
    /// The exact body; re-sends repeat these bytes.
    body: Vec<u8>,
    /// The delivery id header where the scheme has one (GitHub, Shopify, Standard Webhooks, Svix, Mercado Pago's
    /// `x-request-id`); a retry repeats it.
    delivery_id: String,
    /// Mercado Pago: the notified resource id, sent (and signed) as the query's `data.id`.
    data_id: Option<String>,
}

impl Event {
    fn json(kind: impl Into<String>, body: &Value, delivery_id: String) -> Event {
        Event {
            kind: kind.into(),
            body: body.to_string().into_bytes(),
            delivery_id,
            data_id: None,
        }
    }
}

/// Generation context: the run id that makes ids unique, the random source, the clock at the start.
struct Gen {
    /// Lower-case base-36 run id, part of every string id.
    run: String,
    /// Numeric run id, part of numeric-looking ids (Pagar.me, Mercado Pago).
    run_num: u64,
    rng: Rng,
    now: i64,
    /// Sequence of Stripe event ids within the run.
    seq: u64,
    /// The simulated provider's name and scheme (generic generators branch on the scheme).
    provider: String,
    scheme: Scheme,
    /// Its first secret (Adyen signs inside the body, at generation time).
    secret: Vec<u8>,
}

impl Gen {
    fn new(seed: u64, provider: &ProviderConfig) -> Gen {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        // The pid separates runs started in the same microsecond.
        let run_num = (micros % 100_000_000_000_000) * 100 + u64::from(std::process::id() % 100);
        Gen {
            run: base36(run_num),
            run_num,
            rng: Rng::new(seed),
            now: (micros / 1_000_000) as i64,
            seq: 0,
            provider: provider.name.clone(),
            scheme: provider.scheme,
            secret: provider
                .secret_bytes()
                .first()
                .map(|s| s.to_vec())
                .unwrap_or_default(),
        }
    }

    /// A Stripe-style id: `{prefix}_{run}{n:06}`.
    fn id(&self, prefix: &str, n: usize) -> String {
        format!("{prefix}_{}{n:06}", self.run)
    }

    /// A fresh event id.
    fn event_id(&mut self) -> String {
        self.seq += 1;
        format!("evt_{}{:07}", self.run, self.seq)
    }

    /// A numeric id unique per run: `{run_num}{n:07}` (as Pagar.me and Mercado Pago ids are numbers).
    fn numeric_id(&self, n: usize) -> String {
        format!("{}{n:07}", self.run_num)
    }

    /// A realistic amount in centavos (R$ 9,90 to R$ 2.499,90, ending in 90).
    fn amount(&mut self) -> i64 {
        self.rng.range(9, 2_499) * 100 + 90
    }
}

const FIRST_NAMES: &[&str] = &[
    "Ana", "Bruno", "Carla", "Diego", "Eduarda", "Felipe", "Gabriela", "Henrique", "Isabela",
    "João", "Larissa", "Marcos", "Natália", "Otávio", "Paula", "Rafael",
];
const LAST_NAMES: &[&str] = &[
    "Silva", "Santos", "Oliveira", "Souza", "Lima", "Pereira", "Costa", "Ferreira", "Almeida",
    "Ribeiro",
];
const STORES: &[&str] = &[
    "loja-paulista",
    "loja-savassi",
    "loja-moinhos",
    "e-commerce",
];
const BRANDS: &[&str] = &["visa", "mastercard", "elo", "amex"];

/// A simulated customer payment, the facts shared by all events about it.
struct Payment {
    n: usize,
    pi: String,
    charge: String,
    customer: String,
    payment_method: String,
    amount: i64,
    created: i64,
    name: String,
    email: String,
    order: String,
    store: &'static str,
    brand: &'static str,
    last4: String,
}

impl Payment {
    fn new(g: &mut Gen, n: usize) -> Payment {
        let first = *g.rng.pick(FIRST_NAMES);
        let last = *g.rng.pick(LAST_NAMES);
        let email_user: String = format!("{first}.{last}")
            .to_lowercase()
            .chars()
            .map(|c| match c {
                'ã' | 'á' => 'a',
                'é' => 'e',
                'ô' | 'ó' => 'o',
                other => other,
            })
            .collect();
        Payment {
            n,
            pi: g.id("pi", n),
            charge: g.id("ch", n),
            customer: g.id("cus", n),
            payment_method: g.id("pm", n),
            amount: g.amount(),
            created: g.now - g.rng.range(60, 3_600),
            name: format!("{first} {last}"),
            email: format!("{email_user}{}@example.com.br", g.rng.range(1, 99)),
            order: format!("PED-{}-{n:06}", g.run.to_uppercase()),
            store: STORES[g.rng.index(STORES.len())],
            brand: BRANDS[g.rng.index(BRANDS.len())],
            last4: format!("{:04}", g.rng.range(0, 9_999)),
        }
    }

    fn metadata(&self, g: &Gen) -> Value {
        json!({
            "order_id": self.order,
            "store": self.store,
            "customer_name": self.name,
            "channel": "checkout-web",
            "simulated_by": "hookline simulate",
            "simulate_run": g.run,
        })
    }

    /// A Stripe PaymentIntent object in `status` (created, processing, succeeded).
    fn payment_intent(&self, g: &Gen, status: &str) -> Value {
        let succeeded = status == "succeeded";
        let object_status = match status {
            "created" => "requires_payment_method",
            other => other,
        };
        json!({
            "id": self.pi,
            "object": "payment_intent",
            "amount": self.amount,
            "amount_capturable": 0,
            "amount_details": { "tip": {} },
            "amount_received": if succeeded { self.amount } else { 0 },
            "application": null,
            "application_fee_amount": null,
            "automatic_payment_methods": null,
            "canceled_at": null,
            "cancellation_reason": null,
            "capture_method": "automatic",
            "client_secret": format!("{}_secret_{}", self.pi, g.run),
            "confirmation_method": "automatic",
            "created": self.created,
            "currency": "brl",
            "customer": self.customer,
            "description": format!("Pedido {} - {}", self.order, self.store),
            "last_payment_error": null,
            "latest_charge": if status == "created" { Value::Null } else { json!(self.charge) },
            "livemode": false,
            "metadata": self.metadata(g),
            "next_action": null,
            "on_behalf_of": null,
            "payment_method": if status == "created" { Value::Null } else { json!(self.payment_method) },
            "payment_method_options": { "card": { "installments": null, "request_three_d_secure": "automatic" } },
            "payment_method_types": ["card"],
            "receipt_email": self.email,
            "review": null,
            "setup_future_usage": null,
            "shipping": null,
            "statement_descriptor": "HOOKLINE",
            "statement_descriptor_suffix": self.brand.to_uppercase(),
            "status": object_status,
            "transfer_data": null,
            "transfer_group": null,
        })
    }

    fn refund(&self, g: &mut Gen) -> Value {
        // A partial refund: 10 % to 90 % of the payment, at least one centavo.
        let amount = (self.amount * g.rng.range(10, 90) / 100).max(1);
        json!({
            "id": g.id("re", self.n),
            "object": "refund",
            "amount": amount,
            "balance_transaction": g.id("txn_re", self.n),
            "charge": self.charge,
            "created": g.now,
            "currency": "brl",
            "destination_details": { "card": { "reference_status": "pending", "type": "refund" }, "type": "card" },
            "metadata": { "order_id": self.order, "reason_detail": "item devolvido", "simulate_run": g.run },
            "payment_intent": self.pi,
            "reason": "requested_by_customer",
            "receipt_number": null,
            "source_transfer_reversal": null,
            "status": "succeeded",
            "transfer_reversal": null,
        })
    }

    fn dispute(&self, g: &Gen, status: &str) -> Value {
        json!({
            "id": g.id("dp", self.n),
            "object": "dispute",
            "amount": self.amount,
            "balance_transactions": [],
            "charge": self.charge,
            "created": g.now,
            "currency": "brl",
            "evidence": { "customer_email_address": self.email, "customer_name": self.name },
            "evidence_details": { "due_by": g.now + 7 * 86_400, "has_evidence": false, "past_due": false, "submission_count": 0 },
            "is_charge_refundable": false,
            "livemode": false,
            "metadata": { "order_id": self.order, "simulate_run": g.run },
            "payment_intent": self.pi,
            "payment_method_details": { "card": { "brand": self.brand, "network_reason_code": "10.4" }, "type": "card" },
            "reason": "fraudulent",
            "status": status,
        })
    }
}

/// A Stripe event envelope around `object`.
fn stripe_event(g: &mut Gen, kind: &str, object: Value) -> Event {
    let id = g.event_id();
    let body = json!({
        "id": id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": g.now,
        "data": { "object": object },
        "livemode": false,
        "pending_webhooks": 1,
        "request": { "id": format!("req_{}", g.rng.alnum(14)), "idempotency_key": g.rng.uuid() },
        "type": kind,
    });
    Event::json(kind, &body, id)
}

fn stripe_payment_succeeded(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    Ok((0..count)
        .map(|n| {
            let p = Payment::new(g, n);
            let object = p.payment_intent(g, "succeeded");
            stripe_event(g, "payment_intent.succeeded", object)
        })
        .collect())
}

fn stripe_payment_lifecycle(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::with_capacity(count * 3);
    for n in 0..count {
        let p = Payment::new(g, n);
        for status in ["created", "processing", "succeeded"] {
            let object = p.payment_intent(g, status);
            events.push(stripe_event(g, &format!("payment_intent.{status}"), object));
        }
    }
    Ok(events)
}

fn stripe_refund(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::with_capacity(count * 2);
    for n in 0..count {
        let p = Payment::new(g, n);
        let object = p.payment_intent(g, "succeeded");
        events.push(stripe_event(g, "payment_intent.succeeded", object));
        let refund = p.refund(g);
        events.push(stripe_event(g, "refund.created", refund));
    }
    Ok(events)
}

fn stripe_dispute(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::with_capacity(count * 3);
    for n in 0..count {
        let p = Payment::new(g, n);
        let object = p.payment_intent(g, "succeeded");
        events.push(stripe_event(g, "payment_intent.succeeded", object));
        let created = p.dispute(g, "needs_response");
        events.push(stripe_event(g, "charge.dispute.created", created));
        let closed = p.dispute(g, "lost");
        events.push(stripe_event(g, "charge.dispute.closed", closed));
    }
    Ok(events)
}

/// Plans of the simulated subscriptions, in centavos per month.
const PLANS: &[(&str, i64)] = &[
    ("Plano Básico", 2_990),
    ("Plano Plus", 4_990),
    ("Plano Pro", 9_990),
    ("Plano Empresa", 29_990),
];
/// Billing cycles per simulated subscription: `count` cycles are spread over `count / 3` subscriptions.
const CYCLES_PER_SUBSCRIPTION: usize = 3;
const MONTH: i64 = 30 * 86_400;

fn stripe_invoice(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::with_capacity(count * 2);
    // The subscriptions started a few months ago, on a whole hour.
    let anchor = (g.now - (CYCLES_PER_SUBSCRIPTION as i64 + 1) * MONTH) / 3_600 * 3_600;
    for n in 0..count {
        let sub_n = n / CYCLES_PER_SUBSCRIPTION;
        let cycle = (n % CYCLES_PER_SUBSCRIPTION) as i64;
        let (plan, price) = PLANS[sub_n % PLANS.len()];
        // A subscription invoice's period looks back one period; the billed cycle starts at `period_end`.
        let period_end = anchor + cycle * MONTH;
        let period_start = if cycle == 0 {
            period_end
        } else {
            period_end - MONTH
        };
        let subscription = g.id("sub", sub_n);
        let invoice = g.id("in", n);
        let object = json!({
            "id": invoice,
            "object": "invoice",
            "account_country": "BR",
            "amount_due": price,
            "amount_paid": price,
            "amount_remaining": 0,
            "attempt_count": 1,
            "attempted": true,
            "billing_reason": if cycle == 0 { "subscription_create" } else { "subscription_cycle" },
            "collection_method": "charge_automatically",
            "created": period_end,
            "currency": "brl",
            "customer": g.id("cus", sub_n),
            "customer_email": format!("assinante{sub_n}@example.com.br"),
            "hosted_invoice_url": format!("https://invoice.stripe.com/i/acct_sim/{invoice}"),
            "lines": { "object": "list", "has_more": false, "total_count": 1, "data": [{
                "id": g.id("il", n),
                "object": "line_item",
                "amount": price,
                "currency": "brl",
                "description": format!("1 × {plan} (at R$ {},{:02} / month)", price / 100, price % 100),
                "period": { "start": period_end, "end": period_end + MONTH },
                "quantity": 1,
            }]},
            "livemode": false,
            "metadata": { "plan": plan, "simulate_run": g.run },
            "number": format!("{}-{:04}", g.run.to_uppercase(), n + 1),
            "paid": true,
            "period_end": period_end,
            "period_start": period_start,
            "status": "paid",
            "subscription": subscription,
            "subtotal": price,
            "total": price,
        });
        // The same cycle reported twice, under two event ids: the business key (subscription, cycle) is what
        // charges once.
        events.push(stripe_event(g, "invoice.paid", object.clone()));
        events.push(stripe_event(g, "invoice.payment_succeeded", object));
    }
    Ok(events)
}

/// A Pagar.me v4 transaction.
struct Transaction {
    id: String,
    amount: i64,
    created: String,
    payment: Payment,
}

impl Transaction {
    fn new(g: &mut Gen, n: usize) -> Transaction {
        let payment = Payment::new(g, n);
        Transaction {
            id: g.numeric_id(n),
            amount: payment.amount,
            created: rfc3339(payment.created),
            payment,
        }
    }

    /// A `transaction_status_changed` postback, form-urlencoded as Pagar.me sends it.
    fn postback(&self, g: &Gen, old: &str, current: &str) -> Event {
        let paid = matches!(current, "paid" | "refunded");
        let refunded = if current == "refunded" {
            self.amount
        } else {
            0
        };
        let p = &self.payment;
        let amount = self.amount.to_string();
        let fields: Vec<(&str, String)> = vec![
            ("id", self.id.clone()),
            ("event", "transaction_status_changed".into()),
            ("old_status", old.into()),
            ("desired_status", current.into()),
            ("current_status", current.into()),
            ("object", "transaction".into()),
            ("transaction[object]", "transaction".into()),
            ("transaction[status]", current.into()),
            ("transaction[refuse_reason]", "null".into()),
            ("transaction[status_reason]", "acquirer".into()),
            ("transaction[acquirer_response_code]", "0000".into()),
            ("transaction[acquirer_name]", "pagarme".into()),
            ("transaction[authorization_code]", format!("{:06}", p.n)),
            ("transaction[tid]", self.id.clone()),
            ("transaction[nsu]", self.id.clone()),
            ("transaction[date_created]", self.created.clone()),
            ("transaction[date_updated]", rfc3339(g.now)),
            ("transaction[amount]", amount.clone()),
            ("transaction[authorized_amount]", amount.clone()),
            (
                "transaction[paid_amount]",
                if paid { amount } else { "0".into() },
            ),
            ("transaction[refunded_amount]", refunded.to_string()),
            ("transaction[installments]", "1".into()),
            ("transaction[id]", self.id.clone()),
            ("transaction[cost]", "50".into()),
            ("transaction[card_holder_name]", p.name.to_uppercase()),
            ("transaction[card_last_digits]", p.last4.clone()),
            ("transaction[card_brand]", p.brand.into()),
            ("transaction[payment_method]", "credit_card".into()),
            ("transaction[customer][name]", p.name.clone()),
            ("transaction[customer][email]", p.email.clone()),
            ("transaction[metadata][order_id]", p.order.clone()),
            ("transaction[metadata][simulate_run]", g.run.clone()),
        ];
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        Event {
            kind: format!("transaction_status_changed:{current}"),
            body: body.into_bytes(),
            delivery_id: String::new(),
            data_id: None,
        }
    }
}

fn pagarme_paid(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    Ok((0..count)
        .map(|n| Transaction::new(g, n).postback(g, "processing", "paid"))
        .collect())
}

fn pagarme_refunded(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::with_capacity(count * 2);
    for n in 0..count {
        let t = Transaction::new(g, n);
        events.push(t.postback(g, "processing", "paid"));
        events.push(t.postback(g, "paid", "refunded"));
    }
    Ok(events)
}

fn mercadopago_payment(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let user_id = 100_000_000 + g.rng.range(0, 899_999_999);
    Ok((0..count)
        .map(|n| {
            let payment_id = g.numeric_id(n);
            // Notification ids are numbers; the run id keeps them distinct between runs.
            let notification_id = (g.run_num % 1_000_000_000_000) * 1_000_000 + n as u64;
            let body = json!({
                "action": "payment.created",
                "api_version": "v1",
                "data": { "id": payment_id },
                "date_created": rfc3339(g.now),
                "id": notification_id,
                "live_mode": false,
                "type": "payment",
                "user_id": user_id,
            });
            let mut event = Event::json("payment", &body, g.rng.uuid());
            event.data_id = Some(payment_id);
            event
        })
        .collect())
}

fn generic_ping(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let scheme_events = (0..count).map(|n| {
        let delivery = g.rng.uuid();
        match g.scheme {
            Scheme::Github => {
                let hook_id = 400_000_000 + g.rng.range(0, 99_999_999);
                let body = json!({
                    "zen": *g.rng.pick(&["Design for failure.", "Keep it logically awesome.", "Practicality beats purity."]),
                    "hook_id": hook_id,
                    "hook": {
                        "type": "Repository", "id": hook_id, "name": "web", "active": true,
                        "events": ["push", "pull_request"],
                        "config": { "content_type": "json", "insecure_ssl": "0", "url": format!("https://hooks.example.com.br/webhooks/{}", g.provider) },
                        "created_at": rfc3339(g.now), "updated_at": rfc3339(g.now),
                    },
                    "repository": {
                        "id": 700_000_000 + n, "name": format!("loja-{}-{n}", g.run),
                        "full_name": format!("hookline-sim/loja-{}-{n}", g.run), "private": true,
                        "owner": { "login": "hookline-sim", "id": 1_000_001, "type": "Organization" },
                    },
                    "sender": { "login": "hookline-sim-bot", "id": 1_000_002, "type": "Bot" },
                });
                Event::json("ping", &body, delivery)
            }
            Scheme::Shopify => {
                let body = json!({
                    "id": 60_000_000_000u64 + n as u64,
                    "name": format!("Loja Simulada {}", g.run),
                    "email": "contato@example.com.br",
                    "domain": "loja.example.com.br",
                    "myshopify_domain": format!("loja-{}.myshopify.com", g.run),
                    "country_code": "BR",
                    "currency": "BRL",
                    "iana_timezone": "America/Sao_Paulo",
                    "plan_name": "basic",
                    "updated_at": rfc3339(g.now),
                });
                Event::json("shop/update", &body, delivery)
            }
            _ => {
                let body = json!({
                    "type": "ping",
                    "timestamp": rfc3339(g.now),
                    "data": { "message": "hookline simulate", "sequence": n, "run": g.run },
                });
                Event::json("ping", &body, format!("msg_{}{n:06}", g.run))
            }
        }
    });
    Ok(scheme_events.collect())
}

fn adyen_authorisation(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::with_capacity(count);
    for n in 0..count {
        let p = Payment::new(g, n);
        let mut item = json!({
            "amount": { "currency": "BRL", "value": p.amount },
            "eventCode": "AUTHORISATION",
            "eventDate": rfc3339(g.now),
            "merchantAccountCode": "HooklineSimBR",
            "merchantReference": p.order,
            "paymentMethod": p.brand,
            "pspReference": format!("{}{n:06}", g.run.to_uppercase()),
            "reason": format!("{}:{}:03/2030", g.rng.range(100_000, 999_999), p.last4),
            "success": "true",
        });
        let signature = sign::adyen(&g.secret, &item)
            .map_err(|why| anyhow::anyhow!("cannot sign for Adyen: {why}"))?;
        item["additionalData"] = json!({ "hmacSignature": signature, "cardSummary": p.last4 });
        let body = json!({
            "live": "false",
            "notificationItems": [{ "NotificationRequestItem": item }],
        });
        events.push(Event::json("AUTHORISATION", &body, String::new()));
    }
    Ok(events)
}

// -----------------------------------------------------------------------------------------------------------
// Sending
// -----------------------------------------------------------------------------------------------------------

/// The order of requests: every event once, plus `round(duplicates × events)` re-sends of distinct events
/// chosen at random; re-sends go last (a provider's retry comes later) unless everything is shuffled.
fn plan(rng: &mut Rng, events: usize, duplicates: f64, shuffle: bool) -> Vec<usize> {
    let extra = ((events as f64) * duplicates).round() as usize;
    let mut picks: Vec<usize> = (0..events).collect();
    rng.shuffle(&mut picks);
    picks.truncate(extra.min(events));
    picks.sort_unstable();
    let mut plan: Vec<usize> = (0..events).chain(picks).collect();
    if shuffle {
        rng.shuffle(&mut plan);
    }
    plan
}

/// The signed request of `event` at the current time: the query string and the headers.
fn signed_request(
    scheme: Scheme,
    secret: &[u8],
    event: &Event,
) -> anyhow::Result<(String, Vec<(&'static str, String)>)> {
    let now = unix_now();
    let body = &event.body;
    let content_type = scheme.payload_format().content_type().to_string();
    let mut headers = vec![("Content-Type", content_type)];
    let mut query = String::new();
    match scheme {
        Scheme::Stripe => headers.push(("Stripe-Signature", sign::stripe(secret, now, body))),
        Scheme::StandardWebhooks | Scheme::Svix => {
            let signature = sign::standard_webhooks(secret, &event.delivery_id, now, body)
                .map_err(|why| anyhow::anyhow!(why))?;
            let (id, ts, sig) = if scheme == Scheme::Svix {
                ("svix-id", "svix-timestamp", "svix-signature")
            } else {
                ("webhook-id", "webhook-timestamp", "webhook-signature")
            };
            headers.push((id, event.delivery_id.clone()));
            headers.push((ts, now.to_string()));
            headers.push((sig, signature));
        }
        Scheme::Github => {
            headers.push(("X-GitHub-Event", event.kind.clone()));
            headers.push(("X-GitHub-Delivery", event.delivery_id.clone()));
            headers.push((
                "X-GitHub-Hook-Installation-Target-Type",
                "repository".into(),
            ));
            headers.push(("X-Hub-Signature-256", sign::github(secret, body)));
        }
        Scheme::Shopify => {
            headers.push(("X-Shopify-Topic", event.kind.clone()));
            headers.push(("X-Shopify-Webhook-Id", event.delivery_id.clone()));
            headers.push(("X-Shopify-API-Version", "2025-01".into()));
            headers.push(("X-Shopify-Triggered-At", rfc3339(now)));
            headers.push(("X-Shopify-Hmac-SHA256", sign::shopify(secret, body)));
        }
        Scheme::Pagarme => headers.push(("X-Hub-Signature", sign::pagarme(secret, body))),
        Scheme::MercadoPago => {
            let data_id = event.data_id.as_deref();
            // Mercado Pago signs a millisecond timestamp (13 digits).
            let signature =
                sign::mercadopago(secret, data_id, Some(&event.delivery_id), now * 1000);
            headers.push(("x-signature", signature));
            headers.push(("x-request-id", event.delivery_id.clone()));
            if let Some(id) = data_id {
                query = format!(
                    "data.id={}&type={}",
                    form_encode(id),
                    form_encode(&event.kind)
                );
            }
        }
        // The signature is inside the body, computed when the event was generated.
        Scheme::Adyen => {}
    }
    Ok((query, headers))
}

/// What one request got.
enum Reply {
    /// An HTTP answer: status, whether the edge called it a duplicate, latency, a body excerpt for errors.
    Http {
        status: u16,
        duplicate: bool,
        latency: Duration,
        detail: String,
    },
    /// The request did not complete (connection refused, reset, timeout).
    Transport(String),
}

async fn send(
    client: &reqwest::Client,
    endpoint: &str,
    scheme: Scheme,
    secret: &[u8],
    event: &Event,
) -> Reply {
    let (query, headers) = match signed_request(scheme, secret, event) {
        Ok(parts) => parts,
        Err(e) => return Reply::Transport(format!("cannot sign {}: {e:#}", event.kind)),
    };
    let url = if query.is_empty() {
        endpoint.to_string()
    } else {
        format!("{endpoint}?{query}")
    };
    let mut request = client.post(url).body(event.body.clone());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let started = Instant::now();
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => return Reply::Transport(format!("{:#}", anyhow::Error::new(e))),
    };
    let status = response.status().as_u16();
    let text = match response.text().await {
        Ok(text) => text,
        Err(e) => return Reply::Transport(format!("{:#}", anyhow::Error::new(e))),
    };
    let latency = started.elapsed();
    let duplicate = status == 200
        && serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("duplicate").and_then(Value::as_bool))
            .unwrap_or(false);
    Reply::Http {
        status,
        duplicate,
        latency,
        detail: format!("{} -> {status} {}", event.kind, excerpt(&text, 200)),
    }
}

/// Counters of a run.
#[derive(Default)]
struct Stats {
    new: usize,
    duplicate: usize,
    other: usize,
    client_errors: usize,
    server_errors: usize,
    transport_errors: usize,
    latencies: Vec<Duration>,
    /// Distinct error descriptions, the first few shown in the summary.
    errors: BTreeSet<String>,
}

/// How many distinct error descriptions the summary shows.
const ERROR_SAMPLES: usize = 5;

impl Stats {
    fn record(&mut self, reply: Reply) {
        match reply {
            Reply::Http {
                status,
                duplicate,
                latency,
                detail,
            } => {
                self.latencies.push(latency);
                match status {
                    200 if duplicate => self.duplicate += 1,
                    200 => self.new += 1,
                    400..=499 => self.client_errors += 1,
                    500..=599 => self.server_errors += 1,
                    _ => self.other += 1,
                }
                if status != 200 && self.errors.len() < ERROR_SAMPLES {
                    self.errors.insert(detail);
                }
            }
            Reply::Transport(detail) => {
                self.transport_errors += 1;
                if self.errors.len() < ERROR_SAMPLES {
                    self.errors.insert(detail);
                }
            }
        }
    }

    fn failures(&self) -> usize {
        self.other + self.client_errors + self.server_errors + self.transport_errors
    }

    fn all_ok(&self) -> bool {
        self.failures() == 0
    }

    fn summary(&mut self, events: usize, requests: usize, elapsed: Duration) -> String {
        self.latencies.sort_unstable();
        let secs = elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            requests as f64 / secs
        } else {
            0.0
        };
        let ms = |d: Option<Duration>| match d {
            Some(d) => format!("{:.1} ms", d.as_secs_f64() * 1000.0),
            None => "-".to_string(),
        };
        let mut out = String::new();
        let mut line = |label: &str, value: String| {
            let _ = writeln!(out, "{label:<18}{value}");
        };
        line("events:", events.to_string());
        line("requests sent:", requests.to_string());
        line("200 new:", self.new.to_string());
        line("200 duplicate:", self.duplicate.to_string());
        if self.other > 0 {
            line("other status:", self.other.to_string());
        }
        line("4xx:", self.client_errors.to_string());
        line("5xx:", self.server_errors.to_string());
        line("transport errors:", self.transport_errors.to_string());
        line("elapsed:", format!("{secs:.3} s"));
        line("requests/s:", format!("{rate:.1}"));
        line("latency p50:", ms(percentile(&self.latencies, 50.0)));
        line("latency p99:", ms(percentile(&self.latencies, 99.0)));
        if !self.errors.is_empty() {
            let _ = writeln!(out, "first errors:");
            for e in &self.errors {
                let _ = writeln!(out, "  {e}");
            }
        }
        out
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

// -----------------------------------------------------------------------------------------------------------
// Helpers
// -----------------------------------------------------------------------------------------------------------

/// The edge's base URL without a trailing slash: `--url`, else `http://{edge.listen}` (an unspecified listen
/// address such as 0.0.0.0 is reached on the loopback interface).
fn base_url(config: &Config, url: Option<&str>) -> anyhow::Result<String> {
    let base = match url {
        Some(url) => url.trim().trim_end_matches('/').to_string(),
        None => {
            let listen = config.edge.listen;
            let ip = match listen.ip() {
                IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
                ip => ip,
            };
            format!("http://{}", SocketAddr::new(ip, listen.port()))
        }
    };
    let parsed =
        reqwest::Url::parse(&base).with_context(|| format!("--url '{base}' is not a URL"))?;
    if parsed.scheme() != "http" {
        anyhow::bail!(
            "--url '{base}': only http:// is supported (this build has no TLS; run it next to the edge)"
        );
    }
    Ok(base)
}

fn user_agent(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Stripe => "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
        Scheme::Github => "GitHub-Hookshot/hookline-simulate",
        Scheme::Shopify => "Shopify-Captain-Hook",
        Scheme::Pagarme => "PagarMe-Postback/4.0",
        Scheme::MercadoPago => "MercadoPago WebHook v1.0 payment",
        Scheme::Adyen => "Adyen HttpClient 1.0",
        Scheme::StandardWebhooks | Scheme::Svix => "Svix-Webhooks/1.0 (hookline simulate)",
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A seed from the clock and the pid, for runs without `--seed`.
fn clock_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// `YYYY-MM-DDTHH:MM:SSZ` of unix seconds.
fn rfc3339(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix.to_string())
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// `application/x-www-form-urlencoded` encoding of one name or value (WHATWG: space as `+`).
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(char::from(byte))
            }
            b' ' => out.push('+'),
            other => {
                let _ = write!(out, "%{other:02X}");
            }
        }
    }
    out
}

fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// xorshift64* — small, fast and good enough to pick amounts and orders; not for anything secret.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64 spreads similar seeds apart and never leaves the xorshift state at zero.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-enough in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// In `0..len` (`len > 0`).
    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Fisher–Yates.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    fn alnum(&mut self, len: usize) -> String {
        const CHARS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        (0..len).map(|_| char::from(*self.pick(CHARS))).collect()
    }

    /// A version-4-shaped UUID.
    fn uuid(&mut self) -> String {
        let a = self.next();
        let b = self.next();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_adds_distinct_resends() {
        let mut rng = Rng::new(7);
        let plan = plan(&mut rng, 30, 0.3, true);
        assert_eq!(plan.len(), 39);
        let mut sorted = plan.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 30, "every event at least once");
        let plan_full = super::plan(&mut rng, 4, 1.0, false);
        assert_eq!(plan_full, vec![0, 1, 2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&v, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&v[..1], 99.0), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn form_encoding_matches_whatwg() {
        assert_eq!(form_encode("transaction[id]"), "transaction%5Bid%5D");
        assert_eq!(form_encode("Ana Lima"), "Ana+Lima");
        assert_eq!(form_encode("ã"), "%C3%A3");
    }

    #[test]
    fn fraction_is_bounded() {
        assert_eq!(parse_fraction("0.3"), Ok(0.3));
        assert!(parse_fraction("1.5").is_err());
        assert!(parse_fraction("-0.1").is_err());
        assert!(parse_fraction("NaN").is_err());
    }
}
