/**
 * TypeScript client for leasegate, the HTTP/JSON distributed-lock gateway.
 *
 * `createLeasegateClient` returns an openapi-fetch client typed by the `paths` generated from
 * openapi.yaml (src/schema.d.ts): every operation of the contract, with typed bodies, params and
 * responses. On top of it, a small layer for what generation cannot express: `lock()` turns the
 * acquire call (including the `wait_ms` long-poll) into a `Lease` that carries its token and
 * renews, re-enters and releases itself, and problem+json answers become typed errors.
 */
import createClient, { type Client, type ClientOptions } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, operations, paths } from "./schema.js";

/** The openapi-fetch client over leasegate's operations. */
export type LeasegateClient = Client<paths>;

export type Grant = components["schemas"]["Grant"];
export type Release = components["schemas"]["Release"];
export type LockState = components["schemas"]["LockState"];
export type Problem = components["schemas"]["Problem"];
export type AcquireRequest = components["schemas"]["AcquireRequest"];

/** The stable problem `type` URIs of leasegate's problem+json errors. */
export const ProblemType = {
  InvalidRequest: "urn:leasegate:problem:invalid-request",
  InvalidLockName: "urn:leasegate:problem:invalid-lock-name",
  InvalidLeaseToken: "urn:leasegate:problem:invalid-lease-token",
  BodyTooLarge: "urn:leasegate:problem:body-too-large",
  LockHeld: "urn:leasegate:problem:lock-held",
  LeaseGone: "urn:leasegate:problem:lease-gone",
  NotFound: "urn:leasegate:problem:not-found",
  MethodNotAllowed: "urn:leasegate:problem:method-not-allowed",
  BackendUnavailable: "urn:leasegate:problem:backend-unavailable",
  Internal: "urn:leasegate:problem:internal",
} as const;

/**
 * Creates a client for the gateway at `baseUrl` (e.g. `http://127.0.0.1:8080`). `options` are
 * openapi-fetch's (custom `fetch`, default `headers`, ...).
 */
export function createLeasegateClient(
  baseUrl: string,
  options: Omit<ClientOptions, "baseUrl"> = {},
): LeasegateClient {
  return createClient<paths>({ ...options, baseUrl: baseUrl.replace(/\/+$/, "") });
}

/** An error answer of the gateway: an RFC 9457 problem. Switch on `type`, never on `title`. */
export class LeasegateProblemError extends Error {
  /** The problem type URI, one of `ProblemType` (or `about:blank` for a non-problem body). */
  readonly type: string;
  readonly title: string;
  /** The HTTP status code. */
  readonly status: number;
  readonly detail: string;
  /** The request's `X-Request-Id`, to find it in the gateway's log. */
  readonly requestId: string | undefined;
  /** The problem body as received. */
  readonly problem: Problem;

  constructor(problem: Problem) {
    super(`${problem.title} (${problem.status} ${problem.type}): ${problem.detail}`);
    this.name = new.target.name;
    this.type = problem.type;
    this.title = problem.title;
    this.status = problem.status;
    this.detail = problem.detail;
    this.requestId = problem.request_id;
    this.problem = problem;
  }
}

/** 409 `lock-held`: another lease holds the lock (or others wait for it). */
export class LockHeldError extends LeasegateProblemError {
  /** The holder's remaining time to live in milliseconds. */
  readonly retryAfterMs: number;
  /** How long the request waited, when it was sent with `waitMs` > 0. */
  readonly waitedMs: number | undefined;
  /** After a wait: resumes this wait's place in the queue when sent with the next one (`lock()` does). */
  readonly queueTicket: string | undefined;

  constructor(problem: Problem, retryAfterHeader?: string | null) {
    super(problem);
    const header = Number(retryAfterHeader);
    this.retryAfterMs = problem.retry_after_ms ?? (Number.isFinite(header) ? header * 1000 : 0);
    this.waitedMs = problem.waited_ms;
    this.queueTicket = problem.queue_ticket;
  }
}

/** 410 `lease-gone`: the lease no longer holds the lock (it expired or was fully released). */
export class LeaseGoneError extends LeasegateProblemError {}

function isProblem(body: unknown): body is Problem {
  if (typeof body !== "object" || body === null) return false;
  const p = body as Record<string, unknown>;
  return typeof p.type === "string" && typeof p.status === "number";
}

/**
 * Turns an openapi-fetch `error` and its `response` into the matching typed error. A body that
 * is not a problem (a proxy's HTML page, say) becomes a LeasegateProblemError of type
 * `about:blank` carrying the response status.
 */
export function toLeasegateError(error: unknown, response: Response): LeasegateProblemError {
  const problem: Problem = isProblem(error)
    ? { ...error, title: error.title ?? "", detail: error.detail ?? "" }
    : {
        type: "about:blank",
        title: response.statusText || "HTTP error",
        status: response.status,
        detail: typeof error === "string" ? error.slice(0, 500) : JSON.stringify(error ?? null),
      };
  switch (problem.type) {
    case ProblemType.LockHeld:
      return new LockHeldError(problem, response.headers.get("Retry-After"));
    case ProblemType.LeaseGone:
      return new LeaseGoneError(problem);
    default:
      return new LeasegateProblemError(problem);
  }
}

/** Options of `lock()`. */
export interface LockOptions {
  /** Who asks for the lock, 1-128 printable characters. */
  owner: string;
  /** Lease time to live in milliseconds (gateway default: 30000). */
  ttlMs?: number;
  /**
   * How long to wait for the lock, in FIFO order (0 or absent: try once). A wait longer than
   * `maxWaitPerRequestMs` is split into successive long-polls that keep their place in line.
   */
  waitMs?: number;
  /**
   * The longest one long-poll may last (default 30000): keep it within the gateway's
   * `LEASEGATE_MAX_WAIT` (60 s by default) and your HTTP stack's timeouts.
   */
  maxWaitPerRequestMs?: number;
  /** Have the gateway renew the lease every ttl/3 until it is released. */
  watchdog?: boolean;
  /** With `watchdog`: stop renewing this many milliseconds after the grant. */
  maxHoldMs?: number;
  /** Aborts the request; a waiting request leaves the gateway's queue at once. */
  signal?: AbortSignal;
}

/**
 * Acquires the lock `name`. Resolves with the granted `Lease`; with `waitMs` > 0 the gateway
 * long-polls until the lock is handed over or `waitMs` runs out. A long wait is a series of
 * long-polls; each presents the queue ticket of the one before, so the wait keeps its place.
 *
 * @throws LockHeldError when the lock is held (after waiting `waitMs`, if given)
 * @throws LeasegateProblemError for any other problem (invalid name or body, 503, ...)
 */
export async function lock(client: LeasegateClient, name: string, options: LockOptions): Promise<Lease> {
  const deadline = Date.now() + (options.waitMs ?? 0);
  const perRequest = options.maxWaitPerRequestMs ?? 30_000;
  const waiting = options.waitMs !== undefined && options.waitMs > 0;
  let queueTicket: string | undefined;
  for (;;) {
    const body = acquireBody(options);
    if (waiting) {
      body.wait_ms = Math.max(1, Math.min(deadline - Date.now(), perRequest));
      if (queueTicket !== undefined) body.queue_ticket = queueTicket;
    }
    const { data, error, response } = await client.POST("/locks/{name}", {
      params: { path: { name } },
      body,
      signal: options.signal,
    });
    if (error === undefined && data !== undefined) return new Lease(client, name, data, response.status === 201);
    const err = toLeasegateError(error, response);
    if (!waiting || Date.now() >= deadline) throw err;
    if (err.status === 409) {
      if (err.problem.queue_ticket === undefined) throw err;
      queueTicket = err.problem.queue_ticket;
    } else if (err.status === 503) {
      // A replica shutting down (or full, or without Redis): retry within the wait, keeping the place.
      if (err.problem.queue_ticket !== undefined) queueTicket = err.problem.queue_ticket;
      await delay(Math.min(1000, Math.max(0, deadline - Date.now())), options.signal);
    } else {
      throw err;
    }
  }
}

function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });
}

function acquireBody(o: Omit<LockOptions, "signal">): AcquireRequest {
  const body: AcquireRequest = { owner: o.owner };
  if (o.ttlMs !== undefined) body.ttl_ms = o.ttlMs;
  if (o.waitMs !== undefined) body.wait_ms = o.waitMs;
  if (o.watchdog !== undefined) body.watchdog = o.watchdog;
  if (o.maxHoldMs !== undefined) body.max_hold_ms = o.maxHoldMs;
  return body;
}

/**
 * A granted lease. Its fields follow the latest grant (renewal, re-entry) and release. Pass
 * `fence` to the resource the lock protects with every write.
 */
export class Lease {
  /** The latest grant body. */
  grant: Grant;
  /** Holds left: 1 after a new grant, +1 per re-entry, -1 per release; 0 once the lock is free. */
  holds: number;
  /** Whether the acquire made a new lease (201) rather than re-entering one (200). */
  readonly created: boolean;

  constructor(
    readonly client: LeasegateClient,
    readonly name: string,
    grant: Grant,
    created = true,
  ) {
    this.grant = grant;
    this.holds = grant.holds;
    this.created = created;
  }

  /** The lease token (sent as `Lease-Token`). */
  get token(): string {
    return this.grant.token;
  }
  /** The fencing token: greater than every fence granted earlier for this lock name. */
  get fence(): number {
    return this.grant.fence;
  }
  get owner(): string {
    return this.grant.owner;
  }
  get ttlMs(): number {
    return this.grant.ttl_ms;
  }
  get watchdog(): boolean {
    return this.grant.watchdog;
  }
  /** When the lease expires unless renewed. */
  get expiresAt(): Date {
    return new Date(this.grant.expires_at);
  }

  private get leaseParams() {
    return { path: { name: this.name }, header: { "Lease-Token": this.token } };
  }

  /**
   * Resets the lease's TTL to `ttlMs` (default: its current TTL).
   * @throws LeaseGoneError when the lease no longer holds the lock
   */
  async renew(ttlMs?: number): Promise<Grant> {
    const { data, error, response } = await this.client.POST("/locks/{name}/renew", {
      params: this.leaseParams,
      body: ttlMs === undefined ? undefined : { ttl_ms: ttlMs },
    });
    if (error !== undefined || data === undefined) throw toLeasegateError(error, response);
    this.grant = data;
    this.holds = data.holds;
    return data;
  }

  /**
   * Re-enters the lease (same owner and token): one more hold, same fence, TTL reset to `ttlMs`
   * (gateway default: 30000).
   * @throws LeaseGoneError when the lease no longer holds the lock
   */
  async reenter(options: Omit<LockOptions, "owner" | "waitMs"> = {}): Promise<Grant> {
    const { data, error, response } = await this.client.POST("/locks/{name}", {
      params: this.leaseParams,
      body: acquireBody({ ...options, owner: this.owner }),
      signal: options.signal,
    });
    if (error !== undefined || data === undefined) throw toLeasegateError(error, response);
    this.grant = data;
    this.holds = data.holds;
    return data;
  }

  /**
   * Releases one hold; the lock is free once `released` is true (no holds left).
   * @throws LeaseGoneError when the lease no longer holds the lock
   */
  async release(): Promise<Release> {
    const { data, error, response } = await this.client.DELETE("/locks/{name}", {
      params: this.leaseParams,
    });
    if (error !== undefined || data === undefined) throw toLeasegateError(error, response);
    this.holds = data.holds;
    return data;
  }
}
