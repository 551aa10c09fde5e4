//! Generic events the payments worker ignores, one per scheme that has no payments of its own: GitHub `ping`,
//! Shopify `shop/update`, and a Standard Webhooks / Svix `ping`.

use hookline_signature::Scheme;
use serde_json::json;

use crate::{rfc3339, Event, Faker};

/// Event `n` of the run for `scheme`, as configured provider `provider` would receive it. Every delivery gets
/// its own delivery id (GitHub and Shopify draw a UUID, Standard Webhooks and Svix a `msg_` id from the run).
pub fn event(f: &mut Faker, scheme: Scheme, provider: &str, n: usize) -> Event {
    let delivery = f.rng.uuid();
    match scheme {
        Scheme::Github => {
            let hook_id = 400_000_000 + f.rng.range(0, 99_999_999);
            let body = json!({
                "zen": *f.rng.pick(&["Design for failure.", "Keep it logically awesome.", "Practicality beats purity."]),
                "hook_id": hook_id,
                "hook": {
                    "type": "Repository", "id": hook_id, "name": "web", "active": true,
                    "events": ["push", "pull_request"],
                    "config": { "content_type": "json", "insecure_ssl": "0", "url": format!("https://hooks.example.com.br/webhooks/{provider}") },
                    "created_at": rfc3339(f.now), "updated_at": rfc3339(f.now),
                },
                "repository": {
                    "id": 700_000_000 + n, "name": format!("loja-{}-{n}", f.run),
                    "full_name": format!("hookline-sim/loja-{}-{n}", f.run), "private": true,
                    "owner": { "login": "hookline-sim", "id": 1_000_001, "type": "Organization" },
                },
                "sender": { "login": "hookline-sim-bot", "id": 1_000_002, "type": "Bot" },
            });
            Event::json("ping", &body, delivery)
        }
        Scheme::Shopify => {
            let body = json!({
                "id": 60_000_000_000u64 + n as u64,
                "name": format!("Loja Simulada {}", f.run),
                "email": "contato@example.com.br",
                "domain": "loja.example.com.br",
                "myshopify_domain": format!("loja-{}.myshopify.com", f.run),
                "country_code": "BR",
                "currency": "BRL",
                "iana_timezone": "America/Sao_Paulo",
                "plan_name": "basic",
                "updated_at": rfc3339(f.now),
            });
            Event::json("shop/update", &body, delivery)
        }
        _ => {
            let body = json!({
                "type": "ping",
                "timestamp": rfc3339(f.now),
                "data": { "message": "hookline simulate", "sequence": n, "run": f.run },
            });
            Event::json("ping", &body, format!("msg_{}{n:06}", f.run))
        }
    }
}
