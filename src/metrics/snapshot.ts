/**
 * What the launcher's metrics file says, gathered from the supervisors and the
 * production stance at one moment.
 *
 * Folder `metrics/`: the metrics file: a snapshot of the supervisors, its text
 * rendering (pure) and the atomic file writer. It knows nothing of HTTP
 * routes or of how engines are started.
 *
 * @module
 */
import type { EngineRun } from "../supervision/engine_run.ts";
import type { OpsStance } from "../web/ops_stance.ts";
import type {
  LauncherMetrics,
  MetricsSnapshot,
  ReloadMetrics,
} from "./text.ts";
import { VERSION } from "../common/version.ts";

/** The launcher facts that do not change while it runs. */
export interface LauncherFacts
  extends Pick<LauncherMetrics, "tls" | "port" | "startWarnings"> {
  stance: OpsStance;
  /** When the launcher started, in milliseconds since the epoch. */
  startedAt: number;
  /** Reload counts so far (read at each snapshot). */
  reloads?: ReloadMetrics;
}

/**
 * A fresh snapshot for the metrics writer.
 *
 * @param launcher The launcher's fixed facts.
 * @param supervisors Every engine's supervisor, in request order.
 * @returns The snapshot to render.
 *
 * @example
 * ```ts ignore
 * writer.update(metricsSnapshot(facts, supervisors));
 * ```
 */
export function metricsSnapshot(
  launcher: LauncherFacts,
  supervisors: readonly EngineRun[],
): MetricsSnapshot {
  const production = !launcher.stance.devMode;
  return {
    launcher: {
      version: VERSION,
      mode: production ? "production" : "development",
      tls: launcher.tls,
      port: launcher.port,
      startTimeSeconds: launcher.startedAt / 1000,
      startWarnings: launcher.startWarnings,
    },
    engines: supervisors.map((s) => {
      const run = s.process;
      return {
        model: s.name,
        verb: s.card.verb,
        engine: s.card.engine,
        port: s.port,
        gpus: s.gpus,
        up: s.up,
        restarts: s.restarts,
        healthPollSeconds: s.lastPollSeconds,
        startTimeSeconds: run.running && run.startedAt !== undefined
          ? run.startedAt / 1000
          : undefined,
        state: s.state,
        gpuMemoryMiB: s.detail().gpu_memory_mib,
        exits: s.exitsByCause(),
        phase: s.detail().phase,
        startWaitSeconds: (s.gpus?.length ?? 0) > 0
          ? s.startWaitSeconds()
          : undefined,
      };
    }),
    ...(production ? { authFailures: launcher.stance.auth.failures } : {}),
    ...(launcher.reloads ? { reloads: { ...launcher.reloads } } : {}),
  };
}
