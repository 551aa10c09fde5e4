//! The console's Billing page (issue 28): subscriptions behind and cycles in retry, charging or unpaid, read
//! from the database as `hookline billing status` reads them, against a started console process and a real
//! database. The cycles are billed by the real run (`billing::bill`) and declined through the path the
//! dispatcher takes (`intents::record_charge_answer`, whose completion makes the dunning decision).

use std::time::Duration;

use hookline_billing::{self as billing, claims::ClaimStatus, Billed, SubscriptionStatus};
use hookline_payments::intents::{self, ChargeAnswer};
use hookline_payments::model::IntentStatus;
use hookline_tests::console::{console_edge, ConsoleHttp};

pub(crate) const CYCLE: &str = "2026-11";

/// Rows the console shows per billing list (the page cuts longer ones and says so).
const SHOWN: usize = 50;

/// The dunning schedule per provider: `stripe` retries a decline after a day, then three days; `stripe-eu`
/// has no retry (a decline is past due at once).
fn provider_of(name: &str) -> Option<billing::ProviderBilling> {
    let retry_schedule_secs = match name {
        "stripe" => vec![86_400, 259_200],
        "stripe-eu" => Vec::new(),
        _ => return None,
    };
    Some(billing::ProviderBilling {
        scheme: hookline_signature::Scheme::Stripe,
        retry_schedule_secs,
    })
}

/// A monthly subscription, billed for [`CYCLE`] by the real run: its charge is in flight. Returns its id and the
/// charge's (internal id, public id).
pub(crate) async fn billed(pool: &sqlx::PgPool, provider: &str, n: usize) -> (i64, i64, String) {
    let customer = format!("cus_console{n}");
    let method = format!("pm_console{n}");
    let id = {
        let mut conn = pool.acquire().await.expect("connection");
        billing::add(
            &mut conn,
            None,
            &billing::NewSubscription {
                provider,
                customer: &customer,
                payment_method: &method,
                amount: 4_990,
                currency: "brl",
                interval: billing::Interval::Month,
                anchor: time::macros::datetime!(2026-10-05 12:00 UTC),
            },
            // Created back then: its periods from the anchor on are its own.
            time::macros::datetime!(2026-10-05 12:00 UTC),
        )
        .await
        .expect("add a subscription")
        .id
    };
    let cycle = Some(billing::Cycle::parse(CYCLE).expect("a cycle"));
    // A moment inside the cycle's period, whatever the machine's clock says.
    let now = time::macros::datetime!(2026-11-20 00:00 UTC);
    let billed = billing::bill(pool, id, cycle, &provider_of, now)
        .await
        .expect("bill");
    let Billed::Charged(public_id) = billed else {
        panic!("subscription {id} not charged: {billed:?}");
    };
    let mut conn = pool.acquire().await.expect("connection");
    let claim = billing::claims::get(&mut conn, id, CYCLE)
        .await
        .expect("read the claim")
        .expect("the cycle is claimed");
    assert_eq!(claim.intent, public_id);
    (id, claim.intent_id, public_id)
}

/// The gateway declined the charge: recorded as the dispatcher records it (the dunning decides in the same
/// transaction).
async fn declined(pool: &sqlx::PgPool, intent_id: i64, code: &str, message: &str) {
    let mut tx = pool.begin().await.expect("begin");
    intents::record_charge_answer(
        &mut tx,
        intent_id,
        &ChargeAnswer {
            provider_payment_id: Some(&format!("pi_gateway_{intent_id}")),
            status: IntentStatus::Failed,
            next_action: None,
            failure_code: Some(code),
            failure_message: Some(message),
            ends_operation: false,
        },
        &hookline_billing::Dunning,
    )
    .await
    .expect("record the decline");
    tx.commit().await.expect("commit");
}

/// The HTML of the page's `<table id="ID">`, or `None` when the page has no such table.
fn table<'a>(html: &'a str, id: &str) -> Option<&'a str> {
    let start = html.find(&format!("<table id=\"{id}\""))?;
    let end = html[start..].find("</table>")? + start;
    Some(&html[start..end])
}

/// The `data-subscription` of each row of a table with rows of class `class`.
fn subscriptions_in(table: &str, class: &str) -> Vec<i64> {
    let marker = format!("class=\"{class}\" data-subscription=\"");
    table
        .match_indices(&marker)
        .filter_map(|(i, _)| {
            let rest = &table[i + marker.len()..];
            rest[..rest.find('"')?].parse().ok()
        })
        .collect()
}

/// The row of `subscription` in a cycle table.
fn cycle_row(table: &str, subscription: i64) -> &str {
    let marker = format!("data-subscription=\"{subscription}\"");
    let start = table
        .find(&marker)
        .unwrap_or_else(|| panic!("no row of subscription {subscription}: {table}"));
    let end = table[start..]
        .find("</tr>")
        .map_or(table.len(), |e| start + e);
    &table[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_billing_page_lists_subscriptions_behind_and_cycles_in_retry_charging_or_unpaid() {
    let edge = console_edge().await;
    let pool = edge.db.pool.clone();
    let console = edge.console.clone().expect("the console listens");
    let mut http = ConsoleHttp::new(&console);

    // Nothing without a session.
    let res = http.get("/billing").await;
    assert_eq!((res.status, res.location()), (303, Some("/login")));

    // Past due: no retry in its provider's schedule, declined once.
    let (past_due, past_due_intent, _) = billed(&pool, "stripe-eu", 0).await;
    declined(
        &pool,
        past_due_intent,
        "insufficient_funds",
        "Your card has insufficient funds.",
    )
    .await;
    // In retry: declined with a hostile message (stored from the gateway; must render as text).
    let hostile = "<script>alert('billing')</script> declined";
    let (in_retry, retry_intent, retry_public) = billed(&pool, "stripe", 1).await;
    declined(&pool, retry_intent, "card_declined", hostile).await;
    // Waiting for a payment method: the gateway called the method unusable.
    let (no_method, no_method_intent, _) = billed(&pool, "stripe", 2).await;
    declined(
        &pool,
        no_method_intent,
        "expired_card",
        "Your card has expired.",
    )
    .await;
    // Charging: more cycles in flight than the page shows.
    let mut charging = Vec::new();
    for n in 0..=SHOWN {
        charging.push(billed(&pool, "stripe", 100 + n).await.0);
    }

    // What the database says (the page must show this, not something else).
    let status = billing::status(
        &mut pool.acquire().await.expect("connection"),
        1000,
        &Default::default(),
    )
    .await
    .expect("billing status");
    let ids = |subs: &[billing::Subscription]| subs.iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(&status.past_due), vec![past_due]);
    assert_eq!(ids(&status.needs_payment_method), vec![no_method]);
    assert_eq!(status.in_retry.len(), 1);
    let retry = &status.in_retry[0];
    assert_eq!(
        (retry.subscription_id, retry.status, retry.attempts),
        (in_retry, ClaimStatus::RetryScheduled, 1)
    );
    let next_attempt = retry.next_attempt_at.expect("a next attempt");
    assert_eq!(status.charging.len(), SHOWN + 1);
    assert_eq!(status.unpaid_cycles.len(), 2);
    assert_eq!(
        (status.totals.charging, status.totals.unpaid_cycles),
        (SHOWN as i64 + 1, 2)
    );
    // A bounded read: the lists are cut, the totals stay whole.
    let cut = billing::status(
        &mut pool.acquire().await.expect("connection"),
        3,
        &Default::default(),
    )
    .await
    .expect("billing status");
    assert_eq!(
        (cut.charging.len(), cut.totals.charging),
        (3, SHOWN as i64 + 1)
    );

    let csrf = http.login().await;
    assert!(!csrf.is_empty());
    let page = http.get("/billing").await;
    assert_eq!(page.status, 200, "{}", page.text);
    let html = &page.text;
    assert!(html.contains("href=\"/billing\""), "the nav links the page");
    assert!(
        html.contains("1 past due, 1 waiting for a payment method, 1 cycle(s) in retry, 51 charging, 2 unpaid, 0 not charged (currency not accepted)."),
        "{html}"
    );
    // What the scheduler has due, as the database says (the active subscriptions' next periods have started:
    // no worker bills here).
    assert!(status.schedule.due_periods > 0, "{:?}", status.schedule);
    assert!(
        html.contains(&format!(
            "{} period(s) due, {} retr(ies) due",
            status.schedule.due_periods, status.schedule.due_retries
        )),
        "{html}"
    );

    // Subscriptions behind, with their reason (the last decline).
    let t = table(html, "past-due").expect("a past-due table");
    assert_eq!(subscriptions_in(t, "subscription-row"), vec![past_due]);
    assert!(t.contains("cus_console0") && t.contains("49.90 brl"), "{t}");
    assert!(
        t.contains("past_due") && t.contains("Your card has insufficient funds."),
        "{t}"
    );
    let t = table(html, "needs-payment-method").expect("a needs-payment-method table");
    assert_eq!(subscriptions_in(t, "subscription-row"), vec![no_method]);
    assert!(
        t.contains("needs_payment_method") && t.contains("Your card has expired."),
        "{t}"
    );

    // The cycle in retry: attempts of the schedule, the next attempt, the last decline (escaped), the charge.
    let t = table(html, "in-retry").expect("an in-retry table");
    assert_eq!(subscriptions_in(t, "cycle-row"), vec![in_retry]);
    let row = cycle_row(t, in_retry);
    assert!(row.contains(CYCLE), "{row}");
    assert!(row.contains("1 of 3"), "{row}");
    let next_text = next_attempt
        .replace_nanosecond(0)
        .expect("whole seconds")
        .format(&time::format_description::well_known::Rfc3339)
        .expect("format");
    assert!(row.contains(&next_text), "{next_text} in {row}");
    assert!(row.contains("card_declined"), "{row}");
    assert!(
        !html.contains("<script>alert"),
        "unescaped stored text: {row}"
    );
    assert!(
        row.contains("&lt;script&gt;alert('billing')&lt;/script&gt; declined"),
        "{row}"
    );
    let link = format!("/intents?before={}#intent-{retry_public}", retry_intent + 1);
    assert!(row.contains(&format!("href=\"{link}\"")), "{link} in {row}");

    // Charging: the first rows and how many there are in all.
    let t = table(html, "charging").expect("a charging table");
    let shown = subscriptions_in(t, "cycle-row");
    assert_eq!(shown, charging[..SHOWN].to_vec());
    assert!(html.contains("Showing the first 50 of 51"), "{html}");

    // Unpaid cycles: the past-due one and the one waiting for a method.
    let t = table(html, "unpaid-cycles").expect("an unpaid-cycles table");
    assert_eq!(subscriptions_in(t, "cycle-row"), vec![past_due, no_method]);
    assert!(cycle_row(t, past_due).contains("insufficient_funds"));
    assert!(cycle_row(t, no_method).contains("expired_card"));

    // The link opens the Outbound page at that charge, which names its subscription and cycle.
    let outbound = http.get(link.split('#').next().expect("path")).await;
    assert_eq!(outbound.status, 200);
    let row_start = outbound
        .text
        .find(&format!("id=\"intent-{retry_public}\""))
        .unwrap_or_else(|| panic!("the intent's row: {}", outbound.text));
    let row = &outbound.text[row_start..];
    let row = &row[..row.find("</tr>").expect("end of the row")];
    assert!(
        row.contains(&format!("subscription {in_retry}, cycle {CYCLE}")),
        "{row}"
    );

    // The overview says something is behind and links to the page.
    let mut figures = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        figures = http.get("/overview/figures").await.text;
        if figures.contains("id=\"billing-attention\"") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        figures.contains("1 subscription(s) past due, 1 waiting for a payment method"),
        "{figures}"
    );
    assert!(figures.contains("href=\"/billing\""), "{figures}");

    // The page reads the database on each request: a new payment method moves the past-due subscription's
    // cycle into retry (due now) at once.
    let updated = billing::update_payment_method(
        &mut pool.acquire().await.expect("connection"),
        past_due,
        "pm_console_new",
    )
    .await
    .expect("update the method")
    .expect("the subscription");
    assert_eq!(updated.status, SubscriptionStatus::Active);
    let html = http.get("/billing").await.text;
    assert!(table(&html, "past-due").is_none(), "{html}");
    assert!(html.contains("No subscription is past due."), "{html}");
    let t = table(&html, "in-retry").expect("an in-retry table");
    assert_eq!(subscriptions_in(t, "cycle-row"), vec![past_due, in_retry]);
    let t = table(&html, "unpaid-cycles").expect("an unpaid-cycles table");
    assert_eq!(subscriptions_in(t, "cycle-row"), vec![no_method]);
}
