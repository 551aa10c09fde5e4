"""hookline's signed facts, verified by the official Standard Webhooks library (PyPI `standardwebhooks`): what a
merchant's receiver does with the secret `POST /v1/webhook_endpoints` (or `rotate_secret`) returned.

Environment (set by tests/it/webhook_endpoints.rs):
  HOOKLINE_WEBHOOKS  -- a JSON file: a list of {"name", "secret", "headers": {...}, "body": "...", "expect": bool}
                        — each received request, a secret, and whether that secret must verify it

One line per check (`ok - …` / `FAIL - …`), then `N passed, N failed`; exit 1 on a failed check.
"""
import json
import os
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main():
    with open(os.environ["HOOKLINE_WEBHOOKS"], encoding="utf-8") as f:
        cases = json.load(f)
    passed = failed = 0
    for case in cases:
        try:
            payload = Webhook(case["secret"]).verify(case["body"], case["headers"])
            verified = payload.get("id") == case["headers"].get("webhook-id")
        except WebhookVerificationError as e:
            verified = False
            why = str(e)
        else:
            why = "verified"
        if verified == case["expect"]:
            passed += 1
            print(f"ok - {case['name']} ({why})")
        else:
            failed += 1
            print(f"FAIL - {case['name']}: expected {'a valid' if case['expect'] else 'an invalid'} signature ({why})")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not cases else 0)


if __name__ == "__main__":
    main()
