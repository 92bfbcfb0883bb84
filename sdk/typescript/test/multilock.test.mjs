// End-to-end tests of the TypeScript SDK's multi-locks (`lockAll()`, `MultiLockLease`) against a
// live gateway at $LEASEGATE_URL (tests/sdks/typescript_sdk_test.go starts one on its own
// redis-server and runs `npm test`, which runs every test/*.test.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  LeaseGoneError,
  LeaseLostError,
  LeasegateProblemError,
  LockHeldError,
  MultiLockLease,
  ProblemType,
  createLeasegateClient,
  inspectLock,
  lock,
  lockAll,
  toLeasegateError,
} from "../dist/index.js";

const baseUrl = process.env.LEASEGATE_URL ?? "";
if (!baseUrl) {
  throw new Error(
    "LEASEGATE_URL is not set: these tests need a running gateway, e.g. " +
      "LEASEGATE_URL=http://127.0.0.1:8080 npm test (tests/sdks/typescript_sdk_test.go sets it)",
  );
}

const client = createLeasegateClient(baseUrl);
const TEST_TIMEOUT = 30_000;
const run = `tsm-${process.pid}-${Date.now().toString(36)}`;
/** Lock names of a test's own: `namer(test)(member)` is `${run}.${test}.${member}` (a test's names sort by member). */
const namer = (test) => (member) => `${run}.${test}.${member}`;

const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls fn every 25 ms until it returns a truthy value, which it returns; fails after timeoutMs. */
async function eventually(what, timeoutMs, fn) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await delay(25);
  }
}

/** Resolves with what p rejects with; fails when it resolves. */
async function rejection(p, what) {
  return p.then(
    () => assert.fail(`${what}: succeeded`),
    (e) => e,
  );
}

/** Whether `name` is held exclusively by the multi-lock `group`, with the member's fence. */
async function heldBy(name, group) {
  const state = await inspectLock(client, name);
  return state.held && state.mode === "exclusive" && state.multilock === group.id && state.fence === group.fenceOf(name);
}

/** Fails unless none of `names` is held. */
async function assertFree(names, why) {
  for (const name of names) assert.equal((await inspectLock(client, name)).held, false, `${name}: ${why}`);
}

/**
 * A client that records every request (method, path, Idempotency-Key, body) and answers the next
 * ones from `faults` instead of the gateway: a `Response`, or an error to throw.
 */
function recordingClient() {
  const sent = [];
  const faults = [];
  const c = createLeasegateClient(baseUrl, {
    fetch: async (req) => {
      const text = req.method === "POST" ? await req.clone().text() : "";
      sent.push({
        method: req.method,
        path: new URL(req.url).pathname,
        key: req.headers.get("Idempotency-Key"),
        body: text ? JSON.parse(text) : undefined,
      });
      const fault = faults.shift();
      if (fault instanceof Response) return fault;
      if (fault !== undefined) throw fault;
      return fetch(req);
    },
  });
  return { client: c, sent, faults };
}

function unavailable() {
  const problem = { type: ProblemType.BackendUnavailable, title: "Backend unavailable", status: 503, detail: "test" };
  return new Response(JSON.stringify(problem), {
    status: 503,
    headers: { "Content-Type": "application/problem+json", "Retry-After": "1" },
  });
}

const TOKEN_RE = /^[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]+={0,2}$/;
const ID_RE = /^m-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test("lockAll grants every member to one lease, each held with the group's id as multilock", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("grant");
  const a = name("a"), b = name("b"), c = name("c");

  // The generated client as is: 201, Location, one token, a fence per member in name order.
  const { data, error, response } = await client.POST("/multilocks", {
    body: { owner: "transfer-1", locks: [b, a], ttl_ms: 30_000 },
  });
  assert.equal(error, undefined, JSON.stringify(error));
  assert.equal(response.status, 201);
  assert.match(data.id, ID_RE);
  assert.equal(response.headers.get("Location"), `/multilocks/${data.id}`);
  assert.equal(data.owner, "transfer-1");
  assert.match(data.token, TOKEN_RE);
  assert.equal(data.mode, "exclusive");
  assert.equal(data.ttl_ms, 30_000);
  assert.equal(data.watchdog, false);
  assert.ok(Date.parse(data.expires_at) > Date.now(), `expires_at ${data.expires_at}`);
  assert.deepEqual(
    data.locks.map((m) => m.lock),
    [a, b],
  );
  for (const m of data.locks) assert.ok(Number.isSafeInteger(m.fence) && m.fence > 0, `fence ${m.fence}`);
  const { data: rel, error: relErr } = await client.DELETE("/multilocks/{id}", {
    params: { path: { id: data.id }, header: { "Lease-Token": data.token } },
  });
  assert.equal(relErr, undefined, JSON.stringify(relErr));
  assert.deepEqual(rel, { id: data.id, released: true, locks: [a, b] });

  // The convenience layer, names in any order.
  const group = await lockAll(client, [c, a, b], { owner: "transfer-2", ttlMs: 30_000 });
  assert.ok(group instanceof MultiLockLease);
  assert.match(group.id, ID_RE);
  assert.notEqual(group.id, data.id);
  assert.equal(group.owner, "transfer-2");
  assert.equal(group.mode, "exclusive");
  assert.equal(group.ttlMs, 30_000);
  assert.equal(group.watchdog, false);
  assert.deepEqual(group.locks, [a, b, c]);
  assert.deepEqual(
    group.members.map((m) => m.lock),
    [a, b, c],
  );
  const [firstA, firstB] = data.locks;
  assert.ok(firstA && firstB);
  assert.ok((group.fenceOf(a) ?? 0) > firstA.fence, "a new grant of a member gets a greater fence");
  assert.ok((group.fenceOf(b) ?? 0) > firstB.fence);
  assert.equal(group.fenceOf(`${run}.not-a-member`), undefined);
  assert.ok(group.remainingMs > 0 && group.remainingMs <= 30_000, `remainingMs ${group.remainingMs}`);
  for (const name of [a, b, c]) {
    const state = await inspectLock(client, name);
    assert.equal(state.held, true, name);
    assert.equal(state.mode, "exclusive");
    assert.equal(state.owner, "transfer-2");
    assert.equal(state.fence, group.fenceOf(name));
    assert.equal(state.multilock, group.id, `${name} names its group`);
  }

  // A member is an ordinary lock to everyone else.
  const held = await rejection(lock(client, b, { owner: "someone-else" }), "a member taken alone");
  assert.ok(held instanceof LockHeldError, `got ${held}`);

  assert.deepEqual(await group.release(), { id: group.id, released: true, locks: [a, b, c] });
  assert.equal(group.signal.aborted, false, "a release does not abort the signal");
  await assertFree([a, b, c], "released with the group");
});

test("a group's token and a lock's are not interchangeable (400); /multilocks takes no Idempotency-Key", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("tokens");
  const a = name("a"), b = name("b"), single = name("single");
  const group = await lockAll(client, [a, b], { owner: "owner-a", ttlMs: 30_000 });
  const l = await lock(client, single, { owner: "owner-a", ttlMs: 30_000 });
  const refused = (answer, what, type = ProblemType.InvalidLeaseToken) => {
    const err = toLeasegateError(answer.error, answer.response);
    assert.equal(err.status, 400, `${what}: ${err.message}`);
    assert.equal(err.type, type, what);
  };
  const withToken = (token) => ({ path: { name: a }, header: { "Lease-Token": token } });
  refused(await client.POST("/locks/{name}/renew", { params: withToken(group.token) }), "lock renewal with the group's token");
  refused(await client.DELETE("/locks/{name}", { params: withToken(group.token) }), "lock release with the group's token");
  refused(
    await client.POST("/multilocks/{id}/renew", { params: { path: { id: group.id }, header: { "Lease-Token": l.token } } }),
    "group renewal with a lock's token",
  );
  refused(
    await client.DELETE("/multilocks/{id}", { params: { path: { id: group.id }, header: { "Lease-Token": l.token } } }),
    "group release with a lock's token",
  );
  const keyed = await fetch(`${baseUrl}/multilocks`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": globalThis.crypto.randomUUID() },
    body: JSON.stringify({ owner: "owner-b", locks: [name("c"), name("d")] }),
  });
  assert.equal(keyed.status, 400, "an Idempotency-Key on /multilocks");
  await keyed.body?.cancel();

  // Neither lease was touched.
  assert.equal(await heldBy(a, group), true);
  assert.equal((await l.inspect()).yours, true);
  assert.equal(group.signal.aborted || l.signal.aborted, false);
  await group.release();
  await l.release();
  await assertFree([a, b, single, name("c"), name("d")], "nothing left held");
});

test("a held member: 409 LockHeldError lists the held members, and the group takes none", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("conflict");
  const a = name("a"), b = name("b"), c = name("c"), d = name("d");
  const holderB = await lock(client, b, { owner: "holder-b", ttlMs: 20_000 });
  const holderD = await lock(client, d, { owner: "holder-d", ttlMs: 25_000 });
  try {
    const err = await rejection(lockAll(client, [d, c, b, a], { owner: "group" }), "a group with held members");
    assert.ok(err instanceof LockHeldError, `got ${err}`);
    assert.ok(err instanceof LeasegateProblemError);
    assert.equal(err.status, 409);
    assert.equal(err.type, ProblemType.LockHeld);
    assert.deepEqual([...(err.locks ?? [])].sort(), [b, d]);
    assert.deepEqual(err.problem.locks, err.locks);
    assert.ok(err.retryAfterMs > 20_000 && err.retryAfterMs <= 25_000, `retryAfterMs ${err.retryAfterMs}: the longest wait`);
    assert.equal(err.waitedMs, undefined);
    assert.equal(err.queueTicket, undefined, "a try-once group gets no queue ticket");
    await assertFree([a, c], "all or nothing");

    // A bounded wait that runs out: 409 after waiting, and what it had taken meanwhile is given back.
    const waited = await rejection(lockAll(client, [a, b, c, d], { owner: "group", waitMs: 300 }), "a waiting group");
    assert.ok(waited instanceof LockHeldError, `got ${waited}`);
    assert.ok((waited.waitedMs ?? 0) >= 250, `waitedMs ${waited.waitedMs}`);
    assert.ok((waited.locks ?? []).length > 0, `locks ${JSON.stringify(waited.locks)}`);
    assert.equal(typeof waited.queueTicket, "string", "a wait that ran out in b's line keeps the group's place");
    await eventually("the waiting group to give back what it took", 5_000, async () => {
      const states = await Promise.all([a, c].map((n) => inspectLock(client, n)));
      return states.every((s) => !s.held && s.waiters === 0);
    });
    assert.equal((await inspectLock(client, b)).waiters, 0, "the group left b's line");
  } finally {
    await holderB.release();
    await holderD.release();
  }
});

test("an overlapping group waits across long-polls, then gets every member once the first releases", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("overlap");
  const a = name("a"), b = name("b"), c = name("c");
  const first = await lockAll(client, [a, b], { owner: "first", ttlMs: 30_000 });
  const rec = recordingClient();
  // 300 ms long-polls: the wait goes on across several, each presenting the group's queue ticket.
  const waiting = lockAll(rec.client, [c, b], { owner: "second", ttlMs: 30_000, waitMs: 20_000, maxWaitPerRequestMs: 300 });
  let settled = false;
  waiting.then(
    () => (settled = true),
    () => (settled = true),
  );
  await eventually("the second group in b's line", 10_000, async () => (await inspectLock(client, b)).waiters === 1);
  await eventually("three long-polls", 10_000, async () => rec.sent.length >= 3);
  assert.equal(settled, false, "the second group was answered while the first held b");
  assert.equal(await heldBy(a, first), true);

  assert.equal((await first.release()).released, true);
  const second = await waiting;
  assert.deepEqual(second.locks, [b, c]);
  assert.ok((second.fenceOf(b) ?? 0) > (first.fenceOf(b) ?? Infinity), `fence ${second.fenceOf(b)} after ${first.fenceOf(b)}`);
  assert.equal(await heldBy(b, second), true);
  assert.equal(await heldBy(c, second), true);
  assert.equal((await inspectLock(client, a)).held, false);

  const polls = rec.sent.filter((r) => r.path === "/multilocks");
  assert.equal(polls.length, rec.sent.length);
  assert.ok(polls.length >= 3, `${polls.length} long-polls`);
  for (const [i, p] of polls.entries()) {
    assert.equal(p.key, null, "no Idempotency-Key on /multilocks");
    if (i === 0) assert.equal(p.body.queue_ticket, undefined, "the first long-poll has no ticket");
    else assert.equal(typeof p.body.queue_ticket, "string", `long-poll ${i} keeps the group's place with the ticket of the one before`);
    assert.deepEqual(p.body.locks, [c, b]);
    assert.ok(p.body.wait_ms >= 1 && p.body.wait_ms <= 300, `wait_ms ${p.body.wait_ms}`);
  }
  await second.release();
  await assertFree([a, b, c], "both groups released");
});

test("keepAlive keeps a 900 ms group held past its TTL; release frees every member", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("keepalive");
  const a = name("a"), b = name("b");
  const group = await lockAll(client, [a, b], { owner: "worker", ttlMs: 900 });
  const renewals = [];
  const errors = [];
  group.keepAlive({ onRenew: (g) => renewals.push(g), onRenewError: (e) => errors.push(e) });
  assert.equal(group.keepingAlive, true);
  const granted = performance.now();
  await eventually("2.5 s of continuous holding", 10_000, async () => {
    const at = Math.round(performance.now() - granted);
    for (const name of [a, b]) {
      assert.equal(await heldBy(name, group), true, `${name} lost after ${at} ms (errors ${errors.join("; ")})`);
    }
    assert.equal(group.signal.aborted, false, `signal aborted after ${at} ms: ${group.signal.reason}`);
    assert.ok(group.remainingMs > 0, `remainingMs ${group.remainingMs} after ${at} ms`);
    return performance.now() - granted >= 2_500;
  });
  assert.ok(renewals.length >= 5, `only ${renewals.length} renewals`);
  for (const g of renewals) {
    assert.equal(g.id, group.id);
    assert.equal(g.ttl_ms, 900);
    assert.deepEqual(g.locks, group.members, "same members, same fences");
  }

  // A renewal by hand, with another TTL. Keep-alive stops first: it renews with the TTL it started
  // with (900 ms), and one of its renewals landing after this one set the members back to 900 ms
  // on a busy machine.
  group.stopKeepAlive();
  const before = group.expiresAt.getTime();
  const renewed = await group.renew(20_000);
  assert.equal(renewed.ttl_ms, 20_000);
  assert.equal(group.ttlMs, 20_000);
  assert.ok(group.expiresAt.getTime() > before + 15_000, `expires_at ${renewed.expires_at}`);
  assert.ok(group.remainingMs > 15_000, `remainingMs ${group.remainingMs}`);
  assert.ok(((await inspectLock(client, b)).ttl_ms ?? 0) > 15_000, "every member renewed");

  assert.deepEqual(await group.release(), { id: group.id, released: true, locks: [a, b] });
  assert.equal(group.keepingAlive, false);
  assert.equal(group.signal.aborted, false, "a release does not abort the signal");
  await assertFree([a, b], "released");
});

test("a group released behind its back: keep-alive gets 410 and signal aborts with LeaseLostError", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("gone");
  const a = name("a"), b = name("b");
  const group = await lockAll(client, [a, b], { owner: "victim", ttlMs: 900 });
  let renewals = 0;
  group.keepAlive({ onRenew: () => renewals++ });
  await eventually("a first renewal", 5_000, async () => renewals >= 1);

  // Another client gives the group back with its token (at DELETE /multilocks, the token naming it).
  const { data, error } = await createLeasegateClient(baseUrl).DELETE("/multilocks", {
    params: { header: { "Lease-Token": group.token } },
  });
  assert.equal(error, undefined, JSON.stringify(error));
  assert.deepEqual(data, { id: group.id, released: true, locks: [a, b] });

  await eventually("group.signal to abort", 5_000, async () => group.signal.aborted);
  const reason = group.signal.reason;
  assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
  assert.equal(reason.kind, "gone");
  assert.equal(reason.multilock, group.id);
  assert.deepEqual(reason.locks, [a, b]);
  assert.equal(reason.lock, undefined);
  assert.equal(reason.semaphore, undefined);
  assert.ok(reason.message.includes(`multilock "${group.id}"`), reason.message);
  assert.ok(reason.cause instanceof LeaseGoneError, `cause ${reason.cause}`);
  assert.deepEqual([...(reason.cause.locks ?? [])].sort(), [a, b], "the 410 lists the members no longer held");
  assert.equal(group.keepingAlive, false);
  assert.throws(() => group.keepAlive(), (e) => e === reason);

  const gone = await rejection(group.release(), "releasing a released group");
  assert.ok(gone instanceof LeaseGoneError, `got ${gone}`);
  assert.equal(gone.status, 410);
  assert.deepEqual([...(gone.locks ?? [])].sort(), [a, b]);
  await assertFree([a, b], "released behind its back");
});

test("a member force-released: a kept-alive group learns at once from the member's events stream", { timeout: TEST_TIMEOUT }, async (t) => {
  const name = namer("forced");
  const a = name("a"), b = name("b");
  const group = await lockAll(client, [a, b], { owner: "victim", ttlMs: 30_000 });
  group.keepAlive();
  await eventually("both members' streams to open", 5_000, async () => group.watching);
  const lost = new Promise((resolve) => group.onLost((error) => resolve({ error, at: performance.now() })));
  const sent = performance.now();
  const { error } = await client.DELETE("/locks/{name}", { params: { path: { name: b }, query: { force: true } } });
  const answered = performance.now();
  assert.equal(error, undefined, JSON.stringify(error));
  const { error: reason, at } = await lost;
  const took = Math.max(at - answered, 0);
  t.diagnostic(`multi-lock: onLost fired ${took.toFixed(1)} ms after a member's force release's answer (${(at - sent).toFixed(1)} ms after the request)`);
  assert.ok(took < 100, `onLost fired ${Math.round(took)} ms after the force release's answer (100 ms at most)`);
  assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
  assert.equal(reason.kind, "forced");
  assert.equal(reason.multilock, group.id);
  assert.ok(reason.message.includes(`member "${b}"`), reason.message);
  assert.equal(group.watching, false);
  // The group is gone: its release answers 410 and frees the other member.
  const gone = await rejection(group.release(), "releasing a group that lost a member");
  assert.ok(gone instanceof LeaseGoneError, `got ${gone}`);
  await assertFree([a], "freed by the group's release");
});

test("a member that ran out: renew answers 410 listing it, and frees the others", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("expired");
  const a = name("a"), b = name("b");
  const group = await lockAll(client, [a, b], { owner: "slow", ttlMs: 200 });
  await eventually("the members to expire", 10_000, async () => !(await inspectLock(client, a)).held);
  const gone = await rejection(group.renew(), "renewing an expired group");
  assert.ok(gone instanceof LeaseGoneError, `got ${gone}`);
  assert.ok((gone.locks ?? []).includes(a), `locks ${JSON.stringify(gone.locks)}`);
  assert.ok(group.signal.aborted);
  assert.equal(group.signal.reason.kind, "gone");
  await assertFree([a, b], "nothing resurrected");
});

test("shared groups hold their members together; an exclusive request is refused", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("shared");
  const a = name("a"), b = name("b"), c = name("c");
  const g1 = await lockAll(client, [a, b], { owner: "reader-1", mode: "shared", ttlMs: 30_000 });
  const g2 = await lockAll(client, [b, c], { owner: "reader-2", mode: "shared", ttlMs: 30_000 });
  assert.equal(g1.mode, "shared");
  assert.equal(g2.grant.mode, "shared");
  const state = await inspectLock(client, b);
  assert.equal(state.mode, "shared");
  assert.equal(state.holder_count, 2);
  assert.deepEqual((state.holders ?? []).map((h) => h.multilock).sort(), [g1.id, g2.id].sort());
  for (const h of state.holders ?? []) {
    const group = h.multilock === g1.id ? g1 : g2;
    assert.equal(h.fence, group.fenceOf(b));
  }
  const writer = await rejection(lockAll(client, [a, c], { owner: "writer" }), "an exclusive group over shared members");
  assert.ok(writer instanceof LockHeldError, `got ${writer}`);
  assert.deepEqual([...(writer.locks ?? [])].sort(), [a, c]);
  await g1.release();
  await g2.release();
  await assertFree([a, b, c], "both released");
});

test("a 503 is retried within the wait; a network error is retried only when nothing was sent", { timeout: TEST_TIMEOUT }, async () => {
  const name = namer("retries");
  const a = name("a"), b = name("b");
  const rec = recordingClient();

  rec.faults.push(unavailable());
  const waited = await lockAll(rec.client, [a, b], { owner: "retrier", waitMs: 5_000 });
  assert.equal(rec.sent.length, 2, "the 503, then the grant");
  assert.ok(rec.sent.every((r) => r.key === null));
  await waited.release();

  // A try-once acquire: up to 3 tries on 503s.
  rec.sent.length = 0;
  rec.faults.push(unavailable(), unavailable(), unavailable());
  const err = await rejection(lockAll(rec.client, [a, b], { owner: "retrier" }), "three 503s");
  assert.ok(err instanceof LeasegateProblemError, `got ${err}`);
  assert.equal(err.status, 503);
  assert.equal(rec.sent.length, 3);

  // Refused connection: the request never left, so it is sent again.
  rec.sent.length = 0;
  rec.faults.push(new TypeError("fetch failed", { cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }) }));
  const again = await lockAll(rec.client, [a, b], { owner: "retrier" });
  assert.equal(rec.sent.length, 2);
  await again.release();

  // Any other network error may have been granted: not sent again.
  rec.sent.length = 0;
  const lost = new TypeError("fetch failed (test: connection reset)");
  rec.faults.push(lost);
  assert.equal(await rejection(lockAll(rec.client, [a, b], { owner: "retrier" }), "a lost answer"), lost);
  assert.equal(rec.sent.length, 1);
  await assertFree([a, b], "nothing was sent that could be granted");
});
