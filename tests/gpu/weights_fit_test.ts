import assert from "node:assert/strict";
import { card } from "../support/gpu_cards.ts";
import { weightFitWarning } from "../../src/gpu/weights_fit.ts";
import { startWaits } from "../../src/gpu/placement.ts";
import type { GpuSnapshot } from "../../src/gpu/nvidia_smi.ts";

const GIB = 1024 ** 3;

function snapshot(totalMiB = 81920, memoryKnown = true): GpuSnapshot {
  return {
    devices: ["0", "1"].map((index) => ({
      index,
      uuid: `GPU-${index}`,
      totalMiB: memoryKnown ? totalMiB : NaN,
      usedMiB: memoryKnown ? 0 : NaN,
      memoryKnown,
    })),
    processes: [],
    at: 0,
  };
}

Deno.test("vLLM: the issue's example, the default 0.9, and what fits", () => {
  const qwen = card({ args: { "gpu-memory-utilization": 0.4 } });
  assert.equal(
    weightFitWarning({
      card: { ...qwen, name: "qwen3-32b" },
      devices: ["0"],
      weightBytes: 61 * GIB,
      snapshot: snapshot(),
    }),
    "qwen3-32b: weights 61.0 GiB exceed the 32.0 GiB it may use on GPU 0 (gpu-memory-utilization 0.4 × 80 GiB): vLLM will fail to allocate its KV cache",
  );
  const plain = card({});
  assert.match(
    weightFitWarning({
      card: plain,
      devices: ["0"],
      weightBytes: 70 * GIB,
      snapshot: snapshot(),
    })!,
    /take 97 % of the 72\.0 GiB it may use on GPU 0 \(gpu-memory-utilization 0\.9 × 80 GiB\)/,
  );
  assert.equal(
    weightFitWarning({
      card: plain,
      devices: ["0"],
      weightBytes: 16 * GIB,
      snapshot: snapshot(),
    }),
    undefined,
  );
});

Deno.test("SGLang only with mem-fraction-static; nothing without GPU facts, placement or known memory", () => {
  const sglang = card({
    engine: "sglang",
    args: { "mem-fraction-static": 0.5, "tp-size": 2 },
  });
  assert.equal(
    weightFitWarning({
      card: sglang,
      devices: ["0", "1"],
      weightBytes: 90 * GIB,
      snapshot: snapshot(),
    }),
    "m: weights 90.0 GiB exceed the 80.0 GiB it may use on GPUs 0,1 (mem-fraction-static 0.5 × 80 GiB × tp-size 2): SGLang will fail to allocate its KV cache",
  );
  const big = 500 * GIB;
  const none: Parameters<typeof weightFitWarning>[0][] = [
    { card: card({ engine: "sglang" }), devices: ["0"], snapshot: snapshot() },
    { card: card({}), devices: ["0"], snapshot: undefined },
    { card: card({}), devices: null, snapshot: snapshot() },
    { card: card({}), devices: ["MIG-1"], snapshot: snapshot() },
    { card: card({}), devices: ["0"], snapshot: snapshot(0, false) },
    {
      card: card({ engine: "llama.cpp" }),
      devices: ["0"],
      snapshot: snapshot(),
    },
  ].map((fit) => ({ ...fit, weightBytes: big }));
  for (const fit of none) {
    assert.equal(weightFitWarning(fit), undefined, JSON.stringify(fit.devices));
  }
});

Deno.test("start order: an engine waits for the earlier engines sharing one of its devices", () => {
  assert.deepEqual(
    [...startWaits([
      { name: "a", devices: ["0"] },
      { name: "b", devices: ["1"] },
      { name: "c", devices: ["0", "1"] },
      { name: "d", devices: [] },
      { name: "e", devices: null },
      { name: "f", devices: ["1"] },
    ])],
    [["a", []], ["b", []], ["c", ["a", "b"]], ["d", []], ["e", []], ["f", [
      "b",
      "c",
    ]]],
  );
});
