/**
 * Counts a launcher's metrics file rewrites as they happen, by watching its
 * `metrics/` directory: every rewrite goes through a fresh temporary file
 * (`.mymodel_serve_<port>.prom.<16 random hex digits>.tmp`) renamed over the file, so
 * distinct temporary names are distinct writes. Once every engine is up, the
 * launcher rewrites the file once per health round and on nothing else, so
 * this counts health rounds exactly, whatever their pace.
 *
 * @module
 */
import { sleep } from "../plan.ts";

const TEMPORARY = /\/\.mymodel_serve_\d+\.prom\.[0-9a-f]{16}\.tmp$/;

/** The rewrites of one metrics directory since it started watching. */
export class MetricsWrites implements Disposable {
  /** When each write was seen (`performance.now()` ms), in order. */
  readonly times: number[] = [];
  readonly #seen = new Set<string>();
  readonly #watcher: Deno.FsWatcher;
  readonly #done: Promise<void>;

  /** @param dir The launcher's `<root>/metrics` (it must exist). */
  constructor(dir: string) {
    this.#watcher = Deno.watchFs(dir, { recursive: false });
    this.#done = this.#watch();
  }

  /** Writes seen so far. */
  get count(): number {
    return this.times.length;
  }

  async #watch(): Promise<void> {
    try {
      for await (const event of this.#watcher) {
        const at = performance.now();
        for (const path of event.paths) {
          if (TEMPORARY.test(path) && !this.#seen.has(path)) {
            this.#seen.add(path);
            this.times.push(at);
          }
        }
      }
    } catch {
      // Closed.
    }
  }

  /**
   * Waits until at least `count` writes have been seen, polling every 2 ms
   * so the caller can take its readings right after the write.
   *
   * @throws {Error} When `ms` passes first or `signal` aborts.
   */
  async waitFor(
    count: number,
    signal: AbortSignal,
    ms = 15_000,
  ): Promise<void> {
    const deadline = performance.now() + ms;
    while (this.count < count) {
      if (signal.aborted) throw new Error("interrupted");
      if (performance.now() > deadline) {
        throw new Error(
          `Cannot count health rounds: ${this.count} metrics writes after ${ms} ms, expected ${count}`,
        );
      }
      await sleep(2);
    }
  }

  /** Stops watching. */
  [Symbol.dispose](): void {
    try {
      this.#watcher.close();
    } catch {
      // Already closed.
    }
  }

  /** Resolves once the watch loop has ended (after dispose). */
  get closed(): Promise<void> {
    return this.#done;
  }
}
