/**
 * TypeScript client for leasegate, the HTTP/JSON distributed-lock gateway.
 *
 * `createLeasegateClient` returns an openapi-fetch client typed by the `paths` generated from
 * openapi.yaml (src/schema.d.ts): every operation of the contract, with typed bodies, params and
 * responses. On top of it, a small layer for what generation cannot express: `lock()` (a lock,
 * exclusive or shared), `acquireSemaphore()` (a permit of a counting semaphore) and `lockAll()`
 * (several locks at once, all or nothing) turn the acquire call (including the `wait_ms`
 * long-poll) into a lease that carries its token, renews (by hand or with `keepAlive()`),
 * re-enters and releases itself, and problem+json answers become typed errors. `campaign()` wins
 * an election's lead (a lease that proclaims and resigns) and `observe()` follows an election's
 * events as an async iterator that resumes with `Last-Event-ID`.
 */
export type { components, operations, paths } from "./schema.js";
export {
  type AcquireRequest,
  type Grant,
  type Holder,
  type InvalidParam,
  type LeasegateClient,
  type LeasegateClientOptions,
  type LockState,
  type Mode,
  type MultiLockGrant,
  type MultiLockMember,
  type MultiLockRelease,
  type MultiLockRequest,
  type Problem,
  type Release,
  type SemaphoreAcquireRequest,
  type SemaphoreGrant,
  type SemaphoreRelease,
  type SemaphoreState,
  createLeasegateClient,
} from "./client.js";
export {
  ElectionLedError,
  ForbiddenError,
  HeldError,
  LeaseGoneError,
  LeaseLostError,
  type LeaseLostKind,
  type LeaseResource,
  LeasegateProblemError,
  LockHeldError,
  PermitsMismatchError,
  ProblemType,
  SemaphoreFullError,
  UnauthenticatedError,
  UpgradeRefusedError,
  toLeasegateError,
} from "./errors.js";
export type { AcquireOptions } from "./acquire.js";
export {
  type CallOptions,
  type InspectOptions,
  type KeepAliveOptions,
  LeaseBase,
  type LeaseGrant,
  type LeaseRelease,
  RenewableLease,
  type RenewableGrant,
  safetyMarginMs,
} from "./lease.js";
export { Lease, type LockOptions, type ReleaseOptions, inspectLock, lock } from "./lock.js";
export { SemaphoreLease, type SemaphoreOptions, acquireSemaphore, inspectSemaphore } from "./semaphore.js";
export { MultiLockLease, type MultiLockOptions, lockAll } from "./multilock.js";
export {
  type CampaignOptions,
  type CampaignRequest,
  type ElectionLeader,
  type ElectionRenewal,
  type ElectionState,
  Leadership,
  type LeadershipGrant,
  type Proclamation,
  type Resignation,
  campaign,
  inspectElection,
} from "./election.js";
export {
  type ElectionEvent,
  type ElectionStateEvent,
  type LeaderEndEvent,
  type LeaderValueEvent,
  type ObserveOptions,
  observe,
} from "./observe.js";
