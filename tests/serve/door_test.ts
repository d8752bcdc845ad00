/**
 * The `./serve` door: the launcher, its options and read-only views of its
 * engines, never the supervision insides (supervisor, GPU start gate, start
 * slot, run recorder) an embedder has no use for.
 */
import assert from "node:assert/strict";
import * as door from "../../src/serve.ts";

const SOURCE = await Deno.readTextFile(
  new URL("../../src/serve.ts", import.meta.url),
);

Deno.test("./serve exports these values and no supervisor or GPU start gate", () => {
  assert.deepEqual(Object.keys(door).sort(), [
    "OpsStance",
    "Semioserve",
    "ServerProcess",
    "main",
    "planEngine",
  ]);
});

const DOORS = [
  "mod.ts",
  "src/serve.ts",
  "src/web.ts",
  "src/common.ts",
  "src/catalogue.ts",
  "src/status.ts",
];

Deno.test("the six doors export at most 45 (door, symbol) pairs, types included", async () => {
  const root = new URL("../../", import.meta.url);
  let pairs = 0;
  for (const door of DOORS) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["doc", "--json", door],
      cwd: root,
      stdout: "piped",
      stderr: "null",
    }).output();
    assert.ok(out.success, `deno doc --json ${door}`);
    const nodes = JSON.parse(new TextDecoder().decode(out.stdout))
      .nodes as Record<string, { symbols?: { name: string }[] }>;
    const file = new URL(door, root).href;
    const names = new Set((nodes[file]?.symbols ?? []).map((s) => s.name));
    assert.ok(names.size > 0, `${door} exports something`);
    pairs += names.size;
  }
  assert.ok(pairs <= 45, `${pairs} pairs`);
});

Deno.test("./serve names no supervision or gate type", () => {
  for (
    const inside of [
      "EngineRun",
      "EngineRunOptions",
      "GpuStartGate",
      "StartSlot",
      "StartRequest",
      "RunRecorder",
      "RunRecord",
      "RunWatcher",
      "GpuFacts",
      "ProcessFacts",
    ]
  ) {
    assert.doesNotMatch(SOURCE, new RegExp(`\\b${inside}\\b`), inside);
  }
  assert.match(SOURCE, /\bEngineView\b/);
});
