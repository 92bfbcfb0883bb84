// The SDK's events streams (a lease's watch, `observe()`) close once they are stopped, however
// the stop comes (stopWatching(), a loss, an aborted signal), even after a garbage collection:
// Node's fetch (undici) follows a request's signal through the `Request` it makes, which nothing
// holds once fetch has answered, so after a GC aborting the signal no longer reaches the response
// body (nodejs/node#55428). A stream the SDK left to that abort stayed open for as long as the
// gateway kept it (a multi-lock member's, for good), and kept the process alive: in about half of
// the full suite's runs, whose GCs came at the wrong time. Each test runs its scenario in a child
// node process with --expose-gc, forcing the GC at the worst moment, and wants the child to have no
// socket left open and to exit on its own. Needs a gateway at $LEASEGATE_URL (see e2e.test.mjs).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

const baseUrl = process.env.LEASEGATE_URL ?? "";
if (!baseUrl) {
  throw new Error(
    "LEASEGATE_URL is not set: these tests need a running gateway, e.g. " +
      "LEASEGATE_URL=http://127.0.0.1:8080 npm test (tests/sdks/typescript_sdk_test.go sets it)",
  );
}
/** The SDK under test: dist/, or $LEASEGATE_SDK_MODULE (another build of it). */
const sdkUrl = process.env.LEASEGATE_SDK_MODULE
  ? pathToFileURL(process.env.LEASEGATE_SDK_MODULE).href
  : new URL("../dist/index.js", import.meta.url).href;
const TEST_TIMEOUT = 30_000;
/** How long a child may take: a stream left open keeps it alive for good. */
const CHILD_TIMEOUT = 10_000;
const run = `tss-${process.pid}-${Date.now().toString(36)}`;

/**
 * What every child script starts with: the SDK, a client, `sleep`, `fullGc()` (two full
 * collections around a turn of the event loop, so that what is only weakly held goes), `until()`
 * and `openSockets()` (the TCP sockets keeping the process alive: the pool's idle ones do not).
 */
const prelude = `
  import { setTimeout as sleep } from "node:timers/promises";
  const sdk = await import(${JSON.stringify(sdkUrl)});
  const client = sdk.createLeasegateClient(process.env.LEASEGATE_URL);
  const fullGc = async () => { globalThis.gc(); await sleep(0); globalThis.gc(); };
  const until = async (what, ms, fn) => {
    for (const deadline = Date.now() + ms; !(await fn()); await sleep(10)) {
      if (Date.now() > deadline) throw new Error("timed out after " + ms + " ms waiting for " + what);
    }
  };
  const openSockets = () => process.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap").length;
  /** Waits up to 2 s for every socket to close; returns how many are left. */
  const socketsLeft = async () => {
    for (const deadline = Date.now() + 2_000; openSockets() > 0 && Date.now() < deadline; ) await sleep(10);
    return openSockets();
  };
`;

/**
 * Runs `script` (after the prelude) in a child node process with --expose-gc; resolves with what
 * it printed last (JSON) once it exits with 0, and fails when it does not exit by itself within
 * CHILD_TIMEOUT (it is then killed).
 */
function runChild(script) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--expose-gc", "--input-type=module", "-e", prelude + script], {
      env: { ...process.env, LEASEGATE_URL: baseUrl },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the child process did not exit within ${CHILD_TIMEOUT} ms (a stream left open?):\n${stdout}${stderr}`));
    }, CHILD_TIMEOUT);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`the child process exited with ${code} ${signal}:\n${stdout}${stderr}`));
      const last = stdout.trim().split("\n").pop() ?? "";
      try {
        resolve(JSON.parse(last));
      } catch {
        reject(new Error(`the child process printed no JSON:\n${stdout}${stderr}`));
      }
    });
  });
}

test("stopWatching() after a GC closes the lease's events stream", { timeout: TEST_TIMEOUT }, async () => {
  const result = await runChild(`
    const lease = await sdk.lock(client, ${JSON.stringify(`${run}.stop`)}, { owner: "watcher", ttlMs: 30_000 });
    lease.watch();
    await until("the events stream to open", 5_000, () => lease.watching);
    await fullGc(); // the Request that fetch followed the stream's signal through is gone
    lease.stopWatching();
    const left = await socketsLeft();
    await lease.release(); // (which would end the stream with the lease's token from the gateway's side)
    console.log(JSON.stringify({ left }));
  `);
  assert.deepEqual(result, { left: 0 }, "sockets still open after stopWatching()");
});

test("a multi-lock lost after a GC closes its members' events streams", { timeout: TEST_TIMEOUT }, async () => {
  // The members' streams (without a token) go on while the locks exist: only the SDK can end them.
  const result = await runChild(`
    const names = [${JSON.stringify(`${run}.group.a`)}, ${JSON.stringify(`${run}.group.b`)}];
    const group = await sdk.lockAll(client, names, { owner: "victim", ttlMs: 900 });
    group.keepAlive();
    await until("both members' streams to open", 5_000, () => group.watching);
    await fullGc();
    // Given back behind its back: the next renewal answers 410 and loses the group.
    const other = sdk.createLeasegateClient(process.env.LEASEGATE_URL);
    const { error } = await other.DELETE("/multilocks", { params: { header: { "Lease-Token": group.token } } });
    if (error !== undefined) throw new Error("DELETE /multilocks: " + JSON.stringify(error));
    await until("the group's signal to abort", 5_000, () => group.signal.aborted);
    const left = await socketsLeft();
    console.log(JSON.stringify({ kind: group.signal.reason.kind, watching: group.watching, left }));
  `);
  assert.deepEqual(result, { kind: "gone", watching: false, left: 0 }, "sockets still open after the loss");
});

test("observe() ends and closes its stream when its signal aborts after a GC", { timeout: TEST_TIMEOUT }, async () => {
  const result = await runChild(`
    const stop = new AbortController();
    let first;
    let ended = false;
    const loop = (async () => {
      for await (const ev of sdk.observe(client, ${JSON.stringify(`${run}.observe`)}, { signal: stop.signal })) first ??= ev.type;
      ended = true;
    })();
    await until("the state event", 5_000, () => first !== undefined);
    await fullGc();
    stop.abort();
    await until("the iteration to end", 2_000, () => ended).catch(() => {});
    if (ended) await loop;
    console.log(JSON.stringify({ first, ended, left: await socketsLeft() }));
  `);
  assert.deepEqual(result, { first: "state", ended: true, left: 0 }, "the observer went on after its signal aborted");
});
