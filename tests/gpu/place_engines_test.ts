/** The launcher's placement composition (src/gpu/place_engines.ts) on an explicit pool. */
import assert from "node:assert/strict";
import { placeEngines } from "../../src/gpu/place_engines.ts";
import { catalogue } from "../support/gpu_cards.ts";

Deno.test("replan keeps unchanged engines' devices and places the changed ones in what is free", async () => {
  const before = catalogue({ a: { gpus: 1 }, b: { gpus: 1 }, c: { gpus: 1 } });
  const placement = await placeEngines([...before], "0-3");
  assert.deepEqual(placement.devices(before.get("b")), ["1"]);
  const after = catalogue({ a: { gpus: 1 }, b: { gpus: 2 }, c: { gpus: 1 } });
  const next = placement.replan([...after], new Set(["b"]));
  assert.deepEqual(next.devices(after.get("a")), ["0"]);
  assert.deepEqual(next.devices(after.get("c")), ["2"]);
  // Free: 1 (its own) and 3; no adjacent run of two, so the lowest free ones.
  assert.deepEqual(next.devices(after.get("b")), ["1", "3"]);
  assert.deepEqual(next.env(after.get("b")).CUDA_VISIBLE_DEVICES, "1,3");
  assert.deepEqual(
    placement.devices(before.get("b")),
    ["1"],
    "the old one stays",
  );
  const tooBig = catalogue({ a: { gpus: 1 }, b: { gpus: 3 }, c: { gpus: 1 } });
  assert.throws(
    () => placement.replan([...tooBig], new Set(["b"])),
    /Cannot place b: needs 3 GPUs, 2 free in pool 0-3/,
  );
});
