/**
 * One engine run (src/supervision/engine_run.ts) in this process: its events
 * and its journal, with `sh` as the engine and a start gate without GPU facts;
 * and driven by hand through its seams, a clock the test moves and process
 * handles that spawn nothing (`EngineRunOptions.clock`, `.spawn`).
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { planEngine } from "../../src/engines/engine_plan.ts";
import { EngineLog } from "../../src/engines/log_sink.ts";
import { GpuStartGate, type StartSlot } from "../../src/gpu/start_gate.ts";
import { EngineRun } from "../../src/supervision/engine_run.ts";
import { Journal, type JournalEvent } from "../../src/supervision/journal.ts";
import { EngineRecords } from "../../src/supervision/records.ts";
import type { EngineRunOptions } from "../../src/supervision/engine_run_options.ts";
import type { Footprint } from "../../src/engines/footprint.ts";
import {
  captureLog,
  fakeBin,
  makeRoot,
  pathWith,
  waitFor,
} from "../support/helpers.ts";
import { metricsText } from "../fixtures/engine_metrics.ts";
import { vllmMetricsServer } from "../support/vllm_metrics.ts";
import { FakeProcess, ManualClock, settle } from "../support/manual_clock.ts";

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
/** A journal that keeps its events in `events` (its own `state` lines among them). */
function heard(events: Partial<JournalEvent>[]): Journal {
  return Object.assign(Object.create(Journal.prototype), {
    record: (e: JournalEvent) => events.push(e),
  });
}

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
    placement: { gpus: more.gpus ?? null },
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
    journal: heard(events),
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

const EXIT_1: Deno.CommandStatus = { success: false, code: 1, signal: null };

/** An engine run of a vLLM card driven by `clock`, its process handles in `made`. */
async function driven(
  root: string,
  events: Partial<JournalEvent>[],
  more: {
    card?: string;
    port?: number;
    failedRetryMs?: number;
    canaryIntervalMs?: number;
    gate?: GpuStartGate;
    name?: string;
    footprint?: EngineRunOptions["footprint"];
    clock?: ManualClock;
  } = {},
) {
  const bin = await fakeBin(["vllm"]);
  const clock = more.clock ?? new ManualClock();
  const made: FakeProcess[] = [];
  const card = Registry.parse(
    `models:\n  ${more.name ?? "m"}: { verb: chat, hub: org/m${
      more.card ?? ""
    } }\n`,
  ).get(more.name ?? "m");
  const plan = planEngine(card, {
    baseEnv: { PATH: pathWith(bin) },
    host: "127.0.0.1",
    port: more.port ?? 1,
    directory: root,
    placement: { gpus: more.gate ? ["0"] : null },
    defaults: {
      ...OFF,
      failedRetryMs: more.failedRetryMs ?? 0,
      drainTimeoutMs: 30_000,
      canaryIntervalMs: more.canaryIntervalMs ?? 0,
    },
  });
  const run = new EngineRun(plan, {
    log: new EngineLog(plan.logFile),
    records: new EngineRecords(root),
    journal: heard(events),
    onChange() {},
    clock,
    spawn: (p, log) => {
      const made1 = new FakeProcess(p, log, clock);
      made.push(made1);
      return made1;
    },
    restartMaxDelayMs: 300_000,
    stableAfterMs: 600_000,
    livenessFailures: 0,
    graceMs: 1_000,
    startTimeoutMs: 0,
    canaryTimeoutMs: 2_000,
    ...(more.gate ? { gate: more.gate } : {}),
    footprint: more.footprint,
  });
  return { run, clock, made, bin };
}

Deno.test("driven by hand: a restart waits its backoff on the run's clock, 1 s, then 2 s", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const { run, clock, made, bin } = await driven(root, events);
  try {
    const { lines } = await captureLog(async () => {
      run.start();
      assert.equal(run.state, "starting");
      made[0]!.exit(EXIT_1);
      await settle();
      assert.equal(run.state, "backoff");
      const next = new Date(clock.now() + 1_000).toISOString();
      assert.equal(run.detail().next_restart, next);
      await clock.advance(999);
      assert.equal(run.state, "backoff", "not before its delay");
      await clock.advance(1);
      assert.equal(run.state, "starting");
      assert.equal(made.length, 2, "a new process handle for the restart");
      assert.equal(run.detail().restarts, 1);
      made[1]!.exit(EXIT_1);
      await settle();
      assert.equal(
        run.detail().next_restart,
        new Date(clock.now() + 2_000).toISOString(),
      );
      await run.stop();
    });
    assert.ok(
      lines.some((l) => /; restart 1 in 1 s; log /.test(l)),
      lines.join("\n"),
    );
    assert.ok(
      lines.some((l) => /; restart 2 in 2 s; log /.test(l)),
      lines.join("\n"),
    );
    assert.equal(run.state, "exited");
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a failed engine is tried again after its plan's failed retry, as a restart", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const { run, clock, made, bin } = await driven(root, events, {
    card: ", failed_retry: 5",
    failedRetryMs: 60_000,
  });
  const bad = "error: unrecognized arguments: --nope";
  try {
    const { lines } = await captureLog(async () => {
      run.start();
      made[0]!.exit(EXIT_1, bad);
      await settle();
      await clock.advance(1_000);
      made[1]!.exit(EXIT_1, bad);
      await settle();
      assert.equal(run.state, "failed");
      assert.equal(
        run.detail().next_restart,
        new Date(clock.now() + 5_000).toISOString(),
        "the card's 5 s, not the launcher's 60 s",
      );
      await clock.advance(4_999);
      assert.equal(run.state, "failed");
      await clock.advance(1);
      assert.equal(run.state, "starting");
      assert.equal(made.length, 3);
      await run.stop();
    });
    assert.ok(
      lines.some((l) =>
        /not restarted: bad-arguments twice in a row \(fix the card or its files, then reload\); tried again in 5 s/
          .test(l)
      ),
      lines.join("\n"),
    );
    const retry = events.find((e) => e.reason === "retry");
    assert.equal(`${retry?.from}>${retry?.to}`, "failed>backoff");
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a stop drains a ready engine until what was in flight is done, then stops its process", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const served = { running: 1, generated: 5 };
  const server = vllmMetricsServer(served);
  const { run, clock, made, bin } = await driven(root, events, {
    port: server.addr.port,
  });
  try {
    await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      assert.equal(await run.healthy(1_000), true);
      assert.equal(run.state, "ready");
      const stopped = run.stop();
      assert.equal(run.state, "draining");
      await waitFor(
        () => run.detail().drain?.running === 1,
        "a first reading: one in flight",
      );
      assert.equal(made[0]!.running, true, "no SIGTERM while it drains");
      served.running = 0;
      await clock.next("the drain's next read");
      await stopped;
    });
    assert.deepEqual(
      events.filter((e) => e.event === "state").map((e) => `${e.from}>${e.to}`),
      [
        "starting>ready",
        "ready>draining",
        "draining>stopping",
        "stopping>exited",
      ],
    );
    assert.equal(events.find((e) => e.event === "drain")?.reason, "drained");
  } finally {
    await server.shutdown();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

/** What a stand-in vLLM answers: its gauges and counters, and each canary's status. */
interface Answers {
  running: number;
  generated: number;
  canary: number;
  canaries: number;
}

/** A stand-in vLLM at a loopback port: `/metrics` from `a`, a canary answered `a.canary`. */
function standIn(a: Answers): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (req) => {
      if (new URL(req.url).pathname === "/metrics") {
        const { running, generated } = a;
        return new Response(
          metricsText("vllm", {
            running,
            waiting: 0,
            prompt: generated,
            generated,
            model: "m",
          }),
        );
      }
      a.canaries++;
      return new Response("{}", { status: a.canary });
    },
  );
}

function transitions(events: Partial<JournalEvent>[]): string[] {
  return events.filter((e) => e.event === "state").map((e) =>
    `${e.from}>${e.to}`
  );
}

Deno.test("driven by hand: requests running and no token past the stall timeout stop the run as stalled; it restarts after its backoff", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const a = { running: 1, generated: 5, canary: 200, canaries: 0 };
  const server = standIn(a);
  const { run, clock, made, bin } = await driven(root, events, {
    port: server.addr.port,
    card: ", stall_timeout: 60",
  });
  try {
    await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      await run.healthy(1_000, true);
      assert.equal(run.state, "ready");
      await clock.advance(40_000);
      a.generated++; // a token: the stall timeout counts from here
      await run.healthy(1_000, true);
      await clock.advance(59_999);
      await run.healthy(1_000, true);
      assert.equal(run.state, "ready", "not before 60 s without a token");
      await clock.advance(1);
      await run.healthy(1_000, true);
      await waitFor(() => run.state === "backoff", "stopped, then its backoff");
      assert.equal(made[0]!.running, false);
      assert.equal(run.detail().last_exit?.cause, "stalled");
      assert.equal(
        run.detail().next_restart,
        new Date(clock.now() + 1_000).toISOString(),
      );
      await server.shutdown(); // the engine's port, free again for its restart
      await clock.advance(1_000);
      assert.equal(run.state, "starting");
      assert.equal(made.length, 2, "restarted as its policy says");
      await run.stop();
    });
    const stop = events.find((e) => e.to === "stopping")!;
    assert.equal(stop.reason, "stalled");
    assert.match(
      stop.detail ?? "",
      /^stalled: 1 request running, no token for 60 s:/,
    );
    assert.deepEqual(transitions(events).slice(0, 4), [
      "starting>ready",
      "ready>stopping",
      "stopping>backoff",
      "backoff>starting",
    ]);
  } finally {
    await server.shutdown();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: an idle engine's canary is due after its interval; an answer resets the streak; two failures in a row stop it as stalled", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const a = { running: 0, generated: 5, canary: 503, canaries: 0 };
  const server = standIn(a);
  const { run, clock, made, bin } = await driven(root, events, {
    port: server.addr.port,
    canaryIntervalMs: 60_000,
  });
  /** A round that sends a canary, and its answer. */
  const canary = async () => {
    const before = run.detail().canary;
    await run.healthy(1_000, true);
    await waitFor(() => run.detail().canary !== before, "a canary answered");
    return run.detail().canary!;
  };
  try {
    const { lines } = await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      const t0 = clock.now();
      await run.healthy(1_000, true);
      await clock.advance(59_999);
      await run.healthy(1_000, true);
      assert.equal(run.detail().canary, null, "none before its interval");
      await clock.advance(1);
      const first = await canary();
      assert.equal(first.at, new Date(t0 + 60_000).toISOString());
      assert.equal(first.ok, false);
      assert.equal(a.canaries, 1, "one canary in the first interval");
      a.canary = 200; // an answer: the streak ends, the next a whole interval later
      assert.equal((await canary()).ok, true);
      a.canary = 503;
      await run.healthy(1_000, true); // the next round: its interval from here
      await clock.advance(59_999);
      await run.healthy(1_000, true);
      await clock.advance(1);
      assert.equal((await canary()).ok, false);
      assert.equal(run.state, "ready", "one failure after an answer");
      await canary();
      await waitFor(() => run.state === "backoff", "stopped as stalled");
      assert.equal(a.canaries, 4);
    });
    const failed = lines.filter((l) =>
      /canary .* failed: .* in a row\)/.test(l)
    );
    assert.deepEqual(failed.map((l) => l.match(/\((\d) in a row\)/)?.[1]), [
      "1",
      "1",
      "2",
    ]);
    const stop = events.find((e) => e.to === "stopping")!;
    assert.equal(stop.reason, "stalled");
    assert.match(
      stop.detail ?? "",
      /^stalled: 2 canary requests in a row failed/,
    );
  } finally {
    await run.stop();
    await server.shutdown();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a drain that never empties ends at its deadline on the run's clock, what is in flight cut", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const a = { running: 2, generated: 5, canary: 200, canaries: 0 };
  const server = standIn(a);
  const { run, clock, made, bin } = await driven(root, events, {
    port: server.addr.port,
    card: ", drain_timeout: 5",
  });
  try {
    await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      await run.healthy(1_000, true);
      const began = clock.now();
      const stopped = run.stop();
      assert.equal(run.state, "draining");
      assert.equal(
        run.detail().drain?.deadline,
        new Date(began + 5_000).toISOString(),
      );
      // A read every 0.5 s: ten, then the deadline (a bound, should it never end).
      for (let reads = 0; reads <= 10 && run.state === "draining"; reads++) {
        assert.equal(made[0]!.running, true, "no SIGTERM while it drains");
        await clock.next("the drain's next read");
      }
      assert.notEqual(run.state, "draining");
      assert.equal(clock.now(), began + 5_000);
      await stopped;
    });
    const drain = events.find((e) => e.event === "drain")!;
    assert.equal(drain.reason, "deadline");
    assert.equal(
      drain.detail,
      "drain deadline passed after 5 s: 0 requests finished, 2 cut",
    );
    assert.equal(run.counts().requestsCut, 2);
    assert.deepEqual(transitions(events).slice(1), [
      "ready>draining",
      "draining>stopping",
      "stopping>exited",
    ]);
  } finally {
    await server.shutdown();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a second signal cuts a drain short at once", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const a = { running: 1, generated: 5, canary: 200, canaries: 0 };
  const server = standIn(a);
  const { run, clock, made, bin } = await driven(root, events, {
    port: server.addr.port,
  });
  try {
    await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      await run.healthy(1_000, true);
      const stopped = run.stop();
      await clock.next("the drain's first read");
      assert.equal(run.state, "draining");
      assert.equal(run.hurry(), true);
      assert.equal(run.state, "stopping");
      await stopped;
      assert.equal(run.hurry(), false, "no drain left to cut");
    });
    const drain = events.find((e) => e.event === "drain")!;
    assert.equal(drain.reason, "skipped");
    assert.equal(
      drain.detail,
      "drain cut short by a second signal after 0.5 s: 0 requests finished, 1 cut",
    );
  } finally {
    await server.shutdown();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a health poll answered after the stop began changes nothing: the drain goes on", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const server = standIn({
    running: 1,
    generated: 5,
    canary: 200,
    canaries: 0,
  });
  const { run, made, bin } = await driven(root, events, {
    port: server.addr.port,
  });
  try {
    await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      await run.healthy(1_000, true);
      // A background round's poll, in flight when the stop begins.
      const answer = Promise.withResolvers<
        { ok: boolean; answered: boolean; ms: number }
      >();
      made[0]!.check = () => answer.promise;
      const poll = run.healthy(1_000, true);
      const stopped = run.stop();
      answer.resolve({ ok: true, answered: true, ms: 1 });
      await poll;
      assert.equal(run.state, "draining", "the late answer is no verdict");
      run.hurry();
      await stopped;
    });
    assert.deepEqual(transitions(events), [
      "starting>ready",
      "ready>draining",
      "draining>stopping",
      "stopping>exited",
    ]);
  } finally {
    await server.shutdown();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a start is held while a neighbour loads on its GPU and goes at the neighbour's first 200", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const g = gate();
  const a = await driven(root, [], { gate: g, name: "a", port: 1 });
  const b = await driven(root, events, { gate: g, name: "b", port: 2 });
  try {
    await captureLog(async () => {
      a.run.start();
      await waitFor(
        () => a.run.state === "starting" && a.made[0]!.running,
        "a spawned",
      );
      b.run.start();
      await waitFor(() => b.run.state === "waiting", "b held");
      assert.equal(b.run.detail().waiting_for?.reason, "gpu-busy-loading");
      assert.equal(b.made[0]!.running, false);
      assert.equal(await a.run.healthy(1_000), false, "a still loading");
      assert.equal(b.run.state, "waiting", "held until a serves");
      a.made[0]!.health = true;
      assert.equal(await a.run.healthy(1_000), true);
      await waitFor(() => b.run.state === "starting", "b started");
      assert.equal(b.made[0]!.running, true);
      await b.run.stop();
      await a.run.stop();
    });
    assert.deepEqual(transitions(events).slice(0, 2), [
      "starting>waiting",
      "waiting>starting",
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(a.bin, { recursive: true });
    await Deno.remove(b.bin, { recursive: true });
  }
});

Deno.test("driven by hand: a run stopped during its download, or dead before its load, books nothing; the next run books what it measured at its first 200", async () => {
  const root = await makeRoot();
  // nvidia-smi's figure for a run that has not reached the GPU yet.
  const reading = (mib: number) => ({
    kind: "gpu-memory" as const,
    reading: { mib: { "0": mib }, by: "pid" as const, pids: [1], usedMiB: {} },
  });
  for (const end of ["stop", "crash"] as const) {
    const seen: Footprint[] = [];
    const { run, clock, made, bin } = await driven(root, [], {
      footprint: (_, footprint) => void seen.push(footprint),
    });
    try {
      await captureLog(async () => {
        run.start();
        run.send(reading(0));
        if (end === "stop") return await run.stop();
        made[0]!.exit(EXIT_1);
        await settle();
        await clock.advance(1_000); // its backoff
        run.send(reading(0));
        // vllm/v1/worker/gpu_model_runner.py (load_model).
        made[1]!.print(
          "INFO 12-01 12:00:10 [gpu_model_runner.py:2602] Model loading took 2.00 GiB memory and 8.5 seconds",
        );
        assert.equal(
          seen.length,
          0,
          `${end}: nothing booked before a first 200`,
        );
        made[1]!.health = true;
        assert.equal(await run.healthy(1_000), true);
        await run.stop();
      });
      assert.deepEqual(
        seen.map((f) => [f.weights_mib, f.total_mib]),
        end === "stop" ? [] : [[2048, 2048]],
        end,
      );
    } finally {
      await Deno.remove(bin, { recursive: true });
    }
  }
  await Deno.remove(root, { recursive: true });
});

Deno.test("driven by hand: the run's footprint grows with its memory lines and nvidia-smi's figure, handed on from its first 200 at each change only", async () => {
  const root = await makeRoot();
  const seen: Footprint[] = [];
  const { run, clock, made, bin } = await driven(root, [], {
    footprint: (plan, footprint) => {
      assert.equal(plan.name, "m");
      seen.push(footprint);
    },
  });
  try {
    run.start();
    assert.equal(run.detail().footprint, null, "nothing known yet");
    const watch = made[0]!.watch;
    // vllm/v1/worker/gpu_model_runner.py (load_model), gpu_worker.py.
    watch.line(
      "INFO 12-01 12:00:10 [gpu_model_runner.py:2602] Model loading took 2.00 GiB memory and 8.5 seconds",
    );
    watch.line(
      "INFO 12-01 12:00:11 [loader.py:1] Loading weights took 7.91 seconds",
    );
    await clock.advance(1_000);
    watch.line(
      "INFO 12-01 12:00:33 [gpu_worker.py:298] Available KV cache memory: 1.00 GiB",
    );
    assert.equal(seen.length, 0, "nothing handed on before its first 200");
    assert.equal(run.detail().footprint?.total_mib, 3072, "but shown");
    made[0]!.health = true;
    assert.equal(await run.healthy(1_000), true);
    assert.deepEqual(seen.map((f) => f.total_mib), [3072]);
    assert.equal(seen[0]!.measured_at, new Date(clock.now()).toISOString());
    const reading = (mib: number) => ({
      kind: "gpu-memory" as const,
      reading: {
        mib: { "0": mib },
        by: "pid" as const,
        pids: [1],
        usedMiB: {},
      },
    });
    run.send(reading(3000)); // below the lines' sum: a source more, the same total
    assert.equal(seen.length, 2);
    assert.equal(seen[1]!.total_mib, 3072);
    assert.equal(seen[1]!.from, "load lines + nvidia-smi");
    run.send(reading(3000));
    run.send({ kind: "gpu-memory", reading: null }); // unread
    assert.equal(seen.length, 2, "no change, nothing handed on");
    run.send(reading(4000));
    assert.equal(seen.length, 3);
    assert.deepEqual(run.detail().footprint, seen[2]);
    assert.equal(seen[2]!.total_mib, 4000);
    assert.equal(seen[2]!.weights_mib, 2048);
    await run.stop();
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a start's time to ready is split into the wait at the gate, the spawn, the load phases and listening, on the run's clock", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const g = gate();
  const { run, clock, made, bin } = await driven(root, events, { gate: g });
  try {
    await captureLog(async () => {
      const neighbour = await hold(g, ["0"]);
      run.start();
      await waitFor(() => run.state === "waiting", "held at the gate");
      await clock.advance(3_000);
      neighbour.release();
      await waitFor(() => made[0]?.running === true, "spawned");
      await clock.advance(500);
      // vllm/v1/worker/gpu_model_runner.py (load_model): the kind's phase lines.
      made[0]!.print(
        "INFO [gpu_model_runner.py] Starting to load model org/m...",
      );
      await clock.advance(4_000);
      made[0]!.print("INFO [gpu_model_runner.py] Model loading took 15.2 GiB");
      await clock.advance(2_000);
      made[0]!.listening = true; // answers 503 while not ready
      assert.equal(await run.healthy(1_000), false);
      assert.equal(run.detail().last_start, null, "none before a first 200");
      await clock.advance(1_000);
      made[0]!.health = true;
      assert.equal(await run.healthy(1_000), true);
      await run.stop();
    });
    const start = {
      seconds: 10.5,
      phases: { gate: 3, spawn: 0.5, loading: 4, preparing: 2, listening: 1 },
    };
    assert.deepEqual(run.detail().last_start, start);
    assert.equal(
      run.detail().last_recovery,
      null,
      "a first start recovers nothing",
    );
    assert.deepEqual(run.counts().starts?.count, 1);
    const journaled = events.find((e) => e.event === "start")!;
    assert.deepEqual(journaled.start, start);
    assert.equal(
      journaled.detail,
      "ready after 10.5 s: gate 3.0 s, spawn 0.5 s, loading 4.0 s, preparing 2.0 s, listening 1.0 s",
    );
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a recovery runs from an unplanned exit to the next first 200, its backoff and a second exit included", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const { run, clock, made, bin } = await driven(root, events);
  try {
    await captureLog(async () => {
      run.start();
      made[0]!.health = true;
      await run.healthy(1_000);
      await clock.advance(10_000);
      made[0]!.exit(EXIT_1, "error: unrecognized arguments: --nope");
      await settle();
      await clock.advance(1_000); // its backoff
      assert.equal(made.length, 2);
      made[1]!.exit(EXIT_1); // down again before it served: the same recovery
      await settle();
      await clock.advance(2_000);
      await clock.advance(1_500);
      made[2]!.health = true;
      await run.healthy(1_000);
      await run.stop();
    });
    assert.deepEqual(run.detail().last_recovery, {
      seconds: 4.5,
      cause: "bad-arguments",
    });
    assert.deepEqual(run.detail().last_start, {
      seconds: 1.5,
      phases: { spawn: 1.5 },
    });
    const tally = run.counts().starts!;
    assert.deepEqual([tally.count, tally.sum], [2, 1.5]);
    const journaled = events.filter((e) => e.event === "start");
    assert.deepEqual(journaled.map((e) => e.recovery ?? null), [
      null,
      { seconds: 4.5, cause: "bad-arguments" },
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("driven by hand: a reload's replacement measures its start from its own spawn, not the old run's", async () => {
  const root = await makeRoot();
  const events: Partial<JournalEvent>[] = [];
  const card = ", drain_timeout: 0";
  const old = await driven(root, events, { card });
  const fresh = await driven(root, events, { card, clock: old.clock });
  const { clock } = old;
  try {
    await captureLog(async () => {
      old.run.start();
      await clock.advance(2_000);
      old.made[0]!.listening = true; // answers 503 while not ready
      await old.run.healthy(1_000);
      await clock.advance(1_000);
      old.made[0]!.health = true;
      await old.run.healthy(1_000);
      await clock.advance(25_000);
      await old.run.stop();
      fresh.run.inherit(old.run);
      fresh.run.start();
      await clock.advance(3_000);
      fresh.made[0]!.health = true;
      await fresh.run.healthy(1_000);
      await fresh.run.stop();
    });
    const own = { seconds: 3, phases: { spawn: 3 } };
    assert.deepEqual(fresh.run.detail().last_start, own);
    const journaled = events.filter((e) => e.event === "start");
    assert.deepEqual(journaled.map((e) => e.start), [
      { seconds: 3, phases: { spawn: 2, listening: 1 } },
      own,
    ]);
    assert.deepEqual(fresh.run.counts().starts, { count: 2, sum: 6 });
  } finally {
    await Deno.remove(root, { recursive: true });
    for (const { bin } of [old, fresh]) {
      await Deno.remove(bin, { recursive: true });
    }
  }
});
