"""Shared by the SDK scripts: one line per check, a non-zero exit on any failed check, the official SDKs pointed
at a local base URL, the sandbox's control API, and hookline's merchant API.

Environment (set by tests/src/sdk.rs, or by hand; see README.md):
  STRIPE_API_BASE, STRIPE_API_KEY        -- the Stripe API (the sandbox) and its secret key
  MP_API_BASE, MP_ACCESS_TOKEN           -- the Mercado Pago API (the sandbox) and its access token
  SANDBOX_CONTROL_BASE                   -- the sandbox's base URL (its /_sandbox/... control API)
  STRIPE_PROVIDER, MP_PROVIDER           -- the sandbox's provider names (for control calls)
  HOOKLINE_API_BASE, HOOKLINE_API_KEY    -- hookline's merchant API, for scripts that drive it end to end
"""
import json
import os
import sys
import traceback
import urllib.error
import urllib.request

import mercadopago
import mercadopago.http
import requests
import stripe

TIMEOUT = 20  # seconds, for every HTTP call a script makes


def env(name, default=None):
    value = os.environ.get(name, default)
    if value is None:
        print(f"FAIL - environment: {name} is not set")
        sys.exit(2)
    return value


class Checks:
    """Prints `ok - NAME` or `FAIL - NAME: DETAIL` per check; `finish()` exits 1 if any failed."""

    def __init__(self):
        self.failed = 0
        self.passed = 0

    def check(self, name, condition, detail=""):
        if condition:
            self.passed += 1
            print(f"ok - {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL - {name}: {detail}", flush=True)
        return condition

    def equal(self, name, got, want):
        return self.check(name, got == want, f"got {got!r}, want {want!r}")

    def run(self, main):
        """Runs `main(self)`; an exception is a failed check (with its traceback), then exits."""
        try:
            main(self)
        except Exception:  # noqa: BLE001 -- any escape is a failure, reported
            self.failed += 1
            print("FAIL - unexpected exception:\n" + traceback.format_exc(), flush=True)
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        sys.exit(1 if self.failed else 0)


def stripe_client():
    """stripe-python's StripeClient pointed at STRIPE_API_BASE: `base_addresses={"api": …}` is the SDK's own
    option for another API host (the global `stripe.api_base` does the same for the legacy resource style).
    No SDK retries: a test must see what the server answered."""
    return stripe.StripeClient(
        env("STRIPE_API_KEY"),
        base_addresses={"api": env("STRIPE_API_BASE")},
        max_network_retries=0,
    )


class LocalHttpClient(mercadopago.http.HttpClient):
    """The mercadopago SDK (3.x) builds every URL as `Config.api_base_url + uri`, with the base fixed at
    https://api.mercadopago.com and no setting to change it; it does take an `http_client` (an HttpClient
    subclass): this one swaps the base for MP_API_BASE before sending."""

    OFFICIAL = "https://api.mercadopago.com"

    def __init__(self, base):
        self.base = base.rstrip("/")

    def request(self, method, url, maxretries=None, retry_on=None, backoff_factor=None, **kwargs):
        if url.startswith(self.OFFICIAL):
            url = self.base + url[len(self.OFFICIAL):]
        kwargs.setdefault("timeout", TIMEOUT)
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = TIMEOUT
        return super().request(method, url, maxretries=0, retry_on=retry_on, backoff_factor=backoff_factor, **kwargs)


def mp_sdk():
    return mercadopago.SDK(env("MP_ACCESS_TOKEN"), http_client=LocalHttpClient(env("MP_API_BASE")))


def mp_options(idempotency_key):
    """Per-request options carrying our own X-Idempotency-Key (the SDK otherwise sends a random one each call)."""
    options = mercadopago.config.RequestOptions()
    options.custom_headers = {"x-idempotency-key": idempotency_key}
    return options


def control(path, body=None):
    """POSTs (or GETs, without a body) the sandbox's control API; the decoded JSON answer."""
    url = env("SANDBOX_CONTROL_BASE").rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            raw = response.read()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"control {path}: HTTP {e.code}: {e.read()[:500]!r}") from e
    return json.loads(raw) if raw else None


class Hookline:
    """hookline's merchant API (HOOKLINE_API_BASE, `Authorization: Bearer HOOKLINE_API_KEY`), for scripts that
    drive hookline end to end with requests (which both SDKs already install)."""

    def __init__(self, base=None, key=None):
        self.base = (base or env("HOOKLINE_API_BASE")).rstrip("/")
        self.session = requests.Session()
        self.session.headers["Authorization"] = "Bearer " + (key or env("HOOKLINE_API_KEY"))

    def request(self, method, path, body=None, idempotency_key=None):
        """(status, decoded JSON or None)."""
        headers = {}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        response = self.session.request(method, self.base + path, json=body, headers=headers, timeout=TIMEOUT)
        try:
            payload = response.json()
        except ValueError:
            payload = None
        return response.status_code, payload

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body=None, idempotency_key=None):
        return self.request("POST", path, body, idempotency_key)


def has_hookline():
    return bool(os.environ.get("HOOKLINE_API_BASE"))
