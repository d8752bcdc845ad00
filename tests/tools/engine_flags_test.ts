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
  assert.match(text, / {4}"--port",\n {4}"-tp",\n/);
});
