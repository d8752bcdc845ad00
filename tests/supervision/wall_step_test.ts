/**
 * A wall clock that steps (NTP, a VM resume) while an engine loads, drains,
 * starts or waits for a dead run's GPU memory: no duration may follow it.
 * The step is global (`Date.now`, ../support/wall_step.ts): the clock an
 * engine run reads by default is what is under test. Its timers fire by hand;
 * its readings are real.
 */
// First: the wall steps for every module, those that keep `Date.now` too.
import { stepWall } from "../support/wall_step.ts";
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { REAL_CLOCK } from "../../src/common/sleep.ts";
import { type EnginePlan, planEngine } from "../../src/engines/engine_plan.ts";
import { EngineLog } from "../../src/engines/log_sink.ts";
import type { GpuSnapshot } from "../../src/gpu/nvidia_smi.ts";
import { GpuStartGate } from "../../src/gpu/start_gate.ts";
import { EngineRun } from "../../src/supervision/engine_run.ts";
import type { EngineRunOptions } from "../../src/supervision/engine_run_options.ts";
import { Journal, type JournalEvent } from "../../src/supervision/journal.ts";
import { EngineRecords } from "../../src/supervision/records.ts";
import { vllmMetricsServer } from "../support/vllm_metrics.ts";
import {
  captureLog,
  fakeBin,
  makeRoot,
  pathWith,
  waitFor,
} from "../support/helpers.ts";
import { FakeProcess, ManualClock, settle } from "../support/manual_clock.ts";

const HOUR = 3_600_000;

/** The default clock's readings, its timers fired by hand (`advance`, `next`). */
class HandTimers extends ManualClock {
  override now(): number {
    return REAL_CLOCK.now();
  }

  override wall(): number {
    return Date.now();
  }
}

function heard(events: Partial<JournalEvent>[]): Journal {
  return Object.assign(Object.create(Journal.prototype), {
    record: (e: JournalEvent) => events.push(e),
  });
}

/** A run of `card` (`made` set: its processes are stand-ins) on `clock`. */
function engineRun(
  card: string,
  root: string,
  path: string,
  clock: ManualClock,
  events: Partial<JournalEvent>[],
  more: { port?: number; made?: FakeProcess[]; startTimeoutMs?: number } = {},
): EngineRun {
  const plan: EnginePlan = planEngine(Registry.parse(card).get("m"), {
    baseEnv: { PATH: path },
    host: "127.0.0.1",
    port: more.port ?? 1,
    directory: root,
    defaults: {
      restart: "on-failure",
      failedRetryMs: 0,
      drainTimeoutMs: 30_000,
      stallTimeoutMs: 0,
      canaryIntervalMs: 0,
    },
  });
  const made = more.made;
  const spawn: EngineRunOptions["spawn"] = made &&
    ((p, log) => made[made.push(new FakeProcess(p, log, clock)) - 1]!);
  return new EngineRun(plan, {
    log: new EngineLog(plan.logFile),
    records: new EngineRecords(root),
    journal: heard(events),
    onChange() {},
    clock,
    ...spawn ? { spawn } : {},
    restartMaxDelayMs: 300_000,
    stableAfterMs: 600_000,
    livenessFailures: 0,
    graceMs: 1_000,
    startTimeoutMs: more.startTimeoutMs ?? 0,
  });
}

Deno.test("a wall clock stepped 3 h ahead does not stop a loading engine as start-timeout", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const clock = new HandTimers();
  const card =
    `models:\n  m: { verb: chat, engine: command, hub: org/m, command: [sh, -c, "sleep 30"] }\n`;
  const run = engineRun(card, root, Deno.env.get("PATH") ?? "", clock, events, {
    startTimeoutMs: 60_000,
  });
  try {
    await captureLog(async () => {
      run.start();
      assert.ok(run.process.running);
      {
        using _ = stepWall(3 * HOUR);
        // The silence timer fires: the engine spawned milliseconds ago.
        await clock.advance(60_000);
        assert.equal(run.state, "starting", "not stopped: it spawned just now");
      }
      await run.stop();
    });
    assert.equal(events.find((e) => e.reason === "start-timeout"), undefined);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a wall clock stepped 3 h ahead does not end a drain at its deadline: what is in flight finishes", async () => {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm"]);
  const events: Partial<JournalEvent>[] = [];
  const served = { running: 1, generated: 5 };
  const server = vllmMetricsServer(served);
  const clock = new HandTimers();
  const made: FakeProcess[] = [];
  const run = engineRun(
    "models:\n  m: { verb: chat, hub: org/m }\n",
    root,
    pathWith(bin),
    clock,
    events,
    { port: server.addr.port, made },
  );
  try {
    await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      assert.equal(await run.healthy(1_000), true);
      const stopped = run.stop();
      await waitFor(() => run.detail().drain?.running === 1, "a first read");
      {
        using _ = stepWall(3 * HOUR);
        await clock.next("the drain's second read");
        assert.equal(run.state, "draining", "30 s to drain, not 3 h past it");
        await waitFor(() => clock.pending > 0, "the drain's third read");
        served.running = 0;
        await clock.next("the drain's third read");
      }
      await stopped;
    });
    const drain = events.find((e) => e.event === "drain")!;
    assert.equal(drain.reason, "drained", `${drain.detail}`);
    assert.equal(drain.drain?.cut, 0);
  } finally {
    await server.shutdown();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("a wall clock stepped 3 h ahead, then back, makes no start 3 h long and no recovery negative", async () => {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm"]);
  const events: Partial<JournalEvent>[] = [];
  const clock = new HandTimers();
  const made: FakeProcess[] = [];
  const run = engineRun(
    "models:\n  m: { verb: chat, hub: org/m }\n",
    root,
    pathWith(bin),
    clock,
    events,
    { made },
  );
  try {
    await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      {
        using _ = stepWall(3 * HOUR);
        assert.equal(await run.healthy(1_000), true);
        const start = run.detail().last_start!.seconds;
        assert.ok(start >= 0 && start < 60, `a start of ${start} s`);
        made[0]!.exit({ success: false, code: 1, signal: null });
        await settle();
      } // the wall steps back 3 h during the backoff
      await clock.advance(1_000);
      made[1]!.health = true;
      assert.equal(await run.healthy(1_000), true);
      await run.stop();
    });
    const recovery = run.detail().last_recovery!.seconds;
    assert.ok(recovery >= 0 && recovery < 60, `a recovery of ${recovery} s`);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("a wall clock stepped 3 h ahead does not skip a restart's wait for the dead run's GPU memory", async () => {
  // Its pid still listed: the driver has not released its memory yet.
  const listed: GpuSnapshot = {
    devices: [{
      index: "0",
      uuid: "GPU-aaaa",
      totalMiB: 81920,
      usedMiB: 30000,
      memoryKnown: true,
    }],
    processes: [{ pid: 4_000_001, usedMiB: 30000, gpuUuid: "GPU-aaaa" }],
    at: 0,
  };
  let marks = 0;
  const gate = new GpuStartGate({
    facts: { snapshot: () => Promise.resolve(listed), mark: () => ++marks },
    intervalMs: 10,
    releaseTimeoutMs: 60_000,
    processes: () => new Map(),
    ownGroups: () => new Map(),
  });
  const stop = new AbortController();
  const { lines } = await captureLog(async () => {
    const ticket = gate.admit({
      name: "a",
      devices: ["0"],
      released: { devices: { "0": 0 }, pids: [4_000_001], byPid: true },
      signal: stop.signal,
    });
    const first = await ticket.next();
    assert.equal(
      first.done ? "started" : first.value.reason,
      "gpu-memory-release",
    );
    {
      using _ = stepWall(3 * HOUR);
      const second = await ticket.next(); // the next look, 10 ms on
      assert.equal(
        second.done ? "started" : second.value.reason,
        "gpu-memory-release",
        "60 s of --gpu-release-timeout, not 3 h past it",
      );
    }
    stop.abort();
    await ticket.next().catch(() => {});
  });
  assert.equal(lines.filter((l) => /starting anyway/.test(l)).length, 0);
});

Deno.test("on a fake clock whose wall steps 3 h while its monotonic time stands: times shown follow the wall, the backoff and the drain do not", async () => {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm"]);
  const server = vllmMetricsServer({ running: 1, generated: 5 });
  const clock = new ManualClock();
  const made: FakeProcess[] = [];
  const drains: FakeProcess[] = [];
  const card = "models:\n  m: { verb: chat, hub: org/m }\n";
  const path = pathWith(bin);
  const restarted = engineRun(card, root, path, clock, [], { made });
  const drained = engineRun(card, root, path, clock, [], {
    port: server.addr.port,
    made: drains,
  });
  const shown = (ms: number) => new Date(clock.wall() + ms).toISOString();
  try {
    await captureLog(async () => {
      restarted.start();
      clock.stepWall(3 * HOUR);
      made[0]!.exit({ success: false, code: 1, signal: null });
      await settle();
      assert.equal(restarted.detail().since, shown(0));
      assert.equal(restarted.detail().next_restart, shown(1_000));
      await clock.advance(999);
      assert.equal(restarted.state, "backoff", "1 s on the monotonic clock");
      await clock.advance(1);
      assert.equal(restarted.state, "starting");
      await restarted.stop();
      drained.start();
      drains[0]!.health = true;
      assert.equal(await drained.healthy(1_000), true);
      const stopped = drained.stop();
      const { since, deadline } = drained.detail().drain!;
      assert.deepEqual([since, deadline], [shown(0), shown(30_000)]);
      clock.stepWall(3 * HOUR);
      await clock.next("the drain's second read");
      assert.equal(drained.state, "draining", "30 s on the monotonic clock");
      assert.equal(drained.hurry(), true);
      await stopped;
    });
  } finally {
    await server.shutdown();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});
