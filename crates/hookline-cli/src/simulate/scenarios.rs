//! The scenarios of `hookline simulate`, per scheme: their names and descriptions (the table `--help` and the
//! usage errors list) and what each sends for `count` business objects, composed from the `hookline-fake`
//! payload builders.

use std::fmt::Write as _;

use hookline_core::ProviderConfig;
use hookline_fake::{adyen, mercadopago, pagarme, pagarme_v5, ping, stripe, Event, Faker, Payment};
use hookline_signature::Scheme;

/// Generation context: the fake run (ids, random source, clock) and the simulated provider.
pub(super) struct Gen {
    /// Run id, random generator and clock of this run.
    pub(super) fake: Faker,
    /// The simulated provider's name and scheme (generic generators branch on the scheme).
    provider: String,
    scheme: Scheme,
    /// Its first secret (Adyen signs inside the body, at generation time).
    secret: Vec<u8>,
}

impl Gen {
    pub(super) fn new(seed: u64, provider: &ProviderConfig) -> Gen {
        Gen {
            fake: Faker::new(seed),
            provider: provider.name.clone(),
            scheme: provider.scheme,
            secret: provider
                .secret_bytes()
                .first()
                .map(|s| s.to_vec())
                .unwrap_or_default(),
        }
    }
}

/// One scenario: a name, a one-line description and its generator (`count` business objects → events).
pub(super) struct Scenario {
    pub(super) name: &'static str,
    pub(super) about: &'static str,
    pub(super) generate: fn(&mut Gen, usize) -> anyhow::Result<Vec<Event>>,
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

const PAGARME_V5: &[Scenario] = &[
    Scenario {
        name: "charge-paid",
        about: "v5 charge.paid webhooks (JSON, hook_ ids, Basic credentials; the worker re-reads the charge)",
        generate: pagarme_v5_paid,
    },
    Scenario {
        name: "charge-refunded",
        about: "v5 charge.paid, then charge.refunded, per charge",
        generate: pagarme_v5_refunded,
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

/// The scenarios a provider of `scheme` can send.
pub(super) fn scenarios(scheme: Scheme) -> &'static [Scenario] {
    match scheme {
        Scheme::Stripe => STRIPE,
        Scheme::Pagarme => PAGARME,
        Scheme::PagarmeV5 => PAGARME_V5,
        Scheme::MercadoPago => MERCADOPAGO,
        Scheme::Github | Scheme::Shopify | Scheme::StandardWebhooks | Scheme::Svix => PING,
        Scheme::Adyen => ADYEN,
    }
}

/// The scenario list shown after `--help`, built from the same table the command uses.
pub(super) fn scenario_help() -> String {
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

/// The events `events_of` builds about each of `count` new payments, in order.
fn per_payment(
    g: &mut Gen,
    count: usize,
    mut events_of: impl FnMut(&mut Faker, &Payment) -> Vec<Event>,
) -> anyhow::Result<Vec<Event>> {
    let f = &mut g.fake;
    let mut events = Vec::with_capacity(count);
    for n in 0..count {
        let p = Payment::new(f, n);
        events.extend(events_of(f, &p));
    }
    Ok(events)
}

/// `payment_intent.{status}` of payment `p`.
fn payment_intent(f: &mut Faker, p: &Payment, status: &str) -> Event {
    let object = stripe::realistic_payment_intent(f, p, status);
    stripe::live_event(f, &format!("payment_intent.{status}"), object)
}

fn stripe_payment_succeeded(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    per_payment(g, count, |f, p| vec![payment_intent(f, p, "succeeded")])
}

fn stripe_payment_lifecycle(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    per_payment(g, count, |f, p| {
        ["created", "processing", "succeeded"]
            .map(|status| payment_intent(f, p, status))
            .into()
    })
}

fn stripe_refund(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    per_payment(g, count, |f, p| {
        let paid = payment_intent(f, p, "succeeded");
        let refund = stripe::realistic_refund(f, p);
        vec![paid, stripe::live_event(f, "refund.created", refund)]
    })
}

fn stripe_dispute(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    per_payment(g, count, |f, p| {
        let mut events = vec![payment_intent(f, p, "succeeded")];
        for (kind, status) in [("created", "needs_response"), ("closed", "lost")] {
            let dispute = stripe::realistic_dispute(f, p, status);
            events.push(stripe::live_event(
                f,
                &format!("charge.dispute.{kind}"),
                dispute,
            ));
        }
        events
    })
}

fn stripe_invoice(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let f = &mut g.fake;
    let mut events = Vec::with_capacity(count * 2);
    for n in 0..count {
        let object = stripe::subscription_invoice(f, n);
        // The same cycle reported twice, under two event ids: the business key (subscription, cycle) is what
        // charges once.
        events.push(stripe::live_event(f, "invoice.paid", object.clone()));
        events.push(stripe::live_event(f, "invoice.payment_succeeded", object));
    }
    Ok(events)
}

fn pagarme_paid(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let f = &mut g.fake;
    Ok((0..count)
        .map(|n| pagarme::Transaction::new(f, n).postback(f, "processing", "paid"))
        .collect())
}

fn pagarme_refunded(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let f = &mut g.fake;
    let mut events = Vec::with_capacity(count * 2);
    for n in 0..count {
        let t = pagarme::Transaction::new(f, n);
        events.push(t.postback(f, "processing", "paid"));
        events.push(t.postback(f, "paid", "refunded"));
    }
    Ok(events)
}

fn pagarme_v5_paid(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let f = &mut g.fake;
    Ok((0..count)
        .map(|n| pagarme_v5::Charge::new(f, n).webhook(f, "charge.paid", "paid", 0))
        .collect())
}

fn pagarme_v5_refunded(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let f = &mut g.fake;
    let mut events = Vec::with_capacity(count * 2);
    for n in 0..count {
        let c = pagarme_v5::Charge::new(f, n);
        events.push(c.webhook(f, "charge.paid", "paid", 0));
        events.push(c.webhook(f, "charge.refunded", "canceled", c.amount));
    }
    Ok(events)
}

/// The webhooks of scenario `refunded` (or `paid`) about charges made at the sandbox (`(ch_…, or_…, amount)`), in
/// the order and number the scenario's own generator gives, so that the run's plan still fits.
pub(super) fn pagarme_v5_webhooks_for(
    g: &mut Gen,
    charges: Vec<(String, String, i64)>,
    refunded: bool,
) -> Vec<Event> {
    let f = &mut g.fake;
    let mut events = Vec::with_capacity(charges.len() * 2);
    for (n, (id, order, amount)) in charges.into_iter().enumerate() {
        let mut payment = Payment::new(f, n);
        payment.amount = amount;
        let c = pagarme_v5::Charge {
            id,
            order,
            amount,
            payment,
        };
        events.push(c.webhook(f, "charge.paid", "paid", 0));
        if refunded {
            events.push(c.webhook(f, "charge.refunded", "canceled", c.amount));
        }
    }
    events
}

fn mercadopago_payment(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    let f = &mut g.fake;
    let user_id = mercadopago::user_id(f);
    Ok((0..count)
        .map(|n| mercadopago::payment_notification(f, n, user_id))
        .collect())
}

/// Mercado Pago notifications for payments that exist at the provider's API (created there first: see
/// `sandbox_payments`), one per id, numbered as [`mercadopago_payment`] numbers them.
pub(super) fn mercadopago_notifications_for(g: &mut Gen, payment_ids: Vec<String>) -> Vec<Event> {
    let f = &mut g.fake;
    let user_id = mercadopago::user_id(f);
    payment_ids
        .into_iter()
        .enumerate()
        .map(|(n, id)| mercadopago::payment_notification_for(f, n, user_id, id))
        .collect()
}

fn generic_ping(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    Ok((0..count)
        .map(|n| ping::event(&mut g.fake, g.scheme, &g.provider, n))
        .collect())
}

fn adyen_authorisation(g: &mut Gen, count: usize) -> anyhow::Result<Vec<Event>> {
    (0..count)
        .map(|n| adyen::authorisation(&mut g.fake, n, &g.secret).map_err(anyhow::Error::msg))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_has_scenarios_that_generate() {
        for scheme in Scheme::ALL {
            let secret = match scheme {
                Scheme::StandardWebhooks | Scheme::Svix => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                Scheme::Adyen => "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
                Scheme::PagarmeV5 => "user:password",
                _ => "secret",
            };
            let mut g = Gen {
                fake: Faker::new(1),
                provider: "p".into(),
                scheme,
                secret: secret.as_bytes().to_vec(),
            };
            for s in scenarios(scheme) {
                let events = (s.generate)(&mut g, 4).expect(s.name);
                assert!(events.len() >= 4, "{scheme} {}", s.name);
            }
        }
        assert!(scenario_help().contains("  standard-webhooks, svix, github, shopify:\n    ping"));
    }
}
