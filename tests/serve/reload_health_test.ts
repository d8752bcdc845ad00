/**
 * A reload parses the catalogue on the management API's loop, as a start
 * does: `/health` waits for the parse, and answers. How long it waits is the
 * bench's reload phase (the shipped catalogue, and 1,000 cards).
 */
import assert from "node:assert/strict";
import { DEFAULT_CATALOGUE } from "../../src/catalogue/registry.ts";
import { launch, waitFor } from "../support/helpers.ts";

/** The shipped catalogue, and the stand-in engine's card the launcher runs. */
async function shippedCatalogue(): Promise<string> {
  const shipped = await Deno.readTextFile(DEFAULT_CATALOGUE);
  return `${shipped.trimEnd()}\n  c0: { verb: chat, hub: org/c0, args: { max-model-len: 4096 } }\n`;
}

Deno.test("reload: /health answers 200 throughout a reload of the shipped catalogue", async () => {
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
      let answers = 0;
      while (!done) {
        const response = await fetch(health);
        await response.body?.cancel();
        assert.equal(response.status, 200);
        answers++;
        await new Promise((r) => setTimeout(r, 10));
      }
      await line;
      assert.match(reloaded()[n - 1]!, /reload: nothing changed/);
      assert.ok(answers > 0, "no answer during the reload");
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
