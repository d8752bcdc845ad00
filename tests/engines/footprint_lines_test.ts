/**
 * Each kind's memory rules on lines as each engine's source prints them (the
 * format strings filled in; the file named at each), under the prefixes
 * their versions put before them, folded into a Footprint with nvidia-smi's
 * figure.
 */
import assert from "node:assert/strict";
import { ENGINE_KINDS } from "../../src/engines/kinds.ts";
import {
  FootprintLines,
  footprintOf,
} from "../../src/engines/footprint_lines.ts";

const AT = new Date("2026-12-01T12:00:00.000Z");

function fold(kind: string, lines: readonly string[]) {
  const memory = new FootprintLines(ENGINE_KINDS[kind]!.output!.memory);
  const filled = lines.filter((line) => memory.line(line));
  return { memory, filled };
}

Deno.test("llama.cpp: model, KV and compute buffers sum per part over devices, CPU_Mapped is CPU, cells are KV tokens", () => {
  // src/llama-model.cpp `%s: %12s model buffer size = %8.2f MiB`,
  // src/llama-kv-cache.cpp `%s: %10s KV buffer size = %8.2f MiB` and
  // `%s: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), ...`,
  // src/llama-context.cpp `%s: %10s compute buffer size = %8.2f MiB`:
  // with the build's `-lv 4` prefix, without any, and an older bare one.
  const { memory, filled } = fold("llama.cpp", [
    "0.00.018.222 I load_tensors:   CPU_Mapped model buffer size =   129.05 MiB",
    "load_tensors:        CUDA0 model buffer size =  4096.50 MiB",
    "llama_kv_cache:        CPU KV buffer size =    16.00 MiB",
    "llama_kv_cache_unified:      CUDA0 KV buffer size =   512.00 MiB",
    "0.00.018.670 I llama_kv_cache: size =   16.00 MiB (   256 cells,   2 layers,  4/1 seqs), K (f16):    8.00 MiB, V (f16):    8.00 MiB",
    "sched_reserve:        CPU compute buffer size =    17.01 MiB",
    "llama_context:      CUDA0 compute buffer size =   300.00 MiB",
    // Not memory: the output buffer, the debug check, a recurrent state.
    "llama_context:        CPU  output buffer size =     0.12 MiB",
    "sched_reserve:      CUDA0 compute buffer size is   300.0000 MiB, matches expectation of   300.0000 MiB",
    "llama_memory_recurrent: size =    1.00 MiB (     1 cells,   2 layers,  1 seqs  0 rs_seq), R (f32):    0.50 MiB",
  ]);
  assert.equal(filled.length, 7);
  const f = footprintOf(memory, null, AT)!;
  assert.equal(f.weights_mib, 4225.55);
  assert.equal(f.kv_cache_mib, 528);
  assert.equal(f.kv_tokens, 256);
  assert.equal(f.compute_mib, 317.01);
  assert.equal(f.graphs_mib, null);
  assert.equal(f.total_mib, 5070.56);
  assert.equal(f.device, "CUDA0", "the accelerator, not its host buffers");
  assert.equal(f.from, "load lines");
  assert.equal(f.measured_at, AT.toISOString());
});

Deno.test("llama.cpp at -v: the dry runs of --fit before the load are not counted, the real load's lines are", () => {
  // common/fit.cpp loads with no_alloc first; at -v its lines print (seen on
  // the build here: two trial sets, then the load).
  const trial = (cells: number, compute: string) => [
    "0.00.021.835 I load_tensors:          CPU model buffer size =     0.00 MiB",
    "0.00.022.127 I llama_kv_cache:        CPU KV buffer size =     0.00 MiB",
    `0.00.022.138 I llama_kv_cache: size =    0.12 MiB (  ${cells} cells,   2 layers,  4/1 seqs), K (f16):    0.06 MiB, V (f16):    0.06 MiB`,
    `0.00.023.942 I sched_reserve:        CPU compute buffer size =     ${compute} MiB`,
  ];
  const { memory } = fold("llama.cpp", [
    ...trial(256, "0.63"),
    ...trial(1024, "2.01"),
    "0.00.128.776 I load_tensors:   CPU_Mapped model buffer size =     0.44 MiB",
    "0.00.130.021 I llama_kv_cache:        CPU KV buffer size =     0.50 MiB",
    "0.00.130.122 I llama_kv_cache: size =    0.50 MiB (  1024 cells,   2 layers,  4/1 seqs), K (f16):    0.25 MiB, V (f16):    0.25 MiB",
    "0.00.138.541 I sched_reserve:        CPU compute buffer size =     2.01 MiB",
  ]);
  const f = footprintOf(memory, null, AT)!;
  assert.deepEqual(
    [f.weights_mib, f.kv_cache_mib, f.kv_tokens, f.compute_mib, f.total_mib],
    [0.44, 0.5, 1024, 2.01, 2.95],
  );
});

Deno.test("vLLM: weights, KV cache, graphs in GiB and KV tokens, old and new spellings, under any prefix", () => {
  // vllm/v1/worker/gpu_model_runner.py `Model loading took %.4f GiB and %.6f
  // seconds` (older) / `... GiB memory and ...` and `Graph capturing finished
  // in %.0f secs, took %.2f GiB`; vllm/v1/worker/gpu_worker.py `Available KV
  // cache memory: %.2f GiB`; vllm/v1/core/kv_cache_utils.py `GPU KV cache
  // size: %s tokens` (alone, older) or merged with `Maximum concurrency`.
  for (
    const lines of [
      [
        "INFO 11-25 08:40:10 [gpu_model_runner.py:1949] Model loading took 15.2700 GiB and 8.520000 seconds",
        "INFO 11-25 08:40:33 [gpu_worker.py:276] Available KV cache memory: 49.09 GiB",
        "INFO 11-25 08:40:33 [kv_cache_utils.py:1087] GPU KV cache size: 400,000 tokens",
        "INFO 11-25 08:40:33 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 48.83x",
        "INFO 11-25 08:40:40 [gpu_model_runner.py:3480] Graph capturing finished in 8 secs, took 0.31 GiB",
      ],
      [
        "(EngineCore_DP0 pid=212) INFO 10-06 12:00:10 [gpu_model_runner.py:2602] Model loading took 15.27 GiB memory and 8.520000 seconds",
        "(EngineCore_DP0 pid=212) INFO 10-06 12:00:33 [gpu_worker.py:298] Available KV cache memory: 49.09 GiB",
        "(EngineCore_DP0 pid=212) INFO 10-06 12:00:33 [kv_cache_utils.py:1087] GPU KV cache size: 400,000 tokens, Maximum concurrency for 8,192 tokens per request: 48.83x",
        "(EngineCore_DP0 pid=212) INFO 10-06 12:00:40 [gpu_model_runner.py:3480] Graph capturing finished in 8 secs, took 0.31 GiB",
      ],
    ]
  ) {
    const { memory } = fold("vllm", lines);
    const f = footprintOf(memory, null, AT)!;
    assert.equal(f.weights_mib, 15636.48);
    assert.equal(f.kv_cache_mib, 50268.16);
    assert.equal(f.kv_tokens, 400_000);
    assert.equal(f.graphs_mib, 317.44);
    assert.equal(f.compute_mib, null);
    assert.equal(f.total_mib, 66222.08);
    assert.equal(f.device, null, "its lines name no device");
  }
});

Deno.test("vLLM with --kv-cache-memory: the KV cache it reserved (no profiling line)", () => {
  // vllm/v1/worker/gpu_worker.py (determine_available_memory, the
  // kv_cache_memory_bytes branch).
  const { memory } = fold("vllm", [
    "(EngineCore_DP0 pid=212) INFO 09-16 12:37:56 [gpu_worker.py:492] Initial free memory 137.66 GiB, reserved 6.00 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect the gpu_memory_utilization config.",
  ]);
  assert.equal(footprintOf(memory, null, AT)!.kv_cache_mib, 6144);
});

Deno.test("vLLM with tensor parallelism: each worker's memory adds up, the KV tokens do not", () => {
  const { memory } = fold(
    "vllm",
    [0, 1].flatMap((rank) => [
      `(Worker_TP${rank} pid=30${rank}) INFO 10-06 12:00:10 [gpu_model_runner.py:2602] Model loading took 7.50 GiB memory and 8.5 seconds`,
      `(Worker_TP${rank} pid=30${rank}) INFO 10-06 12:00:33 [gpu_worker.py:298] Available KV cache memory: 20.00 GiB`,
    ]).concat(
      "(EngineCore_DP0 pid=212) INFO 10-06 12:00:33 [kv_cache_utils.py:1087] GPU KV cache size: 90,841 tokens, Maximum concurrency for 4,096 tokens per request: 22.18x",
    ),
  );
  const f = footprintOf(memory, null, AT)!;
  assert.equal(f.weights_mib, 15 * 1024);
  assert.equal(f.kv_cache_mib, 40 * 1024);
  assert.equal(f.kv_tokens, 90_841);
});

Deno.test("SGLang: weights, K + V (or MLA's KV size), graphs in GB (2^30) and tokens; other `mem usage=` lines are not weights", () => {
  // python/sglang/srt/model_executor/model_runner.py `Load weight end. ...
  // mem usage=%.2f GB.` and `Capture cuda graph end. Time elapsed: %.2f s.
  // mem usage=%.2f GB. ...` (newer: `Capture target decode CUDA graph end.
  // elapsed=...`); python/sglang/srt/mem_cache/memory_pool.py `KV Cache is
  // allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB` (MLA: `KV size`).
  const { memory } = fold("sglang", [
    "[2025-11-25 08:40:05 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=62.91 GB, mem usage=15.59 GB.",
    "[2025-11-25 08:40:05 TP0] Draft model loaded. type=LlamaForCausalLMEagle3, mem usage=2.21 GB",
    "[2025-11-25 08:40:06 TP0] KV Cache is allocated. #tokens: 400000, K size: 27.47 GB, V size: 27.47 GB",
    "[2026-03-11 13:53:24 DP0 TP0 EP0] Capture cuda graph end. Time elapsed: 8.41 s. mem usage=0.98 GB. avail mem=5.04 GB.",
    "[2026-08-28 21:34:20] Capture target decode CUDA graph end. elapsed=16.40 s, mem usage=0.50 GB, avail mem=4.50 GB.",
  ]);
  const f = footprintOf(memory, null, AT)!;
  assert.equal(f.weights_mib, 15964.16);
  assert.equal(f.kv_cache_mib, 56258.56);
  assert.equal(f.kv_tokens, 400_000);
  assert.equal(f.graphs_mib, 1515.52);
  const mla = fold("sglang", [
    "[2025-11-04 05:27:13 DP0 TP0 EP0] KV Cache is allocated. #tokens: 524288, KV size: 17.16 GB",
  ]).memory;
  assert.equal(footprintOf(mla, null, AT)!.kv_cache_mib, 17571.84);
  assert.equal(footprintOf(mla, null, AT)!.kv_tokens, 524_288);
});

Deno.test("nvidia-smi's per-process figure is the total where larger than the parts, and alone when no line came", () => {
  const { memory } = fold("llama.cpp", [
    "load_tensors:        CUDA0 model buffer size =  1000.00 MiB",
  ]);
  const larger = footprintOf(memory, { "0": 900, "1": 400 }, AT)!;
  assert.equal(larger.total_mib, 1300);
  assert.equal(larger.weights_mib, 1000);
  assert.equal(larger.from, "load lines + nvidia-smi");
  assert.equal(footprintOf(memory, { "0": 600 }, AT)!.total_mib, 1000);
  const none = new FootprintLines(ENGINE_KINDS.vllm!.output!.memory);
  assert.equal(footprintOf(none, null, AT), null, "nothing known");
  assert.equal(footprintOf(none, {}, AT), null);
  const tokens = fold("vllm", [
    "INFO 11-25 08:40:33 [kv_cache_utils.py:1087] GPU KV cache size: 400,000 tokens",
  ]).memory;
  const alone = footprintOf(tokens, null, AT)!;
  assert.deepEqual(
    [alone.kv_tokens, alone.total_mib],
    [400_000, null],
    "no MiB known, no total",
  );
  const smi = footprintOf(none, { "0": 2048 }, AT)!;
  assert.deepEqual(
    { total: smi.total_mib, weights: smi.weights_mib, from: smi.from },
    { total: 2048, weights: null, from: "nvidia-smi" },
  );
});

Deno.test("llama.cpp gets -lv 4 for its buffer lines unless the card sets its verbosity", () => {
  const kind = ENGINE_KINDS["llama.cpp"]!;
  const argv = (args: string[]) =>
    kind.argv({
      model: "/m.gguf",
      isLocal: true,
      host: "127.0.0.1",
      port: 5000,
      apiKey: "",
      card: { name: "m", verb: "chat", engine: "llama.cpp", args } as never,
    });
  const plain = argv([]);
  assert.equal(plain[plain.indexOf("-lv") + 1], "4");
  for (
    const own of [["-lv", "3"], ["--verbosity", "2"], ["--log-verbosity=1"], [
      "-v",
    ]]
  ) {
    const line = argv(own);
    assert.equal(
      line.filter((a) => a === "-lv").length,
      own[0] === "-lv" ? 1 : 0,
      own.join(" "),
    );
    assert.deepEqual(line.slice(-own.length), own, "the card's own, last");
  }
});
