"""The checkout flow driven by a client GENERATED from hookline's OpenAPI document (openapi-python-client), as a
merchant's developer would use it: create the intent at checkout (confirm later), confirm it twice (a double
click), wait for it to succeed. One line per check; exit 1 on a failed one. Run by tests/it/contract.rs with
the generated package `hookline_client` on PYTHONPATH and HOOKLINE_API_URL, HOOKLINE_API_KEY, HOOKLINE_PROVIDER,
HOOKLINE_ORDER set.
"""
import os
import sys
import time

from hookline_client import AuthenticatedClient
from hookline_client.api.payment_intents import (
    confirm_payment_intent,
    create_payment_intent,
    get_payment_intent,
)
from hookline_client.models import (
    ConfirmPaymentIntent,
    CreatePaymentIntent,
    IntentStatus,
    PaymentIntent,
    StripeParams,
)

failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok " if ok else "FAILED ") + name + (f": {detail}" if detail and not ok else ""), flush=True)
    if not ok:
        failed += 1


client = AuthenticatedClient(
    base_url=os.environ["HOOKLINE_API_URL"], token=os.environ["HOOKLINE_API_KEY"], timeout=20.0
)
order = os.environ["HOOKLINE_ORDER"]

created = create_payment_intent.sync_detailed(
    client=client,
    idempotency_key=f"checkout-{order}",
    body=CreatePaymentIntent(
        provider=os.environ["HOOKLINE_PROVIDER"],
        amount=2590,
        currency="brl",
        order_reference=order,
        confirm=False,
    ),
)
check("create answers 201", created.status_code == 201, f"{created.status_code} {created.content!r}")
intent = created.parsed
check("create parses as PaymentIntent", isinstance(intent, PaymentIntent), repr(intent))
if failed:
    sys.exit(1)
check("created waits for its confirm", intent.status == IntentStatus.REQUIRES_CONFIRMATION, str(intent.status))

answers = []
for click in range(2):
    confirmed = confirm_payment_intent.sync_detailed(
        intent.id,
        client=client,
        body=ConfirmPaymentIntent(stripe=StripeParams(payment_method="pm_card_visa")),
    )
    answers.append(confirmed)
    check(f"confirm {click + 1} answers 200", confirmed.status_code == 200, f"{confirmed.status_code} {confirmed.content!r}")
    check(f"confirm {click + 1} is the same intent", getattr(confirmed.parsed, "id", None) == intent.id)

deadline = time.monotonic() + 60
status = None
while time.monotonic() < deadline:
    got = get_payment_intent.sync_detailed(intent.id, client=client)
    status = getattr(got.parsed, "status", None)
    if status in (IntentStatus.SUCCEEDED, IntentStatus.FAILED, IntentStatus.NEEDS_ATTENTION):
        break
    time.sleep(0.2)
check("the intent succeeds", status == IntentStatus.SUCCEEDED, str(status))
check("it received the whole amount", getattr(got.parsed, "amount_received", None) == 2590)
sys.exit(1 if failed else 0)
