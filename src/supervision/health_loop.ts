/**
 * The background health loop: every interval, one liveness poll of every
 * supervised engine at once, each followed by its serving look (its metrics
 * and sleep, `serving_watch.ts`), then a callback (the metrics file is
 * rewritten there). Rounds never overlap; stopping ends the wait at once.
 *
 * @module
 */
import type { EngineRun } from "./engine_run.ts";

/** How often and how long the loop polls. */
export interface HealthLoopOptions {
  /** Time between the end of one round and the start of the next, in milliseconds. */
  intervalMs: number;
  timeoutMs: number;
  onRound?: () => void;
}

export class HealthLoop {
  readonly #targets: readonly EngineRun[];
  readonly #options: HealthLoopOptions;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #round: Promise<void> | undefined;
  #stopped = false;

  constructor(
    targets: readonly EngineRun[],
    options: HealthLoopOptions,
  ) {
    this.#targets = targets;
    this.#options = options;
  }

  start(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#schedule();
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#round = this.#runRound().finally(() => {
        this.#round = undefined;
        this.#schedule();
      });
    }, this.#options.intervalMs);
  }

  async #runRound(): Promise<void> {
    await Promise.all(
      this.#targets.map((t) => t.healthy(this.#options.timeoutMs, true)),
    );
    if (!this.#stopped) this.#options.onRound?.();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#round;
  }
}
