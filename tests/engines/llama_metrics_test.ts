/**
 * The real llama-server (`deno task engine:llama`) started as the llama.cpp
 * kind starts it (`--metrics` added to its argv) over the project's tiny
 * model: its live `/metrics` parses through the kind's rule, a completion moves
 * the token counters, and its text still has the layout of the captured
 * fixture. Without the build it fails saying how to build it, as the other
 * llama-server tests do.
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import { readTraffic, trafficOf } from "../../src/engines/traffic.ts";
import { LLAMA_CPP_METRICS } from "../fixtures/engine_metrics.ts";
import { freePorts, healthOk, waitFor } from "../support/helpers.ts";
import { llamaRoot } from "../support/llama.ts";

/** Each sample line's name, in order. */
function sampleNames(text: string): string[] {
  return text.split("\n").filter((l) => l && !l.startsWith("#"))
    .map((l) => l.split(" ")[0]!);
}

Deno.test("the real llama-server's /metrics: the kind's families, a completion moving the token counters", async () => {
  const { root, model, server } = await llamaRoot();
  const kind = ENGINE_KINDS["llama.cpp"]!;
  const card = Registry.parse(
    "models:\n  tiny: { verb: complete, local: tiny-llama, engine: llama.cpp }\n",
  ).get("tiny");
  const port = freePorts(1);
  const argv = kind.argv({
    model,
    isLocal: true,
    host: "127.0.0.1",
    port,
    apiKey: "",
    card,
  });
  assert.ok(argv.includes("--metrics"));
  const child = new Deno.Command(server, {
    args: argv,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const base = `http://127.0.0.1:${port}`;
  try {
    await waitFor(() => healthOk(base), "llama-server healthy");
    const rule = kind.traffic!;
    const read = async () => {
      const text = await (await fetch(`${base}${rule.path}`)).text();
      return { text, reading: readTraffic(text, rule, Date.now()) };
    };
    const first = await read();
    assert.deepEqual(sampleNames(first.text), sampleNames(LLAMA_CPP_METRICS));
    assert.deepEqual(
      first.reading && [
        first.reading.running,
        first.reading.waiting,
        first.reading.generated,
      ],
      [0, 0, 0],
    );
    const answer = await fetch(`${base}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "hello there", max_tokens: 5 }),
    });
    const usage = (await answer.json()).usage;
    const second = await read();
    assert.ok(second.reading);
    assert.equal(second.reading.generated, usage.completion_tokens);
    assert.ok(second.reading.generated > 0);
    assert.equal(second.reading.prompt, usage.prompt_tokens);
    assert.ok(trafficOf(first.reading, second.reading).tokens_per_s! > 0);
  } finally {
    child.kill();
    await child.status;
    await Deno.remove(root, { recursive: true });
  }
});
