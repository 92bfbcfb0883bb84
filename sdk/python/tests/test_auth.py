"""End-to-end tests of sdk/python/leasegate.py's authentication and HTTPS options (``api_key``,
``ca_file``, ``ssl_context``) and of the errors of an authenticating gateway.

Run with test_e2e.py by tests/sdks/python_sdk_test.go (``go test -run TestPythonSDK
./tests/sdks``), which starts, beside the plain gateway of LEASEGATE_URL, a second one that serves
HTTPS with a certificate of a test CA and authenticates (an auth file; at most one parked waiting
request per principal), and sets:

    LEASEGATE_TLS_URL            the HTTPS gateway's URL
    LEASEGATE_TLS_CA_FILE        the CA that signed its certificate (PEM)
    LEASEGATE_TLS_OTHER_CA_FILE  a CA that did not
    LEASEGATE_KEY_OPS            API key of "ops": every name, every permission
    LEASEGATE_KEY_BILLING        API key of "billing": names under "billing.", lock and inspect
    LEASEGATE_KEY_BILLING_2      API key of "billing-2": likewise, a quota of its own
    LEASEGATE_KEY_READER         API key of "reader": names under "billing.", inspect only

Without them these tests fail rather than skip. Tests synchronise by polling conditions with
deadlines (``eventually``), never by sleeping.
"""

from __future__ import annotations

import json
import os
import pickle
import ssl
import sys
import threading
import time
import unittest
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SDK_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SDK_DIR))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import leasegate  # noqa: E402
from test_e2e import URL, RecordingClient, cm_check, eventually, in_thread, unique  # noqa: E402
from test_rw_semaphore import problem_answer  # noqa: E402


def setting(name: str) -> str:
    """The environment variable ``name``, which tests/sdks/python_sdk_test.go sets: missing, the test
    fails (a skipped test would let a lost variable pass unseen)."""
    v = os.environ.get(name, "")
    if not v:
        raise AssertionError(f"{name} is not set: run these tests with tests/sdks/python_sdk_test.go (see test_auth.py)")
    return v


class CountingClient(leasegate.Client):
    """A client that counts the requests it tries to send, by method."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self.tries: dict[str, int] = {}

    def _send(self, method: str, path: str, *, body: Mapping[str, Any] | None = None,
              headers: Mapping[str, str] | None = None, timeout: float | None = None) -> Any:
        self.tries[method] = self.tries.get(method, 0) + 1
        return super()._send(method, path, body=body, headers=headers, timeout=timeout)


class SecuredGateway(unittest.TestCase):
    """Against the HTTPS gateway that authenticates."""

    def setUp(self) -> None:
        self.url = setting("LEASEGATE_TLS_URL")
        self.ca = setting("LEASEGATE_TLS_CA_FILE")
        self.other_ca = setting("LEASEGATE_TLS_OTHER_CA_FILE")
        self.keys = {p: setting("LEASEGATE_KEY_" + p.upper().replace("-", "_"))
                     for p in ("ops", "billing", "billing-2", "reader")}
        self.assertTrue(self.url.startswith("https://"), self.url)
        self.ops = self.client("ops")

    def client(self, principal: str | None, **kwargs: Any) -> CountingClient:
        """A client trusting the test CA, with the API key of ``principal`` (None: no key)."""
        key = None if principal is None else self.keys[principal]
        return CountingClient(self.url, timeout=10, api_key=key, ca_file=self.ca, **kwargs)

    def waiters(self, name: str) -> int:
        return self.ops.inspect(name).waiters

    def test_key_and_ca_file_lock_and_long_poll_over_https(self) -> None:
        name = unique("auth")
        lease = self.ops.acquire(name, "py-holder", ttl_ms=20000)
        self.assertGreater(lease.fence, 0)
        st = self.ops.inspect(name, lease.token)
        self.assertEqual((st.held, st.owner, st.yours), (True, "py-holder", True))
        lease.renew()

        # A waiting acquire long-polls over HTTPS with the key, and is handed the lock.
        other = self.client("ops")
        r = in_thread(lambda: other.acquire(name, "py-waiter", ttl_ms=20000, wait_ms=15000))
        eventually("the waiter to park", lambda: self.waiters(name) == 1)
        self.assertTrue(lease.release())
        got = r.get(15)
        self.assertIsInstance(got, leasegate.Lease)
        self.assertEqual(got.owner, "py-waiter")
        self.assertGreater(got.fence, lease.fence)
        self.assertEqual(other.tries.get("POST"), 1, "one long-poll, granted")
        self.assertTrue(got.release())
        self.assertFalse(self.ops.inspect(name).held)

        # The with form: renewals and the release go with the key too.
        with self.ops.lock(name, "py-block", ttl_ms=600) as held:
            first = held.expires_at
            eventually("a background renewal", lambda: held.expires_at != first, timeout=5)
            held.check()
        self.assertFalse(self.ops.inspect(name).held)

        # An ssl_context of one's own instead of ca_file.
        ctx = ssl.create_default_context(cafile=self.ca)
        own = leasegate.Client(self.url, timeout=10, api_key=self.keys["ops"], ssl_context=ctx)
        self.assertTrue(own.acquire(name, "py-context").release())

    def test_a_watched_lease_learns_of_a_force_release_over_https(self) -> None:
        # The with form's events stream goes over HTTPS with the key too, and is closed at the
        # end of the block (a TLS socket shut down under a blocked read).
        name = unique("auth-forced")
        with self.ops.lock(name, "py-block", ttl_ms=30000) as held:
            eventually("the events stream to open", lambda: held.watching)
            ctx = ssl.create_default_context(cafile=self.ca)
            req = urllib.request.Request(f"{self.url}/locks/{name}?force=true", method="DELETE",
                                         headers={"Authorization": f"Bearer {self.keys['ops']}"})
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                self.assertEqual(resp.status, 200)
            self.assertTrue(held.lost.wait(timeout=5), "lost at once")
            self.assertIn("force-released", cm_check(held).reason)
        name = unique("auth-watched")
        with self.ops.lock(name, "py-block", ttl_ms=30000) as held:
            eventually("the events stream to open", lambda: held.watching)
        self.assertFalse(held.lost)
        eventually("the watchers' threads to stop", lambda: not any(
            t.name.startswith("leasegate-watch:py.auth-") for t in threading.enumerate()))
        self.assertFalse(self.ops.inspect(name).held)

    def test_no_key_or_an_unknown_one_is_unauthenticated(self) -> None:
        name = unique("auth")
        unknown = CountingClient(self.url, timeout=10, api_key="lgk_not-a-key-it-knows", ca_file=self.ca)
        for gw in (self.client(None), CountingClient(self.url, timeout=10, api_key="", ca_file=self.ca), unknown):
            with self.assertRaises(leasegate.UnauthenticatedError) as cm:
                gw.acquire(name, "nobody", wait_ms=5000)
            e = cm.exception
            self.assertIsInstance(e, leasegate.LeasegateError)
            self.assertEqual((e.status, e.type), (401, "urn:leasegate:problem:unauthenticated"))
            if gw is not unknown:  # "" sends no header, as None does
                self.assertIn("Authorization: Bearer", e.detail)
            self.assertEqual(gw.tries.get("POST"), 1, "a 401 is not retried")
            with self.assertRaises(leasegate.UnauthenticatedError):
                gw.inspect(name)
        self.assertFalse(self.ops.inspect(name).held)

    def test_a_name_outside_the_principals_prefixes_is_forbidden(self) -> None:
        name = unique("auth")  # py.auth...: not under billing's "billing." or "shared.reports."
        billing = self.client("billing")
        with self.assertRaises(leasegate.ForbiddenError) as cm:
            billing.acquire(name, "py-billing", wait_ms=5000)
        e = cm.exception
        self.assertEqual((e.status, e.type, e.name), (403, "urn:leasegate:problem:forbidden", name))
        self.assertEqual(billing.tries.get("POST"), 1, "a 403 is not retried")
        self.assertFalse(self.ops.inspect(name).held)
        # Its own prefix it may lock.
        self.assertTrue(billing.acquire("billing." + name, "py-billing").release())

        # A principal without the permission: permission names it.
        with self.assertRaises(leasegate.ForbiddenError) as cm:
            self.client("reader").acquire("billing." + name, "py-reader")
        self.assertEqual(cm.exception.permission, "lock")
        self.assertEqual(self.client("reader").inspect("billing." + name).held, False)

    def test_an_untrusted_certificate_is_a_transport_error_not_retried(self) -> None:
        name = unique("auth")
        system = CountingClient(self.url, timeout=10, api_key=self.keys["ops"])
        other = CountingClient(self.url, timeout=10, api_key=self.keys["ops"], ca_file=self.other_ca)
        for gw in (system, other):
            start = time.monotonic()
            with self.assertRaises(leasegate.TransportError) as cm:
                gw.acquire(name, "py-untrusting", wait_ms=20000)
            self.assertIsInstance(cm.exception.__cause__, ssl.SSLCertVerificationError)
            self.assertEqual(cm.exception.status, 0)
            self.assertEqual(gw.tries.get("POST"), 1, "a certificate it does not trust is not retried")
            self.assertLess(time.monotonic() - start, 10, "not retried for the whole wait")
            with self.assertRaises(leasegate.TransportError):
                gw.inspect(name)
            self.assertEqual(gw.tries.get("GET"), 1)
        self.assertFalse(self.ops.inspect(name).held)

    def test_the_api_key_is_kept_out_of_reprs_and_errors(self) -> None:
        key = self.keys["ops"]
        gw = self.client("ops")
        self.assertNotIn(key, repr(gw))
        self.assertNotIn(key, str(gw))
        untrusting = leasegate.Client(self.url, api_key=key)
        self.assertNotIn(key, repr(untrusting))
        with self.assertRaises(leasegate.TransportError) as cm:
            untrusting.inspect(unique("auth"))
        self.assertNotIn(key, str(cm.exception))
        self.assertNotIn(key, repr(cm.exception))
        lease = gw.acquire(unique("auth"), "py-repr")
        self.assertNotIn(key, repr(lease))
        self.assertNotIn(key, repr(lease.grant))
        lease.release()

    def test_over_the_parked_quota_is_quota_exceeded_at_once(self) -> None:
        name = "billing." + unique("quota")
        holder = self.ops.acquire(name, "py-holder", ttl_ms=20000)
        parked = self.client("billing-2")
        r = in_thread(lambda: parked.acquire(name, "py-parked", ttl_ms=20000, wait_ms=15000))
        eventually("billing-2's waiter to park", lambda: self.waiters(name) == 1)

        over = self.client("billing-2")
        start = time.monotonic()
        with self.assertRaises(leasegate.QuotaExceededError) as cm:
            over.acquire(name, "py-over", wait_ms=15000)
        e = cm.exception
        self.assertEqual((e.status, e.type), (429, "urn:leasegate:problem:quota-exceeded"))
        self.assertTrue(e.retry_after_ms is not None or e.retry_after_s is not None, e.problem)
        self.assertEqual(over.tries.get("POST"), 1, "a 429 is not retried")
        self.assertLess(time.monotonic() - start, 10, "answered at once, not after the wait")
        self.assertEqual(self.waiters(name), 1, "the refused request never queued")

        self.assertTrue(holder.release())
        got = r.get(15)
        self.assertEqual(got.owner, "py-parked")
        self.assertTrue(got.release())


class Options(unittest.TestCase):
    """The options' checks; no gateway needed but a CA file."""

    def test_tls_options_need_https_and_exclude_each_other(self) -> None:
        ca = setting("LEASEGATE_TLS_CA_FILE")
        ctx = ssl.create_default_context()
        with self.assertRaises(ValueError):
            leasegate.Client("http://127.0.0.1:1", ca_file=ca)
        with self.assertRaises(ValueError):
            leasegate.Client("http://127.0.0.1:1", ssl_context=ctx)
        with self.assertRaises(ValueError):
            leasegate.Client("https://127.0.0.1:1", ca_file=ca, ssl_context=ctx)
        with self.assertRaises(OSError):
            leasegate.Client("https://127.0.0.1:1", ca_file=str(Path(ca).with_name("missing.crt")))
        leasegate.Client("https://127.0.0.1:1", ca_file=ca)
        leasegate.Client("https://127.0.0.1:1", ssl_context=ctx)

    def test_api_key_without_a_header_it_cannot_carry(self) -> None:
        for bad in ("lgk_abc\n", "lgk\rabc", "lgk\x7f"):
            with self.assertRaises(ValueError):
                leasegate.Client("http://127.0.0.1:1", api_key=bad)
        with self.assertRaises(TypeError):
            leasegate.Client("http://127.0.0.1:1", 5.0, "positional-key")  # type: ignore[misc]


class ProblemClasses(unittest.TestCase):
    def test_auth_and_quota_problems_have_their_classes(self) -> None:
        for cls in (leasegate.UnauthenticatedError, leasegate.ForbiddenError, leasegate.QuotaExceededError):
            self.assertIn(cls.__name__, leasegate.__all__)
            self.assertTrue(issubclass(cls, leasegate.LeasegateError))
            self.assertFalse(issubclass(cls, leasegate.HeldError))

        forbidden = leasegate.LeasegateError.from_answer(403, "Forbidden", {"x-request-id": "r1"}, json.dumps({
            "type": "urn:leasegate:problem:forbidden", "title": "Forbidden", "status": 403,
            "detail": "principal \"billing\" may not lock \"orders.1\"", "name": "orders.1"}).encode())
        assert isinstance(forbidden, leasegate.ForbiddenError)
        self.assertEqual((forbidden.name, forbidden.permission, forbidden.request_id), ("orders.1", None, "r1"))
        again = pickle.loads(pickle.dumps(forbidden))
        self.assertIsInstance(again, leasegate.ForbiddenError)
        self.assertEqual((again.name, again.status, again.detail), ("orders.1", 403, forbidden.detail))

        quota = leasegate.LeasegateError.from_answer(429, "Too Many Requests", {"retry-after": "1"}, json.dumps({
            "type": "urn:leasegate:problem:quota-exceeded", "title": "Quota exceeded", "status": 429,
            "detail": "over its quota", "retry_after_ms": 20}).encode())
        assert isinstance(quota, leasegate.QuotaExceededError)
        self.assertEqual((quota.status, quota.retry_after_ms, quota.retry_after_s), (429, 20, 1))

        unauth = leasegate.LeasegateError.from_answer(401, "Unauthorized", {}, json.dumps({
            "type": "urn:leasegate:problem:unauthenticated", "title": "Unauthenticated", "status": 401,
            "detail": "send Authorization: Bearer <API key>"}).encode())
        self.assertIsInstance(unauth, leasegate.UnauthenticatedError)

    def test_a_429_is_not_retried_by_renew_or_release(self) -> None:
        gw = RecordingClient(URL or setting("LEASEGATE_URL"))
        lease = gw.acquire(unique("auth"), "py-429", ttl_ms=20000)
        quota = "urn:leasegate:problem:quota-exceeded"
        for method, call in (("POST", lease.renew), ("DELETE", lease.release)):
            before = len(gw.requests(method))
            gw.fail[method] = [problem_answer(429, quota, "1"), problem_answer(429, quota, "1")]
            with self.assertRaises(leasegate.QuotaExceededError):
                call()
            self.assertEqual(len(gw.requests(method)), before + 1, f"{method}: one try")
            gw.fail[method] = []
        self.assertFalse(lease.lost.is_set(), "a 429 says nothing about the lease")
        self.assertTrue(lease.release())


if __name__ == "__main__":
    unittest.main()
