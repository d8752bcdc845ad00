/**
 * The drain with the real llama.cpp `llama-server` (the cached build, see
 * tests/serve/llama_e2e_test.ts) and its own `/metrics`
 * (`llamacpp:requests_processing`, `llamacpp:requests_deferred`) and `/slots`
 * behind the engine API key: a stop waits for the requests queued on its one
 * slot; a reload's restart under steady traffic from the OpenAI SDK waits for
 * the requests in flight at its start, not for the gauges' 0.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  freePorts,
  Launcher,
  models,
  readJournal,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { llamaRoot } from "../support/llama.ts";
import { writeTinyModel } from "../../tools/tiny_model.ts";

const FIXTURE = new URL("../fixtures/llama.yaml", import.meta.url).pathname;
const KEY = "drain-key";

Deno.test("drain with llama-server: a stop waits for every queued stream, read from its metrics with the key", async () => {
  const { root, path } = await llamaRoot();
  const port = freePorts(1);
  await using launcher = new Launcher([
    "tiny-a",
    ...siteArgs(port, root, FIXTURE),
    "--dev_mode",
    "--grace",
    "5",
  ], {
    PATH: path,
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: KEY,
  });
  try {
    await launcher.ready();
    await waitFor(
      async () =>
        (await models(port, true)).active["tiny-a"]?.state === "ready",
      "tiny-a ready",
      60_000,
    );
    // One slot (`parallel: 1`): the others wait in llama-server's queue.
    const streams = Array.from(
      { length: 20 },
      () =>
        fetch(`http://127.0.0.1:${port + 1}/v1/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${KEY}` },
          body: JSON.stringify({
            prompt: "hello",
            max_tokens: 200,
            ignore_eos: true,
            stream: true,
          }),
        }).then((r) => r.text()).then((t) => t.includes("data: [DONE]"))
          .catch(() => false),
    );
    await new Promise((r) => setTimeout(r, 100));
    launcher.child.kill("SIGTERM");
    assert.equal((await launcher.exited()).code, 0);
    const whole = (await Promise.all(streams)).filter(Boolean).length;
    assert.equal(whole, 20, launcher.stderr);
    assert.match(
      launcher.stderr,
      /engine tiny-a \(pid \d+\) drained in [\d.]+ s: \d+ requests? finished, 0 cut/,
    );
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true });
  }
});

// About 135 MB of random f32 weights: about 110 tokens/s on one thread here
// (../shared/ENGINES.md), so a 100-token stream takes about 2 s on two slots.
const BIG = {
  embeddingLength: 512,
  blockCount: 8,
  headCount: 8,
  headCountKv: 8,
  feedForwardLength: 2048,
  contextLength: 1024,
};

function steadyCard(ctx: number): string {
  return `models:
  steady:
    verb: chat
    local: big-llama
    engine: llama.cpp
    args: { ctx-size: ${ctx}, parallel: 2, threads: 1, no-warmup: true }
`;
}

/** One stream as a client saw it; `first`: when its first chunk came, `ended` 0 until it ends (epoch ms). */
interface Seen {
  sent: number;
  first: number | null;
  ended: number;
  whole: boolean;
}

/** Streams without pause until `stop`, each of `tokens`; a refused connection (the restart) is retried. */
async function client(
  url: string,
  stop: AbortSignal,
  seen: Seen[],
): Promise<void> {
  const openai = new OpenAI({
    baseURL: url,
    apiKey: KEY,
    maxRetries: 0,
    timeout: 30_000,
  });
  while (!stop.aborted) {
    const one: Seen = { sent: Date.now(), first: null, ended: 0, whole: false };
    try {
      const stream = await openai.chat.completions.create({
        model: "steady",
        messages: [{ role: "user", content: "Hello" }],
        max_tokens: 100,
        stream: true,
        ignore_eos: true,
      } as OpenAI.ChatCompletionCreateParamsStreaming);
      for await (const chunk of stream) {
        if (one.first === null) seen.push(one);
        one.first ??= Date.now();
        if (chunk.choices[0]?.finish_reason) one.whole = true;
      }
    } catch {
      // Cut mid-stream, or refused while the engine restarts.
    }
    one.ended = Date.now();
    if (one.first === null) await new Promise((r) => setTimeout(r, 100));
  }
}

Deno.test("drain with llama-server under steady traffic: a reload's restart cuts none of the streams in flight at its start and ends when they end", async () => {
  const { root, path } = await llamaRoot();
  await writeTinyModel(`${root}/models/big-llama/big.gguf`, BIG);
  const catalogue = `${root}/steady.yaml`;
  await Deno.writeTextFile(catalogue, steadyCard(1024));
  const port = freePorts(1);
  await using launcher = new Launcher([
    "steady",
    ...siteArgs(port, root, catalogue),
    "--dev_mode",
    "--grace",
    "10",
  ], {
    PATH: path,
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: KEY,
  });
  const stop = new AbortController();
  const seen: Seen[] = [];
  let clients: Promise<void>[] = [];
  try {
    await launcher.ready();
    const state = async () => (await models(port, true)).active.steady?.state;
    await waitFor(async () => await state() === "ready", "ready", 60_000);
    const url = `http://127.0.0.1:${port + 1}/v1`;
    clients = [1, 2, 3].map(() => client(url, stop.signal, seen));
    await waitFor(() => seen.length >= 3, "traffic flowing", 30_000);
    await Deno.writeTextFile(catalogue, steadyCard(1000));
    // Streaming on both slots: these are in flight when the drain begins.
    let onSlots: Seen[] = [];
    await waitFor(() => {
      onSlots = seen.filter((s) => s.ended === 0);
      return onSlots.length >= 2;
    }, "both slots streaming");
    launcher.child.kill("SIGHUP");
    await launcher.waitForLine(/reload: 1 engine restarted \(steady\)/, 60_000);
    await waitFor(async () => await state() === "ready", "ready again", 60_000);
    // A few streams on the new run, then quiet.
    const after = seen.length;
    await waitFor(
      () => seen.filter((s) => s.ended > 0).length >= after + 3,
      "traffic again",
      30_000,
    );
    stop.abort();
    await Promise.all(clients);
    interface Event {
      at: string;
      event: string;
      from?: string;
      to?: string;
      reason?: string;
      detail?: string;
      drain?: { seconds: number; finished: number; cut: number };
    }
    const events = await readJournal<Event>(root);
    const began = Date.parse(
      events.find((e) => e.from === "ready" && e.to === "draining")!.at,
    );
    const drain = events.find((e) => e.event === "drain")!;
    const back = events.filter((e) => e.from === "starting" && e.to === "ready")
      .map((e) => Date.parse(e.at)).find((t) => t > began)!;
    const cut = seen.filter((s) => !s.whole);
    // Sent before it (some queued, some still in a socket): what it could wait for at most.
    const sent = seen.filter((s) => s.sent < began && s.ended > began);
    const longest = Math.max(...sent.map((s) => s.ended)) - began;
    console.error(JSON.stringify({
      drain: drain.detail,
      drainSeconds: drain.drain?.seconds,
      deadlineSeconds: 30,
      sentBeforeStart: sent.length,
      // How long before the drain's start each of those cut was sent.
      sentBeforeCutMs: sent.filter((s) => !s.whole).map((s) => began - s.sent),
      longestOfThoseS: longest / 1000,
      restartSeconds: (back - began) / 1000,
      streams: seen.length,
      streamsCut: cut.length,
    }));
    // And those sent a read's time before it (not still in a socket at its first read).
    const held = [...onSlots, ...sent.filter((s) => s.sent < began - 500)];
    assert.deepEqual(held.filter((s) => !s.whole), [], "none of them cut");
    assert.equal(drain.reason, "drained", drain.detail);
    assert.equal(drain.drain?.cut, 0);
    assert.doesNotMatch(launcher.stderr, /outlived .* SIGKILL/);
  } finally {
    stop.abort();
    await Promise.all(clients);
    await launcher.stop();
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("drain with llama-server: a stop of a sleeping, idle llama-server drains at once and does not wake it", async () => {
  const { root, path } = await llamaRoot();
  const catalogue = `${root}/dozy.yaml`;
  await Deno.writeTextFile(
    catalogue,
    `models:
  dozy:
    verb: chat
    local: tiny-llama
    engine: llama.cpp
    args: { ctx-size: 256, parallel: 1, threads: 1, no-warmup: true, sleep-idle-seconds: 1 }
`,
  );
  const port = freePorts(1);
  await using launcher = new Launcher([
    "dozy",
    ...siteArgs(port, root, catalogue),
    "--dev_mode",
    "--health-interval",
    "0.5",
  ], {
    PATH: path,
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: KEY,
  });
  try {
    await launcher.ready();
    await waitFor(
      async () => (await models(port, true)).active.dozy?.state === "sleeping",
      "sleeping",
      60_000,
    );
    assert.equal((await launcher.stop()).code, 0);
    assert.match(
      launcher.stderr,
      /engine dozy \(pid \d+\) drained in [\d.]+ s: 0 requests finished, 0 cut/,
    );
    const log = await Deno.readTextFile(`${root}/logs/dozy.log`);
    assert.doesNotMatch(log, /exiting sleeping state/, "never woken");
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true });
  }
});
