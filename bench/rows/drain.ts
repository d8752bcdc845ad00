/**
 * The drain phase's rows and targets: streams cut by a reload of their
 * engine's card and by a stop, with the drain and with `--drain-timeout 0`,
 * and the time the drain adds.
 *
 * @module
 */
import { type Row, row, type Verdict } from "../report/table.ts";
import {
  DRAIN_STREAMS,
  DRAIN_TOKEN_MS,
  DRAIN_TOKENS,
  type DrainArm,
  type DrainResults,
} from "../phases/drain.ts";

/** The method, for the report's Method paragraph. */
export const DRAIN_METHOD = [
  `Drain: one launcher per arm with one stand-in engine serving vLLM's /metrics; ${DRAIN_STREAMS} streams`,
  `of ${DRAIN_TOKENS} tokens (one every ${DRAIN_TOKEN_MS} ms) run at once, each 2 tokens in when the card is`,
  `changed and SIGHUP sent (reload) or SIGTERM sent (stop); with --drain-timeout 30 and with 0.`,
  `Cut: streams that did not end whole; time: SIGHUP to the reload's line, SIGTERM to the exit.`,
].join(" ");

function armRows(what: string, drain: DrainArm, none: DrainArm): Row[] {
  return [
    row(`${what} with the drain: streams cut`, drain.cut, "requests"),
    row(`${what} with --drain-timeout 0: streams cut`, none.cut, "requests"),
    row(`${what} with the drain: time`, drain.ms, "ms", {
      label: "--drain-timeout 0",
      value: none.ms,
    }),
  ];
}

export function drainRows(r: DrainResults): Row[] {
  return [
    ...armRows("reload of the card", r.reload.drain, r.reload.none),
    ...armRows("stop", r.stop.drain, r.stop.none),
  ];
}

/** With the drain nothing is cut; without it every stream in flight is. */
export function drainTargets(r: DrainResults): Verdict[] {
  return (["reload", "stop"] as const).map((what) => ({
    name:
      `a ${what} with the drain cuts no stream (without: all ${DRAIN_STREAMS})`,
    pass: r[what].drain.cut === 0,
    detail: `with the drain ${r[what].drain.cut} cut; --drain-timeout 0: ${
      r[what].none.cut
    } cut; added ${(r[what].drain.ms - r[what].none.ms).toFixed(0)} ms`,
  }));
}
