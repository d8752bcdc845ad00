/** The Prometheus text parser on each engine's real `/metrics` text (tests/fixtures/engine_metrics.ts cites the sources). */
import assert from "node:assert/strict";
import {
  parseTraffic,
  readSamples,
  sampleValue,
} from "../../src/engines/traffic.ts";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import {
  goFloat,
  LLAMA_CPP_METRICS,
  metricsText,
} from "../fixtures/engine_metrics.ts";
import { parse } from "../support/prometheus.ts";

function ruleNames(kind: string): string[] {
  const t = ENGINE_KINDS[kind]!.traffic!;
  return [t.running, t.waiting, t.promptTokens, t.generatedTokens];
}

Deno.test("vLLM's text with two engine cores: each family summed over its label sets, _created ignored", () => {
  const text = metricsText("vllm", {
    running: 3,
    waiting: 1,
    prompt: 1234567,
    generated: 17,
    model: "Qwen/Qwen3-0.6B",
    engines: 2,
  });
  assert.deepEqual(Object.values(readSamples(text, ruleNames("vllm")).sums), [
    3,
    1,
    1234567,
    17,
  ]);
  // The reference parser agrees that the text is valid and holds both label sets.
  assert.equal(
    parse(text).get("vllm:num_requests_running")?.metrics.length,
    2,
  );
});

Deno.test("SGLang's text: Go-style exponents read as numbers", () => {
  const text = metricsText("sglang", {
    running: 2,
    waiting: 5,
    prompt: 8128902,
    generated: 40,
    model: "m",
  });
  assert.match(
    text,
    /sglang:prompt_tokens_total\{model_name="m"\} 8\.128902e\+06/,
  );
  assert.deepEqual(Object.values(readSamples(text, ruleNames("sglang")).sums), [
    2,
    5,
    8128902,
    40,
  ]);
});

Deno.test("llama-server's captured text: unlabelled integers", () => {
  assert.deepEqual(
    Object.values(readSamples(LLAMA_CPP_METRICS, ruleNames("llama.cpp")).sums),
    [0, 0, 17, 5],
  );
});

Deno.test("values: NaN, +Inf, -Inf, exponents, signs; anything else is no number", () => {
  assert.ok(Number.isNaN(sampleValue("NaN")));
  assert.equal(sampleValue("+Inf"), Infinity);
  assert.equal(sampleValue("-Inf"), -Infinity);
  assert.equal(sampleValue("1.5e+03"), 1500);
  assert.equal(sampleValue("-2"), -2);
  assert.equal(sampleValue(".5"), 0.5);
  for (const bad of ["", "abc", "1,5", "0x10", "1e", "Infinity"]) {
    assert.equal(sampleValue(bad), undefined, bad);
  }
  assert.equal(goFloat(14196789248), "1.4196789248e+010");
});

Deno.test("labels with escaped quotes, braces and spaces; timestamps; NaN and Inf left out of the sum", () => {
  const text = [
    "# HELP x A gauge: with } and { in its help",
    "# TYPE x gauge",
    'x{a="say \\"hi\\" }",b="c\\\\"} 2 1700000000000',
    'x{a="new\\nline", b="spaced" ,} 3',
    "x NaN",
    'x{a="inf"} +Inf',
    "x_created 1.7e+09",
    "y NaN",
    "",
  ].join("\n");
  assert.deepEqual(readSamples(text, ["x", "y", "z"]).sums, {
    x: 5,
    y: null,
    z: null,
  });
});

Deno.test("garbage, HTML and broken lines give no value, and never throw", () => {
  for (
    const text of [
      "",
      "<html><body>404</body></html>",
      'x{a="unclosed 3\n',
      "x 1 2 3\n",
      "x one\n",
      "x 1 notatime\n",
      "\u0000\u0001x",
    ]
  ) {
    assert.deepEqual(readSamples(text, ["x"]).sums, { x: null }, text);
  }
});

Deno.test("a 50 MB body of other families is one linear scan", () => {
  const line = 'other_bucket{le="0.5",engine="0",model_name="m"} 12.0\n';
  const text = line.repeat(Math.ceil(50e6 / line.length)) + "x 1\n";
  const began = performance.now();
  assert.deepEqual(readSamples(text, ["x"]).sums, { x: 1 });
  console.log(`50 MB scanned in ${Math.round(performance.now() - began)} ms`);
});

Deno.test("odd values: a negative gauge read as 0, a series written twice read once, each named; a label filter picks its label sets", () => {
  const text = [
    "# TYPE g gauge",
    "g -1",
    "# TYPE c counter",
    'c{engine="0"} 4',
    'c{engine="1"} 5',
    "# TYPE c counter",
    'c{engine="0"} 4',
    'm{mode="decode",x="1"} 7',
    'm{mode="prefill",x="1"} 100',
    "",
  ].join("\n");
  const { sums, odd } = readSamples(text, ["g", "c", "m", 'm{mode="decode"}']);
  assert.deepEqual(sums, { g: 0, c: 9, m: 107, 'm{mode="decode"}': 7 });
  assert.deepEqual(odd, [
    "g reads -1 (a count cannot be negative: read as 0)",
    'c{engine="0"} is written twice (read once)',
  ]);
});

Deno.test("a family that is NaN is named as NaN, not as missing", () => {
  const rule = ENGINE_KINDS["llama.cpp"]!.traffic!;
  const nan = LLAMA_CPP_METRICS.replace(
    /^llamacpp:requests_processing 0$/m,
    "llamacpp:requests_processing NaN",
  );
  assert.deepEqual(parseTraffic(nan, rule, 0), {
    reading: null,
    why: "llamacpp:requests_processing is NaN",
    odd: [],
  });
  assert.equal(
    parseTraffic("x 1\n", rule, 0).why,
    "no llamacpp:requests_processing in its answer",
  );
  const negative = LLAMA_CPP_METRICS.replace(
    /^llamacpp:requests_deferred 0$/m,
    "llamacpp:requests_deferred -2",
  );
  const read = parseTraffic(negative, rule, 0);
  assert.equal(read.reading?.waiting, 0);
  assert.deepEqual(read.odd, [
    "llamacpp:requests_deferred reads -2 (a count cannot be negative: read as 0)",
  ]);
});
