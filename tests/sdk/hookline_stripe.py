"""A merchant's server code charging through hookline's merchant API with Stripe as the gateway (the sandbox), and
the official stripe-python SDK at the gateway: the merchant reads Stripe with it (its PaymentIntents found by
hookline's `metadata['hookline_intent']`, refunds) and counts what was charged. The webhooks flow from the
sandbox to hookline's edge, so webhooks complete intents. One scenario per run (SDK_SCENARIO or the first
argument, see `SCENARIOS`); one line per check; exit 1 on any failure.

Environment: common.py's (STRIPE_API_BASE, STRIPE_API_KEY, STRIPE_PROVIDER — hookline's provider name, the same
as the sandbox's —, SANDBOX_CONTROL_BASE, HOOKLINE_API_BASE, HOOKLINE_API_KEY) and SDK_RUN (tags keys)."""
import os
import uuid

from common import (Checks, Hookline, charged_once, control, env, report, scenario, scenario_confirm_twice,
                    scenario_faults, scenario_key_per_click, scenario_lost_then_past_key_lifetime, stripe_client)

RUN = os.environ.get("SDK_RUN") or uuid.uuid4().hex[:12]
RETURN_URL = "https://loja.example/retorno"

# Stripe's test payment methods: what the customer's card does.
METHODS = {
    "ok": "pm_card_visa",
    "decline": "pm_card_chargeDeclined",
    "3ds": "pm_card_threeDSecure2Required",
}


class StripeGateway:
    def __init__(self):
        self.client = stripe_client()
        self.provider = env("STRIPE_PROVIDER", "stripe")

    def method(self, kind):
        return {"stripe": {"payment_method": METHODS[kind], "return_url": RETURN_URL}}

    def order(self, amount, kind, **extra):
        body = {"provider": self.provider, "amount": amount, "currency": "brl", "customer": f"cliente-{RUN}",
                "description": f"pedido {RUN}"}
        body.update(self.method(kind) if kind else {"stripe": {"return_url": RETURN_URL}})
        body.update(extra)
        return body

    def payment_intents(self, intent_id):
        """Stripe's PaymentIntents for the intent, as the merchant finds them: search by hookline's metadata (the
        query hookline itself uses), cross-checked against the full list (auto-paging, filtered here)."""
        query = f"metadata['hookline_intent']:'{intent_id}'"
        found = [pi.to_dict() for pi in self.client.v1.payment_intents.search(params={"query": query}).data]
        listed = [pi.to_dict() for pi in self.client.v1.payment_intents.list(params={"limit": 100}).auto_paging_iter()
                  if pi.metadata.to_dict().get("hookline_intent") == intent_id]
        if sorted(p["id"] for p in found) != sorted(p["id"] for p in listed):
            raise RuntimeError(f"search {[p['id'] for p in found]} and list {[p['id'] for p in listed]} disagree")
        return found

    def charges(self, intent_id):
        """Charged = the PaymentIntents that succeeded (a declined one stays requires_payment_method)."""
        return [p for p in self.payment_intents(intent_id) if p["status"] in ("succeeded", "processing")]

    def refunds(self, payment_id):
        return [r.to_dict() for r in self.client.v1.refunds.list(params={"payment_intent": payment_id}).data]


def three_d_secure(c, hl, gw):
    """3-D Secure: the intent requires_action with Stripe's next_action (the redirect); the customer
    authenticates (the sandbox's control endpoint plays the bank's page); Stripe's webhook completes it."""
    status, created = hl.create(gw.order(4100, "3ds"), f"{RUN}-3ds")
    c.equal("create: 201", status, 201)
    intent, _ = hl.wait(created["id"], {"requires_action"})
    c.equal("requires_action", intent["status"], "requires_action")
    action = intent["next_action"] or {}
    c.equal("next_action: Stripe's redirect", action.get("type"), "redirect_to_url")
    c.equal("next_action: back to the return_url", (action.get("redirect_to_url") or {}).get("return_url"), RETURN_URL)
    pi = gw.client.v1.payment_intents.retrieve(intent["provider_payment_id"])
    c.equal("at Stripe: requires_action", pi.status, "requires_action")
    c.equal("at Stripe: carries hookline's reference", pi.metadata.to_dict().get("hookline_intent"), intent["id"])
    c.equal("the redirect shown is Stripe's", action.get("redirect_to_url", {}).get("url"),
            pi.next_action.redirect_to_url.url)
    c.equal("nothing charged before the challenge", gw.charges(intent["id"]), [])
    control(f"/_sandbox/payment_intents/{gw.provider}/{pi.id}/authenticate", {"outcome": "succeed"})
    done, seen = hl.wait(intent["id"], {"succeeded"})
    c.check("no detour after the challenge", "failed" not in seen and "needs_attention" not in seen, seen)
    charged_once(c, gw, done, "3-D Secure")
    c.equal("next_action cleared once paid", done["next_action"], None)


def decline(c, hl, gw):
    """A declined card: the intent is failed with Stripe's decline code and message (an outcome, not an
    incident); the order can then be paid with another card (the failed intent no longer holds the order)."""
    order = f"pedido-{RUN}"
    status, created = hl.create(gw.order(1500, "decline", order_reference=order), f"{RUN}-declined")
    c.equal("create: 201", status, 201)
    intent, _ = hl.wait(created["id"], set())
    c.equal("declined: failed", intent["status"], "failed")
    found = gw.payment_intents(intent["id"])
    c.equal("one PaymentIntent at Stripe", len(found), 1)
    if found:
        error = found[0].get("last_payment_error") or {}
        c.equal("at Stripe: waits for another method", found[0]["status"], "requires_payment_method")
        c.equal("failure_code is Stripe's decline code", intent["failure_code"],
                error.get("decline_code") or error.get("code"))
        c.equal("failure_message is Stripe's message", intent["failure_message"], error.get("message"))
    c.equal("nothing charged", gw.charges(intent["id"]), [])
    report("declined", intent["id"])
    status, retry = hl.create(gw.order(1500, "ok", order_reference=order), f"{RUN}-another-card")
    c.equal("the same order with another card: 201", status, 201)
    paid, _ = hl.wait(retry["id"], {"succeeded"})
    charged_once(c, gw, paid, "another card")


def three_d_secure_failed(c, hl, gw):
    """The customer fails the 3-D Secure challenge: Stripe's PaymentIntent goes back to requires_payment_method
    with a last_payment_error and its webhook says payment_failed; the intent is failed (final, nothing charged,
    the challenge no longer offered) and the order can be paid with another card."""
    order = f"pedido-{RUN}"
    status, created = hl.create(gw.order(4200, "3ds", order_reference=order), f"{RUN}-3ds-fail")
    c.equal("create: 201", status, 201)
    intent, _ = hl.wait(created["id"], {"requires_action"})
    c.equal("requires_action", intent["status"], "requires_action")
    control(f"/_sandbox/payment_intents/{gw.provider}/{intent['provider_payment_id']}/authenticate",
            {"outcome": "fail"})
    pi = gw.client.v1.payment_intents.retrieve(intent["provider_payment_id"])
    c.equal("at Stripe: requires_payment_method", pi.status, "requires_payment_method")
    done, seen = hl.wait(intent["id"], set())
    c.equal("the failed challenge: failed", done["status"], "failed")
    error = (pi.to_dict().get("last_payment_error") or {})
    c.equal("failure_code is Stripe's", done["failure_code"], error.get("decline_code") or error.get("code"))
    c.equal("the challenge no longer offered", done["next_action"], None)
    c.equal("nothing charged", gw.charges(intent["id"]), [])
    report("declined", intent["id"])
    status, retry = hl.create(gw.order(4200, "ok", order_reference=order), f"{RUN}-3ds-fail-another-card")
    c.equal("the same order with another card: 201", status, 201)
    paid, _ = hl.wait(retry["id"], {"succeeded"})
    charged_once(c, gw, paid, "another card")


SCENARIOS = {
    "3ds": three_d_secure,
    "3ds_failed": three_d_secure_failed,
    "decline": decline,
    "key_per_click": lambda c, hl, gw: scenario_key_per_click(c, hl, gw, RUN),
    "confirm_twice": lambda c, hl, gw: scenario_confirm_twice(c, hl, gw, RUN),
    "faults": lambda c, hl, gw: scenario_faults(c, hl, gw, RUN),
    "key_lifetime": lambda c, hl, gw: scenario_lost_then_past_key_lifetime(c, hl, gw, RUN),
}


if __name__ == "__main__":
    name = scenario(SCENARIOS)
    Checks().run(lambda c: SCENARIOS[name](c, Hookline(), StripeGateway()))
