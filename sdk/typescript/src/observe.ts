import type { LeasegateClient } from "./client.js";
import type { ElectionState } from "./election.js";
import { LeasegateProblemError, toLeasegateError } from "./errors.js";
import { delay } from "./retry.js";
import { sseEvents } from "./watch.js";

/** What every event of an election has: its `id` (`<ms>-<seq>`, for `lastEventId`), and `at`. */
interface ElectionEventBase {
  /** The event's id in the election's log; a `state`'s is the election's `last_event_id`. */
  id: string;
  election: string;
  /** When it happened (RFC 3339, Redis time). */
  at: string;
}

/**
 * The election as it stands (`GET /elections/{name}`'s body): first when observing without
 * `lastEventId`, or when the events after it are no longer in the log (`gap` true: some were lost).
 */
export type ElectionStateEvent = ElectionEventBase & Omit<ElectionState, "election"> & { type: "state"; gap: boolean };
/** A candidate was elected (before its campaign was answered), or the leader proclaimed a new value. */
export type LeaderValueEvent = ElectionEventBase & { type: "elected" | "proclaimed"; owner: string; value: string; fence: number };
/** The leader resigned, or its lease was found gone (`vacant`: it ran out, or was forced). */
export type LeaderEndEvent = ElectionEventBase & { type: "resigned" | "vacant"; owner: string; fence: number };
/** One event of an election, told apart by `type`. */
export type ElectionEvent = ElectionStateEvent | LeaderValueEvent | LeaderEndEvent;

/** Options of `observe()`. */
export interface ObserveOptions {
  /** Start after this event (the `id` of the last event received): nothing before it is repeated. */
  lastEventId?: string;
  /** Ends the iteration (the iterator then returns). */
  signal?: AbortSignal;
}

const TYPES = new Set(["state", "elected", "proclaimed", "resigned", "vacant"]);
/** Before reconnecting, in milliseconds; doubled while reconnections fail. */
const PAUSE_MIN_MS = 100;
const PAUSE_MAX_MS = 5_000;
/** A stream silent this long is taken for dead and reopened (the gateway sends a comment after 15 s). */
const IDLE_MS = 45_000;

/**
 * Observes the election `name` (`GET /elections/{name}/events`): an async iterator of its events,
 * in the log's order, from after `lastEventId` (without it: a `state` first). A stream that ends
 * (a gateway restart, another replica, `LEASEGATE_MAX_STREAM_LIFETIME`, a network error) is
 * reopened with `Last-Event-ID`, the id of the last event yielded, so nothing is missed or
 * repeated while the log still holds it; otherwise a `state` with `gap: true` says so. Reopening
 * pauses 100 ms, doubling up to 5 s while it fails. Ends when `signal` aborts or the loop breaks.
 * @throws LeasegateProblemError for an answer that reopening cannot mend (400, 401, 403, 404, 501)
 */
export async function* observe(
  client: LeasegateClient,
  name: string,
  options: ObserveOptions = {},
): AsyncGenerator<ElectionEvent, void, undefined> {
  let lastEventId = options.lastEventId;
  let pause = PAUSE_MIN_MS;
  const outer = options.signal;
  while (!outer?.aborted) {
    const request = new AbortController();
    const abort = () => request.abort(outer?.reason);
    outer?.addEventListener("abort", abort, { once: true });
    let idle: ReturnType<typeof setTimeout> | undefined;
    const touch = () => {
      clearTimeout(idle);
      if (!request.signal.aborted) idle = setTimeout(() => request.abort(new Error(`no event for ${IDLE_MS} ms`)), IDLE_MS);
    };
    let delivered = false;
    /** The answer's body, once fetch has answered: the finally below cancels it if it was never read. */
    let stream: ReadableStream<Uint8Array> | undefined;
    try {
      const { data, error, response } = await client.GET("/elections/{name}/events", {
        params: { path: { name }, header: { "Last-Event-ID": lastEventId } },
        parseAs: "stream",
        signal: request.signal,
      });
      stream = data as ReadableStream<Uint8Array> | undefined;
      if (outer?.aborted) return; // as the answer came: the abort need not have reached its body (see sseEvents)
      if (error !== undefined || !response.ok || !data) {
        const err = toLeasegateError(error, response);
        if ([400, 401, 403, 404, 405, 501].includes(response.status)) throw err;
      } else {
        touch();
        for await (const ev of sseEvents(data as ReadableStream<Uint8Array>, touch, request.signal)) {
          if (ev.id === undefined || !TYPES.has(ev.type)) continue; // `closed` (no id), or newer kinds
          let body: Record<string, unknown>;
          try {
            body = JSON.parse(ev.data) as Record<string, unknown>;
          } catch {
            continue;
          }
          lastEventId = ev.id;
          delivered = true;
          const event = { ...body, type: ev.type, id: ev.id } as ElectionEvent;
          if (event.type === "state") event.gap = body.gap === true;
          yield event;
        }
      }
    } catch (e) {
      if (outer?.aborted) return;
      if (e instanceof LeasegateProblemError) throw e;
      // Anything else (a network error, the stream cut off or idle): reopen it.
    } finally {
      clearTimeout(idle);
      outer?.removeEventListener("abort", abort);
      request.abort(new Error("stream closed"));
      // A body never read holds its connection open until it is cancelled.
      if (stream !== undefined && !stream.locked) stream.cancel().catch(() => {});
    }
    if (delivered) pause = PAUSE_MIN_MS;
    try {
      await delay(pause / 2 + Math.random() * (pause / 2), outer);
    } catch {
      return;
    }
    if (!delivered) pause = Math.min(2 * pause, PAUSE_MAX_MS);
  }
}
