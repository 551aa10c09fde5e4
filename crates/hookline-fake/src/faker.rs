//! The context of one generation run ([`Faker`]: run id, random generator, clock) and the simulated customer
//! payment ([`Payment`]) whose facts every realistic event about it shares.

use serde_json::{json, Value};

use crate::Rng;

/// Generation context: the run id that makes ids unique, the random source, the clock at the start.
#[derive(Debug, Clone)]
pub struct Faker {
    /// Lower-case base-36 run id, part of every string id.
    pub run: String,
    /// Numeric run id, part of numeric-looking ids (Pagar.me, Mercado Pago).
    pub run_num: u64,
    /// The seeded random source of every choice.
    pub rng: Rng,
    /// Unix seconds at the start of the run: the events' `created`.
    pub now: i64,
    /// Sequence of Stripe event ids within the run.
    seq: u64,
}

impl Faker {
    /// A run whose id comes from the clock (microseconds) and the pid, so repeated runs never collide; `seed`
    /// fixes the random choices, not the ids.
    pub fn new(seed: u64) -> Faker {
        let micros = crate::since_epoch().as_micros() as u64;
        // The pid separates runs started in the same microsecond.
        let run_num = (micros % 100_000_000_000_000) * 100 + u64::from(std::process::id() % 100);
        Faker::with_run(run_num, (micros / 1_000_000) as i64, seed)
    }

    /// A run with a chosen run id and clock (reproducible to the byte).
    pub fn with_run(run_num: u64, now: i64, seed: u64) -> Faker {
        Faker {
            run: base36(run_num),
            run_num,
            rng: Rng::new(seed),
            now,
            seq: 0,
        }
    }

    /// A Stripe-style id: `{prefix}_{run}{n:06}`.
    pub fn id(&self, prefix: &str, n: usize) -> String {
        format!("{prefix}_{}{n:06}", self.run)
    }

    /// A fresh Stripe event id: `evt_{run}{seq:07}`.
    pub fn event_id(&mut self) -> String {
        self.seq += 1;
        format!("evt_{}{:07}", self.run, self.seq)
    }

    /// A numeric id unique per run: `{run_num}{n:07}` (as Pagar.me and Mercado Pago ids are numbers).
    pub fn numeric_id(&self, n: usize) -> String {
        format!("{}{n:07}", self.run_num)
    }

    /// A realistic amount in centavos (R$ 9,90 to R$ 2.499,90, ending in 90).
    pub fn amount(&mut self) -> i64 {
        self.rng.range(9, 2_499) * 100 + 90
    }
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

/// A simulated customer payment, the facts shared by all events about it (Stripe, Pagar.me, Adyen).
#[derive(Debug, Clone)]
pub struct Payment {
    /// Its index in the run.
    pub n: usize,
    /// Stripe PaymentIntent id `pi_…`.
    pub pi: String,
    /// Stripe charge id `ch_…`.
    pub charge: String,
    /// Stripe customer id `cus_…`.
    pub customer: String,
    /// Stripe payment method id `pm_…`.
    pub payment_method: String,
    /// Centavos.
    pub amount: i64,
    /// Unix seconds, a little before the run.
    pub created: i64,
    /// The customer's name.
    pub name: String,
    /// The customer's e-mail.
    pub email: String,
    /// The shop's order number.
    pub order: String,
    /// The shop.
    pub store: &'static str,
    /// The card brand.
    pub brand: &'static str,
    /// The card's last four digits.
    pub last4: String,
}

impl Payment {
    /// Payment `n` of the run, with random customer, amount, shop and card.
    pub fn new(f: &mut Faker, n: usize) -> Payment {
        let first = *f.rng.pick(FIRST_NAMES);
        let last = *f.rng.pick(LAST_NAMES);
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
            pi: f.id("pi", n),
            charge: f.id("ch", n),
            customer: f.id("cus", n),
            payment_method: f.id("pm", n),
            amount: f.amount(),
            created: f.now - f.rng.range(60, 3_600),
            name: format!("{first} {last}"),
            email: format!("{email_user}{}@example.com.br", f.rng.range(1, 99)),
            order: format!("PED-{}-{n:06}", f.run.to_uppercase()),
            store: STORES[f.rng.index(STORES.len())],
            brand: BRANDS[f.rng.index(BRANDS.len())],
            last4: format!("{:04}", f.rng.range(0, 9_999)),
        }
    }

    /// The shop's metadata attached to the payment.
    pub fn metadata(&self, f: &Faker) -> Value {
        json!({
            "order_id": self.order,
            "store": self.store,
            "customer_name": self.name,
            "channel": "checkout-web",
            "simulated_by": "hookline simulate",
            "simulate_run": f.run,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_the_run() {
        let mut f = Faker::with_run(36 * 36 + 1, 1_767_225_600, 1);
        assert_eq!(f.run, "101");
        assert_eq!(f.id("pi", 7), "pi_101000007");
        assert_eq!(f.event_id(), "evt_1010000001");
        assert_eq!(f.event_id(), "evt_1010000002");
        assert_eq!(f.numeric_id(3), "12970000003");
        let p = Payment::new(&mut f, 3);
        assert!(p.amount % 100 == 90 && (990..=249_990).contains(&p.amount));
        assert!(p.email.ends_with("@example.com.br") && p.email.is_ascii());
        assert_eq!(p.order, "PED-101-000003");
    }
}
