import type { EngineKind, TrafficRule } from "./engine_kind.ts";
import { atPrefix, helpFlags, serveFlags } from "./engine_kind.ts";

// Its help (`common/arg.cpp`, `common_arg::to_string`) prints each option
// from the first column, aliases comma-separated, the value hint after them,
// the help text from column 40; negations are flags of their own.
export function llamaServerFlags(text: string): string[] {
  // The aliases end where two spaces lead to the help text.
  return helpFlags(
    text,
    (line) =>
      line.startsWith("-") ? line.split(/ {2,}(?=[^-\s])/)[0] : undefined,
    /,\s*/,
  );
}

// The only GGUF file, or the first shard of a split model.
function singleGguf(dir: string, names: readonly string[]): string {
  const files = names.filter((name) => name.endsWith(".gguf")).sort();
  const shards = files.filter((f) => /-00001-of-\d{5}\.gguf$/.test(f));
  if (files.length === 1) return `${dir}/${files[0]}`;
  if (
    shards.length === 1 && files.every((f) => /-\d{5}-of-\d{5}\.gguf$/.test(f))
  ) {
    return `${dir}/${shards[0]}`;
  }
  const holds = `Cannot choose a model file: ${dir} holds`;
  const list = files.join(", ");
  throw new Error(
    files.length === 0
      ? `${holds} no .gguf file`
      : `${holds} ${files.length} .gguf files (${list}); set the card's local to one of them`,
  );
}

// tools/server/server-context.cpp (`server_slot::to_json`): each slot's
// `id_task`, `is_processing`; on unless `--no-slots` (common/arg.cpp).
function slotTasks(json: unknown): number[] | null {
  if (!Array.isArray(json)) return null;
  const slots = json as { id_task?: unknown; is_processing?: unknown }[];
  return slots.flatMap((slot) =>
    slot?.is_processing === true && typeof slot.id_task === "number"
      ? [slot.id_task]
      : []
  );
}

// common/arg.cpp: idle seconds (an int, -1 off) after which it frees the
// model, context and KV cache; the next request reloads them.
const SLEEP_FLAG = "--sleep-idle-seconds";

// tools/server/server-task.cpp (to_metrics), read on the build here; `/metrics`
// and `/props` do not wake a sleeping server, `/slots` does (../shared/ENGINES.md).
// Its token totals move when a request (or a prefill) ends; n_decode_total and
// the busy slots at every llama_decode (server-context.cpp, metrics_post_decode).
const LLAMA_TRAFFIC: TrafficRule = {
  path: "/metrics",
  running: "llamacpp:requests_processing",
  waiting: "llamacpp:requests_deferred",
  promptTokens: "llamacpp:prompt_tokens_total",
  generatedTokens: "llamacpp:tokens_predicted_total",
  steps: {
    counter: "llamacpp:n_decode_total",
    perStep: "llamacpp:n_busy_slots_per_decode",
    digits: 6, // C++'s `<<` on a double (server-task.cpp, to_metrics)
    // common/arg.cpp: -b, --batch-size, 2048: one llama_decode per batch.
    batch: {
      flags: ["-b", "--batch-size"],
      tokens: 2048,
      seconds: "llamacpp:prompt_seconds_total",
    },
  },
  enableFlag: "--metrics",
  sleepFlag: SLEEP_FLAG,
  asleep: { path: "/props" },
  requests: { path: "/slots", processing: slotTasks },
};

// common/arg.cpp: each flag that sets the log's verbosity.
const VERBOSITY = "-lv --verbosity --log-verbosity -v --verbose --log-verbose"
  .split(" ");

// common/log.cpp (common_log_entry::print): `common_init()` turns on the
// prefix, `M.ss.mmm.uuu ` and the level's letter; `--log-prefix` off leaves none.
const logged = atPrefix(String.raw`(?:\d+\.\d{2}\.\d{3}\.\d{3} [IWED] )?`);

// tools/server/server-context.cpp: `handle_sleeping_state` reloads the model
// at a wake; `load_model` prints `initializing, n_slots` once its buffers are
// made. SRV_INF is `srv  %12.*s: ` (server-common.h).
const WAKE = {
  opens: logged`srv +handle_sleep: server is exiting sleeping state$`,
  closes: logged`srv +load_model: initializing, n_slots = .*$`,
};

// No `caches`: ggml's kernels are compiled with llama-server, none at its start.
export const LLAMA_CPP: EngineKind = {
  name: "llama.cpp",
  title: "llama.cpp",
  executable: "llama-server",
  install:
    "deno task engine:llama builds it and its --print-path says where: put that directory on PATH; or use a llama.cpp release",
  argv(ctx) {
    return [
      ctx.isLocal ? "-m" : "-hf",
      ctx.model,
      // Its buffer lines (`output.memory`) are trace, level 4 (common/log.h);
      // the card's own verbosity wins.
      ...ctx.card.args.some((a) => VERBOSITY.includes(a.split("=")[0]!))
        ? []
        : ["-lv", "4"],
      ...serveFlags(ctx, "--alias", LLAMA_TRAFFIC.enableFlag),
    ];
  },
  localFile: singleGguf,
  ownedFlags:
    "--api-key-file --alias -a -m --model -hf -hfr --hf-repo -mu --model-url"
      .split(" "),
  devices: () => ({ kind: "whole", count: 1, from: "llama.cpp uses one GPU" }),
  flags: { helpArgv: ["--help"], parseHelp: llamaServerFlags },
  traffic: LLAMA_TRAFFIC,
  sleep: { flag: SLEEP_FLAG },
  // common/arg.cpp on the build here: no absolute knob. `--fit` (on by
  // default) sets the unset -ngl and -c so that `--fit-target` MiB stay free
  // on each device after the load: what the others placed there leave spare.
  sizing: {
    flags:
      "-c --ctx-size,-np --parallel,-ngl --gpu-layers --n-gpu-layers,-ctk --cache-type-k,-ctv --cache-type-v,-fa --flash-attn,-b --batch-size,-ub --ubatch-size,-sm --split-mode,-ts --tensor-split,-fit --fit,-fitt --fit-target,--kv-unified-per-slot"
        .split(","),
    knobs: ["-fit", "--fit", "-fitt", "--fit-target"],
    packs: true,
    budget: ({ spareMiB }) => ["--fit", "on", "--fit-target", String(spareMiB)],
  },
  // common/arg.cpp: `--api-key` keeps each field of `parse_csv_row(value)`,
  // split at commas, a field opening with `"` quoted (`""` a quote in it).
  apiKeyList: { separator: ",", quote: '"' },
  // tools/server/server.cpp (`signal_handler`): a second SIGTERM exits at
  // once; after the first it waits on open connections, maybe for ever.
  termAgainMs: 1_000,
  // Lines from tools/server/server.cpp (load_model, `model loaded`, the
  // bind error), common/arg.cpp (`error: invalid argument: --x`),
  // ggml/src/gguf.cpp (`failed to open GGUF file`) and
  // ggml/src/ggml-cuda/ggml-cuda.cu (`cudaMalloc failed: out of memory`).
  output: {
    phases: [
      { match: /load_model: loading model/, phase: "loading" },
      { match: /: model loaded$/, phase: "preparing" },
    ],
    causes: [
      {
        match: /error: invalid argument|error while handling argument/,
        cause: "bad-arguments",
      },
      { match: /couldn't bind HTTP server socket/, cause: "port-in-use" },
      { match: /failed to open GGUF file/, cause: "model-not-found" },
      { match: /cudaMalloc failed: out of memory/, cause: "gpu-out-of-memory" },
    ],
    // tools/server/server-context.cpp at de3ff815 (`handle_sleeping_state`;
    // SRV_INF cuts the function's name to 12 characters): entering frees the
    // model, exiting reloads it with load_model, whose `initializing` line
    // comes once the model and its context are back; a failed reload aborts.
    // Anchored as the load lines are: a request's text cannot put it to sleep.
    sleep: {
      asleep: logged`srv +handle_sleep: server is entering sleeping state$`,
      waking: WAKE.opens,
      awake: WAKE.closes,
      failed: /failed to reload model after sleeping/,
    },
    // src/llama-model.cpp (load_tensors), src/llama-kv-cache.cpp and
    // src/llama-context.cpp (sched_reserve; `llama_context`,
    // `llama_kv_cache_unified` in older builds) at de3ff815 (the build here):
    // printed at `-lv 4` only, which the launcher adds (`argv`). At `-v` the
    // dry runs of `--fit` (common/fit.cpp) print theirs first.
    memory: [
      {
        match:
          logged`load_tensors: +(?<device>\S+) model buffer size = +(\S+) MiB$`,
        part: "weights",
        anew: true,
      },
      {
        match:
          logged`llama_kv_cache(?:_unified)?: +(?<device>\S+) KV buffer size = +(\S+) MiB$`,
        part: "kv_cache",
      },
      {
        match:
          logged`llama_kv_cache(?:_unified)?: size = +\S+ MiB \( *(\S+) cells, +\d+ layers, +\d+\/\d+ seqs\).*$`,
        part: "kv_tokens",
      },
      {
        match:
          logged`(?:sched_reserve|llama_context): +(?<device>\S+) compute buffer size = +(\S+) MiB$`,
        part: "compute",
      },
    ],
    load: WAKE,
  },
};
