/**
 * The one road to GPU facts: the only module that runs `nvidia-smi`. The
 * launcher's plan takes its one look through the launcher's monitor
 * ({@linkcode GpuMonitor.look}), pool detection lists the device indices
 * through {@linkcode listGpuIndices}, and the start gate and the memory
 * rounds (what `?detail=1` reports) read the same monitor's snapshots.
 *
 * One query per interval and one in flight, whatever the number of callers.
 *
 * @module
 */
import { FailureRun } from "../common/log_throttle.ts";
import {
  type GpuQuery,
  type GpuSnapshot,
  type NvidiaSmiRun,
  queryGpus,
  type QueryGpusOptions,
  runNvidiaSmi,
} from "./nvidia_smi.ts";

/** One `nvidia-smi --query-gpu=index` run, for pool detection when no look is under way. */
export function listGpuIndices(
  options: QueryGpusOptions,
): Promise<NvidiaSmiRun> {
  return runNvidiaSmi(["--query-gpu=index", "--format=csv,noheader"], options);
}

/** How a {@linkcode GpuMonitor} asks. */
export interface GpuMonitorOptions {
  /** The environment `nvidia-smi` runs with (its `PATH` finds it). @default {this process's environment} */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** How long one `nvidia-smi` run may take before it is killed. @default {5000} */
  readonly timeoutMs?: number;
  /** The query (tests replace it). @default {queryGpus} */
  readonly query?: (options: QueryGpusOptions) => Promise<GpuQuery>;
  /** The longest wait after failures (1 s, doubling; at once without nvidia-smi); 0: per `maxAgeMs`. @default {60000} */
  readonly maxBackoffMs?: number;
  /** Monotonic milliseconds (tests move it by hand). @default {performance.now} */
  readonly now?: () => number;
}

/** The first wait after a failure; it doubles with each further failure. */
const FIRST_BACKOFF_MS = 1000;

interface Answer {
  readonly snapshot: GpuSnapshot | undefined;
  /** The monitor's clock when it came. */
  readonly came: number;
  /** How long a failure keeps answering for (0 for a snapshot). */
  readonly backoffMs: number;
  /** The last mark taken before its query was asked. */
  readonly mark: number;
}

/**
 * The latest GPU facts, asked of `nvidia-smi` at most once per interval.
 *
 * Failures are cached too (a failing or hanging `nvidia-smi` is not run once
 * a call): the next query waits 1 s, 2 s, 4 s… up to `maxBackoffMs`, at once
 * that long when none is on PATH; a run of failures is one warning, the
 * first success after it one line. A snapshot asked `after` a
 * {@linkcode GpuMonitor.mark} comes from a query asked after the mark,
 * however young an older answer (a failure keeps answering through its
 * backoff: an event does not mend `nvidia-smi`).
 *
 * @example
 * ```ts ignore
 * const gpus = new GpuMonitor({ timeoutMs: 2000 });
 * const snapshot = await gpus.snapshot(1000); // shared by every engine's gate
 * if (snapshot === undefined) skipMemoryRules();
 * const exited = gpus.mark(); // a run on these GPUs just exited
 * const after = await gpus.snapshot(1000, exited); // asked after the exit
 * ```
 */
export class GpuMonitor {
  #options: QueryGpusOptions;
  #query: (options: QueryGpusOptions) => Promise<GpuQuery>;
  #maxBackoffMs: number;
  #now: () => number;
  #latest: Answer | undefined;
  /** The query in flight, and the mark it was asked at. */
  #inFlight:
    | { answer: Promise<GpuSnapshot | undefined>; mark: number }
    | undefined;
  #marks = 0;
  #queries = 0;
  #failuresInRow = 0;
  #failures = new FailureRun("query GPUs", "warn");

  /** @param options The environment, the timeout, the backoff; a query for tests. */
  constructor(options: GpuMonitorOptions = {}) {
    this.#options = {
      env: options.env ?? {},
      ...(options.timeoutMs === undefined
        ? {}
        : { timeoutMs: options.timeoutMs }),
    };
    this.#query = options.query ?? queryGpus;
    this.#maxBackoffMs = options.maxBackoffMs ?? 60_000;
    this.#now = options.now ?? (() => performance.now());
  }

  /**
   * One whole look now, for the launcher's plan: neither counted nor kept,
   * and logging nothing (the plan words its own warnings).
   */
  look(): Promise<GpuQuery> {
    return this.#query(this.#options);
  }

  /** Number of `nvidia-smi` query rounds made so far (each round is the two runs of {@linkcode queryGpus}). */
  get queries(): number {
    return this.#queries;
  }

  /**
   * Notes that the facts may have changed from now on (a run exited or
   * spawned): answers to queries asked before are stale for anyone passing
   * the returned mark to {@linkcode GpuMonitor.snapshot}. Queries nothing.
   *
   * @returns The mark, greater than every earlier one.
   */
  mark(): number {
    return ++this.#marks;
  }

  /**
   * The latest snapshot if younger than `maxAgeMs` and asked after the mark
   * `after`, else one new query; concurrent callers share one query in
   * flight (one asked before `after` is awaited, then a new one is asked).
   *
   * @param maxAgeMs How old an answer the caller accepts.
   * @param after A {@linkcode GpuMonitor.mark}: only an answer asked after
   *   it will do. @default {0, any}
   * @returns The snapshot, or `undefined` while `nvidia-smi` fails (or is
   *   absent): rules needing memory facts are then skipped. Never rejects.
   */
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
      // A failure keeps answering through its backoff, marks or not.
      if (age < latest.backoffMs) return Promise.resolve(latest.snapshot);
      if (age < maxAgeMs && latest.mark >= after) {
        return Promise.resolve(latest.snapshot);
      }
    }
    const asking = { answer: this.#answer(this.#marks), mark: this.#marks };
    this.#inFlight = asking;
    asking.answer.finally(() => {
      if (this.#inFlight === asking) this.#inFlight = undefined;
    });
    return asking.answer;
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
      this.#latest = {
        snapshot: answer.snapshot,
        came: this.#now(),
        backoffMs: 0,
        mark,
      };
      return answer.snapshot;
    }
    this.#failures.fail(
      `${answer.error}; rules needing GPU memory facts are skipped while it fails`,
    );
    const backoffMs = answer.absent ? this.#maxBackoffMs : Math.min(
      this.#maxBackoffMs,
      FIRST_BACKOFF_MS * 2 ** Math.min(this.#failuresInRow, 30),
    );
    this.#failuresInRow++;
    this.#latest = {
      snapshot: undefined,
      came: this.#now(),
      backoffMs,
      mark,
    };
    return undefined;
  }
}
