/**
 * The production-mode phase's rows and notes: production ÷ development
 * `/health` (every request's token verified in full) and the security
 * headers' cost.
 *
 * @module
 */

import { pick } from "../plan.ts";
import {
  errorNotesOf,
  type Row,
  times,
  type Verdict,
  wrkRows,
} from "../report/table.ts";
import type { AuthResults } from "../phases/auth.ts";

/** Development and production; the headers' cost. */
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
      "launcher /health, production, every token verified, c=8",
      pick(runs, "prod"),
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

/**
 * No target: a saturated c=8 ratio is not what an operator feels; the
 * verification's cost at a realistic rate is in docs/security.md.
 */
export function authTargets(_auth: AuthResults): Verdict[] {
  return [];
}

/** Notes on wrk errors during the production rows. */
export function authNotes(auth: AuthResults): string[] {
  return errorNotesOf([["/health c=8 auth", auth.runs]]);
}
