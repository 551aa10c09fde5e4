"""Schemathesis hooks for the merchant API's contract test (tests/it/contract.rs, SCHEMATHESIS_HOOKS=hooks).

A generated create names a random provider and currency, which the API rightly refuses (422 provider_unknown):
nothing would ever be created, and the stateful phase would never follow a link. A schema-valid provider name
(a string of 1 to 64 characters) becomes the configured one and a schema-valid currency (3 characters) becomes
BRL, so creates get through; values that break the schema (the negative cases) are left as they are.

A subscription's create and update are mapped the same way: its saved Stripe method (schema-valid strings) becomes
a customer and a PaymentMethod shaped like Stripe's ids, and a schema-valid `anchor` (an RFC 3339 time) becomes
now, within the anchor's bounds.
"""
import datetime
import os

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
        _provider_and_currency(body)
    elif operation.path == "/v1/subscriptions":
        _provider_and_currency(body)
        _saved_method(body)
        _anchor(body)
    elif operation.path == "/v1/subscriptions/{id}":
        _saved_method(body)
    return body
