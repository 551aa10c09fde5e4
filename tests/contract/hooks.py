"""Schemathesis hooks for the merchant API's contract test (tests/it/contract.rs, SCHEMATHESIS_HOOKS=hooks).

A generated create names a random provider and currency, which the API rightly refuses (422 provider_unknown):
nothing would ever be created, and the stateful phase would never follow a link. A schema-valid provider name
(a string of 1 to 64 characters) becomes the configured one and a schema-valid currency (3 characters) becomes
BRL, so creates get through; values that break the schema (the negative cases) are left as they are.
"""
import os

import schemathesis

PROVIDER = os.environ.get("HOOKLINE_CONTRACT_PROVIDER", "stripe")


@schemathesis.hook
def map_body(context, body):
    operation = context.operation
    if operation is None or operation.method.upper() != "POST" or operation.path != "/v1/payment_intents":
        return body
    if not isinstance(body, dict):
        return body
    provider = body.get("provider")
    if isinstance(provider, str) and 1 <= len(provider) <= 64:
        body["provider"] = PROVIDER
    currency = body.get("currency")
    if isinstance(currency, str) and len(currency) == 3:
        body["currency"] = "brl"
    return body
