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
 * Creates a client for the gateway at `baseUrl` (e.g. `http://127.0.0.1:8080`). `options` are
 * openapi-fetch's (custom `fetch`, default `headers`, ...).
 */
export function createLeasegateClient(
  baseUrl: string,
  options: Omit<ClientOptions, "baseUrl"> = {},
): LeasegateClient {
  return createClient<paths>({ ...options, baseUrl: baseUrl.replace(/\/+$/, "") });
}
