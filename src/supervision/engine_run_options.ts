// What an engine run is given: its services and the launcher-wide timings
// (every per-card setting is its plan's), and what it counts for the metrics.
import type { Clock } from "../common/sleep.ts";
import type { EnginePlan } from "../engines/engine_plan.ts";
import type { ExitCause } from "../engines/kinds/engine_kind.ts";
import type { Footprint } from "../engines/footprint.ts";
import type { EngineLog } from "../engines/log_sink.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import type { GpuStartGate, Released, WaitReason } from "../gpu/start_gate.ts";
import type { Journal } from "./journal.ts";
import type { ReadAhead } from "./read_ahead.ts";
import type { EngineRecords } from "./records.ts";

export interface EngineCounts {
  exits: Partial<Record<ExitCause, number>>;
  requestsCut: number;
  healthPollSeconds: number | undefined;
  startWaitSeconds: Partial<Record<WaitReason, number>> | undefined;
  /** Every start that reached a first 200. */
  starts?: { count: number; sum: number } | undefined;
}

/** An engine run's services and the launcher-wide timings; every per-card setting is the plan's. */
export interface EngineRunOptions {
  log: EngineLog;
  records: EngineRecords;
  onChange: () => void;
  journal?: Journal | undefined;
  gate?: GpuStartGate | undefined;
  /** A replacement's first start waits, as a restart would, for the replaced run's memory. */
  released?: Released | undefined;
  /** Timers and "now". @default {the system's} */
  clock?: Clock;
  /** Makes each run's process (tests: a stand-in). @default {a ServerProcess} */
  spawn?: (plan: EnginePlan, log: EngineLog, clock: Clock) => ServerProcess;
  restartMaxDelayMs: number;
  /** A run that stays up this long after its first 200 resets the delay to 1 s. */
  stableAfterMs: number;
  /** Failed background polls in a row, after a first 200, that stop a run; 0: never. */
  livenessFailures: number;
  graceMs: number;
  /** A loading run silent this long is stopped; 0: never. */
  startTimeoutMs: number;
  loadPollMs?: number;
  canaryTimeoutMs?: number;
  /** Each footprint a run measures, as it grows (the footprint book keeps them per card and device). */
  footprint?: ((plan: EnginePlan, footprint: Footprint) => void) | undefined;
  /** The total MiB of the largest device it runs on: a load line naming more is no figure. */
  deviceMiB?: ((plan: EnginePlan) => number | undefined) | undefined;
  /** Reads the weights ahead while it waits (the launcher's one, shared by its engines); unset: never. */
  readAhead?: ReadAhead | undefined;
}
