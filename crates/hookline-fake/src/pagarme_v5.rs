//! Pagar.me Core API v5 webhooks, JSON as Pagar.me sends them: `{id: "hook_…", account, type, created_at, data:
//! the charge}`. Nothing is signed; the request carries the webhook's Basic credentials (see
//! [`crate::headers_for`]).

use serde_json::json;

use crate::{rfc3339, Event, Faker, Payment};

/// A Pagar.me v5 charge about a simulated payment.
#[derive(Debug, Clone)]
pub struct Charge {
    /// `ch_…`, unique per run.
    pub id: String,
    /// `or_…`, the order the charge belongs to.
    pub order: String,
    /// Centavos.
    pub amount: i64,
    /// The payment it charges.
    pub payment: Payment,
}

impl Charge {
    /// Charge `n` of the run, for a new random payment.
    pub fn new(f: &mut Faker, n: usize) -> Charge {
        let payment = Payment::new(f, n);
        Charge {
            id: f.id("ch", n),
            order: f.id("or", n),
            amount: payment.amount,
            payment,
        }
    }

    /// The webhook `kind` (`charge.paid`, `charge.refunded`, …) about the charge in `status`, with
    /// `canceled_amount` centavos refunded. The hook id is per (charge, kind): a retry repeats it.
    pub fn webhook(&self, f: &Faker, kind: &str, status: &str, canceled_amount: i64) -> Event {
        let p = &self.payment;
        let hook = format!(
            "hook_{}{}",
            self.id.trim_start_matches("ch_"),
            kind.replace('.', "_")
        );
        let paid = if matches!(status, "paid" | "canceled") {
            self.amount
        } else {
            0
        };
        let body = json!({
            "id": hook,
            "account": {"id": "acc_hookline_simulate", "name": p.store},
            "type": kind,
            "created_at": rfc3339(f.now),
            "data": {
                "id": self.id,
                "code": p.order,
                "amount": self.amount,
                "paid_amount": paid,
                "canceled_amount": canceled_amount,
                "status": status,
                "currency": "BRL",
                "payment_method": "credit_card",
                "order": {"id": self.order, "code": p.order, "status": status},
                "customer": {"name": p.name, "email": p.email, "type": "individual"},
                "last_transaction": {
                    "transaction_type": "credit_card",
                    "status": if status == "paid" { "captured" } else { status },
                    "amount": self.amount,
                    "card": {"brand": p.brand, "last_four_digits": p.last4},
                },
                "metadata": p.metadata(f),
                "created_at": rfc3339(p.created),
                "updated_at": rfc3339(f.now),
            },
        });
        Event::json(kind, &body, hook)
    }
}
