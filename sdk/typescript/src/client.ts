import createClient, { type Client, type ClientOptions } from "openapi-fetch";
import type { components, paths } from "./schema.js";

/** The openapi-fetch client over leasegate's operations. */
export type LeasegateClient = Client<paths>;

type Schemas = components["schemas"];
export type Mode = Schemas["Mode"];
export type AcquireRequest = Schemas["AcquireRequest"];
export type Grant = Schemas["Grant"];
export type Release = Schemas["Release"];
export type LockState = Schemas["LockState"];
export type Holder = Schemas["Holder"];
export type SemaphoreAcquireRequest = Schemas["SemaphoreAcquireRequest"];
export type SemaphoreGrant = Schemas["SemaphoreGrant"];
export type SemaphoreRelease = Schemas["SemaphoreRelease"];
export type SemaphoreState = Schemas["SemaphoreState"];
export type MultiLockRequest = Schemas["MultiLockRequest"];
export type MultiLockGrant = Schemas["MultiLockGrant"];
export type MultiLockMember = Schemas["MultiLockMember"];
export type MultiLockRelease = Schemas["MultiLockRelease"];
export type Problem = Schemas["Problem"];
export type InvalidParam = Schemas["InvalidParam"];

/**
 * `createLeasegateClient`'s options: openapi-fetch's (custom `fetch`, default `headers`,
 * `requestInitExt`, ...) and `apiKey`.
 */
export interface LeasegateClientOptions extends Omit<ClientOptions, "baseUrl"> {
  /**
   * The API key of a principal of the gateway's auth file (`LEASEGATE_AUTH_FILE`), sent as
   * `Authorization: Bearer <apiKey>` on every request the client makes: the raw client's, and
   * those of `lock()`, `acquireSemaphore()`, `lockAll()` and their leases (renewals, releases and
   * events streams included), unless the call sets an `Authorization` header itself. Without it
   * (or with `""`) no header is added.
   */
  apiKey?: string;
}

/**
 * Creates a client for the gateway at `baseUrl` (e.g. `http://127.0.0.1:8080`). `options` are
 * openapi-fetch's (custom `fetch`, default `headers`, ...), plus `apiKey`. Throws a `TypeError`
 * for an `apiKey` holding a control character (a newline read from a file, say).
 */
export function createLeasegateClient(
  baseUrl: string,
  options: LeasegateClientOptions = {},
): LeasegateClient {
  const { apiKey, ...rest } = options;
  const client = createClient<paths>({ ...rest, baseUrl: baseUrl.replace(/\/+$/, "") });
  if (apiKey) {
    if (/[\u0000-\u001f\u007f]/.test(apiKey)) {
      throw new TypeError("apiKey holds a control character (a newline?), which no HTTP header can carry");
    }
    const authorization = `Bearer ${apiKey}`;
    // A middleware, not a default header merged into options.headers (which may be a Headers, an
    // array or a record); an Authorization header a call sets itself is left as it is.
    client.use({
      onRequest({ request }) {
        if (!request.headers.has("Authorization")) request.headers.set("Authorization", authorization);
        return request;
      },
    });
  }
  return client;
}
