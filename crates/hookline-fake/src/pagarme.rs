//! Pagar.me v4 `transaction_status_changed` postbacks, form-urlencoded as Pagar.me sends them.

use crate::{form_encode, rfc3339, Event, Faker, Payment};

/// A Pagar.me v4 transaction about a simulated payment.
#[derive(Debug, Clone)]
pub struct Transaction {
    /// Numeric transaction id, unique per run.
    pub id: String,
    /// Centavos.
    pub amount: i64,
    /// `date_created`.
    pub created: String,
    /// The payment it charges.
    pub payment: Payment,
}

impl Transaction {
    /// Transaction `n` of the run, for a new random payment.
    pub fn new(f: &mut Faker, n: usize) -> Transaction {
        let payment = Payment::new(f, n);
        Transaction {
            id: f.numeric_id(n),
            amount: payment.amount,
            created: rfc3339(payment.created),
            payment,
        }
    }

    /// The postback of its status change from `old` to `current` (e.g. processing → paid, paid → refunded).
    pub fn postback(&self, f: &Faker, old: &str, current: &str) -> Event {
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
            ("transaction[date_updated]", rfc3339(f.now)),
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
            ("transaction[metadata][simulate_run]", f.run.clone()),
        ];
        let body = form_encode(fields.iter().map(|(k, v)| (*k, v.as_str())));
        Event::raw(
            format!("transaction_status_changed:{current}"),
            body.into_bytes(),
            "",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refunded_postback_reports_the_refund() {
        let mut f = Faker::with_run(1_000_000, 1_767_225_600, 5);
        let t = Transaction::new(&mut f, 2);
        let body = String::from_utf8(t.postback(&f, "paid", "refunded").body).unwrap();
        assert!(body.starts_with(&format!("id={}&event=transaction_status_changed&", t.id)));
        assert!(body.contains(&format!("transaction%5Brefunded_amount%5D={}", t.amount)));
        assert!(body.contains("current_status=refunded"));
    }
}
