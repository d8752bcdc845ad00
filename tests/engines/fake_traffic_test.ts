/**
 * The stand-in engine's traffic modes, read the way the launcher will read
 * them: its `/metrics` in each engine's real text, through each kind's rule
 * and the pure traffic rules.
 */
import assert from "node:assert/strict";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import {
  readTraffic,
  stalled,
  stallMark,
  trafficOf,
  type TrafficReading,
} from "../../src/engines/traffic.ts";
import { freePorts, healthOk, waitFor } from "../support/helpers.ts";

const FAKE = new URL("../fixtures/fake_engine.ts", import.meta.url).pathname;

interface Fake extends AsyncDisposable {
  base: string;
  read(): Promise<TrafficReading>;
  /** Starts a completion; resolves with its body text when it ends. */
  complete(stream?: boolean): Promise<string>;
}

async function fake(kind: string, flags: string[]): Promise<Fake> {
  const port = freePorts(1);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      FAKE,
      "--port",
      String(port),
      "--alias",
      "m",
      "--fake-metrics",
      kind,
      ...flags,
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const base = `http://127.0.0.1:${port}`;
  const pending = new Set<Promise<unknown>>();
  const rule = ENGINE_KINDS[kind]!.traffic!;
  await waitFor(() => healthOk(base), "the stand-in listening");
  const aborts = new AbortController();
  return {
    base,
    async read() {
      const text = await (await fetch(`${base}${rule.path}`)).text();
      const reading = readTraffic(text, rule, Date.now());
      assert.ok(reading, text);
      return reading;
    },
    complete(stream = false) {
      const p = fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        signal: aborts.signal,
        body: JSON.stringify({
          messages: [{ role: "user", content: "one two three" }],
          stream,
        }),
      }).then((r) => r.text()).catch(() => "");
      pending.add(p);
      return p;
    },
    async [Symbol.asyncDispose]() {
      aborts.abort();
      await Promise.all(pending);
      child.kill();
      await child.status;
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

Deno.test("a stand-in streams tokens and counts them as each engine does: vLLM per step, llama.cpp and SGLang totals at the end, their step counters per step", async () => {
  for (const kind of ["vllm", "sglang", "llama.cpp"]) {
    await using engine = await fake(kind, [
      "--fake-tokens",
      "20",
      "--fake-token-ms",
      "20",
    ]);
    const before = await engine.read();
    assert.deepEqual([before.running, before.prompt, before.generated], [
      0,
      0,
      0,
    ]);
    const done = engine.complete(true);
    await sleep(100);
    const early = await engine.read();
    await sleep(100);
    const during = await engine.read();
    assert.equal(during.running, 1, kind);
    // vLLM counts each step; llama.cpp the prompt when its prefill ends; SGLang both at the end.
    assert.equal(during.prompt, { vllm: 3, "llama.cpp": 3, sglang: 0 }[kind]);
    if (kind === "vllm") {
      assert.ok(during.generated > 0 && during.generated < 20, kind);
      assert.equal(during.steps, undefined);
    } else {
      assert.equal(during.generated, 0, kind);
      assert.ok(during.steps! > early.steps!, `${kind}: steps move`);
    }
    assert.ok(trafficOf(early, during).tokens_per_s! > 0, kind);
    assert.match(await done, /data: \[DONE\]/);
    const after = await engine.read();
    assert.deepEqual([after.running, after.prompt, after.generated], [
      0,
      3,
      20,
    ]);
    // One prefill batch and 20 decodes; SGLang counts tokens: 3 prompt + 20 decoded.
    assert.equal(
      after.steps,
      { vllm: undefined, "llama.cpp": 21, sglang: 23 }[kind],
    );
    assert.equal(
      after.stepTokens,
      { vllm: undefined, "llama.cpp": 21, sglang: 20 }[kind],
    );
  }
});

Deno.test("a wedged stand-in freezes its counters, the gauge counting or reading 0; the stall rule finds the first", async () => {
  for (const gauge of [[], ["--fake-wedge-gauge", "zero"]]) {
    await using engine = await fake("vllm", ["--fake-wedge", ...gauge]);
    void engine.complete();
    void engine.complete();
    await sleep(200);
    let mark: TrafficReading | null = null;
    let verdict: string | null = null;
    for (let i = 0; i < 4; i++) {
      const reading = await engine.read();
      assert.deepEqual([reading.prompt, reading.generated], [0, 0]);
      assert.equal(reading.running, gauge.length ? 0 : 2);
      mark = stallMark(mark, reading);
      verdict = stalled(mark, reading, 250);
      await sleep(100);
    }
    assert.equal(verdict === null, gauge.length > 0, String(verdict));
    if (verdict) {
      assert.match(verdict, /^2 requests running, no token for 0 s$/);
    }
  }
});

Deno.test("slow progress is not a stall: a token every 150 ms against a 250 ms timeout, and a long prefill", async () => {
  for (
    const flags of [
      ["--fake-tokens", "100", "--fake-token-ms", "150"],
      ["--fake-prefill-ms", "5000"],
    ]
  ) {
    await using engine = await fake("llama.cpp", flags);
    void engine.complete();
    let mark: TrafficReading | null = null;
    for (let i = 0; i < 6; i++) {
      await sleep(200);
      const reading = await engine.read();
      assert.equal(reading.running, 1);
      mark = stallMark(mark, reading);
      assert.equal(stalled(mark, reading, 250), null, JSON.stringify(reading));
    }
  }
});
