/**
 * The launcher's engines as supervisors: one per requested card, in request
 * order, each with its port, log, devices and the GPU start gate; and, when a
 * reload changes what reaches an engine, its replacement: a new supervisor for
 * the new card that starts through the same path as every start (the gate
 * included, waiting for the replaced run's GPU memory as a restart would).
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { EngineLog } from "../engines/log_sink.ts";
import { isPortFree } from "../engines/ports.ts";
import type { GpuLifecycle } from "../gpu/gpu_lifecycle.ts";
import { gpuMemoryNeed } from "../gpu/need.ts";
import type { Placement } from "../gpu/place_engines.ts";
import type { EngineRecords } from "../supervision/records.ts";
import { EngineSupervisor } from "../supervision/supervisor.ts";
import type { EngineChange } from "../supervision/supervisor_options.ts";
import type { RunWatcher } from "../supervision/watchdog.ts";
import type { ResolvedOptions } from "./options.ts";

/** Where the launcher's engines run and how they are supervised. */
export interface EngineSite {
  /** The key every engine demands at start (empty for none). */
  readonly apiKey: string;
  /** The host every engine binds. */
  readonly host: string;
  /** The management port; the n-th engine listens on port + n. */
  readonly port: number;
  /** The root directory. */
  readonly directory: string;
  /** Engine records under `data/`. */
  readonly records: EngineRecords;
  /** The GPU start gate and memory rounds, when some engine is placed. */
  readonly gpu: GpuLifecycle | undefined;
  /** The launcher's options, resolved (restart policy, timeouts, log sizes …). */
  readonly options: ResolvedOptions;
  /** Called after every state change of any engine (metrics). */
  readonly onChange: () => void;
}

/** What one supervisor gets beyond its card. */
interface EngineRun {
  env: Record<string, string>;
  gpus: readonly string[] | null;
  log: EngineLog;
  apiKey?: string | undefined;
  baseline?: Promise<Set<number> | undefined>;
}

/**
 * One supervisor per card, in request order (nothing started).
 *
 * @param cards The expanded cards.
 * @param placement Each card's devices.
 * @param site Where and how.
 * @returns The supervisors.
 * @throws {EngineError} When an engine cannot be prepared.
 */
export function superviseEngines(
  cards: readonly ModelCard[],
  placement: Placement,
  site: EngineSite,
): EngineSupervisor[] {
  const o = site.options;
  return cards.map((card, i) =>
    supervisorFor(card, i, {
      env: placement.env(card),
      gpus: placement.devices(card),
      log: new EngineLog(`${site.directory}/logs/${card.name}.log`, {
        maxBytes: o.logMaxBytes,
        keep: o.logKeep,
      }),
    }, site)
  );
}

/**
 * Replaces engine `index` with one for `card` (a reload changed what reaches
 * it): the new supervisor is prepared first (a failure leaves the old engine
 * running), then the old one is stopped (SIGTERM to its group, grace,
 * SIGKILL), then the new one takes its place in `supervisors` and starts. It
 * keeps the log, the port and the restart policy's fresh start (1 s delay).
 *
 * @param supervisors The launcher's list, changed in place.
 * @param index Which engine.
 * @param card Its new expanded card.
 * @param change Its new placement and engine key.
 * @param site Where and how.
 * @param watchdog The launcher's watchdog.
 * @throws {EngineError} When the new engine cannot be prepared or spawned.
 */
export async function replaceEngine(
  supervisors: EngineSupervisor[],
  index: number,
  card: ModelCard,
  change: EngineChange,
  site: EngineSite,
  watchdog: RunWatcher | undefined,
): Promise<void> {
  const old = supervisors[index]!;
  const fresh = supervisorFor(card, index, {
    env: change.env ?? {},
    gpus: change.gpus ?? null,
    log: old.log,
    apiKey: change.apiKey,
    // Its first start waits, as a restart would, for the replaced run's GPU memory.
    baseline: old.gpuBaseline(),
  }, site);
  await old.stop(site.options.graceMs, { keepLog: true, why: "reload" });
  supervisors[index] = fresh;
  site.onChange();
  fresh.start(watchdog);
}

function supervisorFor(
  card: ModelCard,
  index: number,
  run: EngineRun,
  site: EngineSite,
): EngineSupervisor {
  const o = site.options;
  const gpu = site.gpu;
  return new EngineSupervisor(card, {
    host: site.host,
    port: site.port + index + 1,
    directory: site.directory,
    env: run.env,
    gpus: run.gpus,
    log: run.log,
    graceMs: o.graceMs,
    records: site.records,
    portFree: isPortFree,
    onChange: site.onChange,
    apiKey: run.apiKey ?? site.apiKey,
    ...(run.baseline !== undefined ? { baseline: run.baseline } : {}),
    ...(gpu
      ? {
        gate: gpu.gate,
        memoryNeed: gpuMemoryNeed(card),
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
