/**
 * A reload never holds the management API: the catalogue is read and
 * validated in a Worker (`src/catalogue/worker_load.ts`), so `/health`
 * answers throughout a reload of 5,000 cards (the bench's reload phase
 * measures the same; before the worker, /health waited 0.5–0.9 s).
 */
import assert from "node:assert/strict";
import { launch, waitFor } from "../support/helpers.ts";

/** Loose for CI's two shared cores: the parse alone held /health 0.5–0.9 s. */
const BOUND_MS = 300;
const CARDS = 5_000;

function bigCatalogue(): string {
  const lines = ["models:"];
  for (let i = 0; i < CARDS; i++) {
    lines.push(
      `  c${i}: { verb: chat, hub: org/c${i}, args: { max-model-len: 4096 } }`,
    );
  }
  return `${lines.join("\n")}\n`;
}

Deno.test("reload: /health answers within 300 ms throughout a reload of 5,000 cards", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-cat-" });
  try {
    const catalogue = `${dir}/catalogue.yaml`;
    await Deno.writeTextFile(catalogue, bigCatalogue());
    await using s = await launch(["c0"], { catalogue });
    await s.launcher.ready();
    const health = `http://127.0.0.1:${s.port}/health`;
    const reloaded = () => s.launcher.lines.filter((l) => /reload/.test(l));
    for (let n = 1; n <= 2; n++) {
      let done = false;
      s.launcher.child.kill("SIGHUP");
      const line = waitFor(
        () => reloaded().length >= n,
        `reload ${n} in:\n${s.launcher.stderr}`,
        15_000,
      ).finally(() => done = true);
      const waits: number[] = [];
      while (!done) {
        const began = performance.now();
        const response = await fetch(health);
        await response.body?.cancel();
        assert.equal(response.status, 200);
        waits.push(performance.now() - began);
        await new Promise((r) => setTimeout(r, 10));
      }
      await line;
      assert.match(reloaded()[n - 1]!, /reload: nothing changed/);
      assert.ok(waits.length > 5, `only ${waits.length} answers`);
      const longest = Math.max(...waits);
      assert.ok(
        longest < BOUND_MS,
        `/health waited ${longest.toFixed(0)} ms during reload ${n}`,
      );
    }
    assert.doesNotMatch(s.launcher.stderr, /catalogue worker unavailable/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
