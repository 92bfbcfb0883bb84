/**
 * TypeScript client for leasegate, the HTTP/JSON distributed-lock gateway.
 *
 * `createLeasegateClient` returns an openapi-fetch client typed by the `paths` generated from
 * openapi.yaml (src/schema.d.ts): every operation of the contract, with typed bodies, params and
 * responses. On top of it, a small layer for what generation cannot express: `lock()` turns the
 * acquire call (including the `wait_ms` long-poll) into a `Lease` that carries its token, renews
 * (by hand or with `keepAlive()`), re-enters and releases itself, and problem+json answers become
 * typed errors.
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
export type InvalidParam = components["schemas"]["InvalidParam"];
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
  ShuttingDown: "urn:leasegate:problem:shutting-down",
  TooManyWaiters: "urn:leasegate:problem:too-many-waiters",
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
  /** With 400 `invalid-request`: every rejected input and why (empty otherwise). */
  readonly invalidParams: InvalidParam[];
  /** The problem body as received. */
  readonly problem: Problem;

  constructor(problem: Problem) {
    const invalidParams = problem.invalid_params ?? [];
    const params = invalidParams.map((p) => `${p.name}: ${p.reason}`).join("; ");
    super(`${problem.title} (${problem.status} ${problem.type}): ${problem.detail}${params ? ` [${params}]` : ""}`);
    this.name = new.target.name;
    this.type = problem.type;
    this.title = problem.title;
    this.status = problem.status;
    this.detail = problem.detail;
    this.requestId = problem.request_id;
    this.invalidParams = invalidParams;
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

/**
 * The reason `lease.signal` is aborted with: the lease is lost, or may be lost before another
 * renewal could succeed. Stop the work the lock protects.
 */
export class LeaseLostError extends Error {
  /** The lock name. */
  readonly lock: string;
  /** The fence of the lost lease. */
  readonly fence: number;
  /**
   * `"gone"`: the gateway answered 410 `lease-gone` to a renewal, re-entry or release (`cause` is
   * the LeaseGoneError). `"lapsing"`: keep-alive had no successful renewal and the lease's
   * `validUntil` is less than the safety margin away (`cause` is the last renewal's error, if any).
   */
  readonly kind: "gone" | "lapsing";

  constructor(lock: string, fence: number, kind: "gone" | "lapsing", message: string, cause?: unknown) {
    super(`lease on lock "${lock}" (fence ${fence}) lost: ${message}`, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.lock = lock;
    this.fence = fence;
    this.kind = kind;
  }
}

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

/** How many times one call is sent at most when it fails with a network error or a 503. */
const MAX_TRIES = 3;
/** The pause before the 2nd and 3rd try, in milliseconds (each plus up to 50% jitter). */
const RETRY_BACKOFF_MS = [100, 300] as const;

/**
 * Sends one logical call through `call` (which builds and sends the request; every try must
 * carry the same Idempotency-Key) up to MAX_TRIES times: again after a network error (fetch's
 * TypeError) and, with `retry503`, after a 503 answer. It resolves with the last answer, or
 * rejects with the last network error, or with `signal`'s reason once it is aborted.
 */
async function withRetries<R extends { response: Response }>(
  call: () => Promise<R>,
  signal: AbortSignal | undefined,
  retry503: boolean,
): Promise<R> {
  for (let attempt = 1; ; attempt++) {
    let answer: R;
    try {
      answer = await call();
    } catch (e) {
      if (signal?.aborted || !(e instanceof TypeError) || attempt >= MAX_TRIES) throw e;
      await delay(backoff(attempt), signal);
      continue;
    }
    if (!retry503 || answer.response.status !== 503 || attempt >= MAX_TRIES) return answer;
    await delay(backoff(attempt), signal);
  }
}

function backoff(attempt: number): number {
  const base = RETRY_BACKOFF_MS[Math.min(attempt, RETRY_BACKOFF_MS.length) - 1] ?? 100;
  return base * (1 + Math.random() / 2);
}

/** A fresh `Idempotency-Key`: one per logical call, sent on each of its tries. */
function idempotencyKey(): string {
  return globalThis.crypto.randomUUID();
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
 * Every request of one `lock()` call carries the same `Idempotency-Key`. A request that fails
 * with a network error is sent again (at most 3 tries); so is a 503 of a try-once acquire. A 503
 * during a wait is retried within the wait, keeping the queue ticket it carries. A 410 (a retry
 * whose first try was granted a lease that no longer holds the lock) starts over with a new key,
 * at most twice.
 *
 * @throws LockHeldError when the lock is held (after waiting `waitMs`, if given)
 * @throws LeasegateProblemError for any other problem (invalid name or body, 503, ...)
 */
export async function lock(client: LeasegateClient, name: string, options: LockOptions): Promise<Lease> {
  const deadline = Date.now() + (options.waitMs ?? 0);
  const perRequest = options.maxWaitPerRequestMs ?? 30_000;
  const waiting = options.waitMs !== undefined && options.waitMs > 0;
  let key = idempotencyKey();
  let restarts = 0;
  let queueTicket: string | undefined;
  for (;;) {
    // Taken before the first try: a retry may be answered with what an earlier try was granted.
    const sentAt = performance.now();
    const { data, error, response } = await withRetries(
      () => {
        const body = acquireBody(options);
        if (waiting) {
          body.wait_ms = Math.max(1, Math.min(deadline - Date.now(), perRequest));
          if (queueTicket !== undefined) body.queue_ticket = queueTicket;
        }
        return client.POST("/locks/{name}", {
          params: { path: { name }, header: { "Idempotency-Key": key } },
          body,
          signal: options.signal,
        });
      },
      options.signal,
      !waiting,
    );
    if (error === undefined && data !== undefined) {
      const lease = new Lease(client, name, data, response.status === 201, sentAt);
      // The lease's TTL started at its grant, after the request was sent: after a long wait,
      // validUntil (counted from the send) would already be near. Renew now to count from a
      // request sent after the grant; on failure the earlier, conservative bound stands.
      if (!data.watchdog && performance.now() - sentAt > safetyMarginMs(data.ttl_ms)) {
        await lease.renew().catch(() => undefined);
      }
      return lease;
    }
    const err = toLeasegateError(error, response);
    if (err instanceof LeaseGoneError && restarts < 2) {
      // The gateway granted an earlier try of this key a lease that is gone already (given back
      // because its answer did not arrive, or expired): ask anew.
      key = idempotencyKey();
      restarts++;
      continue;
    }
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

/** Resolves after `ms`, or rejects with `signal`'s reason once it is aborted. */
function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
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
 * How long before its lease can lapse keep-alive gives up on it, and how often it retries a failed
 * renewal: a tenth of the TTL, between 50 ms and 1 s (the CLI's `leasegate run` uses the same).
 */
export function safetyMarginMs(ttlMs: number): number {
  return Math.min(Math.max(ttlMs / 10, 50), 1000);
}

/** Options of `lease.keepAlive()`. */
export interface KeepAliveOptions {
  /** The TTL each renewal sets, in milliseconds (default: the lease's `ttlMs` when keepAlive is called). */
  ttlMs?: number;
  /** Called with the grant of each successful renewal. */
  onRenew?: (grant: Grant) => void;
  /** Called with the error of each failed renewal (keep-alive retries it until the lease would lapse). */
  onRenewError?: (error: unknown) => void;
}

/** Options of the calls a `Lease` makes. */
export interface CallOptions {
  /** Aborts the call, its retries included. */
  signal?: AbortSignal;
}

interface KeepAliveState {
  readonly ttl: number;
  readonly period: number;
  readonly margin: number;
  readonly options: KeepAliveOptions;
  renewTimer: ReturnType<typeof setTimeout> | undefined;
  deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  /** Aborts the renewal in flight, if any. */
  inflight: AbortController | undefined;
  /** The error of the latest renewal, while it failed. */
  lastError: unknown;
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

  private validUntilMs: number;
  private readonly lost = new AbortController();
  private keeper: KeepAliveState | undefined;

  /**
   * @param sentAt `performance.now()` taken just before the request that produced `grant` was
   *   sent (default: now, which is later than that and so trusts the lease a little too long).
   */
  constructor(
    readonly client: LeasegateClient,
    readonly name: string,
    grant: Grant,
    created = true,
    sentAt: number = performance.now(),
  ) {
    this.grant = grant;
    this.holds = grant.holds;
    this.created = created;
    this.validUntilMs = sentAt + grant.ttl_ms;
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
  /** When the lease expires unless renewed, by the gateway's clock. */
  get expiresAt(): Date {
    return new Date(this.grant.expires_at);
  }

  /**
   * When the lease lapses at the earliest unless renewed, on the `performance.now()` clock: the
   * TTL of its latest grant, renewal or re-entry, counted from just before that call was sent
   * (its first try, as a retry may be answered with what an earlier try got). Work under the lease
   * must be over by then.
   */
  get validUntil(): number {
    return this.validUntilMs;
  }
  /** `validUntil - performance.now()`: negative once the lease may have lapsed. */
  get remainingMs(): number {
    return this.validUntilMs - performance.now();
  }

  /**
   * Aborted, with a `LeaseLostError` as its `reason`, once the lease is lost: when a renewal,
   * re-entry or release answers 410 `lease-gone`, or when keep-alive reaches `validUntil` minus
   * the safety margin without a successful renewal. Never aborted by a successful release or by
   * `stopKeepAlive()`. Pass it to the work the lock protects (`fetch(url, { signal })`,
   * `signal.throwIfAborted()` between steps).
   */
  get signal(): AbortSignal {
    return this.lost.signal;
  }

  /** Whether keep-alive is running. */
  get keepingAlive(): boolean {
    return this.keeper !== undefined;
  }

  /** The path and headers of a call with this lease's token and Idempotency-Key `key`. */
  private leaseParams(key: string) {
    return { path: { name: this.name }, header: { "Lease-Token": this.token, "Idempotency-Key": key } };
  }

  /** Records a grant whose request was first sent at `sentAt`. */
  private granted(grant: Grant, sentAt: number): void {
    this.grant = grant;
    this.holds = grant.holds;
    this.validUntilMs = sentAt + grant.ttl_ms;
    if (this.keeper !== undefined) this.armDeadline(this.keeper);
  }

  /** Stops keep-alive and aborts `signal` with a LeaseLostError (once). */
  private lose(kind: "gone" | "lapsing", message: string, cause?: unknown): void {
    this.stopKeepAlive();
    if (!this.lost.signal.aborted) {
      this.lost.abort(new LeaseLostError(this.name, this.fence, kind, message, cause));
    }
  }

  private fail(error: unknown, response: Response): LeasegateProblemError {
    const err = toLeasegateError(error, response);
    if (err instanceof LeaseGoneError) this.lose("gone", "the gateway answered 410 lease-gone", err);
    return err;
  }

  /**
   * Resets the lease's TTL to `ttlMs` (default: its current TTL). Sends an `Idempotency-Key`
   * and tries up to 3 times on a network error or a 503.
   * @throws LeaseGoneError when the lease no longer holds the lock (and aborts `signal`)
   */
  async renew(ttlMs?: number, options: CallOptions = {}): Promise<Grant> {
    const key = idempotencyKey();
    const sentAt = performance.now();
    const { data, error, response } = await withRetries(
      () =>
        this.client.POST("/locks/{name}/renew", {
          params: this.leaseParams(key),
          body: ttlMs === undefined ? undefined : { ttl_ms: ttlMs },
          signal: options.signal,
        }),
      options.signal,
      true,
    );
    if (error !== undefined || data === undefined) throw this.fail(error, response);
    this.granted(data, sentAt);
    return data;
  }

  /**
   * Re-enters the lease (same owner and token): one more hold, same fence, TTL reset to `ttlMs`
   * (gateway default: 30000). Sends an `Idempotency-Key` and tries up to 3 times on a network
   * error or a 503.
   * @throws LeaseGoneError when the lease no longer holds the lock (and aborts `signal`)
   */
  async reenter(options: Omit<LockOptions, "owner" | "waitMs"> = {}): Promise<Grant> {
    const key = idempotencyKey();
    const sentAt = performance.now();
    const { data, error, response } = await withRetries(
      () =>
        this.client.POST("/locks/{name}", {
          params: this.leaseParams(key),
          body: acquireBody({ ...options, owner: this.owner }),
          signal: options.signal,
        }),
      options.signal,
      true,
    );
    if (error !== undefined || data === undefined) throw this.fail(error, response);
    this.granted(data, sentAt);
    return data;
  }

  /**
   * Releases one hold; the lock is free once `released` is true (no holds left). Sends an
   * `Idempotency-Key` and tries up to 3 times on a network error or a 503.
   *
   * Releasing the last hold (`holds` 1) stops keep-alive before the request is sent, so a failed
   * release lets the lease lapse instead of renewing it on. Releasing one of several holds leaves
   * keep-alive running; it stops once an answer says `released: true`.
   * @throws LeaseGoneError when the lease no longer holds the lock (and aborts `signal`)
   */
  async release(options: CallOptions = {}): Promise<Release> {
    if (this.holds <= 1) this.stopKeepAlive();
    const key = idempotencyKey();
    const { data, error, response } = await withRetries(
      () => this.client.DELETE("/locks/{name}", { params: this.leaseParams(key), signal: options.signal }),
      options.signal,
      true,
    );
    if (error !== undefined || data === undefined) throw this.fail(error, response);
    this.holds = data.holds;
    if (data.released) this.stopKeepAlive();
    return data;
  }

  /**
   * Keeps the lease alive from this process, with the rule of the CLI's `leasegate run`: renews
   * it (with `ttlMs`, default the lease's TTL) once a third of the TTL has passed since its latest
   * grant or renewal was sent, so about every ttl/3; retries a failed renewal every safety margin
   * (a tenth of the TTL, 50 ms to 1 s); and aborts `signal` with a LeaseLostError when a renewal
   * answers 410, or when `validUntil` minus the margin is reached without a successful renewal.
   * Each renewal (its retries included) may take at most ttl/3.
   *
   * Runs until `stopKeepAlive()`, the release of the last hold, or the loss; each of these clears
   * its timers. While it runs, its timers keep the Node process alive. Calling it again restarts it
   * with the new options.
   * @throws LeaseLostError (the `signal`'s reason) when the lease is already lost
   */
  keepAlive(options: KeepAliveOptions = {}): void {
    if (this.lost.signal.aborted) throw this.lost.signal.reason;
    this.stopKeepAlive();
    const ttl = options.ttlMs ?? this.ttlMs;
    const k: KeepAliveState = {
      ttl,
      period: ttl / 3,
      margin: safetyMarginMs(ttl),
      options,
      renewTimer: undefined,
      deadlineTimer: undefined,
      inflight: undefined,
      lastError: undefined,
    };
    this.keeper = k;
    this.armDeadline(k);
    // Due once the lease has no more than ttl - ttl/3 left, and at most ttl/3 from now.
    const due = this.validUntilMs - (k.ttl - k.period) - performance.now();
    this.scheduleRenewal(k, Math.min(Math.max(due, 0), k.period));
  }

  /** Stops keep-alive: clears its timers and aborts a renewal in flight. Does not abort `signal`. */
  stopKeepAlive(): void {
    const k = this.keeper;
    if (k === undefined) return;
    this.keeper = undefined;
    clearTimeout(k.renewTimer);
    clearTimeout(k.deadlineTimer);
    k.inflight?.abort(new Error("keep-alive stopped"));
  }

  private armDeadline(k: KeepAliveState): void {
    clearTimeout(k.deadlineTimer);
    k.deadlineTimer = setTimeout(() => {
      if (this.keeper !== k) return;
      const left = Math.round(this.validUntilMs - performance.now());
      this.lose("lapsing", `no renewal succeeded, and it may lapse in ${left} ms`, k.lastError);
    }, Math.max(0, this.validUntilMs - k.margin - performance.now()));
  }

  private scheduleRenewal(k: KeepAliveState, ms: number): void {
    clearTimeout(k.renewTimer);
    k.renewTimer = setTimeout(() => void this.renewForKeepAlive(k), ms);
  }

  private async renewForKeepAlive(k: KeepAliveState): Promise<void> {
    if (this.keeper !== k) return;
    const inflight = new AbortController();
    k.inflight = inflight;
    const timeout = setTimeout(
      () => inflight.abort(new Error(`renewal took longer than ${Math.round(k.period)} ms`)),
      k.period,
    );
    let grant: Grant;
    try {
      grant = await this.renew(k.ttl, { signal: inflight.signal });
    } catch (e) {
      if (this.keeper !== k) return; // stopped, or lost (a 410 already aborted `signal`)
      const err = inflight.signal.aborted ? inflight.signal.reason : e;
      k.lastError = err;
      this.scheduleRenewal(k, k.margin);
      k.options.onRenewError?.(err);
      return;
    } finally {
      clearTimeout(timeout);
      if (k.inflight === inflight) k.inflight = undefined;
    }
    if (this.keeper !== k) return;
    k.lastError = undefined;
    this.scheduleRenewal(k, k.period);
    k.options.onRenew?.(grant);
  }
}
