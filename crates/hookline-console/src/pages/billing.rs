//! The Billing page: which subscriptions are behind and which cycles are being charged or retried, read with
//! [`hookline_billing::status`] — the same figures as `hookline billing status` — never from a
//! process's memory.

use hookline_billing::{self as billing, claims::Claim, Subscription};

use super::*;

/// Rows shown per list of the Billing page: `billing::status` reads at most this many per list (and the totals
/// in full); a heading says how many there are in all (`hookline billing status --json` prints more).
const BILLING_ROWS: usize = PAGE_ROWS as usize;

/// `GET /billing`: subscriptions past due or waiting for a payment method, cycles in retry (next attempt,
/// attempts, last decline), cycles charging and unpaid cycles, each cycle linked to its latest charge on the
/// Outbound page.
pub async fn billing(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let status = {
        let mut conn = state.pool.acquire().await.context("acquire a connection")?;
        let accepted = hookline_payments::currency::ProviderCurrencies::from_config(&state.config);
        billing::status(&mut conn, BILLING_ROWS as i64, &accepted)
            .await
            .context("read the billing status")?
    };
    let now = OffsetDateTime::now_utc();
    Ok(html_response(page(
        "Billing",
        Some(&s),
        html! {
            h1 { "Billing" }
            p #billing-schedule {
                (status.schedule.due_periods) " period(s) due, "
                (status.schedule.due_retries) " retr(ies) due"
                @if status.schedule.due_periods + status.schedule.due_retries > 0 {
                    " (oldest for " (status.schedule.oldest_due_secs) " s)"
                }
                ". The workers charge what is due every " code { "[billing] schedule_secs" } "; what stays due longer than a few rounds means none is billing (the alert "
                code { "HooklineBillingBehind" } ") or the subscription cannot be charged."
            }
            p #billing-summary {
                (status.totals.past_due) " past due, "
                (status.totals.needs_payment_method) " waiting for a payment method, "
                (status.totals.in_retry) " cycle(s) in retry, "
                (status.totals.charging) " charging, "
                (status.totals.unpaid_cycles) " unpaid, "
                (status.totals.currency_not_accepted) " not charged (currency not accepted)."
            }
            p.muted {
                "A subscription past due or waiting for a payment method is charged again once it has a new one: "
                code { "hookline subscriptions update ID --payment-method ID" }
                " or the merchant API's " code { "POST /v1/subscriptions/{id}" } " (its unpaid cycle is retried by the workers' next round)."
            }
            h2 { "Subscriptions past due" (count(status.totals.past_due)) }
            (subscriptions("past-due", &status.past_due, status.totals.past_due, "No subscription is past due."))
            h2 { "Subscriptions waiting for a payment method" (count(status.totals.needs_payment_method)) }
            (subscriptions("needs-payment-method", &status.needs_payment_method, status.totals.needs_payment_method, "No subscription is waiting for a payment method."))
            h2 { "Cycles in retry" (count(status.totals.in_retry)) }
            (in_retry(&status.in_retry, status.totals.in_retry, now))
            h2 { "Cycles charging" (count(status.totals.charging)) }
            (charging(&status.charging, status.totals.charging, now))
            h2 { "Unpaid cycles" (count(status.totals.unpaid_cycles)) }
            (unpaid(&status.unpaid_cycles, status.totals.unpaid_cycles))
        },
    )))
}

/// A heading's count.
fn count(n: i64) -> String {
    format!(" ({n})")
}

/// What is said under a list cut to [`BILLING_ROWS`].
fn cut_note(total: i64) -> Markup {
    html! {
        @if total > BILLING_ROWS as i64 {
            p.muted.cut { "Showing the first " (BILLING_ROWS) " of " (total) "; "
                code { "hookline billing status --json" } " lists every one." }
        }
    }
}

fn subscriptions(id: &str, rows: &[Subscription], total: i64, empty: &str) -> Markup {
    html! {
        @if rows.is_empty() {
            p.muted { (empty) }
        } @else {
            table #(id) {
                tr { th { "subscription" } th { "provider" } th { "customer" } th { "payment method" } th { "amount" } th { "interval" } th { "status" } th { "reason" } }
                @for sub in rows.iter().take(BILLING_ROWS) {
                    tr.subscription-row data-subscription=(sub.id) {
                        td.num { (sub.id) } td { (sub.provider) } td { (sub.customer) }
                        td { (sub.payment_method.as_deref().unwrap_or("—")) }
                        td.num { (money(sub.amount)) " " (sub.currency) }
                        td { (sub.interval.as_str()) }
                        td { (sub.status.as_str()) }
                        td.reason { (sub.status_reason.as_deref().unwrap_or("—")) }
                    }
                }
            }
            (cut_note(total))
        }
    }
}

/// The cycle's latest charge on the Outbound page: the intents list starts at it (keyset `before` is
/// exclusive) and the row's anchor scrolls to it.
fn intent_link(c: &Claim) -> Markup {
    html! {
        a.intent-link href={ "/intents?before=" (c.intent_id.saturating_add(1)) "#intent-" (c.intent) } { (c.intent) }
    }
}

/// `attempts of the most the schedule allows` (the first charge plus one per retry delay).
fn attempts(c: &Claim) -> String {
    format!("{} of {}", c.attempts, c.retry_schedule_secs.len() + 1)
}

fn failure(c: &Claim) -> Markup {
    html! {
        td.failure-code { (c.last_failure_code.as_deref().unwrap_or("—")) }
        td.failure-message { (c.last_failure_message.as_deref().unwrap_or("—")) }
    }
}

fn in_retry(rows: &[Claim], total: i64, now: OffsetDateTime) -> Markup {
    html! {
        @if rows.is_empty() {
            p.muted { "No cycle is waiting for a retry." }
        } @else {
            table #in-retry {
                tr { th { "subscription" } th { "cycle" } th { "attempts" } th { "next attempt" } th { "last failure" } th { "message" } th { "latest charge" } }
                @for c in rows.iter().take(BILLING_ROWS) {
                    tr.cycle-row data-subscription=(c.subscription_id) data-cycle=(c.billing_cycle) {
                        td.num { (c.subscription_id) } td { (c.billing_cycle) } td.num { (attempts(c)) }
                        td {
                            (ots(c.next_attempt_at))
                            @if let Some(t) = c.next_attempt_at { " " span.muted { (relative(t, now)) } }
                        }
                        (failure(c))
                        td { (intent_link(c)) }
                    }
                }
            }
            (cut_note(total))
        }
    }
}

fn charging(rows: &[Claim], total: i64, now: OffsetDateTime) -> Markup {
    html! {
        @if rows.is_empty() {
            p.muted { "No cycle has a charge in flight." }
        } @else {
            table #charging {
                tr { th { "subscription" } th { "cycle" } th { "attempt" } th { "since" } th { "charge" } }
                @for c in rows.iter().take(BILLING_ROWS) {
                    tr.cycle-row data-subscription=(c.subscription_id) data-cycle=(c.billing_cycle) {
                        td.num { (c.subscription_id) } td { (c.billing_cycle) } td.num { (attempts(c)) }
                        td { (ts(c.updated_at)) " " span.muted { (relative(c.updated_at, now)) } }
                        td { (intent_link(c)) }
                    }
                }
            }
            (cut_note(total))
            p.muted { "The dispatcher retries the gateway with the same key and looks up an unknown outcome; the Outbound page shows each charge's requests." }
        }
    }
}

fn unpaid(rows: &[Claim], total: i64) -> Markup {
    html! {
        @if rows.is_empty() {
            p.muted { "No cycle is past due or waiting for a payment method." }
        } @else {
            table #unpaid-cycles {
                tr { th { "subscription" } th { "cycle" } th { "status" } th { "attempts" } th { "last failure" } th { "message" } th { "since" } th { "latest charge" } }
                @for c in rows.iter().take(BILLING_ROWS) {
                    tr.cycle-row data-subscription=(c.subscription_id) data-cycle=(c.billing_cycle) {
                        td.num { (c.subscription_id) } td { (c.billing_cycle) } td { (c.status.as_str()) }
                        td.num { (attempts(c)) }
                        (failure(c))
                        td { (ts(c.updated_at)) }
                        td { (intent_link(c)) }
                    }
                }
            }
            (cut_note(total))
        }
    }
}

/// `t` relative to `now`, coarse: `in 2 d 3 h`, `5 min ago`, `now`.
fn relative(t: OffsetDateTime, now: OffsetDateTime) -> String {
    let secs = (t - now).whole_seconds();
    let span = secs.unsigned_abs();
    let text = match span {
        0..=59 => return "(now)".into(),
        60..=3_599 => format!("{} min", span / 60),
        3_600..=86_399 => format!("{} h {} min", span / 3_600, span % 3_600 / 60),
        _ => format!("{} d {} h", span / 86_400, span % 86_400 / 3_600),
    };
    if secs > 0 {
        format!("(in {text})")
    } else {
        format!("({text} ago)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_are_coarse_and_signed() {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let at = |secs: i64| now + time::Duration::seconds(secs);
        assert_eq!(relative(at(30), now), "(now)");
        assert_eq!(relative(at(-30), now), "(now)");
        assert_eq!(relative(at(300), now), "(in 5 min)");
        assert_eq!(relative(at(-7_260), now), "(2 h 1 min ago)");
        assert_eq!(relative(at(2 * 86_400 + 3 * 3_600), now), "(in 2 d 3 h)");
    }
}
