/**
 * The GPU lifecycle keeps a sleeping engine's memory (issue 36): its reading
 * while awake, less what it holds asleep, counts as used in the start gate's
 * rule 4 on its devices. One real process (this one) stands for the engine,
 * an injected `nvidia-smi` query for the device.
 */
import assert from "node:assert/strict";
import { GpuLifecycle, type GpuRun } from "../../src/gpu/gpu_lifecycle.ts";
import { GpuMonitor, type GpuSnapshot } from "../../src/gpu/nvidia_smi.ts";
import { procStats } from "../../src/engines/proc.ts";
import { card } from "../support/gpu_cards.ts";

Deno.test("a start on a sleeping engine's device counts what it takes back when it wakes", async () => {
  let held = 30_000; // this process, as the engine, on device 0
  const snapshot = (): GpuSnapshot => ({
    devices: [{
      index: "0",
      uuid: "GPU-aaaa",
      totalMiB: 81_920,
      memoryKnown: true,
      usedMiB: held,
    }],
    processes: [{ pid: Deno.pid, usedMiB: held, gpuUuid: "GPU-aaaa" }],
    at: Date.now(),
  });
  const monitor = new GpuMonitor({
    query: () => Promise.resolve({ ok: true, snapshot: snapshot() }),
  });
  const engine: GpuRun & { state: string } = {
    name: "dozy",
    state: "ready",
    gpus: ["0"],
    pgid: procStats([Deno.pid]).get(Deno.pid)!.pgid,
    gpuStartUsed: { "0": 0 },
    send() {},
  };
  const gpu = new GpuLifecycle({
    intervalMs: 10,
    releaseTimeoutMs: 1_000,
    runs: () => [engine],
    monitor,
  });
  const need = { fraction: 0.7, from: "gpu-memory-utilization 0.7" };
  async function look(): Promise<string | undefined> {
    gpu.gate.changed(["0"]);
    const abort = new AbortController();
    const ticket = gpu.gate.admit({
      name: "other",
      devices: ["0"],
      memory: need,
      signal: abort.signal,
    });
    const step = await ticket.next();
    if (step.done) {
      step.value?.release();
      return undefined;
    }
    abort.abort();
    await ticket.next().catch(() => {});
    return step.value.detail;
  }
  const round = async () => {
    await new Promise((r) => setTimeout(r, 20)); // past the snapshot's age
    await gpu.round();
  };
  const holder = () =>
    `held by pid ${Deno.pid} (${
      procStats([Deno.pid]).get(Deno.pid)!.comm
    }, ${held} MiB), engine dozy`;
  await round(); // awake: 30000 MiB
  assert.equal(
    await look(),
    `51920 MiB free, needs 57344 MiB (gpu-memory-utilization 0.7); ${holder()}`,
  );
  engine.state = "sleeping";
  held = 1_400; // vLLM's level 1 sleep keeps about 1.4 GiB
  await round();
  // 80520 MiB free on the device, but not for long: held as while awake.
  assert.equal(
    await look(),
    `51920 MiB free (28600 MiB kept for sleeping engines), needs 57344 MiB (gpu-memory-utilization 0.7); ${holder()}`,
  );
  held = 20_000; // stopped, or woken: nothing is kept once its memory shows
  engine.state = "ready";
  await round();
  assert.equal(await look(), undefined, "61920 MiB free ≥ 57344");
});

// Issue 53 item 4: a sleeper that wakes itself (llama.cpp) is held to its
// planned need (its budget or measured footprint) whatever the rounds saw.
async function selfWaking(state: string, held: number, then = held) {
  const snapshot = (): GpuSnapshot => ({
    devices: [{
      index: "0",
      uuid: "GPU-aaaa",
      totalMiB: 81_920,
      memoryKnown: true,
      usedMiB: held,
    }],
    processes: [{ pid: Deno.pid, usedMiB: held, gpuUuid: "GPU-aaaa" }],
    at: Date.now(),
  });
  const monitor = new GpuMonitor({
    query: () => Promise.resolve({ ok: true, snapshot: snapshot() }),
  });
  const need = { fraction: 30_000 / 81_920, mib: 30_000, from: "measured" };
  const engine: GpuRun = {
    name: "dozy",
    state,
    gpus: ["0"],
    pgid: procStats([Deno.pid]).get(Deno.pid)!.pgid,
    gpuStartUsed: { "0": 0 },
    plan: {
      card: card({ engine: "llama.cpp", sleep_after: 2 }),
      placement: {
        gpus: ["0"],
        share: need.fraction,
        memoryNeed: need,
        env: {},
        args: [],
      },
    },
    send() {},
  };
  const gpu = new GpuLifecycle({
    intervalMs: 10,
    releaseTimeoutMs: 1_000,
    runs: () => [engine],
    monitor,
  });
  await gpu.round();
  held = then; // what the gate's own look sees, after the round's
  await new Promise((r) => setTimeout(r, 20)); // past the snapshot's age
  gpu.gate.changed(["0"]);
  const abort = new AbortController();
  const ticket = gpu.gate.admit({
    name: "late",
    devices: ["0"],
    memory: { fraction: 0.7, mib: 60_000, from: "gpu_memory 60000 MiB" },
    signal: abort.signal,
  });
  const step = await ticket.next();
  abort.abort();
  await ticket.next().catch(() => {});
  return step.done ? undefined : step.value.detail;
}

Deno.test("a self-waking sleeper that fell asleep before any round saw it awake is held at its planned need: a start beside it waits", async () => {
  // Asleep from the first round on (sleep_after shorter than the interval): 600 MiB listed.
  assert.match(
    (await selfWaking("sleeping", 600)) ?? "started",
    /^51920 MiB free \(29400 MiB kept for sleeping engines\), needs 60000 MiB/,
  );
});

Deno.test("midway through its wake (ready, 10000 of its 30000 MiB back) a self-waking sleeper still holds the rest: a start beside it waits", async () => {
  assert.match(
    (await selfWaking("ready", 10_000)) ?? "started",
    /^51920 MiB free \(20000 MiB kept for sleeping engines\), needs 60000 MiB/,
  );
});

Deno.test("a self-waking engine that fell asleep after the last round (its line not yet heard) is held by the gate's own look, not the round's", async () => {
  // The round saw it awake at 30000 MiB; the gate's fresher look lists 600.
  assert.match(
    (await selfWaking("ready", 30_000, 600)) ?? "started",
    /^51920 MiB free \(29400 MiB kept for sleeping engines\), needs 60000 MiB/,
  );
});
