/**
 * Rows and verdicts of a comparison of this tree with an earlier commit
 * (`phases/tree_compare.ts`): each measurement as this tree ÷ the earlier
 * tree, beside the A/A control's this tree ÷ this tree, ratios as medians of
 * the per-round ratios.
 *
 * @module
 */
import type {
  Arms,
  StartSample,
  TreeComparison,
} from "../phases/tree_compare.ts";
import { MANY, median } from "../plan.ts";
import {
  fmt,
  range,
  type Row,
  signed,
  times,
  type Unit,
  type Verdict,
} from "../report/table.ts";

/** One measurement of a start. */
export type Key = keyof StartSample;

function ratios(
  a: readonly StartSample[],
  b: readonly StartSample[],
  key: Key,
): number[] {
  return a.map((s, i) => s[key] / (b[i]?.[key] ?? Number.NaN));
}

function deltas(
  a: readonly StartSample[],
  b: readonly StartSample[],
  key: Key,
): number[] {
  return a.map((s, i) => s[key] - (b[i]?.[key] ?? Number.NaN));
}

function med(samples: readonly StartSample[], key: Key): number {
  return median(samples.map((s) => s[key]));
}

const UNIT: Record<Key, Unit> = {
  listen: "ms",
  healthy: "ms",
  cpu: "ms",
  rss: "MiB",
  models: "ms",
};

/** A row whose ratio and difference are medians of the per-round ones. */
function pairedRow(
  what: string,
  runs: readonly StartSample[],
  base: readonly StartSample[],
  label: string,
  key: Key,
): Row {
  return {
    what,
    value: fmt(med(runs, key), UNIT[key]),
    baseline: `${label}: ${fmt(med(base, key), UNIT[key])}`,
    ratio: times(median(ratios(runs, base, key))),
    delta: signed(median(deltas(runs, base, key)), UNIT[key]),
  };
}

/** What each measurement is, for people. */
export const WHAT: Record<Key, string> = {
  listen: `spawn → "listening on"`,
  healthy: `spawn → all ${MANY} engines healthy`,
  cpu: `launcher CPU, spawn → "listening on"`,
  rss: "launcher RSS, idle",
  models: `GET /models at ${MANY} engines (median of 20, one at a time)`,
};

/** Which starts, and the measurements taken of them. */
export const KINDS = [
  {
    arms: "standIn",
    engines: `${MANY} stand-in engines`,
    keys: ["listen", "healthy", "cpu", "rss", "models"],
  },
  {
    arms: "sleepLike",
    engines: `${MANY} sleep-like engines`,
    keys: ["listen", "cpu", "rss"],
  },
] as const;

/**
 * Two rows per measurement: this tree ÷ the earlier one, and the A/A control.
 *
 * @param cmp The rounds.
 * @param title Names the comparison, first in each row.
 * @param before Names the earlier tree (its commit is added).
 * @param keys Which measurements (default: every one of each kind).
 */
export function comparisonRows(
  cmp: TreeComparison,
  title: string,
  before: string,
  keys: readonly Key[] = ["listen", "healthy", "cpu", "rss", "models"],
): Row[] {
  const rows: Row[] = [];
  for (const kind of KINDS) {
    const arms: Arms = cmp[kind.arms];
    const n = `median of ${arms.now.length}`;
    for (const key of kind.keys.filter((k) => keys.includes(k))) {
      rows.push(
        pairedRow(
          `${title} (${kind.engines}, no pool): ${WHAT[key]}, this tree (${n})`,
          arms.now,
          arms.before,
          `${before} (${cmp.commit})`,
          key,
        ),
        pairedRow(
          `${title} (${kind.engines}): ${
            WHAT[key]
          }, this tree again, A/A control (${n})`,
          arms.again,
          arms.now,
          "this tree",
          key,
        ),
      );
    }
  }
  return rows;
}

/**
 * Whether this tree ÷ the earlier one is within the A/A control's noise
 * (`within`), or at most that noise above 1 (`no-worse`).
 *
 * @param arms The rounds of one kind of start.
 * @param key The measurement.
 * @param claim The verdict's name.
 * @param mode `within` noise either way, or `no-worse` (only a rise fails).
 */
export function noiseVerdict(
  arms: Arms,
  key: Key,
  claim: string,
  mode: "within" | "no-worse" = "within",
): Verdict {
  const cost = ratios(arms.now, arms.before, key);
  const control = ratios(arms.again, arms.now, key);
  const ratio = median(cost);
  const noise = Math.max(...control.map((c) => Math.abs(c - 1)));
  return {
    name: claim,
    pass: mode === "within" ? Math.abs(ratio - 1) <= noise : ratio - 1 <= noise,
    detail: `ratio ${ratio.toFixed(3)} (rounds ${range(cost)}; ${
      fmt(med(arms.now, key), UNIT[key])
    } vs ${fmt(med(arms.before, key), UNIT[key])}); A/A control ${
      median(control).toFixed(3)
    } (rounds ${range(control)}), noise ±${(noise * 100).toFixed(1)} %`,
  };
}
