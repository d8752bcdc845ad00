/**
 * Liveness of one engine run as a small state machine: the polls' verdicts
 * in, what to do out. A run that never answered 200 is loading and is spared
 * by the failure count (big models load for tens of minutes), but not when it
 * stays silent past `--start-timeout`; after its first 200, failures in a row
 * stop it. No timers, no processes: the supervisor feeds it.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { LogThrottle } from "../common/log_throttle.ts";
import type { EndReason } from "./restart_policy.ts";
import type { SupervisorOptions } from "./supervisor_options.ts";

/** What the supervisor does with one observation. */
export type Verdict =
  /** Answered 200; `first` when it is the run's first (its load is over). */
  | { readonly kind: "ready"; readonly first: boolean }
  /** The poll failed on the launcher's side (no socket to be had): it never counts. */
  | { readonly kind: "ignored" }
  /** Not answered yet and never did: still loading. */
  | { readonly kind: "loading" }
  /** Failed after a first 200, not (yet) enough to stop it. */
  | { readonly kind: "unhealthy" }
  /** Stop the run; the restart policy then applies as for a crash. */
  | { readonly kind: "stop"; readonly reason: EndReason; readonly why: string };

/**
 * One supervised engine's liveness, reset at every run.
 */
export class Liveness {
  readonly #name: string;
  /** Polls that failed on our side: one line per 10 s, then a count of the rest. */
  readonly #local = new LogThrottle({ write: log.warn });
  readonly #failuresLimit: number;
  readonly #startTimeoutMs: number;
  #failures = 0;
  #firstOkAt: number | undefined;

  /**
   * @param name The engine's catalogue name, for log lines.
   * @param limits The failure count (0: never) and the start timeout (0: none).
   */
  constructor(
    name: string,
    limits: Pick<SupervisorOptions, "livenessFailures" | "startTimeoutMs">,
  ) {
    this.#name = name;
    this.#failuresLimit = limits.livenessFailures;
    this.#startTimeoutMs = limits.startTimeoutMs;
  }

  /** When the current run first answered 200, or undefined. */
  get firstOkAt(): number | undefined {
    return this.#firstOkAt;
  }

  /** A new run starts. */
  reset(): void {
    this.#failures = 0;
    this.#firstOkAt = undefined;
  }

  /**
   * A poll's answer. One that failed for the launcher's own reason (too many
   * open files …) is logged at most once per 10 s and never counts.
   *
   * @param result Whether it answered 200; `local`: why it failed on our side.
   * @param counts Whether a failure counts (background polls do; a
   *   `GET /models` request's poll does not).
   * @returns What to do.
   */
  observe(
    result: { readonly ok: boolean; readonly local?: string | undefined },
    counts: boolean,
  ): Verdict {
    const { ok, local } = result;
    if (local) {
      const name = this.#name;
      // The key doubles as the summary's subject: "<key>: … and 212 more in 10 s".
      this.#local.hit(
        `health polls of engine ${name} that failed on the launcher's side`,
        () =>
          `health poll of engine ${name} failed on the launcher's side, not counted against the engine: ${local}`,
      );
      return { kind: "ignored" };
    }
    if (ok) {
      const first = this.#firstOkAt === undefined;
      this.#firstOkAt ??= Date.now();
      this.#failures = 0;
      return { kind: "ready", first };
    }
    if (this.#firstOkAt === undefined) return { kind: "loading" };
    if (!counts) return { kind: "unhealthy" };
    this.#failures++;
    if (this.#failuresLimit > 0 && this.#failures >= this.#failuresLimit) {
      return {
        kind: "stop",
        reason: "unhealthy",
        why:
          `failed ${this.#failures} health polls in a row after answering 200: stopping it (SIGTERM, then SIGKILL)`,
      };
    }
    return { kind: "unhealthy" };
  }

  /**
   * When the run's silence timer fires: a loading run silent since
   * `lastSignOfLife` (its start, or its last output) for `--start-timeout`
   * is stopped.
   *
   * @param lastSignOfLife `Date.now()` time of the run's start or last output.
   * @returns A stop verdict, or undefined.
   */
  silentLoad(lastSignOfLife: number): Verdict | undefined {
    if (this.#startTimeoutMs <= 0 || this.#firstOkAt !== undefined) {
      return undefined;
    }
    const silent = Date.now() - lastSignOfLife;
    if (silent < this.#startTimeoutMs) return undefined;
    return {
      kind: "stop",
      reason: "start-timeout",
      why: `has not answered 200 and wrote nothing for ${
        Math.round(silent / 1000)
      } s (--start-timeout): stopping it (SIGTERM, then SIGKILL)`,
    };
  }
}
