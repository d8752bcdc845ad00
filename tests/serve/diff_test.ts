/** The reload summary line (src/serve/diff.ts). */
import assert from "node:assert/strict";
import {
  refusedReload,
  reloadResult,
  reloadSummary,
} from "../../src/serve/diff.ts";

// A reload that did nothing: the refused result's lists, without its error.
const { error: _error, summary: _summary, ms: _ms, ...EMPTY } = refusedReload();
const NONE = { ...EMPTY, ok: true };

Deno.test("the summary names what changed, in the issue's words", () => {
  assert.equal(
    reloadSummary({
      ...NONE,
      restarted: ["qwen3-8b"],
      changed: ["bge-m3"],
      unchanged: ["x"],
      tlsSerial: "1f2e",
      secrets: ["IDP_SECRET"],
    }),
    "reload: 1 engine restarted (qwen3-8b), 1 changed without a restart (bge-m3), TLS pair reloaded (serial 0x1f2e), secret reloaded",
  );
});

Deno.test("the summary counts plurals, catalogue names, failures and the engine key", () => {
  assert.equal(
    reloadSummary({
      ...NONE,
      restarted: ["a", "b"],
      failed: [{ name: "c", error: "Cannot prepare c: gone" }],
      catalogue: { added: ["new"], removed: ["old"] },
      secrets: ["LOCAL_ENGINE_API_KEY"],
    }),
    "reload: 2 engines restarted (a, b), engine c could not start: Cannot prepare c: gone, catalogue updated (+new, -old), engine API key reloaded (used from each engine's next start)",
  );
});

Deno.test("a restart abandoned for the stop (its engine drained and stopped, no new run) is not counted restarted", () => {
  const result = reloadResult(
    {
      start: [],
      restart: ["moving", "other"],
      retry: [],
      amend: [],
      same: [],
      secret: false,
      engineKey: false,
      catalogue: { added: [], removed: [] },
    },
    [{ name: "moving", error: "the launcher is stopping" }],
    [],
    performance.now(),
  );
  assert.deepEqual(result.restarted, ["other"]);
  assert.equal(
    result.summary,
    "reload: 1 engine restarted (other), engine moving could not start: the launcher is stopping",
  );
});

Deno.test("nothing changed, and a refusal, are one line each", () => {
  assert.equal(
    reloadSummary({ ...NONE, unchanged: ["a", "b"] }),
    "reload: nothing changed (2 engines unchanged)",
  );
  assert.equal(
    reloadSummary({ ...NONE, ok: false, error: "Cannot read x: y" }),
    "reload refused: Cannot read x: y",
  );
  assert.equal(
    refusedReload().summary,
    "reload refused: Cannot reload: the launcher is not running",
  );
});

Deno.test("a reload of 50,000 cards names 10 of each list and counts the rest: one short line", () => {
  const names = Array.from({ length: 50_000 }, (_, i) => `card-${i}`);
  const summary = reloadSummary({
    ...NONE,
    restarted: names.slice(0, 12),
    changed: names.slice(0, 10),
    failed: names.slice(0, 11).map((name) => ({ name, error: "gone" })),
    catalogue: { added: names, removed: [] },
  });
  assert.ok(summary.length < 1_500, `${summary.length} characters`);
  assert.ok(!summary.includes("\n"));
  assert.match(
    summary,
    /^reload: 12 engines restarted \(card-0, .*, card-9 … and 2 more\), 10 changed without a restart \(card-0, .*, card-9\), engine card-0 could not start: gone, /,
  );
  assert.match(
    summary,
    /engine card-9 could not start: gone, … and 1 more could not start, /,
  );
  assert.match(
    summary,
    /catalogue updated \(\+card-0, .*, \+card-9 … and 49,990 more\)$/,
  );
  assert.ok(!summary.includes("card-10"));
});
