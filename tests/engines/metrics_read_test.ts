/**
 * One read of an engine's `/metrics` (src/engines/metrics_read.ts) against a
 * local server writing each engine's real text: the key sent, the gauges
 * read; refused, not 200, late, too large or another server's text: null.
 */
import assert from "node:assert/strict";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import {
  engineOrigin,
  METRICS_MAX_BYTES,
  readEngineTraffic,
} from "../../src/engines/metrics_read.ts";
import { metricsText } from "../fixtures/engine_metrics.ts";

/** Serves `answer` on a free loopback port for the length of `use`. */
async function serving(
  answer: (req: Request) => Response | Promise<Response>,
  use: (origin: string) => Promise<void>,
): Promise<void> {
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    answer,
  );
  await use(engineOrigin("127.0.0.1", server.addr.port));
}

Deno.test("each kind's gauges are read with the engine's key", async () => {
  for (const kind of ["vllm", "sglang", "llama.cpp"]) {
    const rule = ENGINE_KINDS[kind]!.traffic!;
    let auth: string | null = null;
    await serving((req) => {
      auth = req.headers.get("authorization");
      return new Response(metricsText(kind, {
        running: 2,
        waiting: 5,
        prompt: 10,
        generated: 20,
        model: "m",
      }));
    }, async (origin) => {
      const reading = await readEngineTraffic(origin, rule, "k3y", 2_000);
      assert.equal(reading?.running, 2, kind);
      assert.equal(reading?.waiting, 5, kind);
      assert.equal(auth, "Bearer k3y");
    });
  }
});

Deno.test("not 200, another server's text, too large, late or refused: null", async () => {
  const rule = ENGINE_KINDS.vllm!.traffic!;
  const read = (origin: string, ms = 2_000) =>
    readEngineTraffic(origin, rule, "", ms);
  await serving(
    () => new Response("no", { status: 404 }),
    async (o) => assert.equal(await read(o), null),
  );
  await serving(
    () => new Response("up 1\n"),
    async (o) => assert.equal(await read(o), null),
  );
  await serving(
    () => new Response("#".repeat(METRICS_MAX_BYTES + 1)),
    async (o) => assert.equal(await read(o), null),
  );
  const late = Promise.withResolvers<void>();
  await serving(async () => {
    await late.promise;
    return new Response("");
  }, async (o) => {
    assert.equal(await read(o, 100), null);
    late.resolve();
  });
  let port = 0;
  await serving(() => new Response(""), (o) => {
    port = Number(new URL(o).port);
    return Promise.resolve();
  });
  assert.equal(await read(engineOrigin("127.0.0.1", port)), null);
});

Deno.test("a wildcard host is reached on loopback", () => {
  assert.equal(engineOrigin("0.0.0.0", 5001), "http://127.0.0.1:5001");
  assert.equal(engineOrigin("::", 5001), "http://[::1]:5001");
  assert.equal(engineOrigin("::1", 5001), "http://[::1]:5001");
});
