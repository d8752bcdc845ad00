/**
 * The launcher's metrics as Prometheus text exposition format (version 0.0.4),
 * rendered from a plain snapshot. Pure: no clock, no files, no processes.
 *
 * @module
 */

import {
  ENGINE_STATES,
  type EngineState,
} from "../supervision/restart_policy.ts";
import { WAIT_REASONS, type WaitReason } from "../gpu/start_gate.ts";
import {
  AUTH_FAILURE_REASONS,
  type AuthFailureReason,
} from "../web/auth_failures.ts";

export { AUTH_FAILURE_REASONS, type AuthFailureReason };

/** Facts about the launcher itself. */
export interface LauncherMetrics {
  /** The package version, e.g. `0.1.0`. */
  version: string;
  /** The mode the management API runs in. */
  mode: "development" | "production";
  /** Whether the management API serves HTTPS. */
  tls: boolean;
  /**
   * The management API's port. It labels the launcher's own families so that
   * several launchers sharing one `metrics/` directory never write the same
   * series twice (node_exporter's textfile collector rejects duplicates).
   */
  port: number;
  /** When the launcher started, in Unix seconds. */
  startTimeSeconds: number;
  /**
   * Warnings the start-up checks gave: weights that may not fit the GPU
   * memory their engine may use, unknown engine flags, unreadable weights.
   * Absent: no sample.
   */
  startWarnings?: number | undefined;
}

/** Facts about one engine (one catalogue model being served). */
export interface EngineMetrics {
  /** The model's name in the catalogue. */
  model: string;
  /** The card's verb, e.g. `chat` or `embed`. */
  verb: string;
  /** The engine kind, e.g. `vllm`. */
  engine: string;
  /** The engine's port. */
  port: number;
  /** The devices handed to the engine; `[]` for none, `null` when not placed. */
  gpus: readonly string[] | null;
  /** Whether the last health poll answered 200. */
  up: boolean;
  /** Restarts since the launcher started. */
  restarts: number;
  /** How long the last health poll took, in seconds; absent before the first poll. */
  healthPollSeconds?: number | undefined;
  /** When the current engine process started, in Unix seconds; absent while none runs. */
  startTimeSeconds?: number | undefined;
  /** The lifecycle state (`waiting`, `starting`, `ready` …); absent: no state family sample. */
  state?: EngineState | undefined;
  /** The current run's GPU memory per device, in MiB; absent or null when unknown. */
  gpuMemoryMiB?: Readonly<Record<string, number>> | null | undefined;
  /** Seconds held by the GPU start gate per reason; absent for engines not on GPUs. */
  startWaitSeconds?: Readonly<Partial<Record<WaitReason, number>>> | undefined;
}

/** Reloads (SIGHUP or `Semioserve.reload()`) since the launcher started. */
export interface ReloadMetrics {
  /** Reloads that took effect. */
  ok: number;
  /** Reloads refused (nothing changed). */
  refused: number;
  /** When the last reload took effect, in Unix seconds; absent before one did. */
  lastOkSeconds?: number | undefined;
}

/** Everything one metrics file says, at one moment. */
export interface MetricsSnapshot {
  /** The launcher's own facts. */
  launcher: LauncherMetrics;
  /** One entry per engine, in any order (rendering sorts them). */
  engines: readonly EngineMetrics[];
  /**
   * Refused production requests by reason (missing reasons count 0). Rendered
   * only in production mode.
   */
  authFailures?:
    | Readonly<Partial<Record<AuthFailureReason, number>>>
    | undefined;
  /** Reload counts; their families are rendered only when present. */
  reloads?: ReloadMetrics | undefined;
  /**
   * When the file was written, in Unix seconds: a gauge an alert can age (a
   * launcher killed outright leaves its file behind). Absent: no family.
   */
  updatedSeconds?: number | undefined;
}

type Labels = readonly (readonly [string, string])[];

interface Sample {
  labels: Labels;
  value: number;
}

/** Escapes a label value: backslash, double quote and line feed, as the format requires. */
function escapeLabelValue(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll(
    "\n",
    "\\n",
  );
}

/** Formats a sample value the way Prometheus' Go parser reads floats. */
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

/** One sample per engine that has a value, labelled with its model. */
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

/**
 * Renders a snapshot as Prometheus text exposition format: `# HELP` and
 * `# TYPE` for every family, families in a fixed order, engines sorted by
 * model, labels in a fixed order, no timestamps (node_exporter's textfile
 * collector refuses them). The same snapshot always gives the same text; a
 * family whose facts are absent has no samples, or is left out. docs/ lists
 * the families.
 *
 * The `gpus` label of `mymodel_engine_up` is empty both for `gpus: 0` and
 * when placement is off: Prometheus reads an empty label value as no label.
 *
 * @param snapshot The facts to render.
 * @returns The file's text, ending with a line feed.
 */
export function renderMetrics(snapshot: MetricsSnapshot): string {
  const engines = [...snapshot.engines].sort(byModelThenPort);
  const { launcher } = snapshot;
  const launcherPort = ["port", String(launcher.port)] as const;
  /** The one sample of a launcher family, none when the value is absent. */
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
