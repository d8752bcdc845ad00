// The restart policy and liveness as pure rules: when the launcher ends a run
// itself, whether an ended run is started again, and after how long.
import type { RestartPolicy } from "../catalogue.ts";

/** Why the launcher ended a run itself; `"exit"`: the engine ended on its own. */
export type EndReason = "exit" | "unhealthy" | "start-timeout" | "stalled";

const HOPELESS = new Set(["bad-arguments", "model-not-found"]);
/** `gpu-memory-profiling` exits in a row retried without a longer delay. */
const PROFILING_RETRIES = 3;

// A cause a restart cannot fix fails at its second exit in a row of runs that
// never served; `gpu-memory-profiling` (a neighbour moved its memory while vLLM
// measured: the next try may pass) keeps its delay a few times.
export class CauseStreak {
  #hopeless = 0;
  #profiling = 0;

  next(cause: string, served = false): "failed" | "same-delay" | "grow" {
    this.#hopeless = !served && HOPELESS.has(cause) ? this.#hopeless + 1 : 0;
    if (this.#hopeless >= 2) return "failed";
    const profiling = cause === "gpu-memory-profiling";
    this.#profiling = profiling ? this.#profiling + 1 : 0;
    return this.#profiling > 1 && this.#profiling <= PROFILING_RETRIES
      ? "same-delay"
      : "grow";
  }
}

export function shouldRestart(
  policy: RestartPolicy,
  end: { code: number | null; signal: string | null; reason: EndReason },
): boolean {
  if (policy === "never") return false;
  if (policy === "always") return true;
  return end.reason !== "exit" || end.signal !== null || end.code !== 0;
}

// No jitter: engines on one server rarely share a failure that a spread would help.
export function restartDelayMs(n: number, maxMs: number): number {
  const exponent = Math.min(Math.max(n, 1) - 1, 30);
  return Math.min(1_000 * 2 ** exponent, maxMs);
}

export type Verdict =
  /** `first`: the run's first 200 (its load is over). */
  | { readonly kind: "ready"; readonly first: boolean }
  | { readonly kind: "loading" }
  | { readonly kind: "unhealthy" }
  /** The restart policy then applies as for a crash. */
  | { readonly kind: "stop"; readonly reason: EndReason; readonly why: string };

export interface RunHealth {
  readonly firstOkAt: number | undefined;
  readonly failures: number;
}

// Before its first 200 a run is loading and spared (big models load for tens
// of minutes); after it, `limit` failed background polls in a row stop it.
export function pollVerdict(
  health: RunHealth,
  ok: boolean,
  counts: boolean,
  limit: number,
  now: number = performance.now(),
): [Verdict, RunHealth] {
  if (ok) {
    const first = health.firstOkAt === undefined;
    const firstOkAt = health.firstOkAt ?? now;
    return [{ kind: "ready", first }, { firstOkAt, failures: 0 }];
  }
  if (health.firstOkAt === undefined) return [{ kind: "loading" }, health];
  if (!counts) return [{ kind: "unhealthy" }, health];
  const failures = health.failures + 1;
  const next = { ...health, failures };
  if (limit <= 0 || failures < limit) return [{ kind: "unhealthy" }, next];
  const why = `failed ${failures} health polls in a row after answering 200`;
  return [stopVerdict("unhealthy", why), next];
}

/** `--start-timeout`: a run that never answered 200 and gave no sign of life for `timeoutMs` is stopped (0: never). */
export function silenceVerdict(
  firstOkAt: number | undefined,
  lastSignOfLife: number,
  timeoutMs: number,
  phase: string | null,
  now: number = performance.now(),
): Verdict | undefined {
  if (timeoutMs <= 0 || firstOkAt !== undefined) return undefined;
  const silent = now - lastSignOfLife;
  if (silent < timeoutMs) return undefined;
  const seconds = Math.round(silent / 1000);
  const where = phase ? `, stalled while ${phase}` : "";
  const why =
    `has not answered 200 and wrote nothing for ${seconds} s (--start-timeout${where})`;
  return stopVerdict("start-timeout", why);
}

export function stopVerdict(reason: EndReason, what: string): Verdict {
  const why = `${what}: stopping it (SIGTERM, then SIGKILL)`;
  return { kind: "stop", reason, why };
}
