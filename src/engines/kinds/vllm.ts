// vLLM's flags: `vllm/engine/arg_utils.py` (`EngineArgs.add_cli_args`).
import type { EngineDevices, EngineKind } from "./engine_kind.ts";
import { atPrefix, fractionOf, inGiB, serveFlags } from "./engine_kind.ts";
import {
  flagValue,
  FlagValueError,
  sizeFlag,
  sizeProduct,
} from "./flag_values.ts";
import { argparseFlags, PYTHON_CAUSES, SHARDS } from "./python.ts";

const TP = ["--tensor-parallel-size", "-tp"];
const PP = ["--pipeline-parallel-size", "-pp"];
const SHARE = "--gpu-memory-utilization";
const DEFAULT_SHARE = 0.9;

// Ray's backend leaves placement to Ray; `data-parallel-size-local` replaces
// `data-parallel-size`: only those replicas run here.
function devices(args: readonly string[]): EngineDevices {
  if (flagValue(args, ["--distributed-executor-backend"])?.value === "ray") {
    return {
      kind: "unplaced",
      from: "distributed-executor-backend ray (Ray places the workers)",
    };
  }
  const whole = sizeProduct([
    sizeFlag(args, TP),
    sizeFlag(args, PP),
    sizeFlag(args, ["--data-parallel-size-local", "-dpl"]) ??
      sizeFlag(args, ["--data-parallel-size", "-dp"]),
  ]);
  if (whole.count > 1) return { kind: "whole", ...whole };
  const flag = flagValue(args, [SHARE]);
  if (flag === undefined) {
    return {
      kind: "share",
      share: DEFAULT_SHARE,
      from: `gpu-memory-utilization ${DEFAULT_SHARE} (vLLM's default)`,
    };
  }
  const share = Number(flag.value);
  if (!/^\s*[0-9.]+\s*$/.test(flag.value) || !(share > 0 && share <= 1)) {
    const its = `its ${flag.name} is ${JSON.stringify(flag.value)}`;
    throw new FlagValueError(
      `${its} (expected a fraction of a GPU above 0 and at most 1)`,
    );
  }
  return { kind: "share", share, from: `gpu-memory-utilization ${share}` };
}

// vllm/logger.py `_FORMAT`: `%(levelname)s %(asctime)s
// [%(fileinfo)s:%(lineno)d] %(message)s` at `%m-%d %H:%M:%S`; a worker's
// output is prefixed `(EngineCore_DP0 pid=212) ` (vllm/utils `decorate_logs`).
const logged = atPrefix(
  String
    .raw`(?:\([\w ]+ pid=\d+\) )?[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[\w./-]+:\d+\] `,
);

export const VLLM: EngineKind = {
  name: "vllm",
  title: "vLLM",
  executable: "vllm",
  install: "pip install vllm",
  argv(ctx) {
    return ["serve", ctx.model, ...serveFlags(ctx, "--served-model-name")];
  },
  devices,
  // `POST /sleep` (dev mode) is undone only by `POST /wake_up`: a request
  // that comes while it sleeps is parked (vllm/v1/engine/core.py: pause
  // modes queue new adds) and counted by `/load` (the API server's own
  // counter, vllm/entrypoints/.../api_utils.py), never by its gauges.
  sleep: {
    launcher: {
      args: ["--enable-sleep-mode", "--enable-server-load-tracking"],
      env: { VLLM_SERVER_DEV_MODE: "1" },
      sleep: "/sleep?level=1",
      wait: "&mode=wait",
      wake: "/wake_up",
      asleep: "/is_sleeping",
      // PR #34528 (v0.17): sleep pauses the scheduler; before it a request
      // stepped while asleep crashed the engine core (vLLM #15483, #28714).
      parksSince: "0.17.0",
      load: { path: "/load", field: "server_load" },
      // Level 1 keeps the CUDA context, the allocator's pool and more: about
      // 1.4 GiB on an H100 (vLLM PR #15248; ai-dynamo/dynamo #11233).
      residueMiB: 1434,
      residueFrom: "vLLM's level-1 sleep keeps about 1.4 GiB (vLLM PR #15248)",
    },
  },
  // vllm/platforms/interface.py: int(device_ids[physical_device_id]) (vllm #41848).
  integerDevices: true,
  ownedFlags: ["--served-model-name", "--model"],
  // vLLM's FlexibleArgumentParser reads `_` as `-` and takes no abbreviations.
  flags: {
    helpArgv: ["serve", "--help=all"],
    parseHelp: argparseFlags,
    underscores: true,
  },
  // vllm/v1/metrics/loggers.py (PrometheusStatLogger), always on; labels
  // {engine, model_name}, one set per engine core.
  traffic: {
    path: "/metrics",
    running: "vllm:num_requests_running",
    waiting: "vllm:num_requests_waiting",
    promptTokens: "vllm:prompt_tokens_total",
    generatedTokens: "vllm:generation_tokens_total",
    // vllm/entrypoints/openai/api_server.py: only in its development mode.
    asleep: { path: "/is_sleeping", env: "VLLM_SERVER_DEV_MODE" },
  },
  // `--shutdown-timeout` (v0.18+, PR #36666; default 0: abort all at once):
  // SIGTERM answers 503 but on /live and /metrics
  // (vllm/entrypoints/serve/elastic_ep/middleware.py), finishes what is in
  // flight within it, exits (tests/entrypoints/launchers/test_shutdown.py at
  // 3be31f74). Not added for the card: an older vLLM refuses an unknown flag.
  termDrain: { flag: "--shutdown-timeout", since: "v0.18" },
  // vllm/config/cache.py: kv_cache_memory_bytes (per GPU, bytes) ignores
  // gpu_memory_utilization for the KV cache, but the start check
  // (vllm/v1/worker/utils.py, request_memory) still wants utilization × total
  // free: both are set.
  sizing: {
    flags:
      "--max-model-len,--gpu-memory-utilization,--kv-cache-memory-bytes,--tensor-parallel-size -tp,--pipeline-parallel-size -pp,--quantization -q,--dtype,--max-num-seqs,--max-num-batched-tokens,--kv-cache-dtype,--cpu-offload-gb,--enforce-eager"
        .split(","),
    knobs: [SHARE, "--kv-cache-memory-bytes"],
    share: { flag: SHARE, default: DEFAULT_SHARE },
    split: [TP, PP],
    budget(given) {
      const share = [SHARE, fractionOf(given)];
      const { weights_mib, graphs_mib } = given.measured ?? {};
      if (weights_mib == null) return share;
      const kv = given.budgetMiB - weights_mib - (graphs_mib ?? 0);
      const bytes = String(Math.floor(kv * 2 ** 20));
      const took = Math.ceil(given.budgetMiB - kv);
      return kv > 0
        ? [...share, "--kv-cache-memory-bytes", bytes]
        : `its weights and graphs measured ${took} MiB, no room for a KV cache`;
    },
  },
  // vllm/envs.py: VLLM_CACHE_ROOT (~/.cache/vllm), torch.compile's output under
  // it (vllm/compilation/compiler_interface.py points inductor and Triton
  // there for its graphs); Triton kernels built outside a graph use Triton's own.
  caches: {
    VLLM_CACHE_ROOT: "vllm",
    TORCHINDUCTOR_CACHE_DIR: "torchinductor",
    TRITON_CACHE_DIR: "triton",
  },
  // Lines from vllm/v1/worker/gpu_model_runner.py (load_model),
  // vllm/compilation/monitor.py, vllm/v1/worker/gpu_worker.py (memory
  // profiling, KV cache) and vllm/v1/core/kv_cache_utils.py.
  output: {
    phases: [
      { match: /Fetching \d+ files/, phase: "downloading" },
      { match: /Starting to load model/, phase: "loading" },
      SHARDS,
      {
        match:
          /Model loading took|torch\.compile|Compiling a graph|Memory profiling takes|Available KV cache memory|Capturing CUDA graph/,
        phase: "preparing",
      },
    ],
    causes: [
      { match: /Error in memory profiling/, cause: "gpu-memory-profiling" },
      {
        match: /No available memory for the cache blocks/,
        cause: "gpu-out-of-memory",
      },
      ...PYTHON_CAUSES,
    ],
    // gpu_model_runner.py (load_model, capture_model), gpu_worker.py
    // (determine_available_memory), kv_cache_utils.py (`%s KV cache size: %s
    // tokens`, merged with `Maximum concurrency` in newer versions) at 001cabc1.
    // vllm/v1/worker/gpu_worker.py (`sleep`, `wake_up`), printed by the
    // engine core's worker: a line marks the sleep or the wake done.
    sleep: {
      asleep:
        logged`Sleep mode freed (\S+) GiB memory, (\S+) GiB memory is still in use\.`,
      awake: logged`It took \S+ seconds to wake up tags`,
    },
    memory: [
      inGiB("weights", logged`Model loading took (\S+) GiB`),
      inGiB("kv_cache", logged`Available KV cache memory: (\S+) GiB`),
      // With `--kv-cache-memory`, instead (gpu_worker.py, the same function).
      inGiB(
        "kv_cache",
        logged`Initial free memory \S+ GiB, reserved (\S+) GiB memory for KV Cache as specified`,
      ),
      {
        match: logged`(?:GPU )?KV cache size: (\S+) tokens`,
        part: "kv_tokens",
      },
      inGiB(
        "graphs",
        logged`Graph capturing finished in \d+ secs?, took (\S+) GiB`,
      ),
    ],
  },
};
