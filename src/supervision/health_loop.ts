/**
 * The background health loop: every interval, one liveness poll of every
 * supervised engine at once, then a callback (the metrics file is rewritten
 * there). Rounds never overlap; stopping ends the wait at once.
 *
 * @module
 */
import type { EngineRun } from "./engine_run.ts";

/** How often and how long the loop polls. */
export interface HealthLoopOptions {
  /** Time between the end of one round and the start of the next, in milliseconds. */
  intervalMs: number;
  /** How long one poll may take, in milliseconds. */
  timeoutMs: number;
  /** Called after every round. */
  onRound?: () => void;
}

/**
 * Polls every engine in the background until stopped.
 */
export class HealthLoop {
  readonly #targets: readonly EngineRun[];
  readonly #options: HealthLoopOptions;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #round: Promise<void> | undefined;
  #stopped = false;

  /**
   * @param targets The engines to poll.
   * @param options Interval, timeout and the after-round callback.
   */
  constructor(
    targets: readonly EngineRun[],
    options: HealthLoopOptions,
  ) {
    this.#targets = targets;
    this.#options = options;
  }

  /** Schedules the first round one interval from now. */
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

  /** Stops the loop and waits for a round in progress to finish. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#round;
  }
}
