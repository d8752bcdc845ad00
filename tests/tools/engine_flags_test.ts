import assert from "node:assert/strict";
import { flagsModule, flagsOfHelp } from "../../tools/engine_flags.ts";

// The shape of argparse's help, as vllm serve --help=all prints it.
const HELP = `usage: vllm serve [model_tag] [options]

options:
  -h, --help            show this help message and exit
  --headless            Run in headless mode.
  --api-server-count API_SERVER_COUNT, -asc API_SERVER_COUNT
                        How many API server processes to run.

ModelConfig:
  --max-model-len MAX_MODEL_LEN
                        Model context length. See --tokenizer for more.
  --enable-prefix-caching, --no-enable-prefix-caching
  --tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE
  --port PORT           Port number.
`;

Deno.test("flags are read from argparse's option entries, aliases and --no- forms included, help text words left out", () => {
  assert.deepEqual(flagsOfHelp(HELP), [
    "--api-server-count",
    "-asc",
    "--enable-prefix-caching",
    "--headless",
    "--max-model-len",
    "--no-enable-prefix-caching",
    "--port",
    "--tensor-parallel-size",
    "-tp",
  ]);
});

Deno.test("the generated module names its source and lists each flag", () => {
  const text = flagsModule(
    "vllm",
    ["--port", "-tp"],
    "vllm serve --help output, vLLM 0.11.0",
  );
  assert.match(text, /export const VLLM_FLAGS: KnownFlags/);
  assert.match(text, /"vllm serve --help output, vLLM 0\.11\.0"/);
  assert.match(text, /\n {4}--port -tp\n/);
});

Deno.test("the generated module packs flags several to a line and reads back every flag in order", async () => {
  const flags = Array.from(
    { length: 60 },
    (_, i) => `--flag-number-${i}${i % 7 === 0 ? "-with-a-longer-name" : ""}`,
  );
  const text = flagsModule("sglang", flags, "a hand-read list");
  const lines = text.split("\n").filter((line) => line.startsWith("    --"));
  assert.ok(lines.length > 1 && lines.length < flags.length / 2);
  for (const line of lines) assert.ok(line.length <= 80, line);
  const url = `data:application/typescript;base64,${
    btoa(text.replace(/^import type .*$/m, ""))
  }`;
  const { SGLANG_FLAGS } = await import(url);
  assert.deepEqual(SGLANG_FLAGS.flags, flags);
  assert.equal(SGLANG_FLAGS.source, "a hand-read list");
});
