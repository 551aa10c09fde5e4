"""A merchant's server code charging through hookline's merchant API with Mercado Pago as the gateway (the
sandbox), and the official mercadopago SDK at the gateway: card tokens made with it (as the merchant's card form
would), payments found by hookline's `external_reference` (payment search), refunds read back. The notifications
flow from the sandbox to hookline's edge, so they complete intents. One scenario per run (SDK_SCENARIO or the
first argument, see `SCENARIOS`); one line per check; exit 1 on any failure.

Environment: common.py's (MP_API_BASE, MP_ACCESS_TOKEN, MP_PROVIDER — hookline's provider name, the same as the
sandbox's —, SANDBOX_CONTROL_BASE, HOOKLINE_API_BASE, HOOKLINE_API_KEY) and SDK_RUN (tags keys)."""
import os
import uuid

from common import (Checks, Hookline, charged_once, control, env, mp_sdk, report, scenario,
                    scenario_confirm_twice, scenario_faults, scenario_key_per_click,
                    scenario_lost_then_past_key_lifetime)

RUN = os.environ.get("SDK_RUN") or uuid.uuid4().hex[:12]
PAYER = {"email": "comprador@example.com.br", "identification": {"type": "CPF", "number": "12345678909"}}

# Mercado Pago's test cardholder names: what the card does.
HOLDERS = {"ok": "APRO", "decline": "OTHE"}


def cents(amount):
    """Mercado Pago amounts are decimal units; hookline's are minor units."""
    return round(float(amount) * 100)


class MercadoPagoGateway:
    def __init__(self):
        self.sdk = mp_sdk()
        self.provider = env("MP_PROVIDER", "mercadopago")

    def card_token(self, holder):
        """A card token made with the SDK, as the merchant's card form (Mercado Pago's JS) would make it."""
        result = self.sdk.card_token().create({
            "card_number": "5031433215406351", "expiration_month": 11, "expiration_year": 2030,
            "security_code": "123",
            "cardholder": {"name": holder, "identification": PAYER["identification"]},
        })
        if result["status"] != 201:
            raise RuntimeError(f"card token: {result}")
        return result["response"]["id"]

    def method(self, kind):
        if kind == "pix":
            return {"mercadopago": {"payment_method_id": "pix", "payer": PAYER}}
        return {"mercadopago": {"token": self.card_token(HOLDERS[kind]), "payment_method_id": "master",
                                "installments": 1, "payer": PAYER}}

    def order(self, amount, kind, **extra):
        body = {"provider": self.provider, "amount": amount, "currency": "brl", "customer": PAYER["email"],
                "description": f"pedido {RUN}"}
        if kind:
            body.update(self.method(kind))
        else:
            body["mercadopago"] = {"payment_method_id": "master", "installments": 1, "payer": PAYER}
        body.update(extra)
        return body

    def payments(self, intent_id):
        """Mercado Pago's payments for the intent, as the merchant finds them: search by external_reference (the
        query hookline itself uses), through the SDK's auto-paging."""
        found = list(self.sdk.payment().search_auto_paging_iter({"external_reference": intent_id}, limit=10))
        return [dict(p, amount=cents(p["transaction_amount"])) for p in found]

    def charges(self, intent_id):
        return [p for p in self.payments(intent_id) if p["status"] == "approved"]

    def refunds(self, payment_id):
        listed = self.sdk.refund().list_all(payment_id)
        if listed["status"] != 200:
            raise RuntimeError(f"refunds of {payment_id}: {listed}")
        return [dict(r, amount=cents(r["amount"])) for r in listed["response"]]


def pix(c, hl, gw):
    """Pix: the intent requires_action with the QR code data; the customer pays (the sandbox's control endpoint
    plays the bank); Mercado Pago's notification completes the intent."""
    status, created = hl.create(gw.order(2500, "pix"), f"{RUN}-pix")
    c.equal("create: 201", status, 201)
    intent, _ = hl.wait(created["id"], {"requires_action"})
    c.equal("requires_action", intent["status"], "requires_action")
    action = intent["next_action"] or {}
    c.equal("next_action: the Pix QR code", action.get("type"), "pix_qr_code")
    got = gw.sdk.payment().get(intent["provider_payment_id"])
    c.equal("at Mercado Pago: pending", (got["status"], got["response"]["status"]), (200, "pending"))
    data = got["response"]["point_of_interaction"]["transaction_data"]
    c.equal("the QR code shown is Mercado Pago's", action.get("qr_code"), data["qr_code"])
    c.equal("the QR image shown is Mercado Pago's", action.get("qr_code_base64"), data["qr_code_base64"])
    c.equal("the ticket shown is Mercado Pago's", action.get("ticket_url"), data["ticket_url"])
    c.equal("at Mercado Pago: carries hookline's reference", got["response"]["external_reference"], intent["id"])
    c.equal("nothing paid yet", gw.charges(intent["id"]), [])
    control(f"/_sandbox/pix/{gw.provider}/{intent['provider_payment_id']}", {"outcome": "paid"})
    done, seen = hl.wait(intent["id"], {"succeeded"})
    c.check("no detour after the payment", "failed" not in seen and "needs_attention" not in seen, seen)
    charged_once(c, gw, done, "Pix")
    c.equal("next_action cleared once paid", done["next_action"], None)


def decline(c, hl, gw):
    """A rejected card: the intent is failed with Mercado Pago's status_detail and a message; the order can then
    be paid with another card."""
    order = f"pedido-{RUN}"
    status, created = hl.create(gw.order(1500, "decline", order_reference=order), f"{RUN}-declined")
    c.equal("create: 201", status, 201)
    intent, _ = hl.wait(created["id"], set())
    c.equal("rejected: failed", intent["status"], "failed")
    found = gw.payments(intent["id"])
    c.equal("one payment at Mercado Pago", len(found), 1)
    if found:
        c.equal("at Mercado Pago: rejected", found[0]["status"], "rejected")
        c.equal("failure_code is Mercado Pago's status_detail", intent["failure_code"], found[0]["status_detail"])
        c.equal("the payment is the one hookline recorded", str(found[0]["id"]), intent["provider_payment_id"])
    c.check("failure_message says why", bool(intent["failure_message"]), intent["failure_message"])
    c.equal("nothing charged", gw.charges(intent["id"]), [])
    report("declined", intent["id"])
    status, retry = hl.create(gw.order(1500, "ok", order_reference=order), f"{RUN}-another-card")
    c.equal("the same order with another card: 201", status, 201)
    paid, _ = hl.wait(retry["id"], {"succeeded"})
    charged_once(c, gw, paid, "another card")


def pix_expired(c, hl, gw):
    """The Pix QR code expires unpaid: Mercado Pago cancels the payment and notifies; the intent is canceled as
    expired (final, the QR code no longer offered, nothing charged) and the order can be paid again."""
    order = f"pedido-{RUN}"
    status, created = hl.create(gw.order(2600, "pix", order_reference=order), f"{RUN}-pix-expired")
    c.equal("create: 201", status, 201)
    intent, _ = hl.wait(created["id"], {"requires_action"})
    c.equal("requires_action", intent["status"], "requires_action")
    control(f"/_sandbox/pix/{gw.provider}/{intent['provider_payment_id']}", {"outcome": "expired"})
    got = gw.sdk.payment().get(intent["provider_payment_id"])["response"]
    c.equal("at Mercado Pago: cancelled", got["status"], "cancelled")
    done, seen = hl.wait(intent["id"], set())
    c.equal("the expired Pix: canceled", done["status"], "canceled")
    c.equal("canceled as expired (Mercado Pago's status_detail)", done["cancellation_reason"], got.get("status_detail"))
    c.equal("the QR code no longer offered", done["next_action"], None)
    c.equal("nothing charged", gw.charges(intent["id"]), [])
    report("declined", intent["id"])
    status, retry = hl.create(gw.order(2600, "ok", order_reference=order), f"{RUN}-pix-expired-card")
    c.equal("the same order paid by card: 201", status, 201)
    paid, _ = hl.wait(retry["id"], {"succeeded"})
    charged_once(c, gw, paid, "by card")


SCENARIOS = {
    "pix": pix,
    "pix_expired": pix_expired,
    "decline": decline,
    "key_per_click": lambda c, hl, gw: scenario_key_per_click(c, hl, gw, RUN),
    "confirm_twice": lambda c, hl, gw: scenario_confirm_twice(c, hl, gw, RUN),
    "faults": lambda c, hl, gw: scenario_faults(c, hl, gw, RUN),
    "key_lifetime": lambda c, hl, gw: scenario_lost_then_past_key_lifetime(c, hl, gw, RUN),
}


if __name__ == "__main__":
    name = scenario(SCENARIOS)
    Checks().run(lambda c: SCENARIOS[name](c, Hookline(), MercadoPagoGateway()))
