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
import { ManualClock } from "../support/manual_clock.ts";
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
  o: {
    clock?: ManualClock;
    canaryTimeoutMs?: number;
    /** The canary's answer (503 `busy` when not given). */
    canary?: (req: Request) => Response | Promise<Response>;
  } = {},
): Stage {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (req) => {
      if (new URL(req.url).pathname === "/metrics") {
        return new Response(s.metrics);
      }
      if (req.method !== "POST") return new Response("", { status: 404 });
      s.canaries++;
      return o.canary?.(req) ?? new Response("busy", { status: 503 });
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
    {
      canaryTimeoutMs: o.canaryTimeoutMs ?? 2_000,
      ...o.clock && { clock: o.clock },
    },
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
      return s.canaries > sent;
    }, "a canary sent");
    // No round until it is answered: a failure standing is sent again at the next.
    await waitFor(() => s.watch.detail().canary !== before, "its answer");
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

Deno.test("a failed canary is never forgiven by its own prompt: an engine that prefills and never decodes is stalled at the second failure in a row", async () => {
  const cards = {
    vllm: "{ verb: chat, hub: org/m }",
    "llama.cpp": "{ verb: chat, local: m, engine: llama.cpp }",
  };
  for (const [kind, card] of Object.entries(cards)) {
    const clock = new ManualClock();
    // Its counters at rest; each canary is prefilled (its prompt counted, one
    // llama_decode) and then never answered, as a wedged decode loop leaves it.
    const n = { prompt: 120, generated: 40, decodes: 60, busySlots: 60 };
    await using s = stage(card, 10_000, 0, {
      clock,
      canaryTimeoutMs: 50,
      canary(req) {
        n.prompt += 9;
        n.decodes++;
        n.busySlots++;
        return new Promise((answer) =>
          req.signal.addEventListener("abort", () => answer(new Response()))
        );
      },
    });
    const round = async (ms: number) => {
      await clock.advance(ms);
      s.metrics = metricsText(kind, {
        running: 0,
        waiting: 0,
        ...n,
        model: "m",
      });
      await s.watch.round(s.run, "ready");
    };
    const failed = (count: number) =>
      waitFor(
        () => s.lines.filter((l) => l.includes("failed")).length >= count,
        `canary ${count} failed`,
      );
    await round(0);
    for (const count of [1, 2]) {
      await round(10_000); // quiet for the interval (or a failure standing): one is sent
      await waitFor(() => s.canaries === count, `${kind}: canary ${count}`);
      await round(1_000); // its own prompt and step read while it hangs
      await failed(count);
    }
    assert.deepEqual(
      s.lines.filter((l) => l.includes("failed")).map((l) =>
        /\((\d) in a row\)/.exec(l)?.[1]
      ),
      ["1", "2"],
      kind,
    );
    assert.deepEqual(s.events.map((e) => e.kind), ["stalled"], kind);
  }
});

Deno.test("tokens/s from llama.cpp's six significant digits past 1e8 decodes: a true 50 tokens/s stream reads 50 within a fifth, never 0, 120 or null once known (within 5 minutes)", async () => {
  const clock = new ManualClock();
  await using s = stage("{ verb: chat, local: m, engine: llama.cpp }", 0, 0, {
    clock,
  });
  // One slot decoding 50 tokens/s on a server that has made 1e8 decodes, 1.2 busy slots each.
  const shown: (number | null)[] = [];
  for (let t = 0; t <= 600; t += 10) {
    const decodes = 100_000_000 + 50 * t;
    s.metrics = metricsText("llama.cpp", {
      running: 1,
      waiting: 0,
      prompt: 5_000_000,
      generated: 90_000_000,
      decodes,
      busySlots: 120_000_000 + 50 * t,
      model: "m",
    });
    await s.watch.round(s.run, "ready");
    shown.push(s.watch.detail().traffic?.tokens_per_s ?? null);
    await clock.advance(10_000);
  }
  const known = shown.filter((v) => v !== null);
  assert.ok(
    known.length >= 30 && known.every((v) => Math.abs(v - 50) <= 10) &&
      shown.indexOf(known[0]!) + known.length === shown.length,
    `tokens/s shown every 10 s: ${shown.join(", ")}`,
  );
  // The stream ends: idle, the figure is 0 again, not the last one held.
  for (let i = 0; i < 2; i++) {
    s.metrics = s.metrics.replace(
      /^llamacpp:requests_processing 1$/m,
      "llamacpp:requests_processing 0",
    );
    await s.watch.round(s.run, "ready");
    await clock.advance(10_000);
  }
  assert.equal(s.watch.detail().traffic?.tokens_per_s, 0);
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
