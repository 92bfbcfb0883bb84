"""A small, typed client for leasegate, the HTTP/JSON distributed-lock gateway.

Standard library only (Python 3.11+). The API contract is the gateway's ``openapi.yaml``.

Hold a lock for a block of work, with the lease renewed in the background::

    import leasegate

    gw = leasegate.Client("http://127.0.0.1:8080")
    with gw.lock("nightly-report", "billing-worker-7", ttl_ms=30_000, wait_ms=600_000) as lease:
        for row in rows:
            lease.check()                      # raises LeaseLostError once the lease is lost
            store.write(row, fence=lease.fence)  # let the store reject stale fences

Or drive a lease by hand::

    lease = gw.acquire("deploy", "ci-42", ttl_ms=60_000)   # LockHeldError if held
    lease.renew()
    lease.release()

Retries. Every mutating call (acquire, renew, release) sends an ``Idempotency-Key`` header: one
random key per call of these methods, reused by the retries of that call (after a connection
error or a 503). The gateway keeps the first answer to a key (10 minutes, or the lease's TTL if
longer) and answers a retry with it, changing nothing: a retried release never gives back a
second hold, a retried acquire gets the same lease (or 410 once that lease is gone, and then
``acquire`` starts afresh with a new key). In a waiting ``acquire``, a 409 that ends a long-poll
is a definite "not granted", so the next long-poll is a new request with a new key. (A gateway
older than the header ignores it; a retried release may then answer 410.)

Never outliving a lease. :attr:`Lease.valid_until` is a conservative bound (on
:func:`time.monotonic`'s clock) on when the lease can lapse: the TTL of its latest grant or
renewal, counted from just *before* the request that produced it was sent (the first attempt's
send time when the answer came to a retry). Work under the lock must be over by then.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar, cast

__all__ = [
    "Client",
    "Grant",
    "Lease",
    "LockState",
    "LeasegateError",
    "LockHeldError",
    "LeaseGoneError",
    "TransportError",
    "LeaseLostError",
]

__version__: Final = "1.0.0"

PROBLEM_PREFIX: Final = "urn:leasegate:problem:"
LOCK_HELD: Final = PROBLEM_PREFIX + "lock-held"
LEASE_GONE: Final = PROBLEM_PREFIX + "lease-gone"

_T = TypeVar("_T")

_USER_AGENT: Final = f"leasegate-python/{__version__}"
# How many times renew, release, inspect and a try-once acquire send a request that failed with
# a connection error or a 503 (waiting acquires retry for as long as their wait lasts).
_TRIES: Final = 3
# Extra socket timeout on top of a long-poll's wait_ms.
_LONG_POLL_SLACK_S: Final = 5.0


# ---------------------------------------------------------------------------------------------
# Errors


class LeasegateError(Exception):
    """An error answer from the gateway (an RFC 9457 problem), or a failure to reach it.

    Attributes mirror the problem body. A body that is not a problem becomes a LeasegateError
    of type ``"about:blank"`` with the HTTP status and the start of the body as ``detail``.
    """

    type: str
    title: str
    status: int
    detail: str
    invalid_params: list[tuple[str, str]]
    request_id: str | None
    lock: str | None
    retry_after_ms: int | None
    waited_ms: int | None
    queue_ticket: str | None
    retry_after_s: int | None
    problem: dict[str, Any]

    def __init__(
        self,
        *,
        type: str = "about:blank",
        title: str = "",
        status: int = 0,
        detail: str = "",
        invalid_params: list[tuple[str, str]] | None = None,
        request_id: str | None = None,
        lock: str | None = None,
        retry_after_ms: int | None = None,
        waited_ms: int | None = None,
        queue_ticket: str | None = None,
        retry_after_s: int | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        """Build an error; usually done by the client from an answer (see :meth:`from_answer`).

        ``retry_after_s`` is the answer's ``Retry-After`` header in seconds, if any;
        ``problem`` the decoded problem body as sent.
        """
        self.type = type
        self.title = title
        self.status = status
        self.detail = detail
        self.invalid_params = list(invalid_params or [])
        self.request_id = request_id
        self.lock = lock
        self.retry_after_ms = retry_after_ms
        self.waited_ms = waited_ms
        self.queue_ticket = queue_ticket
        self.retry_after_s = retry_after_s
        self.problem = dict(problem or {})
        super().__init__(status, type, detail)

    def __str__(self) -> str:
        """``"<status> <type>: <detail> (name: reason; ...) [request <id>]"``."""
        s = f"{self.status} {self.type}: {self.detail}"
        if self.invalid_params:
            s += " (" + "; ".join(f"{n}: {r}" for n, r in self.invalid_params) + ")"
        if self.request_id:
            s += f" [request {self.request_id}]"
        return s

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # The keyword-only constructor cannot be re-called with self.args: rebuild from fields.
        return (_rebuild_error, (type(self), dict(self.__dict__)))

    @staticmethod
    def from_answer(status: int, reason: str, headers: Mapping[str, str], body: bytes) -> LeasegateError:
        """Turn a non-2xx answer into the matching error class.

        ``headers`` must be keyed by lower-case names.
        """
        retry_after_s = _int_or_none(headers.get("retry-after"))
        request_id = headers.get("x-request-id")
        p = _json_object(body)
        if p is None or not isinstance(p.get("type"), str) or not p["type"]:
            text = body[:200].decode("utf-8", "replace").strip()
            return LeasegateError(
                type="about:blank",
                title=reason,
                status=status,
                detail=text or reason,
                request_id=request_id,
                retry_after_s=retry_after_s,
            )
        params: list[tuple[str, str]] = []
        raw_params: object = p.get("invalid_params")
        if isinstance(raw_params, list):
            for ip in cast(list[object], raw_params):
                if isinstance(ip, dict):
                    d = cast(dict[str, object], ip)
                    params.append((str(d.get("name", "")), str(d.get("reason", ""))))
        ptype = str(p["type"])
        cls: type[LeasegateError] = LeasegateError
        if ptype == LOCK_HELD or (not ptype.startswith(PROBLEM_PREFIX) and status == 409):
            cls = LockHeldError
        elif ptype == LEASE_GONE or (not ptype.startswith(PROBLEM_PREFIX) and status == 410):
            cls = LeaseGoneError
        return cls(
            type=ptype,
            title=str(p.get("title", reason)),
            status=_int_or_none(p.get("status")) or status,
            detail=str(p.get("detail", "")),
            invalid_params=params,
            request_id=_str_or_none(p.get("request_id")) or request_id,
            lock=_str_or_none(p.get("lock")),
            retry_after_ms=_int_or_none(p.get("retry_after_ms")),
            waited_ms=_int_or_none(p.get("waited_ms")),
            queue_ticket=_str_or_none(p.get("queue_ticket")),
            retry_after_s=retry_after_s,
            problem=p,
        )


class LockHeldError(LeasegateError):
    """409 ``lock-held``: another lease holds the lock (or others wait for it).

    ``retry_after_ms`` is the holder's remaining TTL. After :meth:`Client.acquire` waited,
    ``waited_ms`` is how long the whole wait lasted (across its long-polls).
    """


class LeaseGoneError(LeasegateError):
    """410 ``lease-gone``: the lease no longer holds the lock (it expired or was released)."""


class TransportError(LeasegateError):
    """The gateway could not be reached or its answer was cut off (``status`` 0).

    The underlying exception (an :class:`OSError` or :class:`http.client.HTTPException`) is
    ``__cause__``.
    """


class LeaseLostError(Exception):
    """Raised by :meth:`Lease.check` once the lease is lost, or may lapse before it is renewed."""

    def __init__(self, lock: str, reason: str) -> None:
        """``lock`` is the lock's name, ``reason`` why the lease counts as lost."""
        self.lock = lock
        self.reason = reason
        super().__init__(f"lease on lock {lock!r} lost: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (LeaseLostError, (self.lock, self.reason))


def _rebuild_error(cls: type[LeasegateError], fields: dict[str, Any]) -> LeasegateError:
    """Unpickle a LeasegateError (see LeasegateError.__reduce__)."""
    e = cls.__new__(cls)
    Exception.__init__(e, fields.get("status"), fields.get("type"), fields.get("detail"))
    e.__dict__.update(fields)
    return e


def _json_object(body: bytes) -> dict[str, Any] | None:
    """body decoded as a JSON object, or None if it is not one."""
    try:
        v: object = json.loads(body)
    except ValueError:
        return None
    return cast(dict[str, Any], v) if isinstance(v, dict) else None


def _str_or_none(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _int_or_none(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


# ---------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True)
class Grant:
    """A grant or renewal answer: the lease as the gateway last described it."""

    lock: str
    owner: str
    token: str = field(repr=False)  # a bearer credential: kept out of reprs and logs
    fence: int
    ttl_ms: int
    expires_at: str
    holds: int
    watchdog: bool

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Grant:
        """Build a Grant from the gateway's JSON object."""
        return Grant(
            lock=str(d["lock"]),
            owner=str(d["owner"]),
            token=str(d["token"]),
            fence=int(d["fence"]),
            ttl_ms=int(d["ttl_ms"]),
            expires_at=str(d.get("expires_at", "")),
            holds=int(d["holds"]),
            watchdog=bool(d.get("watchdog", False)),
        )


@dataclass(frozen=True)
class LockState:
    """``GET /locks/{name}``: whether the lock is held, and how many requests wait for it.

    ``owner``, ``fence``, ``holds``, ``ttl_ms`` (remaining) and ``watchdog`` are set only while
    it is held, ``max_hold_ms`` only for a watchdog lease, ``yours`` only when a token was sent.
    """

    lock: str
    held: bool
    waiters: int
    owner: str | None = None
    fence: int | None = None
    holds: int | None = None
    ttl_ms: int | None = None
    watchdog: bool | None = None
    max_hold_ms: int | None = None
    yours: bool | None = None

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> LockState:
        """Build a LockState from the gateway's JSON object."""
        return LockState(
            lock=str(d["lock"]),
            held=bool(d["held"]),
            waiters=int(d.get("waiters", 0)),
            owner=d.get("owner"),
            fence=_int_or_none(d.get("fence")),
            holds=_int_or_none(d.get("holds")),
            ttl_ms=_int_or_none(d.get("ttl_ms")),
            watchdog=d.get("watchdog"),
            max_hold_ms=_int_or_none(d.get("max_hold_ms")),
            yours=d.get("yours"),
        )


@dataclass(frozen=True)
class _Answer:
    """One HTTP answer: status, lower-cased headers and the body."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> dict[str, Any]:
        v = _json_object(self.body)
        if v is None:
            raise LeasegateError(
                title=self.reason,
                status=self.status,
                detail=f"answer is not a JSON object: {self.body[:200]!r}",
                request_id=self.headers.get("x-request-id"),
            )
        return v

    def parse(self, build: Callable[[Mapping[str, Any]], _T]) -> _T:
        """Build a result from the JSON object of a 2xx answer; a malformed one is a
        LeasegateError."""
        d = self.json()
        try:
            return build(d)
        except (KeyError, TypeError, ValueError) as e:
            raise LeasegateError(
                title=self.reason,
                status=self.status,
                detail=f"malformed answer ({type(e).__name__}: {e}): {self.body[:200]!r}",
                request_id=self.headers.get("x-request-id"),
            ) from e

    def error(self) -> LeasegateError:
        return LeasegateError.from_answer(self.status, self.reason, self.headers, self.body)

    def retry_pause(self) -> float:
        """Seconds to wait before retrying a 503: its Retry-After, at most 1 s."""
        ra = _int_or_none(self.headers.get("retry-after"))
        return 1.0 if ra is None or ra < 0 else min(float(ra), 1.0)


def _backoff(failures: int) -> float:
    """Pause after the n-th connection failure in a row: 0.1 s, 0.2 s, 0.4 s, ... at most 1 s."""
    return min(0.1 * (2 ** max(failures - 1, 0)), 1.0)


def _new_key() -> str:
    return str(uuid.uuid4())


# ---------------------------------------------------------------------------------------------
# Client


class Client:
    """A client of one leasegate deployment, e.g. ``Client("http://127.0.0.1:8080")``.

    Safe to share between threads: every request uses its own connection. ``timeout`` bounds
    each socket operation of a request, in seconds; a long-poll gets its ``wait_ms`` on top.
    """

    def __init__(self, base_url: str, timeout: float = 35.0) -> None:
        """``base_url``: scheme, host, port and an optional path prefix of the gateway."""
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"leasegate: base_url must be an http(s) URL, got {base_url!r}")
        if timeout <= 0:
            raise ValueError("leasegate: timeout must be positive")
        self.base_url = base_url
        self.timeout = timeout
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")

    def __repr__(self) -> str:
        return f"Client({self.base_url!r}, timeout={self.timeout!r})"

    # -- public API ------------------------------------------------------------------------

    def acquire(
        self,
        name: str,
        owner: str,
        *,
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
    ) -> Lease:
        """Acquire lock ``name`` for ``owner`` and return the :class:`Lease`.

        With ``wait_ms`` 0 it tries once. Otherwise it waits up to ``wait_ms`` in the lock's
        FIFO queue, as a series of long-polls of at most ``max_wait_per_request_ms`` (keep it at
        or below the gateway's ``LEASEGATE_MAX_WAIT``); each long-poll after the first presents
        the ``queue_ticket`` of the 409 that ended the one before, so the wait keeps its place.
        A 503 (the gateway's Redis is down, the replica is shutting down or holds too many
        waiters) or a connection error during the wait is retried after ``min(Retry-After, 1 s)``
        (connection errors: a short backoff), within the wait, carrying the 503's queue ticket
        if it has one; a try-once acquire retries them up to 3 tries in all. Retries reuse the
        request's Idempotency-Key; each long-poll after a 409 has a new one.

        ``ttl_ms`` defaults to the gateway's (30 s). ``watchdog`` asks the gateway to renew the
        lease itself, for at most ``max_hold_ms``.

        Raises :class:`LockHeldError` (with ``retry_after_ms`` and, after a wait, ``waited_ms``
        for the whole wait) when the lock is still held when the wait runs out, or any other
        :class:`LeasegateError`.
        """
        if wait_ms < 0:
            raise ValueError("leasegate: wait_ms must be >= 0")
        if max_wait_per_request_ms < 1:
            raise ValueError("leasegate: max_wait_per_request_ms must be >= 1")
        path = self._lock_path(name)
        key = _new_key()  # one per request and its retries; renewed after each definite 409
        start = time.monotonic()
        deadline = start + wait_ms / 1000.0
        ticket: str | None = None
        # The send time of the earliest request since the last 409 whose outcome was not a
        # definite "not granted": a grant answered (or replayed) now may have been made then.
        pending_since: float | None = None
        failures = 0  # connection errors and 503s in a row
        replays = 0  # 410 answers: a retry replayed a grant that lapsed unseen

        while True:
            body: dict[str, Any] = {"owner": owner}
            if ttl_ms is not None:
                body["ttl_ms"] = ttl_ms
            if watchdog:
                body["watchdog"] = True
            if max_hold_ms is not None:
                body["max_hold_ms"] = max_hold_ms
            now = time.monotonic()
            wait = min(int((deadline - now) * 1000), max_wait_per_request_ms)
            socket_timeout = self.timeout
            if wait > 0:
                body["wait_ms"] = wait
                if ticket is not None:
                    body["queue_ticket"] = ticket
                socket_timeout = max(self.timeout, wait / 1000.0 + _LONG_POLL_SLACK_S)
            if pending_since is None:
                pending_since = now
            try:
                ans = self._send("POST", path, body=body, headers={"Idempotency-Key": key}, timeout=socket_timeout)
            except TransportError:
                failures += 1
                if not self._may_retry(failures, deadline):
                    raise
                self._pause(_backoff(failures), deadline)
                continue
            if ans.ok:
                lease = Lease(self, ans.parse(Grant.from_json), sent=pending_since)
                # The lease's TTL started at its grant, after the request was sent: after a long
                # wait, valid_until (counted from the send) would already be near. Renew now to
                # count from a request sent after the grant; on failure the early bound stands.
                if not lease.watchdog and time.monotonic() - pending_since > lease.margin:
                    with contextlib.suppress(LeasegateError):
                        lease.renew()
                return lease
            err = ans.error()
            if isinstance(err, LockHeldError):
                key, pending_since, failures = _new_key(), None, 0
                if time.monotonic() >= deadline:
                    if wait_ms > 0:
                        err.waited_ms = max(err.waited_ms or 0, int((time.monotonic() - start) * 1000))
                    raise err
                ticket = err.queue_ticket
                continue
            if err.status == 503:
                failures += 1
                if err.queue_ticket is not None:
                    ticket = err.queue_ticket
                if not self._may_retry(failures, deadline):
                    raise err
                self._pause(ans.retry_pause(), deadline)
                continue
            if isinstance(err, LeaseGoneError) and replays < _TRIES:
                # No Lease-Token was sent, so this is a retry answered with the outcome of an
                # earlier attempt: its grant lapsed before we heard of it. Start afresh.
                replays += 1
                key, pending_since = _new_key(), None
                if self._may_retry(failures, deadline):
                    continue
            raise err

    @contextlib.contextmanager
    def lock(
        self,
        name: str,
        owner: str,
        *,
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
    ) -> Generator[Lease, None, None]:
        """Hold lock ``name`` for the ``with`` block; the options are :meth:`acquire`'s.

        A daemon thread renews the lease every TTL/3 (failed renewals are retried every
        *margin* = TTL/10, between 50 ms and 1 s). ``lease.lost`` is set when a renewal
        answers 410, or when ``lease.valid_until - margin`` is reached without a successful
        renewal. The block must watch it: poll ``lease.lost`` or call ``lease.check()``
        between steps, and stop working under the lock once it is set.

        With ``watchdog=True`` the gateway renews the lease; the thread then only checks it
        every TTL/3 (``GET /locks/{name}`` with the token), so ``lost`` and ``valid_until``
        still work and ``max_hold_ms`` keeps its meaning.

        On exit the thread is stopped and the lease released (a 410 is ignored: the lease is
        gone anyway). If the block raised, an error releasing is added to its exception as a
        note rather than replacing it.
        """
        lease = self.acquire(
            name,
            owner,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            watchdog=watchdog,
            max_hold_ms=max_hold_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
        )
        lease._start_keepalive()
        try:
            yield lease
        except BaseException as exc:
            try:
                lease._finish()
            except Exception as rel:  # noqa: BLE001 - reported on the block's own exception
                exc.add_note(f"leasegate: releasing lock {name!r} failed too: {rel}")
            raise
        else:
            lease._finish()

    def inspect(self, name: str, token: str | None = None) -> LockState:
        """``GET /locks/{name}``: the lock's state; with ``token``, ``yours`` tells whether
        that lease holds it."""
        return self._inspect(name, token, tries=_TRIES, deadline=None)

    # -- internals -------------------------------------------------------------------------

    def _inspect(self, name: str, token: str | None, *, tries: int, deadline: float | None) -> LockState:
        headers = {"Lease-Token": token} if token else {}
        ans, _ = self._retrying("GET", self._lock_path(name), None, headers, tries=tries, deadline=deadline)
        if not ans.ok:
            raise ans.error()
        return ans.parse(LockState.from_json)

    def _lock_path(self, name: str) -> str:
        return "/locks/" + urllib.parse.quote(name, safe=":")

    @staticmethod
    def _may_retry(failures: int, deadline: float) -> bool:
        """Within a wait, always; after it (or without one), up to _TRIES tries in all."""
        return time.monotonic() < deadline or failures < _TRIES

    @staticmethod
    def _pause(seconds: float, deadline: float) -> None:
        """Sleep before a retry: ``seconds``, cut short by a wait's deadline still ahead."""
        left = deadline - time.monotonic()
        if left > 0:
            seconds = min(seconds, left)
        time.sleep(max(seconds, 0.0))

    def _retrying(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        headers: Mapping[str, str],
        *,
        tries: int,
        deadline: float | None,
    ) -> tuple[_Answer, float]:
        """Send one logical request, retrying connection errors and 503s, the same headers
        (hence the same Idempotency-Key) each time: at most ``tries`` attempts, none started
        at or after ``deadline`` (a :func:`time.monotonic` reading), whose socket operations
        are also bounded by it.

        Returns the last answer and the first attempt's send time; raises TransportError when
        the last attempt could not be made or answered.
        """
        first_sent: float | None = None
        attempt = 0
        while True:
            attempt += 1
            now = time.monotonic()
            if first_sent is None:
                first_sent = now
            timeout = self.timeout
            if deadline is not None:
                timeout = min(timeout, max(deadline - now, 0.05))
            try:
                ans = self._send(method, path, body=body, headers=headers, timeout=timeout)
            except TransportError:
                if attempt >= tries:
                    raise
                pause = _backoff(attempt)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise
            else:
                if ans.status != 503 or attempt >= tries:
                    return ans, first_sent
                pause = ans.retry_pause()
                if deadline is not None and time.monotonic() + pause >= deadline:
                    return ans, first_sent
            time.sleep(pause)

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> _Answer:
        """Make one HTTP request on a fresh connection; raise TransportError if it fails."""
        conn: http.client.HTTPConnection
        t = self.timeout if timeout is None else timeout
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=t)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=t)
        h = {
            "Accept": "application/json, application/problem+json",
            "User-Agent": _USER_AGENT,
        }
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            h["Content-Type"] = "application/json"
        if headers:
            h.update(headers)
        try:
            conn.request(method, self._prefix + path, body=data, headers=h)
            resp = conn.getresponse()
            payload = resp.read()
            return _Answer(
                status=resp.status,
                reason=resp.reason,
                headers={k.lower(): v for k, v in resp.getheaders()},
                body=payload,
            )
        except (OSError, http.client.HTTPException) as e:
            raise TransportError(
                title="Transport error",
                detail=f"{method} {self.base_url}{path}: {type(e).__name__}: {e}",
            ) from e
        finally:
            conn.close()


# ---------------------------------------------------------------------------------------------
# Lease


class Lease:
    """A held lock. Safe to use from several threads.

    The fields (``lock``, ``owner``, ``token``, ``fence``, ``ttl_ms``, ``holds``, ``watchdog``,
    ``expires_at``) are read from the latest :class:`Grant`; read ``lease.grant`` once to get a
    consistent snapshot of all of them (e.g. the token and fence of the same renewal).
    """

    def __init__(self, client: Client, grant: Grant, *, sent: float) -> None:
        """Made by :meth:`Client.acquire`; ``sent`` is the monotonic time before its request."""
        self._client = client
        self._cond = threading.Condition(threading.Lock())
        self._grant = grant
        self._applied_sent = sent
        self._valid_until = sent + grant.ttl_ms / 1000.0
        self._margin = min(max(grant.ttl_ms / 10000.0, 0.05), 1.0)
        self._released = False
        self._lost_reason = ""
        self._kept_alive = False
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        #: Set once the lease is lost (a renewal answered 410, or, while :meth:`Client.lock`
        #: keeps it alive, ``valid_until - margin`` came without a successful renewal).
        self.lost: threading.Event = threading.Event()

    def __repr__(self) -> str:
        g = self.grant
        return f"Lease(lock={g.lock!r}, owner={g.owner!r}, fence={g.fence}, holds={g.holds}, lost={self.lost.is_set()})"

    # -- fields ----------------------------------------------------------------------------

    @property
    def grant(self) -> Grant:
        """The latest grant or renewal, as one consistent snapshot."""
        with self._cond:
            return self._grant

    @property
    def lock(self) -> str:
        """The lock's name."""
        return self.grant.lock

    @property
    def owner(self) -> str:
        """Who holds the lock."""
        return self.grant.owner

    @property
    def token(self) -> str:
        """The lease token, sent as ``Lease-Token``. A credential: do not log it."""
        return self.grant.token

    @property
    def fence(self) -> int:
        """The fencing token: pass it with every write to the protected resource."""
        return self.grant.fence

    @property
    def ttl_ms(self) -> int:
        """The TTL of the latest grant or renewal, in milliseconds."""
        return self.grant.ttl_ms

    @property
    def holds(self) -> int:
        """The re-entry count (1 for a new grant; 0 after the lock was released)."""
        return self.grant.holds

    @property
    def watchdog(self) -> bool:
        """Whether the gateway renews this lease itself."""
        return self.grant.watchdog

    @property
    def expires_at(self) -> str:
        """The gateway's expiry time of the latest grant or renewal (RFC 3339, UTC)."""
        return self.grant.expires_at

    @property
    def valid_until(self) -> float:
        """When the lease can lapse at the earliest, on :func:`time.monotonic`'s clock.

        The TTL of the latest grant or renewal counted from just before its request was sent.
        """
        with self._cond:
            return self._valid_until

    @property
    def margin(self) -> float:
        """Safety margin in seconds: TTL/10 between 50 ms and 1 s. Work must stop this long
        before :attr:`valid_until`; renewals that fail are retried this often."""
        return self._margin

    # -- operations ------------------------------------------------------------------------

    def renew(self, ttl_ms: int | None = None) -> Grant:
        """Reset the lease's TTL to ``ttl_ms`` (default: its current TTL); return the new grant.

        Retried (same Idempotency-Key) on connection errors and 503s, up to 3 tries. A 410
        sets :attr:`lost` and raises :class:`LeaseGoneError`.
        """
        try:
            return self._renew(ttl_ms, tries=_TRIES, deadline=None)
        except LeaseGoneError as e:
            self._set_lost(f"renewal answered 410: {e.detail}")
            raise

    def release(self) -> bool:
        """Give back one hold; return whether the lock is now free of this lease (``released``).

        Retried (same Idempotency-Key: the gateway answers a retry as it did the first
        attempt, so a lost answer never costs a second hold) on connection errors and 503s, up
        to 3 tries. A 410 (the lease is gone: it expired or was released) sets :attr:`lost` and
        raises :class:`LeaseGoneError`.
        """
        g = self.grant
        headers = {"Lease-Token": g.token, "Idempotency-Key": _new_key()}
        ans, _ = self._client._retrying(
            "DELETE", self._client._lock_path(g.lock), None, headers, tries=_TRIES, deadline=None
        )
        if not ans.ok:
            err = ans.error()
            if isinstance(err, LeaseGoneError):
                self._set_lost(f"release answered 410: {err.detail}")
            raise err
        released, holds = ans.parse(lambda d: (bool(d["released"]), int(d["holds"])))
        with self._cond:
            self._grant = replace(self._grant, holds=holds)
            if released:
                self._released = True  # the keep-alive threads stop
                self._cond.notify_all()
        return released

    def check(self) -> None:
        """Raise :class:`LeaseLostError` if the lease is lost or released, or if it may lapse
        within :attr:`margin` (checked on the clock here too, so that a late keep-alive thread
        cannot make it miss the bound). For a watchdog lease that is not kept alive by
        :meth:`Client.lock`, only a recorded loss counts: the gateway renews it unseen."""
        with self._cond:
            if self._released:
                raise LeaseLostError(self._grant.lock, "released")
            deadline_applies = self._kept_alive or not self._grant.watchdog
            if not self.lost.is_set() and deadline_applies:
                left = self._valid_until - time.monotonic()
                if left <= self._margin:
                    self._lost_reason = f"no renewal succeeded; it can lapse in {max(left, 0.0):.3f}s"
                    self.lost.set()
            if self.lost.is_set():
                raise LeaseLostError(self._grant.lock, self._lost_reason or "lost")

    # -- internals -------------------------------------------------------------------------

    def _renew(self, ttl_ms: int | None, *, tries: int, deadline: float | None) -> Grant:
        g = self.grant
        body: dict[str, Any] = {} if ttl_ms is None else {"ttl_ms": ttl_ms}
        headers = {"Lease-Token": g.token, "Idempotency-Key": _new_key()}
        ans, sent = self._client._retrying(
            "POST", self._client._lock_path(g.lock) + "/renew", body, headers, tries=tries, deadline=deadline
        )
        if not ans.ok:
            raise ans.error()
        new = ans.parse(Grant.from_json)
        self._apply(new, sent, sent + new.ttl_ms / 1000.0)
        return new

    def _apply(self, grant: Grant | None, sent: float, valid_until: float) -> None:
        """Record a grant (or, with None, just a new validity bound) unless a request sent
        later was applied already."""
        with self._cond:
            if sent < self._applied_sent:
                return
            self._applied_sent = sent
            if grant is not None:
                self._grant = grant
            self._valid_until = valid_until
            self._cond.notify_all()

    def _set_lost(self, reason: str) -> None:
        with self._cond:
            if not self.lost.is_set():
                self._lost_reason = reason
                self.lost.set()
            self._cond.notify_all()

    def _start_keepalive(self) -> None:
        with self._cond:
            self._kept_alive = True
        name = self.grant.lock
        self._threads = [
            threading.Thread(target=self._keepalive, name=f"leasegate-renew:{name}", daemon=True),
            threading.Thread(target=self._watch_deadline, name=f"leasegate-deadline:{name}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _finish(self) -> None:
        """End of a ``Client.lock`` block: stop the threads, release unless the block did
        (a 410 is fine: the lease is gone either way)."""
        self._stop_keepalive()
        with self._cond:
            if self._released:
                return
        try:
            self.release()
        except LeaseGoneError:
            pass

    def _stop_keepalive(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            # A renewal may be in flight; it cannot resurrect anything, so do not wait long.
            t.join(timeout=1.0)

    def _keepalive(self) -> None:
        """Renew every TTL/3 (a watchdog lease: check it); retry failures every margin."""
        g = self.grant
        period = g.ttl_ms / 3000.0
        pause = period
        while not self._stop.wait(pause):
            with self._cond:
                if self.lost.is_set() or self._released:
                    return
            deadline = self.valid_until - self._margin
            if time.monotonic() >= deadline:
                return  # _watch_deadline sets lost
            try:
                if g.watchdog:
                    self._observe(deadline)
                else:
                    self._renew(g.ttl_ms, tries=1, deadline=deadline)
            except LeaseGoneError as e:
                if not self._stop.is_set() and not self._released:
                    self._set_lost(f"renewal answered 410: {e.detail}")
                return
            except LeasegateError:
                pause = self._margin
                continue
            except Exception:  # noqa: BLE001 - e.g. a malformed answer; retry like a failure
                pause = self._margin
                continue
            pause = period

    def _observe(self, deadline: float) -> None:
        """Check a watchdog lease: gone -> LeaseGoneError; held -> a new valid_until."""
        g = self.grant
        sent = time.monotonic()
        st = self._client._inspect(g.lock, g.token, tries=1, deadline=deadline)
        if not st.yours or not st.held or st.ttl_ms is None:
            raise LeaseGoneError(
                type=LEASE_GONE,
                title="Lease gone",
                status=410,
                detail="the lease no longer holds the lock (inspect: yours is false)",
                lock=g.lock,
            )
        self._apply(None, sent, sent + st.ttl_ms / 1000.0)

    def _watch_deadline(self) -> None:
        """Set lost when valid_until - margin comes without a renewal pushing it back."""
        with self._cond:
            while not self._stop.is_set() and not self.lost.is_set() and not self._released:
                left = self._valid_until - self._margin - time.monotonic()
                if left <= 0:
                    self._lost_reason = (
                        f"no renewal succeeded; it can lapse in {self._valid_until - time.monotonic():.3f}s"
                    )
                    self.lost.set()
                    return
                self._cond.wait(left)
