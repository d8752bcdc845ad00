/**
 * The restart policy and liveness as pure rules: when the launcher ends a run
 * itself, whether an ended run is started again, and after how long. No
 * processes, no timers: the engine run asks.
 *
 * @module
 */
import type { RestartPolicy } from "../catalogue.ts";

/** Why an engine run ended (the `last_exit` of `GET /models?detail=1` says more). */
export interface RunEnd {
  readonly code: number | null;
  readonly signal: string | null;
  readonly reason: EndReason;
}

/**
 * Why the launcher ended a run itself: `"unhealthy"` when the liveness check
 * stopped it, `"start-timeout"` when it loaded silently too long, `"stalled"`
 * when it served nothing (requests running and no token, or two failed
 * canaries); `"exit"` when the engine ended on its own.
 */
export type EndReason = "exit" | "unhealthy" | "start-timeout" | "stalled";

/**
 * The lifecycle states `GET /models?detail=1` reports. `waiting`: not spawned
 * yet, held by the GPU start gate; `draining`: a planned stop waits for the
 * requests in flight (`drain.ts`); `failed`: ended twice in a row for a cause
 * a restart cannot fix (bad arguments, model not found), tried again after
 * `--failed-retry` or at the next reload; `sleeping`: ready, its weights off
 * the GPU until a request wakes it (llama-server's `--sleep-idle-seconds`,
 * vLLM's `/sleep`).
 */
export type EngineState =
  | "waiting"
  | "starting"
  | "ready"
  | "sleeping"
  | "unhealthy"
  | "draining"
  | "stopping"
  | "backoff"
  | "failed"
  | "exited";

export const ENGINE_STATES: readonly EngineState[] = [
  "waiting",
  "starting",
  "ready",
  "sleeping",
  "unhealthy",
  "draining",
  "stopping",
  "backoff",
  "failed",
  "exited",
];

/** Causes a restart cannot fix: twice in a row, the engine is `failed`. */
const HOPELESS: ReadonlySet<string> = new Set([
  "bad-arguments",
  "model-not-found",
]);
/** `gpu-memory-profiling` exits in a row retried without a longer delay. */
const PROFILING_RETRIES = 3;

/**
 * Recovery by cause: a cause a restart cannot fix ends in `failed` at its
 * second exit in a row of runs that never answered 200 (a run that served
 * proved the card and its files: it resets the streak); a
 * `gpu-memory-profiling` exit (a neighbour moved its memory while vLLM
 * measured: the next try may well pass) keeps its delay a few times.
 */
export class CauseStreak {
  #hopeless = 0;
  #profiling = 0;

  next(cause: string, served = false): "failed" | "same-delay" | "grow" {
    this.#hopeless = !served && HOPELESS.has(cause) ? this.#hopeless + 1 : 0;
    if (this.#hopeless >= 2) return "failed";
    this.#profiling = cause === "gpu-memory-profiling"
      ? this.#profiling + 1
      : 0;
    return this.#profiling > 1 && this.#profiling <= PROFILING_RETRIES
      ? "same-delay"
      : "grow";
  }
}

const FIRST_RESTART_DELAY_MS = 1_000;

/**
 * Whether a run that ended this way is started again (the launcher's own
 * shutdown never asks).
 *
 * @example
 * ```ts
 * import { shouldRestart } from "./restart_policy.ts";
 * console.assert(shouldRestart("on-failure", { code: 3, signal: null, reason: "exit" }));
 * console.assert(!shouldRestart("on-failure", { code: 0, signal: null, reason: "exit" }));
 * ```
 */
export function shouldRestart(policy: RestartPolicy, end: RunEnd): boolean {
  if (policy === "never") return false;
  if (policy === "always") return true;
  return end.reason !== "exit" || end.signal !== null || end.code !== 0;
}

/**
 * The delay before restart `n` (1-based, since the last reset): 1 s, 2 s, 4 s
 * … capped at `maxMs`. No jitter: engines on one server rarely share a
 * failure that a spread would help.
 *
 * @example
 * ```ts
 * import { restartDelayMs } from "./restart_policy.ts";
 * console.assert(restartDelayMs(3, 300_000) === 4_000);
 * console.assert(restartDelayMs(20, 300_000) === 300_000);
 * ```
 */
export function restartDelayMs(n: number, maxMs: number): number {
  const exponent = Math.min(Math.max(n, 1) - 1, 30);
  return Math.min(FIRST_RESTART_DELAY_MS * 2 ** exponent, maxMs);
}

/** What the engine run does with one health poll or silence check. */
export type Verdict =
  /** Answered 200; `first` when it is the run's first (its load is over). */
  | { readonly kind: "ready"; readonly first: boolean }
  /** Not answered yet and never did: still loading. */
  | { readonly kind: "loading" }
  /** Failed after a first 200, not (yet) enough to stop it. */
  | { readonly kind: "unhealthy" }
  /** Stop the run; the restart policy then applies as for a crash. */
  | { readonly kind: "stop"; readonly reason: EndReason; readonly why: string };

export interface RunHealth {
  readonly firstOkAt: number | undefined;
  readonly failures: number;
}

/**
 * One poll's verdict and the run's facts after it. A run that never answered
 * 200 is loading and spared (big models load for tens of minutes); after its
 * first 200, `limit` failed background polls in a row stop it (0: never); a
 * `GET /models` request's poll (`counts` false) never counts.
 */
export function pollVerdict(
  health: RunHealth,
  ok: boolean,
  counts: boolean,
  limit: number,
): [Verdict, RunHealth] {
  if (ok) {
    const first = health.firstOkAt === undefined;
    return [{ kind: "ready", first }, {
      firstOkAt: health.firstOkAt ?? Date.now(),
      failures: 0,
    }];
  }
  if (health.firstOkAt === undefined) return [{ kind: "loading" }, health];
  if (!counts) return [{ kind: "unhealthy" }, health];
  const failures = health.failures + 1;
  const next = { ...health, failures };
  if (limit <= 0 || failures < limit) return [{ kind: "unhealthy" }, next];
  const why = `failed ${failures} health polls in a row after answering 200`;
  return [stop("unhealthy", why), next];
}

/** `--start-timeout`: a run that never answered 200 and gave no sign of life for `timeoutMs` is stopped (0: never). */
export function silenceVerdict(
  firstOkAt: number | undefined,
  lastSignOfLife: number,
  timeoutMs: number,
  phase: string | null,
): Verdict | undefined {
  if (timeoutMs <= 0 || firstOkAt !== undefined) return undefined;
  const silent = Date.now() - lastSignOfLife;
  if (silent < timeoutMs) return undefined;
  const seconds = Math.round(silent / 1000);
  const where = phase ? `, stalled while ${phase}` : "";
  return stop(
    "start-timeout",
    `has not answered 200 and wrote nothing for ${seconds} s (--start-timeout${where})`,
  );
}

/** A ready engine that serves nothing: stopped as a liveness failure is, `seen` kept as its exit's message. */
export function stalledVerdict(seen: string): Verdict {
  return stop("stalled", `stalled: ${seen}`);
}

function stop(reason: EndReason, what: string): Verdict {
  const why = `${what}: stopping it (SIGTERM, then SIGKILL)`;
  return { kind: "stop", reason, why };
}
