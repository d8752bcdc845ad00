// One start's time to ready, split where the run saw it move on (asked at the
// gate, spawned, a first HTTP answer, each load phase's first line), and the
// tally the start histogram is rendered from. Pure.
import type { EngineView } from "./engine_detail.ts";
import type { LoadPhase } from "../engines/kinds/engine_kind.ts";

export type StartRecord = NonNullable<EngineView["last_start"]>;
export type StartStep = keyof StartRecord["phases"];

/** The start histogram's bounds in seconds (`+Inf` besides). */
export const START_BUCKETS: readonly number[] = [
  5,
  15,
  30,
  60,
  120,
  300,
  600,
  1200,
  1800,
];

/** Starts so far: how many, their seconds summed, how many took at most each bound. */
export interface StartTally {
  readonly count: number;
  readonly sum: number;
  readonly le: readonly number[];
}

const seconds = (ms: number) => Math.round(ms) / 1000;

/**
 * Each step runs from its mark to the next one (or `readyAt`), so the steps sum
 * to the start. A first answer before a load phase's line is no step: the
 * line says more of that time (llama-server listens, then loads).
 *
 * @example `splitStart({ gate: 0, spawn: 2000 }, { loading: 2500 }, 9000)` is `{ seconds: 9, phases: { gate: 2, spawn: 0.5, loading: 6.5 } }`.
 */
export function splitStart(
  marks: Partial<Record<"gate" | "spawn" | "listening", number>>,
  began: Partial<Record<LoadPhase, number>>,
  readyAt: number,
): StartRecord {
  const { listening, ...own } = marks;
  const last = listening !== undefined &&
    Object.values(began).every((at) => at <= listening);
  const all = { ...own, ...began, ...last ? { listening } : {} };
  const steps = (Object.entries(all) as [StartStep, number][])
    .filter(([, at]) => at <= readyAt).sort((a, b) => a[1] - b[1]);
  const phases: Partial<Record<StartStep, number>> = {};
  steps.forEach(([step, at], i) => {
    phases[step] = seconds((steps[i + 1]?.[1] ?? readyAt) - at);
  });
  return { seconds: seconds(readyAt - (steps[0]?.[1] ?? readyAt)), phases };
}

export function tally(t: StartTally | undefined, s: number): StartTally {
  const le = START_BUCKETS.map((b, i) => (t?.le[i] ?? 0) + (s <= b ? 1 : 0));
  return { count: (t?.count ?? 0) + 1, sum: (t?.sum ?? 0) + s, le };
}

/** `ready after 9.0 s: gate 2.0 s, spawn 0.5 s, loading 6.5 s`. */
export function startLine(start: StartRecord): string {
  const steps = Object.entries(start.phases).map(([step, s]) =>
    `${step} ${s.toFixed(1)} s`
  );
  return `ready after ${start.seconds.toFixed(1)} s: ${steps.join(", ")}`;
}
