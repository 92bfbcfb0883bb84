"""End-to-end tests of sdk/python/leasegate.py's multi-locks (``lock_all``, ``multilock``).

Run with test_e2e.py by tests/sdks/python_sdk_test.go (``go test -run TestPython
./tests/sdks``), which starts a redis-server and a gateway and sets LEASEGATE_URL. By hand:

    LEASEGATE_URL=http://127.0.0.1:8080 python3 -m unittest discover -s sdk/python/tests -v

Tests synchronise by polling conditions with deadlines (``eventually``), never by sleeping.
"""

from __future__ import annotations

import json
import pickle
import sys
import time
import unittest
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SDK_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SDK_DIR))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import leasegate  # noqa: E402
from test_e2e import URL, RecordingClient, assert_lost_at_once, eventually, in_thread, raw  # noqa: E402
from test_rw_semaphore import problem_answer  # noqa: E402


def names(prefix: str, *members: str) -> list[str]:
    """Lock names of a test's own, sorting in the order of ``members``."""
    run = uuid.uuid4().hex[:12]
    return [f"py.{prefix}.{run}.{m}" for m in members]


@unittest.skipUnless(URL, "LEASEGATE_URL is not set (tests/sdks/python_sdk_test.go sets it)")
class MultiLocks(unittest.TestCase):
    def setUp(self) -> None:
        self.gw = leasegate.Client(URL, timeout=10)

    def held_by(self, name: str, group: leasegate.MultiLease) -> bool:
        """Whether ``name`` is held exclusively by ``group``, with the member's fence."""
        st = self.gw.inspect(name)
        return st.held and st.mode == "exclusive" and st.multilock == group.id and st.fence == group.fences[name]

    def assert_free(self, *locks: str) -> None:
        for name in locks:
            self.assertFalse(self.gw.inspect(name).held, name)

    def test_grant_both_then_release(self) -> None:
        a, b = names("multi", "a", "b")
        before = time.monotonic()
        group = self.gw.lock_all([b, a], "transfer-1", ttl_ms=20000)
        self.assertIsInstance(group, leasegate.MultiLease)
        self.assertRegex(group.id, r"^m-[0-9a-f-]{36}$")
        self.assertEqual((group.kind, group.name, group.owner, group.mode, group.ttl_ms, group.watchdog),
                         ("multilock", group.id, "transfer-1", "exclusive", 20000, False))
        self.assertEqual(group.locks, (a, b), "members in name order")
        self.assertEqual([m.lock for m in group.members], [a, b])
        self.assertEqual(set(group.fences), {a, b})
        self.assertTrue(all(f > 0 for f in group.fences.values()))
        self.assertNotIn(group.token, repr(group))
        self.assertNotIn(group.token, repr(group.grant))
        self.assertGreaterEqual(group.valid_until, before + 20.0)
        group.check()

        for name in (a, b):
            st = self.gw.inspect(name)
            self.assertEqual((st.held, st.mode, st.owner, st.fence, st.multilock),
                             (True, "exclusive", "transfer-1", group.fences[name], group.id))
        with self.assertRaises(leasegate.LockHeldError):
            self.gw.acquire(a, "someone-else")

        g = group.renew(ttl_ms=25000)
        self.assertIsInstance(g, leasegate.MultiLockGrant)
        self.assertEqual((g.id, g.ttl_ms, group.ttl_ms, g.locks), (group.id, 25000, 25000, group.members))
        self.assertGreater(self.gw.inspect(b).ttl_ms or 0, 20000, "every member renewed")

        self.assertTrue(group.release())
        self.assert_free(a, b)
        with self.assertRaises(leasegate.LeaseLostError) as lost:
            group.check()
        self.assertEqual((lost.exception.reason, lost.exception.kind, lost.exception.lock), ("released", "multilock", group.id))
        with self.assertRaises(leasegate.LeaseGoneError) as cm:
            group.release()
        self.assertEqual((cm.exception.status, sorted(cm.exception.locks or [])), (410, [a, b]))
        self.assertTrue(group.lost.is_set())

        again = self.gw.lock_all([a, b], "transfer-2")
        self.assertGreater(again.fences[a], group.fences[a], "fences never go backwards")
        self.assertTrue(again.release())

    def test_raw_contract_and_token_kinds(self) -> None:
        a, b, single = names("multi-raw", "a", "b", "single")
        status, body = raw("POST", "/multilocks", body={"owner": "raw", "locks": [a, b], "ttl_ms": 20000})
        self.assertEqual(status, 201, body)
        token = body["token"]
        # The group's token is refused by the lock endpoints, a lock's by the group's: 400.
        for method, path in (("POST", f"/locks/{a}/renew"), ("DELETE", f"/locks/{a}")):
            status, problem = raw(method, path, {"Lease-Token": token})
            self.assertEqual((status, problem["type"]), (400, "urn:leasegate:problem:invalid-lease-token"), path)
        lease = self.gw.acquire(single, "raw", ttl_ms=20000)
        status, problem = raw("DELETE", f"/multilocks/{body['id']}", {"Lease-Token": lease.token})
        self.assertEqual((status, problem["type"]), (400, "urn:leasegate:problem:invalid-lease-token"))
        self.assertTrue(lease.release())
        # DELETE /multilocks (no id) with the token.
        status, rel = raw("DELETE", "/multilocks", {"Lease-Token": token})
        self.assertEqual((status, rel), (200, {"id": body["id"], "released": True, "locks": [a, b]}))
        self.assert_free(a, b)

    def test_conflict_lists_the_held_members(self) -> None:
        a, b, c, d = names("multi-held", "a", "b", "c", "d")
        hb = self.gw.acquire(b, "holder-b", ttl_ms=20000)
        hd = self.gw.acquire(d, "holder-d", ttl_ms=25000)
        with self.assertRaises(leasegate.LockHeldError) as cm:
            self.gw.lock_all([d, c, b, a], "group")
        e = cm.exception
        self.assertIsInstance(e, leasegate.HeldError)
        self.assertEqual((e.status, e.type), (409, "urn:leasegate:problem:lock-held"))
        self.assertEqual(sorted(e.locks or []), [b, d])
        assert e.retry_after_ms is not None
        self.assertTrue(20000 < e.retry_after_ms <= 25000, f"the longest wait: {e.retry_after_ms}")
        self.assertIsNone(e.queue_ticket, "a try-once group gets no queue ticket")
        self.assert_free(a, c)

        start = time.monotonic()
        with self.assertRaises(leasegate.LockHeldError) as cm:
            self.gw.lock_all([a, b, c, d], "group", wait_ms=300)
        self.assertGreaterEqual(time.monotonic() - start, 0.29)
        self.assertGreaterEqual(cm.exception.waited_ms or 0, 250)
        self.assertTrue(cm.exception.locks, "the held members after the wait")
        eventually("the waiting group to give back what it took",
                   lambda: all(not self.gw.inspect(n).held for n in (a, c)) and self.gw.inspect(b).waiters == 0)
        self.assertTrue(hb.release())
        self.assertTrue(hd.release())

    def test_overlapping_group_waits_then_gets_it(self) -> None:
        a, b, c = names("multi-wait", "a", "b", "c")
        first = self.gw.lock_all([a, b], "first", ttl_ms=30000)
        gw = RecordingClient(URL)
        second = in_thread(lambda: gw.lock_all([c, b], "second", ttl_ms=30000, wait_ms=10000,
                                               max_wait_per_request_ms=300))
        eventually("the second group in b's line", lambda: self.gw.inspect(b).waiters == 1)
        eventually("three long-polls", lambda: len(gw.requests("POST")) >= 3)
        self.assertFalse(second.done.is_set(), "answered while the first group held b")
        self.assertTrue(self.held_by(a, first))

        self.assertTrue(first.release())
        group: leasegate.MultiLease = second.get(timeout=10)
        self.assertEqual((group.owner, group.locks), ("second", (b, c)))
        self.assertGreater(group.fences[b], first.fences[b])
        self.assertTrue(self.held_by(b, group) and self.held_by(c, group))
        self.assertFalse(self.gw.inspect(a).held)

        polls = gw.requests("POST")
        self.assertGreaterEqual(len(polls), 3)
        for i, (_, _, path, headers, body) in enumerate(polls):
            assert body is not None
            self.assertEqual(path, "/multilocks")
            self.assertNotIn("Idempotency-Key", headers, "/multilocks takes no Idempotency-Key")
            if i == 0:
                self.assertNotIn("queue_ticket", body, "the first long-poll has no ticket")
            else:
                self.assertIn("queue_ticket", body, "every later long-poll keeps the group's place")
            self.assertEqual(body["locks"], [c, b])
            self.assertTrue(1 <= body["wait_ms"] <= 300, body["wait_ms"])
        self.assertTrue(group.release())
        self.assert_free(a, b, c)

    def test_context_manager_keeps_a_short_ttl_group_alive(self) -> None:
        a, b = names("multi-keepalive", "a", "b")
        gw = RecordingClient(URL)
        start = time.monotonic()
        with gw.multilock([a, b], "cm", ttl_ms=900) as group:
            self.assertAlmostEqual(group.margin, 0.09)
            while time.monotonic() - start < 2.5:
                group.check()
                self.assertTrue(self.held_by(a, group) and self.held_by(b, group),
                                f"lost after {time.monotonic() - start:.2f}s")
                group.lost.wait(0.05)  # the "work"
            self.assertFalse(group.lost.is_set())
            self.assertGreater(group.valid_until, start + 2.5)
        self.assertFalse(group.lost.is_set())
        self.assert_free(a, b)
        for t in group._threads:
            self.assertFalse(t.is_alive(), f"{t.name} stopped on exit")
        renewals = [r for r in gw.requests("POST") if r[2] == f"/multilocks/{group.id}/renew"]
        self.assertGreaterEqual(len(renewals), 5, "renewed every TTL/3 for 2.5 s")
        self.assertTrue(all("Idempotency-Key" not in r[3] for r in renewals))
        self.assertEqual([r[2] for r in gw.requests("DELETE")], [f"/multilocks/{group.id}"])

    def test_lost_when_released_behind_its_back(self) -> None:
        a, b = names("multi-stolen", "a", "b")
        with self.gw.multilock([a, b], "victim", ttl_ms=900) as group:
            status, body = raw("DELETE", f"/multilocks/{group.id}", {"Lease-Token": group.token})
            self.assertEqual((status, body["released"]), (200, True))
            self.assertTrue(group.lost.wait(timeout=5), "lost is set")
            with self.assertRaises(leasegate.LeaseLostError) as cm:
                group.check()
            self.assertEqual((cm.exception.kind, cm.exception.lock), ("multilock", group.id))
            self.assertIn("410", cm.exception.reason)
        self.assert_free(a, b)

    def test_member_force_released_sets_lost_within_100_ms(self) -> None:
        # The group follows each member's stream (without a token, by the member's fence): a
        # force release of one member sets lost at once; the group's release then answers 410
        # and frees the other member.
        a, b = names("multi-forced", "a", "b")
        with self.gw.multilock([a, b], "victim", ttl_ms=30000) as group:
            assert_lost_at_once(self, group, f"/locks/{b}", "multi-lock member")
            self.assertIn(f"member {b!r}", group._lost_reason)
        self.assert_free(a, b)

    def test_watchdog_group_is_checked_through_its_members(self) -> None:
        a, b = names("multi-watchdog", "a", "b")
        start = time.monotonic()
        with self.gw.multilock([a, b], "wd", ttl_ms=900, watchdog=True, max_hold_ms=1500) as group:
            self.assertTrue(group.watchdog)
            self.assertTrue(group.lost.wait(timeout=6), "lost once the watchdog stopped renewing")
            noticed = time.monotonic()
            self.assertGreater(noticed - start, 1.2, "the watchdog's renewals were seen")
            self.assertLess(noticed, group.valid_until)
        eventually("the members to lapse or be released",
                   lambda: not self.gw.inspect(a).held and not self.gw.inspect(b).held, timeout=5)

    def test_shared_groups_coexist(self) -> None:
        a, b, c = names("multi-shared", "a", "b", "c")
        g1 = self.gw.lock_all([a, b], "reader-1", mode="shared", ttl_ms=20000)
        g2 = self.gw.lock_all([b, c], "reader-2", mode="shared", ttl_ms=20000)
        self.assertEqual((g1.mode, g2.grant.mode), ("shared", "shared"))
        st = self.gw.inspect(b)
        self.assertEqual((st.mode, st.holder_count), ("shared", 2))
        self.assertEqual({(h.multilock, h.fence) for h in st.holders},
                         {(g1.id, g1.fences[b]), (g2.id, g2.fences[b])})
        with self.assertRaises(leasegate.LockHeldError) as cm:
            self.gw.lock_all([a, c], "writer")
        self.assertEqual(sorted(cm.exception.locks or []), [a, c])
        # A shared watchdog group finds its holds among the holders.
        # (3 s TTLs, renewed every second: a 600 ms TTL lapsed on a busy machine.)
        with self.gw.multilock([a, c], "reader-3", mode="shared", ttl_ms=3000, watchdog=True, max_hold_ms=60000) as g3:
            deadline = time.monotonic() + 3.5
            while time.monotonic() < deadline:
                g3.check()
                g3.lost.wait(0.05)
        self.assertTrue(g1.release())
        self.assertTrue(g2.release())
        self.assert_free(a, b, c)

    def test_retries_without_idempotency_keys(self) -> None:
        a, b = names("multi-retry", "a", "b")
        gw = RecordingClient(URL)
        # A 503 during a wait is retried within it.
        gw.fail["POST"] = [problem_answer(503, "urn:leasegate:problem:backend-unavailable", retry_after="0")]
        group = gw.lock_all([a, b], "retrier", wait_ms=3000)
        posts = gw.requests("POST")
        self.assertEqual(len(posts), 2)
        self.assertTrue(all("Idempotency-Key" not in r[3] for r in posts))
        self.assertTrue(group.release())

        # A lost answer may have been granted: not retried.
        gw.fail["POST"] = ["lost"]
        with self.assertRaises(leasegate.TransportError):
            gw.lock_all([a, b], "retrier", wait_ms=3000)
        self.assertEqual(len(gw.requests("POST")), 3, "sent once")
        orphan = self.gw.inspect(a)
        self.assertEqual((orphan.owner, orphan.multilock is not None), ("retrier", True),
                         "the unanswered request was granted: a retry would have waited for it")

        # A refused connection sent nothing: retried.
        refused = RefusingOnce(URL)
        c, d = names("multi-refused", "c", "d")
        g = refused.lock_all([c, d], "retrier")
        self.assertEqual(refused.attempts, 2)
        self.assertTrue(g.release())

    def test_names_must_be_a_sequence(self) -> None:
        with self.assertRaises(TypeError):
            self.gw.lock_all("ab", "o")


class RefusingOnce(leasegate.Client):
    """A client whose first request fails as a refused connection would."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.attempts = 0

    def _send(self, method: str, path: str, *, body: Mapping[str, Any] | None = None,
              headers: Mapping[str, str] | None = None, timeout: float | None = None) -> Any:
        self.attempts += 1
        if self.attempts == 1:
            err = leasegate.TransportError(title="Transport error", detail="injected: connection refused")
            err.__cause__ = ConnectionRefusedError(111, "Connection refused")
            raise err
        return super()._send(method, path, body=body, headers=headers, timeout=timeout)


class OfflineMultiLocks(unittest.TestCase):
    """Multi-lock answers and errors, without a gateway."""

    def test_grant_from_json(self) -> None:
        g = leasegate.MultiLockGrant.from_json({
            "id": "m-1", "owner": "o", "token": "t.s", "mode": "shared", "ttl_ms": 500,
            "expires_at": "2026-01-01T00:00:00Z", "watchdog": False,
            "locks": [{"lock": "a", "fence": 3}, {"lock": "b", "fence": 9}]})
        self.assertEqual((g.name, g.mode, g.locks), ("m-1", "shared", (leasegate.MultiLockMember("a", 3),
                                                                        leasegate.MultiLockMember("b", 9))))
        self.assertNotIn("t.s", repr(g))

    def test_problem_locks(self) -> None:
        body = {"type": "urn:leasegate:problem:lock-held", "title": "Lock held", "status": 409, "detail": "held",
                "locks": ["a", "c"], "retry_after_ms": 900}
        e = leasegate.LeasegateError.from_answer(409, "Conflict", {}, json.dumps(body).encode())
        self.assertIsInstance(e, leasegate.LockHeldError)
        self.assertEqual((e.locks, e.retry_after_ms, e.lock), (["a", "c"], 900, None))
        back: leasegate.LeasegateError = pickle.loads(pickle.dumps(e))
        self.assertEqual(back.locks, ["a", "c"])
        gone = leasegate.LeasegateError.from_answer(410, "Gone", {}, json.dumps({
            "type": "urn:leasegate:problem:lease-gone", "title": "Lease gone", "status": 410, "detail": "gone",
            "locks": ["b"]}).encode())
        self.assertIsInstance(gone, leasegate.LeaseGoneError)
        self.assertEqual(gone.locks, ["b"])
        plain = leasegate.LeasegateError.from_answer(409, "Conflict", {}, json.dumps({**body, "locks": None}).encode())
        self.assertIsNone(plain.locks)
        lost: leasegate.LeaseLostError = pickle.loads(pickle.dumps(leasegate.LeaseLostError("m-1", "why", "multilock")))
        self.assertEqual((lost.lock, lost.kind), ("m-1", "multilock"))
        self.assertIn("multilock 'm-1'", str(lost))


if __name__ == "__main__":
    unittest.main()
