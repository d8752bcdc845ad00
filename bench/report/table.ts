/**
 * How `deno task bench` writes its results: rows with a value, a same-run
 * baseline, their ratio and difference; verdicts on targets; Markdown.
 *
 * @module
 */
import { type Measured, median, type Runs } from "../plan.ts";

/** Units a row can be in. */
export type Unit =
  | "req/s"
  | "ms"
  | "µs"
  | "MiB"
  | "MB/s"
  | "bytes"
  | "requests"
  | "count"
  | "per round";
/** What {@linkcode wrkRows} reports of a wrk run. */
export type Metric = "rps" | "p50" | "p99" | "cpu";

const METRICS: readonly { key: Metric; label: string; unit: Unit }[] = [
  { key: "rps", label: "throughput", unit: "req/s" },
  { key: "p50", label: "p50", unit: "ms" },
  { key: "p99", label: "p99", unit: "ms" },
  { key: "cpu", label: "server CPU per request", unit: "µs" },
];

/** One line of the results table. */
export interface Row {
  what: string;
  value: string;
  baseline: string;
  ratio: string;
  delta: string;
}

/** A target and whether it was met. */
export interface Verdict {
  name: string;
  pass: boolean;
  detail: string;
}

/** A value in its unit, or `n/a`. */
export function fmt(value: number, unit: Unit): string {
  if (!Number.isFinite(value)) return "n/a";
  switch (unit) {
    case "req/s":
      return `${Math.round(value)} req/s`;
    case "requests":
    case "count":
      return `${Math.round(value)}`;
    case "per round":
      return `${value.toFixed(2)} per round`;
    case "bytes":
      return `${Math.round(value)} bytes`;
    case "MiB":
      return `${value.toFixed(1)} MiB`;
    case "MB/s":
      return `${value.toFixed(0)} MB/s`;
    case "µs":
      return `${value.toFixed(1)} µs`;
    case "ms": {
      const abs = Math.abs(value);
      const digits = abs < 1 ? 3 : abs < 100 ? 2 : 0;
      return `${value.toFixed(digits)} ms`;
    }
  }
}

/** {@linkcode fmt} with a `+` on positive values. */
export function signed(value: number, unit: Unit): string {
  const text = fmt(value, unit);
  return value > 0 ? `+${text}` : text;
}

/** `1.23×`, or `n/a`. */
export function times(ratio: number): string {
  return Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : "n/a";
}

/** A row whose ratio and difference are those of the two medians. */
export function row(
  what: string,
  value: number,
  unit: Unit,
  base?: { label: string; value: number },
): Row {
  if (!base) {
    return {
      what,
      value: fmt(value, unit),
      baseline: "(baseline)",
      ratio: "",
      delta: "",
    };
  }
  return {
    what,
    value: fmt(value, unit),
    baseline: `${base.label}: ${fmt(base.value, unit)}`,
    ratio: times(value / base.value),
    delta: signed(value - base.value, unit),
  };
}

/** Per-round ratios of a target to its baseline (same round, so same machine load). */
export function roundRatios(
  runs: readonly Measured[],
  base: readonly Measured[],
  metric: Metric,
): number[] {
  return runs.map((r, i) => r[metric] / (base[i]?.[metric] ?? Number.NaN));
}

/** Per-round differences of a target and its baseline. */
export function roundDeltas(
  runs: readonly Measured[],
  base: readonly Measured[],
  metric: Metric,
): number[] {
  return runs.map((r, i) => r[metric] - (base[i]?.[metric] ?? Number.NaN));
}

/**
 * Throughput, p50, p99 and CPU rows of one target: medians over rounds.
 * Against a baseline from the same `compare()` call, ratio and difference are
 * the medians of the per-round ones; otherwise those of the medians.
 */
export function wrkRows(
  what: string,
  runs: readonly Measured[],
  base?: { label: string; runs: readonly Measured[]; paired: boolean },
): Row[] {
  return METRICS.map(({ key, label, unit }) => {
    const value = median(runs.map((r) => r[key]));
    if (!base) return row(`${what} ${label}`, value, unit);
    const baseValue = median(base.runs.map((r) => r[key]));
    if (!base.paired) {
      return row(`${what} ${label}`, value, unit, {
        label: base.label,
        value: baseValue,
      });
    }
    return {
      what: `${what} ${label}`,
      value: fmt(value, unit),
      baseline: `${base.label}: ${fmt(baseValue, unit)}`,
      ratio: times(median(roundRatios(runs, base.runs, key))),
      delta: signed(median(roundDeltas(runs, base.runs, key)), unit),
    };
  });
}

/** `min–max` with two decimals. */
export function range(values: readonly number[]): string {
  return `${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)}`;
}

/** One note per target whose wrk runs had errors. */
export function errorNotesOf(all: readonly [string, Runs][]): string[] {
  const notes: string[] = [];
  for (const [what, runs] of all) {
    for (const [key, results] of Object.entries(runs)) {
      const errors = results.reduce(
        (sum, r) =>
          sum + r.errors.connect + r.errors.read + r.errors.write +
          r.errors.status + r.errors.timeout,
        0,
      );
      if (errors > 0) {
        notes.push(
          `- ${what} (${key}): ${errors} wrk errors (non-2xx, socket or timeout): its numbers are suspect`,
        );
      }
    }
  }
  return notes;
}

/** The results table's Markdown lines. */
export function tableLines(rows: readonly Row[]): string[] {
  return [
    "| Measurement | Value | Baseline (same run) | Ratio | Δ vs baseline |",
    "|---|--:|---|--:|--:|",
    ...rows.map((r) =>
      `| ${r.what} | ${r.value} | ${r.baseline} | ${r.ratio} | ${r.delta} |`
    ),
  ];
}

/** The Targets section's lines. */
export function verdictLines(targets: readonly Verdict[]): string[] {
  return targets.map((t) =>
    `- **${t.pass ? "PASS" : "FAIL"}** ${t.name}: ${t.detail}`
  );
}
