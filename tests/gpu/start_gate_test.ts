/** The GPU start gate (src/gpu/start_gate.ts) with injected GPU facts: no processes. */
import assert from "node:assert/strict";
import {
  type GpuFacts,
  GpuStartGate,
  type ProcessFacts,
  type StartRequest,
  type StartSlot,
  type WaitingFor,
} from "../../src/gpu/start_gate.ts";
import {
  GpuMonitor,
  type GpuQuery,
  type GpuSnapshot,
} from "../../src/gpu/nvidia_smi.ts";
import { captureLog, withinGuard } from "../support/helpers.ts";
import { ManualClock, settle } from "../support/manual_clock.ts";

const INTERVAL_MS = 20;

/** The gate's clock: each gate() a new one, moved by tick() and until(). */
let clock = new ManualClock();

/** Two 80 GiB devices; processes as given. */
function snapshot(
  processes: { pid: number; mib: number; gpu?: string }[] = [],
): GpuSnapshot {
  const uuids: Record<string, string> = { "0": "GPU-aaaa", "1": "GPU-bbbb" };
  const devices = ["0", "1"].map((index) => ({
    index,
    uuid: uuids[index]!,
    totalMiB: 81920,
    memoryKnown: true,
    usedMiB: processes
      .filter((p) => (p.gpu ?? "0") === index)
      .reduce((sum, p) => sum + p.mib, 0),
  }));
  return {
    devices,
    processes: processes.map((p) => ({
      pid: p.pid,
      usedMiB: p.mib,
      gpuUuid: uuids[p.gpu ?? "0"]!,
    })),
    at: Date.now(),
  };
}

interface World {
  snapshot: GpuSnapshot | undefined;
  live: Map<number, ProcessFacts>;
  ours: Map<number, string>;
  queries: number;
}

/** What a test may change of gate(): GPU facts other than the world's, the timings. */
interface GateOptions {
  /** The GPU facts; by default the world's snapshot, counted in `world.queries`. */
  facts?: GpuFacts;
  intervalMs?: number;
  releaseTimeoutMs?: number;
  /** MiB sleeping engines take back per device entry. */
  asleep?: (entry: string) => number;
}

/** A gate over `world`'s processes and groups (and its snapshot unless `facts` is given). */
function gate(world: World, options: GateOptions = {}): GpuStartGate {
  let marks = 0;
  clock = new ManualClock();
  return new GpuStartGate({
    clock,
    facts: options.facts ?? {
      snapshot: () => {
        world.queries++;
        return Promise.resolve(world.snapshot);
      },
      mark: () => ++marks,
    },
    intervalMs: options.intervalMs ?? INTERVAL_MS,
    releaseTimeoutMs: options.releaseTimeoutMs ?? 10_000,
    processes: (pids) =>
      new Map(
        pids.flatMap((pid) => {
          const facts = world.live.get(pid);
          return facts ? [[pid, facts] as const] : [];
        }),
      ),
    ownGroups: () => world.ours,
    ...options.asleep ? { asleep: options.asleep } : {},
  });
}

function world(partial: Partial<World> = {}): World {
  return {
    snapshot: snapshot(),
    live: new Map(),
    ours: new Map(),
    queries: 0,
    ...partial,
  };
}

/** Admits a request and tracks whether (and when) it was granted. */
function ask(g: GpuStartGate, request: StartRequest) {
  const waits: WaitingFor[] = [];
  const state = {
    slot: undefined as StartSlot | undefined,
    error: undefined as unknown,
    waits,
  };
  const done = (async () => {
    const ticket = g.admit(request);
    for (let step = await ticket.next();; step = await ticket.next()) {
      if (step.done) return state.slot = step.value;
      waits.push(step.value);
    }
  })().catch((error) => state.error = error);
  return Object.assign(state, { done });
}

/** Ends a granted request's load (the narrowing-free way: the caller asserted before). */
function release(state: { slot: StartSlot | undefined }): void {
  assert.ok(state.slot, "release of a request that was not granted");
  state.slot.release();
}

/** Lets the gate's answers come, then moves its clock by `ms`, each timer due fired in order. */
async function tick(ms = INTERVAL_MS * 3): Promise<void> {
  await settle();
  await clock.advance(ms);
  await settle();
}

/** Moves the clock an interval at a time until `state` is granted, or failed. */
async function until(state: ReturnType<typeof ask>): Promise<void> {
  for (let n = 0; state.slot === undefined && !state.error; n++) {
    if (n > 1_000) throw new Error("never granted");
    await tick(INTERVAL_MS);
  }
  await state.done;
}

Deno.test("three shares on one device start one after another, in request order", async () => {
  const g = gate(world());
  const a = ask(g, { name: "a", devices: ["0"] });
  const b = ask(g, { name: "b", devices: ["0"] });
  const c = ask(g, { name: "c", devices: ["0"] });
  await tick();
  assert.ok(a.slot, "the first request starts at once");
  assert.equal(b.slot, undefined);
  assert.equal(c.slot, undefined);
  assert.equal(b.waits.at(-1)?.reason, "gpu-busy-loading");
  assert.match(b.waits.at(-1)!.detail, /engine a is loading there/);
  assert.match(c.waits.at(-1)!.detail, /engine (a|b)/);
  release(a);
  await tick();
  assert.ok(b.slot, "b starts once a's load is over");
  assert.equal(c.slot, undefined, "c still waits behind b");
  release(a); // a second release changes nothing
  await tick();
  assert.equal(c.slot, undefined);
  release(b);
  await until(c);
  assert.ok(c.slot);
  release(c);
});

Deno.test("engines on different devices, or on none, start at once", async () => {
  const g = gate(world());
  const a = ask(g, { name: "a", devices: ["0"] });
  const b = ask(g, { name: "b", devices: ["1"] });
  const none = ask(g, { name: "cpu", devices: [] });
  await Promise.all([until(a), until(b), until(none)]);
  assert.ok(a.slot && b.slot && none.slot);
  const spanning = ask(g, { name: "tp2", devices: ["0", "1"] });
  await tick();
  assert.equal(spanning.slot, undefined, "a tp-2 engine waits for both loads");
  release(a);
  await tick();
  assert.equal(spanning.slot, undefined);
  release(b);
  await until(spanning);
  assert.ok(spanning.slot);
  release(spanning);
});

Deno.test("an aborted wait leaves the line and lets the next one start", async () => {
  const g = gate(world());
  const a = ask(g, { name: "a", devices: ["0"] });
  await until(a);
  const controller = new AbortController();
  const b = ask(g, { name: "b", devices: ["0"], signal: controller.signal });
  const c = ask(g, { name: "c", devices: ["0"] });
  await tick();
  controller.abort(new Error("stopping"));
  await until(b);
  assert.ok(b.error instanceof Error);
  release(a);
  await until(c);
  assert.ok(c.slot, "c is not stuck behind the aborted b");
  release(c);
});

Deno.test("a restart waits until the dead run's pids, seen while it lived, leave nvidia-smi's list", async () => {
  const w = world({ snapshot: snapshot([{ pid: 4_000_001, mib: 30000 }]) });
  const g = gate(w);
  const restart = ask(g, {
    name: "a",
    devices: ["0"],
    released: { devices: { "0": 0 }, pids: [4_000_001], byPid: true },
  });
  await tick();
  assert.equal(restart.slot, undefined);
  assert.equal(restart.waits.at(-1)?.reason, "gpu-memory-release");
  assert.match(
    restart.waits.at(-1)!.detail,
    /pid 4000001 \(30000 MiB\) still listed/,
  );
  w.snapshot = snapshot();
  const asked = w.queries;
  await until(restart);
  assert.ok(restart.slot);
  assert.equal(w.queries, asked + 1, "one reading without its pids will do");
  release(restart);
});

Deno.test("in a container (listed pids match nothing) a restart waits for the device's used memory to fall by what the dead run held, in two readings in a row, not for the release timeout", async () => {
  // The dead run held 30000 MiB on a device at 31000: its host pid 900001
  // matches nothing here; the neighbour (1000 MiB) restarts meanwhile with a
  // new host pid, 900003, as invisible as the old one.
  const w = world({
    snapshot: snapshot([{ pid: 900_001, mib: 30000 }, {
      pid: 900_002,
      mib: 1000,
    }]),
  });
  const g = gate(w, { releaseTimeoutMs: 60_000 });
  const restart = ask(g, {
    name: "a",
    devices: ["0"],
    released: { devices: { "0": 31000 - 30000 }, pids: [4242] },
  });
  await tick();
  assert.equal(restart.slot, undefined);
  const held = restart.waits.at(-1)!;
  assert.equal(held.reason, "gpu-memory-release");
  assert.match(held.detail, /GPU 0 uses 31000 MiB, 1000 MiB once/);
  assert.match(held.detail, /by the device's used memory/);
  w.snapshot = snapshot([{ pid: 900_003, mib: 1200 }]);
  const asked = w.queries;
  // Well before the release timeout (60 s): the guard fails a wait for it.
  await withinGuard(until(restart), "the restart's wait");
  assert.ok(restart.slot);
  assert.ok(w.queries >= asked + 2, "two readings in a row");
  release(restart);
});

Deno.test("past --gpu-release-timeout the restart proceeds with one warning naming pids and MiB", async () => {
  const w = world({ snapshot: snapshot([{ pid: 4_000_003, mib: 1234 }]) });
  const g = gate(w, { releaseTimeoutMs: 100 });
  const { lines } = await captureLog(async () => {
    const restart = ask(g, {
      name: "a",
      devices: ["0"],
      released: { devices: { "0": 0 }, pids: [4_000_003] },
    });
    await until(restart);
    assert.ok(restart.slot);
    release(restart);
  });
  const warnings = lines.filter((l) => /starting anyway/.test(l));
  assert.equal(warnings.length, 1, lines.join("\n"));
  assert.match(
    warnings[0]!,
    /engine a: GPU 0: pid 4000003 \(1234 MiB\) still listed/,
  );
});

Deno.test("a device whose memory reads as an error holds the start (gpu-error, nvidia-smi's words) until it reports memory again", async () => {
  const bad = snapshot();
  const w = world({
    snapshot: {
      ...bad,
      devices: bad.devices.map((d) =>
        d.index === "1"
          ? {
            ...d,
            memoryKnown: false,
            totalMiB: NaN,
            usedMiB: NaN,
            error: "[GPU requires reset]",
          }
          : d
      ),
    },
  });
  const g = gate(w);
  const start = ask(g, { name: "a", devices: ["1"] });
  await tick();
  assert.equal(start.slot, undefined);
  assert.deepEqual(start.waits.at(-1), {
    reason: "gpu-error",
    devices: ["1"],
    detail: "GPU 1: [GPU requires reset]",
  });
  w.snapshot = snapshot();
  await until(start);
  assert.ok(start.slot);
  release(start);
});

Deno.test("a neighbour is not stopped of our own accord while an engine loads on its device: quiet() waits, with one line, until the load ends", async () => {
  const g = gate(world());
  const loading = ask(g, { name: "a", devices: ["0"] });
  await until(loading);
  assert.equal(g.loadingOn(["0"], "b"), "a");
  assert.equal(g.loadingOn(["0"], "a"), undefined, "not its own load");
  assert.equal(g.loadingOn(["1"], "b"), undefined);
  let quiet = false;
  const { lines } = await captureLog(async () => {
    const waiting = g.quiet(["0"], "b", "the reload's restart of engine b")
      .then(() => quiet = true);
    await tick();
    assert.equal(quiet, false);
    release(loading);
    await waiting;
  });
  assert.ok(quiet);
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.match(
    lines[0]!,
    /the reload's restart of engine b waits until engine a on GPU 0 has started/,
  );
});

Deno.test("a first start is not held by gone pids (rule 2 is for restarts)", async () => {
  const w = world({ snapshot: snapshot([{ pid: 4_000_004, mib: 1000 }]) });
  const first = ask(gate(w), { name: "a", devices: ["0"] });
  await until(first);
  assert.ok(first.slot);
  release(first);
});

Deno.test("a start waits while a foreign process holds the memory, naming it, and starts once it is freed", async () => {
  const w = world({
    snapshot: snapshot([{ pid: 4242, mib: 60000 }, { pid: 77, mib: 1000 }]),
    live: new Map([[4242, { pgid: 4242, comm: "python3" }], [77, {
      pgid: 70,
      comm: "vllm",
    }]]),
    ours: new Map([[70, "bge-m3"]]),
  });
  const g = gate(w);
  const start = ask(g, {
    name: "qwen3-8b",
    devices: ["0"],
    memory: { fraction: 0.9, from: "gpu-memory-utilization 0.9" },
  });
  await tick();
  assert.equal(start.slot, undefined);
  const held = start.waits.at(-1)!;
  assert.equal(held.reason, "gpu-memory-free");
  assert.deepEqual(held.devices, ["0"]);
  assert.equal(
    held.detail,
    "20920 MiB free, needs 73728 MiB (gpu-memory-utilization 0.9); held by pid 4242 (python3, 60000 MiB), not an engine of this launcher; pid 77 (vllm, 1000 MiB), engine bge-m3",
  );
  const queriesWhileHeld = w.queries;
  assert.ok(
    queriesWhileHeld <= 6,
    `${queriesWhileHeld} queries in ~3 intervals`,
  );
  w.snapshot = snapshot([{ pid: 77, mib: 1000 }]);
  await until(start);
  assert.ok(start.slot);
  release(start);
});

Deno.test("without GPU facts, or on a MIG device, memory rules are skipped and rule 1 still holds", async () => {
  const blind = gate(world({ snapshot: undefined }));
  const a = ask(blind, {
    name: "a",
    devices: ["0"],
    memory: { fraction: 0.9, from: "x" },
    released: { devices: { "0": 0 }, pids: [1] },
  });
  await until(a);
  assert.ok(a.slot, "no facts: rules 2 and 3 skipped");
  const b = ask(blind, { name: "b", devices: ["0"] });
  await tick();
  assert.equal(b.slot, undefined, "rule 1 holds without facts");
  release(a);
  await until(b);
  release(b);

  const full = world({ snapshot: snapshot([{ pid: 4242, mib: 80000 }]) });
  const mig = ask(gate(full), {
    name: "m",
    devices: ["MIG-1234"],
    memory: { fraction: 0.9, from: "x" },
  });
  await until(mig);
  assert.ok(mig.slot, "a MIG device's free memory is not checked");
  release(mig);
});

// --- facts newer than the last event (issue 24) -----------------------------------

/**
 * The gate over a real GpuMonitor whose query reads `machine` (the processes
 * listed now); the monitor counts its queries; the gate's interval is the
 * launcher's default.
 */
function monitored(machine: { listed: { pid: number; mib: number }[] }) {
  const monitor = new GpuMonitor({
    now: () => clock.now(),
    query(): Promise<GpuQuery> {
      return Promise.resolve({ ok: true, snapshot: snapshot(machine.listed) });
    },
  });
  const w = world();
  const g = gate(w, {
    facts: monitor,
    intervalMs: 10_000,
    releaseTimeoutMs: 60_000,
  });
  return { monitor, gate: g, live: w.live };
}

Deno.test("a restart after a crash during load uses facts asked after the exit, and waits for the device to come back to its level before the spawn", async () => {
  const machine = { listed: [] as { pid: number; mib: number }[] };
  const m = monitored(machine);
  m.gate.changed(["0"]);
  const first = ask(m.gate, { name: "a", devices: ["0"] });
  await until(first);
  assert.deepEqual(first.slot?.usedMiB, { "0": 0 }, "read before the spawn");
  release(first);
  // It allocates, then fails during its load: gone, still listed by the
  // driver under a pid that matches nothing here (a container).
  machine.listed = [{ pid: 900_001, mib: 30000 }];
  m.gate.changed(["0"]);
  const restart = ask(m.gate, {
    name: "a",
    devices: ["0"],
    memory: { fraction: 0.4, from: "gpu-memory-utilization 0.4" },
    released: { devices: first.slot!.usedMiB, pids: [5_000_001] },
  });
  await tick();
  assert.equal(restart.slot, undefined, "the restart is held");
  assert.equal(restart.waits.at(-1)?.reason, "gpu-memory-release");
  assert.equal(m.monitor.queries, 2, "one query, asked after the exit");
  machine.listed = [];
  await until(restart);
  assert.ok(restart.slot);
  release(restart);
});

Deno.test("an event on one device leaves another's facts alone; with nothing happening, snapshots are shared", async () => {
  const machine = { listed: [] as { pid: number; mib: number }[] };
  const m = monitored(machine);
  const need = { fraction: 0.4, from: "x" };
  const a = ask(m.gate, { name: "a", devices: ["0"], memory: need });
  await until(a);
  release(a);
  const b = ask(m.gate, { name: "b", devices: ["1"], memory: need });
  await until(b);
  assert.equal(
    m.monitor.queries,
    1,
    "one snapshot for two starts: nothing happened",
  );
  release(b);
  m.gate.changed(["0"]);
  const c = ask(m.gate, { name: "c", devices: ["1"], memory: need });
  await until(c);
  assert.equal(
    m.monitor.queries,
    1,
    "an event on GPU 0 does not concern GPU 1",
  );
  const d = ask(m.gate, { name: "d", devices: ["0"], memory: need });
  await until(d);
  assert.equal(m.monitor.queries, 2, "but a start on GPU 0 asks anew");
  release(c);
  release(d);
});

Deno.test("rule 4 counts what a sleeping engine on the device takes back when it wakes", async () => {
  const w = world({ snapshot: snapshot([{ pid: 77, mib: 2000 }]) });
  let kept = 30000;
  const g = gate(w, { asleep: (entry) => entry === "0" ? kept : 0 });
  const start = ask(g, {
    name: "qwen3-8b",
    devices: ["0"],
    memory: { fraction: 0.7, from: "gpu-memory-utilization 0.7" },
  });
  await tick();
  assert.equal(start.slot, undefined);
  assert.match(
    start.waits.at(-1)!.detail,
    /^49920 MiB free \(30000 MiB kept for sleeping engines\), needs 57344 MiB/,
  );
  const other = ask(g, {
    name: "bge-m3",
    devices: ["1"],
    memory: { fraction: 0.6, from: "gpu-memory-utilization 0.6" },
  });
  await until(other);
  assert.ok(other.slot, "another device's start is not held");
  release(other);
  kept = 0; // it was stopped, or woke and its memory shows as used
  await until(start);
  assert.ok(start.slot);
  release(start);
});

Deno.test("a stop that comes while the gate reads the GPUs ends the wait at once, not an interval later", async () => {
  const w = world({ snapshot: snapshot([{ pid: 4242, mib: 60000 }]) });
  let answer: (value: GpuSnapshot | undefined) => void = () => {};
  let marks = 0;
  const g = gate(w, {
    // A slow nvidia-smi: the look answers only when the test says so.
    facts: {
      snapshot: () => new Promise((resolve) => answer = resolve),
      mark: () => ++marks,
    },
    intervalMs: 60_000,
  });
  const stop = new AbortController();
  const start = ask(g, {
    name: "qwen3-8b",
    devices: ["0"],
    memory: { fraction: 0.9, from: "gpu-memory-utilization 0.9" },
    signal: stop.signal,
  });
  await tick();
  stop.abort(); // while the look is under way
  answer(w.snapshot); // not enough free memory: a wait of one interval (60 s)
  await withinGuard(until(start), "the stopped wait");
  assert.ok(start.error, "the wait ended by the stop");
  assert.equal(start.slot, undefined);
});

Deno.test("a measured need (or a budget) is waited for instead of share × total: it starts where the share would not, and waits where the footprint does not fit", async () => {
  const w = world({ snapshot: snapshot([{ pid: 4242, mib: 60000 }]) });
  const g = gate(w);
  // 21920 MiB free: a 0.9 share (73728 MiB) would wait; 20000 MiB measured starts.
  const measured = ask(g, {
    name: "small",
    devices: ["0"],
    memory: {
      fraction: 0.9,
      mib: 20000,
      from: "measured 20000 MiB on NVIDIA H100 80GB HBM3",
    },
  });
  await until(measured);
  assert.ok(measured.slot);
  assert.deepEqual(measured.waits, []);
  release(measured);
  const big = ask(g, {
    name: "big",
    devices: ["0"],
    memory: { fraction: 0.1, mib: 30000, from: "gpu_memory 30000 MiB" },
  });
  await tick();
  assert.equal(big.slot, undefined);
  assert.equal(
    big.waits.at(-1)!.detail,
    "21920 MiB free, needs 30000 MiB (gpu_memory 30000 MiB); held by pid 4242 (60000 MiB), gone or not visible here",
  );
  w.snapshot = snapshot([{ pid: 4242, mib: 50000 }]);
  await until(big);
  assert.ok(big.slot);
  release(big);
});
