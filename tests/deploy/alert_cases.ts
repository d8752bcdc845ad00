/**
 * The alert rules' unit tests (deploy/prometheus/alerts.yml), written as
 * promtool's test file from a metrics file the launcher wrote: every input
 * series takes its name and labels from one of the file's samples, so a
 * renamed metric or label cannot go unnoticed. Each alert has a case that
 * fires it and one that must stay quiet.
 */
import { stringify } from "yaml";
import { parse } from "../support/prometheus.ts";

/** One sample of the launcher's file: labels (empty ones dropped) and value. */
export interface Sample {
  labels: Record<string, string>;
  value: number;
}

/** Where an input or an expected alert comes from: the samples of `family` having `match`'s labels. */
export interface FromFile {
  family: string;
  match: Record<string, string>;
}

interface Input extends Partial<FromFile> {
  /** promtool's notation, or from each sample (its value in the file). */
  values: string | ((sample: Sample) => string);
  /** Another value for labels the sample has (`phase`: a phase the file did not catch). */
  relabel?: Record<string, string>;
  /** A series node_exporter adds (`up`): no file sample, these labels. */
  series?: string;
}

interface Check {
  at: string;
  alert: string;
  /** The one alert expected, its labels those of this sample; none: quiet. */
  fires?: FromFile & {
    severity: string;
    /** Labels the rule's expression drops. */
    drop?: string[];
    /** The `$value` its annotations print. */
    value?: number;
  };
}

interface AlertCase {
  name: string;
  interval?: string;
  inputs: Input[];
  checks: Check[];
}

/** The labels Prometheus adds when it scrapes node_exporter. */
export const TARGET = { instance: "gpu-node-1:9100", job: "node" };

const held = (s: Sample) => `${s.value}x40`;
/** An input from `family`'s samples of `model`. */
const of = (
  family: string,
  model: string,
  values: Input["values"],
  relabel?: Record<string, string>,
): Input => ({ family, match: { model }, values, ...relabel && { relabel } });
const state = (model: string, at: Record<string, string>, other: string) => ({
  family: "mymodel_engine_state",
  match: { model },
  values: (s: Sample) => at[s.labels.state!] ?? other,
});

// The run behind the file (tests/deploy/monitoring_test.ts): `ready` serving
// on GPU 0, `typo` failed (bad arguments twice) on GPU 1, `fetching` starting,
// downloading its weights.
export const CASES: AlertCase[] = [
  {
    name:
      "the file as the launcher wrote it, held: the failed engine's alert only",
    inputs: [{ family: "*", match: {}, values: held }, {
      series: "up",
      values: "1x40",
    }],
    checks: [
      {
        at: "20m",
        alert: "MymodelEngineFailed",
        fires: {
          family: "mymodel_engine_state",
          match: { model: "typo", state: "failed" },
          severity: "critical",
        },
      },
      ...[
        "MymodelEngineNotReady",
        "MymodelEngineRestartStorm",
        "MymodelEngineStalled",
        "MymodelDrainCutRequests",
        "MymodelGpuMemoryNotReleased",
        "MymodelLauncherDown",
      ].map((alert) => ({ at: "20m", alert })),
    ],
  },
  {
    name: "a ready engine down for 15 minutes",
    inputs: [
      of("mymodel_engine_up", "ready", "0x20"),
      state("ready", { backoff: "1x20" }, "0x20"),
    ],
    checks: [{ at: "14m", alert: "MymodelEngineNotReady" }, {
      at: "16m",
      alert: "MymodelEngineNotReady",
      fires: {
        family: "mymodel_engine_up",
        match: { model: "ready" },
        severity: "warning",
      },
    }],
  },
  {
    name:
      "a first start downloading for 40 minutes, then loading for 5: no page (--start-timeout stops only a silent start)",
    inputs: [
      of("mymodel_engine_up", "fetching", "0x44 1x10"),
      of("mymodel_engine_load_phase", "fetching", "1x39 stale"),
      of("mymodel_engine_load_phase", "fetching", "_x40 1x4 stale", {
        phase: "loading",
      }),
      state("fetching", { starting: "1x44 0x10", ready: "0x44 1x10" }, "0x54"),
    ],
    checks: ["16m", "30m", "39m", "44m", "50m"].map((at) => ({
      at,
      alert: "MymodelEngineNotReady",
    })),
  },
  {
    name: "a download done at 10m, then a load not ready for 15 minutes",
    inputs: [
      of("mymodel_engine_up", "fetching", "0x40"),
      of("mymodel_engine_load_phase", "fetching", "1x9 stale"),
      of("mymodel_engine_load_phase", "fetching", "_x10 1x30", {
        phase: "loading",
      }),
    ],
    checks: [{ at: "24m", alert: "MymodelEngineNotReady" }, {
      at: "26m",
      alert: "MymodelEngineNotReady",
      fires: {
        family: "mymodel_engine_up",
        match: { model: "fetching" },
        severity: "warning",
      },
    }],
  },
  {
    name:
      "a download stalled at 5m: --start-timeout stops it at 20m, its restart not ready pages 15 minutes later",
    inputs: [
      of("mymodel_engine_up", "fetching", "0x50"),
      of("mymodel_engine_load_phase", "fetching", "1x19 stale"),
    ],
    checks: [{ at: "34m", alert: "MymodelEngineNotReady" }, {
      at: "36m",
      alert: "MymodelEngineNotReady",
      fires: {
        family: "mymodel_engine_up",
        match: { model: "fetching" },
        severity: "warning",
      },
    }],
  },
  {
    name:
      "a failed engine through its retry (--failed-retry), and one ready again",
    inputs: [
      state(
        "typo",
        { failed: "1x10 0x2 1x10", starting: "0x10 1x2 0x10" },
        "0x22",
      ),
      state("ready", { failed: "1x5 0x10", ready: "0x5 1x10" }, "0x15"),
    ],
    checks: [{
      at: "11m",
      alert: "MymodelEngineFailed",
      fires: {
        family: "mymodel_engine_state",
        match: { model: "typo", state: "failed" },
        severity: "critical",
      },
    }],
  },
  {
    name: "three restarts in 10 minutes, and one",
    inputs: [
      of("mymodel_engine_restarts_total", "typo", "1x3 2 3 4x5"),
      of("mymodel_engine_restarts_total", "ready", "0 1x10"),
    ],
    checks: [{
      at: "7m",
      alert: "MymodelEngineRestartStorm",
      fires: {
        family: "mymodel_engine_restarts_total",
        match: { model: "typo" },
        severity: "warning",
        value: 3,
      },
    }],
  },
  {
    name: "a stall, and an exit of another cause",
    inputs: [
      {
        family: "mymodel_engine_exits_total",
        match: { model: "ready", cause: "stalled" },
        values: "0x3 1x20",
      },
      {
        family: "mymodel_engine_exits_total",
        match: { model: "typo", cause: "exit" },
        values: "0x3 1x20",
      },
    ],
    checks: [{
      at: "5m",
      alert: "MymodelEngineStalled",
      fires: {
        family: "mymodel_engine_exits_total",
        match: { model: "ready", cause: "stalled" },
        severity: "warning",
      },
    }, { at: "20m", alert: "MymodelEngineStalled" }],
  },
  {
    name: "a drain that cut 2 requests, and one that cut none",
    inputs: [
      of("mymodel_engine_requests_cut_total", "ready", "0x3 2x10"),
      of("mymodel_engine_requests_cut_total", "typo", "0x13"),
    ],
    checks: [{
      at: "5m",
      alert: "MymodelDrainCutRequests",
      fires: {
        family: "mymodel_engine_requests_cut_total",
        match: { model: "ready" },
        severity: "warning",
        value: 2,
      },
    }],
  },
  {
    name:
      "a release wait that reached --gpu-release-timeout, a shorter one, another reason",
    interval: "15s",
    inputs: [
      {
        family: "mymodel_engine_start_wait_seconds_total",
        match: { model: "typo", reason: "gpu-memory-release" },
        values: "0 15 31x20",
      },
      {
        family: "mymodel_engine_start_wait_seconds_total",
        match: { model: "ready", reason: "gpu-memory-release" },
        values: "0 10x20",
      },
      {
        family: "mymodel_engine_start_wait_seconds_total",
        match: { model: "ready", reason: "gpu-busy-loading" },
        values: "0 15 31x20",
      },
    ],
    checks: [{
      at: "1m",
      alert: "MymodelGpuMemoryNotReleased",
      fires: {
        family: "mymodel_engine_start_wait_seconds_total",
        match: { model: "typo", reason: "gpu-memory-release" },
        severity: "warning",
        value: 31,
      },
    }],
  },
  {
    name: "a launcher writing its file every minute",
    inputs: [{
      family: "mymodel_metrics_updated_timestamp_seconds",
      match: {},
      values: "0+60x10",
    }],
    checks: [{ at: "8m", alert: "MymodelMetricsFileStale" }],
  },
  {
    name: "a launcher killed at 4m: its file stays, aging, saying it runs",
    inputs: [{
      family: "mymodel_metrics_updated_timestamp_seconds",
      match: {},
      values: "0+60x4 240x10",
    }, { family: "mymodel_launcher_stopped", match: {}, values: "0x14" }],
    checks: [{ at: "6m", alert: "MymodelMetricsFileStale" }, {
      at: "8m",
      alert: "MymodelMetricsFileStale",
      fires: {
        family: "mymodel_metrics_updated_timestamp_seconds",
        match: {},
        severity: "critical",
        value: 240,
      },
    }],
  },
  {
    name:
      "a clean stop at 10m (systemctl stop): its last file says stopped and stays",
    inputs: [
      {
        family: "mymodel_metrics_updated_timestamp_seconds",
        match: {},
        values: "0+60x10 600x50",
      },
      { family: "mymodel_launcher_stopped", match: {}, values: "0x9 1x51" },
      { family: "mymodel_launcher_info", match: {}, values: "1x60" },
      { series: "up", values: "1x60" },
    ],
    checks: ["13m", "30m", "60m"].flatMap((at) => [
      { at, alert: "MymodelMetricsFileStale" },
      { at, alert: "MymodelLauncherDown" },
    ]),
  },
  {
    name:
      "a clean stop at 10m, then a move to another port: the next launcher removes the file at 20m",
    inputs: [
      {
        family: "mymodel_metrics_updated_timestamp_seconds",
        match: {},
        values: "0+60x10 600x9 stale",
      },
      {
        family: "mymodel_launcher_stopped",
        match: {},
        values: "0x9 1x10 stale",
      },
      { family: "mymodel_launcher_info", match: {}, values: "1x19 stale" },
      { series: "up", values: "1x90" },
    ],
    checks: ["15m", "23m", "40m", "75m"].flatMap((at) => [
      { at, alert: "MymodelMetricsFileStale" },
      { at, alert: "MymodelLauncherDown" },
    ]),
  },
  {
    name:
      "a launcher killed at 10m whose file a next launcher on another port removed at 11m: it never said stopped",
    inputs: [
      { family: "mymodel_launcher_info", match: {}, values: "1x10 stale" },
      { family: "mymodel_launcher_stopped", match: {}, values: "0x10 stale" },
      { series: "up", values: "1x30" },
    ],
    checks: [
      { at: "5m", alert: "MymodelLauncherDown" },
      { at: "12m", alert: "MymodelLauncherDown" },
      {
        at: "14m",
        alert: "MymodelLauncherDown",
        fires: {
          family: "mymodel_launcher_info",
          match: {},
          severity: "critical",
        },
      },
    ],
  },
  {
    name:
      "a clean stop at 5m, a start again at 6m, a death at 10m, its file removed at 11m: the last word counts",
    inputs: [
      { family: "mymodel_launcher_info", match: {}, values: "1x10 stale" },
      {
        family: "mymodel_launcher_stopped",
        match: {},
        values: "0x4 1 0x5 stale",
      },
      { series: "up", values: "1x30" },
    ],
    checks: [{
      at: "14m",
      alert: "MymodelLauncherDown",
      fires: {
        family: "mymodel_launcher_info",
        match: {},
        severity: "critical",
      },
    }],
  },
  {
    name: "a node whose node_exporter is down: not the launcher's alert",
    inputs: [
      { family: "mymodel_launcher_info", match: {}, values: "1x10 stale" },
      { series: "up", values: "1x10 0x20" },
    ],
    checks: [{ at: "14m", alert: "MymodelLauncherDown" }],
  },
];

/** A rule of alerts.yml as the test needs it. */
export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** The samples of the file matching `from`; throws when there are none. */
function samples(
  families: ReturnType<typeof parse>,
  from: FromFile,
): (Sample & { name: string })[] {
  const names = from.family === "*" ? [...families.keys()] : [from.family];
  const found = names.flatMap((name) =>
    // A summary's samples come parsed as a sum and a count, no value: no rule reads one.
    (families.get(name)?.metrics ?? []).filter((m) => m.value !== undefined)
      .map((m) => ({
        name,
        labels: Object.fromEntries(
          Object.entries(m.labels ?? {}).filter(([, v]) => v !== ""),
        ),
        value: Number(m.value),
      }))
  ).filter((s) =>
    Object.entries(from.match).every(([k, v]) => s.labels[k] === v)
  );
  if (found.length === 0) {
    throw new Error(
      `Cannot find ${from.family}${
        JSON.stringify(from.match)
      } in the launcher's metrics file`,
    );
  }
  return found;
}

/** `labels` with `to`'s values; a label the sample does not have is an error. */
function relabelled(
  labels: Record<string, string>,
  to: Record<string, string> = {},
): Record<string, string> {
  for (const key of Object.keys(to)) {
    if (!(key in labels)) {
      throw new Error(`Cannot relabel ${key}: not a label of the sample`);
    }
  }
  return { ...labels, ...to };
}

function series(name: string, labels: Record<string, string>): string {
  const pairs = Object.entries({ ...labels, ...TARGET }).map(([k, v]) =>
    `${k}=${JSON.stringify(v)}`
  );
  return `${name}{${pairs.join(",")}}`;
}

/** An annotation as Prometheus renders it: `$labels.x` and `$value | printf "%.0f"` only. */
export function render(
  template: string,
  labels: Record<string, string>,
  value?: number,
): string {
  return template.replace(/\{\{(.*?)\}\}/g, (_, inner: string) => {
    const label = /^\s*\$labels\.(\w+)\s*$/.exec(inner);
    if (label) return labels[label[1]!] ?? "<no value>";
    if (
      /^\s*\$value \| printf "%\.0f"\s*$/.test(inner) && value !== undefined
    ) {
      return value.toFixed(0);
    }
    throw new Error(`Cannot render {{${inner}}} in the test`);
  });
}

/**
 * promtool's test file for `rulesPath`, from the launcher's `fileText`.
 *
 * @example
 * ```ts ignore
 * await Deno.writeTextFile(`${dir}/tests.yml`, ruleTests(text, rulesPath, rules));
 * ```
 */
export function ruleTests(
  fileText: string,
  rulesPath: string,
  rules: readonly AlertRule[],
): string {
  const families = parse(fileText);
  const tests = CASES.map((c) => ({
    name: c.name,
    interval: c.interval ?? "1m",
    input_series: c.inputs.flatMap((input) =>
      input.series !== undefined
        ? [{ series: series(input.series, {}), values: input.values as string }]
        : samples(families, input as FromFile).map((s) => ({
          series: series(s.name, relabelled(s.labels, input.relabel)),
          values: typeof input.values === "string"
            ? input.values
            : input.values(s),
        }))
    ),
    alert_rule_test: c.checks.map(({ at, alert, fires }) => {
      const rule = rules.find((r) => r.alert === alert);
      if (!rule) throw new Error(`Cannot find alert ${alert} in ${rulesPath}`);
      if (!fires) return { eval_time: at, alertname: alert, exp_alerts: [] };
      const [sample, ...more] = samples(families, fires);
      if (more.length > 0) {
        throw new Error(`${fires.family}: one sample expected`);
      }
      const labels = Object.fromEntries(
        Object.entries({ ...sample!.labels, ...TARGET })
          .filter(([k]) => !fires.drop?.includes(k)),
      );
      const annotations = Object.fromEntries(
        Object.entries(rule.annotations ?? {}).map(([k, t]) => [
          k,
          render(t, labels, fires.value),
        ]),
      );
      return {
        eval_time: at,
        alertname: alert,
        exp_alerts: [{
          exp_labels: { ...labels, severity: fires.severity },
          exp_annotations: annotations,
        }],
      };
    }),
  }));
  return stringify({
    rule_files: [rulesPath],
    evaluation_interval: "15s",
    tests,
  });
}
