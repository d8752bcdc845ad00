/**
 * The metrics file through the real launcher: written after health rounds and
 * state changes, read with a real Prometheus text-format parser, left at a
 * clean shutdown saying the launcher stopped (no engine).
 */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import {
  fakeBin,
  freePorts,
  launch,
  Launcher,
  listDir,
  makeRoot,
  models,
  pathWith,
  pidAlive,
  readRecord,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { get, parse, type ParsedFamily } from "../support/prometheus.ts";

function sample(
  family: ParsedFamily,
  labels: Record<string, string>,
): string | undefined {
  return family.metrics.find((m) =>
    Object.entries(labels).every(([k, v]) => m.labels?.[k] === v)
  )?.value;
}

async function readMetrics(
  root: string,
  port: number,
): Promise<Map<string, ParsedFamily> | undefined> {
  try {
    return parse(
      await Deno.readTextFile(`${root}/metrics/mymodel_serve_${port}.prom`),
    );
  } catch {
    return undefined;
  }
}

Deno.test("the metrics file reports engines up, restarts and poll times, and says stopped after a clean shutdown", async () => {
  const before = Math.floor(Date.now() / 1000);
  await using s = await launch(["alpha", "crash1"], {
    args: ["--health-interval", "0.2", "--gpus", "0-1"],
  });
  await s.launcher.ready();
  let families: Map<string, ParsedFamily> | undefined;
  await waitFor(async () => {
    families = await readMetrics(s.root, s.port);
    if (!families) return false;
    const up = get(families, "mymodel_engine_up");
    const restarts = get(families, "mymodel_engine_restarts_total");
    return sample(up, { model: "alpha" }) === "1" &&
      Number(sample(restarts, { model: "crash1" })) >= 1;
  }, "alpha up and crash1 restarted in the metrics file");
  const f = families!;
  const up = get(f, "mymodel_engine_up");
  assert.equal(up.type, "GAUGE");
  assert.deepEqual(
    up.metrics.find((m) => m.labels?.model === "alpha")?.labels,
    {
      model: "alpha",
      verb: "chat",
      engine: "vllm",
      port: String(s.port + 1),
      gpus: "0",
    },
  );
  assert.equal(get(f, "mymodel_engine_restarts_total").type, "COUNTER");
  const poll = Number(
    sample(get(f, "mymodel_engine_health_poll_seconds"), { model: "alpha" }),
  );
  assert.ok(poll > 0 && poll < 2, `poll took ${poll} s`);
  const started = Number(
    sample(get(f, "mymodel_engine_start_time_seconds"), { model: "alpha" }),
  );
  // A time in seconds, of this launch: between its start and now.
  assert.ok(
    before <= started && started <= Date.now() / 1000,
    `${before} <= ${started}`,
  );
  const info = get(f, "mymodel_launcher_info").metrics[0]!;
  assert.equal(info.value, "1");
  assert.equal(info.labels?.mode, "development");
  assert.equal(info.labels?.tls, "false");
  assert.ok(get(f, "mymodel_launcher_start_time_seconds"));
  assert.equal(f.get("mymodel_auth_failures_total"), undefined, "dev mode");
  // The detail view and the metrics agree on restarts.
  const detail = await models(s.port, true);
  assert.ok((detail.active.crash1?.restarts ?? 0) >= 1);
  assert.equal(sample(get(f, "mymodel_launcher_stopped"), {}), "0");
  assert.equal((await s.launcher.stop()).code, 0);
  assert.deepEqual(
    listDir(`${s.root}/metrics`),
    [`mymodel_serve_${s.port}.prom`],
    "the file stays, no temp files",
  );
  const last = (await readMetrics(s.root, s.port))!;
  assert.equal(
    sample(get(last, "mymodel_launcher_stopped"), { port: String(s.port) }),
    "1",
  );
  assert.deepEqual(
    [...last].filter(([name, family]) =>
      name.startsWith("mymodel_engine_") && family.metrics.length > 0
    ),
    [],
    "no engine series: they stopped",
  );
  assert.ok(
    Number(
      get(last, "mymodel_metrics_updated_timestamp_seconds").metrics[0]?.value,
    ) >= started,
  );
});

Deno.test("in production the metrics file counts refused requests by reason", async () => {
  const secret = "x".repeat(64);
  await using s = await launch(["alpha"], {
    args: ["--health-interval", "0.2"],
    env: { NUCLEUS_MODE: "production", IDP_SECRET: secret, IDP_ISSUER: "iss" },
  });
  await s.launcher.ready();
  const url = `http://127.0.0.1:${s.port}/health`;
  for (let i = 0; i < 3; i++) await (await fetch(url)).body?.cancel();
  const expired = await new SignJWT({ aud: "nexus" })
    .setProtectedHeader({ alg: "HS512" })
    .setIssuer("iss")
    .setIssuedAt(Math.floor(Date.now() / 1000) - 120)
    .setExpirationTime(Math.floor(Date.now() / 1000) - 60)
    .sign(new TextEncoder().encode(secret));
  const refused = await fetch(url, {
    headers: { authorization: `Bearer ${expired}` },
  });
  await refused.body?.cancel();
  assert.equal(refused.status, 401);
  await waitFor(async () => {
    const f = await readMetrics(s.root, s.port);
    if (!f?.get("mymodel_auth_failures_total")) return false;
    const failures = get(f, "mymodel_auth_failures_total");
    return sample(failures, { reason: "missing" }) === "3" &&
      sample(failures, { reason: "expired" }) === "1";
  }, "3 missing and 1 expired in the metrics file");
  const f = (await readMetrics(s.root, s.port))!;
  const failures = get(f, "mymodel_auth_failures_total");
  assert.equal(failures.type, "COUNTER");
  assert.equal(sample(failures, { reason: "signature" }), "0");
  assert.equal(
    get(f, "mymodel_launcher_info").metrics[0]?.labels?.mode,
    "production",
  );
});

Deno.test("kill -9 of a launcher leaves its metrics file, which the next launcher on another port removes", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  const records = await Deno.makeTempDir({ prefix: "serve-rec-" });
  // Two launchers of one engine each: ports first, first+1, then second, second+1.
  const first = freePorts(3);
  const second = first + 2;
  const env = {
    PATH: pathWith(bin),
    FAKE_ENGINE_RECORD_DIR: records,
    NUCLEUS_MODE: "dev",
  };
  const flags = ["--health-interval", "0.2"];
  try {
    const dead = new Launcher(
      ["alpha", ...siteArgs(first, root), ...flags],
      env,
    );
    await dead.ready();
    const left = `${root}/metrics/mymodel_serve_${first}.prom`;
    await waitFor(async () => {
      const f = await readMetrics(root, first);
      return f !== undefined &&
        sample(get(f, "mymodel_engine_up"), { model: "alpha" }) === "1";
    }, "alpha up in the first launcher's metrics file");
    const engine = (await readRecord(records, first + 1))!.pid;
    dead.child.kill("SIGKILL");
    await dead.exited();
    await waitFor(() => !pidAlive(engine), "the watchdog stops the engine");
    const stamped = Number(
      get(
        (await readMetrics(root, first))!,
        "mymodel_metrics_updated_timestamp_seconds",
      ).metrics[0]?.value,
    );
    assert.ok(stamped <= Date.now() / 1000, "the file stays, aging");
    assert.equal(
      sample(
        get((await readMetrics(root, first))!, "mymodel_launcher_stopped"),
        {},
      ),
      "0",
      "a death does not say stopped",
    );

    const next = new Launcher(
      ["beta", ...siteArgs(second, root), ...flags],
      env,
    );
    try {
      await next.ready();
      await waitFor(
        () =>
          listDir(`${root}/metrics`).includes(`mymodel_serve_${second}.prom`),
        "the second launcher's metrics file",
      );
      // A live launcher's write in flight has a temporary name: `.prom` only
      // (the empty listing after the stop below catches any leftover).
      assert.deepEqual(
        listDir(`${root}/metrics`).filter((name) => name.endsWith(".prom")),
        [`mymodel_serve_${second}.prom`],
      );
      await next.waitForLine(
        new RegExp(
          `removed metrics file ${left}: its launcher \\(pid ${dead.child.pid}\\) is gone`,
        ),
      );
      assert.equal((await next.stop()).code, 0);
      assert.deepEqual(listDir(`${root}/metrics`), [
        `mymodel_serve_${second}.prom`,
      ], "the stopped launcher's file only");
    } finally {
      await next.stop();
    }
  } finally {
    for (const dir of [root, bin, records]) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
});

Deno.test("a second live launcher on the same directory keeps the first one's metrics file", async () => {
  await using a = await launch(["alpha"], {
    args: ["--health-interval", "0.2"],
  });
  await a.launcher.ready();
  await waitFor(
    async () => (await readMetrics(a.root, a.port)) !== undefined,
    "the first launcher's metrics file",
  );
  const port = freePorts(1);
  await using b = await launch(["beta"], {
    root: a.root,
    port,
    args: ["--health-interval", "0.2"],
  });
  await b.launcher.ready();
  await waitFor(
    async () => (await readMetrics(a.root, port)) !== undefined,
    "the second launcher's metrics file",
  );
  // Only the `.prom` files: a write in flight has a temporary name beside them.
  assert.deepEqual(
    listDir(`${a.root}/metrics`).filter((name) => name.endsWith(".prom")),
    [
      `mymodel_serve_${a.port}.prom`,
      `mymodel_serve_${port}.prom`,
    ].sort(),
  );
  assert.doesNotMatch(b.launcher.stderr, /removed metrics file/);
});
