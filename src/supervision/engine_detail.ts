/**
 * One engine's supervision facts as `GET /models?detail=1` reports them, and
 * the read-only view an embedding program gets of each engine.
 *
 * @module
 */
import type { RestartPolicy } from "../catalogue.ts";
import type { EndReason, EngineState } from "./restart_policy.ts";
import type { ExitCause, LoadPhase } from "../engines/kinds/engine_kind.ts";
import type { ServerProcess } from "../engines/server_process.ts";

// The metrics (which see supervision, not engines) list causes and phases from here.
export {
  EXIT_CAUSES,
  type ExitCause,
  type LoadPhase,
} from "../engines/kinds/engine_kind.ts";

/**
 * One engine as an embedding program sees it: a snapshot of what
 * `GET /models?detail=1` reports, with its name, port and restart policy.
 * Nothing in it controls the engine.
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
  /** The restart policy in force: the card's, else the launcher's. */
  readonly policy: RestartPolicy;
  /** Where the engine is in its lifecycle. */
  readonly state: EngineState;
  /** The running engine process's pid, or null. */
  readonly pid: number | null;
  /** Restarts since the launcher started. */
  readonly restarts: number;
  /** ISO time of the last state change. */
  readonly since: string;
  /** How the last run ended, or null before any run ended. */
  readonly last_exit: {
    /** Exit code, or null when a signal ended it. */
    readonly code: number | null;
    /** The signal that ended it, or null. */
    readonly signal: string | null;
    /** ISO time of the end. */
    readonly at: string;
    /** How long the run lasted, in seconds. */
    readonly ran_seconds: number;
    /** Whether the launcher ended it (liveness, start timeout, a stall), else `"exit"`. */
    readonly reason: "exit" | "unhealthy" | "start-timeout" | "stalled";
    /** Why, from the exit and the engine's own output (`bad-arguments`, `gpu-out-of-memory` …). */
    readonly cause: ExitCause;
    /** The engine's line that decided the cause (at most 200 characters), else null. */
    readonly message: string | null;
  } | null;
  /** ISO time of the next start while in backoff, else null. */
  readonly next_restart: string | null;
  /** Devices handed to the engine (`CUDA_VISIBLE_DEVICES`), `[]` for none, null when not placed. */
  readonly gpus: readonly string[] | null;
  /** While `waiting`: what holds the start (the GPU start gate); else null. */
  readonly waiting_for: {
    /** Which rule of the GPU start gate holds it. */
    readonly reason:
      | "gpu-busy-loading"
      | "gpu-memory-release"
      | "gpu-error"
      | "gpu-memory-free";
    /** The devices concerned, as placed. */
    readonly devices: readonly string[];
    /** One line for people: who loads there, which memory is not back, nvidia-smi's words. */
    readonly detail: string;
  } | null;
  /** This run's GPU memory per device, in MiB, from `nvidia-smi`; null without it. */
  readonly gpu_memory_mib: Readonly<Record<string, number>> | null;
  /**
   * How `gpu_memory_mib` was attributed: `pid` (its pids in `nvidia-smi`'s
   * list), `device` (the device's change across its start: in a container
   * the listed pids are the host's); null without figures.
   */
  readonly gpu_memory_by?: "pid" | "device" | null;
  /** While `starting`: the load phase, null when not known (and in every other state). */
  readonly phase: LoadPhase | null;
  /** ISO time the phase began, or null. */
  readonly phase_since: string | null;
  /** While `starting`: how far the phase has come (shards read, bytes downloaded), or null. */
  readonly progress: {
    /** Shards read, or bytes downloaded, so far. */
    readonly done: number;
    /** How many in all, or null when not known (a download's size). */
    readonly total: number | null;
    /** What is counted. */
    readonly unit: "bytes" | "shards";
  } | null;
  /** While `ready` or `sleeping`: the engine's own counts at the last health round; null while unknown or not counted. */
  readonly traffic?: {
    /** Requests being computed. */
    readonly running: number;
    /** Requests queued. */
    readonly waiting: number;
    /** Generated tokens per second since the round before, or null. */
    readonly tokens_per_s: number | null;
    /** ISO time of the reading. */
    readonly at: string;
  } | null;
  /** The last canary request sent to the idle engine, or null. */
  readonly canary?: {
    /** ISO time of its answer (or its timeout). */
    readonly at: string;
    /** Answered 200. */
    readonly ok: boolean;
    /** How long it took. */
    readonly seconds: number;
  } | null;
  /** While `draining`: since when, the deadline (ISO times), the requests in flight at the last read (null before it); else null. */
  readonly drain: {
    readonly since: string;
    readonly deadline: string;
    readonly running: number | null;
    readonly waiting: number | null;
  } | null;
}

/** One engine's supervision facts (the `?detail=1` fields). */
export type EngineDetail = Omit<EngineView, "name" | "port" | "policy">;

/** How an engine run ended, as `GET /models?detail=1` reports it. */
export type LastExit = NonNullable<EngineView["last_exit"]>;

/** The frozen snapshot an embedding program gets of one engine. */
export function engineView(
  engine: Pick<EngineView, "name" | "port" | "policy"> & {
    detail(): EngineDetail;
  },
): EngineView {
  return Object.freeze({
    name: engine.name,
    port: engine.port,
    policy: engine.policy,
    ...engine.detail(),
  });
}

/** The load phase fields of `?detail=1`: the run's while it starts, else null. */
export function phaseFields(
  starting: boolean,
  run: ServerProcess,
): Pick<EngineDetail, "phase" | "phase_since" | "progress"> {
  if (!starting || !run.running) {
    return { phase: null, phase_since: null, progress: null };
  }
  const since = run.watch.phaseSince;
  return {
    phase: run.watch.phase,
    phase_since: since === undefined ? null : new Date(since).toISOString(),
    progress: run.watch.progress,
  };
}

/** How a run ended: a stall the launcher saw (`seen`), else the engine's own line decides the cause, else the code or signal. */
export function lastExitOf(
  run: ServerProcess,
  status: Deno.CommandStatus,
  reason: EndReason,
  seen: string | null = null,
): LastExit {
  const endedAt = Date.now();
  const ranMs = endedAt - (run.startedAt ?? endedAt);
  const line = reason === "stalled"
    ? { cause: "stalled" as const, message: seen }
    : run.watch.cause;
  return {
    code: status.signal ? null : status.code,
    signal: status.signal ?? null,
    at: new Date(endedAt).toISOString(),
    ran_seconds: Math.round(ranMs / 100) / 10,
    reason,
    cause: line?.cause ?? (status.signal ? "signal" : "exit"),
    message: line?.message ?? null,
  };
}
