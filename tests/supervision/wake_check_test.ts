/**
 * Issue 53 item 5: after each wake the engine proves it serves. The serving
 * watch of a llama.cpp sleeper fed its own sleep lines (as the pump feeds
 * them), with a manual clock and a loopback stand-in for `/metrics` and the
 * canary: a wake followed by a request whose tokens move the counter needs no
 * canary; a quiet one gets one canary of one token a few seconds later; a
 * canary that comes back 200 with no token is a stall, journaled; a sleeper
 * asleep again, or an engine that never slept, gets none.
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { configureLogging } from "../../src/common/log.ts";
import { engineSettings } from "../../src/engines/engine_plan.ts";
import type { EnginePlan } from "../../src/engines/engine_plan.ts";
import { LLAMA_CPP } from "../../src/engines/kinds/llama_cpp.ts";
import { LoadWatch } from "../../src/engines/load_watch.ts";
import type { ServerProcess } from "../../src/engines/server_process.ts";
import type { EngineState } from "../../src/supervision/engine_state.ts";
import type { Journal } from "../../src/supervision/journal.ts";
import {
  type ServingEvent,
  ServingWatch,
} from "../../src/supervision/serving_watch.ts";
import {
  canaryWindow,
  carriesOutput,
  WAKE_PROOF_MS,
} from "../../src/supervision/wake_check.ts";
import { metricsText } from "../fixtures/engine_metrics.ts";
import { waitFor } from "../support/helpers.ts";
import { ManualClock } from "../support/manual_clock.ts";

// llama-server's own lines (tools/server/server-context.cpp at de3ff815,
// `handle_sleeping_state` and `load_model`; tests/supervision/sleep_watch_test.ts).
const ENTER =
  "0.02.056.856 I srv  handle_sleep: server is entering sleeping state";
const EXIT =
  "0.03.450.917 I srv  handle_sleep: server is exiting sleeping state";
const LOADED =
  "0.03.500.142 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 256, kv_unified = 'false'";

const TOKEN = {
  choices: [{ index: 0, message: { role: "assistant", content: "Hi" } }],
  usage: { prompt_tokens: 9, completion_tokens: 1 },
};

interface Stage extends AsyncDisposable {
  watch: ServingWatch;
  run: ServerProcess;
  engine: { state: EngineState };
  clock: ManualClock;
  events: ServingEvent[];
  lines: string[];
  said: { event: string; reason: string | null; detail: string | null }[];
  /** What `/metrics` counts next. */
  counts: { running: number; generated: number };
  /** Each canary's body, as sent. */
  canaries: Record<string, unknown>[];
  /** A health round, then the clock moved by `ms`. */
  round(ms?: number): Promise<void>;
  /** The engine's own sleep and wake lines. */
  sleep(): void;
  wake(): void;
}

function stage(
  card: string,
  answer: () => Response = () => Response.json(TOKEN),
): Stage {
  const clock = new ManualClock();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (req) => {
      const path = new URL(req.url).pathname;
      if (path === "/metrics") {
        return new Response(metricsText("llama.cpp", {
          ...s.counts,
          waiting: 0,
          prompt: 10 * s.counts.generated,
          decodes: s.counts.generated,
          busySlots: s.counts.generated,
          model: "m",
        }));
      }
      if (req.method !== "POST") return new Response("", { status: 404 });
      s.canaries.push(await req.json());
      return answer();
    },
  );
  const parsed = Registry.parse(`models:\n  m: ${card}\n`).get("m");
  const settings = engineSettings(parsed, {
    restart: "on-failure",
    failedRetryMs: 0,
    drainTimeoutMs: 0,
    stallTimeoutMs: 0,
    canaryIntervalMs: 300_000,
  });
  const engine = {
    name: "m",
    plan: {
      apiKey: "",
      env: {},
      baseEnv: {},
      card: parsed,
      placement: { gpus: null },
      ...settings,
    } as unknown as EnginePlan,
    state: "ready" as EngineState,
  };
  const run = {
    pid: Deno.pid,
    running: true,
    plan: {
      host: "127.0.0.1",
      port: server.addr.port,
      apiKey: "",
      env: {},
      baseEnv: {},
    },
    watch: new LoadWatch(LLAMA_CPP.output),
  } as unknown as ServerProcess;
  const lines: string[] = [];
  const previous = configureLogging({
    sink: (_level, message) => lines.push(message),
  });
  const said: Stage["said"] = [];
  const journal = {
    record: (e: { event: string; reason?: string; detail?: string }) =>
      said.push({
        event: e.event,
        reason: e.reason ?? null,
        detail: e.detail ?? null,
      }),
  } as unknown as Journal;
  const events: ServingEvent[] = [];
  const abort = new AbortController();
  const watch: ServingWatch = new ServingWatch(
    engine,
    { canaryTimeoutMs: 2_000, journal, clock },
    (e) => {
      events.push(e);
      if (e.kind !== "sleep") return;
      engine.state = watch.sleep.move(e.run, e.asleep, engine.state) ??
        engine.state;
    },
    abort.signal,
  );
  watch.sleep.attach(run);
  const s: Stage = {
    watch,
    run,
    engine,
    clock,
    events,
    lines,
    said,
    counts: { running: 0, generated: 40 },
    canaries: [],
    async round(ms = 0) {
      await watch.round(run, engine.state);
      await clock.advance(ms);
    },
    sleep: () => run.watch.line(ENTER),
    wake() {
      run.watch.line(EXIT);
      run.watch.line(LOADED);
    },
    async [Symbol.asyncDispose]() {
      abort.abort();
      configureLogging(previous);
      await server.shutdown();
    },
  };
  run.watch.served(); // its first load is over: later lines are a wake's
  return s;
}

const SLEEPER = "{ verb: chat, local: m, engine: llama.cpp, sleep_after: 60 }";

/** Asleep for a few rounds (its counter read asleep), then woken. */
async function sleepAndWake(s: Stage): Promise<void> {
  await s.round(1_000);
  s.sleep();
  assert.equal(s.engine.state, "sleeping");
  for (let i = 0; i < 3; i++) await s.round(1_000);
  s.wake();
  assert.equal(s.engine.state, "ready");
}

/** Rounds of `ms` each, for `total` ms. */
async function rounds(s: Stage, total: number, ms = 500): Promise<void> {
  for (let t = 0; t < total; t += ms) await s.round(ms);
}

Deno.test("a quiet wake gets one canary of one token a few seconds after it, and its token proves the wake", async () => {
  await using s = stage(SLEEPER);
  await sleepAndWake(s);
  await rounds(s, WAKE_PROOF_MS - 500);
  assert.equal(s.canaries.length, 0, "not before a request had its time");
  await rounds(s, 1_000);
  await waitFor(
    () => s.watch.detail().sleep?.last_wake_check?.ok === true,
    "the canary's answer",
  );
  assert.equal(s.canaries.length, 1);
  assert.equal(s.canaries[0]!.max_tokens, 1);
  assert.deepEqual(
    { ...s.watch.detail().sleep!.last_wake_check, at: undefined },
    { by: "canary", ok: true, at: undefined },
  );
  await rounds(s, 10_000);
  assert.equal(s.canaries.length, 1, "one per wake");
  assert.deepEqual(s.events.filter((e) => e.kind === "stalled"), []);
});

Deno.test("a wake followed by a request whose tokens move the counter needs no canary", async () => {
  await using s = stage(SLEEPER);
  await sleepAndWake(s);
  await s.round(500);
  s.counts.generated += 5; // the waking request ended with its 5 tokens
  await s.round(500);
  assert.deepEqual(
    { ...s.watch.detail().sleep!.last_wake_check, at: undefined },
    { by: "request", ok: true, at: undefined },
  );
  await rounds(s, 10_000);
  assert.equal(s.canaries.length, 0);
});

Deno.test("a short sleep no round saw asleep: the count read awake before it is the base, so a request that ended before the first round after the wake still proves it", async () => {
  await using s = stage(SLEEPER);
  await s.round(1_000); // read awake: its count before the sleep
  s.sleep();
  s.wake(); // no round in between
  s.counts.generated += 5; // the waking request ended before the next round
  await s.round(500);
  assert.deepEqual(
    { ...s.watch.detail().sleep!.last_wake_check, at: undefined },
    { by: "request", ok: true, at: undefined },
  );
  await rounds(s, 10_000);
  assert.equal(s.canaries.length, 0, "no canary: the request proved it");
});

Deno.test("a request still in flight a few seconds after the wake holds the canary back until its tokens are counted", async () => {
  await using s = stage(SLEEPER);
  await sleepAndWake(s);
  s.counts.running = 1; // a long stream: llama.cpp counts its tokens at its end
  await rounds(s, 2 * WAKE_PROOF_MS);
  assert.equal(s.canaries.length, 0);
  assert.equal(s.watch.detail().sleep!.last_wake_check?.ok, null, "pending");
  s.counts = { running: 0, generated: s.counts.generated + 300 };
  await rounds(s, 2 * WAKE_PROOF_MS);
  assert.equal(s.canaries.length, 0);
  assert.equal(s.watch.detail().sleep!.last_wake_check?.by, "request");
});

Deno.test("a wake whose canary comes back 200 with no token is caught: a warning naming the engine and pid, journaled, and the stall path", async () => {
  for (
    const [body, seen] of [
      [{ choices: [], usage: { completion_tokens: 0 } }, /no token/],
      ["", /no token/],
    ] as const
  ) {
    await using s = stage(
      SLEEPER,
      () => typeof body === "string" ? new Response(body) : Response.json(body),
    );
    await sleepAndWake(s);
    await rounds(s, WAKE_PROOF_MS + 500);
    await waitFor(() => s.events.some((e) => e.kind === "stalled"), "caught");
    const stalled = s.events.find((e) => e.kind === "stalled")!;
    assert.equal(stalled.run, s.run);
    assert.match((stalled as { seen: string }).seen, seen);
    assert.equal(s.watch.detail().sleep!.last_wake_check?.ok, false);
    assert.equal(s.watch.detail().sleep!.last_wake_check?.by, "canary");
    const entry = s.said.find((e) => e.reason === "wake-check-failed");
    assert.equal(entry?.event, "sleep");
    assert.match(entry!.detail!, seen);
    assert.ok(
      s.lines.some((l) =>
        l.startsWith(`engine m (pid ${Deno.pid}) `) && seen.test(l)
      ),
      s.lines.join("\n"),
    );
  }
});

Deno.test("a wake whose canary answers 503 is caught as well", async () => {
  await using s = stage(
    SLEEPER,
    () => Response.json({ error: { message: "no model" } }, { status: 503 }),
  );
  await sleepAndWake(s);
  await rounds(s, WAKE_PROOF_MS + 500);
  await waitFor(() => s.events.some((e) => e.kind === "stalled"), "caught");
  const stalled = s.events.find((e) => e.kind === "stalled") as {
    seen: string;
  };
  assert.match(stalled.seen, /answered 503: no model/);
});

Deno.test("no canary to a sleeper asleep again before the wake was proven, nor to one that never slept", async () => {
  {
    await using s = stage(SLEEPER);
    await sleepAndWake(s);
    await s.round(500);
    s.sleep(); // an idle time shorter than the wait
    await rounds(s, 4 * WAKE_PROOF_MS);
    assert.equal(s.canaries.length, 0);
    assert.deepEqual(
      { ...s.watch.detail().sleep!.last_wake_check, at: undefined },
      { by: null, ok: null, at: undefined },
    );
  }
  {
    await using s = stage(SLEEPER);
    await rounds(s, 4 * WAKE_PROOF_MS);
    assert.equal(s.canaries.length, 0);
    assert.equal(s.watch.detail().sleep!.last_wake_check, null);
  }
});

Deno.test("a sleeper of 2 s is checked within its idle time: the canary goes at 1 s, never past 1.5 s", async () => {
  assert.deepEqual(canaryWindow(2), { fromMs: 1_000, untilMs: 1_500 });
  assert.deepEqual(canaryWindow(600), {
    fromMs: WAKE_PROOF_MS,
    untilMs: 450_000,
  });
  {
    await using s = stage(
      "{ verb: chat, local: m, engine: llama.cpp, sleep_after: 2 }",
    );
    await sleepAndWake(s);
    await rounds(s, 1_250, 250);
    await waitFor(() => s.canaries.length === 1, "a canary at 1 s");
  }
  {
    // Rounds 2 s apart: the first after the wake is past the window.
    await using s = stage(
      "{ verb: chat, local: m, engine: llama.cpp, sleep_after: 2 }",
    );
    await sleepAndWake(s);
    await rounds(s, 10_000, 2_000);
    assert.equal(s.canaries.length, 0);
  }
});

Deno.test("a canary's answer carries output: a chat's content or its completion tokens, a completion's text, an embedding", () => {
  const yes: [Parameters<typeof carriesOutput>[0], unknown][] = [
    ["chat", TOKEN],
    ["chat", {
      choices: [{ message: { content: "" } }],
      usage: { completion_tokens: 1 },
    }],
    ["chat", { choices: [{ message: { content: "x" } }] }],
    ["complete", { choices: [{ text: " t" }] }],
    ["embed", { data: [{ embedding: [0.1] }] }],
  ];
  const no: [Parameters<typeof carriesOutput>[0], unknown][] = [
    ["chat", { choices: [] }],
    ["chat", {
      choices: [{ message: { content: "" } }],
      usage: { completion_tokens: 0 },
    }],
    ["chat", { choices: [{ text: "x" }] }],
    ["complete", { choices: [{ text: "" }] }],
    ["embed", { data: [{ embedding: [] }] }],
    ["chat", null],
  ];
  for (const [verb, body] of yes) {
    assert.equal(
      carriesOutput(verb, JSON.stringify(body)),
      true,
      JSON.stringify(body),
    );
  }
  for (const [verb, body] of no) {
    assert.equal(
      carriesOutput(verb, JSON.stringify(body)),
      false,
      JSON.stringify(body),
    );
  }
  assert.equal(carriesOutput("chat", "not json"), false);
  assert.equal(carriesOutput("chat", ""), false);
});
