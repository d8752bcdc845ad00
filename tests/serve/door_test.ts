/**
 * The `./serve` door: the launcher, its options and read-only views of its
 * engines, never the supervision insides (supervisor, GPU start gate, start
 * slot, run recorder) an embedder has no use for.
 */
import assert from "node:assert/strict";
import * as door from "../../src/serve.ts";

const SOURCE = await Deno.readTextFile(
  new URL("../../src/serve.ts", import.meta.url),
);

Deno.test("./serve exports these values and no supervisor or GPU start gate", () => {
  assert.deepEqual(Object.keys(door).sort(), [
    "EngineError",
    "EngineLog",
    "OpsStance",
    "Semioserve",
    "ServerProcess",
    "main",
  ]);
});

Deno.test("./serve names no supervision or gate type", () => {
  for (
    const inside of [
      "EngineRun",
      "EngineRunOptions",
      "GpuStartGate",
      "StartSlot",
      "StartRequest",
      "RunRecorder",
      "RunRecord",
      "RunWatcher",
      "GpuFacts",
      "ProcessFacts",
    ]
  ) {
    assert.doesNotMatch(SOURCE, new RegExp(`\\b${inside}\\b`), inside);
  }
  assert.match(SOURCE, /\bEngineView\b/);
});
