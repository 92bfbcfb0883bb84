import type { LeasegateClient, SemaphoreAcquireRequest, SemaphoreGrant, SemaphoreRelease, SemaphoreState } from "./client.js";
import { type AcquireOptions, acquireLease, commonBody } from "./acquire.js";
import { toLeasegateError } from "./errors.js";
import { type CallOptions, type InspectOptions, LeaseBase } from "./lease.js";
import { type Answer, withRetries } from "./retry.js";

/** Options of `acquireSemaphore()`. */
export interface SemaphoreOptions extends AcquireOptions {
  /**
   * The semaphore's size, 1-10000. Whoever acquires while nobody holds or waits sets it; while
   * someone does, another size is refused with PermitsMismatchError.
   */
  permits: number;
}

/**
 * Takes one permit of the semaphore `name` of `permits` permits. Resolves with the granted
 * `SemaphoreLease`; with `waitMs` > 0 the gateway long-polls, in FIFO order, until a permit is
 * handed over or `waitMs` runs out. Waiting (queue tickets across long-polls), retries and
 * Idempotency-Keys work as for `lock()`.
 *
 * @throws SemaphoreFullError when every permit is taken (after waiting `waitMs`, if given)
 * @throws PermitsMismatchError when the semaphore has another size (`permits` tells it)
 * @throws LeasegateProblemError for any other problem (invalid name or body, 503, ...)
 */
export function acquireSemaphore(client: LeasegateClient, name: string, options: SemaphoreOptions): Promise<SemaphoreLease> {
  return acquireLease(
    options,
    (key, wait) =>
      client.POST("/semaphores/{name}", {
        params: { path: { name }, header: { "Idempotency-Key": key } },
        body: { ...semaphoreBody(options), ...wait },
        signal: options.signal,
      }),
    (grant, created, sentAt) => new SemaphoreLease(client, name, grant, created, sentAt),
  );
}

function semaphoreBody(o: Omit<SemaphoreOptions, "signal" | "maxWaitPerRequestMs">): SemaphoreAcquireRequest {
  return { ...commonBody(o), permits: o.permits };
}

/**
 * `GET /semaphores/{name}`: its size (`permits`, 0 while nobody holds or waits), the permits in
 * use, their holders and how many wait. Tries up to 3 times on a network error or a 503.
 * @throws LeasegateProblemError for a problem (invalid name or token, 503, ...)
 */
export async function inspectSemaphore(
  client: LeasegateClient,
  name: string,
  options: InspectOptions = {},
): Promise<SemaphoreState> {
  const { data, error, response } = await withRetries(
    () =>
      client.GET("/semaphores/{name}", {
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
 * A granted lease on one permit of a semaphore: renewed, kept alive, re-entered and released like
 * a lock's `Lease`, with the same `signal`. Pass `fence` to the resource the semaphore protects.
 */
export class SemaphoreLease extends LeaseBase<SemaphoreGrant, SemaphoreRelease> {
  /** The semaphore's size (it cannot change while this lease holds a permit). */
  readonly permits: number;

  /**
   * @param sentAt `performance.now()` taken just before the request that produced `grant` was
   *   sent (default: now, which is later than that and so trusts the lease a little too long).
   */
  constructor(
    client: LeasegateClient,
    name: string,
    grant: SemaphoreGrant,
    created = true,
    sentAt: number = performance.now(),
  ) {
    super("semaphore", client, name, grant, created, sentAt);
    this.permits = grant.permits;
  }

  /** Permits in use just after the latest grant (renewal, re-entry), this one included. */
  get used(): number {
    return this.grant.used;
  }

  /**
   * Re-enters the lease (same owner and token): one more hold of the same permit, same fence, TTL
   * reset to `ttlMs` (gateway default: 30000). Sends an `Idempotency-Key` and tries up to 3 times
   * on a network error or a 503.
   * @throws LeaseGoneError when the lease no longer holds its permit (and aborts `signal`)
   */
  reenter(options: Omit<SemaphoreOptions, "owner" | "waitMs" | "permits"> = {}): Promise<SemaphoreGrant> {
    const body = semaphoreBody({ ...options, owner: this.owner, permits: this.permits });
    return this.regrant(
      (key) => this.client.POST("/semaphores/{name}", { params: this.leaseParams(key), body, signal: options.signal }),
      options.signal,
    );
  }

  /** `inspectSemaphore()` with this lease's token (`yours` tells whether it still holds). */
  inspect(options: CallOptions = {}): Promise<SemaphoreState> {
    return inspectSemaphore(this.client, this.name, { ...options, token: this.token });
  }

  protected sendRenew(key: string, ttlMs: number | undefined, signal?: AbortSignal): Promise<Answer<SemaphoreGrant>> {
    return this.client.POST("/semaphores/{name}/renew", {
      params: this.leaseParams(key),
      body: ttlMs === undefined ? undefined : { ttl_ms: ttlMs },
      signal,
    });
  }

  protected sendRelease(key: string, signal?: AbortSignal): Promise<Answer<SemaphoreRelease>> {
    // A release with a token is never answered with a force release's body.
    return this.client.DELETE("/semaphores/{name}", { params: this.leaseParams(key), signal }) as Promise<
      Answer<SemaphoreRelease>
    >;
  }
}
