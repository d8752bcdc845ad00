/**
 * The drain's rules (src/supervision/drain.ts): what ends it, what it counts
 * as finished and as cut, and that its reads stop at the deadline.
 */
import assert from "node:assert/strict";
import {
  Drain,
  type DrainEvent,
  drainMs,
} from "../../src/supervision/drain.ts";
import type { TrafficReading } from "../../src/engines/traffic.ts";

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

Deno.test("the reads stop at the deadline with one drain-over event", async () => {
  const events: DrainEvent[] = [];
  let reads = 0;
  const drain = new Drain(700, () => {
    reads++;
    return Promise.resolve(reading(1));
  }, (event) => {
    events.push(event);
    drain.step(event);
  });
  await drain.over;
  assert.equal(events.at(-1)?.kind, "drain-over");
  assert.equal(events.filter((e) => e.kind === "drain-over").length, 1);
  assert.ok(reads >= 2 && reads <= 3, `every 0.5 s (${reads} reads)`);
  assert.ok(Date.now() >= drain.deadline);
});

Deno.test("a card's drain_timeout wins over the launcher's", () => {
  const card = { name: "m" } as Parameters<typeof drainMs>[0];
  assert.equal(drainMs(card, 30_000), 30_000);
  assert.equal(drainMs({ ...card, drainTimeout: 0 }, 30_000), 0);
  assert.equal(drainMs({ ...card, drainTimeout: 2.5 }, 0), 2_500);
});
