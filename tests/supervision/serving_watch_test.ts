/**
 * The serving watch's rounds against a stand-in `/metrics` and canary endpoint
 * whose answers each test sets: a canary's failures count in a row only while
 * no counter moves; odd values cost one warning each. (The 501 of a real
 * llama-server without `--embeddings` is tested against it:
 * tests/serve/llama_signals_test.ts.)
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { configureLogging } from "../../src/common/log.ts";
import type { ServerProcess } from "../../src/engines/server_process.ts";
import {
  type EnginePlan,
  engineSettings,
} from "../../src/engines/engine_plan.ts";
import {
  type ServingEvent,
  ServingWatch,
} from "../../src/supervision/serving_watch.ts";
import { waitFor } from "../support/helpers.ts";
import { LLAMA_CPP_METRICS, metricsText } from "../fixtures/engine_metrics.ts";

interface Stage extends AsyncDisposable {
  watch: ServingWatch;
  run: ServerProcess;
  events: ServingEvent[];
  lines: string[];
  /** What `/metrics` answers next. */
  metrics: string;
  canaries: number;
}

function stage(
  card: string,
  canaryIntervalMs: number,
  stallTimeoutMs = 0,
): Stage {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (req) => {
      if (new URL(req.url).pathname === "/metrics") {
        return new Response(s.metrics);
      }
      s.canaries++;
      return new Response("busy", { status: 503 });
    },
  );
  const run = {
    pid: 1,
    plan: {
      host: "127.0.0.1",
      port: server.addr.port,
      apiKey: "",
      env: {},
      baseEnv: {},
    },
  } as unknown as ServerProcess;
  const lines: string[] = [];
  const previous = configureLogging({
    sink: (_level, message) => lines.push(message),
  });
  const events: ServingEvent[] = [];
  const abort = new AbortController();
  const parsed = Registry.parse(`models:\n  m: ${card}\n`).get("m");
  const launcher = { restart: "on-failure" as const, failedRetryMs: 0 };
  const settings = engineSettings(parsed, {
    ...launcher,
    drainTimeoutMs: 0,
    stallTimeoutMs,
    canaryIntervalMs,
  });
  const engine = {
    name: "m",
    plan: {
      apiKey: "",
      env: {},
      baseEnv: {},
      card: parsed,
      ...settings,
    } as unknown as EnginePlan,
    state: "ready" as const,
  };
  const watch = new ServingWatch(
    engine,
    { canaryTimeoutMs: 2_000 },
    (e) => events.push(e),
    abort.signal,
  );
  const s: Stage = {
    watch,
    run,
    events,
    lines,
    metrics: "",
    canaries: 0,
    async [Symbol.asyncDispose]() {
      abort.abort();
      configureLogging(previous);
      await server.shutdown();
    },
  };
  return s;
}

function vllm(generated: number): string {
  return metricsText("vllm", {
    running: 0,
    waiting: 0,
    prompt: generated,
    generated,
    model: "m",
  });
}

Deno.test("the canary's streak: counters moving between two failed canaries reset it; two in a row with nothing moving are a stall", async () => {
  await using s = stage("{ verb: chat, hub: org/m }", 1);
  /** Rounds until one more canary has been answered. */
  const canary = async () => {
    const sent = s.canaries;
    const before = s.watch.detail().canary;
    await waitFor(async () => {
      await s.watch.round(s.run, "ready");
      await new Promise((r) => setTimeout(r, 5));
      return s.canaries > sent && s.watch.detail().canary !== before;
    }, "a canary answered");
  };
  s.metrics = vllm(10);
  await canary();
  assert.match(
    s.lines.at(-1)!,
    /canary \/v1\/chat\/completions failed: answered 503: busy \(1 in a row\)/,
  );
  // Real traffic: the counters move.
  s.metrics = vllm(25);
  await s.watch.round(s.run, "ready");
  await canary();
  assert.match(s.lines.at(-1)!, /\(1 in a row\)/);
  assert.equal(s.events.length, 0);
  await canary();
  assert.match(s.lines.at(-1)!, /\(2 in a row\)/);
  assert.deepEqual(s.events.map((e) => e.kind), ["stalled"]);
});

Deno.test("odd values cost one warning each, however many rounds read them; NaN is named", async () => {
  await using s = stage(
    "{ verb: chat, local: m, engine: llama.cpp }",
    0,
  );
  s.metrics = LLAMA_CPP_METRICS.replace(
    /^llamacpp:requests_deferred 0$/m,
    "llamacpp:requests_deferred -1",
  ) + "llamacpp:requests_processing 0\n";
  for (let i = 0; i < 4; i++) await s.watch.round(s.run, "ready");
  assert.equal(s.watch.detail().traffic?.waiting, 0);
  assert.deepEqual(
    s.lines.map((l) => l.replace(/http:\S+\/metrics/, "URL")),
    [
      "engine m: its traffic at URL: llamacpp:requests_deferred reads -1 (a count cannot be negative: read as 0) (said once)",
      "engine m: its traffic at URL: llamacpp:requests_processing is written twice (read once) (said once)",
    ],
  );
  s.lines.length = 0;
  s.metrics = LLAMA_CPP_METRICS.replace(
    /^llamacpp:requests_processing 0$/m,
    "llamacpp:requests_processing NaN",
  );
  for (let i = 0; i < 3; i++) await s.watch.round(s.run, "ready");
  assert.equal(s.watch.detail().traffic, null);
  assert.equal(s.lines.length, 1);
  assert.match(
    s.lines[0]!,
    /^engine m: cannot read its traffic at \S+: llamacpp:requests_processing is NaN \(traffic unknown/,
  );
});

Deno.test("SGLang without realtime_tokens_total: no stall rule, said once; with it frozen under load, stalled", async () => {
  const text = (decode: boolean) => {
    const body = metricsText("sglang", {
      running: 1,
      waiting: 0,
      prompt: 0,
      generated: 0,
      model: "m",
    });
    return decode
      ? body
      : body.split("\n").filter((l) => !l.includes("realtime")).join("\n");
  };
  for (const decode of [false, true]) {
    await using s = stage("{ verb: chat, hub: org/m, engine: sglang }", 0, 30);
    s.metrics = text(decode);
    for (let i = 0; i < 4; i++) {
      await s.watch.round(s.run, "ready");
      await new Promise((r) => setTimeout(r, 20));
    }
    if (decode) {
      // Each round says it; the engine run acts on the first.
      assert.equal(s.events[0]?.kind, "stalled");
      continue;
    }
    assert.equal(s.events.length, 0);
    assert.deepEqual(
      s.lines.map((l) => l.replace(/http:\S+\/metrics/, "URL")),
      [
        "engine m: its traffic at URL has no sglang:realtime_tokens_total: no stall rule (its token counters move only when a request ends) (said once)",
      ],
    );
  }
});
