import type { AcquireRequest, Grant, LeasegateClient, LockState, Mode, Release } from "./client.js";
import { type AcquireOptions, acquireLease, commonBody } from "./acquire.js";
import { toLeasegateError } from "./errors.js";
import { type CallOptions, type InspectOptions, LeaseBase } from "./lease.js";
import { type Answer, withRetries } from "./retry.js";

/** Options of `lock()`. */
export interface LockOptions extends AcquireOptions {
  /**
   * `"exclusive"` (the default: one holder) or `"shared"` (any number of shared holders and no
   * exclusive one; shared requests queue behind a waiting exclusive one).
   */
  mode?: Mode;
}

/** Options of `lease.release()`. */
export interface ReleaseOptions extends CallOptions {
  /**
   * Which hold to give back, for a lease holding the lock both ways (default: the gateway gives
   * back the exclusive one, leaving the lock held shared: a downgrade).
   */
  mode?: Mode;
}

/**
 * Acquires the lock `name`, exclusively unless `mode` is `"shared"`. Resolves with the granted
 * `Lease`; with `waitMs` > 0 the gateway long-polls until the lock is handed over or `waitMs`
 * runs out. A long wait is a series of long-polls; each presents the queue ticket of the one
 * before, so the wait keeps its place.
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
export function lock(client: LeasegateClient, name: string, options: LockOptions): Promise<Lease> {
  return acquireLease(
    options,
    (key, wait) =>
      client.POST("/locks/{name}", {
        params: { path: { name }, header: { "Idempotency-Key": key } },
        body: { ...lockBody(options), ...wait },
        signal: options.signal,
      }),
    (grant, created, sentAt) => new Lease(client, name, grant, created, sentAt),
  );
}

function lockBody(o: Omit<LockOptions, "signal" | "maxWaitPerRequestMs">): AcquireRequest {
  const body: AcquireRequest = commonBody(o);
  if (o.mode !== undefined) body.mode = o.mode;
  return body;
}

/**
 * `GET /locks/{name}`: whether the lock is held, how (`mode`), by whom (`owner`... for an
 * exclusive holder, `holders` and `holder_count` for shared ones), and how many wait. Tries up to
 * 3 times on a network error or a 503.
 * @throws LeasegateProblemError for a problem (invalid name or token, 503, ...)
 */
export async function inspectLock(client: LeasegateClient, name: string, options: InspectOptions = {}): Promise<LockState> {
  const { data, error, response } = await withRetries(
    () =>
      client.GET("/locks/{name}", {
        params: { path: { name }, header: options.token === undefined ? {} : { "Lease-Token": options.token } },
        signal: options.signal,
      }),
    options.signal,
    true,
  );
  if (error !== undefined || data === undefined) throw toLeasegateError(error, response);
  return data;
}

/**
 * A granted lease on a lock. Its fields follow the latest grant (renewal, re-entry) and release.
 * Pass `fence` to the resource the lock protects with every write.
 */
export class Lease extends LeaseBase<Grant, Release> {
  /**
   * @param sentAt `performance.now()` taken just before the request that produced `grant` was
   *   sent (default: now, which is later than that and so trusts the lease a little too long).
   */
  constructor(client: LeasegateClient, name: string, grant: Grant, created = true, sentAt: number = performance.now()) {
    super("lock", client, name, grant, created, sentAt);
  }

  /**
   * How the lease holds the lock: `"exclusive"` while it has an exclusive hold, else `"shared"`
   * (once it holds nothing, the mode of its latest grant).
   */
  get mode(): Mode {
    if (this.holdCounts.exclusive > 0) return "exclusive";
    if (this.holdCounts.shared > 0) return "shared";
    return this.grant.mode;
  }

  /**
   * Holds left of each mode. A lease holds the lock both ways after its exclusive holder
   * re-entered with `mode: "shared"`; releasing its exclusive hold then leaves it holding shared.
   */
  get holdsByMode(): Readonly<Record<Mode, number>> {
    return { ...this.holdCounts };
  }

  /**
   * Re-enters the lease (same owner and token): one more hold of `mode` (default: the lease's
   * `mode`), same fence, TTL reset to `ttlMs` (gateway default: 30000). An exclusive holder may
   * take a shared hold too; a shared holder asking for `"exclusive"` is refused. Sends an
   * `Idempotency-Key` and tries up to 3 times on a network error or a 503.
   * @throws UpgradeRefusedError when a lease holding the lock shared asks for `"exclusive"`
   * @throws LeaseGoneError when the lease no longer holds the lock (and aborts `signal`)
   */
  reenter(options: Omit<LockOptions, "owner" | "waitMs"> = {}): Promise<Grant> {
    const body = lockBody({ ...options, owner: this.owner, mode: options.mode ?? this.mode });
    return this.regrant(
      (key) => this.client.POST("/locks/{name}", { params: this.leaseParams(key), body, signal: options.signal }),
      options.signal,
    );
  }

  /**
   * Releases one hold (of `mode`, when given); the lock is free of this lease once `holds` is 0.
   * Sends an `Idempotency-Key` and tries up to 3 times on a network error or a 503.
   *
   * Releasing the last hold (`holds` 1) stops keep-alive before the request is sent, so a failed
   * release lets the lease lapse instead of renewing it on. Releasing one of several holds leaves
   * keep-alive running; it stops once an answer leaves no hold.
   * @throws LeaseGoneError when the lease no longer holds the lock (and aborts `signal`, unless
   *   `mode` was given and the lease still holds the lock the other way)
   */
  override release(options: ReleaseOptions = {}): Promise<Release> {
    return this.releaseHold(options.mode, options);
  }

  /** `inspectLock()` with this lease's token (`yours` tells whether it still holds). */
  inspect(options: CallOptions = {}): Promise<LockState> {
    return inspectLock(this.client, this.name, { ...options, token: this.token });
  }

  protected sendRenew(key: string, ttlMs: number | undefined, signal?: AbortSignal): Promise<Answer<Grant>> {
    return this.client.POST("/locks/{name}/renew", {
      params: this.leaseParams(key),
      body: ttlMs === undefined ? undefined : { ttl_ms: ttlMs },
      signal,
    });
  }

  protected sendRelease(key: string, signal?: AbortSignal, mode?: Mode): Promise<Answer<Release>> {
    const params = this.leaseParams(key);
    // A release with a token is never answered with a force release's body.
    return this.client.DELETE("/locks/{name}", {
      params: mode === undefined ? params : { ...params, query: { mode } },
      signal,
    }) as Promise<Answer<Release>>;
  }
}
