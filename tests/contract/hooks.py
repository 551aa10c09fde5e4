"""Schemathesis hooks for the merchant API's contract test (tests/it/contract.rs, SCHEMATHESIS_HOOKS=hooks).

A generated create names a random provider and currency, which the API rightly refuses (422 provider_unknown):
nothing would ever be created, and the stateful phase would never follow a link. A schema-valid provider name
(a string of 1 to 64 characters) becomes the configured one and a schema-valid currency (3 characters) becomes
BRL, so creates get through; values that break the schema (the negative cases) are left as they are.

An intent's create keeps more of its generated cases valid the same way: a schema-valid Stripe object's ids
become Stripe-shaped ones and its `return_url` an https URL, and a generated `subscription_id` (which names no
subscription: 422 `subscription_unknown`) is dropped with its `billing_cycle` — without it a run may create no
intent at all, and the stateful phase then follows no intent link.

A subscription's create and update are mapped the same way: its saved Stripe method (schema-valid strings) becomes
a customer and a PaymentMethod shaped like Stripe's ids, and a schema-valid `anchor` (an RFC 3339 time) becomes
now, within the anchor's bounds.
"""
import datetime
import os
import re

import schemathesis

PROVIDER = os.environ.get("HOOKLINE_CONTRACT_PROVIDER", "stripe")
CUSTOMER = "cus_contract"


def _schema_string(value, longest):
    return isinstance(value, str) and 1 <= len(value) <= longest


def _provider_and_currency(body):
    if _schema_string(body.get("provider"), 64):
        body["provider"] = PROVIDER
    currency = body.get("currency")
    if isinstance(currency, str) and len(currency) == 3:
        body["currency"] = "brl"


def _saved_method(body):
    stripe = body.get("stripe")
    if not isinstance(stripe, dict):
        return
    if _schema_string(stripe.get("customer"), 255):
        stripe["customer"] = CUSTOMER
    if _schema_string(stripe.get("payment_method"), 255):
        stripe["payment_method"] = "pm_card_visa"


def _intent(body):
    _provider_and_currency(body)
    _saved_method(body)
    stripe = body.get("stripe")
    if isinstance(stripe, dict) and _schema_string(stripe.get("return_url"), 2000):
        stripe["return_url"] = "https://shop.example/return"
    # Only a schema-valid pair is dropped: a negative case stays negative.
    subscription, cycle = body.get("subscription_id"), body.get("billing_cycle")
    if (
        isinstance(subscription, int)
        and not isinstance(subscription, bool)
        and subscription >= 1
        and isinstance(cycle, str)
        and re.fullmatch(r"[0-9]{4}-(0[1-9]|1[0-2])", cycle)
    ):
        del body["subscription_id"]
        del body["billing_cycle"]


def _anchor(body):
    anchor = body.get("anchor")
    if not _schema_string(anchor, 64):
        return
    try:
        datetime.datetime.fromisoformat(anchor.replace("Z", "+00:00"))
    except ValueError:
        return
    body["anchor"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@schemathesis.hook
def map_body(context, body):
    operation = context.operation
    if operation is None or operation.method.upper() != "POST" or not isinstance(body, dict):
        return body
    if operation.path == "/v1/payment_intents":
        _intent(body)
    elif operation.path == "/v1/subscriptions":
        _provider_and_currency(body)
        _saved_method(body)
        _anchor(body)
    elif operation.path == "/v1/subscriptions/{id}":
        _saved_method(body)
    return body
