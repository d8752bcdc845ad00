/**
 * A memory round never hands a run a reading from before its sleep or wake
 * (found by the switch benchmark: a residue of 10240 MiB booked as the
 * engine's, "freed 0.0 MiB"; awake figures of 1024 MiB): once a run's state
 * changed since the round's last look, the round asks `nvidia-smi` afresh; a
 * run whose state changes while the query runs gets no reading that round.
 * One real process (this one) stands for the engine, an injected query for
 * the device.
 */
import assert from "node:assert/strict";
import {
  GpuLifecycle,
  type GpuMemoryEvent,
  type GpuRun,
} from "../../src/gpu/gpu_lifecycle.ts";
import { GpuMonitor, type GpuSnapshot } from "../../src/gpu/nvidia_smi.ts";
import { procStats } from "../../src/engines/proc.ts";
import { card } from "../support/gpu_cards.ts";

function world(plan?: GpuRun["plan"]) {
  let held = 10_240; // awake
  let during: (() => void) | undefined;
  const snapshot = (): GpuSnapshot => ({
    devices: [{
      index: "0",
      uuid: "GPU-aaaa",
      totalMiB: 24_576,
      memoryKnown: true,
      usedMiB: held,
    }],
    processes: [{ pid: Deno.pid, usedMiB: held, gpuUuid: "GPU-aaaa" }],
    at: Date.now(),
  });
  const monitor = new GpuMonitor({
    query: () => {
      during?.();
      return Promise.resolve({ ok: true, snapshot: snapshot() });
    },
  });
  const readings: (number | undefined)[] = [];
  const engine: GpuRun & { state: string } = {
    name: "b",
    state: "ready",
    gpus: ["0"],
    pgid: procStats([Deno.pid]).get(Deno.pid)!.pgid,
    gpuStartUsed: { "0": 0 },
    ...plan ? { plan } : {},
    send(event: GpuMemoryEvent) {
      readings.push(event.reading?.mib["0"]);
    },
  };
  // Rounds 10 s apart: a look younger than 5 s would be reused.
  const gpu = new GpuLifecycle({
    intervalMs: 10_000,
    releaseTimeoutMs: 1_000,
    runs: () => [engine],
    monitor,
  });
  return {
    gpu,
    engine,
    monitor,
    readings,
    hold: (mib: number) => held = mib,
    whileAsked: (f: (() => void) | undefined) => during = f,
  };
}

Deno.test("a run that slept since the last look is read afresh: its residue, never the awake figure the cached look holds", async () => {
  const w = world();
  await w.gpu.round();
  assert.deepEqual(w.readings, [10_240]);
  const asked = w.monitor.queries;
  // It sleeps, keeping 1024 MiB; the next round comes at once.
  w.engine.state = "sleeping";
  w.hold(1_024);
  await w.gpu.round();
  assert.equal(w.monitor.queries, asked + 1, "asked afresh");
  assert.deepEqual(w.readings, [10_240, 1_024]);
  // Nothing moved: the young look serves the next round.
  await w.gpu.round();
  assert.equal(w.monitor.queries, asked + 1);
  // And it wakes: read afresh again, never its residue as its awake figure.
  w.engine.state = "ready";
  w.hold(10_240);
  await w.gpu.round();
  assert.deepEqual(w.readings, [10_240, 1_024, 1_024, 10_240]);
  assert.deepEqual(w.gpu.awake(w.engine), { "0": 10_240 });
});

Deno.test("a run whose state changes while the query runs gets no reading that round, and a fresh one the next", async () => {
  const w = world();
  await w.gpu.round();
  w.engine.state = "sleeping";
  w.hold(1_024);
  // The query was asked asleep; the engine wakes before it answers.
  w.whileAsked(() => w.engine.state = "ready");
  await w.gpu.round();
  assert.deepEqual(w.readings, [10_240], "no reading from the other state");
  w.whileAsked(undefined);
  w.hold(10_240);
  await w.gpu.round();
  assert.deepEqual(w.readings, [10_240, 10_240]);
});

Deno.test("a vLLM the launcher sleeps holds its room while ready, even once its memory freed before its sleep's answer came, and gives it up only when marked asleep", async () => {
  const vllm = card({ engine: "vllm", gpu_memory: "10GiB", sleep_after: 60 });
  const placement = {
    gpus: ["0"],
    share: 0.4167,
    env: {},
    args: [],
    memoryNeed: { fraction: 0.4167, mib: 10_240, from: "gpu_memory" },
  };
  const w = world({ card: vllm, placement });
  await w.gpu.round(); // awake: 10240 MiB
  const snapshot = () => w.monitor.snapshot(0, w.monitor.mark());
  assert.equal(w.gpu.gate.kept("0", (await snapshot())!), 0);
  // Its /sleep freed the memory; the answer has not come: still ready.
  w.hold(1_024);
  assert.equal(w.gpu.gate.kept("0", (await snapshot())!), 9_216);
  assert.equal(w.gpu.free("0", (await snapshot())!), 24_576 - 10_240);
  // Marked asleep: room is made before its wake, nothing kept.
  w.engine.state = "sleeping";
  assert.equal(w.gpu.gate.kept("0", (await snapshot())!), 0);
  // Its wake under way keeps the room again.
  w.engine.state = "waking";
  assert.equal(w.gpu.gate.kept("0", (await snapshot())!), 9_216);
});
