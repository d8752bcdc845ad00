/**
 * The reload phase's rows and targets: `/health`'s longest wait and p99
 * while a launcher reloads 5,000 cards, plain and with an alias each, and the
 * reload's own time.
 *
 * @module
 */
import { median, PLAN } from "../plan.ts";
import { type Row, row, type Verdict } from "../report/table.ts";
import {
  RELOAD_POLL_MS,
  type ReloadArm,
  type ReloadResults,
} from "../phases/reload.ts";
import { CATALOGUE_CARDS } from "../phases/catalogue.ts";

/** The longest `/health` wait a reload may cause: the catalogue's parse runs off the API's loop. */
const LONGEST_WAIT_MS = 100;

/** The method, for the report's Method paragraph. */
export const RELOAD_METHOD = [
  `Reload: one launcher with one stand-in engine over ${CATALOGUE_CARDS} generated cards (plain, or an`,
  `alias each, as in the catalogue rows) takes ${PLAN.reloadSighups} SIGHUPs one after the other; \`/health\` is`,
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
    base ? { label: "plain", value: value(base) } : undefined;
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

/** The waits and reload times, plain and with aliases (against plain). */
export function reloadRows(r: ReloadResults): Row[] {
  const n = CATALOGUE_CARDS.toLocaleString("en");
  return [
    ...armRows(`${n} cards`, r.plain),
    ...armRows(`${n} cards with an alias each`, r.aliases, r.plain),
  ];
}

/** No reload holds `/health` longer than `LONGEST_WAIT_MS`. */
export function reloadTargets(r: ReloadResults): Verdict[] {
  return (["plain", "aliases"] as const).map((key) => {
    const longest = Math.max(...r[key].waits);
    return {
      name: `a reload of ${CATALOGUE_CARDS.toLocaleString("en")} cards${
        key === "aliases" ? " with an alias each" : ""
      } never holds /health longer than ${LONGEST_WAIT_MS} ms`,
      pass: longest <= LONGEST_WAIT_MS,
      detail: `${longest.toFixed(1)} ms`,
    };
  });
}
