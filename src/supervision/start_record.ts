// Each start's time to ready, split where the run saw it move on (asked at the
// gate, spawned, a first HTTP answer, each load phase's first line), and the
// recovery from an unplanned exit. Times are the engine run's clock's.
import type { EngineView } from "./engine_detail.ts";
import type { ExitCause, LoadPhase } from "../engines/kinds/engine_kind.ts";

export type StartRecord = NonNullable<EngineView["last_start"]>;
type Marks = Partial<Record<"gate" | "spawn" | "listening", number>>;

const seconds = (ms: number) => Math.round(ms) / 1000;

/**
 * Each step runs from its mark to the next one (or `readyAt`), so the steps sum
 * to the start. A first answer before a load phase's line is no step: the
 * line says more of that time (llama-server listens, then loads).
 *
 * @example `splitStart({ gate: 0, spawn: 2000 }, { loading: 2500 }, 9000)` is `{ seconds: 9, phases: { gate: 2, spawn: 0.5, loading: 6.5 } }`.
 */
export function splitStart(
  marks: Marks,
  began: Partial<Record<LoadPhase, number>>,
  readyAt: number,
): StartRecord {
  const { listening, ...own } = marks;
  const last = listening !== undefined &&
    Object.values(began).every((at) => at <= listening);
  const all = { ...own, ...began, ...last ? { listening } : {} };
  const steps = Object.entries(all).filter(([, at]) => at <= readyAt)
    .sort((a, b) => a[1] - b[1]);
  const phases: Record<string, number> = {};
  steps.forEach(([step, at], i) => {
    phases[step] = seconds((steps[i + 1]?.[1] ?? readyAt) - at);
  });
  return { seconds: seconds(readyAt - (steps[0]?.[1] ?? readyAt)), phases };
}

/** One engine's starts: the marks of the current one, the last start and recovery, and a tally of all. */
export class Starts {
  last: StartRecord | null = null;
  recovery: NonNullable<EngineView["last_recovery"]> | null = null;
  tally: { count: number; sum: number } | undefined;
  #marks: Marks = {};
  #down: { at: number; cause: ExitCause } | undefined;

  /** A reload's replacement counts on from `old`'s starts; its own marks begin with its own start. */
  inherit(old: Starts): void {
    ({ last: this.last, recovery: this.recovery, tally: this.tally } = old);
    this.#down = old.#down;
  }

  /** A start asks at the gate, or (`gated` false) spawns at once. */
  begin(now: number, gated: boolean): void {
    this.#marks = gated ? { gate: now } : {};
  }

  spawned(now: number): void {
    this.#marks.spawn = now;
  }

  /** A poll: its first answer that is not a 200 says the engine listens. */
  answered(check: { ok: boolean; answered?: boolean }, now: number): void {
    if (check.answered && !check.ok) this.#marks.listening ??= now;
  }

  /** An exit the launcher did not ask for: a recovery runs until the next first 200. */
  down(now: number, cause: ExitCause): void {
    this.#down ??= { at: now, cause };
  }

  /** A first 200: the start (and the recovery it ends) as the journal's `start` event has them. */
  ready(now: number, began: Partial<Record<LoadPhase, number>>) {
    const start = this.last = splitStart(this.#marks, began, now);
    const { count = 0, sum = 0 } = this.tally ?? {};
    this.tally = { count: count + 1, sum: sum + start.seconds };
    const down = this.#down;
    this.#down = undefined;
    const recovery = down &&
      { seconds: seconds(now - down.at), cause: down.cause };
    if (recovery) this.recovery = recovery;
    const steps = Object.entries(start.phases)
      .map(([k, s]) => `${k} ${s.toFixed(1)} s`).join(", ");
    const detail = `ready after ${start.seconds.toFixed(1)} s: ${steps}`;
    return { event: "start", detail, start, ...recovery && { recovery } };
  }
}
