// Every duration the launcher takes ends in a timer, and a timer holds at most
// 2^31-1 ms (about 24.8 days): a longer delay fires at once, with a
// TimeoutOverflowWarning, every time. The flags and the cards go through here.

/** The longest delay `setTimeout` holds, in milliseconds. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Seconds as typed: decimal digits, a fraction; no sign, exponent, hex, octal or binary (as the count flags). */
const DECIMAL = /^\s*(?:\d+\.?\d*|\.\d+)\s*$/;

/**
 * Seconds as typed, in whole milliseconds; undefined when the text is not a
 * decimal number from `min` to what a timer holds, or when it rounds to 0 ms
 * without being 0 (0 keeps its own meaning, such as "off").
 *
 * @example
 * ```ts
 * import { secondsToMs } from "./seconds.ts";
 * console.assert(secondsToMs("1.5", 0) === 1500);
 * console.assert(secondsToMs("2592000", 0) === undefined); // 30 days
 * console.assert(secondsToMs("0x10", 0) === undefined);
 * ```
 */
export function secondsToMs(text: string, min: number): number | undefined {
  if (!DECIMAL.test(text)) return undefined;
  const seconds = Number(text);
  const ms = Math.round(seconds * 1000);
  return seconds < min || ms > MAX_TIMER_MS || (ms === 0 && seconds !== 0)
    ? undefined
    : ms;
}

/** What {@linkcode secondsToMs} takes, for a message; `zero` says what 0 means. */
export function secondsExpected(min: number, zero?: string): string {
  const range = `a decimal number of seconds from ${Math.max(min, 0.001)} to ${
    MAX_TIMER_MS / 1000
  } (a timer holds at most 2^31-1 ms, about 24.8 days)`;
  return min > 0 ? range : `0${zero ? ` (${zero})` : ""} or ${range}`;
}
