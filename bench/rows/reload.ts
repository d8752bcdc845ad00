/**
 * The reload phase's rows and targets: `/health`'s longest wait and p99
 * while a launcher reloads the shipped catalogue and 1,000 cards, and the
 * reload's own time.
 *
 * @module
 */
import { median, PLAN } from "../plan.ts";
import { type Row, row, type Verdict } from "../report/table.ts";
import {
  RELOAD_CARDS,
  RELOAD_POLL_MS,
  type ReloadArm,
  type ReloadResults,
} from "../phases/reload.ts";

/** The longest `/health` wait a reload of the shipped catalogue may cause. */
const LONGEST_WAIT_MS = 100;
const GENERATED = `${RELOAD_CARDS.toLocaleString("en")} cards`;

/** The method, for the report's Method paragraph. */
export const RELOAD_METHOD = [
  `Reload: one launcher with one stand-in engine over the shipped catalogue (plus the stand-in's card) or`,
  `${RELOAD_CARDS} generated cards takes ${PLAN.reloadSighups} SIGHUPs one after the other; \`/health\` is`,
  `asked every ${RELOAD_POLL_MS} ms, one request at a time, from each SIGHUP to its \`reload:\` line; rows`,
  `show the longest wait and the p99 over all of them, and the median reload (SIGHUP to line).`,
].join(" ");

/** The `p`-quantile (0..1) of `values`, nearest rank; NaN for none. */
function quantile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
}

function armRows(label: string, arm: ReloadArm, base?: ReloadArm): Row[] {
  const than = (value: (a: ReloadArm) => number) =>
    base ? { label: "shipped", value: value(base) } : undefined;
  const longest = (a: ReloadArm) => Math.max(...a.waits);
  const p99 = (a: ReloadArm) => quantile(a.waits, 0.99);
  const reload = (a: ReloadArm) => median(a.reloads);
  return [
    row(
      `/health during a reload, ${label}: longest wait`,
      longest(arm),
      "ms",
      than(longest),
    ),
    row(`/health during a reload, ${label}: p99`, p99(arm), "ms", than(p99)),
    row(
      `reload, ${label} (SIGHUP to its line)`,
      reload(arm),
      "ms",
      than(reload),
    ),
  ];
}

/** The waits and reload times, shipped catalogue and 1,000 cards. */
export function reloadRows(r: ReloadResults): Row[] {
  return [
    ...armRows("the shipped catalogue", r.shipped),
    ...armRows(GENERATED, r.generated, r.shipped),
  ];
}

/** A reload of the shipped catalogue holds `/health` at most `LONGEST_WAIT_MS`. */
export function reloadTargets(r: ReloadResults): Verdict[] {
  const longest = Math.max(...r.shipped.waits);
  return [{
    name:
      `a reload of the shipped catalogue never holds /health longer than ${LONGEST_WAIT_MS} ms`,
    pass: longest <= LONGEST_WAIT_MS,
    detail: `${longest.toFixed(1)} ms; ${GENERATED}: ${
      Math.max(...r.generated.waits).toFixed(1)
    } ms (reported, no target)`,
  }];
}
