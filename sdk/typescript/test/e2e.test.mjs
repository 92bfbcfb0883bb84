// End-to-end tests of the TypeScript SDK against a live gateway at $LEASEGATE_URL
// (tests/sdks/typescript_sdk_test.go starts one on its own redis-server and runs `npm test`).
// Every call goes through the generated client or the SDK's convenience layer.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import http from "node:http";
import { test } from "node:test";

import {
  HeldError,
  LeaseGoneError,
  LeaseLostError,
  LeasegateProblemError,
  LockHeldError,
  PermitsMismatchError,
  ProblemType,
  SemaphoreFullError,
  UpgradeRefusedError,
  acquireSemaphore,
  createLeasegateClient,
  inspectLock,
  inspectSemaphore,
  lock,
  safetyMarginMs,
  toLeasegateError,
} from "../dist/index.js";

const baseUrl = process.env.LEASEGATE_URL;
if (!baseUrl) {
  throw new Error(
    "LEASEGATE_URL is not set: these tests need a running gateway, e.g. " +
      "LEASEGATE_URL=http://127.0.0.1:8080 npm test (tests/sdks/typescript_sdk_test.go sets it)",
  );
}

const client = createLeasegateClient(baseUrl);
const TEST_TIMEOUT = 30_000;
const run = `ts-${process.pid}-${Date.now().toString(36)}`;
/** A lock name of its own for each test. */
const lockName = (suffix) => `${run}.${suffix}`;

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

/** GET /locks/{name} through the generated client, optionally with a Lease-Token. */
async function inspect(name, token) {
  const { data, error, response } = await client.GET("/locks/{name}", {
    params: { path: { name }, header: token === undefined ? {} : { "Lease-Token": token } },
  });
  assert.equal(error, undefined, `inspect ${name}: ${JSON.stringify(error)}`);
  assert.equal(response.status, 200);
  return data;
}

const TOKEN_RE = /^[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]+={0,2}$/;

test("acquire grants a new lease with a fence and a token (201)", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("acquire");
  // The generated client as is: typed body, status and headers.
  const { data, error, response } = await client.POST("/locks/{name}", {
    params: { path: { name } },
    body: { owner: "worker-a", ttl_ms: 30_000 },
  });
  assert.equal(error, undefined);
  assert.equal(response.status, 201);
  assert.equal(response.headers.get("Location"), `/locks/${name}`);
  assert.ok(response.headers.get("X-Request-Id"));
  assert.equal(data.lock, name);
  assert.equal(data.owner, "worker-a");
  assert.match(data.token, TOKEN_RE);
  assert.ok(Number.isSafeInteger(data.fence) && data.fence > 0, `fence ${data.fence}`);
  assert.equal(data.holds, 1);
  assert.equal(data.ttl_ms, 30_000);
  assert.equal(data.watchdog, false);
  assert.equal(data.mode, "exclusive");
  assert.ok(Date.parse(data.expires_at) > Date.now(), `expires_at ${data.expires_at}`);

  const { data: rel, error: relErr } = await client.DELETE("/locks/{name}", {
    params: { path: { name }, header: { "Lease-Token": data.token } },
  });
  assert.equal(relErr, undefined);
  assert.deepEqual(rel, { lock: name, released: true, holds: 0, mode: "exclusive" });

  // The convenience layer: a new grant of the same name gets a greater fence.
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 30_000 });
  assert.equal(lease.created, true);
  assert.equal(lease.name, name);
  assert.equal(lease.owner, "worker-a");
  assert.match(lease.token, TOKEN_RE);
  assert.ok(lease.fence > data.fence, `fence ${lease.fence} after ${data.fence}`);
  assert.equal(lease.holds, 1);
  assert.equal(lease.mode, "exclusive");
  const state = await inspect(name, lease.token);
  assert.equal(state.held, true);
  assert.equal(state.mode, "exclusive");
  assert.equal(state.owner, "worker-a");
  assert.equal(state.fence, lease.fence);
  assert.equal(state.yours, true);
  assert.deepEqual(await lease.release(), { lock: name, released: true, holds: 0, mode: "exclusive" });
  assert.equal(lease.holds, 0);
});

test("a second owner gets 409 LockHeldError with retryAfterMs", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("contention");
  const a = await lock(client, name, { owner: "worker-a", ttlMs: 20_000 });
  try {
    const err = await lock(client, name, { owner: "worker-b" }).then(
      () => assert.fail("second owner was granted a held lock"),
      (e) => e,
    );
    assert.ok(err instanceof LockHeldError, `got ${err}`);
    assert.ok(err instanceof LeasegateProblemError);
    assert.equal(err.status, 409);
    assert.equal(err.type, ProblemType.LockHeld);
    assert.ok(err.detail.length > 0);
    assert.ok(err.requestId);
    assert.ok(err.retryAfterMs > 0 && err.retryAfterMs <= 20_000, `retryAfterMs ${err.retryAfterMs}`);
    assert.equal(err.waitedMs, undefined);
    assert.equal(err.problem.lock, name);

    // A bounded wait that runs out: 409 after waiting, with waitedMs.
    const waited = await lock(client, name, { owner: "worker-b", waitMs: 300 }).then(
      () => assert.fail("waiter was granted a held lock"),
      (e) => e,
    );
    assert.ok(waited instanceof LockHeldError, `got ${waited}`);
    assert.ok((waited.waitedMs ?? 0) >= 250, `waitedMs ${waited.waitedMs}`);
    assert.ok(waited.retryAfterMs > 0);
  } finally {
    await a.release();
  }
  assert.equal((await inspect(name)).held, false);
});

test("a long-poll waiter is handed the lock when the holder releases", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("wait");
  const other = createLeasegateClient(baseUrl); // a second, independent client
  const a = await lock(client, name, { owner: "worker-a", ttlMs: 30_000 });
  const waiting = lock(other, name, { owner: "worker-b", ttlMs: 30_000, waitMs: 20_000 });
  let settled = false;
  waiting.then(
    () => (settled = true),
    () => (settled = true),
  );
  await eventually("the waiter to queue", 10_000, async () => (await inspect(name)).waiters === 1);
  assert.equal(settled, false, "the waiter answered before the holder released");

  assert.equal((await a.release()).released, true);
  const b = await waiting;
  assert.equal(b.created, true);
  assert.equal(b.owner, "worker-b");
  assert.ok(b.fence > a.fence, `fence ${b.fence} after ${a.fence}`);
  assert.notEqual(b.token, a.token);
  const state = await inspect(name, b.token);
  assert.equal(state.held, true);
  assert.equal(state.owner, "worker-b");
  assert.equal(state.waiters, 0);
  assert.equal(state.yours, true);
  assert.equal((await b.release()).released, true);
});

test("a wait split into short long-polls keeps its place ahead of newcomers", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("patient");
  const a = await lock(client, name, { owner: "holder", ttlMs: 30_000 });
  let polls = 0; // the patient waiter's long-polls sent so far
  const patientClient = createLeasegateClient(baseUrl, {
    fetch: async (req) => {
      if (req.method === "POST") polls++;
      return fetch(req);
    },
  });
  const patient = lock(patientClient, name, { owner: "patient", ttlMs: 30_000, waitMs: 20_000, maxWaitPerRequestMs: 200 });
  await eventually("the patient waiter to queue", 10_000, async () => (await inspect(name)).waiters === 1);
  const newcomers = [];
  for (let i = 0; i < 5; i++) {
    newcomers.push(lock(createLeasegateClient(baseUrl), name, { owner: `newcomer-${i}`, ttlMs: 30_000, waitMs: 20_000 }));
  }
  await eventually("the newcomers to queue", 10_000, async () => (await inspect(name)).waiters >= 5);
  // Three of the patient waiter's 200 ms polls run out and resume behind the newcomers' arrival;
  // release right after the next one is back in line, well within its 200 ms.
  const since = polls;
  await eventually("three more polls", 10_000, async () => polls >= since + 3);
  const before = polls;
  await eventually("a new poll", 10_000, async () => polls > before);
  await eventually("that poll in line", 10_000, async () => (await inspect(name)).waiters === 6);
  await a.release();
  const p = await patient;
  assert.equal(p.owner, "patient", "the patient waiter kept its place across its long-polls");
  await p.release();
  // Each newcomer releases as soon as it is granted, so the line drains in whatever order it has.
  await Promise.all(newcomers.map(async (n) => (await n).release()));
});

test("a lease granted after a wait longer than its TTL counts from the grant", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("waited");
  await lock(client, name, { owner: "holder", ttlMs: 1_500 }); // expires in 1.5 s
  const lease = await lock(client, name, { owner: "worker", ttlMs: 1_000, waitMs: 10_000 });
  assert.ok(lease.validUntil - performance.now() > 500, `validUntil ${lease.validUntil - performance.now()} ms ahead`);
  await lease.release();
});

test("renew extends the lease (new expires_at, same fence)", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("renew");
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 5_000 });
  const before = lease.expiresAt;
  const renewed = await lease.renew(60_000);
  assert.equal(renewed.ttl_ms, 60_000);
  assert.equal(renewed.fence, lease.fence);
  assert.equal(renewed.token, lease.token);
  assert.equal(renewed.holds, 1);
  assert.ok(lease.expiresAt.getTime() > before.getTime() + 50_000, `${lease.expiresAt.toISOString()} vs ${before.toISOString()}`);
  assert.equal(lease.ttlMs, 60_000);
  const state = await inspect(name);
  assert.ok((state.ttl_ms ?? 0) > 50_000, `remaining ttl ${state.ttl_ms}`);

  // Without a TTL the lease keeps its current one.
  const again = await lease.renew();
  assert.equal(again.ttl_ms, 60_000);
  assert.ok(Date.parse(again.expires_at) >= Date.parse(renewed.expires_at));
  assert.equal((await lease.release()).released, true);
});

test("a watchdog lease outlives its TTL until released", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("watchdog");
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 1_000, watchdog: true, maxHoldMs: 60_000 });
  const granted = Date.now();
  assert.equal(lease.watchdog, true);
  assert.equal(lease.ttlMs, 1_000);
  // Watch the lock continuously for 2.5 s (2.5 TTLs): it must stay held by this lease.
  let polls = 0;
  await eventually("2.5 s of continuous holding", 10_000, async () => {
    const state = await inspect(name, lease.token);
    polls++;
    assert.equal(state.held, true, `lost after ${Date.now() - granted} ms`);
    assert.equal(state.yours, true);
    assert.equal(state.fence, lease.fence);
    assert.equal(state.watchdog, true);
    const holdLeft = state.max_hold_ms ?? 0;
    assert.ok(holdLeft > 0 && holdLeft <= 60_000, `max_hold_ms ${state.max_hold_ms}`);
    return Date.now() - granted >= 2_500;
  });
  assert.ok(polls > 10, `only ${polls} inspections`);
  assert.deepEqual(await lease.release(), { lock: name, released: true, holds: 0, mode: "exclusive" });
  assert.equal((await inspect(name)).held, false);
});

test("re-entry with the Lease-Token adds a hold with the same fence", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("reentry");
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 10_000 });
  const g = await lease.reenter({ ttlMs: 60_000 });
  assert.equal(g.holds, 2);
  assert.equal(g.fence, lease.fence);
  assert.equal(g.ttl_ms, 60_000);
  assert.equal(lease.holds, 2);

  // The same through the generated client: 200, not 201.
  const { data, response } = await client.POST("/locks/{name}", {
    params: { path: { name }, header: { "Lease-Token": lease.token } },
    body: { owner: "worker-a", ttl_ms: 60_000 },
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("Location"), null);
  assert.ok(data);
  assert.equal(data.holds, 3);
  assert.equal(data.fence, lease.fence);

  const state = await inspect(name, lease.token);
  assert.equal(state.holds, 3);
  assert.equal(state.yours, true);

  assert.deepEqual(await lease.release(), { lock: name, released: false, holds: 2, mode: "exclusive" });
  assert.deepEqual(await lease.release(), { lock: name, released: false, holds: 1, mode: "exclusive" });
  assert.equal((await inspect(name)).held, true);
  assert.deepEqual(await lease.release(), { lock: name, released: true, holds: 0, mode: "exclusive" });
  assert.equal((await inspect(name)).held, false);
  // Once too often: the lease is gone.
  await assert.rejects(lease.release(), (e) => e instanceof LeaseGoneError && e.status === 410);
});

test("renew and release of an expired lease answer 410 LeaseGoneError", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("expired");
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 200 });
  await eventually("the lease to expire", 10_000, async () => (await inspect(name)).held === false);
  assert.equal((await inspect(name, lease.token)).yours, false);

  const gone = (e) => {
    assert.ok(e instanceof LeaseGoneError, `got ${e}`);
    assert.ok(e instanceof LeasegateProblemError);
    assert.equal(e.status, 410);
    assert.equal(e.type, ProblemType.LeaseGone);
    assert.ok(e.detail.length > 0);
    return true;
  };
  await assert.rejects(lease.renew(5_000), gone);
  await assert.rejects(lease.renew(), gone);
  await assert.rejects(lease.release(), gone);
  await assert.rejects(lease.reenter(), gone);
  // Nothing was resurrected.
  assert.equal((await inspect(name)).held, false);
});

test("other problems are LeasegateProblemErrors with type, status and detail", { timeout: TEST_TIMEOUT }, async () => {
  const badName = await lock(client, "no spaces!", { owner: "worker-a" }).then(
    () => assert.fail("invalid name accepted"),
    (e) => e,
  );
  assert.ok(badName instanceof LeasegateProblemError, `got ${badName}`);
  assert.ok(!(badName instanceof LockHeldError) && !(badName instanceof LeaseGoneError));
  assert.equal(badName.status, 400);
  assert.equal(badName.type, ProblemType.InvalidLockName);
  assert.ok(badName.detail.length > 0);
  // Its detail and its invalid_params' reason are the same text: the message says it once.
  assert.equal(badName.message.split(badName.detail).length - 1, 1, `message: ${badName.message}`);

  const badTTL = await lock(client, lockName("bad-ttl"), { owner: "worker-a", ttlMs: 0 }).then(
    () => assert.fail("ttl 0 accepted"),
    (e) => e,
  );
  assert.ok(badTTL instanceof LeasegateProblemError, `got ${badTTL}`);
  assert.equal(badTTL.status, 400);
  assert.equal(badTTL.type, ProblemType.InvalidRequest);
  assert.deepEqual(
    (badTTL.problem.invalid_params ?? []).map((p) => p.name),
    ["ttl_ms"],
  );
  // The invalid params, typed and in the message.
  assert.deepEqual(
    badTTL.invalidParams.map((p) => p.name),
    ["ttl_ms"],
  );
  const [param] = badTTL.invalidParams;
  assert.ok(param && param.reason.length > 0, `reason of ${JSON.stringify(param)}`);
  assert.ok(badTTL.message.includes(`ttl_ms: ${param.reason}`), `message: ${badTTL.message}`);
});

/** Records when signal aborts: `at()` is the performance.now() of the abort, undefined before. */
function abortTime(signal) {
  let at;
  signal.addEventListener("abort", () => (at = performance.now()), { once: true });
  return { at: () => at };
}

test("keepAlive keeps a 900 ms lease held, with the same fence, for 2.5 s", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("keepalive");
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 900 });
  assert.equal(lease.watchdog, false);
  assert.ok(lease.remainingMs > 0 && lease.remainingMs <= 900, `remainingMs ${lease.remainingMs}`);
  const renewals = [];
  const errors = [];
  lease.keepAlive({ onRenew: (g) => renewals.push(g), onRenewError: (e) => errors.push(e) });
  assert.equal(lease.keepingAlive, true);
  const granted = performance.now();
  let polls = 0;
  await eventually("2.5 s of continuous holding", 10_000, async () => {
    const state = await inspect(name, lease.token);
    polls++;
    const at = Math.round(performance.now() - granted);
    assert.equal(state.held, true, `lost after ${at} ms (renewals ${renewals.length}, errors ${errors.join("; ")})`);
    assert.equal(state.yours, true);
    assert.equal(state.fence, lease.fence);
    assert.equal(state.watchdog, false);
    assert.equal(lease.signal.aborted, false, `signal aborted after ${at} ms: ${lease.signal.reason}`);
    assert.ok(lease.remainingMs > 0, `remainingMs ${lease.remainingMs} after ${at} ms`);
    return performance.now() - granted >= 2_500;
  });
  assert.ok(polls > 10, `only ${polls} inspections`);
  // Every ttl/3 = 300 ms: about 8 renewals in 2.5 s.
  assert.ok(renewals.length >= 5, `only ${renewals.length} renewals`);
  for (const g of renewals) {
    assert.equal(g.fence, lease.fence);
    assert.equal(g.ttl_ms, 900);
  }
  assert.deepEqual(await lease.release(), { lock: name, released: true, holds: 0, mode: "exclusive" });
  assert.equal(lease.keepingAlive, false);
  assert.equal(lease.signal.aborted, false, "a release does not abort the signal");
  assert.equal((await inspect(name)).held, false);
});

test("keepAlive follows a renew() by hand to a shorter TTL: renews within a third of it, never lapsing", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("keepalive-shortened");
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 9_000 });
  const renewals = [];
  lease.keepAlive({ onRenew: (g) => renewals.push(g) }); // next renewal due in 3 s
  const byHand = performance.now();
  await lease.renew(1_500);
  // Without following it, the lease would count as lapsing 1.35 s after the renewal by hand,
  // before keep-alive's next renewal 3 s after the grant.
  await eventually("keep-alive's renewal after the one by hand", 10_000, async () => {
    assert.equal(lease.signal.aborted, false, `signal aborted: ${lease.signal.reason}`);
    return renewals.length > 0 && performance.now() - byHand >= 2_000;
  });
  assert.equal(lease.signal.aborted, false);
  const state = await inspect(name, lease.token);
  assert.equal(state.yours, true);
  assert.ok(renewals[0].ttl_ms === 9_000, `keep-alive renews with its own TTL: ${renewals[0].ttl_ms}`);
  await lease.release();
});

/**
 * A plain HTTP proxy in front of the gateway that holds back the answer to the first request whose
 * path ends with `suffix` by `delayMs` (a slow network); `answered` is set once Redis has applied it.
 */
async function delayingProxy(suffix, delayMs) {
  const state = { answered: false, url: "", close: async () => {} };
  const server = http.createServer((req, res) => {
    const path = req.url ?? "/";
    /** @type {Buffer[]} */
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const headers = { ...req.headers };
      delete headers.host;
      const up = http.request(new URL(path, baseUrl), { method: req.method, headers }, (upRes) => {
        /** @type {Buffer[]} */
        const body = [];
        upRes.on("data", (c) => body.push(c));
        upRes.on("end", () => {
          const hold = new URL(path, baseUrl).pathname.endsWith(suffix) && !state.answered;
          if (hold) state.answered = true;
          setTimeout(() => {
            res.writeHead(upRes.statusCode ?? 502, upRes.headers);
            res.end(Buffer.concat(body));
          }, hold ? delayMs : 0);
        });
      });
      up.on("error", () => {
        res.writeHead(502);
        res.end();
      });
      up.end(Buffer.concat(chunks));
    });
  });
  await new Promise((resolve) => server.listen({ port: 0, host: "127.0.0.1" }, () => resolve(undefined)));
  const addr = /** @type {import("node:net").AddressInfo} */ (server.address());
  state.url = `http://127.0.0.1:${addr.port}`;
  state.close = () => new Promise((resolve) => server.close(() => resolve(undefined)));
  return state;
}

test("a renew() by hand while keep-alive's renewal is in flight never leaves the lease counting the older TTL", { timeout: TEST_TIMEOUT }, async () => {
  // Keep-alive's renewal (9 s) is applied by Redis, its answer held back 600 ms; a renewal by hand
  // to 1.5 s answered meanwhile was then overwritten by it, and the lease counted as valid for
  // 9 s while Redis had 1.5 s: another owner took the lock while its signal was not aborted.
  const name = lockName("crossing");
  const proxy = await delayingProxy("/renew", 600);
  try {
    const lease = await lock(createLeasegateClient(proxy.url), name, { owner: "a", ttlMs: 9_000 });
    lease.keepAlive({ watch: false }); // its first renewal goes 3 s from now
    await eventually("keep-alive's renewal applied, its answer held back", 10_000, async () => proxy.answered);
    const byHand = performance.now();
    await lease.renew(1_500);
    while (performance.now() - byHand < 3_000) {
      try {
        const other = await lock(client, name, { owner: "b", ttlMs: 3_000 });
        assert.equal(
          lease.signal.aborted,
          true,
          `b holds the lock (fence ${other.fence}) while a's lease counts as valid for ${Math.round(lease.remainingMs)} ms more`,
        );
        await other.release();
        break;
      } catch (e) {
        if (!(e instanceof LockHeldError)) throw e;
        await delay(20);
      }
    }
    lease.stopKeepAlive();
    await lease.release().catch(() => {});
  } finally {
    await proxy.close();
  }
});

test("keepAlive aborts lease.signal with LeaseLostError when the lease is deleted behind its back", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("keepalive-gone");
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 900 });
  let renewals = 0;
  lease.keepAlive({ onRenew: () => renewals++ });
  const abort = abortTime(lease.signal);
  await eventually("a first renewal", 5_000, async () => renewals >= 1);
  assert.equal(lease.signal.aborted, false);

  // Another client releases the lock with the lease's token.
  const other = createLeasegateClient(baseUrl);
  const { data, error } = await other.DELETE("/locks/{name}", {
    params: { path: { name }, header: { "Lease-Token": lease.token } },
  });
  assert.equal(error, undefined);
  assert.equal(data.released, true);
  const deleted = performance.now();

  await eventually("lease.signal to abort", 5_000, async () => abort.at() !== undefined);
  const after = abort.at() - deleted;
  // The next renewal is due at most ttl/3 = 300 ms later, and answers 410 at once.
  assert.ok(after <= 300 + 700, `aborted ${Math.round(after)} ms after the deletion`);
  const reason = lease.signal.reason;
  assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
  assert.equal(reason.kind, "gone");
  assert.equal(reason.lock, name);
  assert.equal(reason.fence, lease.fence);
  assert.ok(reason.cause instanceof LeaseGoneError, `cause ${reason.cause}`);
  assert.equal(lease.keepingAlive, false);
  assert.throws(() => lease.keepAlive(), (e) => e === reason);
  assert.equal((await inspect(name)).held, false);
});

/** How soon after a force release's answer a watched lease must be told (#27), in milliseconds. */
const LOST_WITHIN_MS = 100;

test("onLost fires within 100 ms of a force release's answer: keepAlive watches the events stream", { timeout: TEST_TIMEOUT }, async (t) => {
  const name = lockName("forced");
  // A 30 s TTL: the next renewal would come 10 s later.
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 30_000 });
  assert.equal(lease.watching, false);
  lease.keepAlive();
  await eventually("the events stream to open", 5_000, async () => lease.watching);
  const lost = new Promise((resolve) => lease.onLost((error) => resolve({ error, at: performance.now() })));
  let removedFired = false;
  lease.onLost(() => (removedFired = true))(); // added, then removed at once

  const sent = performance.now();
  const { data, error } = await createLeasegateClient(baseUrl).DELETE("/locks/{name}", {
    params: { path: { name }, query: { force: true } },
  });
  const answered = performance.now();
  assert.equal(error, undefined, JSON.stringify(error));
  assert.equal(data !== undefined && "forced" in data && data.forced, true);
  const { error: reason, at } = await lost;
  const took = Math.max(at - answered, 0);
  t.diagnostic(`onLost fired ${took.toFixed(1)} ms after the force release's answer (${(at - sent).toFixed(1)} ms after the request)`);
  assert.ok(took < LOST_WITHIN_MS, `onLost fired ${Math.round(took)} ms after the force release's answer`);
  assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
  assert.equal(reason.kind, "forced");
  assert.equal(reason.lock, name);
  assert.equal(reason.fence, lease.fence);
  assert.match(reason.message, /force-released/);
  assert.equal(lease.signal.reason, reason, "signal aborts with the same error");
  assert.equal(removedFired, false, "a removed listener is not called");
  assert.equal(lease.keepingAlive, false);
  assert.equal(lease.watching, false);
  // A listener added after the loss is called too (asynchronously).
  assert.equal(await new Promise((resolve) => lease.onLost(resolve)), reason);
  await assert.rejects(lease.release(), (e) => e instanceof LeaseGoneError);
  assert.equal(lease.signal.reason, reason, "the first reason stays");
});

test("a semaphore's permit learns of a force release within 100 ms of its answer", { timeout: TEST_TIMEOUT }, async (t) => {
  const name = lockName("forced-permit");
  const permit = await acquireSemaphore(client, name, { owner: "worker-a", permits: 2, ttlMs: 30_000 });
  permit.keepAlive();
  await eventually("the permit's events stream to open", 5_000, async () => permit.watching);
  const lost = new Promise((resolve) => permit.onLost((error) => resolve({ error, at: performance.now() })));
  const { error } = await client.DELETE("/semaphores/{name}", { params: { path: { name }, query: { force: true } } });
  const answered = performance.now();
  assert.equal(error, undefined, JSON.stringify(error));
  const { error: reason, at } = await lost;
  const took = Math.max(at - answered, 0);
  t.diagnostic(`semaphore: onLost fired ${took.toFixed(1)} ms after the force release's answer`);
  assert.ok(took < LOST_WITHIN_MS, `onLost fired ${Math.round(took)} ms after the force release's answer`);
  assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
  assert.equal(reason.kind, "forced");
  assert.equal(permit.keepingAlive, false);
});

test("keepAlive({ watch: false }) leaves watching to lease.watch(); stopWatching() closes the stream only", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("watch-optional");
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 30_000 });
  lease.keepAlive({ watch: false });
  lease.watch();
  await eventually("the events stream to open", 5_000, async () => lease.watching);
  lease.stopWatching();
  assert.equal(lease.watching, false);
  assert.equal(lease.keepingAlive, true, "stopWatching leaves keep-alive running");
  await lease.release();
  assert.equal(lease.signal.aborted, false, "a release is no loss");
});

test("keepAlive aborts lease.signal before the lease can lapse when renewals keep failing", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("keepalive-lapse");
  // Renewals fail like a network outage (fetch's TypeError) once cut is set.
  let cut = false;
  const flaky = createLeasegateClient(baseUrl, {
    fetch: async (req) => {
      if (cut && new URL(req.url).pathname.endsWith("/renew")) throw new TypeError("fetch failed (test: renewals cut off)");
      return fetch(req);
    },
  });
  // From the first failed renewal (due ttl/3 after the last good one) to the abort (validUntil -
  // margin) there are ttl - ttl/3 - ttl/10 for failed renewals, retried a margin apart; but each
  // also spends its own tries' backoff (100 then 300 ms, plus up to 50 %), which does not grow
  // with the TTL. At 3 s the second failure came only 250-400 ms before the abort (measured),
  // which timers running late on a loaded machine used up (1 failure seen); at 6 s it comes
  // 1.4-1.8 s before.
  const ttlMs = 6_000;
  const margin = safetyMarginMs(ttlMs);
  assert.equal(margin, 600);
  const lease = await lock(flaky, name, { owner: "worker-a", ttlMs });
  let renewals = 0;
  const errors = [];
  const failedAt = [];
  lease.keepAlive({
    onRenew: () => renewals++,
    onRenewError: (e) => {
      errors.push(e);
      failedAt.push(performance.now());
    },
  });
  /** @type {ReturnType<typeof inspect> | undefined} */
  let stateAtAbort;
  lease.signal.addEventListener("abort", () => (stateAtAbort = inspect(name, lease.token)), { once: true });
  const abort = abortTime(lease.signal);
  await eventually("a first renewal", 5_000, async () => renewals >= 1);
  cut = true;

  await eventually("lease.signal to abort", 10_000, async () => abort.at() !== undefined);
  const reason = lease.signal.reason;
  assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
  assert.equal(reason.kind, "lapsing");
  assert.ok(reason.cause instanceof TypeError, `cause ${reason.cause}`);
  // Given up a safety margin before the lease can lapse: the gateway still shows it held.
  const left = lease.validUntil - abort.at();
  assert.ok(left > 0 && left <= margin + 10, `aborted ${Math.round(left)} ms before validUntil`);
  assert.ok(stateAtAbort, "inspected when the signal aborted");
  const state = await stateAtAbort;
  assert.equal(state.held, true, "the lease had already lapsed when the signal aborted");
  assert.equal(state.yours, true);
  assert.equal(state.fence, lease.fence);
  assert.ok(
    errors.length >= 2,
    `failed renewals were retried: ${errors.length} (failed ${failedAt.map((at) => Math.round(lease.validUntil - at)).join(", ")} ms before validUntil)`,
  );
  assert.equal(lease.keepingAlive, false);
  // Nothing renews it any more: it lapses.
  await eventually("the lease to lapse", 5_000, async () => (await inspect(name)).held === false);
  await assert.rejects(lease.release(), (e) => e instanceof LeaseGoneError);
  assert.equal(lease.signal.reason, reason, "the first reason stays");
});

/** Runs an ES module script in a child node process; kills it and fails after timeoutMs. */
function runNode(script, timeoutMs) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      env: { ...process.env, LEASEGATE_URL: baseUrl },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the child process did not exit within ${timeoutMs} ms:\n${stdout}${stderr}`));
    }, timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

for (const how of ["stopKeepAlive", "release"]) {
  test(`after ${how}() no keep-alive timer is left: the process exits`, { timeout: TEST_TIMEOUT }, async () => {
    const name = lockName(`keepalive-exit-${how}`);
    const script = `
      import { createLeasegateClient, lock } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
      const client = createLeasegateClient(process.env.LEASEGATE_URL);
      const lease = await lock(client, ${JSON.stringify(name)}, { owner: "child", ttlMs: 1500 });
      let renewals = 0;
      await new Promise((resolve, reject) => {
        lease.signal.addEventListener("abort", () => reject(lease.signal.reason));
        lease.keepAlive({ onRenew: () => ++renewals === 2 && resolve() });
      });
      ${how === "release" ? "await lease.release();" : "lease.stopKeepAlive();"}
      const timers = process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
      console.log(JSON.stringify({ renewals, keepingAlive: lease.keepingAlive, aborted: lease.signal.aborted, timers }));
    `;
    // Renewing every 500 ms, a leftover timer would keep the child alive for good.
    const { code, signal, stdout, stderr } = await runNode(script, 10_000);
    assert.equal(code, 0, `exit ${code} ${signal}:\n${stdout}${stderr}`);
    assert.deepEqual(JSON.parse(stdout.trim()), { renewals: 2, keepingAlive: false, aborted: false, timers: 0 });
    // Nothing renews the lease any more: released, or lapsing within its 1.5 s TTL.
    await eventually("the lock to be free", 5_000, async () => (await inspect(name)).held === false);
  });
}

test("renew, re-enter, release and acquire send an Idempotency-Key, reused across their retries", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("idempotency");
  const sent = []; // { method, path, key } of every request, in order
  // What happens to the next requests: "network" (not sent), "lost" (answer lost), "503", or
  // "lost-and-gone" (a grant's answer lost, its lease released before the retry).
  const faults = [];
  const lostGrants = [];
  const recording = createLeasegateClient(baseUrl, {
    fetch: async (req) => {
      sent.push({ method: req.method, path: new URL(req.url).pathname, key: req.headers.get("Idempotency-Key") });
      const fault = faults.shift();
      if (fault === "network") throw new TypeError("fetch failed (test: connection refused)");
      if (fault === "503") {
        const problem = { type: ProblemType.BackendUnavailable, title: "Backend unavailable", status: 503, detail: "test" };
        return new Response(JSON.stringify(problem), {
          status: 503,
          headers: { "Content-Type": "application/problem+json", "Retry-After": "1" },
        });
      }
      const res = await fetch(req);
      if (fault === "lost") {
        await res.arrayBuffer();
        throw new TypeError("fetch failed (test: answer lost)");
      }
      if (fault === "lost-and-gone") {
        // A grant whose answer is lost, and whose lease is gone before the retry.
        lostGrants.push(await res.json());
        const { token } = lostGrants[lostGrants.length - 1];
        await client.DELETE("/locks/{name}", { params: { path: { name }, header: { "Lease-Token": token } } });
        throw new TypeError("fetch failed (test: answer lost)");
      }
      return res;
    },
  });
  /** The requests sent since the last call, as "METHOD path". */
  const take = () => sent.splice(0);
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  const oneKey = (reqs, count, what) => {
    assert.equal(reqs.length, count, `${what}: ${JSON.stringify(reqs)}`);
    const [first] = reqs;
    assert.match(first.key ?? "", UUID, what);
    for (const r of reqs) assert.equal(r.key, first.key, `${what}: every try carries the same key`);
    return first.key;
  };

  faults.push("network");
  const lease = await lock(recording, name, { owner: "worker-a", ttlMs: 30_000 });
  const acquireKey = oneKey(take(), 2, "acquire after a network error");

  // The first try is applied but its answer is lost: the retry, with the same key, is answered
  // as the first try was, and the hold is counted once.
  faults.push("lost");
  assert.equal((await lease.reenter({ ttlMs: 30_000 })).holds, 2);
  const reenterKey = oneKey(take(), 2, "re-entry after a lost answer");
  assert.equal(lease.holds, 2);
  assert.equal((await inspect(name)).holds, 2, "a retried re-entry added a second hold");

  faults.push("503");
  assert.equal((await lease.renew(20_000)).ttl_ms, 20_000);
  const renewKey = oneKey(take(), 2, "renewal after a 503");

  faults.push("lost");
  assert.equal((await lease.renew(25_000)).ttl_ms, 25_000);
  const renewKey2 = oneKey(take(), 2, "renewal after a lost answer");

  // Bounded: three 503s in a row end the call with the third.
  faults.push("503", "503", "503");
  const unavailable = await lease.release().then(
    () => assert.fail("release succeeded through three 503s"),
    (e) => e,
  );
  assert.ok(unavailable instanceof LeasegateProblemError, `got ${unavailable}`);
  assert.equal(unavailable.status, 503);
  const failedReleaseKey = oneKey(take(), 3, "release through three 503s");
  assert.equal(lease.holds, 2);

  // Problems other than 503 are not retried.
  const badTTL = await lease.renew(0).then(
    () => assert.fail("ttl 0 accepted"),
    (e) => e,
  );
  assert.equal(badTTL.status, 400);
  assert.deepEqual(
    badTTL.invalidParams.map((p) => p.name),
    ["ttl_ms"],
  );
  oneKey(take(), 1, "a 400 renewal");

  faults.push("lost");
  assert.deepEqual(await lease.release(), { lock: name, released: false, holds: 1, mode: "exclusive" });
  const releaseKey = oneKey(take(), 2, "release after a lost answer");
  const state = await inspect(name, lease.token);
  assert.equal(state.held, true, "a retried release gave back a second hold");
  assert.equal(state.holds, 1);
  assert.deepEqual(await lease.release(), { lock: name, released: true, holds: 0, mode: "exclusive" });
  const releaseKey2 = oneKey(take(), 1, "last release");

  // An acquire whose first try was granted, its answer lost, and its lease gone by the retry: the
  // retry answers 410, and lock() asks anew with a new key.
  faults.push("lost-and-gone");
  const again = await lock(recording, name, { owner: "worker-a", ttlMs: 30_000 });
  const [firstTry, retry, anew, ...more] = take();
  assert.equal(more.length, 0);
  const lostKey = oneKey([firstTry, retry], 2, "acquire whose lease was gone by its retry");
  const anewKey = oneKey([anew], 1, "acquire anew");
  assert.notEqual(anewKey, lostKey);
  assert.equal(lostGrants.length, 1);
  assert.ok(again.fence > lostGrants[0].fence, `fence ${again.fence} after ${lostGrants[0].fence}`);
  assert.equal((await again.release()).released, true);
  take();

  const keys = [acquireKey, reenterKey, renewKey, renewKey2, failedReleaseKey, releaseKey, releaseKey2, lostKey, anewKey];
  assert.equal(new Set(keys).size, keys.length, "each call has a key of its own");
  assert.equal((await inspect(name)).held, false);
});

/** Resolves with what p rejects with; fails when it resolves. */
async function rejection(p, what) {
  return p.then(
    () => assert.fail(`${what}: succeeded`),
    (e) => e,
  );
}

test("shared holders coexist; an exclusive request gets LockHeldError until the last one leaves", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("shared");
  const r1 = await lock(client, name, { owner: "reader-1", mode: "shared", ttlMs: 30_000 });
  const r2 = await lock(client, name, { owner: "reader-2", mode: "shared", ttlMs: 30_000 });
  for (const r of [r1, r2]) {
    assert.equal(r.created, true);
    assert.equal(r.mode, "shared");
    assert.equal(r.grant.mode, "shared");
    assert.equal(r.holds, 1);
    assert.deepEqual(r.holdsByMode, { exclusive: 0, shared: 1 });
  }
  assert.notEqual(r1.token, r2.token);
  assert.ok(r2.fence > r1.fence, `fence ${r2.fence} after ${r1.fence}`);

  const state = await inspectLock(client, name, { token: r2.token });
  assert.equal(state.held, true);
  assert.equal(state.mode, "shared");
  assert.equal(state.holder_count, 2);
  assert.deepEqual((state.holders ?? []).map((h) => h.owner).sort(), ["reader-1", "reader-2"]);
  assert.equal(state.owner, undefined, "owner describes an exclusive holder only");
  assert.equal(state.yours, true);

  const writer = await rejection(lock(client, name, { owner: "writer" }), "an exclusive try while readers hold");
  assert.ok(writer instanceof LockHeldError, `got ${writer}`);
  assert.ok(writer instanceof HeldError);
  assert.equal(writer.status, 409);
  assert.equal(writer.type, ProblemType.LockHeld);
  assert.ok(writer.retryAfterMs > 0 && writer.retryAfterMs <= 30_000, `retryAfterMs ${writer.retryAfterMs}`);

  // A third reader is let in, and leaves.
  const r3 = await lock(client, name, { owner: "reader-3", mode: "shared" });
  assert.deepEqual(await r3.release(), { lock: name, released: true, holds: 0, mode: "shared" });

  // A waiting writer is handed the lock once the last reader leaves; meanwhile new readers queue behind it.
  const waiting = lock(createLeasegateClient(baseUrl), name, { owner: "writer", waitMs: 20_000 });
  await eventually("the writer to queue", 10_000, async () => (await inspectLock(client, name)).waiters === 1);
  const reader4 = await rejection(lock(client, name, { owner: "reader-4", mode: "shared" }), "a shared try while a writer waits");
  assert.ok(reader4 instanceof LockHeldError, `got ${reader4}`);
  assert.deepEqual(await r1.release(), { lock: name, released: true, holds: 0, mode: "shared" });
  const between = await inspectLock(client, name);
  assert.equal(between.holder_count, 1);
  assert.equal(between.waiters, 1, "the writer was granted the lock while a reader held it");
  assert.deepEqual(await r2.release(), { lock: name, released: true, holds: 0, mode: "shared" });
  const w = await waiting;
  assert.equal(w.mode, "exclusive");
  assert.ok(w.fence > r2.fence, `fence ${w.fence} after ${r2.fence}`);
  const held = await w.inspect();
  assert.equal(held.mode, "exclusive");
  assert.equal(held.owner, "writer");
  assert.equal(held.yours, true);
  assert.deepEqual(await w.release(), { lock: name, released: true, holds: 0, mode: "exclusive" });
});

test("a shared holder asking for exclusive gets UpgradeRefusedError; an exclusive holder can downgrade", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("upgrade");
  const reader = await lock(client, name, { owner: "reader", mode: "shared", ttlMs: 30_000 });
  const refused = await rejection(reader.reenter({ mode: "exclusive" }), "an upgrade");
  assert.ok(refused instanceof UpgradeRefusedError, `got ${refused}`);
  assert.ok(refused instanceof LeasegateProblemError);
  assert.ok(!(refused instanceof HeldError));
  assert.equal(refused.status, 409);
  assert.equal(refused.type, ProblemType.UpgradeRefused);
  assert.ok(refused.detail.length > 0);
  assert.equal(reader.signal.aborted, false, "a refused upgrade does not lose the lease");
  assert.deepEqual(reader.holdsByMode, { exclusive: 0, shared: 1 });

  // Re-entry keeps the lease's mode unless told otherwise.
  const again = await reader.reenter();
  assert.equal(again.mode, "shared");
  assert.equal(again.holds, 2);
  assert.equal(again.fence, reader.fence);
  assert.equal(reader.holds, 2);
  assert.deepEqual(await reader.release(), { lock: name, released: false, holds: 1, mode: "shared" });
  assert.deepEqual(await reader.release(), { lock: name, released: true, holds: 0, mode: "shared" });

  // An exclusive holder takes a shared hold too, then gives back its exclusive one: a downgrade.
  const writer = await lock(client, name, { owner: "writer", ttlMs: 30_000 });
  const shared = await writer.reenter({ mode: "shared" });
  assert.equal(shared.mode, "shared");
  assert.equal(shared.fence, writer.fence);
  assert.deepEqual(writer.holdsByMode, { exclusive: 1, shared: 1 });
  assert.equal(writer.mode, "exclusive");
  assert.equal(writer.holds, 2);
  assert.ok((await rejection(lock(client, name, { owner: "reader-2", mode: "shared" }), "a reader")) instanceof LockHeldError);
  assert.deepEqual(await writer.release({ mode: "exclusive" }), { lock: name, released: true, holds: 0, mode: "exclusive" });
  assert.equal(writer.mode, "shared");
  assert.deepEqual(writer.holdsByMode, { exclusive: 0, shared: 1 });
  const state = await writer.inspect();
  assert.equal(state.mode, "shared");
  assert.equal(state.holder_count, 1);
  assert.equal(state.yours, true);
  const reader2 = await lock(client, name, { owner: "reader-2", mode: "shared" });

  // The exclusive hold is gone, but the lease still holds the lock shared: no loss.
  const gone = await rejection(writer.release({ mode: "exclusive" }), "a second exclusive release");
  assert.ok(gone instanceof LeaseGoneError, `got ${gone}`);
  assert.equal(writer.signal.aborted, false, "the lease still holds the lock shared");
  assert.deepEqual(await writer.release(), { lock: name, released: true, holds: 0, mode: "shared" });
  assert.equal(writer.holds, 0);
  await reader2.release();
  assert.equal((await inspectLock(client, name)).held, false);
});

test("a semaphore of 2 grants two permits; the third gets SemaphoreFullError", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("semaphore");
  const a = await acquireSemaphore(client, name, { owner: "sem-a", permits: 2, ttlMs: 30_000 });
  const b = await acquireSemaphore(client, name, { owner: "sem-b", permits: 2, ttlMs: 30_000 });
  for (const { lease, owner, used } of [
    { lease: a, owner: "sem-a", used: 1 },
    { lease: b, owner: "sem-b", used: 2 },
  ]) {
    assert.equal(lease.created, true);
    assert.equal(lease.name, name);
    assert.equal(lease.grant.semaphore, name);
    assert.equal(lease.owner, owner);
    assert.match(lease.token, TOKEN_RE);
    assert.equal(lease.permits, 2);
    assert.equal(lease.used, used);
    assert.equal(lease.holds, 1);
    assert.equal(lease.ttlMs, 30_000);
    assert.equal(lease.watchdog, false);
  }
  assert.ok(b.fence > a.fence, `fence ${b.fence} after ${a.fence}`);

  const full = await rejection(acquireSemaphore(client, name, { owner: "sem-c", permits: 2 }), "a third permit");
  assert.ok(full instanceof SemaphoreFullError, `got ${full}`);
  assert.ok(full instanceof HeldError);
  assert.ok(!(full instanceof LockHeldError));
  assert.equal(full.status, 409);
  assert.equal(full.type, ProblemType.SemaphoreFull);
  assert.equal(full.problem.semaphore, name);
  assert.ok(full.retryAfterMs > 0 && full.retryAfterMs <= 30_000, `retryAfterMs ${full.retryAfterMs}`);
  assert.equal(full.waitedMs, undefined);

  // A bounded wait that runs out: 409 after waiting, with waitedMs and a queue ticket.
  const waited = await rejection(acquireSemaphore(client, name, { owner: "sem-c", permits: 2, waitMs: 300 }), "a waiter");
  assert.ok(waited instanceof SemaphoreFullError, `got ${waited}`);
  assert.ok((waited.waitedMs ?? 0) >= 250, `waitedMs ${waited.waitedMs}`);
  assert.equal(typeof waited.queueTicket, "string");

  const state = await inspectSemaphore(client, name, { token: a.token });
  assert.equal(state.name, name);
  assert.equal(state.permits, 2);
  assert.equal(state.used, 2);
  assert.equal(state.holder_count, 2);
  assert.deepEqual(state.holders.map((h) => h.owner).sort(), ["sem-a", "sem-b"]);
  assert.equal(state.waiters, 0);
  assert.equal(state.yours, true);

  assert.deepEqual(await a.release(), { semaphore: name, released: true, holds: 0 });
  assert.equal(a.holds, 0);
  assert.equal((await a.inspect()).yours, false);
  const c = await acquireSemaphore(client, name, { owner: "sem-c", permits: 2 });
  assert.equal(c.used, 2);
  await b.release();
  await c.release();
  const free = await inspectSemaphore(client, name);
  assert.equal(free.used, 0);
  assert.equal(free.holder_count, 0);
});

test("a waiting permit request is granted when a permit is released", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("semaphore-wait");
  const a = await acquireSemaphore(client, name, { owner: "sem-a", permits: 1, ttlMs: 30_000 });
  let polls = 0; // the waiter's long-polls sent so far
  const pollingClient = createLeasegateClient(baseUrl, {
    fetch: async (req) => {
      if (req.method === "POST") polls++;
      return fetch(req);
    },
  });
  // 200 ms long-polls: the wait goes on across several, each presenting the last one's ticket.
  const waiting = acquireSemaphore(pollingClient, name, {
    owner: "sem-b",
    permits: 1,
    ttlMs: 30_000,
    waitMs: 20_000,
    maxWaitPerRequestMs: 200,
  });
  let settled = false;
  waiting.then(
    () => (settled = true),
    () => (settled = true),
  );
  await eventually("the waiter to queue", 10_000, async () => (await inspectSemaphore(client, name)).waiters === 1);
  await eventually("two more long-polls", 10_000, async () => polls >= 3);
  assert.equal(settled, false, "the waiter answered before the permit was released");

  assert.deepEqual(await a.release(), { semaphore: name, released: true, holds: 0 });
  const b = await waiting;
  assert.equal(b.created, true);
  assert.equal(b.owner, "sem-b");
  assert.equal(b.permits, 1);
  assert.equal(b.used, 1);
  assert.ok(b.fence > a.fence, `fence ${b.fence} after ${a.fence}`);
  const state = await b.inspect();
  assert.equal(state.used, 1);
  assert.equal(state.waiters, 0);
  assert.equal(state.yours, true);
  assert.deepEqual(await b.release(), { semaphore: name, released: true, holds: 0 });
});

test("another size while the semaphore is held gets PermitsMismatchError with its size", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("semaphore-size");
  const a = await acquireSemaphore(client, name, { owner: "sem-a", permits: 2, ttlMs: 30_000 });
  for (const waitMs of [0, 5_000]) {
    const err = await rejection(acquireSemaphore(client, name, { owner: "sem-b", permits: 3, waitMs }), `permits 3 (waitMs ${waitMs})`);
    assert.ok(err instanceof PermitsMismatchError, `got ${err}`);
    assert.ok(err instanceof LeasegateProblemError);
    assert.ok(!(err instanceof HeldError));
    assert.equal(err.status, 409);
    assert.equal(err.type, ProblemType.PermitsMismatch);
    assert.equal(err.permits, 2);
    assert.equal(err.problem.semaphore, name);
  }
  assert.equal((await inspectSemaphore(client, name)).waiters, 0, "a mismatched request does not wait");
  await a.release();
  // Nobody holds or waits: the next acquirer sets the size.
  const b = await acquireSemaphore(client, name, { owner: "sem-b", permits: 3 });
  assert.equal(b.permits, 3);
  await b.release();
});

test("a semaphore lease renews, re-enters and keeps alive; its signal aborts once it is gone", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("semaphore-keepalive");
  const lease = await acquireSemaphore(client, name, { owner: "sem-a", permits: 3, ttlMs: 900 });
  const renewed = await lease.renew(2_000);
  assert.equal(renewed.ttl_ms, 2_000);
  assert.equal(renewed.fence, lease.fence);
  assert.equal(renewed.used, 1);
  assert.equal(lease.ttlMs, 2_000);
  assert.equal(lease.permits, 3);
  const g = await lease.reenter({ ttlMs: 900 });
  assert.equal(g.holds, 2);
  assert.equal(g.fence, lease.fence);
  assert.equal(g.permits, 3);
  assert.equal(lease.holds, 2);

  const renewals = [];
  lease.keepAlive({ onRenew: (grant) => renewals.push(grant) });
  const granted = performance.now();
  await eventually("1.5 s of continuous holding", 10_000, async () => {
    const state = await lease.inspect();
    assert.equal(state.yours, true, `lost after ${Math.round(performance.now() - granted)} ms`);
    assert.equal(state.used, 1);
    assert.equal(lease.signal.aborted, false);
    return performance.now() - granted >= 1_500;
  });
  assert.ok(renewals.length >= 3, `only ${renewals.length} renewals`);
  for (const r of renewals) {
    assert.equal(r.fence, lease.fence);
    assert.equal(r.ttl_ms, 900);
  }
  // Releasing one of two holds leaves keep-alive running.
  assert.deepEqual(await lease.release(), { semaphore: name, released: false, holds: 1 });
  assert.equal(lease.keepingAlive, true);

  // Another client gives back the last hold with the lease's token: the next renewal answers 410.
  const { data, error } = await createLeasegateClient(baseUrl).DELETE("/semaphores/{name}", {
    params: { path: { name }, header: { "Lease-Token": lease.token } },
  });
  assert.equal(error, undefined);
  assert.deepEqual(data, { semaphore: name, released: true, holds: 0 });
  await eventually("lease.signal to abort", 5_000, async () => lease.signal.aborted);
  const reason = lease.signal.reason;
  assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
  assert.equal(reason.kind, "gone");
  assert.equal(reason.semaphore, name);
  assert.equal(reason.lock, undefined);
  assert.equal(reason.fence, lease.fence);
  assert.ok(reason.message.includes(`semaphore "${name}"`), reason.message);
  assert.ok(reason.cause instanceof LeaseGoneError, `cause ${reason.cause}`);
  assert.equal(lease.keepingAlive, false);
  assert.equal((await inspectSemaphore(client, name)).used, 0);
});

test("a lock's token is refused by the semaphore endpoints, and a semaphore's by the lock endpoints", { timeout: TEST_TIMEOUT }, async () => {
  const name = lockName("token-kinds"); // a lock and a semaphore of the same name: separate name spaces
  const l = await lock(client, name, { owner: "owner-a", ttlMs: 30_000 });
  const s = await acquireSemaphore(client, name, { owner: "owner-a", permits: 1, ttlMs: 30_000 });
  /**
   * Checks an answer of the generated client is 400 invalid-lease-token.
   * @param {{ error?: unknown, response: Response }} answer
   * @param {string} what
   */
  const refused = (answer, what) => {
    const err = toLeasegateError(answer.error, answer.response);
    assert.equal(err.status, 400, `${what}: ${err.message}`);
    assert.equal(err.type, ProblemType.InvalidLeaseToken, what);
    assert.ok(!(err instanceof LeaseGoneError), what);
  };
  const withToken = (token) => ({ path: { name }, header: { "Lease-Token": token } });

  refused(await client.POST("/semaphores/{name}", { params: withToken(l.token), body: { owner: "owner-a", permits: 1 } }), "semaphore re-entry");
  refused(await client.POST("/semaphores/{name}/renew", { params: withToken(l.token) }), "semaphore renewal");
  refused(await client.DELETE("/semaphores/{name}", { params: withToken(l.token) }), "semaphore release");
  const semInspect = await rejection(inspectSemaphore(client, name, { token: l.token }), "semaphore inspect");
  assert.equal(semInspect.type, ProblemType.InvalidLeaseToken);

  refused(await client.POST("/locks/{name}", { params: withToken(s.token), body: { owner: "owner-a" } }), "lock re-entry");
  refused(await client.POST("/locks/{name}/renew", { params: withToken(s.token) }), "lock renewal");
  refused(await client.DELETE("/locks/{name}", { params: withToken(s.token) }), "lock release");
  const lockInspect = await rejection(inspectLock(client, name, { token: s.token }), "lock inspect");
  assert.equal(lockInspect.type, ProblemType.InvalidLeaseToken);

  // Neither lease was touched.
  assert.equal((await l.inspect()).yours, true);
  assert.equal((await s.inspect()).yours, true);
  assert.equal(l.signal.aborted || s.signal.aborted, false);
  assert.deepEqual(await l.release(), { lock: name, released: true, holds: 0, mode: "exclusive" });
  assert.deepEqual(await s.release(), { semaphore: name, released: true, holds: 0 });
});
