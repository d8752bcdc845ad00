/** A `Clock` whose time moves only when the test says so. */
import type { Clock } from "../../src/common/sleep.ts";

/** `advance` fires each timer due, in time order, those scheduled meanwhile included. */
export class ManualClock implements Clock {
  #now = 0;
  #timers: { at: number; callback: () => void }[] = [];

  now(): number {
    return this.#now;
  }

  schedule(callback: () => void, ms: number): () => void {
    const timer = { at: this.#now + ms, callback };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  advance(ms: number): void {
    const end = this.#now + ms;
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= end)
        .sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = due.at;
      due.callback();
    }
    this.#now = end;
  }
}
