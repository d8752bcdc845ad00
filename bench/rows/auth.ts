/**
 * The production-mode phase's rows, targets and notes: production ÷
 * development `/health`, one reused token or a fresh one per request, and the
 * security headers' cost.
 *
 * @module
 */

import { FRESH_TOKENS } from "../load/auth_load.ts";

import { median, pick } from "../plan.ts";
import {
  errorNotesOf,
  range,
  roundRatios,
  type Row,
  times,
  type Verdict,
  wrkRows,
} from "../report/table.ts";
import type { AuthResults } from "../phases/auth.ts";

/** Development, production with one token and with fresh tokens; the headers' cost. */
export function authRows(auth: AuthResults): Row[] {
  const { runs, headers } = auth;
  const dev = {
    label: "development c=8",
    runs: pick(runs, "dev"),
    paired: true,
  };
  return [
    ...wrkRows("launcher /health, development, c=8", pick(runs, "dev")),
    ...wrkRows(
      "launcher /health, production, one token reused, c=8",
      pick(runs, "prodOne"),
      dev,
    ),
    ...wrkRows(
      `launcher /health, production, a fresh token per request (${FRESH_TOKENS} in a cycle, no cache hit), c=8`,
      pick(runs, "prodFresh"),
      dev,
    ),
    {
      what: "management handler /health in process, with the security headers",
      value: `${headers.withHeaders.toFixed(0)} ns`,
      baseline: `without: ${headers.plain.toFixed(0)} ns`,
      ratio: times(headers.withHeaders / headers.plain),
      delta: `+${(headers.withHeaders - headers.plain).toFixed(0)} ns`,
    },
  ];
}

/** Production ÷ development with one token ≥ 0.70. */
export function authTargets(auth: AuthResults): Verdict[] {
  const ratios = roundRatios(
    pick(auth.runs, "prodOne"),
    pick(auth.runs, "dev"),
    "rps",
  );
  const fresh = roundRatios(
    pick(auth.runs, "prodFresh"),
    pick(auth.runs, "dev"),
    "rps",
  );
  const ratio = median(ratios);
  return [{
    name:
      "production ÷ development /health throughput, one token, c=8 (ratio ≥ 0.70)",
    pass: ratio >= 0.7,
    detail: `ratio ${ratio.toFixed(2)} (rounds ${range(ratios)}); ` +
      `a fresh token per request: ${median(fresh).toFixed(2)} (rounds ${
        range(fresh)
      }, reported, no target)`,
  }];
}

/** Notes on wrk errors during the production rows. */
export function authNotes(auth: AuthResults): string[] {
  return errorNotesOf([["/health c=8 auth", auth.runs]]);
}
