/**
 * The one-engine phase (issue 34): does the launcher start as fast, sit as
 * light and answer `GET /models` as fast as before each engine became one
 * state machine and its plan a value? This tree against the tree before that
 * work (commit {@linkcode BEFORE_PIPELINE}) and against itself (the A/A
 * control), 32 engines, no pool: spawn → "listening on", → every engine
 * healthy, the launcher's CPU, its idle RSS and `/models` at 32 engines.
 * (Issue 28's one-pipeline rows compared against 95300f8 the same way.)
 *
 * @module
 */
import { compareTrees, type TreeComparison } from "./tree_compare.ts";
import { type Bench, PLAN, progress } from "../plan.ts";

/** The last commit before the one-engine work (issue 34). */
export const BEFORE_PIPELINE = "5c950a9";

/** What the phase measured, or why the earlier tree was not available. */
export type PipelineResults = TreeComparison | { skipped: string };

/** The rotating rounds of this tree, the tree before and this tree again. */
export async function pipelinePhase(bench: Bench): Promise<PipelineResults> {
  const cmp = await compareTrees(
    bench,
    BEFORE_PIPELINE,
    "before the one engine",
    PLAN.pipelineRounds,
  );
  if (typeof cmp !== "string") return cmp;
  progress(`one-engine rows skipped: ${cmp}`);
  return { skipped: cmp };
}
