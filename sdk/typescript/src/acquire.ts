import type { AcquireRequest } from "./client.js";
import { HeldError, LeaseGoneError, toLeasegateError } from "./errors.js";
import { type RenewableGrant, safetyMarginMs } from "./lease.js";
import { type Answer, delay, idempotencyKey, withRetries } from "./retry.js";

/** Options of `lock()`, `acquireSemaphore()` and `lockAll()`. */
export interface AcquireOptions {
  /** Who asks, 1-128 printable characters. */
  owner: string;
  /** Lease time to live in milliseconds (gateway default: 30000). */
  ttlMs?: number;
  /**
   * How long to wait for the grant, in FIFO order (0 or absent: try once). A wait longer than
   * `maxWaitPerRequestMs` is split into successive long-polls that keep their place in line (a
   * multi-lock's too: it keeps its id and its place in the line it waits in).
   */
  waitMs?: number;
  /**
   * The longest one long-poll may last (default 30000): keep it within your HTTP stack's
   * timeouts (the gateway caps a longer one to its `LEASEGATE_MAX_WAIT`, 60 s by default).
   */
  maxWaitPerRequestMs?: number;
  /** Have the gateway renew the lease every ttl/3 until it is released. */
  watchdog?: boolean;
  /** With `watchdog`: stop renewing this many milliseconds after the grant. */
  maxHoldMs?: number;
  /** Aborts the request; a waiting request leaves the gateway's queue at once. */
  signal?: AbortSignal;
}

/** The body members a lock's and a semaphore's acquire have in common. */
export type CommonAcquireBody = Pick<
  AcquireRequest,
  "owner" | "ttl_ms" | "wait_ms" | "watchdog" | "max_hold_ms" | "queue_ticket"
>;

/** The members of `o` that acquire and re-entry bodies carry (those that are set). */
export function commonBody(o: Omit<AcquireOptions, "signal" | "maxWaitPerRequestMs">): CommonAcquireBody {
  const body: CommonAcquireBody = { owner: o.owner };
  if (o.ttlMs !== undefined) body.ttl_ms = o.ttlMs;
  if (o.waitMs !== undefined) body.wait_ms = o.waitMs;
  if (o.watchdog !== undefined) body.watchdog = o.watchdog;
  if (o.maxHoldMs !== undefined) body.max_hold_ms = o.maxHoldMs;
  return body;
}

/** The members of one long-poll of a wait: what is left of it, and the ticket keeping its place. */
export type WaitMembers = Pick<CommonAcquireBody, "wait_ms" | "queue_ticket">;

/**
 * Runs one acquire call (a lock's, a semaphore's or a multi-lock's), as `lock()` documents: `send`
 * sends one try with Idempotency-Key `key`, its body completed with `wait` (empty for a try-once
 * acquire); `newLease` makes the lease of a grant. A long wait is a series of long-polls, each
 * presenting the queue ticket of the one before.
 *
 * With `multiLock` (`lockAll()`), the gateway takes no Idempotency-Key: `send` must not send
 * `key`; a long-poll whose 409 carries no queue ticket (its wait did not end in a member's line)
 * is followed by one that starts over, asking for what is left of the wait; and a network error
 * is tried again only when the request never left this process, as a try whose answer was lost
 * may have been granted (a retry would then wait for that lease, or fail against it).
 * @throws HeldError when the grant is refused (after waiting `waitMs`, if given)
 * @throws LeasegateProblemError for any other problem
 */
export async function acquireLease<G extends RenewableGrant, L extends { renew(): Promise<unknown> }>(
  options: AcquireOptions,
  send: (key: string, wait: WaitMembers) => Promise<Answer<G>>,
  newLease: (grant: G, created: boolean, sentAt: number) => L,
  multiLock = false,
): Promise<L> {
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
        const wait: WaitMembers = {};
        if (waiting) {
          wait.wait_ms = Math.max(1, Math.min(deadline - Date.now(), perRequest));
          if (queueTicket !== undefined) wait.queue_ticket = queueTicket;
        }
        return send(key, wait);
      },
      options.signal,
      !waiting,
      multiLock,
    );
    if (error === undefined && data !== undefined) {
      const lease = newLease(data, response.status === 201, sentAt);
      // The lease's TTL started at its grant, after the request was sent: after a long wait,
      // validUntil (counted from the send) would already be near. Renew now to count from a
      // request sent after the grant; on failure the earlier, conservative bound stands.
      if (!data.watchdog && performance.now() - sentAt > safetyMarginMs(data.ttl_ms)) {
        await lease.renew().catch(() => undefined);
      }
      return lease;
    }
    const err = toLeasegateError(error, response);
    if (err instanceof LeaseGoneError && !multiLock && restarts < 2) {
      // The gateway granted an earlier try of this key a lease that is gone already (given back
      // because its answer did not arrive, or expired): ask anew.
      key = idempotencyKey();
      restarts++;
      continue;
    }
    if (!waiting || Date.now() >= deadline) throw err;
    if (err instanceof HeldError && err.queueTicket !== undefined) {
      queueTicket = err.queueTicket;
    } else if (err instanceof HeldError && multiLock) {
      // The long-poll ran out with no place to keep (the gateway gave back what it had taken):
      // ask again as a newcomer.
      queueTicket = undefined;
    } else if (err.status === 503) {
      // A replica shutting down (or full, or without Redis): retry within the wait, keeping the place.
      if (err.problem.queue_ticket !== undefined) queueTicket = err.problem.queue_ticket;
      await delay(Math.min(1000, Math.max(0, deadline - Date.now())), options.signal);
    } else {
      throw err;
    }
  }
}
