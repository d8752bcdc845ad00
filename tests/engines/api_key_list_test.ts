/**
 * Engine keys a kind reads as a list (issue 47, item 8): llama.cpp's
 * `--api-key` is a comma-separated row (`common/arg.cpp`, `parse_csv_row`),
 * so a key with a comma, or opening with a quote, is other keys to it. The
 * rule is checked against the real llama-server, then as the kind states it.
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { keySplit } from "../../src/engines/engine_plan.ts";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import { freePorts, healthOk, waitFor } from "../support/helpers.ts";
import { llamaRoot } from "../support/llama.ts";

const CARDS = Registry.parse(
  [
    "models:",
    "  llama: { verb: chat, local: tiny-llama, engine: llama.cpp }",
    "  vllm: { verb: chat, hub: org/m }",
    "  sglang: { verb: chat, hub: org/m, engine: sglang }",
    "  own: { verb: chat, hub: org/m, engine: command, command: [x] }",
    "",
  ].join("\n"),
);

Deno.test("the real llama-server splits --api-key at commas and unquotes a leading quote: neither key as written is accepted", async () => {
  const { root, model, server } = await llamaRoot();
  const port = freePorts(1);
  const argv = ENGINE_KINDS["llama.cpp"]!.argv({
    model,
    isLocal: true,
    host: "127.0.0.1",
    port,
    apiKey: 'one,two,"three"',
    card: CARDS.get("llama"),
  });
  const child = new Deno.Command(server, {
    args: argv,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const base = `http://127.0.0.1:${port}`;
  const status = async (key: string) => {
    const response = await fetch(`${base}/v1/models`, {
      headers: { authorization: `Bearer ${key}` },
    });
    await response.body?.cancel();
    return response.status;
  };
  try {
    await waitFor(() => healthOk(base), "llama-server healthy");
    assert.equal(await status('one,two,"three"'), 401, "the key as sent");
    assert.equal(await status('"three"'), 401, "a quoted field as written");
    for (const part of ["one", "two", "three"]) {
      assert.equal(await status(part), 200, part);
    }
  } finally {
    child.kill();
    await child.status;
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("keySplit: the llama.cpp kind refuses a comma or a leading quote; the other kinds take the key whole", () => {
  const llama = CARDS.get("llama");
  assert.match(keySplit(llama, "a,b")!, /^holds ','/);
  assert.match(keySplit(llama, '"ab')!, /^starts with '"'/);
  assert.equal(keySplit(llama, 'a"b'), undefined, "a quote inside is kept");
  assert.equal(keySplit(llama, "plain-key"), undefined);
  assert.equal(keySplit(llama, ""), undefined);
  for (const name of ["vllm", "sglang", "own"]) {
    assert.equal(keySplit(CARDS.get(name), 'a,b,"c'), undefined, name);
  }
});
