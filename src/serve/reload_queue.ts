// Reloads one at a time: a request during a reload runs one more after it,
// and any number of requests while one waits are that same one. Requests
// before {@linkcode ReloadQueue.open} (the API not listening yet) wait for it.

export class ReloadQueue<R> {
  readonly #run: () => Promise<R>;
  readonly #skip: () => R;
  readonly #gate = Promise.withResolvers<void>();
  /** What the next reload waits for: the gate, then the reload before it. */
  #tail: Promise<unknown> = this.#gate.promise;
  /** The reload requested but not begun, which later requests join. */
  #waiting: Promise<R> | undefined;
  #closed = false;

  /** `skip`: the result of a request that never runs (closed first). */
  constructor(run: () => Promise<R>, skip: () => R) {
    this.#run = run;
    this.#skip = skip;
  }

  /** Joins the reload waiting to begin, else queues one after the one under way. */
  request(): Promise<R> {
    if (this.#waiting) return this.#waiting;
    const waiting = this.#waiting = this.#tail.then(() => {
      this.#waiting = undefined;
      return this.#closed ? this.#skip() : this.#run();
    });
    this.#tail = waiting.catch(() => {});
    return waiting;
  }

  open(): void {
    this.#gate.resolve();
  }

  /** Waiting requests get the skip result; resolves once the reload under way (if any) and every request have finished. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#gate.resolve();
    await this.#tail;
  }
}

/** A reload's catalogue read and parse must end within this. */
const RELOAD_READ_MS = 30_000;

/** The reason a stop gives a reload's read. */
export const STOPPING: Error = new Error(
  "the launcher is stopping (expected no reload during a stop)",
);

/** `stop`, or `ms` gone by (a disk that hangs, a server sending a byte a second); disposing clears the timer. */
export function reloadDeadline(
  stop: AbortSignal,
  ms: number = RELOAD_READ_MS,
): { signal: AbortSignal } & Disposable {
  const late = new AbortController();
  const why = `no complete read within ${ms / 1000} s`;
  const expected =
    "expected the catalogue read and parsed in time; the running engines are kept";
  const timer = setTimeout(
    () => late.abort(new Error(`${why} (${expected})`)),
    ms,
  );
  return {
    signal: AbortSignal.any([late.signal, stop]),
    [Symbol.dispose]: () => clearTimeout(timer),
  };
}
