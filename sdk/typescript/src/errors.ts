import type { InvalidParam, Problem } from "./client.js";

/** The stable problem `type` URIs of leasegate's problem+json errors. */
export const ProblemType = {
  InvalidRequest: "urn:leasegate:problem:invalid-request",
  InvalidLockName: "urn:leasegate:problem:invalid-lock-name",
  InvalidLeaseToken: "urn:leasegate:problem:invalid-lease-token",
  BodyTooLarge: "urn:leasegate:problem:body-too-large",
  HeadersTooLarge: "urn:leasegate:problem:headers-too-large",
  LockHeld: "urn:leasegate:problem:lock-held",
  ElectionLed: "urn:leasegate:problem:election-led",
  UpgradeRefused: "urn:leasegate:problem:upgrade-refused",
  SemaphoreFull: "urn:leasegate:problem:semaphore-full",
  PermitsMismatch: "urn:leasegate:problem:permits-mismatch",
  LeaseGone: "urn:leasegate:problem:lease-gone",
  NotFound: "urn:leasegate:problem:not-found",
  MethodNotAllowed: "urn:leasegate:problem:method-not-allowed",
  BackendUnavailable: "urn:leasegate:problem:backend-unavailable",
  ShuttingDown: "urn:leasegate:problem:shutting-down",
  TooManyWaiters: "urn:leasegate:problem:too-many-waiters",
  Unauthenticated: "urn:leasegate:problem:unauthenticated",
  Forbidden: "urn:leasegate:problem:forbidden",
  QuotaExceeded: "urn:leasegate:problem:quota-exceeded",
  NotSupported: "urn:leasegate:problem:not-supported",
  Internal: "urn:leasegate:problem:internal",
} as const;

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
    // A reason the detail already says (a bad lock name's) is not said twice.
    const params = invalidParams
      .filter((p) => p.reason !== problem.detail)
      .map((p) => `${p.name}: ${p.reason}`)
      .join("; ");
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

/**
 * 409: what was asked for is taken, a lock (`LockHeldError`) or every permit of a semaphore
 * (`SemaphoreFullError`), or others wait for it.
 */
export class HeldError extends LeasegateProblemError {
  /** The remaining time to live of the holder (a semaphore's: of the permit that runs out first), in milliseconds. */
  readonly retryAfterMs: number;
  /** How long the request waited, when it was sent with `waitMs` > 0. */
  readonly waitedMs: number | undefined;
  /** After a wait: resumes this wait's place in the queue when sent with the next one (`lock()` and `acquireSemaphore()` do). */
  readonly queueTicket: string | undefined;

  constructor(problem: Problem, retryAfterHeader?: string | null) {
    super(problem);
    const header = Number(retryAfterHeader);
    this.retryAfterMs = problem.retry_after_ms ?? (Number.isFinite(header) ? header * 1000 : 0);
    this.waitedMs = problem.waited_ms;
    this.queueTicket = problem.queue_ticket;
  }
}

/**
 * 409 `election-led`: another candidate leads the election (or others wait in line before this
 * one). `problem.election` names it.
 */
export class ElectionLedError extends HeldError {}

/** 409 `lock-held`: another lease holds the lock (or others wait for it). */
export class LockHeldError extends HeldError {
  /**
   * For a multi-lock (`lockAll()`): the members that were held (or had waiters) when the gateway
   * answered. Undefined for a single lock, whose name is `problem.lock`.
   */
  readonly locks: string[] | undefined;

  constructor(problem: Problem, retryAfterHeader?: string | null) {
    super(problem, retryAfterHeader);
    this.locks = problem.locks;
  }
}

/** 409 `semaphore-full`: every permit of the semaphore is taken (or others wait for one). */
export class SemaphoreFullError extends HeldError {}

/**
 * 409 `upgrade-refused`: a lease holding the lock shared asked for it exclusively. Upgrades
 * deadlock; release the shared hold, then acquire exclusively.
 */
export class UpgradeRefusedError extends LeasegateProblemError {}

/** 409 `permits-mismatch`: the semaphore, which someone holds or waits on, has another size. */
export class PermitsMismatchError extends LeasegateProblemError {
  /** The semaphore's size. */
  readonly permits: number;

  constructor(problem: Problem) {
    super(problem);
    this.permits = problem.permits ?? 0;
  }
}

/**
 * 410 `lease-gone`: the lease no longer holds the lock or permit (it expired or was fully
 * released), or a multi-lock no longer holds one of its members.
 */
export class LeaseGoneError extends LeasegateProblemError {
  /**
   * For a multi-lock: the members it no longer held; the call that answered this freed the
   * others. Undefined for a lock's or a semaphore's lease.
   */
  readonly locks: string[] | undefined;

  constructor(problem: Problem) {
    super(problem);
    this.locks = problem.locks;
  }
}

/**
 * 401 `unauthenticated`: the gateway authenticates (it has an auth file) and the request carried
 * no API key, or one it does not know. Give the client one:
 * `createLeasegateClient(url, { apiKey })`.
 */
export class UnauthenticatedError extends LeasegateProblemError {}

/**
 * 403 `forbidden`: the API key's principal may not make this call: it lacks the `permission`, or
 * no prefix of its covers the name (`problem.name`), or the lease token is another principal's.
 * `detail` says which.
 */
export class ForbiddenError extends LeasegateProblemError {
  /** The permission the principal lacks (`"lock"`, `"inspect"`, `"admin"`), if that is why. */
  readonly permission: string | undefined;

  constructor(problem: Problem) {
    super(problem);
    this.permission = problem.permission;
  }
}

/** What a lease holds: a lock, a permit of a semaphore, the members of a multi-lock, or the lead of an election. */
export type LeaseResource = "lock" | "semaphore" | "multilock" | "election";

/** Why a lease was lost (`LeaseLostError.kind`). */
export type LeaseLostKind = "gone" | "lapsing" | "expired" | "forced" | "vacant" | "resigned";

/**
 * The reason `lease.signal` is aborted with: the lease is lost, or may be lost before another
 * renewal could succeed. Stop the work the lock (or permit) protects.
 */
export class LeaseLostError extends Error {
  /** The lock's name; undefined for a semaphore's permit and a multi-lock. */
  readonly lock: string | undefined;
  /** The semaphore's name; undefined for a lock and a multi-lock. */
  readonly semaphore: string | undefined;
  /** The multi-lock's id; undefined for a lock and a semaphore's permit. */
  readonly multilock: string | undefined;
  /** The election's name, for a leadership (`campaign()`); undefined for every other lease. */
  readonly election: string | undefined;
  /**
   * A multi-lock's members, all of them (a 410's `cause.locks` tells which were lost); undefined
   * for a lock and a semaphore's permit.
   */
  readonly locks: readonly string[] | undefined;
  /** The fence of the lost lease; 0 for a multi-lock, whose members have a fence each. */
  readonly fence: number;
  /**
   * `"gone"`: the gateway answered 410 `lease-gone` to a renewal, re-entry or release (`cause` is
   * the LeaseGoneError), or the events stream found the lease gone without knowing how (on
   * reopening it: `cause` is the LeaseGoneError; `lost` with reason `gone`: no `cause`).
   * `"lapsing"`: keep-alive had no successful renewal and the lease's `validUntil` is less than
   * the safety margin away (`cause` is the last renewal's error, if any). `"forced"` and
   * `"expired"`: the events stream (`lease.watch()`) told that the lease was force-released, or
   * ran out on the gateway (for a multi-lock, one member did: the message names it). A
   * leadership's events stream tells `"vacant"` (its lease ran out or was forced: the election's
   * log does not say which) or `"resigned"` (a resignation with its token, from elsewhere).
   */
  readonly kind: LeaseLostKind;

  /**
   * @param name the lock's or semaphore's name, or the multi-lock's id
   * @param locks a multi-lock's members
   */
  constructor(
    resource: LeaseResource,
    name: string,
    fence: number,
    kind: LeaseLostKind,
    message: string,
    cause?: unknown,
    locks?: readonly string[],
  ) {
    const what = resource === "multilock" ? `of ${locks?.length ?? 0} locks` : `(fence ${fence})`;
    super(`lease on ${resource} "${name}" ${what} lost: ${message}`, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.lock = resource === "lock" ? name : undefined;
    this.semaphore = resource === "semaphore" ? name : undefined;
    this.multilock = resource === "multilock" ? name : undefined;
    this.election = resource === "election" ? name : undefined;
    this.locks = resource === "multilock" ? [...(locks ?? [])] : undefined;
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
    case ProblemType.ElectionLed:
      return new ElectionLedError(problem, response.headers.get("Retry-After"));
    case ProblemType.SemaphoreFull:
      return new SemaphoreFullError(problem, response.headers.get("Retry-After"));
    case ProblemType.UpgradeRefused:
      return new UpgradeRefusedError(problem);
    case ProblemType.PermitsMismatch:
      return new PermitsMismatchError(problem);
    case ProblemType.LeaseGone:
      return new LeaseGoneError(problem);
    case ProblemType.Unauthenticated:
      return new UnauthenticatedError(problem);
    case ProblemType.Forbidden:
      return new ForbiddenError(problem);
    default:
      return new LeasegateProblemError(problem);
  }
}
