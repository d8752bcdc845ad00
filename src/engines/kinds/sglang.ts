// SGLang's flags: `python/sglang/srt/server_args.py` (`ServerArgs.add_cli_args`),
// a plain argparse parser (abbreviations allowed, `_` not read as `-`).
import type { EngineDevices, EngineKind, TrafficRule } from "./engine_kind.ts";
import { atPrefix, fractionOf, inGiB, serveFlags } from "./engine_kind.ts";
import { argparseFlags, PYTHON_CAUSES, SHARDS } from "./python.ts";
import { sizeFlag } from "./flag_values.ts";

const TP = ["--tp-size", "--tensor-parallel-size"];

function devices(args: readonly string[]): EngineDevices {
  const tp = sizeFlag(args, TP);
  const nodes = sizeFlag(args, ["--nnodes"]);
  const count = Math.max(1, Math.ceil((tp?.size ?? 1) / (nodes?.size ?? 1)));
  const from = tp === undefined
    ? "SGLang's default tp-size 1"
    : nodes === undefined
    ? `${tp.name} ${tp.size}`
    : `${tp.name} ${tp.size} ÷ nnodes ${nodes.size}`;
  return { kind: "whole", count, from };
}

// python/sglang/srt/metrics/collector.py; off unless --enable-metrics. Its
// token totals move when a request ends (observe_one_finished_request);
// realtime_tokens_total at every prefill batch and decode step
// (managers/scheduler_components/metrics_reporter.py, read at 00df707e).
const SGLANG_TRAFFIC: TrafficRule = {
  path: "/metrics",
  running: "sglang:num_running_reqs",
  waiting: "sglang:num_queue_reqs",
  promptTokens: "sglang:prompt_tokens_total",
  generatedTokens: "sglang:generation_tokens_total",
  steps: {
    counter: "sglang:realtime_tokens_total",
    tokens: 'sglang:realtime_tokens_total{mode="decode"}',
  },
  enableFlag: "--enable-metrics",
};

// python/sglang/srt/utils (configure_logger): `[%(asctime)s{prefix}] %(message)s`,
// the prefix a scheduler's ` DP0 TP0 EP0`; the date `%Y-%m-%d` or `%m-%d`.
const logged = atPrefix(
  String.raw`\[(?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z]+\d+)*\] `,
);

export const SGLANG: EngineKind = {
  name: "sglang",
  title: "SGLang",
  executable: "python3",
  install: "pip install 'sglang[all]'",
  argv(ctx) {
    return [
      "-m",
      "sglang.launch_server",
      "--model-path",
      ctx.model,
      ...serveFlags(ctx, "--served-model-name", SGLANG_TRAFFIC.enableFlag),
    ];
  },
  devices,
  ownedFlags: ["--served-model-name", "--model-path", "--model"],
  flags: {
    helpArgv: ["-m", "sglang.launch_server", "--help"],
    parseHelp: argparseFlags,
    prefixes: true,
  },
  traffic: SGLANG_TRAFFIC,
  // python/sglang/srt/server_args.py: mem_fraction_static, of the device's
  // total, for the weights and the KV cache pool.
  sizing: {
    flags:
      "--context-length,--mem-fraction-static,--tp-size --tensor-parallel-size,--pp-size --pipeline-parallel-size,--quantization,--dtype,--kv-cache-dtype,--max-running-requests,--max-total-tokens,--chunked-prefill-size,--cuda-graph-max-bs,--disable-cuda-graph"
        .split(","),
    knobs: ["--mem-fraction-static"],
    share: { flag: "--mem-fraction-static" },
    split: [TP, ["--pp-size", "--pipeline-parallel-size"]],
    budget: (given) => ["--mem-fraction-static", fractionOf(given)],
  },
  // python/sglang/srt/environ.py: SGLANG_DG_CACHE_DIR (~/.cache/deep_gemm),
  // DeepGEMM's DG_JIT_CACHE_DIR (layers/deep_gemm_wrapper/compile_utils.py);
  // --enable-torch-compile uses inductor's and Triton's (docs/references/torch_compile_cache.md).
  caches: {
    SGLANG_DG_CACHE_DIR: "deep_gemm",
    TORCHINDUCTOR_CACHE_DIR: "torchinductor",
    TRITON_CACHE_DIR: "triton",
  },
  // Lines from python/sglang/srt/model_executor/model_runner.py (load_model,
  // init_memory_pool, init_device_graphs).
  output: {
    phases: [
      { match: /Load weight begin/, phase: "loading" },
      SHARDS,
      {
        match: /Load weight end|KV Cache is allocated|Capture cuda graph begin/,
        phase: "preparing",
      },
    ],
    causes: [
      {
        match:
          /Not enough memory\. Please try to increase --mem-fraction-static/,
        cause: "gpu-out-of-memory",
      },
      ...PYTHON_CAUSES,
    ],
    // GB is 2^30 bytes there. model_runner.py (load_model, init_device_graphs:
    // `Capture cuda graph end` or, newer, `Capture target decode CUDA graph
    // end`) and mem_cache/memory_pool.py (`K size`/`V size`, MLA's `KV size`).
    memory: [
      inGiB("weights", logged`Load weight end\..*?mem usage=(\S+) GB\.?`),
      {
        match: logged`KV Cache is allocated\. #tokens: (\S+?),.*`,
        part: "kv_tokens",
      },
      inGiB(
        "kv_cache",
        logged`KV Cache is allocated\..*?(?:K size: (\S+) GB, V size: (\S+)|\bKV size: (\S+)) GB`,
      ),
      inGiB("graphs", logged`Capture [\w ]*graph end\..*?mem usage=(\S+) GB.*`),
    ],
  },
};
