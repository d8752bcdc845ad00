/**
 * The drain's rules (src/supervision/drain.ts): what ends it, what it counts
 * as finished and as cut, and that its reads stop at the deadline.
 */
import assert from "node:assert/strict";
import { Drain, type DrainEvent } from "../../src/supervision/drain.ts";
import {
  type EnginePlan,
  engineSettings,
} from "../../src/engines/engine_plan.ts";
import type { TrafficReading } from "../../src/engines/traffic.ts";
import { ManualClock, settle } from "../support/manual_clock.ts";
import { withinGuard } from "../support/helpers.ts";

function reading(running: number, waiting = 0): TrafficReading {
  return { running, waiting, prompt: 0, generated: 0, at: Date.now() };
}

/** A drain whose reads never answer: only the events a test gives it count. */
function idle(ms = 60_000): Drain {
  return new Drain(ms, () => new Promise(() => {}), () => {});
}

Deno.test("a drain ends when nothing runs or waits; what left the gauges finished", () => {
  const drain = idle();
  const read = (r: TrafficReading) =>
    drain.step({ kind: "drain-read", reading: r });
  assert.equal(read(reading(2, 1)), undefined);
  assert.deepEqual(drain.view().running, 2);
  assert.equal(
    read(reading(3, 0)),
    undefined,
    "one more arrived: not finished",
  );
  assert.equal(read(reading(1, 0)), undefined);
  const end = read(reading(0, 0));
  assert.equal(end?.reason, "drained");
  assert.equal(end?.drain.finished, 3);
  assert.equal(end?.drain.cut, 0);
  assert.match(
    end!.detail,
    /^drained in [\d.]+ s: 3 requests finished, 0 cut$/,
  );
});

Deno.test("no first reading: not drained; a later failed read waits on", () => {
  const first = idle();
  const end = first.step({ kind: "drain-read", reading: null });
  assert.equal(end?.reason, "unread");
  assert.equal(end?.detail, "not drained: its metrics could not be read");
  const later = idle();
  later.step({ kind: "drain-read", reading: reading(1) });
  assert.equal(later.step({ kind: "drain-read", reading: null }), undefined);
  later.close();
});

Deno.test("the deadline and a second signal cut what is still in flight", () => {
  const late = idle();
  late.step({ kind: "drain-read", reading: reading(1, 2) });
  const cut = late.step({ kind: "drain-over", why: "deadline" });
  assert.equal(cut?.reason, "deadline");
  assert.equal(cut?.drain.cut, 3);
  const skipped = idle();
  skipped.step({ kind: "drain-read", reading: reading(1) });
  const end = skipped.step({ kind: "drain-over", why: "skipped" });
  assert.equal(end?.drain.cut, 1);
  assert.match(end!.detail, /cut short by a second signal/);
});

Deno.test("the reads stop at the deadline with one drain-over event: a read every 0.5 s on the drain's clock", async () => {
  const clock = new ManualClock();
  const events: DrainEvent[] = [];
  const reads: number[] = [];
  const began = clock.now();
  const drain = new Drain(
    700,
    () => {
      reads.push(clock.now() - began);
      return Promise.resolve(reading(1));
    },
    (event) => {
      events.push(event);
      drain.step(event);
    },
    undefined,
    clock,
  );
  await settle();
  await clock.advance(700);
  await withinGuard(drain.over, "the drain's end");
  assert.deepEqual(reads, [0, 500]);
  assert.deepEqual(events.map((e) => e.kind), [
    "drain-read",
    "drain-read",
    "drain-over",
  ]);
  assert.equal(drain.deadline, began + 700);
  assert.equal(clock.now(), drain.deadline);
  assert.equal(clock.pending, 0, "no read left waiting");
});

Deno.test("a card's drain_timeout wins over the launcher's", () => {
  const card = { name: "m", engine: "vllm", args: [] } as unknown as Parameters<
    typeof engineSettings
  >[0];
  const drainMs = (c: typeof card, drainTimeoutMs: number) =>
    engineSettings(c, {
      restart: "on-failure",
      failedRetryMs: 0,
      drainTimeoutMs,
      stallTimeoutMs: 0,
      canaryIntervalMs: 0,
    }).drainMs;
  assert.equal(drainMs(card, 30_000), 30_000);
  assert.equal(drainMs({ ...card, drainTimeout: 0 }, 30_000), 0);
  assert.equal(drainMs({ ...card, drainTimeout: 2.5 }, 0), 2_500);
});

const LAUNCHER = {
  restart: "on-failure",
  failedRetryMs: 0,
  drainTimeoutMs: 30_000,
  stallTimeoutMs: 0,
  canaryIntervalMs: 0,
} as const;

Deno.test("whether SIGTERM drains is the plan's, resolved from the card's args; a drain sends it at once on the plan's word", async () => {
  const card = {
    name: "m",
    engine: "vllm",
    args: [] as string[],
  } as unknown as Parameters<
    typeof engineSettings
  >[0];
  const on = (args: string[]) =>
    engineSettings({ ...card, args }, LAUNCHER).termDrains;
  assert.equal(on(["--shutdown-timeout", "30"]), true);
  assert.equal(on(["--shutdown-timeout", "0"]), false);
  assert.equal(on([]), false);
  const settings = engineSettings(card, LAUNCHER);
  const plan = (termDrains: boolean) =>
    ({
      ...settings,
      termDrains,
      card,
      host: "127.0.0.1",
      port: 1,
      apiKey: "",
    }) as unknown as EnginePlan;
  for (const termDrains of [true, false]) {
    let termed = 0;
    const read = Promise.withResolvers<void>();
    const drain = Drain.begin(
      "ready",
      plan(termDrains),
      () => read.resolve(),
      () => {},
      () => termed++,
      new ManualClock(),
    )!;
    await withinGuard(read.promise, "the drain's first read");
    drain.close();
    assert.equal(termed, termDrains ? 1 : 0, `termDrains: ${termDrains}`);
  }
});

/** One read with the engine's own view: the gauges and the ids it processes. */
function look(running: number, waiting: number, processing: number[]) {
  return {
    kind: "drain-read" as const,
    reading: reading(running, waiting),
    processing,
  };
}

Deno.test("by request id: a drain ends when those in flight at its start finished, whatever came since", () => {
  const drain = idle();
  // Tasks 5 and 6 on slots, one queued (it starts next: the lowest new id).
  assert.equal(drain.step(look(2, 1, [5, 6])), undefined);
  // 5 ended; 7 (the queued one) and 9 (an arrival) started; 8 was the drain's own read.
  assert.equal(drain.step(look(3, 1, [6, 7, 9])), undefined);
  assert.equal(drain.step(look(2, 1, [7, 9])), undefined, "7 still runs");
  // The gauges never read 0: arrivals keep them up.
  const end = drain.step(look(2, 1, [9, 10]));
  assert.equal(end?.reason, "drained");
  assert.equal(end?.drain.finished, 3);
  assert.equal(end?.drain.cut, 0);
  assert.equal(end?.drain.arrived, 3);
  assert.match(
    end!.detail,
    /^drained in [\d.]+ s: 3 requests finished, 0 cut \(3 that came during it cut\)$/,
  );
});

Deno.test("by request id: the deadline cuts and counts those of the start apart from arrivals", () => {
  const drain = idle();
  drain.step(look(1, 2, [4]));
  drain.step(look(2, 1, [4, 6])); // 6: the first queued one
  const end = drain.step({ kind: "drain-over", why: "deadline" });
  assert.equal(end?.reason, "deadline");
  assert.equal(end?.drain.cut, 3, "4, 6 and the one still queued");
  assert.equal(end?.drain.finished, 0);
  assert.equal(end?.drain.arrived, 0);
});

Deno.test("by request id: the lowest new ids are the queued ones; a start never seen is inferred once the queue is empty, confirmed by one more read", () => {
  const drain = idle();
  drain.step(look(1, 1, [3]));
  // 3 ended, 8 began: 8 is taken for the queued one (first in, first out).
  assert.equal(drain.step(look(1, 0, [8])), undefined, "8 is held");
  assert.equal(drain.step(look(1, 0, [8, 11])), undefined);
  assert.equal(drain.step(look(1, 0, [11]))?.reason, "drained");
  // 3 ended and the queued one began and ended between two reads (the gauge lags /slots).
  const quick = idle();
  quick.step(look(1, 1, [3]));
  assert.equal(quick.step(look(1, 0, [])), undefined, "one more read first");
  const end = quick.step(look(1, 0, []));
  assert.equal(end?.reason, "drained");
  assert.equal(end?.drain.finished, 2);
  // Taken from the queue but not yet on a slot at that read: seen at the next.
  const late = idle();
  late.step(look(1, 1, [3]));
  assert.equal(late.step(look(1, 0, [])), undefined);
  assert.equal(late.step(look(1, 0, [7])), undefined, "7 runs: held");
  assert.equal(late.step(look(1, 0, [12]))?.reason, "drained");
});

Deno.test("the engine's own view is read only with something in flight (llama-server's /slots wakes it), and each read after", async () => {
  const quiet: DrainEvent[] = [];
  let asked = 0;
  const none = new Drain(5_000, () => Promise.resolve(reading(0)), (e) => {
    quiet.push(e);
    none.step(e);
  }, () => (asked++, Promise.resolve([])));
  await none.over;
  assert.equal(asked, 0, "nothing in flight: no look at /slots");
  assert.deepEqual(quiet.map((e) => e.kind), ["drain-read"]);
  const reads = [reading(1), reading(1), reading(1, 0)];
  const views = [[4], [4], [9]];
  const clock = new ManualClock();
  const busy = new Drain(
    5_000,
    () => Promise.resolve(reads.shift()!),
    (e) => {
      const end = busy.step(e);
      if (end) assert.equal(end.drain.finished, 1);
    },
    () => (asked++, Promise.resolve(views.shift()!)),
    clock,
  );
  await clock.next("the second read");
  await clock.next("the third read");
  await busy.over;
  assert.equal(asked, 3);
});

Deno.test("an unreadable view at the start: the gauges decide, and the line says so", () => {
  const drain = idle();
  drain.step({ kind: "drain-read", reading: reading(1), processing: null });
  const end = drain.step({ kind: "drain-read", reading: reading(0) });
  assert.equal(end?.reason, "drained");
  assert.equal(end?.drain.arrived, undefined);
  assert.match(end!.detail, /its own view of requests could not be read/);
});

Deno.test("an engine's exit ends only a drain that sent SIGTERM itself; a crash during a gauge drain tells no drain", () => {
  const drain = idle();
  drain.step({ kind: "drain-read", reading: reading(2) });
  assert.equal(drain.step({ kind: "drain-over", why: "exited" }), undefined);
  drain.close();
});
