/** The pure traffic rules: tokens/s, stalled under load, the idle canary. */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import {
  batchTokens,
  canaryDue,
  canaryRequest,
  quietMark,
  readTraffic,
  stalled,
  stallMark,
  trafficOf,
  type TrafficReading,
  trafficRule,
} from "../../src/engines/traffic.ts";
import { GOOD } from "../fixtures/catalogue_texts.ts";
import { metricsText } from "../fixtures/engine_metrics.ts";

function at(
  s: number,
  running: number,
  prompt: number,
  generated: number,
  waiting = 0,
): TrafficReading {
  return { running, waiting, prompt, generated, at: s * 1000 };
}

/** Folds readings through the stall mark; the verdict of the last. */
function stallOf(readings: TrafficReading[], timeoutMs: number) {
  let mark: TrafficReading | null = null;
  let verdict: string | null = null;
  for (const r of readings) {
    mark = stallMark(mark, r);
    verdict = stalled(mark, r, timeoutMs);
  }
  return verdict;
}

Deno.test("a reading from each engine's real text, by its kind's rule; garbage gives none", () => {
  // llama.cpp: 9 decodes serving 12 slots in all; SGLang: 30 prefill and 7 decode tokens.
  const steps: Record<string, object> = {
    vllm: {},
    "llama.cpp": { steps: 9, stepTokens: 12, promptSeconds: 0.010525 },
    sglang: { steps: 37, stepTokens: 7 },
  };
  for (const kind of ["vllm", "sglang", "llama.cpp"]) {
    const rule = ENGINE_KINDS[kind]!.traffic!;
    assert.equal(rule.path, "/metrics");
    const text = metricsText(kind, {
      running: 2,
      waiting: 1,
      prompt: 30,
      generated: 7,
      decodes: 9,
      busySlots: 12,
      prefillTokens: 30,
      decodeTokens: 7,
      model: "m",
      engines: 2,
    });
    const { blur, ...reading } = readTraffic(text, rule, 5)!;
    // llama.cpp prints six significant digits: half the last of each, through the product.
    assert.equal(
      blur?.toFixed(10),
      kind === "llama.cpp" ? "0.0000516667" : undefined,
    );
    assert.deepEqual(reading, {
      running: 2,
      waiting: 1,
      prompt: 30,
      generated: 7,
      ...steps[kind],
      at: 5,
    }, kind);
    assert.equal(readTraffic("<html>502</html>", rule, 5), null);
  }
  assert.equal(ENGINE_KINDS["vllm"]!.traffic!.enableFlag, undefined);
  assert.equal(ENGINE_KINDS["sglang"]!.traffic!.enableFlag, "--enable-metrics");
  assert.equal(ENGINE_KINDS["llama.cpp"]!.traffic!.enableFlag, "--metrics");
});

/** llama-server's text during one stream, read once a second: its totals still, its decodes moving (../shared/ENGINES.md). */
function llamaStream(decodes: number[]): TrafficReading[] {
  const rule = ENGINE_KINDS["llama.cpp"]!.traffic!;
  return decodes.map((n, s) =>
    readTraffic(
      metricsText("llama.cpp", {
        running: 1,
        waiting: 0,
        prompt: 0,
        generated: 0,
        decodes: n,
        busySlots: n,
        model: "m",
      }),
      rule,
      s * 1000,
    )!
  );
}

Deno.test("llama.cpp: a stream whose token totals stay still is progress by n_decode_total, and its tokens/s are the decodes'", () => {
  const stream = llamaStream([78, 177, 293, 420, 551]);
  assert.equal(stallOf(stream, 3_000), null);
  assert.deepEqual(
    stream.slice(1).map((r, i) => trafficOf(stream[i]!, r).tokens_per_s),
    [99, 116, 127, 131],
  );
  // Frozen decodes with a request running: stalled.
  assert.match(
    stallOf(llamaStream([78, 78, 78, 78, 78]), 3_000) ?? "",
    /^1 request running, no token for 4 s$/,
  );
  // Several slots at once: each decode serves each of them.
  const rule = ENGINE_KINDS["llama.cpp"]!.traffic!;
  const four = (s: number, decodes: number) =>
    readTraffic(
      metricsText("llama.cpp", {
        running: 4,
        waiting: 0,
        prompt: 0,
        generated: 0,
        decodes,
        busySlots: 4 * decodes,
        model: "m",
      }),
      rule,
      s * 1000,
    )!;
  assert.equal(trafficOf(four(0, 100), four(1, 200)).tokens_per_s, 400);
});

Deno.test("SGLang: realtime_tokens_total is progress, its decode tokens the tokens/s; an SGLang without it reads no steps", () => {
  const rule = ENGINE_KINDS["sglang"]!.traffic!;
  const at = (s: number, prefillTokens: number, decodeTokens: number) =>
    readTraffic(
      metricsText("sglang", {
        running: 1,
        waiting: 0,
        prompt: 0,
        generated: 0,
        prefillTokens,
        decodeTokens,
        model: "m",
      }),
      rule,
      s * 1000,
    )!;
  const prefill = [at(0, 0, 0), at(2, 4000, 0), at(4, 8000, 0)];
  assert.equal(stallOf(prefill, 1_000), null);
  assert.equal(trafficOf(prefill[1]!, prefill[2]!).tokens_per_s, 0);
  assert.equal(trafficOf(at(4, 8000, 0), at(6, 8000, 300)).tokens_per_s, 150);
  const old = metricsText("sglang", {
    running: 1,
    waiting: 0,
    prompt: 5,
    generated: 9,
    model: "m",
  }).split("\n").filter((l) => !l.includes("realtime_tokens")).join("\n");
  const reading = readTraffic(old, rule, 0)!;
  assert.deepEqual([reading.steps, reading.stepTokens, reading.generated], [
    undefined,
    undefined,
    9,
  ]);
});

Deno.test("a command card's traffic is its metrics field, else none", () => {
  const command = ENGINE_KINDS["command"]!;
  const card = Registry.parse(GOOD.commandMetrics).get("custom");
  assert.equal(trafficRule(card, command)?.running, "my:running");
  const plain = Registry.parse(GOOD.commandEngine).get("custom");
  assert.equal(trafficRule(plain, command), undefined);
});

Deno.test("tokens/s from the generated counter over the interval; null at first and across a restart", () => {
  const first = trafficOf(null, at(10, 1, 10, 100));
  assert.deepEqual(first, {
    running: 1,
    waiting: 0,
    tokens_per_s: null,
    at: "1970-01-01T00:00:10.000Z",
  });
  assert.equal(
    trafficOf(at(10, 1, 10, 100), at(12, 1, 10, 145)).tokens_per_s,
    22.5,
  );
  assert.equal(
    trafficOf(at(10, 1, 10, 100), at(12, 1, 10, 3)).tokens_per_s,
    null,
  );
  assert.equal(
    trafficOf(at(10, 1, 10, 100), at(10, 1, 10, 100)).tokens_per_s,
    null,
  );
});

Deno.test("stalled: requests running and neither counter moving for the timeout, with what was seen", () => {
  const wedge = [
    at(0, 0, 50, 50),
    at(100, 3, 60, 60),
    at(200, 3, 60, 60),
    at(400, 3, 60, 60),
  ];
  assert.equal(stallOf(wedge.slice(0, 3), 300_000), null);
  assert.equal(
    stallOf(wedge, 300_000),
    "3 requests running, no token for 300 s",
  );
  // The wedge with the gauge reading 0 is the canary's to find, not the stall rule's.
  assert.equal(stallOf([at(0, 0, 5, 5), at(400, 0, 5, 5)], 300_000), null);
  // Requests waiting, none running, nothing moving: a wedge the canary never sees (it waits for an empty queue).
  const queued = [at(0, 0, 5, 5, 3), at(3, 0, 5, 5, 3), at(14, 0, 5, 5, 3)];
  assert.equal(stallOf(queued.slice(0, 2), 4_000), null);
  assert.equal(
    stallOf(queued, 4_000),
    "3 requests waiting, none running, no token for 14 s",
  );
  assert.equal(stallOf([...queued, at(15, 0, 6, 5, 2)], 4_000), null);
  // 0 turns it off.
  assert.equal(stallOf(wedge, 0), null);
  // A busy spell is counted from the last idle reading, not from old counters.
  assert.equal(
    stallOf([at(0, 0, 5, 5), at(1000, 0, 5, 5), at(1010, 1, 5, 5)], 300_000),
    null,
  );
  assert.equal(
    stallOf([at(0, 1, 5, 5), at(301, 1, 5, 5)], 300_000),
    "1 request running, no token for 301 s",
  );
});

Deno.test("llama.cpp: a prefill batch is one step, allowed four times its tokens at the prompt rate llama-server measured", () => {
  const llama = ENGINE_KINDS["llama.cpp"]!;
  const rule = llama.traffic!;
  assert.equal(batchTokens(card("chat", "llama.cpp"), rule), 2048);
  assert.equal(
    batchTokens(card("chat", "llama.cpp", ["--batch-size", "4096"]), rule),
    4096,
  );
  assert.equal(batchTokens(card("chat", "llama.cpp", ["-b=512"]), rule), 512);
  assert.equal(batchTokens(card("chat"), ENGINE_KINDS["vllm"]!.traffic!), 0);
  // 1,000 prompt tokens in 100 s: 10 tokens/s, so one 2048-token batch takes 204.8 s, allowed 819.2 s.
  const read = (s: number, prompt: number, seconds: number) =>
    readTraffic(
      metricsText("llama.cpp", {
        running: 1,
        waiting: 0,
        prompt,
        generated: 0,
        decodes: 7,
        busySlots: 7,
        model: "m",
      }).replace(
        /^llamacpp:prompt_seconds_total \S+$/m,
        `llamacpp:prompt_seconds_total ${seconds}`,
      ),
      rule,
      s * 1000,
    )!;
  const mark = read(0, 1000, 100);
  assert.equal(mark.promptSeconds, 100);
  assert.equal(stalled(mark, read(819, 1000, 100), 300_000, 2048), null);
  assert.equal(
    stalled(mark, read(820, 1000, 100), 300_000, 2048),
    "1 request running, no token for 820 s",
  );
  // No prompt measured yet, or no batch rule: the stall timeout alone.
  assert.match(
    stalled(read(0, 0, 0), read(300, 0, 0), 300_000, 2048) ?? "",
    /300 s$/,
  );
  assert.match(stalled(mark, read(300, 1000, 100), 300_000) ?? "", /300 s$/);
});

Deno.test("slow progress is progress: a token every few seconds, or only the prompt counter moving", () => {
  const slow = Array.from({ length: 200 }, (_, i) => at(i * 5, 2, 10, 10 + i));
  assert.equal(stallOf(slow, 30_000), null);
  const prefill = Array.from(
    { length: 200 },
    (_, i) => at(i * 5, 1, 10 + i * 1000, 0),
  );
  assert.equal(stallOf(prefill, 30_000), null);
  // A restart (counters reset) is a move too.
  assert.equal(stallOf([at(0, 1, 500, 500), at(400, 1, 3, 0)], 300_000), null);
});

Deno.test("the canary is due when nothing ran and no counter moved for the interval", () => {
  const fold = (readings: TrafficReading[], intervalMs: number) => {
    let mark: TrafficReading | null = null;
    let due = false;
    for (const r of readings) {
      mark = quietMark(mark, r);
      due = canaryDue(mark, r, intervalMs);
    }
    return due;
  };
  assert.equal(fold([at(0, 0, 5, 5), at(299, 0, 5, 5)], 300_000), false);
  assert.equal(fold([at(0, 0, 5, 5), at(300, 0, 5, 5)], 300_000), true);
  assert.equal(fold([at(0, 0, 5, 5), at(300, 0, 5, 5)], 0), false);
  // Real traffic in the interval: no canary.
  assert.equal(
    fold([at(0, 0, 5, 5), at(100, 0, 9, 6), at(300, 0, 9, 6)], 300_000),
    false,
  );
  assert.equal(
    fold([at(0, 0, 5, 5), at(100, 1, 5, 5), at(300, 0, 5, 5)], 300_000),
    false,
  );
  assert.equal(
    fold([at(0, 0, 5, 5), at(100, 0, 5, 5, 2), at(300, 0, 5, 5)], 300_000),
    false,
  );
  // Requests running (even stuck): the stall rule's case, not the canary's.
  assert.equal(fold([at(0, 2, 5, 5), at(400, 2, 5, 5)], 300_000), false);
});

function card(verb: string, engine = "vllm", args: string[] = []) {
  const flags = args.length ? `, args: ${JSON.stringify(args)}` : "";
  return Registry.parse(
    `models:\n  m: { verb: ${verb}, hub: org/m, engine: ${engine}${flags} }\n`,
  ).get("m");
}

Deno.test("the canary sends the cheapest request of its verb; none for a verb without one, or an engine set to sleep", () => {
  const vllm = ENGINE_KINDS["vllm"]!;
  const llama = ENGINE_KINDS["llama.cpp"]!;
  assert.deepEqual(canaryRequest(card("chat"), vllm), {
    path: "/v1/chat/completions",
    body: {
      model: "m",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 1,
    },
  });
  assert.deepEqual(canaryRequest(card("complete"), vllm), {
    path: "/v1/completions",
    body: { model: "m", prompt: "hi", max_tokens: 1 },
  });
  assert.deepEqual(canaryRequest(card("embed"), vllm), {
    path: "/v1/embeddings",
    body: { model: "m", input: "hi" },
  });
  for (const verb of ["rerank", "classify", "transcribe"]) {
    assert.equal(canaryRequest(card(verb), vllm), null, verb);
  }
  assert.notEqual(canaryRequest(card("chat", "llama.cpp"), llama), null);
  for (
    const args of [
      ["--sleep-idle-seconds", "2"],
      ["--sleep-idle-seconds=300"],
    ]
  ) {
    assert.equal(canaryRequest(card("chat", "llama.cpp", args), llama), null);
  }
  // -1 is llama.cpp's "disabled" (common/arg.cpp, --sleep-idle-seconds): it never sleeps.
  for (
    const args of [["--sleep-idle-seconds", "-1"], ["--sleep-idle-seconds=-1"]]
  ) {
    assert.notEqual(
      canaryRequest(card("chat", "llama.cpp", args), llama),
      null,
      args.join(" "),
    );
  }
});

Deno.test("the launcher adds each kind's metrics flag before the card's args, once: not when the card gives it", () => {
  const argv = (engine: string, args: string[]) =>
    ENGINE_KINDS[engine]!.argv({
      model: "/m",
      isLocal: true,
      host: "127.0.0.1",
      port: 5001,
      apiKey: "",
      card: card("chat", engine, args),
    });
  assert.deepEqual(argv("llama.cpp", ["-ngl", "99"]).slice(-3), [
    "--metrics",
    "-ngl",
    "99",
  ]);
  assert.equal(
    argv("llama.cpp", ["--metrics"]).filter((a) => a === "--metrics").length,
    1,
  );
  assert.deepEqual(argv("sglang", ["--enable-metrics"]).slice(-1), [
    "--enable-metrics",
  ]);
  assert.equal(
    argv("sglang", []).filter((a) => a === "--enable-metrics").length,
    1,
  );
  assert.ok(!argv("vllm", []).some((a) => a.includes("metrics")));
});
