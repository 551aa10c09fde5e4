"""A merchant's server code with the official mercadopago SDK, against the Mercado Pago API at MP_API_BASE: card
tokens (test cardholder names decide the outcome), card payments approved and rejected, a payment without a token
refused, Pix pending with its QR code then paid through the sandbox's control API, refund and refund read-back,
search by external_reference, a payment authorized then captured in part (`capture: false`, update with
`capture: true`), another cancelled (update with `status: cancelled`). One line per check; exit 1 on any failure."""
import os
import uuid

from common import Checks, control, env, mp_options, mp_sdk

RUN = os.environ.get("SDK_RUN") or uuid.uuid4().hex[:12]  # tags what this run creates (keys, metadata)


def card_token(sdk, holder):
    result = sdk.card_token().create({
        "card_number": "5031433215406351", "expiration_month": 11, "expiration_year": 2030,
        "security_code": "123",
        "cardholder": {"name": holder, "identification": {"type": "CPF", "number": "12345678909"}},
    })
    assert result["status"] == 201, result
    return result["response"]["id"]


def payment(reference, token=None, method="master", email="buyer@example.com"):
    body = {
        "transaction_amount": 100.0, "description": "Pedido", "payment_method_id": method, "installments": 1,
        "payer": {"email": email, "identification": {"type": "CPF", "number": "12345678909"}},
        "external_reference": reference,
    }
    if token:
        body["token"] = token
    return body


def main(c: Checks):
    sdk = mp_sdk()
    provider = env("MP_PROVIDER", "mercadopago")

    approved_ref = f"order-{RUN}-1"
    token = card_token(sdk, "APRO")
    c.check("card token created", len(token) == 32, token)
    created = sdk.payment().create(payment(approved_ref, token), mp_options(f"{RUN}-pay-1"))
    c.equal("APRO card: 201", created["status"], 201)
    paid = created["response"]
    c.equal("APRO card: approved", (paid["status"], paid["status_detail"]), ("approved", "accredited"))
    retry = sdk.payment().create(payment(approved_ref, token), mp_options(f"{RUN}-pay-1"))
    c.equal("a retry with the same X-Idempotency-Key is the same payment", retry["response"]["id"], paid["id"])

    rejected = sdk.payment().create(payment(f"order-{RUN}-2", card_token(sdk, "OTHE")), mp_options(f"{RUN}-pay-2"))
    c.equal("OTHE card: rejected", (rejected["response"]["status"], rejected["response"]["status_detail"]),
            ("rejected", "cc_rejected_other_reason"))
    no_token = sdk.payment().create(payment(f"order-{RUN}-3"), mp_options(f"{RUN}-pay-3"))
    c.equal("a card payment without a token is refused", no_token["status"], 400)
    no_email = sdk.payment().create(payment(f"order-{RUN}-4", card_token(sdk, "APRO"), email=""),
                                    mp_options(f"{RUN}-pay-4"))
    c.equal("a payment without payer.email is refused", no_email["status"], 400)

    pix = sdk.payment().create(payment(f"order-{RUN}-pix", method="pix"), mp_options(f"{RUN}-pix"))["response"]
    c.equal("Pix: pending waiting for the transfer", (pix["status"], pix["status_detail"]),
            ("pending", "pending_waiting_transfer"))
    data = pix["point_of_interaction"]["transaction_data"]
    c.check("Pix: QR code, image and ticket", data["qr_code"].startswith("000201") and data["qr_code_base64"]
            and data["ticket_url"].startswith("https://"), data)
    c.check("Pix: expiration date", bool(pix["date_of_expiration"]), pix["date_of_expiration"])
    control(f"/_sandbox/pix/{provider}/{pix['id']}", {"outcome": "paid"})
    c.equal("Pix paid: approved", sdk.payment().get(pix["id"])["response"]["status"], "approved")

    refund = sdk.refund().create(paid["id"], {"amount": 30.0, "metadata": {"hookline_refund": f"re_hl_{RUN}"}},
                                 mp_options(f"{RUN}-refund"))
    c.equal("refund created", refund["status"], 201)
    refund_id = refund["response"]["id"]
    got = sdk.refund().get(paid["id"], refund_id)
    c.equal("refund read back", (got["status"], got["response"]["amount"]), (200, 30.0))
    c.equal("refund metadata echoed", got["response"]["metadata"].get("hookline_refund"), f"re_hl_{RUN}")
    listed = sdk.refund().list_all(paid["id"])
    c.equal("refunds listed", [r["id"] for r in listed["response"]], [refund_id])

    found = sdk.payment().search({"external_reference": approved_ref})
    c.equal("search by external_reference", [p["id"] for p in found["response"]["results"]], [paid["id"]])
    c.equal("search paging total", found["response"]["paging"]["total"], 1)
    every = list(sdk.payment().search_auto_paging_iter({"external_reference": approved_ref}, limit=1))
    c.equal("auto-paging search", [p["id"] for p in every], [paid["id"]])

    # Authorize now, capture later (in part); a second capture refused; another authorization cancelled.
    hold = payment(f"order-{RUN}-hold", card_token(sdk, "APRO"))
    hold["capture"] = False
    held = sdk.payment().create(hold, mp_options(f"{RUN}-hold"))["response"]
    c.equal("capture false: authorized, pending capture", (held["status"], held["status_detail"], held["captured"]),
            ("authorized", "pending_capture", False))
    captured = sdk.payment().update(held["id"], {"capture": True, "transaction_amount": 80.0},
                                    mp_options(f"{RUN}-capture"))
    c.equal("captured 80.00 of 100.00: approved", (captured["status"], captured["response"]["status"],
                                                   captured["response"]["captured"],
                                                   captured["response"]["transaction_amount"]),
            (200, "approved", True, 80.0))
    again = sdk.payment().update(held["id"], {"capture": True}, mp_options(f"{RUN}-capture-2"))
    c.equal("a second capture is refused", again["status"], 400)
    void = payment(f"order-{RUN}-void", card_token(sdk, "APRO"))
    void["capture"] = False
    void_id = sdk.payment().create(void, mp_options(f"{RUN}-void"))["response"]["id"]
    cancelled = sdk.payment().update(void_id, {"status": "cancelled"}, mp_options(f"{RUN}-cancel"))
    c.equal("cancelled by the collector", (cancelled["status"], cancelled["response"]["status"],
                                           cancelled["response"]["status_detail"]),
            (200, "cancelled", "by_collector"))


if __name__ == "__main__":
    Checks().run(main)
