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
import type { Config } from "./config.ts";
import { plannedDrainMs } from "../supervision/drain.ts";

/** How the launcher runs every engine. */
export interface Supervision {
  readonly options: ResolvedOptions;
  readonly records: EngineRecords;
  readonly gpu: GpuLifecycle | undefined;
  /** Called after every state change of any engine (metrics). */
  readonly onChange: () => void;
  readonly journal?: Journal;
}

/** One engine run for a plan (nothing started); a replacement keeps the log and waits for the replaced run's GPU memory. */
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
    drainTimeoutMs: o.drainTimeoutMs,
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
    failedRetryMs: o.failedRetryMs,
    stableAfterMs: o.stableAfterMs,
    livenessFailures: o.livenessFailures,
    serving: {
      stallTimeoutMs: o.stallTimeoutMs,
      canaryIntervalMs: o.canaryIntervalMs,
      canaryTimeoutMs: o.canaryTimeoutMs,
    },
  });
}

/** A reload changed what reaches engine `index`: the old run stops, the new one takes its place (in `supervisors`) and starts. */
export async function replaceEngine(
  supervisors: EngineRun[],
  index: number,
  plan: EnginePlan,
  how: Supervision,
  watchdog: Watchdog | undefined,
): Promise<void> {
  const old = supervisors[index]!;
  // Before the launcher stops an engine itself: a neighbour's release mid-load aborts or mis-sizes vLLM's profiling.
  await how.gpu?.gate.quiet(
    old.gpus ?? [],
    old.name,
    `the reload's restart of engine ${old.name}`,
  );
  const released = old.gpuReleased();
  // A ready engine drains first; the new run starts once the old one is gone (its port).
  await old.stop(how.options.graceMs, { keepLog: true, why: "reload" });
  const fresh = supervise(plan, how, { log: old.log, released });
  fresh.inherit(old);
  supervisors[index] = fresh;
  how.onChange();
  fresh.start(watchdog);
}

/** `stopping: draining 2 engines (up to 30 s); a second signal stops at once`, or null when none will drain. */
export function drainLine(
  engines: readonly EngineRun[],
  o: Config,
): string | null {
  const ms = engines.flatMap((s) => {
    const ms = s.state === "ready" || s.state === "draining"
      ? plannedDrainMs(s.card, o.drainTimeoutMs)
      : 0;
    return ms > 0 ? [ms] : [];
  });
  if (ms.length === 0) return null;
  const n = ms.length;
  return `stopping: draining ${n} engine${n === 1 ? "" : "s"} (up to ${
    Math.max(...ms) / 1000
  } s)${o.handleSignals ? "; a second signal stops at once" : ""}`;
}
