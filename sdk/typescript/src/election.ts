import type { components } from "./schema.js";
import type { LeasegateClient } from "./client.js";
import { type AcquireOptions, acquireLease, commonBody } from "./acquire.js";
import { LeaseLostError, type LeaseLostKind, toLeasegateError } from "./errors.js";
import { type CallOptions, RenewableLease } from "./lease.js";
import { type Answer, idempotencyKey, withRetries } from "./retry.js";
import type { WatchTarget } from "./watch.js";

type Schemas = components["schemas"];
export type CampaignRequest = Schemas["CampaignRequest"];
export type LeadershipGrant = Schemas["Leadership"];
export type Proclamation = Schemas["Proclamation"];
export type ElectionRenewal = Schemas["ElectionRenewal"];
export type Resignation = Schemas["Resignation"];
export type ElectionState = Schemas["ElectionState"];
export type ElectionLeader = Schemas["ElectionLeader"];

/** What a leadership follows of its grant and renewals. */
type LeadershipLease = Pick<LeadershipGrant, "owner" | "token" | "fence" | "ttl_ms" | "expires_at" | "watchdog">;

/** Options of `campaign()`: an acquire's (`owner`, `ttlMs`, `waitMs`, `watchdog`, ...). */
export type CampaignOptions = AcquireOptions;

/**
 * Campaigns to lead the election `name` with `value` (any UTF-8 up to 4096 bytes, say the
 * leader's address). Resolves with the `Leadership` once elected (the gateway announced it in the
 * election's log first); with `waitMs` > 0 the campaign waits in FIFO order, as `lock()` does
 * (long-polls keeping their place with queue tickets, the same `Idempotency-Key` on every try).
 * Keep the lead with `leadership.keepAlive()` (which also follows the election's events, so that
 * `signal` aborts within milliseconds of a force release) or `watchdog: true`.
 * @throws ElectionLedError when another candidate leads (after waiting `waitMs`, if given)
 * @throws LeasegateProblemError for any other problem (invalid name or value, 501 on RedLock, ...)
 */
export function campaign(client: LeasegateClient, name: string, value: string, options: CampaignOptions): Promise<Leadership> {
  const body: CampaignRequest = { ...commonBody(options), value };
  return acquireLease(
    options,
    (key, wait) =>
      client.POST("/elections/{name}", {
        params: { path: { name }, header: { "Idempotency-Key": key } },
        body: { ...body, ...wait },
        signal: options.signal,
      }),
    (grant, _created, sentAt) => new Leadership(client, name, grant, sentAt),
  );
}

/**
 * `GET /elections/{name}`: the leader (if `led`), the candidates waiting and the id of the
 * election's last event. Tries up to 3 times on a network error or a 503.
 * @throws LeasegateProblemError for a problem (invalid name, 503, ...)
 */
export async function inspectElection(client: LeasegateClient, name: string, options: CallOptions = {}): Promise<ElectionState> {
  const { data, error, response } = await withRetries(
    () => client.GET("/elections/{name}", { params: { path: { name } }, signal: options.signal }),
    options.signal,
    true,
  );
  if (error !== undefined || data === undefined) throw toLeasegateError(error, response);
  return data;
}

/**
 * The lead of an election, won by `campaign()`: a lease (renew, keep-alive, `signal`, `onLost`,
 * `watch()`) that also proclaims values and resigns. `fence` grows with every leader: send it
 * with what the leader writes. Following the election's events (`watch()`, which keep-alive does
 * by default) aborts `signal` within milliseconds of the lead's end announced by anyone else: a
 * force release or an expiry (`kind` `"vacant"`), a resignation with its token from elsewhere
 * (`"resigned"`), or, after a gap in the log, a renewal's 410 (`"gone"`).
 */
export class Leadership extends RenewableLease<LeadershipLease> {
  /** The value last announced: the campaign's, then each `proclaim()`'s. */
  value: string;
  /** When this leader was announced (Redis time). */
  readonly since: Date;
  /** The id of the lead's latest event in the election's log (its `elected`, then its `proclaimed`). */
  eventId: string;
  private resigned = false;
  private readonly target: WatchTarget;

  constructor(
    client: LeasegateClient,
    readonly name: string,
    grant: LeadershipGrant,
    sentAt: number = performance.now(),
  ) {
    super(client, grant, sentAt);
    this.value = grant.value;
    this.since = new Date(grant.since);
    this.eventId = grant.event_id;
    this.target = { resource: "election", name, token: undefined, fence: grant.fence };
  }

  /** The lead's fence: greater than every earlier leader's of this election. */
  get fence(): number {
    return this.grant.fence;
  }

  /**
   * Announces `value` as the leader's (`PUT /elections/{name}`): a `proclaimed` event, unless it
   * is the value already announced. Sends an `Idempotency-Key` and tries up to 3 times on a
   * network error or a 503.
   * @throws LeaseGoneError when the lead is lost (and aborts `signal`)
   */
  async proclaim(value: string, options: CallOptions = {}): Promise<Proclamation> {
    const key = idempotencyKey();
    const { data, error, response } = await withRetries(
      () =>
        this.client.PUT("/elections/{name}", {
          params: this.leaseParams(key),
          body: { value },
          signal: options.signal,
        }),
      options.signal,
      true,
    );
    if (error !== undefined || data === undefined) throw this.failed(toLeasegateError(error, response));
    this.value = data.value;
    this.eventId = data.event_id;
    return data;
  }

  /**
   * Gives up the lead (`DELETE /elections/{name}`): the first candidate in line is elected at
   * once. Stops keep-alive and watching first, so a failed resignation lets the lease lapse; does
   * not abort `signal`. Sends an `Idempotency-Key` and tries up to 3 times on a network error or
   * a 503.
   * @throws LeaseGoneError when the lead was lost already (and aborts `signal`)
   */
  async resign(options: CallOptions = {}): Promise<Resignation> {
    this.resigned = true;
    this.stopKeepAlive();
    const key = idempotencyKey();
    const { data, error, response } = await withRetries(
      () => this.client.DELETE("/elections/{name}", { params: this.leaseParams(key), signal: options.signal }),
      options.signal,
      true,
    );
    if (error !== undefined || data === undefined) throw this.failed(toLeasegateError(error, response));
    return data as Resignation; // a resignation with a token is never answered with a force release's body
  }

  /** `inspectElection()` of this leadership's election. */
  inspect(options: CallOptions = {}): Promise<ElectionState> {
    return inspectElection(this.client, this.name, options);
  }

  private leaseParams(key: string) {
    return { path: { name: this.name }, header: { "Lease-Token": this.token, "Idempotency-Key": key } };
  }

  protected sendRenew(key: string, ttlMs: number | undefined, signal?: AbortSignal): Promise<Answer<ElectionRenewal>> {
    return this.client.POST("/elections/{name}/renew", {
      params: this.leaseParams(key),
      body: ttlMs === undefined ? undefined : { ttl_ms: ttlMs },
      signal,
    });
  }

  protected lostError(kind: LeaseLostKind, message: string, cause?: unknown): LeaseLostError {
    return new LeaseLostError("election", this.name, this.fence, kind, message, cause);
  }

  protected watchTargets(): WatchTarget[] {
    return [this.target];
  }

  protected override holdsNothing(): boolean {
    return this.resigned;
  }
}
