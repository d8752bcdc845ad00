/**
 * The one-pipeline phase (issue 28): does the launcher start as fast and sit
 * as light as it did before its start became a plan and its application?
 * This tree against the tree before that work (commit
 * {@linkcode BEFORE_PIPELINE}) and against itself (the A/A control), 32
 * engines, no pool: spawn → "listening on", → every engine healthy, the
 * launcher's CPU and its idle RSS.
 *
 * @module
 */
import { compareTrees, type TreeComparison } from "./tree_compare.ts";
import { type Bench, PLAN, progress } from "../plan.ts";

/** The last commit before the one-pipeline work (issue 28). */
export const BEFORE_PIPELINE = "95300f8";

/** What the phase measured, or why the earlier tree was not available. */
export type PipelineResults = TreeComparison | { skipped: string };

/** The rotating rounds of this tree, the tree before and this tree again. */
export async function pipelinePhase(bench: Bench): Promise<PipelineResults> {
  const cmp = await compareTrees(
    bench,
    BEFORE_PIPELINE,
    "before the one pipeline",
    PLAN.pipelineRounds,
  );
  if (typeof cmp !== "string") return cmp;
  progress(`one-pipeline rows skipped: ${cmp}`);
  return { skipped: cmp };
}
