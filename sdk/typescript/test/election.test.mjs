// End-to-end tests of the SDK's elections (campaign(), Leadership, observe()) against a live
// gateway at $LEASEGATE_URL (tests/sdks/typescript_sdk_test.go starts one on its own redis-server).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ElectionLedError,
  LeaseGoneError,
  LeaseLostError,
  campaign,
  createLeasegateClient,
  inspectElection,
  observe,
} from "../dist/index.js";

const baseUrl = process.env.LEASEGATE_URL;
if (!baseUrl) throw new Error("LEASEGATE_URL is not set (tests/sdks/typescript_sdk_test.go sets it)");

const client = createLeasegateClient(baseUrl);
const TEST_TIMEOUT = 30_000;
const run = `ts-elect-${process.pid}-${Date.now().toString(36)}`;
/** An election name of its own for each test. */
const electionName = (suffix) => `${run}.${suffix}`;

const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls fn every 10 ms until it returns a truthy value, which it returns; fails after timeoutMs. */
async function eventually(what, timeoutMs, fn) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await delay(10);
  }
}

/** Reads an observer's events into `events` until stopped; `next(n)` waits for the n-th. */
function collect(iterator) {
  const events = [];
  let failure;
  const done = (async () => {
    try {
      for await (const ev of iterator) events.push(ev);
    } catch (e) {
      failure = e;
    }
  })();
  return {
    events,
    next: (n, what = `event #${n}`) =>
      eventually(what, 10_000, () => {
        if (failure) throw failure;
        return events.length >= n ? events[n - 1] : undefined;
      }),
    done,
  };
}

test("campaign elects a leader with a fence; a try-once rival gets ElectionLedError", { timeout: TEST_TIMEOUT }, async () => {
  const name = electionName("basic");
  const lead = await campaign(client, name, "10.0.3.7:8080", { owner: "sched-1", ttlMs: 5000 });
  try {
    assert.equal(lead.name, name);
    assert.equal(lead.owner, "sched-1");
    assert.equal(lead.value, "10.0.3.7:8080");
    assert.ok(lead.fence > 0);
    assert.ok(lead.token.length > 0);
    assert.match(lead.eventId, /^\d+-\d+$/);
    await assert.rejects(campaign(client, name, "10.0.3.8:8080", { owner: "sched-2" }), (e) => {
      assert.ok(e instanceof ElectionLedError, `got ${e}`);
      assert.equal(e.status, 409);
      assert.ok(e.retryAfterMs > 0);
      return true;
    });
    const state = await inspectElection(client, name);
    assert.equal(state.led, true);
    assert.equal(state.leader?.owner, "sched-1");
    assert.equal(state.leader?.fence, lead.fence);
    const renewed = await lead.renew();
    assert.equal(renewed.fence, lead.fence);
  } finally {
    await lead.resign();
  }
  assert.equal((await inspectElection(client, name)).led, false);
});

test("resign hands the lead to the candidates in FIFO order, with growing fences", { timeout: TEST_TIMEOUT }, async () => {
  const name = electionName("fifo");
  const first = await campaign(client, name, "a", { owner: "a", ttlMs: 10_000 });
  const second = campaign(client, name, "b", { owner: "b", ttlMs: 10_000, waitMs: 20_000 });
  await eventually("b in line", 5000, async () => (await inspectElection(client, name)).candidates === 1);
  const third = campaign(client, name, "c", { owner: "c", ttlMs: 10_000, waitMs: 20_000 });
  await eventually("c in line", 5000, async () => (await inspectElection(client, name)).candidates === 2);

  const resigned = await first.resign();
  assert.equal(resigned.resigned, true);
  const b = await second;
  assert.equal(b.owner, "b");
  assert.equal(b.value, "b");
  assert.ok(b.fence > first.fence);
  await b.resign();
  const c = await third;
  assert.equal(c.owner, "c");
  assert.ok(c.fence > b.fence);
  await c.resign();
});

test("an observer sees the state, the election, a proclaim and the resignation", { timeout: TEST_TIMEOUT }, async () => {
  const name = electionName("observe");
  const stop = new AbortController();
  const seen = collect(observe(client, name, { signal: stop.signal }));
  const state = await seen.next(1);
  assert.equal(state.type, "state");
  assert.equal(state.led, false);
  assert.equal(state.gap, false);
  assert.equal(state.id, "0-0");

  const lead = await campaign(client, name, "v1", { owner: "leader", ttlMs: 10_000 });
  const proclaimed = await lead.proclaim("v2");
  assert.equal(proclaimed.value, "v2");
  assert.equal(lead.value, "v2");
  await lead.resign();

  const elected = await seen.next(2);
  assert.deepEqual([elected.type, elected.owner, elected.value, elected.fence, elected.election], ["elected", "leader", "v1", lead.fence, name]);
  const p = await seen.next(3);
  assert.deepEqual([p.type, p.value, p.fence, p.id], ["proclaimed", "v2", lead.fence, proclaimed.event_id]);
  const r = await seen.next(4);
  assert.deepEqual([r.type, r.owner, r.fence], ["resigned", "leader", lead.fence]);
  stop.abort();
  await seen.done;
  assert.equal(seen.events.length, 4);
});

test("observe with lastEventId goes on exactly after that event", { timeout: TEST_TIMEOUT }, async () => {
  const name = electionName("resume-from");
  const lead = await campaign(client, name, "v1", { owner: "leader", ttlMs: 10_000 });
  await lead.proclaim("v2");
  await lead.proclaim("v3");
  await lead.resign();

  const stop = new AbortController();
  const seen = collect(observe(client, name, { lastEventId: lead.eventId, signal: stop.signal }));
  // lead.eventId is the last proclaim's (v3): only the resignation follows it.
  const r = await seen.next(1);
  assert.equal(r.type, "resigned");
  stop.abort();
  await seen.done;
  assert.equal(seen.events.length, 1);
  // A fresh observer starts with the state, whose id is the last event's.
  const fresh = observe(client, name);
  const first = /** @type {any} */ ((await fresh.next()).value);
  await fresh.return(undefined);
  assert.equal(first.type, "state");
  assert.equal(first.led, false);
  assert.equal(first.id, r.id);

  const fromStart = [];
  for await (const ev of observe(client, name, { lastEventId: "0-0" })) {
    fromStart.push(/** @type {any} */ (ev));
    if (ev.type === "resigned") break;
  }
  assert.deepEqual(fromStart.map((e) => [e.type, e.value]), [
    ["elected", "v1"],
    ["proclaimed", "v2"],
    ["proclaimed", "v3"],
    ["resigned", undefined],
  ]);
});

test("an observer whose stream is cut reconnects with Last-Event-ID and misses nothing", { timeout: TEST_TIMEOUT }, async () => {
  const name = electionName("resume-cut");
  // A fetch whose events streams can be cut, as a network failure or a gateway restart would.
  const sent = [];
  const open = new Set();
  const cuttingFetch = (input, init) => {
    const request = new Request(input, init);
    if (!request.url.endsWith("/events")) return fetch(request);
    sent.push(request.headers.get("Last-Event-ID"));
    const cut = new AbortController();
    open.add(cut);
    return fetch(request, { signal: AbortSignal.any([request.signal, cut.signal]) });
  };
  const observer = createLeasegateClient(baseUrl, { fetch: cuttingFetch });
  const stop = new AbortController();
  const seen = collect(observe(observer, name, { signal: stop.signal }));
  assert.equal((await seen.next(1)).type, "state");

  const lead = await campaign(client, name, "v1", { owner: "leader", ttlMs: 10_000 });
  const elected = await seen.next(2);
  assert.equal(elected.type, "elected");
  for (const c of open) c.abort(new TypeError("connection cut"));
  open.clear();
  await lead.proclaim("v2"); // while the observer may be disconnected
  const p = await seen.next(3);
  assert.deepEqual([p.type, p.value], ["proclaimed", "v2"]);
  assert.deepEqual(sent, [null, elected.id], "the reconnection carries the last event's id");
  await lead.resign();
  assert.equal((await seen.next(4)).type, "resigned");
  stop.abort();
  await seen.done;
  assert.deepEqual(seen.events.map((e) => e.type), ["state", "elected", "proclaimed", "resigned"]);
});

/** How soon after a force release's answer a kept-alive leadership must be told, in milliseconds. */
const LOST_WITHIN_MS = 100;

test("a leadership's onLost fires within 100 ms of a force release's answer", { timeout: TEST_TIMEOUT }, async (t) => {
  const name = electionName("forced");
  const lead = await campaign(client, name, "v1", { owner: "leader", ttlMs: 10_000 });
  lead.keepAlive();
  t.after(() => lead.stopKeepAlive());
  await eventually("the election's events stream to open", 5000, () => lead.watching);
  let at = 0;
  const told = new Promise((resolve) =>
    lead.onLost((e) => {
      at = performance.now();
      resolve(e);
    }),
  );
  const sent = performance.now();
  const { data, error } = await client.DELETE("/elections/{name}", { params: { path: { name }, query: { force: true } } });
  const answered = performance.now();
  assert.equal(error, undefined, JSON.stringify(error));
  assert.equal(data !== undefined && "forced" in data && data.forced, true);
  const reason = await told;
  const took = Math.max(0, at - answered);
  t.diagnostic(`election: onLost fired ${took.toFixed(1)} ms after the force release's answer (${(at - sent).toFixed(1)} ms after the request)`);
  assert.ok(took < LOST_WITHIN_MS, `onLost fired ${Math.round(took)} ms after the force release's answer`);
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.kind, "vacant");
  assert.equal(reason.election, name);
  assert.equal(reason.fence, lead.fence);
  assert.equal(lead.signal.aborted, true);
  assert.equal(lead.keepingAlive, false);
  assert.equal(lead.watching, false);
  await assert.rejects(lead.proclaim("v2"), LeaseGoneError);
});
