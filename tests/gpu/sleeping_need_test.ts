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
