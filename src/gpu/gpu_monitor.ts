// The launcher's GPU facts: one `nvidia-smi` query per interval and one in
// flight, whatever the number of callers (the start gate, the memory rounds).
import { FailureRun } from "../common/log_throttle.ts";
import {
  type GpuQuery,
  type GpuSnapshot,
  queryGpus,
  type QueryGpusOptions,
} from "./nvidia_smi.ts";

const FIRST_BACKOFF_MS = 1000;

interface Answer {
  readonly snapshot: GpuSnapshot | undefined;
  readonly came: number;
  readonly backoffMs: number;
  /** The last mark taken before its query was asked. */
  readonly mark: number;
}

// Failures are cached too, so that a failing or hanging `nvidia-smi` is not
// run once a call: 1 s, 2 s, 4 s… up to `maxBackoffMs` (at once without one on
// PATH), even past a mark, since an event does not mend `nvidia-smi`.
export class GpuMonitor {
  #options: QueryGpusOptions;
  #query: (options: QueryGpusOptions) => Promise<GpuQuery>;
  #maxBackoffMs: number;
  #now: () => number;
  #latest: Answer | undefined;
  #inFlight:
    | { answer: Promise<GpuSnapshot | undefined>; mark: number }
    | undefined;
  #marks = 0;
  #queries = 0;
  #failuresInRow = 0;
  #failures = new FailureRun("query GPUs", "warn");
  /** Waiting for an answer to a query asked at their mark or later. */
  #next: { mark: number; resolve: (snapshot: GpuSnapshot) => void }[] = [];

  constructor(
    options: Partial<QueryGpusOptions> & {
      readonly query?: (options: QueryGpusOptions) => Promise<GpuQuery>;
      /** 0: per `maxAgeMs`. */
      readonly maxBackoffMs?: number;
      readonly now?: () => number;
    } = {},
  ) {
    const { query, maxBackoffMs, now, ...queryOptions } = options;
    this.#options = { ...queryOptions, env: queryOptions.env ?? {} };
    this.#query = query ?? queryGpus;
    this.#maxBackoffMs = maxBackoffMs ?? 60_000;
    this.#now = now ?? (() => performance.now());
  }

  /** One whole look for the launcher's plan: neither counted nor kept, logging nothing. */
  look(): Promise<GpuQuery> {
    return this.#query(this.#options);
  }

  get queries(): number {
    return this.#queries;
  }

  /** The facts may have changed from now on (a run exited or spawned). */
  mark(): number {
    return ++this.#marks;
  }

  /** The first successful answer to a query asked at `mark` or later, whoever asks it; asks nothing. */
  next(mark: number): Promise<GpuSnapshot> {
    return new Promise((resolve) => this.#next.push({ mark, resolve }));
  }

  /** The latest answer no older than `maxAgeMs`, asked at mark `after` or later; undefined while `nvidia-smi` fails; never rejects. */
  snapshot(maxAgeMs: number, after = 0): Promise<GpuSnapshot | undefined> {
    const inFlight = this.#inFlight;
    if (inFlight) {
      return inFlight.mark >= after
        ? inFlight.answer
        : inFlight.answer.then(() => this.snapshot(maxAgeMs, after));
    }
    const latest = this.#latest;
    if (latest !== undefined) {
      const age = this.#now() - latest.came;
      if (age < latest.backoffMs || (age < maxAgeMs && latest.mark >= after)) {
        return Promise.resolve(latest.snapshot);
      }
    }
    const mark = this.#marks;
    const answer = this.#answer(mark).finally(() => {
      this.#inFlight = undefined;
    });
    this.#inFlight = { answer, mark };
    return answer;
  }

  async #answer(mark: number): Promise<GpuSnapshot | undefined> {
    this.#queries++;
    let answer: GpuQuery;
    try {
      answer = await this.#query(this.#options);
    } catch (error) {
      // queryGpus never throws; a replaced query might.
      answer = { ok: false, error: (error as Error)?.message ?? String(error) };
    }
    if (answer.ok) {
      this.#failures.ok();
      this.#failuresInRow = 0;
      const { snapshot } = answer;
      this.#latest = { snapshot, came: this.#now(), backoffMs: 0, mark };
      this.#next = this.#next.filter((next) => {
        if (next.mark > mark) return true;
        next.resolve(snapshot);
        return false;
      });
      return snapshot;
    }
    this.#failures.fail(
      `${answer.error}; rules needing GPU memory facts are skipped while it fails`,
    );
    const backoffMs = answer.absent ? this.#maxBackoffMs : Math.min(
      this.#maxBackoffMs,
      FIRST_BACKOFF_MS * 2 ** Math.min(this.#failuresInRow, 30),
    );
    this.#failuresInRow++;
    this.#latest = { snapshot: undefined, came: this.#now(), backoffMs, mark };
    return undefined;
  }
}
