// The client's API key (`createLeasegateClient(url, { apiKey })`) against a gateway that
// authenticates, at $LEASEGATE_AUTH_URL, with $LEASEGATE_API_KEY the key of a principal allowed to
// lock, inspect and force-release every name. tests/sdks/sdk_auth_test.go starts one serving
// HTTPS with a certificate of a private CA, which this process trusts through NODE_EXTRA_CA_CERTS,
// and runs this file against the SDK compiled afresh ($LEASEGATE_SDK_MODULE). Without
// LEASEGATE_AUTH_URL (`npm test`, whose gateway does not authenticate) only the checks that need no
// gateway run.
import assert from "node:assert/strict";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

const sdkModule = process.env.LEASEGATE_SDK_MODULE;
/** @type {typeof import("../dist/index.js")} */
const sdk = await import(sdkModule ? pathToFileURL(sdkModule).href : "../dist/index.js");
const { ForbiddenError, LeaseLostError, UnauthenticatedError, createLeasegateClient, inspectLock, lock } = sdk;

const baseUrl = process.env.LEASEGATE_AUTH_URL ?? "";
const apiKey = process.env.LEASEGATE_API_KEY ?? "";
const needsGateway = baseUrl ? {} : { skip: "LEASEGATE_AUTH_URL is not set (tests/sdks/sdk_auth_test.go sets it)" };
const TEST_TIMEOUT = 20_000;
const run = `ts-auth-${process.pid}-${Date.now().toString(36)}`;

const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls fn every 25 ms until it returns a truthy value; fails after timeoutMs. */
async function eventually(what, timeoutMs, fn) {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await delay(25);
  }
}

test("an apiKey holding a control character is refused at once", () => {
  assert.throws(() => createLeasegateClient("http://127.0.0.1:1", { apiKey: "lgk_abc\n" }), TypeError);
});

test("apiKey is sent as Authorization: Bearer on every request that sets none itself", async () => {
  const seen = [];
  const fetch = async (request) => {
    seen.push(request.headers.get("Authorization"));
    return new Response(JSON.stringify({ lock: "a", held: false, waiters: 0 }), { headers: { "Content-Type": "application/json" } });
  };
  const client = createLeasegateClient("http://127.0.0.1:1", { apiKey: "lgk_k1", fetch });
  await inspectLock(client, "a");
  await client.GET("/locks/{name}", { params: { path: { name: "a" } }, headers: { Authorization: "Bearer other" } });
  assert.deepEqual(seen, ["Bearer lgk_k1", "Bearer other"], "a call's own Authorization header is kept");
  seen.length = 0;
  await inspectLock(createLeasegateClient("http://127.0.0.1:1", { apiKey: "", fetch }), "a");
  assert.deepEqual(seen, [null], "no key, no header");
});

test("without a key the gateway answers 401: UnauthenticatedError with the problem's detail", { ...needsGateway, timeout: TEST_TIMEOUT }, async () => {
  const anonymous = createLeasegateClient(baseUrl);
  await assert.rejects(lock(anonymous, `${run}.anonymous`, { owner: "nobody" }), (e) => {
    assert.ok(e instanceof UnauthenticatedError, `${e}`);
    assert.equal(e.status, 401);
    assert.match(e.message, /Authorization: Bearer/);
    return true;
  });
  const wrong = createLeasegateClient(baseUrl, { apiKey: "lgk_not-a-key" });
  await assert.rejects(inspectLock(wrong, `${run}.anonymous`), UnauthenticatedError);
});

test("with the key: lock, inspect, keep alive through the events stream, release (over HTTPS)", { ...needsGateway, timeout: TEST_TIMEOUT }, async () => {
  assert.match(baseUrl, /^https:/, "the gateway serves HTTPS (its CA comes from NODE_EXTRA_CA_CERTS)");
  const client = createLeasegateClient(baseUrl, { apiKey });
  const name = `${run}.held`;
  const lease = await lock(client, name, { owner: "ts-worker", ttlMs: 30_000 });
  assert.equal((await inspectLock(client, name, { token: lease.token })).yours, true);
  lease.keepAlive();
  // The stream opens only with the key: without it the gateway answers 401 and it never does.
  await eventually("the events stream to open", 5_000, async () => lease.watching);
  await lease.renew();
  await lease.release();
  assert.equal((await inspectLock(client, name)).held, false);

  // A force release reaches the lease through its (authenticated) events stream.
  const forced = await lock(client, `${run}.forced`, { owner: "ts-worker", ttlMs: 30_000 });
  forced.keepAlive();
  await eventually("the events stream to open", 5_000, async () => forced.watching);
  const lost = new Promise((resolve) => forced.onLost(resolve));
  const { error } = await client.DELETE("/locks/{name}", { params: { path: { name: `${run}.forced` }, query: { force: true } } });
  assert.equal(error, undefined, JSON.stringify(error));
  const reason = await lost;
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.kind, "forced");
});

test("a name outside the principal's prefixes is 403: ForbiddenError", { ...needsGateway, timeout: TEST_TIMEOUT }, async () => {
  const limited = process.env.LEASEGATE_LIMITED_API_KEY ?? "";
  assert.ok(limited, "LEASEGATE_LIMITED_API_KEY is set with LEASEGATE_AUTH_URL");
  const client = createLeasegateClient(baseUrl, { apiKey: limited });
  await assert.rejects(lock(client, `${run}.outside`, { owner: "ts-worker" }), (e) => {
    assert.ok(e instanceof ForbiddenError, `${e}`);
    assert.equal(e.status, 403);
    assert.match(e.detail, /prefix/);
    return true;
  });
});
