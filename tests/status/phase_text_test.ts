import assert from "node:assert/strict";
import { lastExitText, rowsOf, stateText } from "../../src/status/table.ts";

const NOW = Date.parse("2026-11-25T08:42:00.000Z");

Deno.test("STATE shows a starting engine's phase, its progress and how long it has lasted", () => {
  const rows = rowsOf({
    active: {
      a: {
        state: "starting",
        phase: "loading",
        phase_since: "2026-11-25T08:40:00.000Z",
        progress: { done: 9, total: 20, unit: "shards" },
      },
      b: {
        state: "starting",
        phase: "downloading",
        phase_since: "2026-11-25T08:41:30.000Z",
        progress: { done: 3_100_000_000, total: 16_000_000_000, unit: "bytes" },
      },
      c: {
        state: "starting",
        phase: "preparing",
        phase_since: null,
        progress: null,
      },
      d: { state: "starting", phase: null },
    },
  });
  assert.deepEqual(rows.map((row) => stateText(row, NOW)), [
    "starting (loading 9/20, 2m)",
    "starting (downloading 3.1/16 GB, 30s)",
    "starting (preparing)",
    "starting",
  ]);
});

Deno.test("STATE shows what a launcher's wake waits for, its kind only", () => {
  const rows = rowsOf({
    active: {
      a: {
        state: "waking",
        sleep: {
          waits_for:
            "room on GPU 0: needs 6144 MiB more, 0 MiB can be freed (b busy)",
        },
      },
      b: { state: "waking", sleep: { waits_for: "its wake" } },
      c: { state: "waking", sleep: { waits_for: null } },
    },
  });
  assert.deepEqual(rows.map((row) => stateText(row, NOW)), [
    "waking (room on GPU 0)",
    "waking (its wake)",
    "waking",
  ]);
});

Deno.test("LAST EXIT names a cause the code does not say, and the engine's line", () => {
  assert.equal(
    lastExitText({
      code: 1,
      signal: null,
      at: "2026-11-25T08:41:55.000Z",
      reason: "exit",
      cause: "bad-arguments",
      message: "error: invalid argument: --bogus-flag",
    }, NOW),
    "code 1, bad-arguments, 5s ago: error: invalid argument: --bogus-flag",
  );
  assert.equal(
    lastExitText({
      code: 3,
      signal: null,
      at: "2026-11-25T08:41:55.000Z",
      reason: "exit",
      cause: "exit",
      message: null,
    }, NOW),
    "code 3, 5s ago",
  );
});
