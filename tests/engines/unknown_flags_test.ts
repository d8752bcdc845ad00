import assert from "node:assert/strict";
import { card, shipped } from "../support/gpu_cards.ts";
import { unknownFlagWarnings } from "../../src/engines/unknown_flags.ts";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import {
  LLAMA_SERVER_HELP,
  SGLANG_HELP,
  VLLM_HELP,
} from "../fixtures/engine_help.ts";

const HELP: Record<string, string> = {
  vllm: VLLM_HELP,
  sglang: SGLANG_HELP,
  "llama.cpp": LLAMA_SERVER_HELP,
};

/** The warnings of a card, checked against its engine's help excerpt. */
function warnings(fields: Record<string, unknown>): string[] {
  const c = card(fields);
  const kind = ENGINE_KINDS[c.engine]!;
  return unknownFlagWarnings(c, kind, kind.flags!.parseHelp(HELP[c.engine]!));
}

Deno.test("vLLM: a typo is named with the closest listed flag; --no-<flag>, underscores and short aliases are known", () => {
  assert.deepEqual(
    warnings({
      args: {
        "max-model-length": 4096,
        "no-enable-prefix-caching": true,
        gpu_memory_utilization: 0.5,
        tp: 2,
        "totally-unknown-thing": 1,
      },
    }),
    [
      "m: --max-model-length is not a known vLLM flag (did you mean --max-model-len?)",
      "m: --tp is not a known vLLM flag (did you mean -tp?)",
      "m: --totally-unknown-thing is not a known vLLM flag",
    ],
  );
  assert.deepEqual(
    warnings({ args: ["-tp", "2", "--max-model-len=4096", "-1"] }),
    [],
  );
});

Deno.test("SGLang: an unambiguous start of a flag is known (argparse takes it), an ambiguous one is not; underscores are not read as dashes", () => {
  const sglang = (args: Record<string, unknown>) =>
    warnings({ engine: "sglang", args });
  assert.deepEqual(
    sglang({ "tp-size": 2, tp: 2, "mem-fraction-static": 0.8 }),
    [],
  );
  assert.deepEqual(sglang({ "mem-fraction": 0.8 }), []);
  // A start of two flags (--disable-cuda-graph, --disable-cuda-graph-padding).
  assert.match(
    sglang({ "disable-cuda": true })[0] ?? "",
    /^m: --disable-cuda is not a known SGLang flag/,
  );
  assert.deepEqual(sglang({ context_length: 4096 }), [
    "m: --context_length is not a known SGLang flag (did you mean --context-length?)",
  ]);
});

Deno.test("llama.cpp: flags exactly as its help lists them, negations included", () => {
  assert.deepEqual(
    warnings({
      engine: "llama.cpp",
      args: { "ctx-size": 4096, "no-warmup": true, ngl: 99, "ctx-sise": 1 },
    }),
    [
      "m: --ngl is not a known llama.cpp flag (did you mean -ngl?)",
      "m: --ctx-sise is not a known llama.cpp flag (did you mean --ctx-size?)",
    ],
  );
});

Deno.test("every shipped card's flags are listed in its engine's help excerpt", () => {
  for (const name of shipped.names()) {
    const c = shipped.get(name);
    const kind = ENGINE_KINDS[c.engine]!;
    if (kind.flags === undefined) continue;
    const listed = kind.flags.parseHelp(HELP[c.engine]!);
    assert.deepEqual(unknownFlagWarnings(c, kind, listed), [], name);
  }
});
