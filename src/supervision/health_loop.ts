// Rounds never overlap; stopping ends the wait at once.
import { sleep } from "../common/sleep.ts";
import type { EngineRun } from "./engine_run.ts";

export class HealthLoop {
  readonly #stop = new AbortController();
  readonly #run: () => Promise<void>;
  #loop: Promise<void> | undefined;

  constructor(
    targets: readonly EngineRun[],
    o: { intervalMs: number; timeoutMs: number; onRound?: () => void },
  ) {
    const { signal } = this.#stop;
    this.#run = async () => {
      while (!signal.aborted) {
        await sleep(o.intervalMs, signal); // from the end of the last round
        if (signal.aborted) return;
        await Promise.all(targets.map((t) => t.healthy(o.timeoutMs, true)));
        if (!signal.aborted) o.onRound?.();
      }
    };
  }

  start(): void {
    this.#loop ??= this.#run();
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#loop;
  }
}
