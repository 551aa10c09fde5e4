"""A merchant's server code with the official stripe-python SDK, against the Stripe API at STRIPE_API_BASE:
customers and saved cards, charging, a decline, 3-D Secure completed by the sandbox's control API, list and
search by metadata, refunds, idempotent retries, manual capture (partial, retried, refused twice) and a void. One line per check; exit 1 on any failure."""
import os
import uuid

import stripe

from common import Checks, control, env, stripe_client

RUN = os.environ.get("SDK_RUN") or uuid.uuid4().hex[:12]  # tags what this run creates (keys, metadata)


def main(c: Checks):
    client = stripe_client()
    v1 = client.v1
    provider = env("STRIPE_PROVIDER", "stripe")

    customer = v1.customers.create(params={"email": "buyer@example.com", "name": "Ana"})
    c.check("customer created", customer.id.startswith("cus_"), customer.id)
    c.equal("customer retrieved", v1.customers.retrieve(customer.id).email, "buyer@example.com")

    saved = v1.payment_methods.attach("pm_card_visa", params={"customer": customer.id})
    c.check("pm_card_visa attached as a pm_ of the customer", saved.id.startswith("pm_") and saved.customer == customer.id,
            f"{saved.id} {saved.customer}")
    c.equal("saved card retrieved", v1.payment_methods.retrieve(saved.id).card.last4, "4242")

    # Create, then confirm (the key is born with the intent; the confirm reuses it).
    key = f"{RUN}-order-1"
    intent = v1.payment_intents.create(
        params={"amount": 2000, "currency": "brl", "customer": customer.id,
                "metadata": {"hookline_intent": f"pi_hl_{RUN}_1"}},
        options={"idempotency_key": key},
    )
    c.equal("created intent requires a payment method", intent.status, "requires_payment_method")
    try:
        v1.payment_intents.confirm(intent.id)
        c.check("confirm without a payment method refused", False, "no error")
    except stripe.InvalidRequestError as e:
        c.equal("confirm without a payment method refused", e.code, "payment_intent_unexpected_state")
    confirmed = v1.payment_intents.confirm(intent.id, params={"payment_method": saved.id},
                                           options={"idempotency_key": key + "-confirm"})
    c.equal("confirmed with the saved card: succeeded", confirmed.status, "succeeded")
    again = v1.payment_intents.confirm(intent.id, params={"payment_method": saved.id},
                                       options={"idempotency_key": key + "-confirm"})
    c.equal("a retried confirm with the same key answers the same intent", again.latest_charge, confirmed.latest_charge)
    retried = v1.payment_intents.create(
        params={"amount": 2000, "currency": "brl", "customer": customer.id,
                "metadata": {"hookline_intent": f"pi_hl_{RUN}_1"}},
        options={"idempotency_key": key},
    )
    c.equal("a retried create with the same key returns the same object", retried.id, intent.id)

    # A decline is a CardError with its decline code, and the intent waits for another method.
    try:
        v1.payment_intents.create(params={"amount": 1500, "currency": "brl", "confirm": True,
                                          "payment_method": "pm_card_chargeDeclinedInsufficientFunds"})
        c.check("declined card raises CardError", False, "no error")
    except stripe.CardError as e:
        c.equal("declined card raises CardError with decline_code", e.error.decline_code, "insufficient_funds")
        c.equal("the declined intent requires a payment method", e.error.payment_intent.status, "requires_payment_method")
    try:
        v1.payment_intents.create(params={"amount": 1500, "currency": "brl", "confirm": True,
                                          "payment_method": "pm_card_chargeDeclined"})
        c.check("generic decline raises CardError", False, "no error")
    except stripe.CardError as e:
        c.equal("generic decline code", (e.code, e.error.decline_code), ("card_declined", "generic_decline"))

    # 3-D Secure: requires_action with a redirect, completed by the sandbox's control API.
    secure = v1.payment_intents.create(params={
        "amount": 3100, "currency": "brl", "confirm": True, "customer": customer.id,
        "payment_method": "pm_card_threeDSecure2Required", "return_url": "https://shop.example/back",
        "metadata": {"hookline_intent": f"pi_hl_{RUN}_3ds"},
    })
    c.equal("3-D Secure card: requires_action", secure.status, "requires_action")
    c.equal("next_action redirects", secure.next_action.type, "redirect_to_url")
    c.equal("redirect returns to the return_url", secure.next_action.redirect_to_url.return_url, "https://shop.example/back")
    control(f"/_sandbox/payment_intents/{provider}/{secure.id}/authenticate", {"outcome": "succeed"})
    c.equal("after the challenge: succeeded", v1.payment_intents.retrieve(secure.id).status, "succeeded")
    try:
        off = v1.payment_methods.attach("pm_card_authenticationRequired", params={"customer": customer.id})
        v1.payment_intents.create(params={"amount": 900, "currency": "brl", "confirm": True, "off_session": True,
                                          "customer": customer.id, "payment_method": off.id})
        c.check("off-session 3-D Secure card declined", False, "no error")
    except stripe.CardError as e:
        c.equal("off-session 3-D Secure card: authentication_required", e.code, "authentication_required")

    # List and search find the intents by customer and by hookline's metadata.
    listed = v1.payment_intents.list(params={"customer": customer.id, "limit": 100})
    ids = [i.id for i in listed.data]
    c.check("list by customer finds both intents", intent.id in ids and secure.id in ids, ids)
    found = v1.payment_intents.search(params={"query": f"metadata['hookline_intent']:'pi_hl_{RUN}_1' AND status:'succeeded'"})
    c.equal("search by metadata finds exactly the intent", [i.id for i in found.data], [intent.id])
    c.equal("search result object", found.object, "search_result")
    all_ids = [i.id for i in v1.payment_intents.list(params={"limit": 2}).auto_paging_iter()]
    c.check("auto-paging list reaches every intent", intent.id in all_ids and secure.id in all_ids, len(all_ids))

    # Refund with metadata, listed by payment intent.
    refund = v1.refunds.create(params={"payment_intent": intent.id, "amount": 500,
                                       "metadata": {"hookline_refund": f"re_hl_{RUN}"}},
                               options={"idempotency_key": f"{RUN}-refund"})
    c.equal("refund succeeded", refund.status, "succeeded")
    same = v1.refunds.create(params={"payment_intent": intent.id, "amount": 500,
                                     "metadata": {"hookline_refund": f"re_hl_{RUN}"}},
                             options={"idempotency_key": f"{RUN}-refund"})
    c.equal("a retried refund with the same key is the same refund", same.id, refund.id)
    refunds = v1.refunds.list(params={"payment_intent": intent.id})
    c.equal("refunds listed by payment intent", [r.id for r in refunds.data], [refund.id])
    c.equal("refund metadata echoed", refunds.data[0].metadata["hookline_refund"], f"re_hl_{RUN}")

    # Manual capture: authorized, captured in part once under a key (a retry replays it), a second capture raises
    # InvalidRequestError carrying the intent; another authorization voided by cancel.
    held = v1.payment_intents.create(params={"amount": 4000, "currency": "brl", "capture_method": "manual",
                                             "confirm": True, "payment_method": "pm_card_visa"})
    c.equal("manual capture: requires_capture, all of it capturable",
            (held.status, held.amount_capturable, held.amount_received), ("requires_capture", 4000, 0))
    captured = v1.payment_intents.capture(held.id, params={"amount_to_capture": 2500},
                                          options={"idempotency_key": f"{RUN}-capture"})
    c.equal("captured in part: succeeded", (captured.status, captured.amount_received, captured.amount_capturable),
            ("succeeded", 2500, 0))
    same = v1.payment_intents.capture(held.id, params={"amount_to_capture": 2500},
                                      options={"idempotency_key": f"{RUN}-capture"})
    c.equal("a retried capture with the same key answers the same", (same.status, same.amount_received),
            ("succeeded", 2500))
    charge = v1.charges.retrieve(captured.latest_charge)
    c.equal("the charge captured 2500 and released the rest",
            (charge.captured, charge.amount_captured, charge.amount_refunded), (True, 2500, 1500))
    try:
        v1.payment_intents.capture(held.id)
        c.check("a second capture is refused", False, "no error")
    except stripe.InvalidRequestError as e:
        c.equal("a second capture is refused", e.code, "payment_intent_unexpected_state")
        c.equal("the refusal carries the intent", e.error.payment_intent.status, "succeeded")
    hold = v1.payment_intents.create(params={"amount": 1800, "currency": "brl", "capture_method": "manual",
                                             "confirm": True, "payment_method": "pm_card_visa"})
    voided = v1.payment_intents.cancel(hold.id)
    c.equal("void: canceled, nothing capturable", (voided.status, voided.amount_capturable), ("canceled", 0))


if __name__ == "__main__":
    Checks().run(main)
