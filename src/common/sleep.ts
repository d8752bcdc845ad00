/**
 * Waiting that a caller can cut short: `@std/async`'s `delay` with a signal,
 * in a few lines (JSR is not reachable where this is built).
 *
 * @module
 */

/**
 * Resolves after `ms`, or at once when `signal` aborts (never rejects). The
 * timer is cleared either way, so nothing is left pending after an abort.
 *
 * @param ms How long to wait.
 * @param signal Ends the wait early.
 * @returns When the wait is over.
 *
 * @example
 * ```ts ignore
 * const stopping = new AbortController();
 * await sleep(1_000, stopping.signal); // 1 s, or less once stopping.abort() is called
 * ```
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
  });
}

/** `promise`'s value, or undefined after `ms`; the timer never outlives it. */
export async function within<T>(
  promise: Promise<T>,
  ms: number,
): Promise<T | undefined> {
  let id: ReturnType<typeof setTimeout> | undefined;
  const timer = new Promise<undefined>((resolve) => {
    id = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([promise, timer]);
  } finally {
    clearTimeout(id);
  }
}
