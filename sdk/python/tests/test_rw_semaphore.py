"""End-to-end tests of sdk/python/leasegate.py's read-write locks and semaphores.

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
from pathlib import Path

SDK_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SDK_DIR))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import leasegate  # noqa: E402
from test_e2e import URL, RecordingClient, eventually, in_thread, raw, unique  # noqa: E402


def problem_answer(status: int, ptype: str, retry_after: str = "0") -> leasegate._Answer:
    """An injected answer carrying a problem body (for RecordingClient.fail)."""
    return leasegate._Answer(
        status=status, reason="injected",
        headers={"retry-after": retry_after, "content-type": "application/problem+json"},
        body=json.dumps({"type": ptype, "title": "injected", "status": status, "detail": "injected"}).encode())


@unittest.skipUnless(URL, "LEASEGATE_URL is not set (tests/sdks/python_sdk_test.go sets it)")
class ReadWriteLocks(unittest.TestCase):
    def setUp(self) -> None:
        self.gw = leasegate.Client(URL, timeout=10)

    def test_shared_holders_coexist_while_an_exclusive_try_fails(self) -> None:
        name = unique("rw")
        r1 = self.gw.acquire(name, "reader-1", mode="shared", ttl_ms=20000)
        r2 = self.gw.acquire(name, "reader-2", mode="shared", ttl_ms=20000)
        self.assertEqual((r1.mode, r1.grant.mode, r1.holds, r1.kind), ("shared", "shared", 1, "lock"))
        self.assertEqual((r2.mode, r2.holds), ("shared", 1))
        self.assertGreater(r2.fence, r1.fence, "each reader has a lease, and a fence, of its own")
        self.assertNotEqual(r1.token, r2.token)

        st = self.gw.inspect(name, r1.token)
        self.assertEqual((st.held, st.mode, st.holder_count, st.yours), (True, "shared", 2, True))
        self.assertIsNone(st.owner, "no exclusive holder")
        self.assertEqual({(h.owner, h.fence) for h in st.holders}, {("reader-1", r1.fence), ("reader-2", r2.fence)})

        with self.assertRaises(leasegate.LockHeldError) as cm:
            self.gw.acquire(name, "writer")
        e = cm.exception
        self.assertIsInstance(e, leasegate.HeldError)
        self.assertEqual((e.status, e.type, e.lock), (409, "urn:leasegate:problem:lock-held", name))
        assert e.retry_after_ms is not None
        self.assertTrue(0 < e.retry_after_ms <= 20000, e.retry_after_ms)
        with self.assertRaises(leasegate.LockHeldError) as cm:
            self.gw.acquire(name, "writer", wait_ms=200)
        self.assertGreaterEqual(cm.exception.waited_ms or 0, 150)

        # A third reader, through the context manager, joins them; its hold goes on exit.
        with self.gw.lock(name, "reader-3", mode="shared", ttl_ms=20000) as r3:
            self.assertEqual(r3.mode, "shared")
            self.assertEqual(self.gw.inspect(name).holder_count, 3)
        self.assertEqual(self.gw.inspect(name).holder_count, 2)

        # One reader's release leaves the other holding, and the writer out.
        self.assertTrue(r1.release())
        self.assertEqual(r1.holds, 0)
        st = self.gw.inspect(name)
        self.assertEqual((st.mode, st.holder_count), ("shared", 1))
        with self.assertRaises(leasegate.LockHeldError):
            self.gw.acquire(name, "writer")
        self.assertTrue(r2.release())

        w = self.gw.acquire(name, "writer", ttl_ms=20000)
        self.assertEqual((w.mode, w.grant.mode), ("exclusive", "exclusive"))
        self.assertGreater(w.fence, r2.fence)
        st = self.gw.inspect(name)
        self.assertEqual((st.mode, st.owner, st.fence, st.holder_count), ("exclusive", "writer", w.fence, 0))
        with self.assertRaises(leasegate.LockHeldError):
            self.gw.acquire(name, "reader-4", mode="shared")
        self.assertTrue(w.release())
        self.assertFalse(self.gw.inspect(name).held)

    def test_waiting_writer_gets_the_lock_when_the_readers_leave(self) -> None:
        name = unique("rw-wait")
        readers = [self.gw.acquire(name, f"reader-{i}", mode="shared", ttl_ms=20000) for i in range(2)]
        writer = in_thread(lambda: self.gw.acquire(name, "writer", ttl_ms=20000, wait_ms=10000))
        eventually("the writer in line", lambda: self.gw.inspect(name).waiters == 1)
        # A new reader queues behind the waiting writer: a try fails.
        with self.assertRaises(leasegate.LockHeldError):
            self.gw.acquire(name, "late-reader", mode="shared")
        self.assertTrue(readers[0].release())
        self.assertFalse(writer.done.is_set(), "one reader still holds")
        self.assertTrue(readers[1].release())
        lease: leasegate.Lease = writer.get(timeout=10)
        self.assertEqual((lease.owner, lease.mode), ("writer", "exclusive"))
        self.assertTrue(self.gw.inspect(name, lease.token).yours)
        self.assertTrue(lease.release())

    def test_upgrade_refused_and_downgrade(self) -> None:
        name = unique("upgrade")
        reader = self.gw.acquire(name, "reader", mode="shared", ttl_ms=20000)
        with self.assertRaises(leasegate.UpgradeRefusedError) as cm:
            reader.reenter(mode="exclusive")
        e = cm.exception
        self.assertEqual((e.status, e.type), (409, "urn:leasegate:problem:upgrade-refused"))
        self.assertNotIsInstance(e, leasegate.HeldError)
        self.assertFalse(reader.lost.is_set(), "a refused upgrade keeps the shared hold")
        self.assertEqual((reader.mode, reader.holds), ("shared", 1))
        st = self.gw.inspect(name, reader.token)
        self.assertEqual((st.yours, st.mode, st.holder_count), (True, "shared", 1))

        # Re-entry keeps the lease's own mode: shared, holds 2, same fence.
        g = reader.reenter(ttl_ms=15000)
        self.assertEqual((g.mode, g.holds, g.fence, g.ttl_ms), ("shared", 2, reader.fence, 15000))
        self.assertEqual(reader.holds, 2)
        self.assertEqual(self.gw.inspect(name).holders[0].holds, 2)
        self.assertFalse(reader.release(), "one shared hold is left")
        self.assertTrue(reader.release())

        # Downgrade: the writer takes a shared hold too, then gives back its exclusive one.
        writer = self.gw.acquire(name, "writer", ttl_ms=20000)
        g = writer.reenter(mode="shared")
        self.assertEqual((g.mode, g.holds, g.fence), ("shared", 1, writer.fence))
        self.assertEqual((writer.mode, writer.holds), ("exclusive", 2))
        st = self.gw.inspect(name)
        self.assertEqual((st.mode, st.owner, st.holder_count), ("exclusive", "writer", 1))
        self.assertFalse(writer.release(mode="exclusive"), "the lease still holds the lock shared")
        self.assertEqual((writer.mode, writer.holds), ("shared", 1))
        st = self.gw.inspect(name, writer.token)
        self.assertEqual((st.yours, st.mode, st.owner, st.holder_count), (True, "shared", None, 1))
        other = self.gw.acquire(name, "reader-2", mode="shared")  # readers may join now
        self.assertTrue(other.release())
        # Asked for a way it no longer holds: 410, and the lease is not lost (it holds shared).
        with self.assertRaises(leasegate.LeaseGoneError):
            writer.release(mode="exclusive")
        self.assertFalse(writer.lost.is_set())
        writer.check()
        self.assertTrue(writer.release(mode="shared"))
        self.assertFalse(self.gw.inspect(name).held)
        with self.assertRaises(ValueError):
            writer.release(mode="both")  # type: ignore[arg-type]

    def test_shared_hold_with_the_gateway_watchdog(self) -> None:
        # The keep-alive thread finds a shared watchdog lease among the holders by its fence.
        name = unique("rw-watchdog")
        other = self.gw.acquire(name, "reader-0", mode="shared", ttl_ms=20000)
        start = time.monotonic()
        with self.gw.lock(name, "wd", mode="shared", ttl_ms=900, watchdog=True, max_hold_ms=1500) as lease:
            self.assertTrue(lease.watchdog)
            self.assertTrue(lease.lost.wait(timeout=6), "lost once the watchdog stopped renewing")
            noticed = time.monotonic()
            self.assertGreater(noticed - start, 1.2, "the watchdog's renewals were seen")
            self.assertLess(noticed, lease.valid_until)
        eventually("the shared hold to lapse or be released", lambda: self.gw.inspect(name).holder_count == 1, timeout=5)
        self.assertTrue(other.release())


@unittest.skipUnless(URL, "LEASEGATE_URL is not set (tests/sdks/python_sdk_test.go sets it)")
class Semaphores(unittest.TestCase):
    def setUp(self) -> None:
        self.gw = leasegate.Client(URL, timeout=10)

    def test_two_permits_granted_the_third_refused(self) -> None:
        name = unique("sem")
        p1 = self.gw.acquire_semaphore(name, "worker-1", permits=2, ttl_ms=20000)
        p2 = self.gw.acquire_semaphore(name, "worker-2", permits=2, ttl_ms=20000)
        self.assertEqual((p1.semaphore, p1.name, p1.kind, p1.permits, p1.used, p1.holds), (name, name, "semaphore", 2, 1, 1))
        self.assertEqual((p2.permits, p2.used), (2, 2))
        self.assertGreater(p2.fence, p1.fence)
        self.assertNotIn(p1.token, repr(p1))
        self.assertNotIn(p1.token, repr(p1.grant))

        with self.assertRaises(leasegate.SemaphoreFullError) as cm:
            self.gw.acquire_semaphore(name, "worker-3", permits=2)
        e = cm.exception
        self.assertIsInstance(e, leasegate.HeldError)
        self.assertNotIsInstance(e, leasegate.LockHeldError)
        self.assertEqual((e.status, e.type, e.semaphore), (409, "urn:leasegate:problem:semaphore-full", name))
        assert e.retry_after_ms is not None
        self.assertTrue(0 < e.retry_after_ms <= 20000, e.retry_after_ms)
        with self.assertRaises(leasegate.SemaphoreFullError) as cm:
            self.gw.acquire_semaphore(name, "worker-3", permits=2, wait_ms=200)
        self.assertGreaterEqual(cm.exception.waited_ms or 0, 150)

        st = self.gw.inspect_semaphore(name, p1.token)
        self.assertEqual((st.name, st.permits, st.used, st.holder_count, st.waiters, st.yours), (name, 2, 2, 2, 0, True))
        self.assertEqual({h.owner for h in st.holders}, {"worker-1", "worker-2"})
        # Locks are a name space apart.
        self.assertFalse(self.gw.inspect(name).held)

        # Re-entry and renewal: the same permit, with the semaphore's answers.
        g = p1.reenter()
        self.assertEqual((g.holds, g.fence, g.used, p1.holds), (2, p1.fence, 2, 2))
        g = p1.renew(ttl_ms=25000)
        self.assertIsInstance(g, leasegate.SemaphoreGrant)
        self.assertEqual((g.ttl_ms, p1.ttl_ms), (25000, 25000))
        self.assertFalse(p1.release(), "one hold of the permit is left")
        self.assertEqual(p1.holds, 1)
        self.assertTrue(p1.release())
        self.assertTrue(p2.release())
        self.assertEqual(self.gw.inspect_semaphore(name).used, 0)
        with self.assertRaises(leasegate.LeaseGoneError):
            p2.release()
        self.assertTrue(p2.lost.is_set())
        with self.assertRaises(leasegate.LeaseLostError) as lost:
            p2.check()
        self.assertEqual((lost.exception.kind, lost.exception.lock), ("semaphore", name))

    def test_waiting_permit_is_granted_on_release(self) -> None:
        name = unique("sem-handoff")
        holders = [self.gw.acquire_semaphore(name, f"holder-{i}", permits=2, ttl_ms=30000) for i in range(2)]
        waiter = in_thread(lambda: self.gw.acquire_semaphore(name, "waiter", permits=2, ttl_ms=30000, wait_ms=10000))
        eventually("the waiter in line", lambda: self.gw.inspect_semaphore(name).waiters == 1)
        self.assertFalse(waiter.done.is_set())
        self.assertTrue(holders[0].release())
        lease: leasegate.SemaphoreLease = waiter.get(timeout=10)
        self.assertEqual((lease.owner, lease.permits, lease.used), ("waiter", 2, 2))
        self.assertGreater(lease.fence, holders[1].fence)
        st = self.gw.inspect_semaphore(name, lease.token)
        self.assertEqual((st.yours, st.used, st.waiters), (True, 2, 0))
        self.assertTrue(lease.release())
        self.assertTrue(holders[1].release())

    def test_permits_mismatch(self) -> None:
        name = unique("sem-size")
        p = self.gw.acquire_semaphore(name, "worker-1", permits=2, ttl_ms=20000)
        with self.assertRaises(leasegate.PermitsMismatchError) as cm:
            self.gw.acquire_semaphore(name, "worker-2", permits=3)
        e = cm.exception
        self.assertEqual((e.status, e.type, e.semaphore, e.permits), (409, "urn:leasegate:problem:permits-mismatch", name, 2))
        self.assertNotIsInstance(e, leasegate.HeldError)
        # Asked to wait, it is not waited out: the size will not change while someone holds.
        start = time.monotonic()
        with self.assertRaises(leasegate.PermitsMismatchError):
            self.gw.acquire_semaphore(name, "worker-2", permits=3, wait_ms=5000)
        self.assertLess(time.monotonic() - start, 2.5)
        self.assertTrue(p.release())
        # Once nobody holds or waits, the next acquirer sets the size.
        q = self.gw.acquire_semaphore(name, "worker-2", permits=3)
        self.assertEqual(q.permits, 3)
        self.assertEqual(self.gw.inspect_semaphore(name).permits, 3)
        self.assertTrue(q.release())

    def test_context_manager_renews_a_permit_past_its_ttl(self) -> None:
        name = unique("sem-keepalive")
        gw = RecordingClient(URL)
        start = time.monotonic()
        with gw.semaphore(name, "cm", permits=1, ttl_ms=900) as lease:
            fence = lease.fence
            self.assertAlmostEqual(lease.margin, 0.09)
            while time.monotonic() - start < 2.5:
                lease.check()
                lease.lost.wait(0.05)  # the "work"
            self.assertFalse(lease.lost.is_set())
            self.assertGreater(lease.valid_until, start + 2.5)
            st = self.gw.inspect_semaphore(name, lease.token)
            self.assertEqual((st.yours, st.used, st.holders[0].fence), (True, 1, fence))
            with self.assertRaises(leasegate.SemaphoreFullError):
                self.gw.acquire_semaphore(name, "other", permits=1)
        self.assertFalse(lease.lost.is_set())
        self.assertEqual(self.gw.inspect_semaphore(name).used, 0, "released on exit")
        for t in lease._threads:
            self.assertFalse(t.is_alive(), f"{t.name} stopped on exit")
        renewals = [r for r in gw.requests("POST") if r[2] == f"/semaphores/{name}/renew"]
        self.assertGreaterEqual(len(renewals), 5, "renewed every TTL/3 for 2.5 s")
        deletes = gw.requests("DELETE")
        self.assertEqual([r[2] for r in deletes], [f"/semaphores/{name}"])

    def test_context_manager_with_the_gateway_watchdog(self) -> None:
        name = unique("sem-watchdog")
        other = self.gw.acquire_semaphore(name, "worker-0", permits=3, ttl_ms=20000)
        start = time.monotonic()
        with self.gw.semaphore(name, "wd", permits=3, ttl_ms=900, watchdog=True, max_hold_ms=1500) as lease:
            self.assertTrue(lease.watchdog)
            self.assertTrue(lease.lost.wait(timeout=6), "lost once the watchdog stopped renewing")
            noticed = time.monotonic()
            self.assertGreater(noticed - start, 1.2, "the watchdog's renewals were seen")
            self.assertLess(noticed, lease.valid_until)
        eventually("the permit to lapse or be released", lambda: self.gw.inspect_semaphore(name).used == 1, timeout=5)
        self.assertTrue(other.release())

    def test_lost_when_released_behind_its_back(self) -> None:
        name = unique("sem-stolen")
        with self.gw.semaphore(name, "victim", permits=2, ttl_ms=900) as lease:
            status, body = raw("DELETE", f"/semaphores/{name}", {"Lease-Token": lease.token})
            self.assertEqual((status, body["released"]), (200, True))
            self.assertTrue(lease.lost.wait(timeout=5), "lost is set")
            with self.assertRaises(leasegate.LeaseLostError) as cm:
                lease.check()
            self.assertIn("410", cm.exception.reason)

    def test_split_wait_and_retries_share_the_lock_paths(self) -> None:
        # A 503 is retried with the same Idempotency-Key; the wait is split into long-polls that
        # carry the previous 409's queue ticket, each with a key of its own.
        name = unique("sem-patient")
        holder = self.gw.acquire_semaphore(name, "holder", permits=1, ttl_ms=30000)
        gw = RecordingClient(URL)
        gw.fail["POST"] = [problem_answer(503, "urn:leasegate:problem:backend-unavailable")]
        with self.assertRaises(leasegate.SemaphoreFullError) as cm:
            gw.acquire_semaphore(name, "patient", permits=1, wait_ms=800, max_wait_per_request_ms=200)
        self.assertGreaterEqual(cm.exception.waited_ms or 0, 750)
        posts = gw.requests("POST")
        self.assertGreaterEqual(len(posts), 4, "the 503, its retry, and long-polls after it")
        self.assertEqual({r[2] for r in posts}, {f"/semaphores/{name}"})
        self.assertEqual(posts[0][3]["Idempotency-Key"], posts[1][3]["Idempotency-Key"], "the 503's retry")
        self.assertNotIn("queue_ticket", posts[1][4] or {})
        for _, _, _, _, body in posts[2:]:
            assert body is not None
            self.assertIn("queue_ticket", body, "every poll after a 409 carries the ticket")
            self.assertEqual(body["permits"], 1)
            self.assertLessEqual(body["wait_ms"], 200)
        keys = [r[3]["Idempotency-Key"] for r in posts[1:]]
        self.assertEqual(len(set(keys)), len(keys), "each long-poll after a 409 has a new key")
        self.assertTrue(holder.release())


class OfflineProblems(unittest.TestCase):
    """The new problem types' classes, without a gateway."""

    def from_answer(self, ptype: str, **members: object) -> leasegate.LeasegateError:
        body = {"type": ptype, "title": "t", "status": 409, "detail": "d", **members}
        return leasegate.LeasegateError.from_answer(409, "Conflict", {"retry-after": "2"}, json.dumps(body).encode())

    def test_problem_classes(self) -> None:
        full = self.from_answer("urn:leasegate:problem:semaphore-full", semaphore="s", retry_after_ms=1500,
                                waited_ms=10, queue_ticket="t.s")
        self.assertIsInstance(full, leasegate.SemaphoreFullError)
        self.assertIsInstance(full, leasegate.HeldError)
        self.assertEqual((full.semaphore, full.retry_after_ms, full.waited_ms, full.queue_ticket, full.retry_after_s),
                         ("s", 1500, 10, "t.s", 2))
        self.assertIsInstance(self.from_answer("urn:leasegate:problem:lock-held"), leasegate.HeldError)
        up = self.from_answer("urn:leasegate:problem:upgrade-refused")
        self.assertIs(type(up), leasegate.UpgradeRefusedError)
        mismatch = self.from_answer("urn:leasegate:problem:permits-mismatch", semaphore="s", permits=5)
        self.assertIsInstance(mismatch, leasegate.PermitsMismatchError)
        assert isinstance(mismatch, leasegate.PermitsMismatchError)
        self.assertEqual(mismatch.permits, 5)
        back: leasegate.PermitsMismatchError = pickle.loads(pickle.dumps(mismatch))
        self.assertIs(type(back), leasegate.PermitsMismatchError)
        self.assertEqual((back.permits, back.semaphore), (5, "s"))
        lost: leasegate.LeaseLostError = pickle.loads(pickle.dumps(leasegate.LeaseLostError("s", "why", "semaphore")))
        self.assertEqual((lost.lock, lost.reason, lost.kind), ("s", "why", "semaphore"))
        self.assertIn("semaphore 's'", str(lost))

    def test_watchdog_ttl_among_the_holders(self) -> None:
        # A watchdog lease's keep-alive finds its TTL among the holders by its fence; past the
        # first 100 listed (soonest to expire first), the last listed TTL is a lower bound.
        hs = tuple(leasegate.Holder(owner=f"o{i}", fence=10 + i, holds=1, ttl_ms=100 * (i + 1), watchdog=True)
                   for i in range(3))
        find = leasegate._holder_ttl_ms
        self.assertEqual(find(hs, 3, 11), 200)
        self.assertIsNone(find(hs, 3, 99), "not listed, and nobody is left out")
        self.assertEqual(find(hs, 250, 99), 300, "left out of the list: at least the last listed TTL")
        self.assertIsNone(find((), 0, 11))

    def test_mode_is_checked(self) -> None:
        gw = leasegate.Client("http://127.0.0.1:9")
        with self.assertRaises(ValueError):
            gw.acquire("x", "o", mode="read")  # type: ignore[arg-type]


if __name__ == "__main__":
    unittest.main()
