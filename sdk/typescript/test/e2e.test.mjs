// End-to-end tests of the TypeScript SDK against a live gateway at $LEASEGATE_URL
// (tests/typescript_sdk_test.go starts one on its own redis-server and runs `npm test`).
// Every call goes through the generated client or the SDK's convenience layer.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  LeaseGoneError,
  LeasegateProblemError,
  LockHeldError,
  ProblemType,
  createLeasegateClient,
  lock,
} from "../dist/index.js";

const baseUrl = process.env.LEASEGATE_URL;
if (!baseUrl) {
  throw new Error(
    "LEASEGATE_URL is not set: these tests need a running gateway, e.g. " +
      "LEASEGATE_URL=http://127.0.0.1:8080 npm test (tests/typescript_sdk_test.go sets it)",
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
  assert.ok(Date.parse(data.expires_at) > Date.now(), `expires_at ${data.expires_at}`);

  const { data: rel, error: relErr } = await client.DELETE("/locks/{name}", {
    params: { path: { name }, header: { "Lease-Token": data.token } },
  });
  assert.equal(relErr, undefined);
  assert.deepEqual(rel, { lock: name, released: true, holds: 0 });

  // The convenience layer: a new grant of the same name gets a greater fence.
  const lease = await lock(client, name, { owner: "worker-a", ttlMs: 30_000 });
  assert.equal(lease.created, true);
  assert.equal(lease.name, name);
  assert.equal(lease.owner, "worker-a");
  assert.match(lease.token, TOKEN_RE);
  assert.ok(lease.fence > data.fence, `fence ${lease.fence} after ${data.fence}`);
  assert.equal(lease.holds, 1);
  const state = await inspect(name, lease.token);
  assert.equal(state.held, true);
  assert.equal(state.owner, "worker-a");
  assert.equal(state.fence, lease.fence);
  assert.equal(state.yours, true);
  assert.deepEqual(await lease.release(), { lock: name, released: true, holds: 0 });
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
  const patientClient = createLeasegateClient(baseUrl);
  const patient = lock(patientClient, name, { owner: "patient", ttlMs: 30_000, waitMs: 20_000, maxWaitPerRequestMs: 200 });
  await eventually("the patient waiter to queue", 10_000, async () => (await inspect(name)).waiters === 1);
  const newcomers = [];
  for (let i = 0; i < 5; i++) {
    newcomers.push(lock(createLeasegateClient(baseUrl), name, { owner: `newcomer-${i}`, ttlMs: 30_000, waitMs: 20_000 }));
  }
  await eventually("the newcomers to queue", 10_000, async () => (await inspect(name)).waiters >= 5);
  await delay(700); // a few of the patient waiter's 200 ms polls run out and resume meanwhile
  await eventually("the patient waiter back in line", 10_000, async () => (await inspect(name)).waiters === 6);
  await a.release();
  const p = await patient;
  assert.equal(p.owner, "patient", "the patient waiter kept its place across its long-polls");
  await p.release();
  // Each newcomer releases as soon as it is granted, so the line drains in whatever order it has.
  await Promise.all(newcomers.map(async (n) => (await n).release()));
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
  assert.deepEqual(await lease.release(), { lock: name, released: true, holds: 0 });
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

  assert.deepEqual(await lease.release(), { lock: name, released: false, holds: 2 });
  assert.deepEqual(await lease.release(), { lock: name, released: false, holds: 1 });
  assert.equal((await inspect(name)).held, true);
  assert.deepEqual(await lease.release(), { lock: name, released: true, holds: 0 });
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

  const badTTL = await lock(client, lockName("bad-ttl"), { owner: "worker-a", ttlMs: 0 }).then(
    () => assert.fail("ttl 0 accepted"),
    (e) => e,
  );
  assert.equal(badTTL.status, 400);
  assert.equal(badTTL.type, ProblemType.InvalidRequest);
  assert.deepEqual(
    badTTL.problem.invalid_params.map((p) => p.name),
    ["ttl_ms"],
  );
});
