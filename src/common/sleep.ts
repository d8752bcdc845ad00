/** `@std/async`'s `delay` (JSR is not reachable here), but never rejects: resolves at once when `signal` aborts. */
export function sleep(
  ms: number,
  signal?: AbortSignal,
  clock: Clock = REAL_CLOCK,
): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const cancel = clock.schedule(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done(): void {
      cancel();
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

// Not AbortSignal.timeout(): that one lives on for the whole timeout after the
// request ends, and under load thousands pile up (RSS grew 2x).
export function abortAfter(
  timeoutMs: number,
  outer?: AbortSignal,
): { readonly signal: AbortSignal; clear(): void } {
  const abort = new AbortController();
  const stop = () => abort.abort();
  const timer = setTimeout(stop, timeoutMs);
  if (outer?.aborted) stop();
  else outer?.addEventListener("abort", stop, { once: true });
  return {
    signal: abort.signal,
    clear() {
      clearTimeout(timer);
      outer?.removeEventListener("abort", stop);
    },
  };
}

/** Time as engine runs, the start gate and the log throttle see it (tests move theirs by hand); a wall-clock step (NTP, a VM resume) moves no duration. @example `clock.now() - began` (a duration), `new Date(clock.wall())` (a time shown) */
export interface Clock {
  /** Monotonic milliseconds (`performance.now()`): never compared with a wall time. */
  now(): number;
  /** Milliseconds since the epoch (`Date.now()`): only where a time is shown. */
  wall(): number;
  /** Calls `callback` after `ms`; the function returned cancels it. */
  schedule(callback: () => void, ms: number): () => void;
}

export const REAL_CLOCK: Clock = Object.freeze({
  now: () => performance.now(),
  wall: () => Date.now(),
  schedule(callback: () => void, ms: number): () => void {
    const id = setTimeout(callback, ms);
    return () => clearTimeout(id);
  },
});

/** The wall time of `at`, an earlier `clock.now()`, to show. @example `shownAt(clock, clock.now())`: now, as `new Date().toISOString()` says it */
export function shownAt(clock: Clock, at: number): string {
  return new Date(clock.wall() - clock.now() + at).toISOString();
}
