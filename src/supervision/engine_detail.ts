/**
 * One engine's supervision facts as `GET /models?detail=1` reports them.
 *
 * @module
 */
import type { EndReason, EngineState } from "./restart_policy.ts";
import type { WaitingFor } from "../gpu/start_gate.ts";

/** How an engine run ended, as `GET /models?detail=1` reports it. */
export interface LastExit {
  /** Exit code, or null when a signal ended it. */
  code: number | null;
  /** The signal that ended it, or null. */
  signal: string | null;
  /** ISO time of the end. */
  at: string;
  /** How long the run lasted, in seconds. */
  ran_seconds: number;
  /**
   * `"unhealthy"` when the liveness check stopped it, `"start-timeout"` when
   * it loaded silently too long, else `"exit"`.
   */
  reason: EndReason;
}

/** One engine's supervision facts (the `?detail=1` fields). */
export interface EngineDetail {
  /** Where the engine is in its lifecycle. */
  state: EngineState;
  /** The running engine process's pid, or null. */
  pid: number | null;
  /** Restarts since the launcher started. */
  restarts: number;
  /** ISO time of the last state change. */
  since: string;
  /** How the last run ended, or null before any run ended. */
  last_exit: LastExit | null;
  /** ISO time of the next start while in backoff, else null. */
  next_restart: string | null;
  /** Devices handed to the engine (`CUDA_VISIBLE_DEVICES`), `[]` for none, null when not placed. */
  gpus: readonly string[] | null;
  /** While `waiting`: what holds the start (the GPU start gate); else null. */
  waiting_for: WaitingFor | null;
  /** This run's GPU memory per device, in MiB, from `nvidia-smi`; null without it. */
  gpu_memory_mib: Readonly<Record<string, number>> | null;
}
