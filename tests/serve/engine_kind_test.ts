/**
 * A new engine kind is one object: a toy kind registered in one call goes
 * through the catalogue, the plan (with its help asked) and a real start of
 * the stand-in engine under the toy's executable name.
 */
import assert from "node:assert/strict";
import { Semioserve } from "../../mod.ts";
import { registerEngineKind } from "../../src/engines/kinds.ts";
import { llamaServerFlags } from "../../src/engines/kinds/llama_cpp.ts";
import { catalogueText } from "../support/gpu_cards.ts";
import {
  fakeBin,
  freePorts,
  inProcessSite,
  pathWith,
  waitFor,
} from "../support/helpers.ts";

Deno.test("a toy engine kind added in one call is planned with its command line and flag check, and starts healthy", async () => {
  using _toy = registerEngineKind({
    name: "toy",
    title: "Toy",
    executable: "toy-engine",
    install: "tests/support/helpers.ts fakeBin",
    argv: (ctx) => [
      "--toy-model",
      ctx.model,
      "--host",
      ctx.host,
      "--port",
      String(ctx.port),
      ...ctx.card.args,
    ],
    devices: () => ({ kind: "unplaced", from: "engine toy" }),
    // The stand-in answers `--help` as llama-server does.
    flags: { helpArgv: ["--help"], parseHelp: llamaServerFlags },
  });
  await using site = await inProcessSite();
  const bin = await fakeBin(["toy-engine"]);
  const path = Deno.env.get("PATH")!;
  Deno.env.set("PATH", pathWith(bin));
  const catalogue = `${bin}/catalogue.yaml`;
  await Deno.writeTextFile(
    catalogue,
    catalogueText({ tiny: { engine: "toy", args: { "ctx-sise": 64 } } }),
  );
  const port = freePorts(1);
  const options = {
    models: ["tiny"],
    host: "127.0.0.1",
    port,
    directory: site.root,
    catalogue,
    dev_mode: true,
    handleSignals: false,
    healthIntervalMs: 100,
  };
  try {
    const plan = await new Semioserve(options).plan();
    const [engine] = plan.engines;
    assert.equal(engine?.engine, "toy");
    assert.deepEqual(engine?.command, [
      "toy-engine",
      "--toy-model",
      "org/tiny",
      "--host",
      "127.0.0.1",
      "--port",
      String(port + 1),
      "--ctx-sise",
      "64",
    ]);
    assert.equal(engine?.gpus, null);
    assert.deepEqual(plan.warnings, [
      "tiny: --ctx-sise is not a known Toy flag (did you mean --ctx-size?)",
    ]);
    await Semioserve.reset();

    const serve = new Semioserve(options);
    const running = serve.run();
    try {
      await waitFor(
        () => serve.engineViews()[0]?.state === "ready",
        "the toy engine to be healthy",
      );
      const health = await fetch(`http://127.0.0.1:${port + 1}/health`);
      await health.body?.cancel();
      assert.equal(health.status, 200);
    } finally {
      await serve.stop();
      await running;
    }
  } finally {
    Deno.env.set("PATH", path);
    await Deno.remove(bin, { recursive: true });
  }
});
