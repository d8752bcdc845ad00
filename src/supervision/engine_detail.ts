// One engine's supervision facts as `GET /models?detail=1` reports them, and
// the read-only view an embedding program gets of each engine.
import type { RestartPolicy } from "../catalogue.ts";
import type { EngineState } from "./engine_state.ts";
import type { EndReason } from "./restart_policy.ts";
import type { ExitCause, LoadPhase } from "../engines/kinds/engine_kind.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import type { Footprint } from "../engines/footprint.ts";

// The metrics (which see supervision, not engines) list the exit causes from here.
export { EXIT_CAUSES } from "../engines/kinds/engine_kind.ts";

/**
 * One engine as an embedding program sees it: a snapshot of what
 * `GET /models?detail=1` reports (each field is described in
 * docs/operations.md), with its name, port and restart policy. Nothing in it
 * controls the engine.
 *
 * @example
 * ```ts ignore
 * for (const engine of serve.engineViews()) {
 *   console.log(engine.name, engine.state, engine.pid, engine.restarts);
 * }
 * ```
 */
export interface EngineView {
  /** The catalogue name. */
  readonly name: string;
  /** The port the engine listens on. */
  readonly port: number;
  /** The card's, else the launcher's. */
  readonly policy: RestartPolicy;
  /** Where the engine is in its lifecycle. */
  readonly state: EngineState;
  /** The running engine process's pid, or null. */
  readonly pid: number | null;
  /** Since the launcher started. */
  readonly restarts: number;
  /** ISO time of the last state change. */
  readonly since: string;
  /** How the last run ended, or null before any run ended. */
  readonly last_exit: {
    readonly code: number | null;
    readonly signal: string | null;
    readonly at: string;
    readonly ran_seconds: number;
    readonly reason: "exit" | "unhealthy" | "start-timeout" | "stalled";
    readonly cause: ExitCause;
    /** The engine's line that decided the cause (at most 200 characters). */
    readonly message: string | null;
  } | null;
  /** ISO time of the next start while in backoff, else null. */
  readonly next_restart: string | null;
  /** `CUDA_VISIBLE_DEVICES`: `[]` for none, null when not placed. */
  readonly gpus: readonly string[] | null;
  /** While `waiting`: which rule of the GPU start gate holds it. */
  readonly waiting_for: {
    readonly reason:
      | "gpu-busy-loading"
      | "gpu-memory-release"
      | "gpu-error"
      | "gpu-memory-free";
    readonly devices: readonly string[];
    readonly detail: string;
  } | null;
  /** This run's MiB per device, from `nvidia-smi`. */
  readonly gpu_memory_mib: Readonly<Record<string, number>> | null;
  /** `pid`: its pids in `nvidia-smi`'s list; `device`: the device's change across its start (in a container the listed pids are the host's). */
  readonly gpu_memory_by?: "pid" | "device" | null;
  /** What the run took, from its own lines and nvidia-smi; null when nothing is known. */
  readonly footprint?: Footprint | null;
  /** While `starting`: the load phase, null when not known (and in every other state). */
  readonly phase: LoadPhase | null;
  /** ISO time the phase began, or null. */
  readonly phase_since: string | null;
  /** While `starting`: how far the phase has come (shards read, bytes downloaded), or null. */
  readonly progress: {
    readonly done: number;
    /** Null when not known (a download's size). */
    readonly total: number | null;
    readonly unit: "bytes" | "shards";
  } | null;
  /** The engine's own counts at the last health round. */
  readonly traffic?: {
    readonly running: number;
    readonly waiting: number;
    readonly tokens_per_s: number | null;
    readonly at: string;
  } | null;
  /** The last canary request sent to the idle engine. */
  readonly canary?: {
    readonly at: string;
    readonly ok: boolean;
    readonly seconds: number;
  } | null;
  /** The last start that reached a first 200, null before one: seconds from its start (asked at the gate, else spawned), split into steps that sum to it. */
  readonly last_start?: {
    readonly seconds: number;
    readonly phases: Readonly<
      Partial<Record<"gate" | "spawn" | "listening" | LoadPhase, number>>
    >;
  } | null;
  /** The last recovery, null before one: seconds from an unplanned exit to the next first 200, and that exit's cause. */
  readonly last_recovery?: {
    readonly seconds: number;
    readonly cause: ExitCause;
  } | null;
  /** An engine set to sleep when idle (`sleep_after`, or its kind's flag in `args`), else null: bytes (null until measured) `by` nvidia-smi's per-pid figure on a GPU or `rss` (resident memory); `awake_bytes` at the last round awake, `residue_bytes` kept asleep, `freed_bytes` their difference at its last sleep; each wake's seconds from the engine's line that a request woke it to its reload's end. */
  readonly sleep?: {
    readonly after_seconds: number;
    /** ISO time it fell asleep, while it sleeps; else null. */
    readonly asleep_since: string | null;
    readonly residue_bytes: number | null;
    readonly awake_bytes: number | null;
    readonly freed_bytes: number | null;
    readonly by: "nvidia-smi" | "rss" | null;
    /** Since the launcher started. */
    readonly sleeps: number;
    readonly wakes: number;
    readonly wake_seconds_sum: number;
    readonly last_wake_seconds: number | null;
    /** `itself`: a request wakes it (llama.cpp); `launcher`: the launcher wakes it for a request parked in its `/load` (vLLM). */
    readonly woken_by: "itself" | "launcher";
    /** What the engine itself said at its last sleep, where it says it (vLLM's `Sleep mode freed … still in use`). */
    readonly engine_freed_bytes: number | null;
    readonly engine_in_use_bytes: number | null;
    /** While `waking`: what the wake waits for (room on a device, its answer). */
    readonly waits_for: string | null;
    /** Launcher-woken: from a parked request seen to the wake's end, with the engines put to sleep for it. */
    readonly switches: number;
    readonly switch_seconds_sum: number;
    readonly last_switch_seconds: number | null;
    readonly last_made_room: readonly string[];
    /** Times it was put to sleep to make room for another. */
    readonly made_room: number;
    /** Why the launcher does not sleep and wake it after all (its probe failed, its routes answer without its key); null when it does. */
    readonly launcher_sleep_off: string | null;
    /** How its last wake was proven, null before a wake: by a request's tokens on its own counters, or by a canary of one token; `ok` null while not proven (yet, or it slept again first), false when the canary came back with no token, a 5xx or nothing (then stopped as stalled). */
    readonly last_wake_check: {
      readonly by: "request" | "canary" | null;
      readonly ok: boolean | null;
      /** ISO time of the verdict, or of the wake while none. */
      readonly at: string;
    } | null;
  } | null;
  /** `running` and `waiting` are null before the first read. */
  readonly drain: {
    readonly since: string;
    readonly deadline: string;
    readonly running: number | null;
    readonly waiting: number | null;
  } | null;
}

export type EngineDetail = Omit<EngineView, "name" | "port" | "policy">;

export type LastExit = NonNullable<EngineView["last_exit"]>;

export function engineView(engine: {
  readonly plan: { name: string; port: number; restart: RestartPolicy };
  detail(): EngineDetail;
}): EngineView {
  const { name, port, restart: policy } = engine.plan;
  return Object.freeze({ name, port, policy, ...engine.detail() });
}

/** How a run ended: a stall the launcher saw (`seen`), else the engine's own line decides the cause, else the code or signal. */
export function lastExitOf(
  run: ServerProcess,
  status: Deno.CommandStatus,
  reason: EndReason,
  seen: string | null,
): LastExit {
  const now = run.clock.now(); // its run's durations, shown at the wall's time
  const ranMs = now - (run.spawnedAt ?? now);
  const line = reason === "stalled"
    ? { cause: "stalled" as const, message: seen }
    : run.watch.cause;
  return {
    code: status.signal ? null : status.code,
    signal: status.signal ?? null,
    at: new Date(run.clock.wall()).toISOString(),
    ran_seconds: Math.round(ranMs / 100) / 10,
    reason,
    cause: line?.cause ?? (status.signal ? "signal" : "exit"),
    message: line?.message ?? null,
  };
}

/** `exit: code 1 after 0.3 s (bad-arguments: …)`: a cause the code or signal does not already say, with its line. */
export function exitLine(end: LastExit): string {
  const how = end.signal ? `signal ${end.signal}` : `code ${end.code}`;
  const what = end.reason === "exit" ? how : `${end.reason}, then ${how}`;
  const said = end.message ? ` (${end.cause}: ${end.message})` : "";
  return `exit: ${what} after ${end.ran_seconds.toFixed(1)} s${said}`;
}
