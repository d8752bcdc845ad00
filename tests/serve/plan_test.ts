/**
 * The plan is a value (src/serve/plan.ts): plain data that JSON round-trips,
 * computed from the config and the facts without I/O; a start is the
 * difference from nothing, a reload the difference from the running plan.
 */
import assert from "node:assert/strict";
import { readConfig } from "../../src/serve/config.ts";
import { gather } from "../../src/serve/facts.ts";
import { plan } from "../../src/serve/plan.ts";
import { diff } from "../../src/serve/diff.ts";
import { GpuMonitor } from "../../src/gpu/nvidia_smi.ts";
import {
  fakeBin,
  makeRoot,
  pathWith,
  STAND_IN_CATALOGUE,
} from "../support/helpers.ts";

/** No class instance, no closure, no Map: only what JSON writes. */
function assertPlain(value: unknown, path = "plan"): void {
  assert.notEqual(typeof value, "function", path);
  if (value === null || typeof value !== "object") return;
  const proto = Object.getPrototypeOf(value);
  assert.ok(
    proto === Object.prototype || proto === Array.prototype,
    `${path} is a ${proto?.constructor?.name}`,
  );
  for (const [key, item] of Object.entries(value)) {
    assertPlain(item, `${path}.${key}`);
  }
}

Deno.test("a plan JSON round-trips, and diff gives a start and an empty reload", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  try {
    const config = readConfig({
      models: ["alpha", "beta"],
      directory: root,
      catalogue: STAND_IN_CATALOGUE,
      host: "127.0.0.1",
      port: 6400,
      gpus: "none",
    }, { PATH: pathWith(bin), IDP_SECRET: "s", HOME: "/home/x" });
    const monitor = new GpuMonitor({ env: config.env });
    const facts = await gather(config, monitor);
    const planned = plan(config, facts);
    assertPlain(planned);
    const text = JSON.stringify(planned);
    assert.equal(JSON.stringify(JSON.parse(text)), text);
    assert.deepEqual(planned.engines.map((e) => e.port), [6401, 6402]);
    assert.deepEqual(planned.engines[0]!.baseEnv, {
      PATH: pathWith(bin),
      HOME: "/home/x",
    });
    assert.deepEqual(planned.engines[0]!.restart, "on-failure");
    const start = diff(undefined, planned);
    assert.deepEqual(start.start, ["alpha", "beta"]);
    const running = { ...planned, engines: planned.engines };
    const again = plan(
      config,
      await gather(config, monitor, { running }),
      running,
    );
    const reload = diff(running, again);
    assert.deepEqual(reload.start, []);
    assert.deepEqual(reload.same, ["alpha", "beta"]);
    assert.equal(reload.secret, false);
    assert.equal(reload.tls, undefined);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("each engine's plan resolves its settings once, a reload's amend anew; a failed engine is a retry of the difference", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  const catalogue = `${root}/catalogue.yaml`;
  const cards = (alpha: string) =>
    Deno.writeTextFile(
      catalogue,
      `models:\n  alpha: { verb: chat, hub: org/alpha${alpha} }\n  beta: { verb: embed, hub: org/beta }\n`,
    );
  try {
    await cards(
      ", restart: never, failed_retry: 9, drain_timeout: 5, stall_timeout: 7, canary: false",
    );
    const config = readConfig({
      models: ["alpha", "beta"],
      directory: root,
      catalogue,
      host: "127.0.0.1",
      port: 6410,
      gpus: "none",
      failedRetryMs: 1_000,
      stallTimeoutMs: 2_000,
      drainTimeoutMs: 3_000,
      canaryIntervalMs: 4_000,
    }, { PATH: pathWith(bin), IDP_SECRET: "the-idp-secret" });
    const monitor = new GpuMonitor({ env: config.env });
    const planned = plan(config, await gather(config, monitor));
    const settings = ({ restart, failedRetryMs, drainMs, stallMs, canaryMs }: {
      [K in "restart" | "failedRetryMs" | "drainMs" | "stallMs" | "canaryMs"]:
        unknown;
    }) => ({ restart, failedRetryMs, drainMs, stallMs, canaryMs });
    assert.deepEqual(planned.engines.map(settings), [
      {
        restart: "never",
        failedRetryMs: 9_000,
        drainMs: 5_000,
        stallMs: 7_000,
        canaryMs: 0,
      },
      {
        restart: "on-failure",
        failedRetryMs: 1_000,
        drainMs: 3_000,
        stallMs: 2_000,
        canaryMs: 4_000,
      },
    ]);
    assert.equal(planned.engines[0]!.traffic?.path, "/metrics");
    assert.ok(!JSON.stringify(planned.engines).includes("the-idp-secret"));
    await cards(", restart: always");
    const again = plan(
      config,
      await gather(config, monitor, {
        running: { ...planned, failed: ["beta"] },
      }),
      planned,
    );
    const reload = diff(planned, again);
    assert.deepEqual([reload.amend, reload.retry], [["alpha"], ["beta"]]);
    assert.deepEqual(settings(again.engines[0]!), {
      restart: "always",
      failedRetryMs: 1_000,
      drainMs: 3_000,
      stallMs: 2_000,
      canaryMs: 4_000,
    });
    assert.deepEqual(again.engines[0]!.args, planned.engines[0]!.args);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});
