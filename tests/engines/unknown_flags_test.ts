import assert from "node:assert/strict";
import { card, shipped } from "../support/gpu_cards.ts";
import {
  KNOWN_FLAGS,
  unknownFlagWarnings,
} from "../../src/engines/unknown_flags.ts";

Deno.test("vLLM: a typo is named with the closest known flag; --no-<flag>, underscores and short aliases are known", () => {
  assert.deepEqual(
    unknownFlagWarnings(card({
      args: {
        "max-model-length": 4096,
        "no-enable-prefix-caching": true,
        gpu_memory_utilization: 0.5,
        tp: 2,
        "totally-unknown-thing": 1,
      },
    })),
    [
      "m: --max-model-length is not a known vLLM flag (did you mean --max-model-len?)",
      "m: --tp is not a known vLLM flag (did you mean -tp?)",
      "m: --totally-unknown-thing is not a known vLLM flag",
    ],
  );
  assert.deepEqual(
    unknownFlagWarnings(
      card({ args: ["-tp", "2", "--max-model-len=4096", "-1"] }),
    ),
    [],
  );
});

Deno.test("SGLang: an unambiguous start of a flag is known (argparse takes it), an ambiguous one is not; underscores are not read as dashes", () => {
  const sglang = (args: Record<string, unknown>) =>
    unknownFlagWarnings(card({ engine: "sglang", args }));
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

Deno.test("other engines are not checked; every shipped vLLM and SGLang card passes its own list", () => {
  assert.deepEqual(
    unknownFlagWarnings(
      card({ engine: "llama.cpp", args: { "anything-goes": 1 } }),
    ),
    [],
  );
  for (const name of shipped.names()) {
    const c = shipped.get(name);
    if (c.engine !== "vllm" && c.engine !== "sglang") continue;
    assert.deepEqual(unknownFlagWarnings(c), [], name);
  }
  for (const list of Object.values(KNOWN_FLAGS)) {
    assert.match(list.source, /[0-9a-f]{12}|version/, list.engine);
    assert.ok(list.flags.includes("--port"), list.engine);
  }
});
