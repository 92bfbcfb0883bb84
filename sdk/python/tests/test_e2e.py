"""End-to-end tests of sdk/python/leasegate.py against a real gateway.

Run by tests/sdks/python_sdk_test.go (``go test -run TestPython ./tests/sdks``), which starts a
redis-server and a gateway and sets LEASEGATE_URL. By hand:

    LEASEGATE_URL=http://127.0.0.1:8080 python3 -m unittest discover -s sdk/python/tests -v

Tests synchronise by polling conditions with deadlines (``eventually``), never by sleeping.
"""

from __future__ import annotations

import ast
import http.client
import http.server
import json
import os
import sys
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SDK_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SDK_DIR))

import leasegate  # noqa: E402

URL = os.environ.get("LEASEGATE_URL", "")


def unique(prefix: str) -> str:
    """A lock name no other test (or earlier run) uses."""
    return f"py.{prefix}.{uuid.uuid4().hex[:12]}"


def eventually(what: str, cond: Callable[[], bool], timeout: float = 10.0, every: float = 0.005) -> None:
    """Poll cond until it holds; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class Result:
    """The outcome of a call made on another thread."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def get(self, timeout: float) -> Any:
        if not self.done.wait(timeout):
            raise AssertionError(f"the call did not finish within {timeout}s")
        if self.error is not None:
            raise self.error
        return self.value


def in_thread(fn: Callable[[], Any]) -> Result:
    r = Result()

    def run() -> None:
        try:
            r.value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            r.error = e
        finally:
            r.done.set()

    threading.Thread(target=run, daemon=True).start()
    return r


class RecordingClient(leasegate.Client):
    """A client that records every request it sends (and can inject faults).

    ``fail`` maps a method to answers to use instead of the gateway's for its next requests:
    ``"lost"`` sends the request and then raises TransportError (the answer was lost),
    an ``_Answer`` is returned without sending anything.
    """

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.mu = threading.Lock()
        self.sent: list[tuple[float, str, str, dict[str, str], Mapping[str, Any] | None]] = []
        self.answered: list[int] = []
        self.fail: dict[str, list[Any]] = {}

    def _send(self, method: str, path: str, *, body: Mapping[str, Any] | None = None,
              headers: Mapping[str, str] | None = None, timeout: float | None = None) -> Any:
        with self.mu:
            self.sent.append((time.monotonic(), method, path, dict(headers or {}), body))
            injected = self.fail.get(method, [])
            fault = injected.pop(0) if injected else None
        if fault is not None and fault != "lost":
            with self.mu:
                self.answered.append(fault.status)
            return fault
        ans = super()._send(method, path, body=body, headers=headers, timeout=timeout)
        with self.mu:
            self.answered.append(ans.status)
        if fault == "lost":
            raise leasegate.TransportError(title="Transport error", detail="injected: answer lost")
        return ans

    def requests(self, method: str) -> list[tuple[float, str, str, dict[str, str], Mapping[str, Any] | None]]:
        with self.mu:
            return [r for r in self.sent if r[1] == method]


def raw(method: str, path: str, headers: Mapping[str, str] | None = None, body: Any = None) -> tuple[int, dict[str, Any]]:
    """A plain urllib request, independent of the SDK."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


#: How soon after a force release's answer a watched lease must be lost (#27).
LOST_WITHIN_S = 0.1


def cm_check(lease: leasegate.RenewableLease[Any]) -> leasegate.LeaseLostError:
    """The LeaseLostError lease.check() raises."""
    try:
        lease.check()
    except leasegate.LeaseLostError as e:
        return e
    raise AssertionError("check() raised nothing")


def assert_lost_at_once(tc: unittest.TestCase, lease: leasegate.RenewableLease[Any], path: str, what: str) -> None:
    """Force-release ``path`` (``/locks/NAME`` or ``/semaphores/NAME``) once ``lease``'s events
    streams are open, and check that ``lease.lost`` turns true within LOST_WITHIN_S of the
    answer, saying it was force-released. The latency is printed as ``LOST-LATENCY <what>: <ms>``
    for tests/sdks/python_sdk_test.go to log."""
    eventually(f"{what}: the events stream to open", lambda: lease.watching)
    tc.assertFalse(lease.lost, what)
    sent = time.monotonic()
    status, body = raw("DELETE", path + "?force=true")
    answered = time.monotonic()
    tc.assertEqual((status, body.get("forced")), (200, True), f"{what}: {body}")
    tc.assertTrue(lease.lost.wait(timeout=5), f"{what}: lost within 5 s")
    now = time.monotonic()
    took = max(now - answered, 0.0)
    print(f"LOST-LATENCY {what}: {took * 1000:.1f} ms after the answer ({(now - sent) * 1000:.1f} ms after the request)",
          file=sys.stderr)
    tc.assertLess(took, LOST_WITHIN_S, f"{what}: lost {took * 1000:.0f} ms after the force release's answer")
    tc.assertTrue(lease.lost, f"{what}: truthy once lost")
    tc.assertFalse(lease.watching, f"{what}: the stream closed with the loss")
    with tc.assertRaises(leasegate.LeaseLostError) as cm:
        lease.check()
    tc.assertIn("force-released", cm.exception.reason, what)


@unittest.skipUnless(URL, "LEASEGATE_URL is not set (tests/sdks/python_sdk_test.go sets it)")
class _DelayingProxy:
    """A plain HTTP proxy in front of the gateway at ``target`` that holds the first request whose
    path ends with ``suffix`` back ``delay`` seconds before forwarding it (a slow network), and
    sets ``delaying`` when it starts to."""

    def __init__(self, target: str, suffix: str, delay: float) -> None:
        self.delaying = threading.Event()
        upstream = urllib.parse.urlsplit(target)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.split("?")[0].endswith(suffix) and not proxy.delaying.is_set():
                    proxy.delaying.set()
                    time.sleep(delay)  # the slow network
                conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=10)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    payload = resp.read()
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                finally:
                    conn.close()

            do_GET = do_POST = do_DELETE = _forward

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> _DelayingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class EndToEnd(unittest.TestCase):
    def setUp(self) -> None:
        self.gw = leasegate.Client(URL, timeout=10)

    def test_acquire_renew_release(self) -> None:
        name = unique("basic")
        before = time.monotonic()
        lease = self.gw.acquire(name, "py-worker", ttl_ms=5000)
        after = time.monotonic()
        self.assertEqual((lease.lock, lease.owner, lease.holds, lease.ttl_ms, lease.watchdog),
                         (name, "py-worker", 1, 5000, False))
        self.assertGreater(lease.fence, 0)
        self.assertRegex(lease.token, r"^[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]+={0,2}$")
        self.assertNotIn(lease.token, repr(lease))
        self.assertNotIn(lease.token, repr(lease.grant))
        # valid_until counts the TTL from just before the request was sent.
        self.assertGreaterEqual(lease.valid_until, before + 5.0)
        self.assertLessEqual(lease.valid_until, after + 5.0)
        lease.check()

        st = self.gw.inspect(name, lease.token)
        self.assertTrue(st.held)
        self.assertTrue(st.yours)
        self.assertEqual((st.owner, st.fence, st.holds), ("py-worker", lease.fence, 1))

        old_until, fence, token = lease.valid_until, lease.fence, lease.token
        g = lease.renew(ttl_ms=8000)
        self.assertEqual((g.ttl_ms, g.fence, g.token), (8000, fence, token))
        self.assertEqual(lease.ttl_ms, 8000)
        self.assertGreater(lease.valid_until, old_until + 2.9)
        lease.renew()  # keeps its own TTL
        self.assertEqual(lease.ttl_ms, 8000)

        self.assertTrue(lease.release())
        self.assertEqual(lease.holds, 0)
        self.assertFalse(self.gw.inspect(name).held)
        with self.assertRaises(leasegate.LeaseGoneError) as cm:
            lease.release()
        self.assertEqual((cm.exception.status, cm.exception.type), (410, "urn:leasegate:problem:lease-gone"))
        with self.assertRaises(leasegate.LeaseGoneError):
            lease.renew()
        self.assertTrue(lease.lost.is_set())
        with self.assertRaises(leasegate.LeaseLostError):
            lease.check()

        again = self.gw.acquire(name, "py-worker", ttl_ms=5000)
        self.assertGreater(again.fence, fence, "fences never go backwards")
        self.assertTrue(again.release())

    def test_waited_grant_counts_from_the_grant(self) -> None:
        name = unique("waited")
        self.gw.acquire(name, "holder", ttl_ms=1500)  # expires in 1.5 s
        lease = self.gw.acquire(name, "py-worker", ttl_ms=1000, wait_ms=10_000)
        # A 1.5 s wait for a 1 s lease: valid_until counts from after the grant, not the send.
        self.assertGreater(lease.valid_until - time.monotonic(), 0.5)
        self.assertTrue(lease.release())

    def test_lock_held(self) -> None:
        name = unique("held")
        holder = self.gw.acquire(name, "holder", ttl_ms=20000)
        with self.assertRaises(leasegate.LockHeldError) as cm:
            self.gw.acquire(name, "other")
        e = cm.exception
        self.assertEqual((e.status, e.type, e.lock), (409, "urn:leasegate:problem:lock-held", name))
        self.assertIsNotNone(e.retry_after_ms)
        assert e.retry_after_ms is not None
        self.assertTrue(0 < e.retry_after_ms <= 20000, e.retry_after_ms)
        self.assertIn("409", str(e))
        self.assertIn("lock-held", str(e))

        start = time.monotonic()
        with self.assertRaises(leasegate.LockHeldError) as cm:
            self.gw.acquire(name, "other", wait_ms=300)
        self.assertGreaterEqual(time.monotonic() - start, 0.29)
        self.assertIsNotNone(cm.exception.waited_ms)
        assert cm.exception.waited_ms is not None
        self.assertGreaterEqual(cm.exception.waited_ms, 250)
        self.assertTrue(holder.release())

    def test_waiter_is_handed_the_lock_on_release(self) -> None:
        name = unique("handoff")
        holder = self.gw.acquire(name, "holder", ttl_ms=30000)
        waiter = in_thread(lambda: self.gw.acquire(name, "waiter", ttl_ms=30000, wait_ms=10000))
        eventually("the waiter in line", lambda: self.gw.inspect(name).waiters == 1)
        self.assertFalse(waiter.done.is_set())
        self.assertTrue(holder.release())
        lease: leasegate.Lease = waiter.get(timeout=10)
        self.assertEqual(lease.owner, "waiter")
        self.assertGreater(lease.fence, holder.fence)
        st = self.gw.inspect(name, lease.token)
        self.assertTrue(st.yours)
        self.assertEqual(st.waiters, 0)
        self.assertTrue(lease.release())

    def test_split_wait_keeps_its_place(self) -> None:
        name = unique("patient")
        holder = self.gw.acquire(name, "holder", ttl_ms=30000)
        patient_gw = RecordingClient(URL)
        patient = in_thread(lambda: patient_gw.acquire(
            name, "patient", ttl_ms=30000, wait_ms=3000, max_wait_per_request_ms=200))
        eventually("the patient waiter in line", lambda: self.gw.inspect(name).waiters == 1)
        newcomer = in_thread(lambda: leasegate.Client(URL).acquire(name, "newcomer", ttl_ms=30000, wait_ms=10000))
        eventually("the newcomer in line", lambda: self.gw.inspect(name).waiters == 2)

        # Three more of the patient waiter's long-polls run out after the newcomer queued...
        polls_then = len(patient_gw.answered)
        eventually("three more polls", lambda: len(patient_gw.answered) >= polls_then + 3)

        # ...and it is back in line, well inside one of its 200 ms polls: release then.
        def mid_poll_and_in_line() -> bool:
            with patient_gw.mu:
                in_flight = len(patient_gw.sent) > len(patient_gw.answered)
                since = time.monotonic() - patient_gw.sent[-1][0]
            return in_flight and 0.03 <= since <= 0.12 and self.gw.inspect(name).waiters == 2

        eventually("the patient waiter back in line, mid-poll", mid_poll_and_in_line)
        self.assertTrue(holder.release())
        lease: leasegate.Lease = patient.get(timeout=10)
        self.assertEqual(lease.owner, "patient", "the split wait kept its place ahead of the newcomer")
        self.assertFalse(newcomer.done.is_set())

        acquires = patient_gw.requests("POST")
        self.assertGreaterEqual(len(acquires), 4, "the first poll, three that ran out, the granted one")
        self.assertNotIn("queue_ticket", acquires[0][4] or {})
        for _, _, _, _, body in acquires[1:]:
            assert body is not None
            self.assertIn("queue_ticket", body, "every poll after the first carries the ticket")
            self.assertLessEqual(body["wait_ms"], 200)
        keys = {h["Idempotency-Key"] for _, _, _, h, _ in acquires}
        self.assertEqual(len(keys), len(acquires), "each long-poll after a 409 is a new request, with a new key")

        self.assertTrue(lease.release())
        late: leasegate.Lease = newcomer.get(timeout=10)
        self.assertEqual(late.owner, "newcomer")
        self.assertTrue(late.release())

    def test_context_manager_keeps_the_lease_alive(self) -> None:
        name = unique("keepalive")
        start = time.monotonic()
        with self.gw.lock(name, "cm", ttl_ms=900) as lease:
            fence = lease.fence
            self.assertAlmostEqual(lease.margin, 0.09)
            while time.monotonic() - start < 2.5:
                lease.check()
                time.sleep(0.05)  # the "work"
            self.assertFalse(lease.lost.is_set())
            self.assertGreater(lease.valid_until, time.monotonic())
            self.assertGreater(lease.valid_until, start + 2.5)
            st = self.gw.inspect(name, lease.token)
            self.assertTrue(st.yours)
            self.assertEqual(st.fence, fence)
            self.assertEqual(lease.fence, fence)
        self.assertFalse(lease.lost.is_set())
        self.assertFalse(self.gw.inspect(name).held, "released on exit")
        for t in lease._threads:
            self.assertFalse(t.is_alive(), f"{t.name} stopped on exit")

    def test_context_manager_follows_a_renew_by_hand(self) -> None:
        # A renewal by hand to a TTL far shorter than the one the block started with: keep-alive
        # must renew within a third of it, and the margin follows it (the lease would count as
        # lost 0.6 s after it otherwise: 1.5 s minus the 9 s TTL's margin, before the 3 s period).
        name = unique("keepalive-shortened")
        with self.gw.lock(name, "cm", ttl_ms=9000) as lease:
            by_hand = time.monotonic()
            lease.renew(ttl_ms=1500)
            eventually("a keep-alive renewal after the one by hand", lambda: lease.valid_until > by_hand + 3.0)
            self.assertFalse(lease.lost.is_set(), lease._lost_reason)
            lease.check()
            self.assertTrue(self.gw.inspect(name, lease.token).yours)
        self.assertFalse(lease.lost.is_set())

    def test_renewals_by_hand_and_keep_alive_do_not_cross(self) -> None:
        # Keep-alive's renewal (TTL 1.5 s) is held back 0.6 s on its way to the gateway by a
        # proxy; a renewal by hand to 9 s, sent meanwhile, reaches Redis first. Redis then has
        # keep-alive's 1.5 s, applied last; with both in flight at once the lease counted as
        # valid for the renewal by hand's 9 s (the later sent), and another owner took the lock
        # while it was not lost. One at a time, the renewal by hand waits for keep-alive's.
        name = unique("crossing")
        with _DelayingProxy(URL, "/renew", delay=0.6) as proxy:
            via_proxy = leasegate.Client(proxy.url, timeout=10)
            with via_proxy.lock(name, "a", ttl_ms=1500, watch=False) as lease:
                self.assertTrue(proxy.delaying.wait(5), "keep-alive's renewal reached the proxy")
                by_hand = time.monotonic()
                lease.renew(ttl_ms=9000)
                while time.monotonic() - by_hand < 3.0:
                    try:
                        other = self.gw.acquire(name, "b", ttl_ms=3000)
                    except leasegate.LockHeldError:
                        time.sleep(0.02)  # the "work"
                        continue
                    self.assertTrue(
                        lease.lost.is_set(),
                        f"b holds the lock (fence {other.fence}) while a's lease counts as valid "
                        f"for {lease.valid_until - time.monotonic():.3f}s more",
                    )
                    other.release()
                    break

    def test_context_manager_with_the_gateway_watchdog(self) -> None:
        # The gateway renews a watchdog lease for max_hold_ms; the thread only checks it, so the
        # lease outlives its first TTL, and lost is set before it lapses once max_hold is over.
        name = unique("watchdog")
        start = time.monotonic()
        with self.gw.lock(name, "wd", ttl_ms=900, watchdog=True, max_hold_ms=1500) as lease:
            self.assertTrue(lease.watchdog)
            st = self.gw.inspect(name)
            self.assertIsNotNone(st.max_hold_left_ms, "how much longer the watchdog renews")
            self.assertLessEqual(st.max_hold_left_ms or 0, 1500)
            self.assertEqual(st.max_hold_ms, st.max_hold_left_ms, "the deprecated name, the same number")
            self.assertTrue(lease.lost.wait(timeout=6), "lost once the watchdog stopped renewing")
            noticed = time.monotonic()
            self.assertGreater(noticed - start, 1.2, "the watchdog's renewals were seen")
            self.assertLess(noticed, lease.valid_until)
        eventually("the lease to lapse or be released", lambda: not self.gw.inspect(name).held, timeout=5)

    def test_release_inside_the_block(self) -> None:
        name = unique("early")
        with self.gw.lock(name, "early", ttl_ms=900) as lease:
            self.assertTrue(lease.release())
            eventually("the keep-alive threads to stop", lambda: not any(t.is_alive() for t in lease._threads))
            self.assertFalse(lease.lost.is_set(), "a release is not a loss")
            with self.assertRaises(leasegate.LeaseLostError) as cm:
                lease.check()
            self.assertEqual(cm.exception.reason, "released")
        self.assertFalse(self.gw.inspect(name).held)

    def test_lost_when_deleted_behind_its_back(self) -> None:
        name = unique("stolen")
        with self.gw.lock(name, "victim", ttl_ms=900) as lease:
            status, body = raw("DELETE", f"/locks/{name}", {"Lease-Token": lease.token})
            self.assertEqual((status, body["released"]), (200, True))
            deleted = time.monotonic()
            self.assertTrue(lease.lost.wait(timeout=5), "lost is set")
            # One renewal period is 300 ms; allow for the request and scheduling.
            self.assertLess(time.monotonic() - deleted, 0.3 + 0.4)
            with self.assertRaises(leasegate.LeaseLostError) as cm:
                lease.check()
            self.assertIn("410", cm.exception.reason)
        self.assertFalse(self.gw.inspect(name).held)

    def test_lost_is_false_until_the_lease_is_lost(self) -> None:
        # "if lease.lost:" reads as it says: false while the lease holds, true once it is lost;
        # and lost is still the threading.Event it was (wait, is_set).
        name = unique("truth")
        lease = self.gw.acquire(name, "py", ttl_ms=30000)
        self.assertIsInstance(lease.lost, threading.Event)
        self.assertIsInstance(lease.lost, leasegate.LostSignal)
        self.assertFalse(lease.lost)
        self.assertTrue(not lease.lost)
        self.assertFalse(lease.lost.is_set())
        self.assertEqual(repr(lease.lost), "<LostSignal clear>")
        lease.renew()
        self.assertFalse(lease.lost, "a renewal is no loss")
        self.assertTrue(lease.release())
        self.assertFalse(lease.lost, "nor is a release")
        with self.assertRaises(leasegate.LeaseGoneError):
            lease.renew()
        self.assertTrue(lease.lost)
        self.assertTrue(lease.lost.is_set())
        self.assertTrue(lease.lost.wait(0))
        self.assertEqual(repr(lease.lost), "<LostSignal set>")

    def test_force_release_sets_lost_within_100_ms(self) -> None:
        # A 30 s TTL: the next renewal would come 10 s later. The lease's events stream tells
        # the loss at once: in a with block (watched by default), for a lock's exclusive and
        # shared holds and a semaphore's permit; and for a hand-driven lease after watch().
        name = unique("forced")
        with self.gw.lock(name, "py", ttl_ms=30000) as lease:
            assert_lost_at_once(self, lease, f"/locks/{name}", "lock")
            self.assertIn("lost: force-released on the gateway at ", str(cm_check(lease)))
        self.assertFalse(self.gw.inspect(name).held)
        name = unique("forced-shared")
        with self.gw.lock(name, "py", mode="shared", ttl_ms=30000) as lease:
            assert_lost_at_once(self, lease, f"/locks/{name}", "shared hold")
        name = unique("forced-permit")
        with self.gw.semaphore(name, "py", permits=3, ttl_ms=30000) as permit:
            assert_lost_at_once(self, permit, f"/semaphores/{name}", "semaphore permit")
        name = unique("forced-by-hand")
        lease = self.gw.acquire(name, "py", ttl_ms=30000)
        self.assertFalse(lease.watching, "a hand-driven lease is not watched until asked")
        lease.watch()
        assert_lost_at_once(self, lease, f"/locks/{name}", "hand-driven lock")
        with self.assertRaises(leasegate.LeaseGoneError):
            lease.release()

    def test_watch_false_leaves_lost_to_renewals(self) -> None:
        name = unique("unwatched")
        with self.gw.lock(name, "py", ttl_ms=30000, watch=False) as lease:
            self.assertFalse(lease.watching)
            status, _ = raw("DELETE", f"/locks/{name}?force=true")
            self.assertEqual(status, 200)
            self.assertFalse(lease.lost.wait(0.3), "no stream: the loss waits for the next renewal")
            self.assertFalse(lease.watching)

    def test_own_release_is_no_loss_and_closes_the_stream(self) -> None:
        name = unique("own-release")
        lease = self.gw.acquire(name, "py", ttl_ms=30000)
        lease.watch()
        eventually("the events stream to open", lambda: lease.watching)
        lease.reenter()
        self.assertFalse(lease.release(), "one hold left")
        self.assertTrue(lease.watching, "still watched while it holds")
        self.assertTrue(lease.release())
        self.assertFalse(lease.watching)
        eventually("the watcher thread to stop",
                   lambda: not any(t.name == f"leasegate-watch:{name}" for t in threading.enumerate()))
        self.assertFalse(lease.lost, "its own release is no loss")

    def test_lost_before_lapse_when_renewals_fail(self) -> None:
        name = unique("partition")
        gw = RecordingClient(URL)
        with gw.lock(name, "partitioned", ttl_ms=900) as lease:
            down = leasegate.TransportError(title="Transport error", detail="injected: gateway unreachable")

            def unreachable(*args: Any, **kwargs: Any) -> Any:
                raise down

            gw._send = unreachable  # type: ignore[method-assign]
            self.assertTrue(lease.lost.wait(timeout=5))
            noticed = time.monotonic()
            until = lease.valid_until
            self.assertLess(noticed, until, "lost is set before the lease can lapse")
            self.assertGreaterEqual(noticed, until - lease.margin - 0.05)
            with self.assertRaises(leasegate.LeaseLostError):
                lease.check()
            del gw._send  # the gateway is back for the release on exit
        self.assertFalse(self.gw.inspect(name).held)

    def test_retries_reuse_the_idempotency_key(self) -> None:
        name = unique("retry")
        gw = RecordingClient(URL)
        lease = gw.acquire(name, "retrier", ttl_ms=5000)
        # A renewal whose answer is lost is retried with the same key; valid_until counts from
        # the first attempt.
        gw.fail["POST"] = ["lost"]
        before = time.monotonic()
        lease.renew(ttl_ms=6000)
        renews = [r for r in gw.requests("POST") if r[2].endswith("/renew")]
        self.assertEqual(len(renews), 2)
        self.assertEqual(renews[0][3]["Idempotency-Key"], renews[1][3]["Idempotency-Key"])
        self.assertLessEqual(lease.valid_until, renews[0][0] + 6.0)
        self.assertGreaterEqual(lease.valid_until, before + 6.0)
        lease.renew()
        third = [r for r in gw.requests("POST") if r[2].endswith("/renew")][2]
        self.assertNotEqual(third[3]["Idempotency-Key"], renews[0][3]["Idempotency-Key"], "a new key per call")

        # A 503 during a wait is retried (after min(Retry-After, 1 s)) within the wait.
        self.assertTrue(lease.release())
        unavailable = leasegate._Answer(
            status=503, reason="Service Unavailable",
            headers={"retry-after": "1", "content-type": "application/problem+json"},
            body=json.dumps({"type": "urn:leasegate:problem:backend-unavailable", "title": "Backend unavailable",
                             "status": 503, "detail": "injected"}).encode())
        gw.fail["POST"] = [unavailable]
        start = time.monotonic()
        again = gw.acquire(name, "retrier", ttl_ms=5000, wait_ms=3000)
        self.assertGreaterEqual(time.monotonic() - start, 0.9)
        acquires = [r for r in gw.requests("POST") if not r[2].endswith("/renew")][-2:]
        self.assertEqual(acquires[0][3]["Idempotency-Key"], acquires[1][3]["Idempotency-Key"])
        self.assertTrue(again.release())

        # A try-once acquire gives up on 503 after 3 tries.
        quick = leasegate._Answer(status=503, reason=unavailable.reason,
                                  headers={**unavailable.headers, "retry-after": "0"}, body=unavailable.body)
        gw.fail["POST"] = [quick] * 3
        with self.assertRaises(leasegate.LeasegateError) as cm:
            gw.acquire(name, "retrier")
        self.assertEqual((cm.exception.status, cm.exception.type), (503, "urn:leasegate:problem:backend-unavailable"))
        self.assertEqual(cm.exception.retry_after_s, 0)
        self.assertEqual(len(gw.fail["POST"]), 0, "3 tries")

    def test_retries_do_not_double_count(self) -> None:
        # A retried acquire whose first answer was lost gets the same lease, not a 409.
        name = unique("once")
        gw = RecordingClient(URL)
        gw.fail["POST"] = ["lost"]
        lease = gw.acquire(name, "once", ttl_ms=10000)
        acquires = gw.requests("POST")
        self.assertEqual(len(acquires), 2)
        self.assertEqual(acquires[0][3]["Idempotency-Key"], acquires[1][3]["Idempotency-Key"])
        st = gw.inspect(name, lease.token)
        self.assertEqual((st.yours, st.holds, st.fence), (True, 1, lease.fence))

        # Re-enter (raw, holds 2); a release whose answer is lost, retried with its key, gives
        # back one hold, not two.
        status, body = raw("POST", f"/locks/{name}", {"Lease-Token": lease.token}, {"owner": "once", "ttl_ms": 10000})
        self.assertEqual((status, body["holds"]), (200, 2))
        gw.fail["DELETE"] = ["lost"]
        self.assertFalse(lease.release(), "one hold is left")
        self.assertEqual(lease.holds, 1)
        deletes = gw.requests("DELETE")
        self.assertEqual(len(deletes), 2)
        self.assertEqual(deletes[0][3]["Idempotency-Key"], deletes[1][3]["Idempotency-Key"])
        st = gw.inspect(name, lease.token)
        self.assertEqual((st.yours, st.holds), (True, 1))
        self.assertTrue(lease.release())
        self.assertFalse(gw.inspect(name).held)

    def test_invalid_params_in_the_message(self) -> None:
        name = unique("invalid")
        with self.assertRaises(leasegate.LeasegateError) as cm:
            self.gw.acquire(name, "py", ttl_ms=0)
        e = cm.exception
        self.assertNotIsInstance(e, (leasegate.LockHeldError, leasegate.LeaseGoneError))
        self.assertEqual((e.status, e.type), (400, "urn:leasegate:problem:invalid-request"))
        self.assertIn("ttl_ms", [n for n, _ in e.invalid_params])
        s = str(e)
        self.assertIn("400", s)
        self.assertIn("urn:leasegate:problem:invalid-request", s)
        self.assertIn(e.detail, s)
        for n, r in e.invalid_params:
            self.assertIn(f"{n}: {r}", s)
        self.assertTrue(e.request_id)

        with self.assertRaises(leasegate.LeasegateError) as cm:
            self.gw.inspect("bad name!")
        self.assertEqual(cm.exception.type, "urn:leasegate:problem:invalid-lock-name")
        # Its detail and its invalid_params' reason are the same text: said once.
        self.assertEqual(str(cm.exception).count(cm.exception.detail), 1, str(cm.exception))

    def test_unreachable_gateway(self) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        gw = leasegate.Client(f"http://127.0.0.1:{port}", timeout=2)
        with self.assertRaises(leasegate.TransportError) as cm:
            gw.acquire(unique("nowhere"), "py")
        self.assertEqual(cm.exception.status, 0)
        self.assertIsInstance(cm.exception.__cause__, OSError)


class Offline(unittest.TestCase):
    """Checks that need no gateway."""

    def test_non_problem_body_is_about_blank(self) -> None:
        e = leasegate.LeasegateError.from_answer(502, "Bad Gateway", {"x-request-id": "r1"}, b"<html>upstream down</html>")
        self.assertIs(type(e), leasegate.LeasegateError)
        self.assertEqual((e.type, e.status, e.request_id), ("about:blank", 502, "r1"))
        self.assertIn("upstream down", str(e))

    def test_problem_classes(self) -> None:
        held = leasegate.LeasegateError.from_answer(409, "Conflict", {"retry-after": "3"}, json.dumps({
            "type": "urn:leasegate:problem:lock-held", "title": "Lock held", "status": 409, "detail": "held",
            "retry_after_ms": 2500, "waited_ms": 100, "queue_ticket": "t.s", "request_id": "r2"}).encode())
        self.assertIsInstance(held, leasegate.LockHeldError)
        self.assertEqual((held.retry_after_ms, held.waited_ms, held.queue_ticket, held.retry_after_s),
                         (2500, 100, "t.s", 3))
        gone = leasegate.LeasegateError.from_answer(410, "Gone", {}, json.dumps({
            "type": "urn:leasegate:problem:lease-gone", "title": "Lease gone", "status": 410, "detail": "gone"}).encode())
        self.assertIsInstance(gone, leasegate.LeaseGoneError)

    def test_errors_pickle(self) -> None:
        import pickle

        e = leasegate.LockHeldError(type="urn:leasegate:problem:lock-held", status=409, detail="held",
                                    invalid_params=[("a", "b")], retry_after_ms=5)
        back: leasegate.LeasegateError = pickle.loads(pickle.dumps(e))
        self.assertIs(type(back), leasegate.LockHeldError)
        self.assertEqual((str(back), back.retry_after_ms), (str(e), 5))
        lost: leasegate.LeaseLostError = pickle.loads(pickle.dumps(leasegate.LeaseLostError("x", "why")))
        self.assertEqual((lost.lock, lost.reason), ("x", "why"))

    def test_only_the_standard_library(self) -> None:
        tree = ast.parse((SDK_DIR / "leasegate.py").read_text())
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                self.assertEqual(node.level, 0, "no relative imports")
                assert node.module is not None
                imported.add(node.module.split(".")[0])
        third_party = sorted(m for m in imported if m not in sys.stdlib_module_names and m != "__future__")
        self.assertEqual(third_party, [], "leasegate.py must import only the standard library")
        self.assertIn("threading", imported)


if __name__ == "__main__":
    unittest.main()
