/**
 * How a model's engine is supervised: the options of `EngineSupervisor`.
 *
 * @module
 */
import type { RestartPolicy } from "../catalogue.ts";
import type { EngineLog } from "../engines/log_sink.ts";
import type { GpuMemoryNeed } from "../gpu/need.ts";
import type { GpuStartGate, Released } from "../gpu/start_gate.ts";
import type { EngineRecords } from "./records.ts";
import type { Journal } from "./journal.ts";

/** How a model's engine is supervised (where and what it runs is its plan). */
export interface SupervisorOptions {
  // The launcher's settings, resolved by serve/options.ts (no defaults here).
  /** The log every run shares. */
  log: EngineLog;
  /** The policy when the card sets none. */
  restart: RestartPolicy;
  /** Cap of the restart delay, in milliseconds. */
  restartMaxDelayMs: number;
  /** A run that stays up this long after its first 200 resets the delay to 1 s. */
  stableAfterMs: number;
  /**
   * Consecutive failed background polls, after a first 200, that count as a
   * failure; 0 turns liveness restarts off.
   */
  livenessFailures: number;
  /** Time a run gets between SIGTERM and SIGKILL (liveness stops, `stop()`). */
  graceMs: number;
  /** Where engine runs are recorded while they run. */
  records: EngineRecords;
  /** Called after every state change (metrics). */
  onChange: () => void;
  /** Where every state change is recorded; absent: nowhere. */
  journal?: Journal | undefined;
  /** The GPU start gate every start passes; absent: starts are never held. */
  gate?: GpuStartGate;
  /** Free GPU memory the engine demands at start, where known (the gate's rule 3). */
  memoryNeed?: GpuMemoryNeed | undefined;
  /**
   * A run with no first 200 and no output for this long is stopped and the
   * restart policy applies; 0 turns this off.
   */
  startTimeoutMs: number;
  /**
   * While a run's load holds its GPUs at the start gate, how often it is
   * polled for its first 200, in ms.
   * @default {1000}
   */
  loadPollMs?: number;
  /**
   * For an engine that replaces another (a reload): the replaced engine's
   * `EngineSupervisor.gpuReleased()`, so the first start waits for
   * the replaced run's GPU memory as a restart would.
   */
  released?: Released | undefined;
}
