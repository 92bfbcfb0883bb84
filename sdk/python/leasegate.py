"""A small, typed client for leasegate, the HTTP/JSON distributed-lock gateway.

Standard library only (Python 3.11+). The API contract is the gateway's ``openapi.yaml``.

Hold a lock for a block of work, with the lease renewed in the background::

    import leasegate

    gw = leasegate.Client("http://127.0.0.1:8080")
    with gw.lock("nightly-report", "billing-worker-7", ttl_ms=30_000, wait_ms=600_000) as lease:
        for row in rows:
            lease.check()                      # raises LeaseLostError once the lease is lost
            store.write(row, fence=lease.fence)  # let the store reject stale fences

``lease.lost`` is false while the lease holds and true once it is lost (``if lease.lost: stop()``);
it is also a :class:`threading.Event` to wait on (``lease.lost.wait(5)``). Inside ``with``, the
lease follows its lock's events stream, so a force release or an expiry on the gateway sets it
within milliseconds, not at the next renewal.

Or drive a lease by hand::

    lease = gw.acquire("deploy", "ci-42", ttl_ms=60_000)   # LockHeldError if held
    lease.renew()
    lease.release()

Read-write locks take ``mode="shared"`` (any number of shared holders, no exclusive one),
counting semaphores work the same way, one permit per lease, and so do multi-locks, several locks
taken all or nothing under one lease::

    with gw.lock("price-table", "reader-3", mode="shared", wait_ms=5_000) as lease: ...
    with gw.semaphore("partner-api", "worker-3", permits=5, wait_ms=60_000) as permit: ...
    with gw.multilock(["account.17", "account.42"], "transfer-1", wait_ms=5_000) as group: ...

Retries. Every mutating call (acquire, re-entry, renew, release) sends an ``Idempotency-Key``
header: one random key per call of these methods, reused by the retries of that call (after a
connection error or a 503). The gateway keeps the first answer to a key (10 minutes, or the
lease's TTL if longer) and answers a retry with it, changing nothing: a retried release never
gives back a second hold, a retried acquire gets the same lease (or 410 once that lease is gone,
and then ``acquire`` starts afresh with a new key). In a waiting ``acquire``, a 409 that ends a
long-poll is a definite "not granted", so the next long-poll is a new request with a new key. (A
gateway older than the header ignores it; a retried release may then answer 410.) Multi-lock
calls take no Idempotency-Key: see :meth:`Client.lock_all`. A 429 (:class:`QuotaExceededError`) is
never retried, nor is a certificate the client does not trust.

Authentication and HTTPS: ``Client("https://locks.internal:8443", api_key=key,
ca_file="/etc/leasegate/ca.crt")`` sends ``Authorization: Bearer <key>`` with every request and
trusts only that CA's certificates (see :class:`Client`).

Never outliving a lease. :attr:`RenewableLease.valid_until` is a conservative bound (on
:func:`time.monotonic`'s clock) on when the lease can lapse: the TTL of its latest grant or
renewal, counted from just *before* the request that produced it was sent (the first attempt's
send time when the answer came to a retry). Work under the lock must be over by then.
"""

from __future__ import annotations

import abc
import contextlib
import http.client
import json
import random
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final, Generic, Literal, Protocol, TypeVar, cast

__all__ = [
    "Client",
    "Mode",
    "Grant",
    "SemaphoreGrant",
    "Holder",
    "LockState",
    "SemaphoreState",
    "MultiLockMember",
    "MultiLockGrant",
    "RenewableLease",
    "BaseLease",
    "Lease",
    "SemaphoreLease",
    "MultiLease",
    "LeasegateError",
    "HeldError",
    "LockHeldError",
    "SemaphoreFullError",
    "UpgradeRefusedError",
    "PermitsMismatchError",
    "LeaseGoneError",
    "UnauthenticatedError",
    "ForbiddenError",
    "QuotaExceededError",
    "TransportError",
    "LeaseLostError",
    "LostSignal",
    "ElectionLedError",
    "LeaderGrant",
    "ElectionLeader",
    "ElectionState",
    "ElectionEvent",
    "Leadership",
]

__version__: Final = "1.4.0"

#: How a lock is held: ``"exclusive"`` (one holder, the default) or ``"shared"`` (any number of
#: shared holders and no exclusive one). A semaphore's permit counts as a shared hold.
Mode = Literal["exclusive", "shared"]
_MODES: Final[tuple[Mode, ...]] = ("exclusive", "shared")

#: What a lease holds: a lock, one permit of a semaphore, the members of a multi-lock, or the
#: lead of an election.
Kind = Literal["lock", "semaphore", "multilock", "election"]

PROBLEM_PREFIX: Final = "urn:leasegate:problem:"
LOCK_HELD: Final = PROBLEM_PREFIX + "lock-held"
ELECTION_LED: Final = PROBLEM_PREFIX + "election-led"
SEMAPHORE_FULL: Final = PROBLEM_PREFIX + "semaphore-full"
UPGRADE_REFUSED: Final = PROBLEM_PREFIX + "upgrade-refused"
PERMITS_MISMATCH: Final = PROBLEM_PREFIX + "permits-mismatch"
LEASE_GONE: Final = PROBLEM_PREFIX + "lease-gone"
UNAUTHENTICATED: Final = PROBLEM_PREFIX + "unauthenticated"
FORBIDDEN: Final = PROBLEM_PREFIX + "forbidden"
QUOTA_EXCEEDED: Final = PROBLEM_PREFIX + "quota-exceeded"

_T = TypeVar("_T")

_USER_AGENT: Final = f"leasegate-python/{__version__}"
# How many times renew, release, re-entry, inspect and a try-once acquire send a request that
# failed with a connection error or a 503 (waiting acquires retry for as long as their wait lasts).
_TRIES: Final = 3
# Extra socket timeout on top of a long-poll's wait_ms.
_LONG_POLL_SLACK_S: Final = 5.0
# Events streams (see RenewableLease.watch): the pause before reopening one that ended, doubled
# up to the maximum while reopening fails; a stream silent this long is taken for dead (the
# gateway sends a comment line after 15 s without an event); the bound of the renewal that
# confirms a multi-lock member's loss.
_WATCH_PAUSE_MIN_S: Final = 0.1
_WATCH_PAUSE_MAX_S: Final = 5.0
_WATCH_IDLE_S: Final = 45.0
_CONFIRM_TIMEOUT_S: Final = 5.0


def _check_mode(mode: str) -> Mode:
    """mode as a Mode; ValueError if it is neither "exclusive" nor "shared"."""
    for m in _MODES:
        if mode == m:
            return m
    raise ValueError(f"leasegate: mode must be 'exclusive' or 'shared', got {mode!r}")


# ---------------------------------------------------------------------------------------------
# Errors


class LeasegateError(Exception):
    """An error answer from the gateway (an RFC 9457 problem), or a failure to reach it.

    Attributes mirror the problem body (``lock`` or ``semaphore`` names what it concerns;
    ``locks``, a multi-lock's members it concerns). A body that is not a problem becomes a
    LeasegateError of type ``"about:blank"`` with the HTTP status and the start of the body as
    ``detail``.
    """

    type: str
    title: str
    status: int
    detail: str
    invalid_params: list[tuple[str, str]]
    request_id: str | None
    lock: str | None
    semaphore: str | None
    locks: list[str] | None
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
        semaphore: str | None = None,
        locks: list[str] | None = None,
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
        self.semaphore = semaphore
        self.locks = None if locks is None else list(locks)
        self.retry_after_ms = retry_after_ms
        self.waited_ms = waited_ms
        self.queue_ticket = queue_ticket
        self.retry_after_s = retry_after_s
        self.problem = dict(problem or {})
        super().__init__(status, type, detail)

    def __str__(self) -> str:
        """``"<status> <type>: <detail> (name: reason; ...) [request <id>]"``; a reason the
        detail already says (a bad lock name's) is not said twice."""
        s = f"{self.status} {self.type}: {self.detail}"
        params = [(n, r) for n, r in self.invalid_params if r != self.detail]
        if params:
            s += " (" + "; ".join(f"{n}: {r}" for n, r in params) + ")"
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
        cls = _PROBLEM_CLASSES.get(ptype, LeasegateError)
        if not ptype.startswith(PROBLEM_PREFIX) and status == 409:
            cls = LockHeldError
        elif not ptype.startswith(PROBLEM_PREFIX) and status == 410:
            cls = LeaseGoneError
        return cls(
            type=ptype,
            title=str(p.get("title", reason)),
            status=_int_or_none(p.get("status")) or status,
            detail=str(p.get("detail", "")),
            invalid_params=params,
            request_id=_str_or_none(p.get("request_id")) or request_id,
            lock=_str_or_none(p.get("lock")),
            semaphore=_str_or_none(p.get("semaphore")),
            locks=_str_list_or_none(p.get("locks")),
            retry_after_ms=_int_or_none(p.get("retry_after_ms")),
            waited_ms=_int_or_none(p.get("waited_ms")),
            queue_ticket=_str_or_none(p.get("queue_ticket")),
            retry_after_s=retry_after_s,
            problem=p,
        )


class HeldError(LeasegateError):
    """409: what was asked for is taken (a lock, or every permit of a semaphore), or others wait
    for it. Catch this to handle :class:`LockHeldError` and :class:`SemaphoreFullError` alike.

    ``retry_after_ms`` is how long until the holder's lease (for a semaphore: the permit that runs
    out first; for a multi-lock: the longest among its held members) expires. After
    :meth:`Client.acquire`, :meth:`Client.acquire_semaphore` or :meth:`Client.lock_all` waited,
    ``waited_ms`` is how long the whole wait lasted (across its long-polls).
    """


class LockHeldError(HeldError):
    """409 ``lock-held``: another lease holds the lock (or others wait for it). For a multi-lock
    (:meth:`Client.lock_all`), ``locks`` lists the members that were held (or had waiters)."""


class ElectionLedError(HeldError):
    """409 election-led: another candidate leads the election (or others wait in line before
    this one)."""


class SemaphoreFullError(HeldError):
    """409 ``semaphore-full``: every permit of the semaphore is taken (or others wait for one)."""


class UpgradeRefusedError(LeasegateError):
    """409 ``upgrade-refused``: a lease holding the lock shared asked for it exclusively.

    Upgrades deadlock (two readers upgrading at once would wait for each other forever), so the
    gateway refuses them; the lease keeps its shared hold. Release it, then acquire exclusively.
    """


class PermitsMismatchError(LeasegateError):
    """409 ``permits-mismatch``: the semaphore, which someone holds or waits on, has another
    size; :attr:`permits` is that size."""

    @property
    def permits(self) -> int:
        """The semaphore's size, as the gateway reported it (0 if it did not)."""
        return _int_or_none(self.problem.get("permits")) or 0


class LeaseGoneError(LeasegateError):
    """410 ``lease-gone``: the lease no longer holds the lock or permit (it expired or was
    released). For a multi-lock, ``locks`` lists the members it no longer held; the call that
    answered this freed the others."""


class UnauthenticatedError(LeasegateError):
    """401 ``unauthenticated``: the gateway authenticates (it has an auth file) and the request
    carried no API key, or one it does not know. Give the client one: ``Client(url, api_key=...)``.
    """


class ForbiddenError(LeasegateError):
    """403 ``forbidden``: the API key's principal may not make this call: it lacks the
    :attr:`permission`, or no prefix of its covers the :attr:`name`, or the lease token is another
    principal's. ``detail`` says which."""

    @property
    def permission(self) -> str | None:
        """The permission the principal lacks (``"lock"``, ``"inspect"``, ``"admin"``), if that
        is why."""
        return _str_or_none(self.problem.get("permission"))

    @property
    def name(self) -> str | None:
        """The lock or semaphore name outside the principal's prefixes, if that is why."""
        return _str_or_none(self.problem.get("name"))


class QuotaExceededError(LeasegateError):
    """429 ``quota-exceeded``: the API key's principal is over one of its quotas (requests per
    second or parked waiting requests on the replica, or locks and permits held at once); nothing
    was done. Never retried by the client: retry after ``retry_after_ms`` (or ``retry_after_s``,
    the ``Retry-After`` header) if the work can wait."""


class TransportError(LeasegateError):
    """The gateway could not be reached or its answer was cut off (``status`` 0).

    The underlying exception (an :class:`OSError` or :class:`http.client.HTTPException`) is
    ``__cause__``.
    """


_PROBLEM_CLASSES: Final[dict[str, type[LeasegateError]]] = {
    LOCK_HELD: LockHeldError,
    ELECTION_LED: ElectionLedError,
    SEMAPHORE_FULL: SemaphoreFullError,
    UPGRADE_REFUSED: UpgradeRefusedError,
    PERMITS_MISMATCH: PermitsMismatchError,
    LEASE_GONE: LeaseGoneError,
    UNAUTHENTICATED: UnauthenticatedError,
    FORBIDDEN: ForbiddenError,
    QUOTA_EXCEEDED: QuotaExceededError,
}


class LeaseLostError(Exception):
    """Raised by :meth:`RenewableLease.check` once the lease is lost, or may lapse before it is
    renewed."""

    def __init__(self, lock: str, reason: str, kind: Kind = "lock") -> None:
        """``lock`` is the lock's name (the semaphore's, with ``kind="semaphore"``; the group's id,
        with ``kind="multilock"``), ``reason`` why the lease counts as lost."""
        self.lock = lock
        self.reason = reason
        self.kind: Kind = kind
        super().__init__(f"lease on {kind} {lock!r} lost: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (LeaseLostError, (self.lock, self.reason, self.kind))


class LostSignal(threading.Event):
    """A lease's :attr:`~RenewableLease.lost`: false while the lease may still hold, true once it
    is lost, so that ``if lease.lost:`` and ``while not lease.lost:`` read as they should.

    It is a :class:`threading.Event` all the same (``lost.wait(timeout)``, ``lost.is_set()``), as
    ``lost`` was before it could be tested for truth: code that waits on it keeps working. Only
    the lease sets it; why is in :meth:`RenewableLease.check`'s :class:`LeaseLostError`.
    """

    def __bool__(self) -> bool:
        return self.is_set()

    def __repr__(self) -> str:
        return f"<LostSignal {'set' if self.is_set() else 'clear'}>"


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


def _str_list_or_none(v: object) -> list[str] | None:
    if not isinstance(v, list):
        return None
    return [str(x) for x in cast(list[object], v)]


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
    """A lock's grant, re-entry or renewal answer: the lease as the gateway last described it.

    ``holds`` and ``ttl_ms`` are those of the hold of ``mode``; a renewal of a lease holding the
    lock both ways describes its exclusive hold.
    """

    lock: str
    owner: str
    token: str = field(repr=False)  # a bearer credential: kept out of reprs and logs
    fence: int
    ttl_ms: int
    expires_at: str
    holds: int
    watchdog: bool
    mode: Mode = "exclusive"

    @property
    def name(self) -> str:
        """The lock's name (``lock``)."""
        return self.lock

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
            mode=_check_mode(str(d.get("mode", "exclusive"))),
        )


@dataclass(frozen=True)
class SemaphoreGrant:
    """A semaphore's grant, re-entry or renewal answer: the lease on one permit as the gateway
    last described it. ``permits`` is the semaphore's size, ``used`` how many permits were in use
    just after this answer, this one included."""

    semaphore: str
    owner: str
    token: str = field(repr=False)  # a bearer credential: kept out of reprs and logs
    fence: int
    ttl_ms: int
    expires_at: str
    holds: int
    watchdog: bool
    permits: int
    used: int

    @property
    def name(self) -> str:
        """The semaphore's name (``semaphore``)."""
        return self.semaphore

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> SemaphoreGrant:
        """Build a SemaphoreGrant from the gateway's JSON object."""
        return SemaphoreGrant(
            semaphore=str(d["semaphore"]),
            owner=str(d["owner"]),
            token=str(d["token"]),
            fence=int(d["fence"]),
            ttl_ms=int(d["ttl_ms"]),
            expires_at=str(d.get("expires_at", "")),
            holds=int(d["holds"]),
            watchdog=bool(d.get("watchdog", False)),
            permits=int(d["permits"]),
            used=int(d["used"]),
        )


@dataclass(frozen=True)
class MultiLockMember:
    """One member of a multi-lock and its fence (under the same guarantee as a single grant of
    that lock: greater than every fence granted earlier for it)."""

    lock: str
    fence: int


@dataclass(frozen=True)
class MultiLockGrant:
    """A multi-lock's grant or renewal answer: one lease (``id``, ``token``, ``ttl_ms``) holding
    every member, listed in ``locks`` in name order with their fences. ``expires_at`` is when the
    first member expires unless renewed."""

    id: str
    owner: str
    token: str = field(repr=False)  # a bearer credential: kept out of reprs and logs
    mode: Mode
    ttl_ms: int
    expires_at: str
    watchdog: bool
    locks: tuple[MultiLockMember, ...]

    @property
    def name(self) -> str:
        """The group's id (``id``)."""
        return self.id

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> MultiLockGrant:
        """Build a MultiLockGrant from the gateway's JSON object."""
        members = cast(list[Mapping[str, Any]], d["locks"])
        return MultiLockGrant(
            id=str(d["id"]),
            owner=str(d["owner"]),
            token=str(d["token"]),
            mode=_check_mode(str(d.get("mode", "exclusive"))),
            ttl_ms=int(d["ttl_ms"]),
            expires_at=str(d.get("expires_at", "")),
            watchdog=bool(d.get("watchdog", False)),
            locks=tuple(MultiLockMember(lock=str(m["lock"]), fence=int(m["fence"])) for m in members),
        )


@dataclass(frozen=True)
class Holder:
    """One shared holder (a lock's reader, a semaphore's permit) as ``GET`` lists it.

    ``ttl_ms`` is what its lease has left; ``max_hold_left_ms`` (watchdog leases only) how much
    longer the gateway renews it (``max_hold_ms`` is the same number under its deprecated name);
    ``multilock`` the id of the multi-lock the hold belongs to, if any.
    """

    owner: str
    fence: int
    holds: int
    ttl_ms: int
    watchdog: bool
    max_hold_ms: int | None = None
    multilock: str | None = None
    max_hold_left_ms: int | None = None

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Holder:
        """Build a Holder from the gateway's JSON object."""
        return Holder(
            owner=str(d["owner"]),
            fence=int(d["fence"]),
            holds=int(d["holds"]),
            ttl_ms=int(d["ttl_ms"]),
            watchdog=bool(d.get("watchdog", False)),
            max_hold_ms=_int_or_none(d.get("max_hold_ms")),
            multilock=_str_or_none(d.get("multilock")),
            max_hold_left_ms=_max_hold_left(d),
        )


def _max_hold_left(d: Mapping[str, Any]) -> int | None:
    """``max_hold_left_ms``, or from a gateway that predates it the same number as ``max_hold_ms``."""
    return _int_or_none(d.get("max_hold_left_ms", d.get("max_hold_ms")))


def _holders(v: object) -> tuple[Holder, ...]:
    if not isinstance(v, list):
        return ()
    return tuple(Holder.from_json(cast(Mapping[str, Any], h)) for h in cast(list[object], v) if isinstance(h, dict))


@dataclass(frozen=True)
class LockState:
    """``GET /locks/{name}``: whether the lock is held, how, and how many requests wait for it.

    ``mode`` is set while it is held (``"exclusive"`` while an exclusive hold exists). ``owner``,
    ``fence``, ``holds``, ``ttl_ms`` (remaining) and ``watchdog`` describe the exclusive holder
    and are set only while it is held exclusively, ``max_hold_left_ms`` (how much longer the
    gateway renews the lease; ``max_hold_ms`` is its deprecated name) only for a watchdog lease,
    ``multilock`` (the group's id) only while a multi-lock holds it.
    ``holders`` (the first 100, soonest to expire first) and ``holder_count`` describe the shared
    holders (empty and 0 when there are none). ``yours`` is set only when a token was sent.
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
    mode: Mode | None = None
    holders: tuple[Holder, ...] = ()
    holder_count: int = 0
    multilock: str | None = None
    max_hold_left_ms: int | None = None

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> LockState:
        """Build a LockState from the gateway's JSON object."""
        mode = d.get("mode")
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
            mode=None if mode is None else _check_mode(str(mode)),
            holders=_holders(d.get("holders")),
            holder_count=_int_or_none(d.get("holder_count")) or 0,
            multilock=_str_or_none(d.get("multilock")),
            max_hold_left_ms=_max_hold_left(d),
        )


@dataclass(frozen=True)
class SemaphoreState:
    """``GET /semaphores/{name}``: the semaphore's size (``permits``, 0 while nobody holds or
    waits), the permits in ``used``, their ``holders`` (the first 100, soonest to expire first)
    and ``holder_count``, and how many requests wait. ``yours`` is set only when a token was
    sent."""

    name: str
    permits: int
    used: int
    waiters: int
    holders: tuple[Holder, ...] = ()
    holder_count: int = 0
    yours: bool | None = None

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> SemaphoreState:
        """Build a SemaphoreState from the gateway's JSON object."""
        return SemaphoreState(
            name=str(d["name"]),
            permits=int(d["permits"]),
            used=int(d["used"]),
            waiters=int(d.get("waiters", 0)),
            holders=_holders(d.get("holders")),
            holder_count=_int_or_none(d.get("holder_count")) or 0,
            yours=d.get("yours"),
        )


def _holder_ttl_ms(holders: tuple[Holder, ...], holder_count: int, fence: int) -> int | None:
    """The remaining TTL of the shared hold with ``fence`` (a lease's fence is its own), or a
    lower bound of it when more holders exist than are listed: the list goes soonest to expire
    first, so an unlisted holder has at least the last listed one's TTL. None when not found."""
    for h in holders:
        if h.fence == fence:
            return h.ttl_ms
    if holders and holder_count > len(holders):
        return holders[-1].ttl_ms
    return None


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


def _never_sent(e: TransportError) -> bool:
    """Whether a TransportError shows the request never reached the gateway (the connection was
    refused, or the name did not resolve), so that sending it again cannot apply it twice."""
    return isinstance(e.__cause__, (ConnectionRefusedError, socket.gaierror))


def _hopeless(e: TransportError) -> bool:
    """Whether a TransportError cannot go away by sending again: the gateway's certificate
    failed verification (an untrusted CA, another host name). Such errors are never retried."""
    return isinstance(e.__cause__, ssl.SSLCertVerificationError)


def _acquire_body(owner: str, ttl_ms: int | None, watchdog: bool, max_hold_ms: int | None) -> dict[str, Any]:
    """The members an acquire of a lock and of a semaphore share (unset ones left out)."""
    body: dict[str, Any] = {"owner": owner}
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    if watchdog:
        body["watchdog"] = True
    if max_hold_ms is not None:
        body["max_hold_ms"] = max_hold_ms
    return body


# ---------------------------------------------------------------------------------------------
# Client

_L = TypeVar("_L", bound="RenewableLease[Any]")
_LOCKS: Final = "/locks/"
_SEMAPHORES: Final = "/semaphores/"
_MULTILOCKS: Final = "/multilocks"
_ELECTIONS: Final = "/elections/"


class Client:
    """A client of one leasegate deployment, e.g. ``Client("http://127.0.0.1:8080")``.

    Safe to share between threads: every request uses its own connection. ``timeout`` bounds
    each socket operation of a request, in seconds; a long-poll gets its ``wait_ms`` on top.

    A gateway with an auth file (``LEASEGATE_AUTH_FILE``) wants an API key: ``api_key`` is sent
    as ``Authorization: Bearer <key>`` with every request (kept out of reprs and errors). Without
    one (or with one it does not know) it answers :class:`UnauthenticatedError`, and a call the
    key's principal may not make :class:`ForbiddenError`. Over ``https://``, the gateway's
    certificate is checked against the system's CAs, or only against those of ``ca_file`` (PEM)
    for a gateway whose certificate a private CA signed, or as ``ssl_context`` says (a client
    certificate, say). The client reads no environment variable: pass
    ``os.environ.get("LEASEGATE_API_KEY")`` yourself if that is where the key is.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 35.0,
        *,
        api_key: str | None = None,
        ca_file: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``base_url``: scheme, host, port and an optional path prefix of the gateway.

        ``api_key``: sent as ``Authorization: Bearer <key>``; None or ``""`` sends no header (so
        that a key read from an unset variable leaves the client unauthenticated), and a key
        holding a control character (a newline left from a file, say) is a ValueError.
        ``ca_file``: trust only the CA certificates in this PEM file (as ``curl --cacert``);
        reading it may raise :class:`OSError` or :class:`ssl.SSLError`. ``ssl_context``: the
        context of every HTTPS connection, instead of either default. Both are for ``https://``
        URLs only, and exclude each other (ValueError).
        """
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"leasegate: base_url must be an http(s) URL, got {base_url!r}")
        if timeout <= 0:
            raise ValueError("leasegate: timeout must be positive")
        if ca_file is not None and ssl_context is not None:
            raise ValueError("leasegate: ca_file and ssl_context exclude each other: give one")
        if (ca_file is not None or ssl_context is not None) and u.scheme != "https":
            raise ValueError(f"leasegate: ca_file and ssl_context need an https:// base_url, got {base_url!r}")
        if api_key and any(ord(c) < 0x20 or ord(c) == 0x7F for c in api_key):
            raise ValueError("leasegate: api_key holds a control character (a newline?): no HTTP header can carry it")
        if ca_file is not None:
            ssl_context = ssl.create_default_context(cafile=ca_file)
            ssl_context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.base_url = base_url
        self.timeout = timeout
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._ssl_context = ssl_context
        # A credential: kept out of reprs, errors and the headers a retry loop handles.
        self._authorization = f"Bearer {api_key}" if api_key else None

    def __repr__(self) -> str:
        return f"Client({self.base_url!r}, timeout={self.timeout!r})"

    # -- locks -----------------------------------------------------------------------------

    def acquire(
        self,
        name: str,
        owner: str,
        *,
        mode: Mode = "exclusive",
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
    ) -> Lease:
        """Acquire lock ``name`` for ``owner`` and return the :class:`Lease`.

        ``mode="shared"`` asks for a shared (read) hold: shared holders coexist, an exclusive
        hold (the default) excludes every other. A shared request queues behind a waiting
        exclusive one.

        With ``wait_ms`` 0 it tries once. Otherwise it waits up to ``wait_ms`` in the lock's
        FIFO queue, as a series of long-polls of at most ``max_wait_per_request_ms`` (the gateway
        caps a longer one to its ``LEASEGATE_MAX_WAIT``); each long-poll after the first presents
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
        body = _acquire_body(owner, ttl_ms, watchdog, max_hold_ms)
        if _check_mode(mode) == "shared":
            body["mode"] = mode  # left out for exclusive: the default, as older gateways know it
        return self._acquire(
            self._path(_LOCKS, name),
            body,
            wait_ms=wait_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
            make=lambda d, sent: Lease(self, Grant.from_json(d), sent=sent),
        )

    @contextlib.contextmanager
    def lock(
        self,
        name: str,
        owner: str,
        *,
        mode: Mode = "exclusive",
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
        watch: bool = True,
    ) -> Generator[Lease, None, None]:
        """Hold lock ``name`` for the ``with`` block; the options are :meth:`acquire`'s.

        A daemon thread renews the lease every TTL/3 (failed renewals are retried every
        *margin* = TTL/10, between 50 ms and 1 s). ``lease.lost`` turns true when a renewal
        answers 410, or when ``lease.valid_until - margin`` is reached without a successful
        renewal; and, with ``watch`` (the default), within milliseconds of a force release or an
        expiry on the gateway, which the lease's events stream tells (:meth:`Lease.watch`: one
        more connection for the block's length). The block must look at it: test ``if
        lease.lost:`` or call ``lease.check()`` between steps, or wait on ``lease.lost.wait(t)``,
        and stop working under the lock once it is true.

        With ``watchdog=True`` the gateway renews the lease; the thread then only checks it
        every TTL/3 (``GET /locks/{name}`` with the token), so ``lost`` and ``valid_until``
        still work and ``max_hold_ms`` keeps its meaning.

        On exit the thread is stopped and the hold the block took released (a 410 is ignored:
        the lease is gone anyway). If the block raised, an error releasing is added to its
        exception as a note rather than replacing it.
        """
        lease = self.acquire(
            name,
            owner,
            mode=mode,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            watchdog=watchdog,
            max_hold_ms=max_hold_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
        )
        with lease._for_block(watch):
            yield lease

    def inspect(self, name: str, token: str | None = None) -> LockState:
        """``GET /locks/{name}``: the lock's state; with ``token``, ``yours`` tells whether
        that lease holds it (either way)."""
        return self._inspect(name, token, tries=_TRIES, deadline=None)

    # -- semaphores ------------------------------------------------------------------------

    def acquire_semaphore(
        self,
        name: str,
        owner: str,
        *,
        permits: int,
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
    ) -> SemaphoreLease:
        """Take one permit of semaphore ``name`` of ``permits`` permits (1-10000) for ``owner``
        and return its :class:`SemaphoreLease`.

        The size is set by whoever acquires while nobody holds or waits; naming another size
        while someone does raises :class:`PermitsMismatchError` (its ``permits`` is the real
        size), at once, even when asked to wait. A permit expires with its lease. Waiting
        (long-polls that keep their place with queue tickets), retries and Idempotency-Keys
        work as for :meth:`acquire`, and so do the other options.

        Raises :class:`SemaphoreFullError` (with ``retry_after_ms`` and, after a wait,
        ``waited_ms``) when every permit is still taken when the wait runs out, or any other
        :class:`LeasegateError`.
        """
        body = _acquire_body(owner, ttl_ms, watchdog, max_hold_ms)
        body["permits"] = permits
        return self._acquire(
            self._path(_SEMAPHORES, name),
            body,
            wait_ms=wait_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
            make=lambda d, sent: SemaphoreLease(self, SemaphoreGrant.from_json(d), sent=sent),
        )

    @contextlib.contextmanager
    def semaphore(
        self,
        name: str,
        owner: str,
        *,
        permits: int,
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
        watch: bool = True,
    ) -> Generator[SemaphoreLease, None, None]:
        """Hold one permit of semaphore ``name`` for the ``with`` block; the options are
        :meth:`acquire_semaphore`'s, and ``watch`` as for :meth:`lock`. The permit's lease is kept
        alive, watched (``lost``, ``check()``, its semaphore's events stream) and released on exit
        exactly as :meth:`lock` does for a lock's."""
        lease = self.acquire_semaphore(
            name,
            owner,
            permits=permits,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            watchdog=watchdog,
            max_hold_ms=max_hold_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
        )
        with lease._for_block(watch):
            yield lease

    def inspect_semaphore(self, name: str, token: str | None = None) -> SemaphoreState:
        """``GET /semaphores/{name}``: the semaphore's state; with ``token``, ``yours`` tells
        whether that lease holds a permit."""
        return self._inspect_semaphore(name, token, tries=_TRIES, deadline=None)

    # -- multi-locks -----------------------------------------------------------------------

    def lock_all(
        self,
        names: Sequence[str],
        owner: str,
        *,
        mode: Mode = "exclusive",
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
    ) -> MultiLease:
        """Take every lock in ``names`` (2-64 distinct names, in any order) for ``owner`` under one
        new lease, all or nothing, and return its :class:`MultiLease`: one token and one TTL for
        the group, a fence per member. Members are ordinary locks: others see them held
        (:meth:`inspect` shows the group's id as ``multilock``) and wait in each member's line.

        With ``wait_ms`` 0 it tries once (one atomic step). Otherwise the gateway waits up to
        ``wait_ms`` for every member: it takes them in name order, holding those it has while it
        waits for the next (so groups never deadlock), and gives them back if the wait runs out.
        The wait is a series of long-polls of at most ``max_wait_per_request_ms``, each asking
        for what is left of the wait with the group queue ticket of the 409 that ended the one
        before: the group keeps its id and its place in the line it waited in. 503s are retried
        as for :meth:`acquire`.

        ``/multilocks`` takes no Idempotency-Key, so none is sent, and a connection error is
        retried only when the connection was refused (nothing was sent): a request whose answer
        was lost may have been granted, so its :class:`TransportError` is raised (such a group
        lapses after its TTL). The other options are :meth:`acquire`'s, for every member.

        Raises :class:`LockHeldError` (``locks``: the members that were held or had waiters;
        ``retry_after_ms``: the longest of their remaining TTLs; after a wait, ``waited_ms``) when
        a member is still held when the wait runs out, or any other :class:`LeasegateError`.
        """
        if isinstance(names, str):
            raise TypeError("leasegate: names must be a sequence of lock names, not one string")
        body = _acquire_body(owner, ttl_ms, watchdog, max_hold_ms)
        body["locks"] = list(names)
        if _check_mode(mode) == "shared":
            body["mode"] = mode
        return self._acquire(
            _MULTILOCKS,
            body,
            wait_ms=wait_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
            make=lambda d, sent: MultiLease(self, MultiLockGrant.from_json(d), sent=sent),
            keyed=False,
        )

    @contextlib.contextmanager
    def multilock(
        self,
        names: Sequence[str],
        owner: str,
        *,
        mode: Mode = "exclusive",
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
        watch: bool = True,
    ) -> Generator[MultiLease, None, None]:
        """Hold every lock in ``names`` for the ``with`` block; the options are
        :meth:`lock_all`'s, and ``watch`` as for :meth:`lock` (one events stream per member). The
        group's lease is kept alive, watched (``lost``, ``check()``) and released on exit exactly
        as :meth:`lock` does for a lock's (a watchdog group is checked by inspecting its members,
        which show the group's id)."""
        lease = self.lock_all(
            names,
            owner,
            mode=mode,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            watchdog=watchdog,
            max_hold_ms=max_hold_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
        )
        with lease._for_block(watch):
            yield lease

    # -- elections -------------------------------------------------------------------------

    def elect(
        self,
        name: str,
        value: str,
        *,
        owner: str,
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
    ) -> Leadership:
        """Campaign to lead election ``name`` with ``value`` (any text up to 4096 bytes, say the
        leader's address) for ``owner``, and return the :class:`Leadership` once elected (the
        gateway announced it in the election's log first). Waiting (FIFO, long-polls keeping
        their place with queue tickets), retries and Idempotency-Keys work as for
        :meth:`acquire`, and so do the other options. Nothing keeps the lead alive: renew it,
        use ``watchdog``, or use :meth:`campaign`.

        Raises :class:`ElectionLedError` (with ``retry_after_ms``) when another candidate still
        leads when the wait runs out, or any other :class:`LeasegateError`.
        """
        body = _acquire_body(owner, ttl_ms, watchdog, max_hold_ms)
        body["value"] = value
        return self._acquire(
            self._path(_ELECTIONS, name),
            body,
            wait_ms=wait_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
            make=lambda d, sent: Leadership(self, d, sent=sent),
        )

    @contextlib.contextmanager
    def campaign(
        self,
        name: str,
        value: str,
        *,
        owner: str,
        ttl_ms: int | None = None,
        wait_ms: int = 0,
        watchdog: bool = False,
        max_hold_ms: int | None = None,
        max_wait_per_request_ms: int = 30000,
        watch: bool = True,
    ) -> Generator[Leadership, None, None]:
        """Lead election ``name`` for the ``with`` block; the options are :meth:`elect`'s.

        As :meth:`lock` does for a lease: a daemon thread renews the lead every TTL/3 (a
        watchdog lead: checks it), and ``lead.lost`` (the same :class:`LostSignal`) turns true
        when a renewal answers 410, when ``valid_until - margin`` comes without a renewal, or,
        with ``watch`` (the default), within milliseconds of the lead's end announced in the
        election's events (a force release or an expiry: ``vacant``), which
        :meth:`Leadership.watch` follows. The block must look at it (``if lead.lost:``,
        ``lead.check()``) and stop acting as the leader once it is true. On exit the leader
        resigns (a 410 is ignored), and the first candidate in line is elected at once.
        """
        lead = self.elect(
            name,
            value,
            owner=owner,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            watchdog=watchdog,
            max_hold_ms=max_hold_ms,
            max_wait_per_request_ms=max_wait_per_request_ms,
        )
        with lead._for_block(watch):
            yield lead

    def inspect_election(self, name: str) -> ElectionState:
        """``GET /elections/{name}``: the leader (if ``led``), the candidates waiting in line,
        and the id of the election's last event."""
        return self._state(self._path(_ELECTIONS, name), None, ElectionState.from_json, tries=_TRIES, deadline=None)

    def observe(self, name: str, last_event_id: str | None = None) -> Generator[ElectionEvent, None, None]:
        """Observe election ``name`` (``GET /elections/{name}/events``): a generator of its
        :class:`ElectionEvent`, in the log's order, from after ``last_event_id`` (without it, a
        ``state`` first).

        A stream that ends (a gateway restart, ``LEASEGATE_MAX_STREAM_LIFETIME``, a network
        error, 45 s without a byte) is reopened with ``Last-Event-ID``, the id of the last event
        yielded, so that nothing is missed or repeated while the election's log still holds it;
        otherwise a ``state`` with ``gap`` true says so. Reopening pauses 0.1 s, doubling up to
        5 s while it fails. It runs until the consumer stops: ``break`` out of the loop, or
        ``close()`` the generator, from the thread that iterates it. A resumed stream with
        nothing new may stay silent until the next event.

        Raises :class:`LeasegateError` for an answer that reopening cannot mend (400, 401, 403,
        404, 501).
        """
        path = self._path(_ELECTIONS, name) + "/events"
        pause = _WATCH_PAUSE_MIN_S
        while True:
            headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
            delivered = False
            try:
                conn, resp = self._stream(path, headers)
            except TransportError as e:
                if _hopeless(e):
                    raise
            else:
                try:
                    if resp.status != 200:
                        err = LeasegateError.from_answer(
                            resp.status, resp.reason, {k.lower(): v for k, v in resp.getheaders()}, resp.read(64 << 10)
                        )
                        if resp.status in (400, 401, 403, 404, 405, 501):
                            raise err
                    else:
                        for typ, data, id_ in _sse_events(resp):
                            if id_ is None or typ not in _ELECTION_EVENT_TYPES:
                                continue  # "closed" (no id), or kinds newer than this module
                            body = _json_object(data.encode())
                            if body is None:
                                continue
                            last_event_id, delivered = id_, True
                            yield ElectionEvent.from_json(typ, id_, body)
                except (OSError, http.client.HTTPException):
                    pass  # cut off, or silent for _WATCH_IDLE_S: reopen
                finally:
                    conn.close()
            if delivered:
                pause = _WATCH_PAUSE_MIN_S
            time.sleep(pause / 2 + random.uniform(0, pause / 2))
            if not delivered:
                pause = min(2 * pause, _WATCH_PAUSE_MAX_S)

    # -- internals -------------------------------------------------------------------------

    def _acquire(
        self,
        path: str,
        base_body: Mapping[str, Any],
        *,
        wait_ms: int,
        max_wait_per_request_ms: int,
        make: Callable[[Mapping[str, Any], float], _L],
        keyed: bool = True,
    ) -> _L:
        """The acquire of a lock, a semaphore or a multi-lock (see :meth:`acquire`): POST
        ``base_body`` to ``path``, waiting as asked, and build the lease from the grant with
        ``make(grant, sent)``, ``sent`` being the send time its validity counts from.

        Without ``keyed`` (multi-locks), no Idempotency-Key is sent and a connection error is
        retried only when nothing was sent (see :meth:`lock_all`)."""
        if wait_ms < 0:
            raise ValueError("leasegate: wait_ms must be >= 0")
        if max_wait_per_request_ms < 1:
            raise ValueError("leasegate: max_wait_per_request_ms must be >= 1")
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
            body = dict(base_body)
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
                headers = {"Idempotency-Key": key} if keyed else {}
                ans = self._send("POST", path, body=body, headers=headers, timeout=socket_timeout)
            except TransportError as e:
                failures += 1
                if _hopeless(e) or not self._may_retry(failures, deadline) or not (keyed or _never_sent(e)):
                    raise
                self._pause(_backoff(failures), deadline)
                continue
            if ans.ok:
                sent = pending_since
                lease = ans.parse(lambda d: make(d, sent))
                # The lease's TTL started at its grant, after the request was sent: after a long
                # wait, valid_until (counted from the send) would already be near. Renew now to
                # count from a request sent after the grant; on failure the early bound stands.
                if not lease.watchdog and time.monotonic() - sent > lease.margin:
                    with contextlib.suppress(LeasegateError):
                        lease.renew()
                return lease
            err = ans.error()
            if isinstance(err, HeldError):
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
            if isinstance(err, LeaseGoneError) and keyed and replays < _TRIES:
                # No Lease-Token was sent, so this is a retry answered with the outcome of an
                # earlier attempt: its grant lapsed before we heard of it. Start afresh.
                replays += 1
                key, pending_since = _new_key(), None
                if self._may_retry(failures, deadline):
                    continue
            raise err

    def _inspect(self, name: str, token: str | None, *, tries: int, deadline: float | None) -> LockState:
        return self._state(self._path(_LOCKS, name), token, LockState.from_json, tries=tries, deadline=deadline)

    def _inspect_semaphore(self, name: str, token: str | None, *, tries: int, deadline: float | None) -> SemaphoreState:
        path = self._path(_SEMAPHORES, name)
        return self._state(path, token, SemaphoreState.from_json, tries=tries, deadline=deadline)

    def _state(
        self,
        path: str,
        token: str | None,
        build: Callable[[Mapping[str, Any]], _T],
        *,
        tries: int,
        deadline: float | None,
    ) -> _T:
        headers = {"Lease-Token": token} if token else {}
        ans, _ = self._retrying("GET", path, None, headers, tries=tries, deadline=deadline)
        if not ans.ok:
            raise ans.error()
        return ans.parse(build)

    def _path(self, collection: str, name: str) -> str:
        """The path of ``name`` in ``collection`` ("/locks/", "/semaphores/", "/multilocks/")."""
        return collection + urllib.parse.quote(name, safe=":")

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
            except TransportError as e:
                if attempt >= tries or _hopeless(e):
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
        conn = self._connection(self.timeout if timeout is None else timeout)
        h = self._headers("application/json, application/problem+json", headers)
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            h["Content-Type"] = "application/json"
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

    def _stream(self, path: str, headers: Mapping[str, str]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """GET an events stream on a connection of its own, whose reads time out after
        _WATCH_IDLE_S without a byte; return the connection and the answer, whose body the
        caller reads and which it closes. Raise TransportError if it cannot be opened."""
        conn = self._connection(_WATCH_IDLE_S)
        try:
            conn.request("GET", self._prefix + path, headers=self._headers("text/event-stream, application/problem+json", headers))
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(
                title="Transport error",
                detail=f"GET {self.base_url}{path}: {type(e).__name__}: {e}",
            ) from e

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl_context)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, accept: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        """The headers of every request: ``accept``, the User-Agent, ``extra``, the API key."""
        h = {"Accept": accept, "User-Agent": _USER_AGENT}
        if extra:
            h.update(extra)
        if self._authorization is not None:
            h["Authorization"] = self._authorization
        return h


# ---------------------------------------------------------------------------------------------
# Leases


class _LeaseGrant(Protocol):
    """What every grant a :class:`RenewableLease` follows has (:class:`Grant`,
    :class:`SemaphoreGrant`, :class:`MultiLockGrant`)."""

    @property
    def name(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def ttl_ms(self) -> int: ...
    @property
    def watchdog(self) -> bool: ...
    @property
    def expires_at(self) -> str: ...


_K = TypeVar("_K", bound=_LeaseGrant)
_G = TypeVar("_G", Grant, SemaphoreGrant)


class RenewableLease(abc.ABC, Generic[_K]):
    """What every lease shares, whatever it holds (a lock, a semaphore's permit, the members of a
    multi-lock): its latest grant, renewal, the loss bookkeeping (``lost``, :meth:`check`,
    ``valid_until``), the keep-alive threads of the ``with`` forms (:meth:`Client.lock`,
    :meth:`Client.semaphore`, :meth:`Client.multilock`) and the events streams that tell a loss
    at once (:meth:`watch`). Safe to use from several threads.

    The fields (``name``, ``owner``, ``token``, ``ttl_ms``, ``watchdog``, ``expires_at``) are
    read from the latest grant; read ``lease.grant`` once to get a consistent snapshot of all of
    them.
    """

    #: What the lease holds: ``"lock"``, ``"semaphore"`` (one permit of it) or ``"multilock"``.
    kind: ClassVar[Kind]

    def __init__(self, client: Client, grant: _K, *, sent: float, path: str) -> None:
        """``sent`` is the monotonic time before the request that produced ``grant``; ``path``
        the lease's resource (its renewal is ``path + "/renew"``)."""
        self._client = client
        self._url_path = path
        self._cond = threading.Condition(threading.Lock())
        self._grant: _K = grant
        self._applied_sent = sent
        self._valid_until: float = sent + grant.ttl_ms / 1000.0
        self._checked_at = sent  # a watchdog lease's keep-alive: its latest check (see _keepalive)
        # Held by a call that sets the lease's TTL (renewal, re-entry) from its send to its
        # answer's record: see _setting_ttl.
        self._setting = threading.Lock()
        self._released = False
        self._lost_reason = ""
        self._kept_alive = False
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watchers: list[_Watcher] = []  # see watch()
        self._releasing = 0  # releases in flight: a loss the gateway does not explain waits for them
        #: False while the lease may hold, true once it is lost: a call answered 410; while a
        #: ``with`` form keeps it alive, ``valid_until - margin`` came without a successful renewal;
        #: or, while it is watched (:meth:`watch`, which the ``with`` forms do), its events stream
        #: told of a force release or an expiry. Also a :class:`threading.Event` to wait on.
        self.lost: LostSignal = LostSignal()

    # -- fields ----------------------------------------------------------------------------

    @property
    def grant(self) -> _K:
        """The latest grant, re-entry or renewal, as one consistent snapshot."""
        with self._cond:
            return self._grant

    @property
    def name(self) -> str:
        """The lock's or the semaphore's name; a multi-lock's id."""
        return self.grant.name

    @property
    def owner(self) -> str:
        """Who holds the lease."""
        return self.grant.owner

    @property
    def token(self) -> str:
        """The lease token, sent as ``Lease-Token``. A credential: do not log it."""
        return self.grant.token

    @property
    def ttl_ms(self) -> int:
        """The TTL of the latest grant or renewal, in milliseconds."""
        return self.grant.ttl_ms

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

        The TTL of the latest grant or renewal counted from just before its request was sent
        (for a lease holding its lock both ways, that of the hold that lapses first).
        """
        with self._cond:
            return self._valid_until

    @property
    def margin(self) -> float:
        """Safety margin in seconds: TTL/10 (of the hold that lapses first, as set by its latest
        grant, re-entry or renewal) between 50 ms and 1 s. Work must stop this long before :attr:`valid_until`; renewals that fail
        are retried this often."""
        return self._margin

    @property
    def _margin(self) -> float:
        return min(max(self._lapse_ttl_ms() / 10000.0, 0.05), 1.0)

    def _lapse_ttl_ms(self) -> int:
        """The TTL of the hold that lapses first (the one :attr:`valid_until` is of)."""
        return self._grant.ttl_ms

    # -- operations ------------------------------------------------------------------------

    def renew(self, ttl_ms: int | None = None) -> _K:
        """Reset the lease's TTL to ``ttl_ms`` (default: its current TTL), every hold it has (a
        multi-lock's: every member); return the new grant.

        Retried (same Idempotency-Key, where the gateway takes one) on connection errors and
        503s, up to 3 tries. A 410 sets :attr:`lost` and raises :class:`LeaseGoneError`.
        """
        try:
            with self._setting_ttl(None):
                return self._renew(ttl_ms, tries=_TRIES, deadline=None)
        except LeaseGoneError as e:
            self._set_lost(f"renewal answered 410: {e.detail}")
            raise

    def check(self) -> None:
        """Raise :class:`LeaseLostError` if the lease is lost or released, or if it may lapse
        within :attr:`margin` (checked on the clock here too, so that a late keep-alive thread
        cannot make it miss the bound). For a watchdog lease that is not kept alive by a ``with``
        form, only a recorded loss counts: the gateway renews it unseen."""
        with self._cond:
            name = self._grant.name
            if self._released:
                raise LeaseLostError(name, "released", self.kind)
            deadline_applies = self._kept_alive or not self._grant.watchdog
            if not self.lost.is_set() and deadline_applies:
                left = self._valid_until - time.monotonic()
                if left <= self._margin:
                    self._lost_reason = f"no renewal succeeded; it can lapse in {max(left, 0.0):.3f}s"
                    self.lost.set()
            if self.lost.is_set():
                raise LeaseLostError(name, self._lost_reason or "lost", self.kind)

    def watch(self) -> None:
        """Follow the lease's events stream (``GET /locks/{name}/events`` with its token; a
        permit's semaphore's; for a multi-lock, whose token the events endpoints refuse, each
        member's, looking for the member's fence) on a daemon thread, so that a force release or
        an expiry on the gateway sets :attr:`lost` within milliseconds instead of at the next
        renewal. The ``with`` forms call it unless told ``watch=False``.

        A stream that ends is reopened (after 0.1 s, doubling up to 5 s while that fails) until
        :meth:`stop_watching`, the release of the last hold or the loss; a reopened stream checks
        that the lease survived the gap (the gateway answers 410 otherwise, which sets
        :attr:`lost`). A gateway without events streams (404) leaves :attr:`lost` to renewals.
        Each stream is one more HTTP connection for as long as it lasts. Returns at once; does
        nothing while watched already, or once the lease is lost or released. A release elsewhere
        with the lease's token counts as its own: no loss is told.
        """
        targets = self._watch_targets()
        with self._cond:
            if self._watchers or self.lost.is_set() or self._released:
                return
            self._watchers = [_Watcher(self, t) for t in targets]
            watchers = list(self._watchers)
        for w in watchers:
            w.start()

    def stop_watching(self) -> None:
        """Close the lease's events streams and wait (up to a second) for their threads. Does
        not set :attr:`lost`."""
        with self._cond:
            watchers, self._watchers = self._watchers, []
        for w in watchers:
            w.stop()
        for w in watchers:
            w.join(1.0)

    @property
    def watching(self) -> bool:
        """Whether every events stream of the lease is open now (false before a stream's first
        event, while it reopens, and once the lease is lost or released)."""
        with self._cond:
            return (
                bool(self._watchers)
                and all(w.open for w in self._watchers)
                and not self.lost.is_set()
                and not self._released
            )

    # -- what each kind of lease does its own way -------------------------------------------

    @abc.abstractmethod
    def _renew(self, ttl_ms: int | None, *, tries: int, deadline: float | None) -> _K:
        """POST the renewal (at most ``tries`` attempts, none after ``deadline``) and record
        it; raise the answer's error, if any, without setting :attr:`lost`."""

    @abc.abstractmethod
    def _observe(self, deadline: float) -> None:
        """Check a watchdog lease by inspecting what it holds: gone -> LeaseGoneError; held ->
        record the new valid_until."""

    @abc.abstractmethod
    def _finish(self) -> None:
        """End of a ``with`` block, after the keep-alive threads stopped: give back what the
        block took unless the block did (a 410 is fine: the lease is gone either way)."""

    @abc.abstractmethod
    def _watch_targets(self) -> list[_WatchTarget]:
        """The events streams :meth:`watch` follows."""

    # -- internals -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _setting_ttl(self, deadline: float | None) -> Generator[None, None, None]:
        """Run a call that sets the lease's TTL (a renewal or a re-entry, retries included, and
        the record of its answer) after any other such call of the lease was answered, waiting
        until ``deadline`` at the most (then :class:`TransportError`). Two in flight at once could
        be applied by Redis in one order and answered in the other, and the lease would count as
        valid for a TTL Redis no longer has; one at a time, the latest answer is Redis's TTL."""
        wait = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not self._setting.acquire(timeout=wait):
            raise TransportError(title="Busy", detail="another renewal of the lease was still on its way")
        try:
            yield
        finally:
            self._setting.release()

    def _set_lost(self, reason: str) -> None:
        with self._cond:
            if not self.lost.is_set():
                self._lost_reason = reason
                self.lost.set()
            self._cond.notify_all()
            watchers = list(self._watchers)
        for w in watchers:
            w.stop()  # no join: this may be a watcher's own thread

    def _watch_lost(self, explained: bool, reason: str) -> None:
        """A watcher learned that the lease is lost. A loss the gateway explains (a force
        release, an expiry) is recorded at once; one it does not (found gone) waits for any
        release in flight, which may be what freed the lock, and is no loss if that release gave
        back the last hold."""
        with self._cond:
            while not explained and self._releasing:
                self._cond.wait()
            if self._released:
                return
        self._set_lost(reason)

    def _confirm_gone(self) -> bool:
        """A multi-lock member's stream does not show the member held (after a gap): renew the
        group, whose 410 sets lost (and frees the other members); return whether the lease is
        lost or released. Waits for any release in flight first."""
        with self._cond:
            while self._releasing:
                self._cond.wait()
            if self._released or self.lost.is_set():
                return True
        try:
            deadline = time.monotonic() + _CONFIRM_TIMEOUT_S
            with self._setting_ttl(deadline):
                self._renew(None, tries=1, deadline=deadline)
        except LeaseGoneError as e:
            self._set_lost(f"its events stream found it gone, and the renewal answered 410: {e.detail}")
            return True
        except LeasegateError:
            pass  # unknown: the stream goes on, and renewals will tell
        return self.lost.is_set()

    @contextlib.contextmanager
    def _release_in_flight(self) -> Generator[None, None, None]:
        """Count a release in flight (see _watch_lost)."""
        with self._cond:
            self._releasing += 1
        try:
            yield
        finally:
            with self._cond:
                self._releasing -= 1
                self._cond.notify_all()

    def _ended(self) -> None:
        """The lease holds nothing more (its own release): close its events streams."""
        self.stop_watching()

    @contextlib.contextmanager
    def _for_block(self, watch: bool = True) -> Generator[None, None, None]:
        """Keep the lease alive (and, with ``watch``, watched) for a ``with`` block, then
        release what it was granted."""
        self._start_keepalive()
        if watch:
            self.watch()
        try:
            yield
        except BaseException as exc:
            try:
                self._stop_keepalive()
                self._finish()
            except Exception as rel:  # noqa: BLE001 - reported on the block's own exception
                exc.add_note(f"leasegate: releasing {self.kind} {self.name!r} failed too: {rel}")
            raise
        else:
            self._stop_keepalive()
            self._finish()

    def _start_keepalive(self) -> None:
        with self._cond:
            self._kept_alive = True
        name = self.name
        self._threads = [
            threading.Thread(target=self._keepalive, name=f"leasegate-renew:{name}", daemon=True),
            threading.Thread(target=self._watch_deadline, name=f"leasegate-deadline:{name}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _stop_keepalive(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self.stop_watching()
        for t in self._threads:
            # A renewal may be in flight; it cannot resurrect anything, so do not wait long.
            t.join(timeout=1.0)

    def _keepalive(self) -> None:
        """Renew once a third of the TTL has passed since the latest grant, re-entry or renewal
        was sent (``valid_until - ttl``), so that one made by hand counts and one to a shorter
        TTL brings the next forward; retry failures every margin. A watchdog lease is checked
        every TTL/3 instead."""
        g = self.grant
        retry_at: float | None = None  # after a failure, while valid_until stays failed_at
        failed_at = 0.0
        while True:
            with self._cond:
                while True:
                    if self._stop.is_set() or self.lost.is_set() or self._released:
                        return
                    ttl = self._lapse_ttl_ms() / 1000.0
                    due = self._valid_until - ttl + ttl / 3
                    if g.watchdog:
                        due = self._checked_at + g.ttl_ms / 3000.0
                    if retry_at is not None and self._valid_until == failed_at:
                        due = retry_at
                    left = due - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)  # any news (a renewal, a release, the stop) looks again
            deadline = self.valid_until - self._margin
            if time.monotonic() >= deadline:
                return  # _watch_deadline sets lost
            try:
                if g.watchdog:
                    self._checked_at = time.monotonic()
                    self._observe(deadline)
                else:
                    with self._setting_ttl(deadline):
                        self._renew(g.ttl_ms, tries=1, deadline=deadline)
                retry_at = None
            except LeaseGoneError as e:
                if not self._stop.is_set() and not self._released:
                    self._set_lost(f"renewal answered 410: {e.detail}")
                return
            except Exception:  # noqa: BLE001 - LeasegateError, or e.g. a malformed answer: retry
                with self._cond:
                    retry_at, failed_at = time.monotonic() + self._margin, self._valid_until

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


@dataclass(frozen=True)
class _WatchTarget:
    """One events stream a lease follows: its lock's (or semaphore's), with its token; or, for a
    multi-lock, each member's, without a token, looking for the member's fence."""

    path: str  # the stream's path, e.g. /locks/orders.42/events
    name: str  # the lock's or the semaphore's name
    token: str | None  # the lease's token; None for a multi-lock's member and a leadership
    fence: int
    election: bool = False  # a leadership's: its election's events, looking for its fence's end


class _Watcher:
    """Follows one _WatchTarget's stream on a daemon thread, reopening it after each end, until
    :meth:`stop` or the loss. A reopened stream is itself the check that the lease survived the
    gap: the gateway answers 410 to a token whose lease no longer holds, and a member's first
    event (its lock's state) shows whether it still holds its fence."""

    def __init__(self, lease: RenewableLease[Any], target: _WatchTarget) -> None:
        self._lease = lease
        self._target = target
        self._stopped = threading.Event()
        self._mu = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None  # the stream's, while open; guarded by _mu
        self.open = False  # the stream delivered its first event and is open; guarded by lease._cond
        self._thread = threading.Thread(target=self._run, name=f"leasegate-watch:{target.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop following: close the stream now (a read blocked on it returns at once)."""
        self._stopped.set()
        with self._mu:
            conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def join(self, timeout: float) -> None:
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        pause = _WATCH_PAUSE_MIN_S
        while not self._stopped.is_set():
            try:
                outcome = self._follow()
            except Exception:  # noqa: BLE001 - e.g. a TLS socket closed under a read by stop()
                outcome = "failed"
            if outcome == "done" or self._stopped.is_set():
                return
            if outcome == "ended":
                pause = _WATCH_PAUSE_MIN_S
            if self._stopped.wait(pause / 2 + random.uniform(0, pause / 2)):
                return
            if outcome == "failed":
                pause = min(2 * pause, _WATCH_PAUSE_MAX_S)

    def _follow(self) -> Literal["ended", "failed", "done"]:
        """Open the stream and read it until it ends: "ended" after a stream that delivered
        events, "failed" when it could not be opened, "done" when there is nothing more to watch
        (the loss, the stop, or a gateway that cannot stream this lease)."""
        t = self._target
        headers = {} if t.token is None else {"Lease-Token": t.token}
        try:
            conn, resp = self._lease._client._stream(t.path, headers)
        except TransportError as e:
            return "done" if _hopeless(e) else "failed"
        with self._mu:
            if self._stopped.is_set():
                conn.close()
                return "done"
            self._conn = conn
        opened = False
        try:
            if resp.status != 200:
                err = LeasegateError.from_answer(
                    resp.status, resp.reason, {k.lower(): v for k, v in resp.getheaders()}, resp.read(64 << 10)
                )
                if isinstance(err, LeaseGoneError):
                    self._lease._watch_lost(False, f"its events stream, reopened, answered 410: {err.detail}")
                    return "done"
                # A gateway without events streams, or a token they refuse: nothing to watch with.
                return "done" if resp.status in (400, 404, 405, 501) else "failed"
            for typ, data, _ in _sse_events(resp):
                if self._stopped.is_set():
                    return "done"
                if not opened:
                    opened = True
                    self._set_open(True)
                if self._handle(typ, data):
                    return "done"
            return "ended" if opened else "failed"
        except (OSError, http.client.HTTPException):  # cut off, or silent for _WATCH_IDLE_S
            return "ended" if opened else "failed"
        finally:
            if opened:
                self._set_open(False)
            with self._mu:
                self._conn = None
            conn.close()

    def _set_open(self, open_: bool) -> None:
        with self._lease._cond:
            self.open = open_

    def _handle(self, typ: str, data: str) -> bool:
        """Act on one event; return whether it told of the loss."""
        t = self._target
        body = _json_object(data.encode()) or {}
        at = body.get("at")
        when = f" at {at}" if isinstance(at, str) else ""
        if t.election:
            return self._handle_election(typ, body, when)
        if t.token is not None:
            # A stream with the token says "lost" (its last event) after the expired or forced one.
            if typ != "lost":
                return False
            reason = body.get("reason")
            if reason == "forced":
                self._lease._watch_lost(True, f"force-released on the gateway{when} (its events stream told)")
            elif reason == "expired":
                self._lease._watch_lost(True, f"it expired on the gateway{when} (its events stream told)")
            else:
                self._lease._watch_lost(False, f"the gateway found it gone{when} (its events stream told)")
            return True
        member = f"member {t.name!r}"
        if typ == "state":
            try:
                st = LockState.from_json(body)
            except (KeyError, TypeError, ValueError):
                return False
            # If the renewal succeeds, the member is still held after all.
            return not _holds_fence(st, t.fence) and self._lease._confirm_gone()
        if typ == "expired" and _int_or_none(body.get("fence")) == t.fence:
            self._lease._watch_lost(True, f"{member} expired on the gateway{when} (its events stream told)")
            return True
        if typ == "forced":
            holds: object = body.get("holds")
            if isinstance(holds, list) and any(
                isinstance(h, dict) and _int_or_none(cast(dict[str, object], h).get("fence")) == t.fence
                for h in cast(list[object], holds)
            ):
                self._lease._watch_lost(True, f"{member} force-released on the gateway{when} (its events stream told)")
                return True
        return False

    def _handle_election(self, typ: str, body: Mapping[str, Any], when: str) -> bool:
        """Act on one event of a leadership's election; return whether it told of the loss. The
        log holds every leader's end before the next leader's election, so this fence's end, or
        a later leader, is the loss; a ``state`` (the stream's first event) not showing this
        fence leading is checked with a renewal, whose 410 sets lost."""
        fence = self._target.fence
        if typ == "state":
            leader = body.get("leader")
            leads = (
                body.get("led") is True
                and isinstance(leader, dict)
                and _int_or_none(cast(dict[str, object], leader).get("fence")) == fence
            )
            return not leads and self._lease._confirm_gone()
        if typ in ("vacant", "resigned") and _int_or_none(body.get("fence")) == fence:
            if typ == "vacant":
                why = f"the election was announced vacant{when}: the lead ran out or was force-released"
            else:
                why = f"the leader resigned{when}, with this lead's token, from elsewhere"
            self._lease._watch_lost(True, f"{why} (its events stream told)")
            return True
        elected = _int_or_none(body.get("fence"))
        if typ == "elected" and elected is not None and elected > fence:
            self._lease._watch_lost(True, f"another leader was elected{when} (its events stream told)")
            return True
        return False


def _sse_events(resp: http.client.HTTPResponse) -> Generator[tuple[str, str, str | None], None, None]:
    """The events of a text/event-stream answer, as (type, data lines joined by newlines, the
    event's own id field or None); comments skipped. An event cut short by the end of the stream
    is dropped, as the format wants."""
    typ, seen = "", False
    data: list[str] = []
    id_: str | None = None
    while True:
        raw = resp.readline(1 << 20)
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if seen:
                yield typ or "message", "\n".join(data), id_
            typ, data, seen, id_ = "", [], False, None
            continue
        if line.startswith(":"):
            continue  # a comment: the keep-alive
        field_, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field_ == "event":
            typ, seen = value, True
        elif field_ == "data":
            data.append(value)
            seen = True
        elif field_ == "id" and "\0" not in value:
            id_ = value


def _holds_fence(st: LockState, fence: int) -> bool:
    """Whether ``st`` shows a hold with ``fence``, or may (it lists only the first shared
    holders)."""
    if not st.held:
        return False
    if st.fence == fence or any(h.fence == fence for h in st.holders):
        return True
    return st.holder_count > len(st.holders)


@dataclass
class _Hold:
    """One way a lease holds its lock: exclusively, or shared (a semaphore's permit too)."""

    count: int  # re-entry count; 0: not held this way
    ttl_ms: int
    valid_until: float  # monotonic: `sent` + ttl
    sent: float  # the send time of the request that last set valid_until


class BaseLease(RenewableLease[_G]):
    """What a lock's :class:`Lease` and a semaphore permit's :class:`SemaphoreLease` share:
    re-entry, holds counted by mode, release, and (from :class:`RenewableLease`) renewal, the
    loss bookkeeping (``lost``, :meth:`check`, ``valid_until``) and the keep-alive thread of
    :meth:`Client.lock` and :meth:`Client.semaphore`. Safe to use from several threads.

    The fields (``name``, ``owner``, ``token``, ``fence``, ``ttl_ms``, ``watchdog``,
    ``expires_at``) are read from the latest grant (:class:`Grant` or :class:`SemaphoreGrant`);
    read ``lease.grant`` once to get a consistent snapshot of all of them (e.g. the token and
    fence of the same renewal).
    """

    #: What the lease holds: ``"lock"`` or ``"semaphore"`` (one permit of it).
    kind: ClassVar[Kind]
    _collection: ClassVar[str]

    def __init__(self, client: Client, grant: _G, *, sent: float) -> None:
        """Made by :meth:`Client.acquire` or :meth:`Client.acquire_semaphore`; ``sent`` is the
        monotonic time before its request."""
        super().__init__(client, grant, sent=sent, path=client._path(self._collection, grant.name))
        self._mode: Mode = self._mode_of(grant)  # the way the lease was granted
        self._holds: dict[Mode, _Hold] = {self._mode: _Hold(grant.holds, grant.ttl_ms, self._valid_until, sent)}

    # -- fields ----------------------------------------------------------------------------

    @property
    def fence(self) -> int:
        """The fencing token: pass it with every write to the protected resource."""
        return self.grant.fence

    @property
    def holds(self) -> int:
        """How many holds the lease has: 1 after a new grant, +1 per re-entry, -1 per release
        (both ways counted, for a lease holding its lock both ways); 0 once it holds nothing."""
        with self._cond:
            return sum(h.count for h in self._holds.values())

    # -- what a lock's and a semaphore's leases do differently ------------------------------

    @abc.abstractmethod
    def _parse_grant(self, d: Mapping[str, Any]) -> _G:
        """The grant in a grant, re-entry or renewal answer."""

    @abc.abstractmethod
    def _mode_of(self, grant: _G) -> Mode:
        """The way of holding that grant describes."""

    @abc.abstractmethod
    def _released_mode(self, d: Mapping[str, Any], asked: Mode | None) -> Mode:
        """The way of holding that a release answer (asked with ``asked``) describes."""

    @abc.abstractmethod
    def _observed_ttls(self, deadline: float) -> dict[Mode, int]:
        """Inspect the lease (with its token): the remaining TTL of each of its holds found.
        Raises LeaseGoneError when the lease holds no more."""

    # -- internals -------------------------------------------------------------------------

    def _reenter(self, body: Mapping[str, Any]) -> _G:
        """POST ``body`` with the lease's token: one more hold (retried as :meth:`renew`)."""
        g = self.grant
        headers = {"Lease-Token": g.token, "Idempotency-Key": _new_key()}
        with self._setting_ttl(None):
            ans, sent = self._client._retrying("POST", self._url_path, body, headers, tries=_TRIES, deadline=None)
            if not ans.ok:
                err = ans.error()
                if isinstance(err, LeaseGoneError):
                    self._set_lost(f"re-entry answered 410: {err.detail}")
                raise err
            new = ans.parse(self._parse_grant)
            self._granted(new, sent)
        return new

    def _release(self, mode: Mode | None) -> bool:
        """DELETE one hold (of ``mode``, when given); return whether the lease holds nothing now.

        Asked for one way, a 410 says only that the lease has no hold of that way: it is lost
        only if it holds nothing the other way either.
        """
        g = self.grant
        headers = {"Lease-Token": g.token, "Idempotency-Key": _new_key()}
        path = self._url_path if mode is None else f"{self._url_path}?mode={mode}"
        with self._release_in_flight():
            ans, _ = self._client._retrying("DELETE", path, None, headers, tries=_TRIES, deadline=None)
            if not ans.ok:
                err = ans.error()
                if isinstance(err, LeaseGoneError) and (mode is None or not self._dropped(mode)):
                    self._set_lost(f"release answered 410: {err.detail}")
                raise err
            released_mode, holds = ans.parse(lambda d: (self._released_mode(d, mode), int(d["holds"])))
            nothing_left = self._released_hold(released_mode, holds)
        if nothing_left:
            self._ended()
        return nothing_left

    def _watch_targets(self) -> list[_WatchTarget]:
        g = self.grant
        return [_WatchTarget(self._url_path + "/events", g.name, g.token, g.fence)]

    def _renew(self, ttl_ms: int | None, *, tries: int, deadline: float | None) -> _G:
        g = self.grant
        body: dict[str, Any] = {} if ttl_ms is None else {"ttl_ms": ttl_ms}
        headers = {"Lease-Token": g.token, "Idempotency-Key": _new_key()}
        ans, sent = self._client._retrying(
            "POST", self._url_path + "/renew", body, headers, tries=tries, deadline=deadline
        )
        if not ans.ok:
            raise ans.error()
        new = ans.parse(self._parse_grant)
        self._renewed(new, ttl_ms, sent)
        return new

    def _count(self, mode: Mode) -> int:
        """Holds of ``mode``; self._cond held."""
        h = self._holds.get(mode)
        return 0 if h is None else h.count

    def _recount(self) -> None:
        """valid_until from the hold that lapses first (kept as it was once none is left);
        self._cond held."""
        held = [h.valid_until for h in self._holds.values() if h.count > 0]
        if held:
            self._valid_until = min(held)
        self._cond.notify_all()

    def _lapse_ttl_ms(self) -> int:
        held = [h for h in list(self._holds.values()) if h.count > 0]
        if not held:
            return self._grant.ttl_ms
        return min(held, key=lambda h: h.valid_until).ttl_ms

    @staticmethod
    def _set_ttl(h: _Hold, ttl_ms: int, sent: float) -> None:
        h.ttl_ms, h.valid_until, h.sent = ttl_ms, sent + ttl_ms / 1000.0, sent

    def _granted(self, grant: _G, sent: float) -> None:
        """Record a re-entry of one hold, whose request was sent at ``sent``."""
        with self._cond:
            mode = self._mode_of(grant)
            h = self._holds.get(mode)
            if h is None:
                self._holds[mode] = _Hold(grant.holds, grant.ttl_ms, sent + grant.ttl_ms / 1000.0, sent)
            else:
                h.count = grant.holds
                if sent >= h.sent:
                    self._set_ttl(h, grant.ttl_ms, sent)
            if sent >= self._applied_sent:
                self._applied_sent, self._grant = sent, grant
            self._recount()

    def _renewed(self, grant: _G, ttl_ms: int | None, sent: float) -> None:
        """Record a renewal to ``ttl_ms`` (None: each hold kept its own), sent at ``sent``,
        unless a request sent later was applied already. Its answer describes one hold (a lock's
        exclusive one when it has one); re-entry counts change only with re-entries and
        releases."""
        with self._cond:
            if sent < self._applied_sent:
                return
            self._applied_sent, self._grant = sent, grant
            reported = self._mode_of(grant)
            for mode, h in self._holds.items():
                if h.count > 0 and sent >= h.sent:
                    if mode == reported:
                        ttl = grant.ttl_ms
                    else:
                        ttl = h.ttl_ms if ttl_ms is None else ttl_ms
                    self._set_ttl(h, ttl, sent)
            self._recount()

    def _observed(self, ttls: Mapping[Mode, int], sent: float) -> None:
        """Record the remaining TTLs an inspect sent at ``sent`` saw."""
        with self._cond:
            for mode, ttl in ttls.items():
                h = self._holds.get(mode)
                if h is not None and h.count > 0 and sent >= h.sent:
                    h.valid_until, h.sent = sent + ttl / 1000.0, sent
            self._recount()

    def _released_hold(self, mode: Mode, holds: int) -> bool:
        """Record a release answer (``holds`` of ``mode`` left); return whether the lease
        holds nothing now (the keep-alive threads then stop)."""
        with self._cond:
            h = self._holds.get(mode)
            if h is not None:
                h.count = holds
            elif holds > 0:  # a hold taken with the token behind this object's back
                self._holds[mode] = _Hold(holds, self._grant.ttl_ms, self._valid_until, self._applied_sent)
            if self._mode_of(self._grant) == mode:
                self._grant = replace(self._grant, holds=holds)
            self._recount()
            if any(h.count > 0 for h in self._holds.values()):
                return False
            self._released = True
            return True

    def _dropped(self, mode: Mode) -> bool:
        """Record that the lease has no hold of ``mode``; return whether it holds the other
        way still."""
        with self._cond:
            h = self._holds.get(mode)
            if h is not None:
                h.count = 0
            self._recount()
            return any(h.count > 0 for h in self._holds.values())

    def _gone(self) -> LeaseGoneError:
        """The error of an inspect that shows the lease no longer holds."""
        name = self.name
        return LeaseGoneError(
            type=LEASE_GONE,
            title="Lease gone",
            status=410,
            detail=f"the lease no longer holds the {self.kind} (inspect: yours is false)",
            lock=name if self.kind == "lock" else None,
            semaphore=name if self.kind == "semaphore" else None,
        )

    def _finish(self) -> None:
        """Release the hold the lease was granted unless the block did."""
        with self._cond:
            if self._released:
                return
            # Of a lease holding its lock both ways, give back the block's own hold.
            both = all(self._count(m) > 0 for m in _MODES)
        try:
            self._release(self._mode if both else None)
        except LeaseGoneError:
            pass

    def _observe(self, deadline: float) -> None:
        """Check a watchdog lease: gone -> LeaseGoneError; held -> a new valid_until."""
        sent = time.monotonic()
        ttls = self._observed_ttls(deadline)
        if not ttls:  # cannot happen with the gateway's listing; retried like a failure
            raise LeasegateError(title="Lease not listed", detail="inspect shows no TTL of this lease")
        self._observed(ttls, sent)


class Lease(BaseLease[Grant]):
    """A held lock (exclusively or shared). Safe to use from several threads.

    The fields (``lock``, ``owner``, ``token``, ``fence``, ``ttl_ms``, ``watchdog``,
    ``expires_at``) are read from the latest :class:`Grant`; read ``lease.grant`` once to get a
    consistent snapshot of all of them (e.g. the token and fence of the same renewal).

    An exclusive lease may take a shared hold too (``reenter(mode="shared")``); it then holds the
    lock both ways, each with its own re-entry count, until ``release(mode=...)`` gives one back
    (releasing the exclusive hold then leaves it holding the lock shared, with nobody in between:
    a downgrade). A shared lease asking for exclusive gets :class:`UpgradeRefusedError`.
    """

    kind: ClassVar[Kind] = "lock"
    _collection: ClassVar[str] = _LOCKS

    def __repr__(self) -> str:
        g = self.grant
        return (
            f"Lease(lock={g.lock!r}, mode={self.mode!r}, owner={g.owner!r}, fence={g.fence}, "
            f"holds={self.holds}, lost={self.lost.is_set()})"
        )

    @property
    def lock(self) -> str:
        """The lock's name."""
        return self.grant.lock

    @property
    def mode(self) -> Mode:
        """How the lease holds the lock: ``"exclusive"`` while it has an exclusive hold (and
        maybe a shared one too), else ``"shared"``."""
        with self._cond:
            if self._count("exclusive") > 0:
                return "exclusive"
            if self._count("shared") > 0:
                return "shared"
            return self._grant.mode

    def reenter(self, *, mode: Mode | None = None, ttl_ms: int | None = None) -> Grant:
        """Take the lock once more with this lease (reentrant): one more hold of ``mode``
        (default: :attr:`mode`), same fence, that hold's TTL reset to ``ttl_ms`` (default: the
        gateway's). Return the grant.

        An exclusive lease asking for ``"shared"`` takes a shared hold beside its exclusive one.
        A shared lease asking for ``"exclusive"`` raises :class:`UpgradeRefusedError` and keeps
        its shared hold. Retried (same Idempotency-Key, so a retry never adds a second hold) on
        connection errors and 503s, up to 3 tries. A 410 sets :attr:`lost` and raises
        :class:`LeaseGoneError`.
        """
        m = self.mode if mode is None else _check_mode(mode)
        body: dict[str, Any] = {"owner": self.owner}
        if m == "shared":
            body["mode"] = m
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        return self._reenter(body)

    def release(self, mode: Mode | None = None) -> bool:
        """Give back one hold; return whether the lease now holds nothing (for a lease holding
        the lock one way only, the answer's ``released``).

        ``mode`` picks which hold of a lease holding the lock both ways to give back; without
        it the gateway gives back the exclusive one first. Retried (same Idempotency-Key: the
        gateway answers a retry as it did the first attempt, so a lost answer never costs a
        second hold) on connection errors and 503s, up to 3 tries. A 410 (the lease is gone: it
        expired or was released) raises :class:`LeaseGoneError` and sets :attr:`lost`, unless
        ``mode`` was given and the lease still holds the lock the other way.
        """
        return self._release(None if mode is None else _check_mode(mode))

    def _parse_grant(self, d: Mapping[str, Any]) -> Grant:
        return Grant.from_json(d)

    def _mode_of(self, grant: Grant) -> Mode:
        return grant.mode

    def _released_mode(self, d: Mapping[str, Any], asked: Mode | None) -> Mode:
        m = d.get("mode")
        if m is not None:
            return _check_mode(str(m))
        return asked or self.mode  # a gateway older than modes: exclusive

    def _observed_ttls(self, deadline: float) -> dict[Mode, int]:
        g = self.grant
        st = self._client._inspect(g.lock, g.token, tries=1, deadline=deadline)
        if not st.yours or not st.held:
            raise self._gone()
        ttls: dict[Mode, int] = {}
        if st.mode == "exclusive" and st.fence == g.fence and st.ttl_ms is not None:
            ttls["exclusive"] = st.ttl_ms
        shared = _holder_ttl_ms(st.holders, st.holder_count, g.fence)
        if shared is not None:
            ttls["shared"] = shared
        return ttls


class SemaphoreLease(BaseLease[SemaphoreGrant]):
    """A held permit of a semaphore: renewed, re-entered, released, kept alive and watched like
    a lock's :class:`Lease`. Safe to use from several threads.

    The fields (``semaphore``, ``owner``, ``token``, ``fence``, ``ttl_ms``, ``watchdog``,
    ``expires_at``, ``used``) are read from the latest :class:`SemaphoreGrant`; ``permits`` is
    the semaphore's size, which cannot change while the lease holds its permit.
    """

    kind: ClassVar[Kind] = "semaphore"
    _collection: ClassVar[str] = _SEMAPHORES

    def __init__(self, client: Client, grant: SemaphoreGrant, *, sent: float) -> None:
        """Made by :meth:`Client.acquire_semaphore`; ``sent`` is the monotonic time before its
        request."""
        super().__init__(client, grant, sent=sent)
        self._permits = grant.permits

    def __repr__(self) -> str:
        g = self.grant
        return (
            f"SemaphoreLease(semaphore={g.semaphore!r}, permits={self._permits}, owner={g.owner!r}, "
            f"fence={g.fence}, holds={self.holds}, lost={self.lost.is_set()})"
        )

    @property
    def semaphore(self) -> str:
        """The semaphore's name."""
        return self.grant.semaphore

    @property
    def permits(self) -> int:
        """The semaphore's size."""
        return self._permits

    @property
    def used(self) -> int:
        """Permits in use just after the latest grant, re-entry or renewal, this one included."""
        return self.grant.used

    def reenter(self, *, ttl_ms: int | None = None) -> SemaphoreGrant:
        """Take the permit once more with this lease (reentrant): one more hold of the same
        permit, same fence, TTL reset to ``ttl_ms`` (default: the gateway's). Retried as
        :meth:`Lease.reenter`; a 410 sets :attr:`lost` and raises :class:`LeaseGoneError`."""
        body: dict[str, Any] = {"owner": self.owner, "permits": self._permits}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        return self._reenter(body)

    def release(self) -> bool:
        """Give back one hold; return whether the permit is now free (``released``).

        Retried (same Idempotency-Key, so a lost answer never costs a second hold) on
        connection errors and 503s, up to 3 tries. A 410 (the lease is gone: it expired or was
        released) sets :attr:`lost` and raises :class:`LeaseGoneError`.
        """
        return self._release(None)

    def _parse_grant(self, d: Mapping[str, Any]) -> SemaphoreGrant:
        return SemaphoreGrant.from_json(d)

    def _mode_of(self, grant: SemaphoreGrant) -> Mode:
        return "shared"

    def _released_mode(self, d: Mapping[str, Any], asked: Mode | None) -> Mode:
        return "shared"

    def _observed_ttls(self, deadline: float) -> dict[Mode, int]:
        g = self.grant
        st = self._client._inspect_semaphore(g.semaphore, g.token, tries=1, deadline=deadline)
        if not st.yours:
            raise self._gone()
        ttl = _holder_ttl_ms(st.holders, st.holder_count, g.fence)
        return {} if ttl is None else {"shared": ttl}


class MultiLease(RenewableLease[MultiLockGrant]):
    """A held multi-lock (:meth:`Client.lock_all`): one lease holding every member, renewed,
    kept alive, watched and released together like a lock's :class:`Lease`. Safe to use from
    several threads.

    The fields (``id``, ``owner``, ``token``, ``mode``, ``ttl_ms``, ``watchdog``,
    ``expires_at``, ``members``) are read from the latest :class:`MultiLockGrant`. Pass each
    member's fence (``lease.fences[name]``) to what that lock protects. The group's token works on
    ``/multilocks`` only: the lock endpoints refuse it (400), and a member cannot be re-entered,
    renewed or released on its own. Multi-lock calls take no Idempotency-Key (see
    :meth:`release`).
    """

    kind: ClassVar[Kind] = "multilock"

    def __init__(self, client: Client, grant: MultiLockGrant, *, sent: float) -> None:
        """Made by :meth:`Client.lock_all`; ``sent`` is the monotonic time before its request."""
        super().__init__(client, grant, sent=sent, path=client._path(_MULTILOCKS + "/", grant.id))

    def __repr__(self) -> str:
        g = self.grant
        return (
            f"MultiLease(id={g.id!r}, locks={[m.lock for m in g.locks]!r}, mode={g.mode!r}, "
            f"owner={g.owner!r}, lost={self.lost.is_set()})"
        )

    @property
    def id(self) -> str:
        """The group's id: its resource is ``/multilocks/{id}``, and its members' holders show it
        as ``multilock``."""
        return self.grant.id

    @property
    def mode(self) -> Mode:
        """How the group holds every member."""
        return self.grant.mode

    @property
    def members(self) -> tuple[MultiLockMember, ...]:
        """Every member with its fence, in name order (whatever order they were asked in)."""
        return self.grant.locks

    @property
    def locks(self) -> tuple[str, ...]:
        """The members' names, in name order."""
        return tuple(m.lock for m in self.grant.locks)

    @property
    def fences(self) -> dict[str, int]:
        """Each member's fence by name (a new dict each time)."""
        return {m.lock: m.fence for m in self.grant.locks}

    def release(self) -> bool:
        """Give back every member (each goes to the first waiter in its own line); return True.

        Retried on connection errors and 503s, up to 3 tries; without an Idempotency-Key (which
        ``/multilocks`` does not take), a retry whose first attempt was applied but not answered
        gets 410. A 410 (a member ran out, or the group was released: ``locks`` lists the members
        no longer held, and the gateway freed the others) sets :attr:`lost` and raises
        :class:`LeaseGoneError`.
        """
        headers = {"Lease-Token": self.token}
        with self._release_in_flight():
            ans, _ = self._client._retrying("DELETE", self._url_path, None, headers, tries=_TRIES, deadline=None)
            if not ans.ok:
                err = ans.error()
                if isinstance(err, LeaseGoneError):
                    self._set_lost(f"release answered 410: {err.detail}")
                raise err
            with self._cond:
                self._released = True
                self._cond.notify_all()
        self._ended()
        return True

    def _watch_targets(self) -> list[_WatchTarget]:
        c = self._client
        return [_WatchTarget(c._path(_LOCKS, m.lock) + "/events", m.lock, None, m.fence) for m in self.grant.locks]

    def _renew(self, ttl_ms: int | None, *, tries: int, deadline: float | None) -> MultiLockGrant:
        body: dict[str, Any] = {} if ttl_ms is None else {"ttl_ms": ttl_ms}
        headers = {"Lease-Token": self.token}  # a renewal sets the TTL: safe to repeat unkeyed
        ans, sent = self._client._retrying(
            "POST", self._url_path + "/renew", body, headers, tries=tries, deadline=deadline
        )
        if not ans.ok:
            raise ans.error()
        new = ans.parse(MultiLockGrant.from_json)
        with self._cond:
            if sent >= self._applied_sent:
                self._applied_sent, self._grant = sent, new
                self._valid_until = sent + new.ttl_ms / 1000.0
            self._cond.notify_all()
        return new

    def _observe(self, deadline: float) -> None:
        """A watchdog group: inspect every member (the group's token is refused there, so by the
        group's id and the member's fence) and count from the one with the least TTL left."""
        sent = time.monotonic()
        g = self.grant
        least: int | None = None
        for m in g.locks:
            st = self._client._inspect(m.lock, None, tries=1, deadline=deadline)
            ttl: int | None = None
            if st.multilock == g.id and st.fence == m.fence:
                ttl = st.ttl_ms
            else:
                ttl = _holder_ttl_ms(st.holders, st.holder_count, m.fence)
            if ttl is None:
                raise LeaseGoneError(
                    type=LEASE_GONE,
                    title="Lease gone",
                    status=410,
                    detail=f"the multi-lock no longer holds {m.lock!r} (inspect)",
                    locks=[m.lock],
                )
            least = ttl if least is None else min(least, ttl)
        if least is None:
            return
        with self._cond:
            if sent >= self._applied_sent:
                self._applied_sent = sent
                self._valid_until = sent + least / 1000.0
            self._cond.notify_all()

    def _finish(self) -> None:
        with self._cond:
            if self._released:
                return
        try:
            self.release()
        except LeaseGoneError:
            pass


# ---------------------------------------------------------------------------------------------
# Elections

_ELECTION_EVENT_TYPES: Final = frozenset({"state", "elected", "proclaimed", "resigned", "vacant"})

#: The type of an :class:`ElectionEvent`.
ElectionEventType = Literal["state", "elected", "proclaimed", "resigned", "vacant"]


@dataclass(frozen=True)
class LeaderGrant:
    """A leader's lease as its campaign or latest renewal described it."""

    election: str
    owner: str
    token: str = field(repr=False)  # a bearer credential: kept out of reprs and logs
    fence: int
    ttl_ms: int
    expires_at: str
    watchdog: bool

    @property
    def name(self) -> str:
        """The election's name (``election``)."""
        return self.election

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> LeaderGrant:
        """Build a LeaderGrant from a campaign's or a renewal's answer."""
        return LeaderGrant(
            election=str(d["election"]),
            owner=str(d["owner"]),
            token=str(d["token"]),
            fence=int(d["fence"]),
            ttl_ms=int(d["ttl_ms"]),
            expires_at=str(d.get("expires_at", "")),
            watchdog=bool(d.get("watchdog", False)),
        )


@dataclass(frozen=True)
class ElectionLeader:
    """An election's leader, as ``GET /elections/{name}`` and a ``state`` event tell it."""

    owner: str
    value: str
    fence: int
    since: str
    ttl_ms: int
    event_id: str

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> ElectionLeader:
        return ElectionLeader(
            owner=str(d["owner"]),
            value=str(d["value"]),
            fence=int(d["fence"]),
            since=str(d.get("since", "")),
            ttl_ms=int(d.get("ttl_ms", 0)),
            event_id=str(d.get("event_id", "")),
        )


@dataclass(frozen=True)
class ElectionState:
    """``GET /elections/{name}``: the leader (if ``led``), the candidates waiting in line, and
    the id of the election's last event (``0-0`` for an empty log)."""

    election: str
    led: bool
    leader: ElectionLeader | None
    candidates: int
    last_event_id: str

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> ElectionState:
        leader = d.get("leader")
        return ElectionState(
            election=str(d["election"]),
            led=bool(d["led"]),
            leader=ElectionLeader.from_json(cast(Mapping[str, Any], leader)) if isinstance(leader, dict) else None,
            candidates=int(d.get("candidates", 0)),
            last_event_id=str(d["last_event_id"]),
        )


@dataclass(frozen=True)
class ElectionEvent:
    """One event of an election (:meth:`Client.observe`), told apart by ``type``:

    - ``state``: the election as it stands (``state``), first without ``last_event_id``, or
      with ``gap`` true when the events after it are no longer in the log;
    - ``elected`` and ``proclaimed``: ``owner``, ``value`` and ``fence`` of the leader elected
      (before its campaign was answered), or of its new value;
    - ``resigned`` and ``vacant``: ``owner`` and ``fence`` of the leader whose lead ended (it
      resigned; its lease ran out or was forced).

    ``id`` is the event's id in the election's log (a ``state``'s: the last event's), to give
    back as ``last_event_id``; ``at`` when it happened (Redis time, RFC 3339).
    """

    type: ElectionEventType
    id: str
    election: str
    at: str
    owner: str | None = None
    value: str | None = None
    fence: int | None = None
    state: ElectionState | None = None
    gap: bool = False

    @staticmethod
    def from_json(typ: str, id_: str, d: Mapping[str, Any]) -> ElectionEvent:
        if typ == "state":
            return ElectionEvent(
                type="state",
                id=id_,
                election=str(d.get("election", "")),
                at=str(d.get("at", "")),
                state=ElectionState.from_json(d),
                gap=d.get("gap") is True,
            )
        value = d.get("value")
        return ElectionEvent(
            type=cast(ElectionEventType, typ),
            id=id_,
            election=str(d.get("election", "")),
            at=str(d.get("at", "")),
            owner=_str_or_none(d.get("owner")),
            value=value if isinstance(value, str) else None,
            fence=_int_or_none(d.get("fence")),
        )


class Leadership(RenewableLease[LeaderGrant]):
    """The lead of an election, won by :meth:`Client.elect` or :meth:`Client.campaign`: a
    lease (``renew``, ``lost``, ``check``, ``watch``) that also proclaims values and resigns.
    ``fence`` grows with every leader: send it with what the leader writes. Safe to use from
    several threads.

    Watched (:meth:`watch`, which :meth:`Client.campaign` does), it follows the election's
    events, so that ``lost`` turns true within milliseconds of the lead's end announced by
    anyone else: ``vacant`` (a force release, an expiry), ``resigned`` with its token from
    elsewhere, or, after a gap, a renewal's 410.
    """

    kind: ClassVar[Kind] = "election"

    def __init__(self, client: Client, d: Mapping[str, Any], *, sent: float) -> None:
        """``d`` is the campaign's answer; ``sent`` the monotonic time before it was sent."""
        grant = LeaderGrant.from_json(d)
        super().__init__(client, grant, sent=sent, path=client._path(_ELECTIONS, grant.election))
        self._value = str(d["value"])
        self._event_id = str(d.get("event_id", ""))
        #: When this leader was announced (Redis time, RFC 3339).
        self.since = str(d.get("since", ""))

    @property
    def fence(self) -> int:
        """The lead's fence: greater than every earlier leader's of this election."""
        return self.grant.fence

    @property
    def value(self) -> str:
        """The value last announced: the campaign's, then each :meth:`proclaim`'s."""
        with self._cond:
            return self._value

    @property
    def event_id(self) -> str:
        """The id of the lead's latest event in the election's log (``elected``, ``proclaimed``)."""
        with self._cond:
            return self._event_id

    def proclaim(self, value: str) -> dict[str, Any]:
        """Announce ``value`` as the leader's (``PUT /elections/{name}``): a ``proclaimed``
        event, unless it is the value already announced. Returns the answer (``value``,
        ``fence``, ``event_id``, ...). Retried (same Idempotency-Key) on connection errors and
        503s, up to 3 tries. A 410 sets :attr:`lost` and raises :class:`LeaseGoneError`."""
        headers = {"Lease-Token": self.token, "Idempotency-Key": _new_key()}
        ans, _ = self._client._retrying("PUT", self._url_path, {"value": value}, headers, tries=_TRIES, deadline=None)
        if not ans.ok:
            err = ans.error()
            if isinstance(err, LeaseGoneError):
                self._set_lost(f"proclaim answered 410: {err.detail}")
            raise err
        d = ans.json()
        with self._cond:
            self._value = str(d.get("value", value))
            self._event_id = str(d.get("event_id", self._event_id))
        return d

    def resign(self) -> dict[str, Any]:
        """Give up the lead (``DELETE /elections/{name}``): the first candidate in line is
        elected at once. Closes the events stream first; does not set :attr:`lost` (the lead
        counts as released: :meth:`check` raises). Returns the answer (``resigned``, ``fence``,
        ``event_id``). Retried on connection errors and 503s, up to 3 tries. A 410 sets
        :attr:`lost` and raises :class:`LeaseGoneError`."""
        with self._cond:
            self._released = True
            self._cond.notify_all()
        self.stop_watching()
        headers = {"Lease-Token": self.token, "Idempotency-Key": _new_key()}
        ans, _ = self._client._retrying("DELETE", self._url_path, None, headers, tries=_TRIES, deadline=None)
        if not ans.ok:
            err = ans.error()
            if isinstance(err, LeaseGoneError):
                with self._cond:
                    self._released = False
                self._set_lost(f"resignation answered 410: {err.detail}")
            raise err
        return ans.json()

    def _renew(self, ttl_ms: int | None, *, tries: int, deadline: float | None) -> LeaderGrant:
        body: dict[str, Any] = {} if ttl_ms is None else {"ttl_ms": ttl_ms}
        headers = {"Lease-Token": self.token, "Idempotency-Key": _new_key()}
        ans, sent = self._client._retrying("POST", self._url_path + "/renew", body, headers, tries=tries, deadline=deadline)
        if not ans.ok:
            raise ans.error()
        new = ans.parse(LeaderGrant.from_json)
        with self._cond:
            if sent >= self._applied_sent:
                self._applied_sent, self._grant = sent, new
                self._valid_until = sent + new.ttl_ms / 1000.0
            self._cond.notify_all()
        return new

    def _observe(self, deadline: float) -> None:
        """Check a watchdog lead: not leading with this fence -> LeaseGoneError."""
        sent = time.monotonic()
        st = self._client._state(self._url_path, None, ElectionState.from_json, tries=1, deadline=deadline)
        if not st.led or st.leader is None or st.leader.fence != self.fence:
            raise LeaseGoneError(
                title="Lease gone", status=410, type=LEASE_GONE,
                detail=f"election {self.name!r} is not led with fence {self.fence}",
            )
        with self._cond:
            self._valid_until = max(self._valid_until, sent + st.leader.ttl_ms / 1000.0)
            self._cond.notify_all()

    def _finish(self) -> None:
        """Resign unless the block did (a 410 is fine: the lead is gone either way)."""
        with self._cond:
            if self._released:
                return
        with contextlib.suppress(LeaseGoneError):
            self.resign()

    def _watch_targets(self) -> list[_WatchTarget]:
        return [_WatchTarget(path=self._url_path + "/events", name=self.name, token=None, fence=self.fence, election=True)]
