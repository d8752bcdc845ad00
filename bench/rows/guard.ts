/**
 * The connection-guard phase's rows, targets and notes: guarded ÷ bare
 * `/health`, and the launcher's `/health` with idle connections held ÷
 * without.
 *
 * @module
 */

import { median, pick } from "../plan.ts";
import {
  errorNotesOf,
  range,
  roundRatios,
  type Row,
  type Verdict,
  wrkRows,
} from "../report/table.ts";
import { type GuardResults, IDLE_FLOOD } from "../phases/guard.ts";

/** Bare, guarded, launcher quiet and flooded. */
export function guardRows(results: GuardResults): Row[] {
  const { guard, flood } = results;
  return [
    ...wrkRows(
      "bare `Deno.serve` /health c=8 (guard phase)",
      pick(guard, "bare"),
    ),
    ...wrkRows(
      "same handler behind the connection guard, c=8",
      pick(guard, "guarded"),
      { label: "bare c=8", runs: pick(guard, "bare"), paired: true },
    ),
    ...wrkRows("launcher /health c=8 (guard phase)", pick(flood, "quiet")),
    ...wrkRows(
      `launcher /health c=8, ${IDLE_FLOOD} idle connections held`,
      pick(flood, "flooded"),
      { label: "without", runs: pick(flood, "quiet"), paired: true },
    ),
  ];
}

/** Guarded ÷ bare ≥ 0.70; the launcher answers, error-free, under the idle flood. */
export function guardTargets(results: GuardResults): Verdict[] {
  const { guard, flood } = results;
  const ratios = roundRatios(
    pick(guard, "guarded"),
    pick(guard, "bare"),
    "rps",
  );
  const ratio = median(ratios);
  const floodRatios = roundRatios(
    pick(flood, "flooded"),
    pick(flood, "quiet"),
    "rps",
  );
  const flooded = pick(flood, "flooded");
  const answered = flooded.reduce((sum, r) => sum + r.requests, 0);
  const errors = errorNotesOf([["", { flooded }]]).length > 0;
  return [
    {
      name:
        "guarded ÷ bare /health throughput, same handler, c=8 (ratio ≥ 0.70)",
      pass: ratio >= 0.7,
      detail: `ratio ${ratio.toFixed(2)} (rounds ${range(ratios)})`,
    },
    {
      name:
        `launcher /health answers with ${IDLE_FLOOD} idle connections held (no wrk errors; ratio to without reported, no threshold)`,
      pass: answered > 0 && !errors,
      detail: `${answered} answers; ratio ${
        median(floodRatios).toFixed(2)
      } (rounds ${range(floodRatios)})${errors ? "; wrk reported errors" : ""}`,
    },
  ];
}

/** Notes on wrk errors during the guard phase. */
export function guardNotes(results: GuardResults): string[] {
  return errorNotesOf([
    ["/health c=8 guard", results.guard],
    ["/health c=8 idle flood", results.flood],
  ]);
}
