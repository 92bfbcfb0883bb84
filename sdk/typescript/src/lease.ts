import type { Grant, LeasegateClient, Mode, Release } from "./client.js";
import {
  LeaseGoneError,
  LeaseLostError,
  type LeaseLostKind,
  type LeaseResource,
  type LeasegateProblemError,
  toLeasegateError,
} from "./errors.js";
import { type Answer, idempotencyKey, withRetries } from "./retry.js";
import { type WatchTarget, Watcher } from "./watch.js";

/** What every grant body has: a lock's (`Grant`) or a semaphore's (`SemaphoreGrant`). */
export type LeaseGrant = Pick<Grant, "owner" | "token" | "fence" | "ttl_ms" | "expires_at" | "holds" | "watchdog"> & {
  mode?: Mode;
};

/** What every release body has: a lock's (`Release`) or a semaphore's (`SemaphoreRelease`). */
export type LeaseRelease = Pick<Release, "released" | "holds"> & { mode?: Mode };

/**
 * How long before its lease can lapse keep-alive gives up on it, and how often it retries a failed
 * renewal: a tenth of the TTL, between 50 ms and 1 s (the CLI's `leasegate run` uses the same).
 */
export function safetyMarginMs(ttlMs: number): number {
  return Math.min(Math.max(ttlMs / 10, 50), 1000);
}

/** Options of `lease.keepAlive()`; `G` is the lease's grant body. */
export interface KeepAliveOptions<G = Grant> {
  /** The TTL each renewal sets, in milliseconds (default: the lease's `ttlMs` when keepAlive is called). */
  ttlMs?: number;
  /** Called with the grant of each successful renewal. */
  onRenew?: (grant: G) => void;
  /** Called with the error of each failed renewal (keep-alive retries it until the lease would lapse). */
  onRenewError?: (error: unknown) => void;
  /**
   * Also watch the lease's events stream while keep-alive runs (`lease.watch()`), so that a force
   * release or an expiry on the gateway aborts `signal` within milliseconds instead of at the next
   * renewal. Default true; it costs one more HTTP connection (a multi-lock: one per member) for as
   * long as keep-alive runs.
   */
  watch?: boolean;
}

/** Options of the calls a lease makes. */
export interface CallOptions {
  /** Aborts the call, its retries included. */
  signal?: AbortSignal;
}

/** Options of `inspectLock()` and `inspectSemaphore()`. */
export interface InspectOptions extends CallOptions {
  /** A lease token: the answer then tells whether that lease holds (`yours`). */
  token?: string;
}

interface KeepAliveState<G> {
  readonly ttl: number;
  readonly period: number;
  readonly options: KeepAliveOptions<G>;
  renewTimer: ReturnType<typeof setTimeout> | undefined;
  deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  /** Aborts the renewal in flight, if any. */
  inflight: AbortController | undefined;
  /** The error of the latest renewal, while it failed. */
  lastError: unknown;
}

/** What every grant body a `RenewableLease` follows has: a lock's, a semaphore's or a multi-lock's. */
export type RenewableGrant = Pick<Grant, "owner" | "token" | "ttl_ms" | "expires_at" | "watchdog">;

/**
 * What every lease shares, whatever it holds (a lock, a semaphore's permit, the members of a
 * multi-lock): its latest grant, `validUntil`, `renew()`, keep-alive and the `signal` that aborts
 * once the lease is lost. Subclasses send the renewal and name what was lost.
 */
export abstract class RenewableLease<G extends RenewableGrant> {
  /** The latest grant body. */
  grant: G;

  private validUntilMs: number;
  private readonly lost = new AbortController();
  private keeper: KeepAliveState<G> | undefined;
  /** The events streams followed (see `watch()`), and how many of them are open. */
  private watchers: Watcher[] | undefined;
  private openStreams = 0;
  /** Settles when the renewal or re-entry in flight, if any, has been answered (see regrant). */
  private setting: Promise<void> = Promise.resolve();

  /**
   * @param sentAt `performance.now()` taken just before the request that produced `grant` was
   *   sent (default: now, which is later than that and so trusts the lease a little too long).
   */
  protected constructor(
    readonly client: LeasegateClient,
    grant: G,
    sentAt: number,
  ) {
    this.grant = grant;
    this.validUntilMs = sentAt + grant.ttl_ms;
  }

  /**
   * Sends one try of a renewal (`POST .../renew`) with this lease's token and, where the gateway
   * takes one, Idempotency-Key `key`.
   */
  protected abstract sendRenew(key: string, ttlMs: number | undefined, signal?: AbortSignal): Promise<Answer<G>>;
  /** The reason `signal` aborts with once the lease is lost. */
  protected abstract lostError(kind: LeaseLostKind, message: string, cause?: unknown): LeaseLostError;
  /** The events streams `watch()` follows. */
  protected abstract watchTargets(): WatchTarget[];
  /** Whether the lease was released (nothing left to watch). */
  protected holdsNothing(): boolean {
    return false;
  }

  /** The lease token (sent as `Lease-Token`). */
  get token(): string {
    return this.grant.token;
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
   * re-entry or release answers 410 `lease-gone`; when keep-alive reaches `validUntil` minus
   * the safety margin without a successful renewal; or, while the lease is watched (`watch()`,
   * which keep-alive does by default), within milliseconds of a force release or an expiry on the
   * gateway. Never aborted by a successful release or by `stopKeepAlive()`. Pass it to the work
   * the lease protects (`fetch(url, { signal })`, `signal.throwIfAborted()` between steps).
   */
  get signal(): AbortSignal {
    return this.lost.signal;
  }

  /**
   * Calls `listener` once with the `LeaseLostError` when the lease is lost (when `signal`
   * aborts; at once, asynchronously, if it is lost already). Returns a function that removes the
   * listener. `signal` is the same news as an AbortSignal.
   */
  onLost(listener: (error: LeaseLostError) => void): () => void {
    const signal = this.lost.signal;
    let removed = false;
    if (signal.aborted) {
      queueMicrotask(() => {
        if (!removed) listener(signal.reason as LeaseLostError);
      });
      return () => {
        removed = true;
      };
    }
    const onAbort = () => listener(signal.reason as LeaseLostError);
    signal.addEventListener("abort", onAbort, { once: true });
    return () => signal.removeEventListener("abort", onAbort);
  }

  /** Whether the lease's events stream is open now (a multi-lock's: every member's); see `watch()`. */
  get watching(): boolean {
    return this.watchers !== undefined && this.openStreams === this.watchers.length;
  }

  /** Whether keep-alive is running. */
  get keepingAlive(): boolean {
    return this.keeper !== undefined;
  }

  /**
   * Sends one call that answers with a grant (renewal, re-entry) through `send`, with a fresh
   * Idempotency-Key (to send on every try, where the gateway takes one), up to 3 times on a
   * network error or a 503, and records the grant.
   * @throws LeaseGoneError when the lease no longer holds (and aborts `signal`)
   */
  protected async regrant(send: (key: string) => Promise<Answer<G>>, signal: AbortSignal | undefined): Promise<G> {
    // One at a time, each recorded before the next is sent: two in flight at once could reach
    // Redis in one order and be answered in the other, and the lease would then count as valid
    // for a TTL Redis no longer has (a keep-alive answer arriving after a shorter renewal's).
    const before = this.setting;
    let done = () => {};
    this.setting = new Promise<void>((resolve) => (done = resolve));
    try {
      await before;
      signal?.throwIfAborted();
      const key = idempotencyKey();
      const sentAt = performance.now();
      const { data, error, response } = await withRetries(() => send(key), signal, true);
      if (error !== undefined || data === undefined) throw this.failed(toLeasegateError(error, response));
      this.granted(data);
      this.validUntilMs = sentAt + data.ttl_ms;
      const k = this.keeper;
      if (k !== undefined) {
        this.armDeadline(k);
        // A renewal or re-entry by hand counts as one of keep-alive's (a shorter TTL brings the
        // next forward); keep-alive's own, or one answered while it has one in flight, is
        // followed when that one ends.
        if (k.inflight === undefined) this.scheduleNext(k);
      }
      return data;
    } finally {
      done();
    }
  }

  /** Records the grant of a renewal or re-entry. */
  protected granted(grant: G): void {
    this.grant = grant;
  }

  /** Stops keep-alive and watching, and aborts `signal` with a LeaseLostError (once). */
  protected lose(kind: LeaseLostKind, message: string, cause?: unknown): void {
    this.stopKeepAlive();
    if (!this.lost.signal.aborted) this.lost.abort(this.lostError(kind, message, cause));
  }

  /** Returns err, after losing the lease when err is a 410. */
  protected failed(err: LeasegateProblemError): LeasegateProblemError {
    if (err instanceof LeaseGoneError) this.lose("gone", "the gateway answered 410 lease-gone", err);
    return err;
  }

  /**
   * Resets the lease's TTL to `ttlMs` (default: its current TTL), every hold it has (a
   * multi-lock's: every member). Sends an `Idempotency-Key` (not to `/multilocks`, which takes
   * none; a renewal is safe to repeat anyway) and tries up to 3 times on a network error or a 503.
   * @throws LeaseGoneError when the lease no longer holds (and aborts `signal`)
   */
  renew(ttlMs?: number, options: CallOptions = {}): Promise<G> {
    return this.regrant((key) => this.sendRenew(key, ttlMs, options.signal), options.signal);
  }

  /**
   * Keeps the lease alive from this process, with the rule of the CLI's `leasegate run`: renews
   * it (with `ttlMs`, default the lease's TTL) once a third of the TTL has passed since its latest
   * grant or renewal was sent, so about every ttl/3; retries a failed renewal every safety margin
   * (a tenth of the TTL, 50 ms to 1 s); and aborts `signal` with a LeaseLostError when a renewal
   * answers 410, or when `validUntil` minus the margin is reached without a successful renewal.
   * Each renewal (its retries included) may take at most ttl/3. A `renew()` or re-entry by hand
   * meanwhile counts as a renewal: the next is due a third of the TTL it set from then, and the
   * lapse is judged by that TTL's margin. Unless `options.watch` is false,
   * it also watches the lease's events stream (`watch()`), so that a force release or an expiry
   * aborts `signal` within milliseconds.
   *
   * Runs until `stopKeepAlive()`, the release of the last hold, or the loss; each of these clears
   * its timers. While it runs, its timers keep the Node process alive. Calling it again restarts it
   * with the new options.
   * @throws LeaseLostError (the `signal`'s reason) when the lease is already lost
   */
  keepAlive(options: KeepAliveOptions<G> = {}): void {
    if (this.lost.signal.aborted) throw this.lost.signal.reason;
    this.clearKeeper();
    if (options.watch ?? true) this.watch();
    else this.stopWatching();
    const ttl = options.ttlMs ?? this.ttlMs;
    const k: KeepAliveState<G> = {
      ttl,
      period: ttl / 3,
      options,
      renewTimer: undefined,
      deadlineTimer: undefined,
      inflight: undefined,
      lastError: undefined,
    };
    this.keeper = k;
    this.armDeadline(k);
    this.scheduleNext(k);
  }

  /**
   * Stops keep-alive (clears its timers and aborts a renewal in flight) and watching
   * (`stopWatching()`). Does not abort `signal`.
   */
  stopKeepAlive(): void {
    this.clearKeeper();
    this.stopWatching();
  }

  /**
   * Follows the lease's events stream (`GET /locks/{name}/events` with its `Lease-Token`; a
   * semaphore's for a permit; each member's, without a token, for a multi-lock, whose token the
   * events endpoints refuse) so that a force release or an expiry on the gateway aborts `signal`
   * within milliseconds, with `kind` `"forced"` or `"expired"`. `keepAlive()` calls it unless
   * told `watch: false`. A stream that ends is reopened (after 100 ms, doubling up to 5 s while
   * that fails) until `stopWatching()`, `stopKeepAlive()`, the release of the last hold or the
   * loss; a reopened stream checks that the lease survived the gap (the gateway answers 410
   * otherwise: `kind` `"gone"`). A gateway without events streams (404) leaves `signal` to
   * renewals. While it runs, the open stream keeps the Node process alive. Calling it again does
   * nothing, as it does on a released lease. A release elsewhere with the lease's token counts as
   * its own: no loss is told.
   * @throws LeaseLostError (the `signal`'s reason) when the lease is already lost
   */
  watch(): void {
    if (this.lost.signal.aborted) throw this.lost.signal.reason;
    if (this.watchers !== undefined || this.holdsNothing()) return;
    const watchers = this.watchTargets().map(
      (target) =>
        new Watcher(this.client, target, {
          opened: (open) => {
            if (this.watchers === watchers) this.openStreams += open ? 1 : -1;
          },
          lost: (kind, message, cause) => {
            if (this.watchers === watchers) this.lose(kind, message, cause);
          },
          confirmGone: async () => {
            await this.renew().catch(() => {}); // a 410 loses the lease
            return this.lost.signal.aborted;
          },
        }),
    );
    this.watchers = watchers;
    this.openStreams = 0;
    for (const w of watchers) w.start();
  }

  /** Stops watching: closes the events streams and clears their timers at once. */
  stopWatching(): void {
    const watchers = this.watchers;
    if (watchers === undefined) return;
    this.watchers = undefined;
    this.openStreams = 0;
    for (const w of watchers) w.stop();
  }

  private clearKeeper(): void {
    const k = this.keeper;
    if (k === undefined) return;
    this.keeper = undefined;
    clearTimeout(k.renewTimer);
    clearTimeout(k.deadlineTimer);
    k.inflight?.abort(new Error("keep-alive stopped"));
  }

  private armDeadline(k: KeepAliveState<G>): void {
    clearTimeout(k.deadlineTimer);
    k.deadlineTimer = setTimeout(() => {
      if (this.keeper !== k) return;
      const left = Math.round(this.validUntilMs - performance.now());
      this.lose("lapsing", `no renewal succeeded, and it may lapse in ${left} ms`, k.lastError);
    }, Math.max(0, this.validUntilMs - safetyMarginMs(this.grant.ttl_ms) - performance.now()));
  }

  /**
   * Schedules keep-alive's next renewal once a third of the lease's TTL has passed since its latest
   * grant, renewal or re-entry was sent (`validUntil` - TTL), and at most a third of keep-alive's
   * TTL from now.
   */
  private scheduleNext(k: KeepAliveState<G>): void {
    const ttl = this.grant.ttl_ms;
    const due = this.validUntilMs - ttl + ttl / 3 - performance.now();
    this.scheduleRenewal(k, Math.min(Math.max(due, 0), k.period));
  }

  private scheduleRenewal(k: KeepAliveState<G>, ms: number): void {
    clearTimeout(k.renewTimer);
    k.renewTimer = setTimeout(() => void this.renewForKeepAlive(k), ms);
  }

  private async renewForKeepAlive(k: KeepAliveState<G>): Promise<void> {
    if (this.keeper !== k || k.inflight !== undefined) return;
    const inflight = new AbortController();
    k.inflight = inflight;
    // At most a third of the TTL the lease has now (a renewal by hand may have shortened it).
    const limit = Math.min(k.period, this.grant.ttl_ms / 3);
    const timeout = setTimeout(
      () => inflight.abort(new Error(`renewal took longer than ${Math.round(limit)} ms`)),
      limit,
    );
    let grant: G;
    try {
      grant = await this.renew(k.ttl, { signal: inflight.signal });
    } catch (e) {
      if (this.keeper !== k) return; // stopped, or lost (a 410 already aborted `signal`)
      const err = inflight.signal.aborted ? inflight.signal.reason : e;
      k.lastError = err;
      this.scheduleRenewal(k, safetyMarginMs(Math.min(k.ttl, this.grant.ttl_ms)));
      k.options.onRenewError?.(err);
      return;
    } finally {
      clearTimeout(timeout);
      if (k.inflight === inflight) k.inflight = undefined;
    }
    if (this.keeper !== k) return;
    k.lastError = undefined;
    this.scheduleNext(k);
    k.options.onRenew?.(grant);
  }
}

/**
 * A granted lease: a lock's (`Lease`) or a semaphore permit's (`SemaphoreLease`). Its fields
 * follow the latest grant (renewal, re-entry) and release. Pass `fence` to the resource the lease
 * protects with every write.
 */
export abstract class LeaseBase<G extends LeaseGrant, R extends LeaseRelease> extends RenewableLease<G> {
  /** Whether the acquire made a new lease (201) rather than re-entering one (200). */
  readonly created: boolean;
  /** Holds left of each mode (a semaphore's permit is a shared hold). */
  protected readonly holdCounts: Record<Mode, number> = { exclusive: 0, shared: 0 };

  /**
   * @param sentAt `performance.now()` taken just before the request that produced `grant` was
   *   sent (default: now, which is later than that and so trusts the lease a little too long).
   */
  protected constructor(
    private readonly resource: LeaseResource,
    client: LeasegateClient,
    readonly name: string,
    grant: G,
    created: boolean,
    sentAt: number,
  ) {
    super(client, grant, sentAt);
    this.count(grant);
    this.created = created;
  }

  /** Sends a release (`DELETE`) of one hold (of `mode`, when given) with this lease's token and Idempotency-Key `key`. */
  protected abstract sendRelease(key: string, signal?: AbortSignal, mode?: Mode): Promise<Answer<R>>;

  /** Holds left: 1 after a new grant, +1 per re-entry, -1 per release; 0 once the lease holds nothing. */
  get holds(): number {
    return this.holdCounts.exclusive + this.holdCounts.shared;
  }
  /** The fencing token: greater than every fence granted earlier for this name. */
  get fence(): number {
    return this.grant.fence;
  }

  /** The path and headers of a call with this lease's token and Idempotency-Key `key`. */
  protected leaseParams(key: string) {
    return { path: { name: this.name }, header: { "Lease-Token": this.token, "Idempotency-Key": key } };
  }

  protected override granted(grant: G): void {
    super.granted(grant);
    this.count(grant);
  }

  protected lostError(kind: LeaseLostKind, message: string, cause?: unknown): LeaseLostError {
    return new LeaseLostError(this.resource, this.name, this.fence, kind, message, cause);
  }

  protected watchTargets(): WatchTarget[] {
    return [{ resource: this.resource === "semaphore" ? "semaphore" : "lock", name: this.name, token: this.token, fence: this.fence }];
  }

  protected override holdsNothing(): boolean {
    return this.holds === 0;
  }

  /** Records the holds of the mode an answer reports (a semaphore's, which names none, are shared). */
  private count(answer: { holds: number; mode?: Mode }): void {
    this.holdCounts[answer.mode ?? "shared"] = answer.holds;
  }

  /**
   * Releases one hold; the lease holds nothing once `released` is true and `holds` is 0. Sends an
   * `Idempotency-Key` and tries up to 3 times on a network error or a 503.
   *
   * Releasing the last hold (`holds` 1) stops keep-alive before the request is sent, so a failed
   * release lets the lease lapse instead of renewing it on. Releasing one of several holds leaves
   * keep-alive running; it stops once an answer leaves no hold.
   * @throws LeaseGoneError when the lease no longer holds (and aborts `signal`)
   */
  release(options: CallOptions = {}): Promise<R> {
    return this.releaseHold(undefined, options);
  }

  /**
   * `release()`, of a hold of `mode` when given. A 410 to a release of one mode while the lease
   * holds the other way tells only that no hold of that mode is left: it does not lose the lease.
   */
  protected async releaseHold(mode: Mode | undefined, options: CallOptions): Promise<R> {
    if (this.holds <= 1) this.stopKeepAlive();
    const key = idempotencyKey();
    const { data, error, response } = await withRetries(
      () => this.sendRelease(key, options.signal, mode),
      options.signal,
      true,
    );
    if (error !== undefined || data === undefined) {
      const err = toLeasegateError(error, response);
      if (err instanceof LeaseGoneError && mode !== undefined && this.holdCounts[otherMode(mode)] > 0) {
        this.holdCounts[mode] = 0;
        throw err;
      }
      throw this.failed(err);
    }
    this.count(data);
    if (this.holds === 0) this.stopKeepAlive();
    return data;
  }
}

function otherMode(mode: Mode): Mode {
  return mode === "exclusive" ? "shared" : "exclusive";
}
