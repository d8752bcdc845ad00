/**
 * Reloads one at a time: a request during a reload runs one more after it,
 * and any number of requests while one waits are that same one. Requests
 * before {@linkcode ReloadQueue.open} (the API not listening yet) wait for it.
 *
 * @module
 */

/**
 * Serializes and coalesces reload requests.
 *
 * @example
 * ```ts ignore
 * const queue = new ReloadQueue(() => reloader.reload(), () => refused("stopping"));
 * Deno.addSignalListener("SIGHUP", () => void queue.request());
 * queue.open(); // once the API listens
 * ```
 */
export class ReloadQueue<R> {
  readonly #run: () => Promise<R>;
  readonly #skip: () => R;
  readonly #gate = Promise.withResolvers<void>();
  /** What the next reload waits for: the gate, then the reload before it. */
  #tail: Promise<unknown> = this.#gate.promise;
  /** The reload requested but not begun, which later requests join. */
  #waiting: Promise<R> | undefined;
  #closed = false;

  /**
   * @param run Performs one reload.
   * @param skip The result of a request that never runs (closed first).
   */
  constructor(run: () => Promise<R>, skip: () => R) {
    this.#run = run;
    this.#skip = skip;
  }

  /**
   * Asks for a reload: joins the one waiting to begin, else queues one after
   * the reload under way (or after {@linkcode ReloadQueue.open}).
   *
   * @returns The result of the reload that serves this request.
   */
  request(): Promise<R> {
    if (this.#waiting) return this.#waiting;
    const waiting = this.#tail.then(() => {
      this.#waiting = undefined;
      return this.#closed ? this.#skip() : this.#run();
    });
    this.#waiting = waiting;
    this.#tail = waiting.catch(() => {});
    return waiting;
  }

  /** Lets requests run (the API listens). */
  open(): void {
    this.#gate.resolve();
  }

  /** Runs nothing more: waiting requests get the skip result. */
  close(): void {
    this.#closed = true;
    this.#gate.resolve();
  }

  /** Resolves once the reload under way (if any) and every request have finished. */
  async settled(): Promise<void> {
    await this.#tail;
  }
}
