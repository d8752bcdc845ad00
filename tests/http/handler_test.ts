/**
 * The management API through its handler (no socket), and the embedding API
 * (`Semioserve` in this process) over stand-in engines.
 */
import assert from "node:assert/strict";
import { Semioserve } from "../../mod.ts";
import {
  freePorts,
  getJson,
  inProcessSite,
  makeRoot,
  pidAlive,
  waitFor,
} from "../support/helpers.ts";

const CATALOGUE =
  new URL("../fixtures/stand_in.yaml", import.meta.url).pathname;

/** A prepared (not started) launcher for `models`, with stand-in engines on PATH. */
async function prepared(
  models: string[],
  host = "127.0.0.1",
): Promise<{ serve: Semioserve; port: number } & AsyncDisposable> {
  const site = await inProcessSite();
  const port = freePorts(models.length);
  const serve = new Semioserve({
    models,
    host,
    port,
    directory: site.root,
    catalogue: CATALOGUE,
    dev_mode: true,
    handleSignals: false,
    graceMs: 2_000,
  });
  await serve.prepare();
  return {
    serve,
    port,
    [Symbol.asyncDispose]: () => site[Symbol.asyncDispose](),
  };
}

function get(path: string, method = "GET", host = "127.0.0.1:5000"): Request {
  return new Request(`http://${host}${path}`, { method });
}

Deno.test("GET /health counts configured engines without contacting them", async () => {
  await using site = await prepared(["alpha", "hung"]);
  const { serve } = site;
  const response = await serve.handler()(get("/health"));
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "application/json");
  assert.deepEqual(await response.json(), { status: "ok", models: 2 });
});

Deno.test("GET /models reports engines that never started as not healthy, without polling", async () => {
  await using site = await prepared(["beta", "hung"]);
  const { serve, port } = site;
  // Healthy answers on the engines' ports: "not healthy" is then the
  // launcher's decision, and any poll is counted.
  let polls = 0;
  const engines = [port + 1, port + 2].map((p) =>
    Deno.serve({ hostname: "127.0.0.1", port: p, onListen() {} }, () => {
      polls++;
      return Response.json({});
    })
  );
  let response: Response;
  try {
    response = await serve.handler()(get("/models"));
  } finally {
    await Promise.all(engines.map((engine) => engine.shutdown()));
  }
  assert.equal(polls, 0, "an engine that never started was polled");
  assert.equal(response.headers.get("content-type"), "application/json");
  const body = await response.json();
  assert.deepEqual(Object.keys(body.active), ["beta", "hung"]);
  assert.equal(body.active.beta.healthy, false);
  assert.equal(body.active.beta.verb, "embed");
  assert.deepEqual(body.catalogue, [...body.catalogue].sort());
  assert.equal(body.catalogue.length, 27);
});

Deno.test("engines bound to every interface are reported under the host the client used", async () => {
  await using site = await prepared(["alpha"], "0.0.0.0");
  const { serve } = site;
  const [engine] = serve.engines;
  const response = await serve.handler()(
    get("/models", "GET", "gpu-7.example:5000"),
  );
  const body = await response.json();
  assert.equal(
    body.active.alpha.url,
    `http://gpu-7.example:${engine!.plan.port}/v1`,
  );
});

for (
  const path of ["/", "/healthz", "/health/", "/models/alpha", "/v1/models"]
) {
  Deno.test(`any other path (${path}) is 404 with a JSON body`, async () => {
    await using site = await prepared(["alpha"]);
    const { serve } = site;
    const response = await serve.handler()(get(path));
    assert.equal(response.status, 404);
    assert.equal(response.headers.get("content-type"), "application/json");
    assert.deepEqual(await response.json(), { error: "not found" });
  });
}

for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
  Deno.test(`${method} on /health and /models is 405 with an Allow header`, async () => {
    await using site = await prepared(["alpha"]);
    const { serve } = site;
    for (const path of ["/health", "/models"]) {
      const response = await serve.handler()(get(path, method));
      assert.equal(response.status, 405);
      assert.equal(response.headers.get("allow"), "GET, HEAD");
      assert.equal(response.headers.get("content-type"), "application/json");
      await response.body?.cancel();
    }
  });
}

Deno.test("a query string does not change the route", async () => {
  await using site = await prepared(["alpha"]);
  const { serve } = site;
  const health = await serve.handler()(get("/health?verbose=1#x"));
  assert.deepEqual(await health.json(), { status: "ok", models: 1 });
  const models = await serve.handler()(get("/models?x=/health"));
  assert.ok((await models.json()).active.alpha);
  const other = await serve.handler()(get("/nope?/health"));
  assert.equal(other.status, 404);
  await other.body?.cancel();
});

Deno.test("HEAD /models answers like GET without a body", async () => {
  await using site = await prepared(["alpha"]);
  const { serve } = site;
  const response = await serve.handler()(get("/models", "HEAD"));
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "application/json");
  assert.equal(await response.text(), "");
});

Deno.test("HEAD /health answers like GET without a body", async () => {
  await using site = await prepared(["alpha"]);
  const { serve } = site;
  const response = await serve.handler()(get("/health", "HEAD"));
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "application/json");
  assert.equal(await response.text(), "");
});

Deno.test("Semioserve is a singleton until reset", async () => {
  await Semioserve.reset();
  const first = new Semioserve({ models: ["alpha"], directory: "/tmp" });
  const second = new Semioserve({ models: ["beta"], directory: "/tmp" });
  assert.equal(second, first);
  assert.deepEqual(second.options.models, ["alpha"]);
  await Semioserve.reset();
  const third = new Semioserve({ models: ["beta"], directory: "/tmp" });
  assert.notEqual(third, first);
  await Semioserve.reset();
});

Deno.test("embedded: run() serves until the AbortSignal fires, then stops every engine", async () => {
  await using site = await inProcessSite();
  const root = site.root;
  const controller = new AbortController();
  const port = freePorts(2);
  let listenedAt: URL | undefined;
  const serve = new Semioserve({
    models: ["alpha", "forker"],
    host: "127.0.0.1",
    port,
    directory: root,
    catalogue: CATALOGUE,
    dev_mode: true,
    signal: controller.signal,
    handleSignals: false,
    onListen: (url) => listenedAt = url,
  });
  const running = serve.run();
  try {
    await waitFor(() => listenedAt !== undefined, "listening");
    assert.equal(listenedAt?.href, `http://127.0.0.1:${port}/`);
    await waitFor(async () => {
      const { body } = await getJson(`http://127.0.0.1:${port}/models`);
      const active =
        (body as { active: Record<string, { healthy: boolean }> }).active;
      return Object.values(active).every((m) => m.healthy);
    }, "engines healthy");
    const pids = serve.engines.map((e) => e.pid!);
    controller.abort();
    await running;
    for (const pid of pids) assert.ok(!pidAlive(pid), `engine ${pid} stopped`);
    assert.ok(serve.engines.every((e) => !e.running));
  } finally {
    controller.abort();
    await running.catch(() => {});
  }
});

Deno.test("embedded: stop() and `await using` shut the launcher down", async () => {
  await using site = await prepared(["alpha"]);
  const { serve } = site;
  const running = serve.run();
  await waitFor(() => serve.url !== undefined, "listening");
  await waitFor(() => serve.engines[0]!.pid !== undefined, "engine started");
  const pid = serve.engines[0]!.pid!;
  {
    await using _s = serve;
  }
  await running;
  assert.ok(!pidAlive(pid));
});

Deno.test("embedded: start-up errors reject run() before anything starts", async () => {
  await Semioserve.reset();
  const root = await makeRoot(["models"]);
  const serve = new Semioserve({
    models: ["alpha"],
    directory: root,
    catalogue: CATALOGUE,
    handleSignals: false,
  });
  await assert.rejects(serve.run(), {
    name: "AssertionError",
    message: /missing logs, metrics, data/,
  });
  assert.equal(serve.engines.length, 0);
  await Semioserve.reset();
  await Deno.remove(root, { recursive: true });
});
