/**
 * Signals from the real llama-server (`deno task engine:llama`): its token
 * totals move only when a request ends, so a long stream is followed by
 * `llamacpp:n_decode_total` (progress, tokens/s) and finishes whole under a
 * short `--stall-timeout`; an embed card without `--embeddings` answers the
 * canary 501, one line with its message, never a restart. A random-weight
 * model of about 135 MB (tools/gguf.ts, embedding 512, 8 blocks) streams
 * about 110 tokens/s on one thread here. Without the build it fails saying
 * how to build it.
 */
import assert from "node:assert/strict";
import { writeTinyModel } from "../../tools/tiny_model.ts";
import {
  freePorts,
  Launcher,
  models,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { llamaRoot } from "../support/llama.ts";

const ARGS = "ctx-size: 2048, parallel: 1, threads: 1, no-warmup: true";
const CATALOGUE = `models:
  long: { verb: complete, local: big-llama, engine: llama.cpp, args: { ${ARGS} } }
  emb: { verb: embed, local: tiny-llama, engine: llama.cpp, args: { ${ARGS} } }
  prefill: { verb: complete, local: big-llama, engine: llama.cpp, args: { ctx-size: 8192, batch-size: 4096, parallel: 1, threads: 1, no-warmup: true } }
`;

async function start(model: string, args: string[]) {
  const { root, path } = await llamaRoot();
  if (model === "long" || model === "prefill") {
    await writeTinyModel(`${root}/models/big-llama/big-llama.gguf`, {
      embeddingLength: 512,
      blockCount: 8,
      headCount: 8,
      headCountKv: 8,
      feedForwardLength: 2048,
      contextLength: 8192,
    });
  }
  await Deno.writeTextFile(`${root}/catalogue.yaml`, CATALOGUE);
  const port = freePorts(2);
  const launcher = new Launcher([
    model,
    ...siteArgs(port, root, `${root}/catalogue.yaml`),
    "--dev_mode",
    "--grace",
    "5",
    ...args,
  ], { PATH: path, MY_LOCAL: "", NUCLEUS_HOST: "", NUCLEUS_PORT: "" });
  await launcher.ready();
  await waitFor(
    async () => (await models(port, true)).active[model]?.state === "ready",
    `${model} ready`,
    60_000,
  );
  return {
    port,
    launcher,
    detail: async () => (await models(port, true)).active[model]!,
    async [Symbol.asyncDispose]() {
      await launcher.stop();
      await Deno.remove(root, { recursive: true });
    },
  };
}

Deno.test("a long stream on the real llama-server outlives --stall-timeout 3 whole, its tokens/s above 0 while it runs", async () => {
  await using run = await start("long", [
    "--stall-timeout",
    "3",
    "--health-interval",
    "0.5",
    "--canary-interval",
    "0",
  ]);
  const answer = fetch(`http://127.0.0.1:${run.port + 1}/v1/completions`, {
    method: "POST",
    body: JSON.stringify({
      prompt: "hello",
      max_tokens: 600,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    }),
  }).then((r) => r.text()).catch((e) => `the stream was cut: ${e.message}`);
  let ended = false;
  void answer.finally(() => ended = true);
  const shown: number[] = [];
  while (!ended) {
    const e = await run.detail();
    assert.equal(e.restarts, 0, run.launcher.stderr);
    if (e.traffic?.running === 1 && e.traffic.tokens_per_s !== null) {
      shown.push(e.traffic.tokens_per_s);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  const text = await answer;
  // Random weights over a byte vocabulary: some tokens are half a character, held back; count the usage.
  const data = text.split("\n").filter((l) => l.startsWith("data: {"))
    .map((l) => JSON.parse(l.slice(6)));
  const usage = data.findLast((d) => d.usage)?.usage;
  assert.equal(usage?.completion_tokens, 600, text.slice(-600));
  assert.ok(data.some((d) => d.choices?.[0]?.finish_reason === "length"));
  assert.match(text, /data: \[DONE\]/);
  // The precondition, in llama-server's own timings: the stream outlived the stall timeout.
  const timings = data.findLast((d) => d.timings)?.timings;
  assert.ok(
    timings?.predicted_ms > 3_000,
    `generated in ${timings?.predicted_ms} ms`,
  );
  const e = await run.detail();
  assert.equal(e.restarts, 0);
  assert.equal(e.state, "ready");
  assert.doesNotMatch(run.launcher.stderr, /stalled/);
  const during = shown.filter((v) => v > 0);
  assert.ok(during.length >= 2, `tokens/s shown while it ran: ${shown}`);
  const sorted = [...shown].sort((a, b) => a - b);
  console.log(
    `600 tokens in ${
      (timings.predicted_ms / 1000).toFixed(1)
    } s (llama-server's own timings: ${
      timings.predicted_per_second?.toFixed(1)
    } tokens/s); tokens/s shown while running: ${shown.join(", ")} (median ${
      sorted[sorted.length >> 1]
    })`,
  );
});

Deno.test("an embed card on llama-server without --embeddings: the canary's 501 is one line with its message, no restart", async () => {
  await using run = await start("emb", [
    "--health-interval",
    "0.2",
    "--canary-interval",
    "0.3",
    "--canary-timeout",
    "2",
  ]);
  const seen = new Set<string>();
  await waitFor(
    async () => {
      const e = await run.detail();
      assert.equal(e.restarts, 0, run.launcher.stderr);
      if (e.canary) seen.add(e.canary.at);
      return seen.size >= 4;
    },
    "four canaries answered",
    30_000,
  );
  const said = run.launcher.lines.filter((l) => l.includes("canary"));
  assert.deepEqual(said.map((l) => l.replace(/^\[serve\] warn: /, "")), [
    "engine emb: canary /v1/embeddings answered 501: This server does not support embeddings. Start it with `--embeddings` (said once)",
  ]);
  assert.equal((await run.detail()).state, "ready");
});

Deno.test("a long prompt on the real llama-server is not a stall: one 4096-token prefill batch outlasts --stall-timeout 2, its rate measured on a short prompt first", async () => {
  await using run = await start("prefill", [
    "--stall-timeout",
    "2",
    "--health-interval",
    "0.5",
    "--canary-interval",
    "0",
  ]);
  const complete = (prompt: string) =>
    fetch(`http://127.0.0.1:${run.port + 1}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ prompt, max_tokens: 1 }),
    }).then((r) => r.json()).catch((e) => ({ cut: e.message }));
  // A short prompt first: llama-server's own prefill rate (prompt_seconds_total) is known.
  const warm = await complete("hello there");
  assert.ok(warm.usage, JSON.stringify(warm));
  // About 3,800 tokens of the byte vocabulary: one llama_decode, n_decode_total still throughout.
  const prompt = Array.from({ length: 650 }, (_, i) => `w${i % 97}`).join(" ");
  const answer = await complete(prompt);
  const timings = answer.timings;
  assert.ok(
    timings,
    `the long prompt's answer: ${JSON.stringify(answer)}; ${
      /.*stalled.*/.exec(run.launcher.stderr)?.[0]
    }`,
  );
  // The precondition, in llama-server's own timings: its prefill outlasted the stall timeout.
  assert.ok(timings.prompt_ms > 3_000, `prefilled in ${timings.prompt_ms} ms`);
  const e = await run.detail();
  assert.equal(e.restarts, 0, run.launcher.stderr);
  assert.equal(e.state, "ready");
  assert.doesNotMatch(run.launcher.stderr, /stalled/);
  console.log(
    `short prompt: ${warm.timings?.prompt_n} tokens at ${
      warm.timings?.prompt_per_second?.toFixed(1)
    } tokens/s; long prompt: ${timings.prompt_n} tokens prefilled in ${
      (timings.prompt_ms / 1000).toFixed(1)
    } s (${
      timings.prompt_per_second.toFixed(1)
    } tokens/s, llama-server's own timings)`,
  );
});
