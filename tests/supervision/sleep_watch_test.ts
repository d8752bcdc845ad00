/**
 * The sleep watch on llama.cpp's own lines (fed to the run's load watch as
 * the pump does), with a manual clock and a stand-in run whose pid is this
 * test's own process: its resident memory is what is measured, so growing it
 * here grows the "residue" for real.
 */
import assert from "node:assert/strict";
import { configureLogging } from "../../src/common/log.ts";
import type { ModelCard } from "../../src/catalogue.ts";
import type { EnginePlan } from "../../src/engines/engine_plan.ts";
import { LLAMA_CPP } from "../../src/engines/kinds/llama_cpp.ts";
import { LoadWatch } from "../../src/engines/load_watch.ts";
import type { ServerProcess } from "../../src/engines/server_process.ts";
import type { EngineState } from "../../src/supervision/engine_state.ts";
import type { Journal } from "../../src/supervision/journal.ts";
import { SleepWatch } from "../../src/supervision/sleep_watch.ts";
import { ManualClock } from "../support/manual_clock.ts";

const ENTER =
  "0.02.056.856 I srv  handle_sleep: server is entering sleeping state";
const EXIT =
  "0.03.450.917 I srv  handle_sleep: server is exiting sleeping state";
const LOADED =
  "0.03.500.142 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 256, kv_unified = 'false'";
const ABORT =
  "/src/tools/server/server-context.cpp:966: failed to reload model after sleeping";

function stage() {
  const card = {
    name: "dozy",
    engine: "llama.cpp",
    args: [],
    sleepAfter: 2,
  } as unknown as ModelCard;
  const engine = {
    name: "dozy",
    plan: { card, placement: { gpus: null } } as unknown as EnginePlan,
    state: "ready" as EngineState,
  };
  const said: { reason: string | null; detail: string | null }[] = [];
  const journal = {
    record: (e: { reason?: string | null; detail?: string | null }) =>
      said.push({ reason: e.reason ?? null, detail: e.detail ?? null }),
  } as unknown as Journal;
  const clock = new ManualClock();
  const run = {
    pid: Deno.pid,
    running: true,
    watch: new LoadWatch(LLAMA_CPP.output),
  } as unknown as ServerProcess;
  const events: boolean[] = [];
  const watch: SleepWatch = new SleepWatch(engine, { journal, clock }, (e) => {
    events.push(e.asleep);
    engine.state = watch.move(e.run, e.asleep, engine.state) ?? engine.state;
  });
  watch.attach(run);
  return { engine, watch, run, clock, said, events };
}

Deno.test("its own lines move it to sleeping and back at once; its residue is journaled once settled, each wake with its seconds", async () => {
  configureLogging({ level: "error" });
  const { engine, watch, run, clock, said, events } = stage();
  await watch.round(run, "ready"); // awake: measured
  run.watch.line(ENTER);
  assert.equal(engine.state, "sleeping");
  await watch.round(run, "sleeping");
  assert.equal(watch.view()!.residue_bytes, null, "not before it settled");
  await clock.advance(1_000);
  await watch.round(run, "sleeping");
  const view = watch.view()!;
  assert.ok(view.residue_bytes! > 0 && view.awake_bytes! > 0);
  assert.equal(view.by, "rss");
  assert.equal(view.sleeps, 1);
  assert.match(
    said.at(-1)!.detail!,
    /^asleep after 2 s idle: freed [\d.]+ MiB, keeps [\d.]+ MiB$/,
  );
  run.watch.line(EXIT);
  assert.equal(engine.state, "ready", "at the exit line, not a round later");
  // A poll asked during the reload still says asleep: not believed.
  assert.equal(watch.move(run, true, "ready"), undefined);
  await clock.advance(360);
  run.watch.line(LOADED);
  assert.deepEqual(said.at(-1), {
    reason: "woken",
    detail: "woken by a request in 0.36 s",
  });
  assert.equal(watch.view()!.wakes, 1);
  assert.equal(watch.view()!.last_wake_seconds, 0.36);
  assert.deepEqual(events, [true, false]);
});

Deno.test("a poll asked before the sleep line answered 'awake' is stale: it does not undo the line", async () => {
  const { engine, watch, run, clock } = stage();
  await watch.round(run, "ready"); // the round's poll is asked now…
  await clock.advance(10);
  run.watch.line(ENTER); // …the line comes before its answer
  assert.equal(engine.state, "sleeping");
  assert.equal(watch.move(run, false, "sleeping"), undefined);
  await clock.advance(100);
  await watch.round(run, "sleeping"); // a later round's poll is believed
  assert.equal(watch.move(run, false, "sleeping"), "ready");
});

Deno.test("a residue that grows by more than 256 MiB over a sleeper's life is journaled as a warning, once", async () => {
  configureLogging({ level: "error" });
  const { watch, clock, said } = stage();
  // The sleeper: a process of its own, whose resident memory only it moves
  // (this test's own is shared with the other files the suite runs).
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      `const kept = [];
      Deno.addSignalListener("SIGUSR1", () => {
        kept.push(new Uint8Array(320 * 2 ** 20).fill(1));
        console.log("grown");
      });
      console.log("ready");
      setTimeout(() => {}, 60_000);`,
    ],
    stdout: "piped",
    stderr: "null",
    stdin: "null",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream())
    [Symbol.asyncIterator]();
  const said_ = async (word: string) => {
    let text = "";
    while (!text.includes(word)) text += (await lines.next()).value ?? "";
  };
  try {
    await said_("ready");
    const run = {
      pid: child.pid,
      running: true,
      watch: new LoadWatch(LLAMA_CPP.output),
    } as unknown as ServerProcess;
    watch.attach(run);
    run.watch.line(ENTER);
    await clock.advance(1_000);
    await watch.round(run, "sleeping");
    child.kill("SIGUSR1");
    await said_("grown");
    await watch.round(run, "sleeping");
    await watch.round(run, "sleeping");
    const warned = said.filter((s) => s.reason === "residue-grew");
    assert.equal(warned.length, 1, JSON.stringify(said));
    assert.match(warned[0]!.detail!, /^its residue grew from [\d.]+ MiB to /);
  } finally {
    child.kill();
    await child.status;
    await lines.return?.();
  }
});

Deno.test("a wake whose reload aborts makes the run's exit cause wake-failed with the engine's line, over one printed before it", () => {
  const { run } = stage();
  run.watch.served();
  run.watch.line(EXIT);
  run.watch.line(
    "0.03.460.000 E gguf_init_from_file: failed to open GGUF file",
  );
  run.watch.line(ABORT);
  assert.equal(run.watch.cause?.cause, "wake-failed");
  assert.match(
    run.watch.cause!.message,
    /failed to reload model after sleeping/,
  );
});
