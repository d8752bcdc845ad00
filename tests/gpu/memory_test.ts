/** What free memory a card's engine demands (gpuMemoryNeed) and what a run holds (runMemory). */
import assert from "node:assert/strict";
import { gpuMemoryNeed } from "../../src/gpu/need.ts";
import {
  chargedLoad,
  releasedBy,
  runMemory,
} from "../../src/gpu/gpu_lifecycle.ts";
import { Registry } from "../../src/catalogue.ts";

function card(engine: string, args: string) {
  return Registry.parse(
    `models:\n  m:\n    verb: chat\n    hub: a/b\n    engine: ${engine}\n    args: ${args}\n`,
  ).get("m");
}

Deno.test("vLLM needs gpu-memory-utilization × total free (0.9 by default); SGLang its mem-fraction-static; others nothing", () => {
  assert.deepEqual(gpuMemoryNeed(card("vllm", "{}")), {
    fraction: 0.9,
    from: "gpu-memory-utilization 0.9 (vLLM's default)",
  });
  assert.deepEqual(
    gpuMemoryNeed(card("vllm", "{ gpu-memory-utilization: 0.3 }")),
    {
      fraction: 0.3,
      from: "gpu-memory-utilization 0.3",
    },
  );
  assert.deepEqual(
    gpuMemoryNeed(card("vllm", "[--gpu_memory_utilization=0.5]"))?.fraction,
    0.5,
  );
  assert.deepEqual(
    gpuMemoryNeed(card("sglang", "{ mem-fraction-static: 0.8 }")),
    {
      fraction: 0.8,
      from: "mem-fraction-static 0.8",
    },
  );
  assert.equal(gpuMemoryNeed(card("sglang", "{}")), undefined);
  assert.equal(gpuMemoryNeed(card("llama.cpp", "{}")), undefined);
});

Deno.test("a run's memory is its process group's listed memory, per device, or where no listed pid is its own (a container), the device's change across its start", () => {
  const snapshot = {
    devices: [
      {
        index: "0",
        uuid: "GPU-a",
        totalMiB: 1000,
        usedMiB: 900,
        memoryKnown: true,
      },
      {
        index: "1",
        uuid: "GPU-b",
        totalMiB: 1000,
        usedMiB: 100,
        memoryKnown: true,
      },
    ],
    processes: [
      { pid: 10, usedMiB: 300, gpuUuid: "GPU-a" }, // the engine
      { pid: 11, usedMiB: 200, gpuUuid: "GPU-a" }, // its worker, same group
      { pid: 12, usedMiB: 100, gpuUuid: "GPU-b" }, // its worker on the other device
      { pid: 20, usedMiB: 400, gpuUuid: "GPU-a" }, // someone else
    ],
    at: 0,
  };
  const groups = new Map([[10, 10], [11, 10], [12, 10], [20, 20]]);
  assert.deepEqual(runMemory(snapshot, ["0", "GPU-b"], 10, groups, {}), {
    mib: { "0": 500, "GPU-b": 100 },
    by: "pid",
    pids: [10, 11, 12],
    usedMiB: { "0": 900, "GPU-b": 100 },
  });
  // Group 30's pids are the host's: nothing listed matches it.
  assert.deepEqual(
    runMemory(snapshot, ["0", "MIG-x"], 30, groups, { "0": 250 }),
    { mib: { "0": 650 }, by: "device", pids: [], usedMiB: { "0": 900 } },
  );
});

Deno.test("by device, a run that served is charged its load's change, not a later neighbour's", () => {
  const reading = {
    mib: { "0": 40_000 },
    by: "device" as const,
    pids: [],
    usedMiB: { "0": 40_000 },
  };
  const facts = { since: 0, ms: {}, startUsed: { "0": 0 } };
  assert.equal(chargedLoad(reading, facts), reading, "loading: live change");
  const charged = chargedLoad(reading, {
    ...facts,
    pgid: 7,
    loadEnd: { pgid: 7, used: { "0": 10_000 } },
  });
  assert.deepEqual(charged?.mib, { "0": 10_000 });
  assert.deepEqual(charged?.usedMiB, { "0": 40_000 });
  // What its restart waits for: the device back to 30,000 MiB, the neighbour's.
  assert.deepEqual(
    releasedBy({ ...facts, settled: charged }).devices,
    { "0": 30_000 },
  );
  const byPid = { ...reading, by: "pid" as const };
  assert.equal(
    chargedLoad(byPid, { ...facts, pgid: 7, loadEnd: { pgid: 7, used: {} } }),
    byPid,
  );
  // A later run of the engine is not charged what the last one took.
  const next = { ...facts, pgid: 8, loadEnd: { pgid: 7, used: { "0": 1 } } };
  assert.equal(chargedLoad(reading, next), reading);
});
