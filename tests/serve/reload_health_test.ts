/**
 * A reload parses the catalogue on the management API's loop, as a start
 * does: `/health` waits for the parse. With the shipped catalogue that wait
 * stays short (the bench's reload phase measures it, and 1,000 cards).
 */
import assert from "node:assert/strict";
import { DEFAULT_CATALOGUE } from "../../src/catalogue.ts";
import { launch, waitFor } from "../support/helpers.ts";

/** Loose for CI's two shared cores: the bench measured about 30 ms. */
const BOUND_MS = 300;

/** The shipped catalogue, and the stand-in engine's card the launcher runs. */
async function shippedCatalogue(): Promise<string> {
  const shipped = await Deno.readTextFile(DEFAULT_CATALOGUE);
  return `${shipped.trimEnd()}\n  c0: { verb: chat, hub: org/c0, args: { max-model-len: 4096 } }\n`;
}

Deno.test("reload: /health answers within 300 ms throughout a reload of the shipped catalogue", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-cat-" });
  try {
    const catalogue = `${dir}/catalogue.yaml`;
    await Deno.writeTextFile(catalogue, await shippedCatalogue());
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
      assert.ok(waits.length > 0, "no answer during the reload");
      const longest = Math.max(...waits);
      assert.ok(
        longest < BOUND_MS,
        `/health waited ${longest.toFixed(0)} ms during reload ${n}`,
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
