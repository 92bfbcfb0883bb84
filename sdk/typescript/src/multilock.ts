import type {
  LeasegateClient,
  Mode,
  MultiLockGrant,
  MultiLockMember,
  MultiLockRelease,
  MultiLockRequest,
} from "./client.js";
import { type AcquireOptions, acquireLease, commonBody } from "./acquire.js";
import { LeaseLostError, type LeaseLostKind, toLeasegateError } from "./errors.js";
import { type CallOptions, RenewableLease } from "./lease.js";
import { type Answer, withRetries } from "./retry.js";
import type { WatchTarget } from "./watch.js";

/** Options of `lockAll()`. */
export interface MultiLockOptions extends AcquireOptions {
  /** `"exclusive"` (the default) or `"shared"`: how the group holds every member. */
  mode?: Mode;
}

/**
 * Acquires every lock in `names` (2-64 distinct names, in any order) under one new lease, all or
 * nothing (`POST /multilocks`), and resolves with its `MultiLockLease`: one token and one TTL for
 * the group, a fence per member. Members are ordinary locks: others see them held (`inspectLock()`
 * shows the group's id as `multilock`) and wait in each member's line.
 *
 * With `waitMs` > 0 the gateway long-polls until it has every member or `waitMs` runs out (it
 * takes the members in name order, holding those it has while it waits for the next, so groups
 * never deadlock). A wait longer than `maxWaitPerRequestMs` is split into long-polls, each asking
 * for what is left of the wait with the group queue ticket of the one before: the group keeps its
 * id and its place in the line it waited in. A 503 is retried within the wait (and up to 3 tries
 * in all for a try-once acquire).
 *
 * `/multilocks` takes no `Idempotency-Key`, so none is sent, and a request that fails with a
 * network error is sent again only when it never reached the gateway: one whose answer was lost
 * may have been granted, and the error is thrown (the group, if granted, lapses after its TTL).
 *
 * @throws LockHeldError when a member is held (after waiting `waitMs`, if given); its `locks`
 *   lists the members that were held (or had waiters)
 * @throws LeasegateProblemError for any other problem (invalid names or body, 503, ...)
 */
export function lockAll(client: LeasegateClient, names: readonly string[], options: MultiLockOptions): Promise<MultiLockLease> {
  const body = multiLockBody(names, options);
  return acquireLease(
    options,
    (_key, wait) =>
      client.POST("/multilocks", {
        body: { ...body, ...wait },
        signal: options.signal,
      }),
    (grant, _created, sentAt) => new MultiLockLease(client, grant, sentAt),
    true,
  );
}

function multiLockBody(names: readonly string[], o: MultiLockOptions): MultiLockRequest {
  const body: MultiLockRequest = { ...commonBody(o), locks: [...names] };
  if (o.mode !== undefined) body.mode = o.mode;
  return body;
}

/**
 * A granted multi-lock: one lease holding every member, renewed (by hand or with `keepAlive()`)
 * and released together, with the same `validUntil`, `signal` and keep-alive rules as a lock's
 * `Lease`. Pass each member's fence (`fenceOf(name)`) to what that lock protects.
 *
 * The group's token works on `/multilocks` only: the lock endpoints refuse it (400), and a member
 * cannot be re-entered, renewed or released on its own.
 */
export class MultiLockLease extends RenewableLease<MultiLockGrant> {
  private releasedAll = false;

  /**
   * @param sentAt `performance.now()` taken just before the request that produced `grant` was
   *   sent (default: now, which is later than that and so trusts the lease a little too long).
   */
  constructor(client: LeasegateClient, grant: MultiLockGrant, sentAt: number = performance.now()) {
    super(client, grant, sentAt);
  }

  /** The group's id: its resource is `/multilocks/{id}`, and members' holders show it as `multilock`. */
  get id(): string {
    return this.grant.id;
  }
  /** How the group holds every member. */
  get mode(): Mode {
    return this.grant.mode;
  }
  /** Every member with its fence, in name order (byte order), whatever order they were asked in. */
  get members(): readonly MultiLockMember[] {
    return this.grant.locks;
  }
  /** The members' names, in name order. */
  get locks(): string[] {
    return this.grant.locks.map((m) => m.lock);
  }

  /** The fence of member `name` (greater than every fence granted earlier for that lock); undefined for a non-member. */
  fenceOf(name: string): number | undefined {
    return this.grant.locks.find((m) => m.lock === name)?.fence;
  }

  /**
   * Gives back every member (`DELETE /multilocks/{id}`); each goes to the first waiter in its own
   * line. Stops keep-alive before the request is sent, so a failed release lets the group lapse.
   * Tries up to 3 times on a network error or a 503; without an `Idempotency-Key` (`/multilocks`
   * takes none), a retry whose first try was applied but not answered gets 410.
   * @throws LeaseGoneError when a member is no longer held (its `locks` lists those; the gateway
   *   freed the others); aborts `signal`
   */
  async release(options: CallOptions = {}): Promise<MultiLockRelease> {
    this.stopKeepAlive();
    const { data, error, response } = await withRetries(
      () => this.client.DELETE("/multilocks/{id}", { params: this.groupParams(), signal: options.signal }),
      options.signal,
      true,
    );
    if (error !== undefined || data === undefined) throw this.failed(toLeasegateError(error, response));
    this.releasedAll = true;
    return data;
  }

  protected override holdsNothing(): boolean {
    return this.releasedAll;
  }

  /** The path and headers of a call with the group's token. */
  private groupParams() {
    return { path: { id: this.id }, header: { "Lease-Token": this.token } };
  }

  /** A renewal (safe to repeat: it sets the TTL), without the Idempotency-Key `/multilocks` refuses. */
  protected sendRenew(_key: string, ttlMs: number | undefined, signal?: AbortSignal): Promise<Answer<MultiLockGrant>> {
    return this.client.POST("/multilocks/{id}/renew", {
      params: this.groupParams(),
      body: ttlMs === undefined ? undefined : { ttl_ms: ttlMs },
      signal,
    });
  }

  protected lostError(kind: LeaseLostKind, message: string, cause?: unknown): LeaseLostError {
    return new LeaseLostError("multilock", this.id, 0, kind, message, cause, this.locks);
  }

  /** Each member's stream, without a token (the events endpoints refuse a group's), by its fence. */
  protected watchTargets(): WatchTarget[] {
    return this.members.map((m) => ({ resource: "lock", name: m.lock, token: undefined, fence: m.fence }));
  }
}
