// The metrics as Prometheus text exposition format 0.0.4, from a plain
// snapshot. Pure.
import {
  ENGINE_STATES,
  type EngineState,
} from "../supervision/restart_policy.ts";
import { WAIT_REASONS, type WaitReason } from "../gpu/start_gate.ts";
import {
  EXIT_CAUSES,
  type ExitCause,
  type LoadPhase,
} from "../supervision/engine_detail.ts";
import {
  AUTH_FAILURE_REASONS,
  type AuthFailureReason,
} from "../web/auth_failures.ts";

export { AUTH_FAILURE_REASONS, type AuthFailureReason };

export interface LauncherMetrics {
  version: string;
  mode: "development" | "production";
  tls: boolean;
  // Labels the launcher's own families, so that launchers sharing one
  // metrics/ directory never write the same series twice (node_exporter's
  // textfile collector rejects duplicates).
  port: number;
  startTimeSeconds: number;
  startWarnings?: number | undefined;
}

// An absent field gives no sample.
export interface EngineMetrics {
  model: string;
  verb: string;
  engine: string;
  port: number;
  /** `[]` for none, `null` when not placed. */
  gpus: readonly string[] | null;
  up: boolean;
  restarts: number;
  healthPollSeconds?: number | undefined;
  startTimeSeconds?: number | undefined;
  state?: EngineState | undefined;
  gpuMemoryMiB?: Readonly<Record<string, number>> | null | undefined;
  startWaitSeconds?: Readonly<Partial<Record<WaitReason, number>>> | undefined;
  exits?: Readonly<Partial<Record<ExitCause, number>>> | undefined;
  phase?: LoadPhase | null | undefined;
}

export interface ReloadMetrics {
  ok: number;
  refused: number;
  lastOkSeconds?: number | undefined;
}

export interface MetricsSnapshot {
  launcher: LauncherMetrics;
  /** In any order: rendering sorts them. */
  engines: readonly EngineMetrics[];
  /** Rendered only in production mode; missing reasons count 0. */
  authFailures?:
    | Readonly<Partial<Record<AuthFailureReason, number>>>
    | undefined;
  reloads?: ReloadMetrics | undefined;
  /** A gauge an alert can age: a launcher killed outright leaves its file behind. */
  updatedSeconds?: number | undefined;
}

type Labels = readonly (readonly [string, string])[];

interface Sample {
  labels: Labels;
  value: number;
}

function escapeLabelValue(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll(
    "\n",
    "\\n",
  );
}

// As Prometheus' Go parser reads floats.
function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

function family(
  name: string,
  type: "gauge" | "counter",
  help: string,
  samples: readonly Sample[],
): string {
  // The help texts below hold no backslash or line feed: nothing to escape.
  let text = `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
  for (const { labels, value } of samples) {
    const pairs = labels.map(([key, v]) => `${key}="${escapeLabelValue(v)}"`);
    text += `${name}{${pairs.join(",")}} ${formatValue(value)}\n`;
  }
  return text;
}

function perModel(
  engines: readonly EngineMetrics[],
  value: (engine: EngineMetrics) => number | undefined,
): Sample[] {
  return engines.flatMap((e) => {
    const v = value(e);
    return v === undefined ? [] : [{ labels: [["model", e.model]], value: v }];
  });
}

function byModelThenPort(a: EngineMetrics, b: EngineMetrics): number {
  if (a.model !== b.model) return a.model < b.model ? -1 : 1;
  return a.port - b.port;
}

// No timestamps: node_exporter's textfile collector refuses them. The `gpus`
// label is empty both for `gpus: 0` and unplaced engines: Prometheus reads an
// empty label value as no label.
export function renderMetrics(snapshot: MetricsSnapshot): string {
  const engines = [...snapshot.engines].sort(byModelThenPort);
  const { launcher } = snapshot;
  const launcherPort = ["port", String(launcher.port)] as const;
  function ofLauncher(value: number | undefined): Sample[] {
    return value === undefined ? [] : [{ labels: [launcherPort], value }];
  }
  const parts = [
    family(
      "mymodel_engine_up",
      "gauge",
      "1 when the engine's last health poll answered 200, else 0.",
      engines.map((e) => ({
        labels: [
          ["model", e.model],
          ["verb", e.verb],
          ["engine", e.engine],
          ["port", String(e.port)],
          ["gpus", (e.gpus ?? []).join(",")],
        ],
        value: e.up ? 1 : 0,
      })),
    ),
    family(
      "mymodel_engine_restarts_total",
      "counter",
      "Engine restarts since the launcher started.",
      perModel(engines, (e) => e.restarts),
    ),
    family(
      "mymodel_engine_health_poll_seconds",
      "gauge",
      "Duration of the engine's last health poll in seconds.",
      perModel(engines, (e) => e.healthPollSeconds),
    ),
    family(
      "mymodel_engine_start_time_seconds",
      "gauge",
      "Start time of the engine's current process in Unix seconds.",
      perModel(engines, (e) => e.startTimeSeconds),
    ),
    family(
      "mymodel_engine_state",
      "gauge",
      "1 for the engine's current lifecycle state, 0 for the others.",
      engines.flatMap((e) =>
        e.state === undefined ? [] : ENGINE_STATES.map((state) => ({
          labels: [["model", e.model], ["state", state]],
          value: state === e.state ? 1 : 0,
        }))
      ),
    ),
    family(
      "mymodel_engine_exits_total",
      "counter",
      "Engine runs ended since the launcher started, by cause (from the exit and the engine's own output).",
      engines.flatMap((e) =>
        e.exits === undefined ? [] : EXIT_CAUSES.map((cause) => ({
          labels: [["model", e.model], ["cause", cause]],
          value: e.exits?.[cause] ?? 0,
        }))
      ),
    ),
    family(
      "mymodel_engine_load_phase",
      "gauge",
      "1 for the load phase of a starting engine (downloading, loading, preparing), when known.",
      engines.flatMap((e) =>
        e.phase
          ? [{ labels: [["model", e.model], ["phase", e.phase]], value: 1 }]
          : []
      ),
    ),
    family(
      "mymodel_engine_gpu_memory_bytes",
      "gauge",
      "GPU memory the engine's current run holds on each of its devices (nvidia-smi).",
      engines.flatMap((e) =>
        Object.entries(e.gpuMemoryMiB ?? {}).map(([gpu, mib]) => ({
          labels: [["model", e.model], ["gpu", gpu]],
          value: mib * 1024 * 1024,
        }))
      ),
    ),
    family(
      "mymodel_engine_start_wait_seconds_total",
      "counter",
      "Seconds the engine's starts were held by the GPU start gate, by reason.",
      engines.flatMap((e) =>
        e.startWaitSeconds === undefined ? [] : WAIT_REASONS.map((reason) => ({
          labels: [["model", e.model], ["reason", reason]],
          value: e.startWaitSeconds?.[reason] ?? 0,
        }))
      ),
    ),
    family(
      "mymodel_launcher_info",
      "gauge",
      "The launcher's version, mode and whether it serves TLS; always 1.",
      [{
        labels: [
          launcherPort,
          ["version", launcher.version],
          ["mode", launcher.mode],
          ["tls", String(launcher.tls)],
        ],
        value: 1,
      }],
    ),
    family(
      "mymodel_launcher_start_time_seconds",
      "gauge",
      "Start time of the launcher in Unix seconds.",
      ofLauncher(launcher.startTimeSeconds),
    ),
    family(
      "mymodel_launcher_start_warnings",
      "gauge",
      "Warnings the start-up checks gave: weights that may not fit GPU memory, unknown engine flags, unreadable weights.",
      ofLauncher(launcher.startWarnings),
    ),
  ];
  const reloads = snapshot.reloads;
  if (reloads !== undefined) {
    parts.push(
      family(
        "mymodel_reloads_total",
        "counter",
        "Reloads (SIGHUP) since the launcher started, by result: ok took effect, refused changed nothing.",
        (["ok", "refused"] as const).map((result) => ({
          labels: [launcherPort, ["result", result]],
          value: reloads[result],
        })),
      ),
      family(
        "mymodel_last_reload_timestamp_seconds",
        "gauge",
        "When the last reload that took effect finished, in Unix seconds.",
        ofLauncher(reloads.lastOkSeconds),
      ),
    );
  }
  if (launcher.mode === "production") {
    parts.push(family(
      "mymodel_auth_failures_total",
      "counter",
      "Management API requests refused by authentication, by reason.",
      AUTH_FAILURE_REASONS.map((reason) => ({
        labels: [launcherPort, ["reason", reason]],
        value: snapshot.authFailures?.[reason] ?? 0,
      })),
    ));
  }
  if (snapshot.updatedSeconds !== undefined) {
    parts.push(family(
      "mymodel_metrics_updated_timestamp_seconds",
      "gauge",
      "When the launcher last wrote this file, in Unix seconds; old means the launcher is gone or stuck.",
      ofLauncher(snapshot.updatedSeconds),
    ));
  }
  return parts.join("");
}
