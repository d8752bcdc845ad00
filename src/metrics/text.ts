// The metrics as Prometheus text exposition format 0.0.4, from a plain snapshot. Pure.
import { ENGINE_STATES } from "../supervision/engine_state.ts";
import { WAIT_REASONS } from "../gpu/start_gate.ts";
import {
  type EngineDetail,
  EXIT_CAUSES,
} from "../supervision/engine_detail.ts";
import type { EngineCounts } from "../supervision/engine_run_options.ts";
import {
  AUTH_FAILURE_REASONS,
  type AuthFailureReason,
} from "../web/auth_failures.ts";

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
  /** Set in the file a clean stop leaves behind: the alert rules tell that stop from a death. */
  stopped?: boolean | undefined;
}

// The detail view's facts and those only the metrics have; an absent field gives no sample.
export interface EngineMetrics
  extends
    Pick<EngineDetail, "gpus" | "restarts" | "last_start" | "last_recovery">,
    Partial<
      Pick<
        EngineDetail,
        | "state"
        | "gpu_memory_mib"
        | "footprint"
        | "phase"
        | "traffic"
        | "sleep"
      >
    >,
    Partial<EngineCounts> {
  model: string;
  verb: string;
  engine: string;
  port: number;
  up: boolean;
  startTimeSeconds?: number | undefined;
  generatedTokens?: number | undefined;
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
  authFailures?: Readonly<Partial<Record<AuthFailureReason, number>>>;
  reloads?: ReloadMetrics | undefined;
  /** A gauge an alert can age: a launcher killed outright leaves its file behind. */
  updatedSeconds?: number | undefined;
}

interface Sample {
  labels: readonly (readonly [string, string])[];
  value: number;
  /** A summary's `_sum`, `_count`. */
  suffix?: string;
}

function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => c === "\n" ? "\\n" : `\\${c}`);
}

// `name type help`, in the order written; no help holds a backslash or line feed.
const FAMILIES = `
mymodel_engine_up gauge 1 when the engine's last health poll answered 200, else 0.
mymodel_engine_restarts_total counter Engine restarts since the launcher started.
mymodel_engine_health_poll_seconds gauge Duration of the engine's last health poll in seconds.
mymodel_engine_start_time_seconds gauge Start time of the engine's current process in Unix seconds.
mymodel_engine_state gauge 1 for the engine's current lifecycle state, 0 for the others.
mymodel_engine_exits_total counter Engine runs ended since the launcher started, by cause (from the exit and the engine's own output).
mymodel_engine_load_phase gauge 1 for the load phase of a starting engine (downloading, loading, preparing), when known.
mymodel_engine_gpu_memory_bytes gauge GPU memory the engine's current run holds on each of its devices (nvidia-smi).
mymodel_engine_footprint_bytes gauge Memory the engine's last run took, by part, from its own load lines; total is the parts' sum or nvidia-smi's figure, the larger.
mymodel_engine_kv_cache_tokens gauge Tokens the KV cache of the engine's last run holds, from its own load lines.
mymodel_engine_requests_running gauge Requests the engine is computing, from its own metrics at the last health round.
mymodel_engine_requests_waiting gauge Requests queued in the engine, from its own metrics at the last health round.
mymodel_engine_generated_tokens_total counter Tokens the engine generated since the launcher started, summed over its runs (its own counter).
mymodel_engine_start_wait_seconds_total counter Seconds the engine's starts were held by the GPU start gate, by reason.
mymodel_engine_start_seconds gauge Seconds the engine's last start took to its first 200, from the start gate (else the spawn).
mymodel_engine_start_duration_seconds summary Seconds each start took to its first 200, since the launcher started.
mymodel_engine_recovery_seconds gauge Seconds the engine's last recovery took: from an exit the launcher did not ask for to the next first 200.
mymodel_engine_sleeps_total counter Times the engine went to sleep when idle (sleep_after) since the launcher started.
mymodel_engine_wake_duration_seconds summary Seconds each wake took, from the engine's line that a request woke it to its reload's end.
mymodel_engine_switch_duration_seconds summary Seconds from a request parked in a sleeping engine the launcher wakes (vLLM) to its wake's end, room made first.
mymodel_engine_made_room_total counter Times the engine was put to sleep to make room for another engine's wake or start.
mymodel_engine_sleep_residue_bytes gauge Memory the engine kept at its last sleep: nvidia-smi's per-process figure on a GPU, its resident memory on CPU.
mymodel_engine_requests_cut_total counter Requests still in flight when a planned stop's drain ended at its deadline or at a second signal: SIGTERM cut them.
mymodel_launcher_info gauge The launcher's version, mode and whether it serves TLS; always 1.
mymodel_launcher_start_time_seconds gauge Start time of the launcher in Unix seconds.
mymodel_launcher_start_warnings gauge Warnings the start-up checks gave: weights that may not fit GPU memory, unknown engine flags, unreadable weights.
mymodel_launcher_stopped gauge 1 in the file a clean stop leaves behind (engines stopped, launcher gone), 0 while the launcher runs.
mymodel_reloads_total counter Reloads (SIGHUP) since the launcher started, by result: ok took effect, refused changed nothing.
mymodel_last_reload_timestamp_seconds gauge When the last reload that took effect finished, in Unix seconds.
mymodel_auth_failures_total counter Management API requests refused by authentication, by reason.
mymodel_metrics_updated_timestamp_seconds gauge When the launcher last wrote this file, in Unix seconds; old means the launcher is gone or stuck.
`.trim().split("\n").map((line) => line.split(" "));

// The families with one sample per model and no other label.
const PER_MODEL: Record<string, (e: EngineMetrics) => number | undefined> = {
  mymodel_engine_restarts_total: (e) => e.restarts,
  mymodel_engine_health_poll_seconds: (e) => e.healthPollSeconds,
  mymodel_engine_start_time_seconds: (e) => e.startTimeSeconds,
  mymodel_engine_requests_running: (e) => e.traffic?.running,
  mymodel_engine_requests_waiting: (e) => e.traffic?.waiting,
  mymodel_engine_generated_tokens_total: (e) => e.generatedTokens,
  mymodel_engine_requests_cut_total: (e) => e.requestsCut,
  mymodel_engine_kv_cache_tokens: (e) => e.footprint?.kv_tokens ?? undefined,
  mymodel_engine_start_seconds: (e) => e.last_start?.seconds,
  mymodel_engine_recovery_seconds: (e) => e.last_recovery?.seconds,
  mymodel_engine_sleeps_total: (e) => e.sleep?.sleeps,
  mymodel_engine_made_room_total: (e) =>
    e.sleep?.woken_by === "launcher" ? e.sleep.made_room : undefined,
  mymodel_engine_sleep_residue_bytes: (e) =>
    e.sleep?.residue_bytes ?? undefined,
};

const PARTS = ["weights", "kv_cache", "graphs", "compute", "total"] as const;

// No timestamps: node_exporter's textfile collector refuses them. A family whose samples are undefined is left out.
export function renderMetrics(snapshot: MetricsSnapshot): string {
  const engines = [...snapshot.engines].sort((a, b) =>
    a.model === b.model ? a.port - b.port : a.model < b.model ? -1 : 1
  );
  const { launcher, reloads } = snapshot;
  const launcherPort = ["port", String(launcher.port)] as const;
  function ofLauncher(value: number | undefined): Sample[] {
    return value === undefined ? [] : [{ labels: [launcherPort], value }];
  }
  const samples: Record<string, Sample[] | undefined> = {
    ...Object.fromEntries(
      Object.entries(PER_MODEL).map(([name, value]) => [
        name,
        engines.flatMap((e) => {
          const v = value(e);
          return v === undefined
            ? []
            : [{ labels: [["model", e.model]], value: v }];
        }),
      ]),
    ),
    mymodel_engine_up: engines.map((e) => ({
      labels: [
        ["model", e.model],
        ["verb", e.verb],
        ["engine", e.engine],
        ["port", String(e.port)],
        ["gpus", (e.gpus ?? []).join(",")],
      ],
      value: e.up ? 1 : 0,
    })),
    mymodel_engine_state: engines.flatMap((e) =>
      e.state === undefined ? [] : ENGINE_STATES.map((state) => ({
        labels: [["model", e.model], ["state", state]],
        value: state === e.state ? 1 : 0,
      }))
    ),
    mymodel_engine_exits_total: engines.flatMap((e) =>
      e.exits === undefined ? [] : EXIT_CAUSES.map((cause) => ({
        labels: [["model", e.model], ["cause", cause]],
        value: e.exits?.[cause] ?? 0,
      }))
    ),
    mymodel_engine_load_phase: engines.flatMap((e) =>
      e.phase
        ? [{ labels: [["model", e.model], ["phase", e.phase]], value: 1 }]
        : []
    ),
    mymodel_engine_gpu_memory_bytes: engines.flatMap((e) =>
      Object.entries(e.gpu_memory_mib ?? {}).map(([gpu, mib]) => ({
        labels: [["model", e.model], ["gpu", gpu]],
        value: mib * 1024 * 1024,
      }))
    ),
    mymodel_engine_footprint_bytes: engines.flatMap((e) =>
      PARTS.flatMap((part) => {
        const mib = e.footprint?.[`${part}_mib`];
        return typeof mib === "number"
          ? [{
            labels: [["model", e.model], ["part", part]],
            value: mib * 2 ** 20,
          }]
          : [];
      })
    ),
    mymodel_engine_start_wait_seconds_total: engines.flatMap((e) =>
      e.startWaitSeconds === undefined ? [] : WAIT_REASONS.map((reason) => ({
        labels: [["model", e.model], ["reason", reason]],
        value: e.startWaitSeconds?.[reason] ?? 0,
      }))
    ),
    mymodel_engine_start_duration_seconds: engines.flatMap((e) =>
      (e.starts ? ["sum", "count"] as const : []).map((k) => ({
        labels: [["model", e.model]],
        value: e.starts![k],
        suffix: `_${k}`,
      }))
    ),
    mymodel_engine_wake_duration_seconds: engines.flatMap(({ model, sleep }) =>
      (sleep ? ["sum", "count"] as const : []).map((k) => ({
        labels: [["model", model]],
        value: k === "sum" ? sleep!.wake_seconds_sum : sleep!.wakes,
        suffix: `_${k}`,
      }))
    ),
    mymodel_engine_switch_duration_seconds: engines.flatMap((
      { model, sleep },
    ) =>
      (sleep?.woken_by === "launcher" ? ["sum", "count"] as const : []).map((
        k,
      ) => ({
        labels: [["model", model]],
        value: k === "sum" ? sleep!.switch_seconds_sum : sleep!.switches,
        suffix: `_${k}`,
      }))
    ),
    mymodel_launcher_info: [{
      labels: [
        launcherPort,
        ["version", launcher.version],
        ["mode", launcher.mode],
        ["tls", String(launcher.tls)],
      ],
      value: 1,
    }],
    mymodel_launcher_start_time_seconds: ofLauncher(launcher.startTimeSeconds),
    mymodel_launcher_start_warnings: ofLauncher(launcher.startWarnings),
    mymodel_launcher_stopped: ofLauncher(launcher.stopped ? 1 : 0),
    mymodel_reloads_total: reloads &&
      (["ok", "refused"] as const).map((result) => ({
        labels: [launcherPort, ["result", result]],
        value: reloads[result],
      })),
    mymodel_last_reload_timestamp_seconds: reloads &&
      ofLauncher(reloads.lastOkSeconds),
    mymodel_auth_failures_total: launcher.mode === "production"
      ? AUTH_FAILURE_REASONS.map((reason) => ({
        labels: [launcherPort, ["reason", reason]],
        value: snapshot.authFailures?.[reason] ?? 0,
      }))
      : undefined,
    mymodel_metrics_updated_timestamp_seconds:
      snapshot.updatedSeconds === undefined
        ? undefined
        : ofLauncher(snapshot.updatedSeconds),
  };
  let text = "";
  for (const [name, type, ...help] of FAMILIES) {
    const family = samples[name!];
    if (family === undefined) continue;
    text += `# HELP ${name} ${help.join(" ")}\n# TYPE ${name} ${type}\n`;
    for (const { labels, value, suffix = "" } of family) {
      const pairs = labels.map(([key, v]) => `${key}="${escapeLabelValue(v)}"`);
      text += `${name}${suffix}{${pairs.join(",")}} ${value}\n`;
    }
  }
  return text;
}
