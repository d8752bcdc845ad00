/** The split of one start into its steps (src/supervision/start_record.ts), and the start tally. */
import assert from "node:assert/strict";
import { splitStart, Starts } from "../../src/supervision/start_record.ts";

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
});

Deno.test("marks past the first 200 are left out; without marks a start is 0 s", () => {
  assert.deepEqual(splitStart({ spawn: 0 }, { preparing: 5_000 }, 4_000), {
    seconds: 4,
    phases: { spawn: 4 },
  });
  assert.deepEqual(splitStart({}, {}, 10), { seconds: 0, phases: {} });
});

Deno.test("starts: each ready counts its start; a recovery runs from the first unplanned exit to the next ready, and a new start's marks are its own", () => {
  const starts = new Starts();
  starts.begin(0, true);
  starts.spawned(2_000);
  starts.answered({ ok: false, answered: false }, 3_000); // refused: no answer
  assert.deepEqual(starts.ready(4_000, { loading: 2_500 }), {
    event: "start",
    detail: "ready after 4.0 s: gate 2.0 s, spawn 0.5 s, loading 1.5 s",
    start: { seconds: 4, phases: { gate: 2, spawn: 0.5, loading: 1.5 } },
  });
  starts.down(10_000, "gpu-out-of-memory");
  starts.down(12_000, "exit"); // down again before it served
  starts.begin(13_000, false);
  starts.spawned(13_000);
  starts.answered({ ok: false, answered: true }, 13_500);
  const again = starts.ready(14_000, {});
  assert.deepEqual(again.start, {
    seconds: 1,
    phases: { spawn: 0.5, listening: 0.5 },
  });
  assert.deepEqual(again.recovery, { seconds: 4, cause: "gpu-out-of-memory" });
  assert.deepEqual(starts.tally, { count: 2, sum: 5 });
  assert.equal(
    starts.ready(15_000, {}).recovery,
    undefined,
    "none without an exit",
  );
  assert.deepEqual(starts.recovery, { seconds: 4, cause: "gpu-out-of-memory" });
});
