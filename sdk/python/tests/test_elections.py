"""End-to-end tests of leasegate.py's elections (Client.campaign, Leadership, Client.observe)
against a real gateway (tests/sdks/python_sdk_test.go starts one and sets LEASEGATE_URL).

Tests synchronise by polling conditions with deadlines, never by sleeping.
"""

from __future__ import annotations

import http.client
import socket
import sys
import threading
import time
import unittest
from collections.abc import Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import leasegate  # noqa: E402
from test_e2e import LOST_WITHIN_S, URL, eventually, in_thread, raw, unique  # noqa: E402


class Collector:
    """Reads an observer's events on a thread of its own into ``events``."""

    def __init__(self, gen: Generator[leasegate.ElectionEvent, None, None], until: str = "") -> None:
        self.events: list[leasegate.ElectionEvent] = []
        self.error: BaseException | None = None
        self._mu = threading.Lock()

        def run() -> None:
            try:
                for ev in gen:
                    with self._mu:
                        self.events.append(ev)
                    if ev.type == until:
                        return
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                self.error = e
            finally:
                gen.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def wait(self, n: int) -> leasegate.ElectionEvent:
        def ready() -> bool:
            if self.error is not None:
                raise self.error
            with self._mu:
                return len(self.events) >= n

        eventually(f"event #{n}", ready)
        with self._mu:
            return self.events[n - 1]


class CuttingClient(leasegate.Client):
    """A client whose events streams can be cut, as a network failure or a gateway restart
    would; it records the Last-Event-ID each stream was opened with."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url, timeout=10)
        self.mu = threading.Lock()
        self.opened: list[str | None] = []
        self.conns: list[http.client.HTTPConnection] = []

    def _stream(self, path: str, headers: Any) -> Any:
        conn, resp = super()._stream(path, headers)
        with self.mu:
            self.opened.append(dict(headers).get("Last-Event-ID"))
            self.conns.append(conn)
        return conn, resp

    def cut(self) -> None:
        with self.mu:
            conns, self.conns = self.conns, []
        for c in conns:
            if c.sock is not None:
                c.sock.shutdown(socket.SHUT_RDWR)


@unittest.skipUnless(URL, "LEASEGATE_URL is not set (tests/sdks/python_sdk_test.go sets it)")
class Elections(unittest.TestCase):
    def setUp(self) -> None:
        self.gw = leasegate.Client(URL, timeout=10)

    def test_campaign_leads_and_resigns_on_exit(self) -> None:
        name = unique("elect")
        with self.gw.campaign(name, "10.0.3.7:8080", owner="sched-1", ttl_ms=1000) as lead:
            self.assertEqual((lead.name, lead.owner, lead.value), (name, "sched-1", "10.0.3.7:8080"))
            self.assertGreater(lead.fence, 0)
            self.assertRegex(lead.event_id, r"^\d+-\d+$")
            with self.assertRaises(leasegate.ElectionLedError) as cm:
                self.gw.elect(name, "10.0.3.8:8080", owner="sched-2")
            self.assertEqual(cm.exception.status, 409)
            st = self.gw.inspect_election(name)
            self.assertTrue(st.led)
            assert st.leader is not None
            self.assertEqual((st.leader.owner, st.leader.fence), ("sched-1", lead.fence))
            # Kept alive past its TTL.
            until = time.monotonic() + 1.5
            eventually("the lead to outlive its TTL", lambda: time.monotonic() > until, timeout=5, every=0.05)
            self.assertFalse(lead.lost)
            lead.check()
        self.assertFalse(self.gw.inspect_election(name).led)
        with self.assertRaises(leasegate.LeaseLostError):
            lead.check()

    def test_resign_hands_over_in_fifo_order(self) -> None:
        name = unique("fifo")
        first = self.gw.elect(name, "a", owner="a", ttl_ms=10000)
        second = in_thread(lambda: self.gw.elect(name, "b", owner="b", ttl_ms=10000, wait_ms=20000))
        eventually("b in line", lambda: self.gw.inspect_election(name).candidates == 1)
        third = in_thread(lambda: self.gw.elect(name, "c", owner="c", ttl_ms=10000, wait_ms=20000))
        eventually("c in line", lambda: self.gw.inspect_election(name).candidates == 2)
        self.assertTrue(first.resign()["resigned"])
        b = second.get(10)
        self.assertEqual((b.owner, b.value), ("b", "b"))
        self.assertGreater(b.fence, first.fence)
        self.assertFalse(third.done.is_set())
        b.resign()
        c = third.get(10)
        self.assertEqual(c.owner, "c")
        self.assertGreater(c.fence, b.fence)
        c.resign()

    def test_observer_sees_election_proclaim_and_resignation(self) -> None:
        name = unique("observe")
        seen = Collector(self.gw.observe(name), until="resigned")
        st = seen.wait(1)
        self.assertEqual((st.type, st.id, st.gap), ("state", "0-0", False))
        assert st.state is not None
        self.assertFalse(st.state.led)
        with self.gw.campaign(name, "v1", owner="leader", ttl_ms=10000) as lead:
            ans = lead.proclaim("v2")
            self.assertEqual((ans["value"], lead.value, lead.event_id), ("v2", "v2", ans["event_id"]))
        e = seen.wait(2)
        self.assertEqual((e.type, e.owner, e.value, e.fence, e.election), ("elected", "leader", "v1", lead.fence, name))
        p = seen.wait(3)
        self.assertEqual((p.type, p.value, p.fence, p.id), ("proclaimed", "v2", lead.fence, lead.event_id))
        r = seen.wait(4)
        self.assertEqual((r.type, r.owner, r.fence), ("resigned", "leader", lead.fence))
        seen.thread.join(5)
        self.assertEqual(len(seen.events), 4)

    def test_observe_from_last_event_id(self) -> None:
        name = unique("resume-from")
        lead = self.gw.elect(name, "v1", owner="leader", ttl_ms=10000)
        lead.proclaim("v2")
        lead.proclaim("v3")
        last = lead.event_id
        lead.resign()
        gen = self.gw.observe(name, last_event_id=last)
        r = next(gen)
        gen.close()
        self.assertEqual(r.type, "resigned")
        gen = self.gw.observe(name)
        st = next(gen)
        gen.close()
        self.assertEqual((st.type, st.id), ("state", r.id))
        got = []
        for ev in self.gw.observe(name, last_event_id="0-0"):
            got.append((ev.type, ev.value))
            if ev.type == "resigned":
                break
        self.assertEqual(got, [("elected", "v1"), ("proclaimed", "v2"), ("proclaimed", "v3"), ("resigned", None)])

    def test_observer_reconnects_with_last_event_id(self) -> None:
        name = unique("resume-cut")
        observer = CuttingClient(URL)
        seen = Collector(observer.observe(name), until="resigned")
        self.assertEqual(seen.wait(1).type, "state")
        lead = self.gw.elect(name, "v1", owner="leader", ttl_ms=10000)
        elected = seen.wait(2)
        self.assertEqual(elected.type, "elected")
        observer.cut()
        lead.proclaim("v2")  # while the observer may be disconnected
        p = seen.wait(3)
        self.assertEqual((p.type, p.value), ("proclaimed", "v2"))
        with observer.mu:
            self.assertEqual(observer.opened, [None, elected.id])
        lead.resign()
        self.assertEqual(seen.wait(4).type, "resigned")
        seen.thread.join(5)
        self.assertEqual([e.type for e in seen.events], ["state", "elected", "proclaimed", "resigned"])

    def test_force_release_sets_lost_within_100_ms(self) -> None:
        name = unique("forced")
        with self.gw.campaign(name, "v1", owner="leader", ttl_ms=10000) as lead:
            eventually("the election's events stream to open", lambda: lead.watching)
            self.assertFalse(lead.lost)
            sent = time.monotonic()
            status, body = raw("DELETE", f"/elections/{name}?force=true")
            answered = time.monotonic()
            self.assertEqual((status, body.get("forced")), (200, True), body)
            self.assertTrue(lead.lost.wait(timeout=5))
            now = time.monotonic()
            took = max(now - answered, 0.0)
            print(f"LOST-LATENCY election: {took * 1000:.1f} ms after the answer ({(now - sent) * 1000:.1f} ms after the request)",
                  file=sys.stderr)
            self.assertLess(took, LOST_WITHIN_S)
            self.assertFalse(lead.watching)
            with self.assertRaises(leasegate.LeaseLostError) as cm:
                lead.check()
            self.assertEqual(cm.exception.kind, "election")
            self.assertIn("vacant", cm.exception.reason)
            with self.assertRaises(leasegate.LeaseGoneError):
                lead.proclaim("v2")


if __name__ == "__main__":
    unittest.main()
