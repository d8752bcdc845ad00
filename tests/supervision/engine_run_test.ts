/**
 * One engine run (src/supervision/engine_run.ts) in this process: its events
 * and its journal, with `sh` as the engine and a start gate without GPU facts.
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { planEngine } from "../../src/engines/engine_plan.ts";
import { EngineLog } from "../../src/engines/log_sink.ts";
import { GpuStartGate, type StartSlot } from "../../src/gpu/start_gate.ts";
import { EngineRun } from "../../src/supervision/engine_run.ts";
import type { Journal, JournalEvent } from "../../src/supervision/journal.ts";
import { EngineRecords } from "../../src/supervision/records.ts";
import { captureLog, makeRoot, waitFor } from "../support/helpers.ts";

const CARDS = Registry.parse(`models:
  crash:
    verb: chat
    engine: command
    hub: org/crash
    command: [sh, -c, "exit 3"]
  sleeper:
    verb: chat
    engine: command
    hub: org/sleeper
    command: [sh, -c, "sleep 30"]
`);

/** The launcher's per-engine settings, all off. */
const OFF = {
  restart: "on-failure",
  failedRetryMs: 0,
  drainTimeoutMs: 0,
  stallTimeoutMs: 0,
  canaryIntervalMs: 0,
} as const;

/** An engine run of `name` under `root`, its journal's events in `events`. */
function engine(
  name: string,
  root: string,
  events: Partial<JournalEvent>[],
  more: { gate?: GpuStartGate; gpus?: string[] } = {},
): EngineRun {
  const plan = planEngine(CARDS.get(name), {
    baseEnv: Deno.env.toObject(),
    host: "127.0.0.1",
    port: 1,
    directory: root,
    apiKey: "",
    gpus: more.gpus ?? null,
    defaults: { ...OFF, restart: "always" },
  });
  return new EngineRun(plan, {
    log: new EngineLog(plan.logFile),
    restartMaxDelayMs: 1,
    stableAfterMs: 60_000,
    livenessFailures: 0,
    graceMs: 1_000,
    records: new EngineRecords(root),
    startTimeoutMs: 0,
    journal: {
      record: (e: JournalEvent) => events.push(e),
    } as unknown as Journal,
    onChange() {},
    ...(more.gate ? { gate: more.gate } : {}),
  });
}

function gate(): GpuStartGate {
  return new GpuStartGate({
    intervalMs: 20,
    releaseTimeoutMs: 1_000,
    processes: () => new Map(),
    ownGroups: () => new Map(),
  });
}

/** Holds `devices` at `g` as another engine's load would. */
async function hold(g: GpuStartGate, devices: string[]): Promise<StartSlot> {
  const ticket = g.admit({ name: "neighbour", devices });
  let step = await ticket.next();
  while (!step.done) step = await ticket.next();
  return step.value;
}

Deno.test("an engine that exits at once goes starting, backoff, starting …; a stop ends it in exited", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  try {
    await captureLog(async () => {
      const run = engine("crash", root, events);
      run.start();
      await waitFor(() => run.detail().restarts >= 2, "two restarts");
      await run.stop();
      assert.equal(run.state, "exited");
      assert.equal(run.detail().next_restart, null);
      assert.equal(run.counts().exits.exit! >= 2, true);
    });
    const path = events.map((e) => `${e.from}>${e.to}`);
    assert.deepEqual(path.slice(0, 3), [
      "starting>backoff",
      "backoff>starting",
      "starting>backoff",
    ]);
    assert.equal(events.at(-1)?.to, "exited");
    const backoff = events.find((e) => e.to === "backoff")!;
    assert.equal(backoff.reason, "exit");
    assert.match(backoff.detail ?? "", /^exit: code 3 after \d+\.\d s$/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("an engine held at the gate waits with the gate's reason, and a stop while it waits ends it at once", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const g = gate();
  try {
    const { lines } = await captureLog(async () => {
      const slot = await hold(g, ["0"]);
      const run = engine("sleeper", root, events, { gate: g, gpus: ["0"] });
      run.start();
      await waitFor(() => run.state === "waiting", "held");
      assert.equal(run.detail().waiting_for?.reason, "gpu-busy-loading");
      assert.equal(run.detail().pid, null);
      await run.stop();
      assert.equal(run.state, "exited");
      assert.ok(
        (run.counts().startWaitSeconds?.["gpu-busy-loading"] ?? -1) >= 0,
      );
      slot.release();
      // Nothing of the stopped engine is left in the queue.
      await hold(g, ["0"]).then((s) => s.release());
    });
    assert.deepEqual(events.map((e) => `${e.from}>${e.to}`), [
      "starting>waiting",
      "waiting>exited",
    ]);
    assert.equal(events[0]?.reason, "gpu-busy-loading");
    assert.ok(
      lines.some((l) =>
        /engine sleeper waits for GPU 0: engine neighbour is loading there/
          .test(l)
      ),
      lines.join("\n"),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("an engine held at the gate starts once the neighbour's load is over, and its load holds the gate", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const g = gate();
  try {
    const { lines } = await captureLog(async () => {
      const slot = await hold(g, ["0"]);
      const run = engine("sleeper", root, events, { gate: g, gpus: ["0"] });
      run.start();
      await waitFor(() => run.state === "waiting", "held");
      slot.release();
      await waitFor(() => run.state === "starting", "started");
      assert.equal(g.loadingOn(["0"], "other"), "sleeper");
      await run.stop();
      assert.equal(g.loadingOn(["0"], "other"), undefined, "released on stop");
    });
    assert.deepEqual(events.map((e) => `${e.from}>${e.to}`), [
      "starting>waiting",
      "waiting>starting",
      "starting>stopping",
      "stopping>exited",
    ]);
    assert.ok(
      lines.some((l) =>
        /engine sleeper starts on GPU 0 \(waited for gpu-busy-loading\)/.test(l)
      ),
      lines.join("\n"),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
