import type { LeasegateClient, LockState } from "./client.js";
import { LeaseGoneError, toLeasegateError } from "./errors.js";
import { delay } from "./retry.js";

/**
 * One events stream a lease follows: its lock's (or semaphore's), with its token; or, for a
 * multi-lock (whose token the events endpoints refuse), each member's, without a token, looking
 * for the member's fence in the events; or, for a leadership, its election's events, from the
 * `state` (which shows who leads now), looking for its fence's end.
 */
export interface WatchTarget {
  resource: "lock" | "semaphore" | "election";
  name: string;
  /** The lease's token; undefined for a multi-lock's member and a leadership. */
  token: string | undefined;
  fence: number;
}

/**
 * How a watched lease was lost: the gateway said `expired` or `forced`, or found it `gone`; an
 * election's log told its leader's end, `vacant` or `resigned`.
 */
export type LossKind = "expired" | "forced" | "gone" | "vacant" | "resigned";

/** What a Watcher tells its lease. */
export interface WatchHooks {
  /** The stream opened (its first event arrived), or closed. */
  opened(open: boolean): void;
  /** The stream told that the lease was lost; the watcher has stopped. */
  lost(kind: LossKind, message: string, cause?: unknown): void;
  /**
   * A multi-lock member's stream does not show its fence held (after a gap): renew the group,
   * whose 410 loses the lease (naming the lost members, and freeing the others); resolves with
   * whether the lease is lost.
   */
  confirmGone(): Promise<boolean>;
}

/** Before reconnecting a stream that ended, in milliseconds; doubled while reconnections fail. */
const PAUSE_MIN_MS = 100;
const PAUSE_MAX_MS = 5_000;
/** A stream silent this long is taken for dead and reopened (the gateway sends a comment after 15 s). */
const IDLE_MS = 45_000;

/** One Server-Sent Event: its type, its data lines joined by newlines, and its id (if it has one). */
export interface SseEvent {
  type: string;
  data: string;
  id: string | undefined;
}

/**
 * Follows one WatchTarget's stream until `stop()` or the loss, reopening it after each end while
 * it runs (pausing 100 ms, doubling up to 5 s while reopening fails). A reopened stream is itself
 * the check that the lease survived the gap: the gateway answers 410 to a token whose lease no
 * longer holds the lock, and a member's first event shows whether it still holds its fence.
 */
export class Watcher {
  private readonly stopper = new AbortController();

  constructor(
    private readonly client: LeasegateClient,
    private readonly target: WatchTarget,
    private readonly hooks: WatchHooks,
  ) {}

  /** Starts following the stream. */
  start(): void {
    void this.run();
  }

  /** Stops following the stream: closes it and clears the watcher's timers at once. */
  stop(): void {
    this.stopper.abort(new Error("watch stopped"));
  }

  private get stopped(): boolean {
    return this.stopper.signal.aborted;
  }

  private async run(): Promise<void> {
    let pause = PAUSE_MIN_MS;
    while (!this.stopped) {
      let outcome: "ended" | "failed" | "done";
      try {
        outcome = await this.follow();
      } catch {
        outcome = "failed"; // a network error, or the stream cut off
      }
      if (outcome === "done" || this.stopped) return;
      if (outcome === "ended") pause = PAUSE_MIN_MS;
      try {
        await delay(pause / 2 + Math.random() * (pause / 2), this.stopper.signal);
      } catch {
        return; // stopped
      }
      if (outcome === "failed") pause = Math.min(2 * pause, PAUSE_MAX_MS);
    }
  }

  /**
   * Opens the stream and reads it until it ends: "ended" after a stream that delivered events,
   * "failed" when it could not be opened, "done" when there is nothing more to watch (the loss,
   * or a gateway that cannot stream this lease).
   */
  private async follow(): Promise<"ended" | "failed" | "done"> {
    const t = this.target;
    const request = new AbortController();
    let idle: ReturnType<typeof setTimeout> | undefined;
    const touch = () => {
      clearTimeout(idle);
      if (!request.signal.aborted) {
        idle = setTimeout(() => request.abort(new Error(`no event for ${IDLE_MS} ms`)), IDLE_MS);
      }
    };
    // stop() leaves no timer behind, at once: the caller may count them (or want the process to exit).
    const abort = () => {
      clearTimeout(idle);
      request.abort(this.stopper.signal.reason);
    };
    this.stopper.signal.addEventListener("abort", abort, { once: true });
    let opened = false;
    /** The answer's body, once fetch has answered: the finally below cancels it if it was never read. */
    let stream: ReadableStream<Uint8Array> | undefined;
    try {
      const header = t.token === undefined ? {} : { "Lease-Token": t.token };
      const options = { params: { path: { name: t.name }, header }, parseAs: "stream" as const, signal: request.signal };
      const { data, error, response } =
        t.resource === "lock"
          ? await this.client.GET("/locks/{name}/events", options)
          : t.resource === "semaphore"
            ? await this.client.GET("/semaphores/{name}/events", options)
            : // Without Last-Event-ID: the `state` first tells at once whether the lead survived a gap
              // (and a resumed stream with nothing new would answer nothing until its first event).
              await this.client.GET("/elections/{name}/events", { ...options, params: { path: { name: t.name } } });
      stream = data as ReadableStream<Uint8Array> | undefined;
      // Stopped as the answer came: the abort need not have reached its body (see sseEvents),
      // which the finally below cancels.
      if (this.stopped) return "done";
      if (error !== undefined || !response.ok || !data) {
        const err = toLeasegateError(error, response);
        if (err instanceof LeaseGoneError) {
          this.lose("gone", "the gateway answered 410 lease-gone when its events stream was reopened", err);
          return "done";
        }
        // A gateway without events streams, or a token they refuse: nothing to watch with.
        if ([400, 404, 405, 501].includes(response.status)) return "done";
        return "failed";
      }
      touch();
      for await (const ev of sseEvents(data as ReadableStream<Uint8Array>, touch, request.signal)) {
        if (this.stopped) return "done";
        if (!opened) {
          opened = true;
          this.hooks.opened(true);
        }
        if (await this.handle(ev)) return "done";
      }
      return opened ? "ended" : "failed";
    } catch (e) {
      if (this.stopped) return "done";
      if (opened) return "ended";
      throw e;
    } finally {
      clearTimeout(idle);
      this.stopper.signal.removeEventListener("abort", abort);
      request.abort(new Error("stream closed"));
      // A body never read holds its connection open until it is cancelled.
      if (stream !== undefined && !stream.locked) stream.cancel().catch(() => {});
      if (opened) this.hooks.opened(false);
    }
  }

  /** Acts on one event; resolves with whether it told of the loss. */
  private async handle(ev: SseEvent): Promise<boolean> {
    const t = this.target;
    if (t.resource === "election") return this.handleElection(ev);
    if (t.token !== undefined) {
      // A stream with the token says `lost` (its last event) after the expired or forced one.
      if (ev.type !== "lost") return false;
      const body = parse<{ reason?: string; at?: string }>(ev.data);
      const kind: LossKind = body?.reason === "expired" || body?.reason === "forced" ? body.reason : "gone";
      this.lose(kind, lossMessage(kind, body?.at));
      return true;
    }
    switch (ev.type) {
      case "state": {
        const state = parse<LockState>(ev.data);
        // If the renewal succeeds, the member is still held after all.
        if (state !== undefined && !holdsFence(state, t.fence)) return this.hooks.confirmGone();
        return false;
      }
      case "expired": {
        const body = parse<{ fence?: number; at?: string }>(ev.data);
        if (body?.fence !== t.fence) return false;
        this.lose("expired", `member "${t.name}": ${lossMessage("expired", body.at)}`);
        return true;
      }
      case "forced": {
        const body = parse<{ holds?: { fence?: number }[]; at?: string }>(ev.data);
        if (!body?.holds?.some((h) => h.fence === t.fence)) return false;
        this.lose("forced", `member "${t.name}": ${lossMessage("forced", body.at)}`);
        return true;
      }
    }
    return false;
  }

  /**
   * Acts on one event of a leadership's election; resolves with whether it told of the loss. The
   * log holds every leader's end before the next leader, so the end of this fence, or a later
   * leader, is the loss; a `state` (the stream's first event) not showing this fence leading is
   * checked with a renewal, whose 410 loses the lead.
   */
  private async handleElection(ev: SseEvent): Promise<boolean> {
    const t = this.target;
    const body = parse<{ fence?: number; at?: string; led?: boolean; leader?: { fence?: number } }>(ev.data);
    switch (ev.type) {
      case "state":
        if (body?.led === true && body.leader?.fence === t.fence) return false;
        return this.hooks.confirmGone();
      case "vacant":
      case "resigned":
        if (body?.fence !== t.fence) return false;
        this.lose(ev.type, lossMessage(ev.type, body.at));
        return true;
      case "elected":
        if (body?.fence === undefined || body.fence <= t.fence) return false;
        this.lose("gone", `another leader was elected${body.at === undefined ? "" : ` at ${body.at}`}`);
        return true;
    }
    return false;
  }

  private lose(kind: LossKind, message: string, cause?: unknown): void {
    if (this.stopped) return;
    this.stop();
    this.hooks.lost(kind, message, cause);
  }
}

function lossMessage(kind: LossKind, at: string | undefined): string {
  const when = at === undefined ? "" : ` at ${at}`;
  switch (kind) {
    case "expired":
      return `it expired on the gateway${when}`;
    case "forced":
      return `it was force-released${when}`;
    case "vacant":
      return `the election was announced vacant${when} (the lead ran out or was forced)`;
    case "resigned":
      return `the leader resigned${when} (with this lead's token, from elsewhere)`;
    default:
      return `the gateway found it gone${when}`;
  }
}

/** Whether `state` shows a hold with fence `fence`, or may (it lists only the first shared holders). */
function holdsFence(state: LockState, fence: number): boolean {
  if (!state.held) return false;
  if (state.fence === fence) return true;
  const holders = state.holders ?? [];
  return holders.some((h) => h.fence === fence) || (state.holder_count ?? 0) > holders.length;
}

function parse<T>(data: string): T | undefined {
  try {
    return JSON.parse(data) as T;
  } catch {
    return undefined;
  }
}

/**
 * The events of a text/event-stream body, comments skipped, each with its own `id` field (not
 * the last one seen before it, as EventSource keeps); `activity` is called on each
 * chunk read. An event cut short by the end of the stream is dropped, as the format wants.
 *
 * Once `signal` aborts, the body is cancelled (which closes its connection) and the events end.
 * Passing the same signal to fetch is not enough: Node's fetch (undici) follows it through the
 * `Request` it was given (openapi-fetch's), weakly, and nothing holds that Request once fetch has
 * answered; after a garbage collection, aborting the signal no longer reaches the body
 * (nodejs/node#55428), and a pending read waits for as long as the gateway keeps the stream open:
 * a multi-lock member's, or a stopped lease's, for good, keeping the process alive.
 */
export async function* sseEvents(
  body: ReadableStream<Uint8Array>,
  activity: () => void,
  signal?: AbortSignal,
): AsyncGenerator<SseEvent> {
  const reader = body.getReader();
  const cancel = () => void reader.cancel(signal?.reason).catch(() => {});
  if (signal?.aborted) cancel();
  else signal?.addEventListener("abort", cancel, { once: true });
  const decoder = new TextDecoder();
  let buffer = "";
  let type = "";
  let data: string[] | undefined;
  let id: string | undefined;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      activity();
      buffer += decoder.decode(value, { stream: true });
      for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
        let line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (type !== "" || data !== undefined) yield { type: type || "message", data: (data ?? []).join("\n"), id };
          type = "";
          data = undefined;
          id = undefined;
          continue;
        }
        if (line.startsWith(":")) continue; // a comment: the keep-alive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") type = value;
        else if (field === "data") (data ??= []).push(value);
        else if (field === "id" && !value.includes("\0")) id = value;
      }
    }
  } finally {
    signal?.removeEventListener("abort", cancel);
    reader.cancel().catch(() => {});
  }
}
