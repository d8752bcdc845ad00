import { log } from "./log.ts";
import { type Clock, REAL_CLOCK } from "./sleep.ts";

// Unref'd: a pending summary never delays an exit.
const SYSTEM_CLOCK: Clock = Object.freeze({
  ...REAL_CLOCK,
  schedule(callback: () => void, ms: number): () => void {
    const id = setTimeout(callback, ms);
    Deno.unrefTimer(id);
    return () => clearTimeout(id);
  },
});

const WINDOW_MS = 10_000;

type Window = { opened: number; suppressed: number; cancel: () => void };

const COUNT = new Intl.NumberFormat("en-US");

/** Per key, the first line of a 10 s window, the rest counted; keys from a small fixed set (one entry each). */
export class LogThrottle {
  #write: (line: string) => void;
  #clock: Clock;
  #windows = new Map<string, Window>();

  constructor(options: { write: (line: string) => void; clock?: Clock }) {
    this.#write = options.write;
    this.#clock = options.clock ?? SYSTEM_CLOCK;
  }

  /** `line` is only called when the line is written. */
  hit(key: string, line: () => string): boolean {
    const now = this.#clock.now();
    const open = this.#windows.get(key);
    if (open !== undefined) {
      if (now - open.opened < WINDOW_MS) {
        open.suppressed++;
        return false;
      }
      // The timer is late (a busy event loop): close the window here.
      this.#close(key, open);
    }
    const window: Window = { opened: now, suppressed: 0, cancel: () => {} };
    this.#windows.set(key, window);
    window.cancel = this.#clock.schedule(
      () => this.#close(key, window),
      WINDOW_MS,
    );
    this.#write(line());
    return true;
  }

  flush(): void {
    for (const [key, window] of [...this.#windows]) this.#close(key, window);
  }

  #close(key: string, window: Window): void {
    if (this.#windows.get(key) !== window) return;
    window.cancel();
    this.#windows.delete(key);
    if (window.suppressed > 0) {
      const more = COUNT.format(window.suppressed);
      this.#write(`${key}: … and ${more} more in ${WINDOW_MS / 1000} s`);
    }
  }
}

/** The first of a run of failures, and how many once it ends: a flood writes two lines. */
export class FailureRun {
  #what: string;
  #level: "warn" | "error";
  #count = 0;

  /** `what` as in `Cannot <what>: …`. */
  constructor(what: string, level: "warn" | "error" = "error") {
    this.#what = what;
    this.#level = level;
  }

  fail(error: unknown): void {
    if (this.#count++ > 0) return;
    const reason = error instanceof Error ? error.message : String(error);
    log[this.#level](`Cannot ${this.#what}: ${reason} (retrying)`);
  }

  ok(): void {
    if (this.#count === 0) return;
    log.info(`${this.#what}: working again after ${this.#count} failure(s)`);
    this.#count = 0;
  }
}
