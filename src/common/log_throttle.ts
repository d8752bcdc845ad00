/**
 * Keeps a log bounded under abuse: per key, the first line of a window is
 * written, the rest of that window only counted, and when the window ends
 * one line says how many were left out ("… and 4,211 more in 10 s").
 *
 * @module
 */
import { log } from "./log.ts";

/** Time as the throttle sees it; tests pass a clock they move by hand. */
export interface Clock {
  /** Milliseconds, monotonic enough for windows of seconds. */
  now(): number;
  /**
   * Calls `callback` once after `ms`. The default does not keep the process
   * alive (an unref'd timer): a pending summary never delays an exit.
   *
   * @returns A function that cancels the call.
   */
  schedule(callback: () => void, ms: number): () => void;
}

/** The wall clock and unref'd timers. */
const SYSTEM_CLOCK: Clock = Object.freeze({
  now: Date.now,
  schedule(callback: () => void, ms: number): () => void {
    const id = setTimeout(callback, ms);
    Deno.unrefTimer(id);
    return () => clearTimeout(id);
  },
});

/** Length of a window, in milliseconds. */
const WINDOW_MS = 10_000;

interface Window {
  opened: number;
  suppressed: number;
  cancel: (() => void) | undefined;
}

const COUNT = new Intl.NumberFormat("en-US");

/**
 * At most one line per key per window, then a count of the rest. Keys must
 * come from a small fixed set: the throttle keeps one entry per live key.
 */
export class LogThrottle {
  #write: (line: string) => void;
  #clock: Clock;
  #windows = new Map<string, Window>();

  /** @param options Where lines go, and the clock (tests). */
  constructor(
    options: { write: (line: string) => void; clock?: Clock },
  ) {
    this.#write = options.write;
    this.#clock = options.clock ?? SYSTEM_CLOCK;
  }

  /**
   * Writes the line when `key` has no open window (opening one), else counts
   * it. `line` is only called when the line is written.
   *
   * @param key The kind of event, e.g. the refusal reason.
   * @param line Builds the line to write.
   * @returns Whether the line was written.
   */
  hit(key: string, line: () => string): boolean {
    const now = this.#clock.now();
    const open = this.#windows.get(key);
    if (open !== undefined) {
      if (now - open.opened < WINDOW_MS) {
        open.suppressed++;
        return false;
      }
      // The timer is late (a busy event loop): close the window here.
      open.cancel?.();
      this.#close(key, open);
    }
    const window: Window = { opened: now, suppressed: 0, cancel: undefined };
    this.#windows.set(key, window);
    window.cancel = this.#clock.schedule(
      () => this.#close(key, window),
      WINDOW_MS,
    );
    this.#write(line());
    return true;
  }

  /** Ends every open window now, writing the pending summaries. */
  flush(): void {
    for (const [key, window] of [...this.#windows]) {
      window.cancel?.();
      this.#close(key, window);
    }
  }

  #close(key: string, window: Window): void {
    if (this.#windows.get(key) !== window) return;
    this.#windows.delete(key);
    if (window.suppressed > 0) {
      const more = COUNT.format(window.suppressed);
      this.#write(`${key}: … and ${more} more in ${WINDOW_MS / 1000} s`);
    }
  }
}

/**
 * Logs the first of a run of failures and how many followed once the run
 * ends: a flood writes two lines, not thousands.
 *
 * @example
 * ```ts ignore
 * const failures = new FailureRun("accept a connection", "warn");
 * try { accept(); failures.ok(); } catch (error) { failures.fail(error); }
 * ```
 */
export class FailureRun {
  #what: string;
  #level: "warn" | "error";
  #count = 0;

  /**
   * @param what What fails, as in `Cannot <what>: …`.
   * @param level The level of the line that starts a run.
   */
  constructor(what: string, level: "warn" | "error" = "error") {
    this.#what = what;
    this.#level = level;
  }

  /** Counts a failure; logs it when it starts a run. */
  fail(error: unknown): void {
    if (this.#count++ === 0) {
      log[this.#level](
        `Cannot ${this.#what}: ${(error instanceof Error
          ? error.message
          : String(error))} (retrying)`,
      );
    }
  }

  /** Ends a run of failures, saying how long it was. */
  ok(): void {
    if (this.#count === 0) return;
    log.info(`${this.#what}: working again after ${this.#count} failure(s)`);
    this.#count = 0;
  }
}
