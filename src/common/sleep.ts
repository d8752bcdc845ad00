/** `@std/async`'s `delay` (JSR is not reachable here), but never rejects: resolves at once when `signal` aborts. */
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

/** `promise`'s value, or undefined after `ms`. */
export async function within<T>(
  promise: Promise<T>,
  ms: number,
): Promise<T | undefined> {
  const timer = new AbortController();
  try {
    return await Promise.race([
      promise,
      sleep(ms, timer.signal).then(() => undefined),
    ]);
  } finally {
    timer.abort();
  }
}

/** Waits for `work` at most `ms`; true when it did not finish in time (it goes on, unwatched). */
export async function late(
  work: Promise<unknown>,
  ms: number,
): Promise<boolean> {
  return (await within(work.then(() => false), ms)) ?? true;
}
