/**
 * `deno task gpu-check --stand-in`, third part: two vLLM cards that do not
 * fit together, switched by the launcher (issue 54).
 */
import assert from "node:assert/strict";
import { rows, STAND_IN_PARTS, standInPart } from "../support/gpu_check_run.ts";

Deno.test("gpu-check --stand-in, third part: two vLLM cards that do not fit together, the launcher switching between them", async () => {
  const run = await standInPart(STAND_IN_PARTS[2]);
  assert.deepEqual(
    Object.fromEntries(rows(run.report!)),
    { "vllm-switch": "PASS" },
    run.report,
  );
});
