/**
 * The launcher's engines: one engine run per engine of the plan, with its
 * log, its devices and the GPU start gate; and a reload's replacement of one,
 * which starts through the same path as every start.
 *
 * @module
 */
import type { EnginePlan } from "../engines/engine_plan.ts";
import { EngineLog } from "../engines/log_sink.ts";
import type { GpuLifecycle } from "../gpu/gpu_lifecycle.ts";
import type { Released } from "../gpu/start_gate.ts";
import { gpuMemoryNeed } from "../gpu/need.ts";
import type { EngineRecords } from "../supervision/records.ts";
import { EngineRun } from "../supervision/engine_run.ts";
import type { Journal } from "../supervision/journal.ts";
import type { Watchdog } from "../supervision/watchdog.ts";
import type { ResolvedOptions } from "./options.ts";

/** How the launcher runs every engine. */
export interface Supervision {
  readonly options: ResolvedOptions;
  readonly records: EngineRecords;
  /** The GPU start gate and memory rounds, when some engine is placed. */
  readonly gpu: GpuLifecycle | undefined;
  /** Called after every state change of any engine (metrics). */
  readonly onChange: () => void;
  readonly journal?: Journal;
}

/**
 * One engine run for an engine's plan (nothing started).
 *
 * @param run For a replacement: the log it keeps and the replaced run's GPU
 *   memory, which its first start waits for.
 */
export function supervise(
  plan: EnginePlan,
  how: Supervision,
  run: { log?: EngineLog; released?: Released | undefined } = {},
): EngineRun {
  const o = how.options;
  const gpu = how.gpu;
  return new EngineRun(plan, {
    log: run.log ??
      new EngineLog(plan.logFile, { maxBytes: o.logMaxBytes, keep: o.logKeep }),
    graceMs: o.graceMs,
    records: how.records,
    onChange: how.onChange,
    journal: how.journal,
    ...(run.released !== undefined ? { released: run.released } : {}),
    ...(gpu
      ? {
        gate: gpu.gate,
        memoryNeed: gpuMemoryNeed(plan.card),
        loadPollMs: Math.min(1_000, o.healthIntervalMs),
      }
      : {}),
    startTimeoutMs: o.startTimeoutMs,
    restart: o.restart,
    restartMaxDelayMs: o.restartMaxDelayMs,
    stableAfterMs: o.stableAfterMs,
    livenessFailures: o.livenessFailures,
  });
}

/**
 * Replaces engine `index` with one for its new plan (a reload changed what
 * reaches it): the new run is made first, then the old one is stopped, then
 * the new one takes its place and starts, keeping the log and the port.
 *
 * @param supervisors The launcher's list, changed in place.
 * @throws {EngineError} When the new engine cannot be spawned.
 */
export async function replaceEngine(
  supervisors: EngineRun[],
  index: number,
  plan: EnginePlan,
  how: Supervision,
  watchdog: Watchdog | undefined,
): Promise<void> {
  const old = supervisors[index]!;
  await quietFor(old, how, "the reload's restart");
  const fresh = supervise(plan, how, {
    log: old.log,
    released: old.gpuReleased(),
  });
  await old.stop(how.options.graceMs, { keepLog: true, why: "reload" });
  supervisors[index] = fresh;
  how.onChange();
  fresh.start(watchdog);
}

/**
 * Waits until no neighbour loads on `engine`'s devices before the launcher
 * stops it of its own accord: vLLM measures device-wide free memory while it
 * profiles, so a neighbour's release mid-load aborts or mis-sizes that load.
 *
 * @param what What waits, for the log line: `the reload's removal`.
 */
export async function quietFor(
  engine: EngineRun,
  how: Supervision,
  what: string,
): Promise<void> {
  await how.gpu?.gate.quiet(
    engine.gpus ?? [],
    engine.name,
    `${what} of engine ${engine.name}`,
  );
}
