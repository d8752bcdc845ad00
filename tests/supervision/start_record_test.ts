/** The split of one start into its steps (src/supervision/start_record.ts), and the start tally. */
import assert from "node:assert/strict";
import {
  splitStart,
  START_BUCKETS,
  startLine,
  tally,
} from "../../src/supervision/start_record.ts";

Deno.test("a start answering 503 after its last phase line spends that time listening (SGLang's warm-up)", () => {
  assert.deepEqual(
    splitStart(
      { gate: 0, spawn: 1_000, listening: 8_000 },
      { loading: 1_500, preparing: 6_000 },
      9_250,
    ),
    {
      seconds: 9.25,
      phases: {
        gate: 1,
        spawn: 0.5,
        loading: 4.5,
        preparing: 2,
        listening: 1.25,
      },
    },
  );
});

Deno.test("a first answer before a phase line is no step: llama-server listens, then loads", () => {
  const start = splitStart(
    { spawn: 0, listening: 30 },
    { loading: 50, preparing: 800 },
    850,
  );
  assert.deepEqual(start, {
    seconds: 0.85,
    phases: { spawn: 0.05, loading: 0.75, preparing: 0.05 },
  });
  assert.equal(
    startLine(start),
    "ready after 0.8 s: spawn 0.1 s, loading 0.8 s, preparing 0.1 s",
  );
});

Deno.test("marks past the first 200 are left out; without marks a start is 0 s", () => {
  assert.deepEqual(splitStart({ spawn: 0 }, { preparing: 5_000 }, 4_000), {
    seconds: 4,
    phases: { spawn: 4 },
  });
  assert.deepEqual(splitStart({}, {}, 10), { seconds: 0, phases: {} });
});

Deno.test("the tally counts each start in every bucket at or above it", () => {
  let t = tally(undefined, 3);
  t = tally(t, 61);
  t = tally(t, 5_000);
  assert.deepEqual([t.count, t.sum], [3, 5_064]);
  const upTo = (bound: number) => t.le[START_BUCKETS.indexOf(bound)];
  assert.deepEqual([upTo(5), upTo(60), upTo(120), upTo(1800)], [1, 1, 2, 2]);
});
