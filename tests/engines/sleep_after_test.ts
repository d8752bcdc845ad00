import assert from "node:assert/strict";
import type { ModelCard } from "../../src/catalogue.ts";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import { canaryRequest } from "../../src/engines/traffic.ts";
import {
  launcherSleep,
  sleepArgs,
  sleepEnv,
  sleepSeconds,
  wakesItself,
} from "../../src/engines/sleep_after.ts";

function card(engine: string, more: Partial<ModelCard> = {}): ModelCard {
  return {
    name: "dozy",
    verb: "chat",
    modality: ["text"],
    local: "dozy",
    engine,
    args: [],
    env: {},
    ...more,
  };
}

Deno.test("sleep_after on a llama.cpp card is its own --sleep-idle-seconds; 0 or unset adds nothing", () => {
  const kind = ENGINE_KINDS["llama.cpp"]!;
  const dozy = card("llama.cpp", { sleepAfter: 600 });
  assert.deepEqual(sleepArgs(dozy, kind), ["--sleep-idle-seconds", "600"]);
  assert.equal(sleepSeconds(dozy, kind), 600);
  assert.deepEqual(sleepArgs(card("llama.cpp", { sleepAfter: 0 }), kind), []);
  assert.deepEqual(sleepArgs(card("llama.cpp"), kind), []);
  assert.equal(
    sleepSeconds(card("llama.cpp", { sleepAfter: 0 }), kind),
    undefined,
  );
  assert.equal(
    canaryRequest(dozy, kind),
    null,
    "no canary: it would keep it awake",
  );
});

Deno.test("sleep-idle-seconds in a llama.cpp card's args keeps working and means the same; both set is refused naming both", () => {
  const kind = ENGINE_KINDS["llama.cpp"]!;
  const args = ["--sleep-idle-seconds", "2"];
  assert.deepEqual(sleepArgs(card("llama.cpp", { args }), kind), []);
  assert.equal(sleepSeconds(card("llama.cpp", { args }), kind), 2);
  assert.throws(
    () => sleepArgs(card("llama.cpp", { args, sleepAfter: 2 }), kind),
    /^EngineError: Cannot prepare dozy: card 'dozy' sets both sleep_after and --sleep-idle-seconds in args \(expected one of them[^\n]*$/,
  );
});

Deno.test("sleep_after on a vLLM card turns on its sleep mode and parked-request count, and its development routes in its environment", () => {
  const kind = ENGINE_KINDS.vllm!;
  const given = card("vllm", { sleepAfter: 60 });
  assert.deepEqual(sleepArgs(given, kind), [
    "--enable-sleep-mode",
    "--enable-server-load-tracking",
  ]);
  assert.deepEqual(sleepEnv(given, kind), { VLLM_SERVER_DEV_MODE: "1" });
  assert.equal(sleepSeconds(given, kind), 60);
  assert.equal(wakesItself(given, kind), false, "the launcher wakes it");
  assert.equal(launcherSleep(given, kind)?.load.path, "/load");
  assert.deepEqual(sleepEnv(card("vllm", {}), kind), {});
  assert.deepEqual(sleepArgs(card("vllm", { sleepAfter: 0 }), kind), []);
});

Deno.test("sleep_after is refused in one line for SGLang and command (no request can wake them)", () => {
  const why: Record<string, RegExp> = {
    sglang: /no request can wake a sleeping SGLang engine/,
    command: /no request can wake a sleeping command engine/,
  };
  for (const [engine, says] of Object.entries(why)) {
    const kind = ENGINE_KINDS[engine]!;
    assert.throws(
      () => sleepArgs(card(engine, { sleepAfter: 60 }), kind),
      (e: Error) => {
        assert.match(
          e.message,
          /^Cannot prepare dozy: card 'dozy' sets sleep_after, /,
        );
        assert.match(e.message, says);
        assert.ok(!e.message.includes("\n"), "one line");
        return true;
      },
    );
    assert.deepEqual(sleepArgs(card(engine, { sleepAfter: 0 }), kind), []);
  }
});
