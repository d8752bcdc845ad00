/**
 * The one-engine phase's rows and targets: start, idle memory and `/models`
 * of this tree ÷ the tree before the one-engine work, beside the A/A control.
 *
 * @module
 */
import { BEFORE_PIPELINE, type PipelineResults } from "../phases/pipeline.ts";
import { MANY, PLAN } from "../plan.ts";
import type { Row, Verdict } from "../report/table.ts";
import { comparisonRows, KINDS, noiseVerdict, WHAT } from "./tree_compare.ts";

/** The method, for the report's Method paragraph. */
export const PIPELINE_METHOD = [
  `One engine: ${PLAN.pipelineRounds} rotating rounds of three ${MANY}-engine launchers with no GPU pool`,
  `(\`--gpus none\`, no \`nvidia-smi\` on PATH): this tree, the tree before the one-engine work (commit`,
  `${BEFORE_PIPELINE}, exported by \`git archive\` and run with this tree's deno.json) and this tree again (the A/A`,
  `control), with stand-in engines, then with sleep-like ones; RSS is the launcher's VmRSS (engines excluded)`,
  `once every engine is healthy, or right after "listening on" with sleep-like engines; /models is the median of 20 sequential asks once every stand-in engine is healthy.`,
].join(" ");

/** Every row of the phase. */
export function pipelineRows(r: PipelineResults): Row[] {
  return "skipped" in r
    ? []
    : comparisonRows(r, "one engine", "before the one engine");
}

/** This tree starts no slower and sits no heavier than the tree before, beyond the A/A noise. */
export function pipelineTargets(r: PipelineResults): Verdict[] {
  if ("skipped" in r) return [];
  return KINDS.flatMap((kind) =>
    kind.keys.map((key) =>
      noiseVerdict(
        r[kind.arms],
        key,
        `the one engine costs nothing: ${kind.engines}, ${
          WHAT[key]
        }, this tree ÷ ${r.commit} no more than the A/A noise above 1`,
        "no-worse",
      )
    )
  );
}

/** Why the rows are missing, when they are. */
export function pipelineNotes(r: PipelineResults): string[] {
  return "skipped" in r
    ? [
      `- One-engine rows skipped: the tree before it (${BEFORE_PIPELINE}) is not available: ${r.skipped}.`,
    ]
    : [];
}
