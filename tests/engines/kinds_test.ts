/** The engine kinds table: one object a kind, in step with the catalogue's names. */
import assert from "node:assert/strict";
import { ENGINE_KINDS, registerEngineKind } from "../../src/engines/kinds.ts";
import { termDrains } from "../../src/engines/kinds/engine_kind.ts";
import { ENGINE_NAMES } from "../../src/catalogue/model_card.ts";
import { catalogue } from "../support/gpu_cards.ts";

// tests/catalogue/schema_test.ts checks the schema's engine enum against ENGINE_NAMES.
Deno.test("the kinds table and the catalogue's engine names list the same kinds, in order", () => {
  assert.deepEqual(Object.keys(ENGINE_KINDS), ENGINE_NAMES);
  for (const [name, kind] of Object.entries(ENGINE_KINDS)) {
    assert.equal(kind.name, name);
  }
});

Deno.test("the built-in kinds ask vLLM, SGLang and llama-server for their help as documented; command has none", () => {
  const help = (name: string) => {
    const kind = ENGINE_KINDS[name]!;
    return kind.flags && [kind.executable, ...kind.flags.helpArgv].join(" ");
  };
  assert.equal(help("vllm"), "vllm serve --help=all");
  assert.equal(help("sglang"), "python3 -m sglang.launch_server --help");
  assert.equal(help("llama.cpp"), "llama-server --help");
  assert.equal(help("command"), undefined);
});

Deno.test("a registered kind's name is a catalogue engine while it is registered; a taken name is refused", () => {
  const toy = { ...ENGINE_KINDS["command"]!, name: "toy" };
  {
    using _toy = registerEngineKind(toy);
    assert.equal(catalogue({ m: { engine: "toy" } }).get("m").engine, "toy");
    assert.throws(
      () => registerEngineKind(toy),
      /Cannot register engine kind toy: it exists/,
    );
  }
  assert.throws(() => catalogue({ m: { engine: "toy" } }), /engine/);
  assert.deepEqual(Object.keys(ENGINE_KINDS), ENGINE_NAMES);
});

Deno.test("SIGTERM is vLLM's own drain only with --shutdown-timeout above 0 (PR #36666); not llama-server's or SGLang's", () => {
  const vllm = ENGINE_KINDS.vllm!;
  assert.equal(termDrains(vllm, ["--shutdown-timeout", "30"]), true);
  assert.equal(termDrains(vllm, ["--shutdown_timeout=5"]), true);
  assert.equal(termDrains(vllm, ["--shutdown-timeout", "0"]), false);
  assert.equal(termDrains(vllm, ["--max-model-len", "4096"]), false);
  for (const name of ["llama.cpp", "sglang"]) {
    assert.equal(
      termDrains(ENGINE_KINDS[name]!, ["--shutdown-timeout", "30"]),
      false,
    );
  }
});
