"""Shared by the SDK scripts: one line per check, a non-zero exit on any failed check, the official SDKs pointed
at a local base URL, the sandbox's control API, and hookline's merchant API.

Environment (set by tests/src/sdk.rs, or by hand; see README.md):
  STRIPE_API_BASE, STRIPE_API_KEY        -- the Stripe API (the sandbox) and its secret key
  MP_API_BASE, MP_ACCESS_TOKEN           -- the Mercado Pago API (the sandbox) and its access token
  SANDBOX_CONTROL_BASE                   -- the sandbox's base URL (its /_sandbox/... control API)
  STRIPE_PROVIDER, MP_PROVIDER           -- the sandbox's provider names (for control calls)
  HOOKLINE_API_BASE, HOOKLINE_API_KEY    -- hookline's merchant API, for scripts that drive it end to end
  SDK_SCENARIO                           -- the scenario a hookline_*.py script runs (or its first argument)
"""
import concurrent.futures
import json
import os
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

import mercadopago
import mercadopago.http
import requests
import stripe

TIMEOUT = 20  # seconds, for every HTTP call a script makes
WAIT = 90  # seconds a script waits for an outcome (an intent's status, a refund at the gateway)
FINAL = {"succeeded", "failed", "canceled", "needs_attention"}  # intent statuses nothing moves on from


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

    def create(self, body, idempotency_key):
        """POST /v1/payment_intents → (status, intent or error)."""
        return self.post("/v1/payment_intents", body, idempotency_key)

    def confirm(self, intent_id, body=None, idempotency_key=None):
        """POST /v1/payment_intents/{id}/confirm (the body, when given, is the provider object)."""
        return self.post(f"/v1/payment_intents/{intent_id}/confirm", body, idempotency_key)

    def intent(self, intent_id):
        return self.get(f"/v1/payment_intents/{intent_id}")

    def refund(self, intent_id, amount, idempotency_key, reason="cliente desistiu"):
        return self.post(f"/v1/payment_intents/{intent_id}/refunds", {"amount": amount, "reason": reason},
                         idempotency_key)

    def wait(self, intent_id, statuses, timeout=WAIT):
        """Polls the intent (every 200 ms, up to `timeout` s) until its status is one of `statuses` or final
        (succeeded, failed, canceled, needs_attention: waiting longer would change nothing); returns it with every status
        seen on the way, in order. A merchant's order page does the same."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            status, intent = self.intent(intent_id)
            if status != 200:
                raise RuntimeError(f"GET {intent_id}: HTTP {status}: {intent!r}")
            if not seen or seen[-1] != intent["status"]:
                seen.append(intent["status"])
            if intent["status"] in statuses or intent["status"] in FINAL:
                return intent, seen
            if time.monotonic() > deadline:
                raise RuntimeError(f"{intent_id} still {intent['status']} after {timeout} s (seen {seen})")
            time.sleep(0.2)


def has_hookline():
    return bool(os.environ.get("HOOKLINE_API_BASE"))


def parallel(calls):
    """Runs every call at once on its own thread, released together by a barrier (a double click is two requests
    in flight at the same moment, not one after the other); their results in order."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait(timeout=TIMEOUT)
        return call()

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def poll(what, probe, done, timeout=WAIT):
    """Calls `probe()` every 200 ms until `done(value)`; returns the value, or raises after `timeout` s with the
    last one."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what} (last: {value!r})")
        time.sleep(0.2)


def scenario(known):
    """The scenario a script runs: SDK_SCENARIO (tests/it/sdk.rs sets one per test), else the first argument."""
    name = os.environ.get("SDK_SCENARIO") or (sys.argv[1] if len(sys.argv) > 1 else "")
    if name not in known:
        print(f"FAIL - scenario {name!r}: one of {sorted(known)} (SDK_SCENARIO or the first argument)")
        sys.exit(2)
    return name


def report(name, value):
    """A line the Rust test reads back (`= name value`): ids it checks in the database and at the sandbox."""
    print(f"= {name} {value}", flush=True)


# --- Scenarios every gateway shares -------------------------------------------------------------------------
#
# A script passes a gateway adapter `gw` with:
#   gw.provider                  hookline's provider name (also the sandbox's)
#   gw.order(amount, kind, **extra)  a create body; kind "ok" (a method that pays), "decline", "3ds" …; None:
#                                no method (a checkout built before the customer typed the card)
#   gw.method(kind)              the provider object alone ({"stripe": {...}}), for /confirm
#   gw.charges(intent_id)        the gateway's payments carrying hookline's reference, read with the official SDK
#                                (Stripe search by metadata['hookline_intent'], Mercado Pago search by
#                                external_reference): a list of dicts with id, status, amount
#   gw.refunds(payment_id)       the payment's refunds at the gateway (SDK): a list of dicts with id, amount


def charged_once(c, gw, intent, name):
    """The intent succeeded and the gateway holds exactly one payment for it, the one hookline recorded."""
    c.equal(f"{name}: succeeded", intent["status"], "succeeded")
    found = gw.charges(intent["id"])
    c.equal(f"{name}: one payment at the gateway for the intent", len(found), 1)
    if found:
        c.equal(f"{name}: it is the payment hookline recorded", str(found[0]["id"]), intent["provider_payment_id"])
        c.equal(f"{name}: for the intent's amount", found[0]["amount"], intent["amount"])
    report("intent", intent["id"])


def scenario_key_per_click(c, hl, gw, run):
    """A front end that makes a fresh Idempotency-Key per click, ten clicks at once for one order: one intent
    (201), nine 409 order_reference_in_use naming it, one payment."""
    body = gw.order(5000, "ok", order_reference=f"pedido-{run}")
    answers = parallel([lambda k=k: Hookline().create(body, f"{run}-click-{k}") for k in range(10)])
    created = [a for s, a in answers if s == 201]
    c.equal("ten clicks with ten keys: one intent created", len(created), 1)
    if not created:
        return
    intent_id = created[0]["id"]
    refused = [(s, a) for s, a in answers if s != 201]
    c.check("the other nine: 409 order_reference_in_use naming the intent",
            len(refused) == 9 and all(s == 409 and a["error"]["code"] == "order_reference_in_use"
                                      and a["error"]["intent"] == intent_id for s, a in refused), refused)
    status, again = Hookline().create(body, f"{run}-click-late")
    c.equal("a late click: 409 again", (status, again["error"]["code"]), (409, "order_reference_in_use"))
    intent, seen = hl.wait(intent_id, {"succeeded"})
    c.check("never failed on the way", "failed" not in seen and "needs_attention" not in seen, seen)
    charged_once(c, gw, intent, "key per click")


def scenario_confirm_twice(c, hl, gw, run):
    """The key is born with the intent: created when the checkout is built (confirm: false, nothing sent), then
    the submit clicked twice at once, each confirm bringing the payment method: both 200 with the same intent,
    one payment."""
    status, created = hl.create(gw.order(3900, None, order_reference=f"pedido-{run}", confirm=False),
                                f"{run}-checkout")
    c.equal("checkout: 201", status, 201)
    c.equal("checkout: requires_confirmation", created["status"], "requires_confirmation")
    c.equal("checkout: nothing at the gateway", gw.charges(created["id"]), [])
    method = gw.method("ok")
    answers = parallel([lambda: Hookline().confirm(created["id"], method),
                        lambda: Hookline().confirm(created["id"], method)])
    c.equal("two confirms at once: both 200", [s for s, _ in answers], [200, 200])
    c.equal("…with the same intent", [a.get("id") for _, a in answers], [created["id"]] * 2)
    intent, _ = hl.wait(created["id"], {"succeeded"})
    charged_once(c, gw, intent, "confirmed twice")
    status, late = hl.confirm(created["id"], method)
    c.equal("a late confirm: 200 with the current state", (status, late.get("status")), (200, "succeeded"))
    c.equal("still one payment", len(gw.charges(created["id"])), 1)


def scenario_faults(c, hl, gw, run, refund_amount=2500):
    """The test armed a 5xx or 429 on the gateway's first charge and first refund: hookline retries with the
    same key; the merchant sees one payment and one refund."""
    status, created = hl.create(gw.order(6000, "ok"), f"{run}-faulty")
    c.equal("create: 201", status, 201)
    intent, seen = hl.wait(created["id"], {"succeeded"})
    c.check("the failed first attempt never showed as failed", "failed" not in seen, seen)
    charged_once(c, gw, intent, "charge after a gateway error")
    status, refund = hl.refund(intent["id"], refund_amount, f"{run}-refund")
    c.check("refund accepted: 201 re_hl_…", status == 201 and refund["id"].startswith("re_hl_"), (status, refund))
    report("refund", refund["id"])
    payment = intent["provider_payment_id"]
    refunds = poll("the refund at the gateway", lambda: gw.refunds(payment), lambda r: len(r) >= 1)
    c.equal("one refund at the gateway, of the amount asked", [r["amount"] for r in refunds], [refund_amount])
    _, after = hl.intent(intent["id"])
    c.equal("the intent shows it refunded", after["refunded"], refund_amount)


def scenario_lost_then_past_key_lifetime(c, hl, gw, run):
    """The test dropped the gateway's first answer (or the gateway never executed the charge) and then made the
    gateway fail until hookline's key for the charge was about to expire (the test's short key lifetime): the
    merchant just waits; the intent ends succeeded with one payment at the gateway, whichever key made it."""
    status, created = hl.create(gw.order(5000, "ok"), f"{run}-ttl")
    c.equal("create: 201", status, 201)
    report("intent", created["id"])
    intent, seen = hl.wait(created["id"], {"succeeded"}, timeout=150)
    c.check("never failed on the way", "failed" not in seen and "needs_attention" not in seen, seen)
    charged_once(c, gw, intent, "after the key's lifetime")
