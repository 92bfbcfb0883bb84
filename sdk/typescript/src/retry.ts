/** One answer of the generated client: `data` on success, else `error` (the problem body). */
export interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** How many times one call is sent at most when it fails with a network error or a 503. */
const MAX_TRIES = 3;
/** The pause before the 2nd and 3rd try, in milliseconds (each plus up to 50% jitter). */
const RETRY_BACKOFF_MS = [100, 300] as const;

/**
 * Sends one logical call through `call` (which builds and sends the request; every try must
 * carry the same Idempotency-Key) up to MAX_TRIES times: again after a network error (fetch's
 * TypeError; with `onlyUnsent`, only one that shows the request was never sent) and, with
 * `retry503`, after a 503 answer. It resolves with the last answer, or rejects with the last
 * network error, or with `signal`'s reason once it is aborted.
 */
export async function withRetries<R extends { response: Response }>(
  call: () => Promise<R>,
  signal: AbortSignal | undefined,
  retry503: boolean,
  onlyUnsent = false,
): Promise<R> {
  for (let attempt = 1; ; attempt++) {
    let answer: R;
    try {
      answer = await call();
    } catch (e) {
      if (signal?.aborted || !(e instanceof TypeError) || attempt >= MAX_TRIES) throw e;
      if (onlyUnsent && !neverSent(e)) throw e;
      await delay(backoff(attempt), signal);
      continue;
    }
    if (!retry503 || answer.response.status !== 503 || attempt >= MAX_TRIES) return answer;
    await delay(backoff(attempt), signal);
  }
}

/** Error codes (of a fetch TypeError's `cause`) that show no byte of the request reached a server. */
const UNSENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"]);

/**
 * Whether fetch's TypeError `e` shows that the request never reached the gateway (no connection
 * was made), so that sending it again cannot apply it twice. Anything else (a reset connection,
 * a lost answer) may have been applied.
 */
function neverSent(e: TypeError): boolean {
  const code = (e.cause as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && UNSENT_CODES.has(code);
}

function backoff(attempt: number): number {
  const base = RETRY_BACKOFF_MS[Math.min(attempt, RETRY_BACKOFF_MS.length) - 1] ?? 100;
  return base * (1 + Math.random() / 2);
}

/** A fresh `Idempotency-Key`: one per logical call, sent on each of its tries. */
export function idempotencyKey(): string {
  return globalThis.crypto.randomUUID();
}

/** Resolves after `ms`, or rejects with `signal`'s reason once it is aborted. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
