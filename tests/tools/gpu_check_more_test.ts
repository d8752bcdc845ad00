/**
 * `deno task gpu-check --stand-in`, second part: llama.cpp packing, a
 * container's release, a GPU in error, device ids, a quiet neighbour.
 */
import assert from "node:assert/strict";
import { rows, STAND_IN_PARTS, standInPart } from "../support/gpu_check_run.ts";

Deno.test("gpu-check --stand-in, second part: llama.cpp packing, a container's release, a GPU in error, device ids, a quiet neighbour", async () => {
  const run = await standInPart(STAND_IN_PARTS[1]);
  assert.deepEqual(
    Object.fromEntries(rows(run.report!)),
    {
      "llama-packing": "PASS",
      "container-release": "PASS",
      "gpu-error": "PASS",
      "device-ids": "PASS",
      "quiet-neighbour": "PASS",
    },
    run.report,
  );
});
