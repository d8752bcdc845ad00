/**
 * Round-by-round comparison of servers under the same wrk load, the order
 * rotated each round: comparing targets round by round cancels most of the
 * drift of a shared machine's load.
 *
 * @module
 */
import { runWrk } from "./wrk.ts";
import {
  type Bench,
  type Load,
  pick,
  PLAN,
  progress,
  rotated,
  type Runs,
  type Target,
} from "../plan.ts";

/**
 * Warms every target up, then runs `rounds` rounds over all of them, the order
 * rotated each round, recording each run and the server's CPU per request.
 */
export async function compare(
  bench: Bench,
  targets: Record<string, Target>,
  load: Load,
  rounds: number,
  seconds: number,
): Promise<Runs> {
  const entries = Object.entries(targets);
  const runs: Runs = {};
  for (const [key, target] of entries) {
    runs[key] = [];
    await runWrk(target.script ?? bench.script, {
      url: target.url,
      ...load,
      seconds: PLAN.warmSeconds,
      signal: bench.signal,
    });
  }
  for (let round = 0; round < rounds; round++) {
    const order = rotated(entries, round);
    progress(
      `  ${load.name} round ${round + 1}/${rounds}: ${
        order.map(([k]) => k).join(", ")
      }`,
    );
    for (const [key, target] of order) {
      const before = target.child.cpuSeconds();
      const result = await runWrk(target.script ?? bench.script, {
        url: target.url,
        ...load,
        seconds,
        signal: bench.signal,
      });
      const used = target.child.cpuSeconds() - before;
      const cpu = result.requests > 0 ? used / result.requests * 1e6 : NaN;
      pick(runs, key).push({ ...result, cpu });
    }
  }
  return runs;
}
