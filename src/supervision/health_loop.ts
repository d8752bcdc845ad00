/**
 * The background health loop: every interval, one liveness poll of every
 * supervised engine at once, each followed by its serving look (its metrics
 * and sleep, `serving_watch.ts`), then a callback (the metrics file is
 * rewritten there). Rounds never overlap; stopping ends the wait at once.
 *
 * @module
 */
import { sleep } from "../common/sleep.ts";
import type { EngineRun } from "./engine_run.ts";

export interface HealthLoopOptions {
  /** Time between the end of one round and the start of the next, in milliseconds. */
  intervalMs: number;
  timeoutMs: number;
  onRound?: () => void;
}

export class HealthLoop {
  readonly #targets: readonly EngineRun[];
  readonly #options: HealthLoopOptions;
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;

  constructor(targets: readonly EngineRun[], options: HealthLoopOptions) {
    this.#targets = targets;
    this.#options = options;
  }

  start(): void {
    this.#loop ??= this.#run();
  }

  async #run(): Promise<void> {
    const { signal } = this.#stop;
    const { intervalMs, timeoutMs, onRound } = this.#options;
    while (!signal.aborted) {
      await sleep(intervalMs, signal);
      if (signal.aborted) return;
      await Promise.all(this.#targets.map((t) => t.healthy(timeoutMs, true)));
      if (!signal.aborted) onRound?.();
    }
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#loop;
  }
}
