/**
 * Folder `metrics/`: the metrics file, a snapshot of the engine runs, its
 * text rendering (pure) and the atomic file writer. It knows nothing of HTTP
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

interface LauncherFacts
  extends Pick<LauncherMetrics, "tls" | "port" | "startWarnings"> {
  stance: OpsStance;
  /** Epoch ms. */
  startedAt: number;
  reloads?: ReloadMetrics;
}

export function metricsSnapshot(
  launcher: LauncherFacts,
  runs: readonly EngineRun[],
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
    engines: runs.map((s) => {
      const run = s.process;
      return {
        ...s.detail(),
        model: s.name,
        verb: s.plan.card.verb,
        engine: s.plan.card.engine,
        port: s.plan.port,
        // What `ready` means, asleep or not: the current run's last poll answered 200.
        up: run.running && ["ready", "sleeping", "waking"].includes(s.state),
        startTimeSeconds: run.running && run.startedAt !== undefined
          ? run.startedAt / 1000
          : undefined,
        generatedTokens: s.serving.generatedTokens,
        ...s.counts(),
      };
    }),
    ...(production ? { authFailures: launcher.stance.auth.failures } : {}),
    ...(launcher.reloads ? { reloads: { ...launcher.reloads } } : {}),
  };
}
