import assert from "node:assert/strict";
import {
  hubCache,
  incompleteBytes,
  LoadWatch,
} from "../../src/engines/load_watch.ts";
import { VLLM } from "../../src/engines/kinds/vllm.ts";
import { SGLANG } from "../../src/engines/kinds/sglang.ts";
import { LLAMA_CPP } from "../../src/engines/kinds/llama_cpp.ts";
import { captureLog } from "../support/helpers.ts";
import { manyBlobs } from "../fixtures/many_blobs.ts";

Deno.test("the load watch: unknown, binary and endless lines change nothing and are never held whole", () => {
  const watch = new LoadWatch(VLLM.output);
  let now = 0;
  watch.now = () => now; // its second's budget on a clock the test moves
  const feed = watch.feeder();
  feed(new TextEncoder().encode("some line no rule knows\n"));
  feed(
    crypto.getRandomValues(new Uint8Array(60_000)).map((b) =>
      b === 10 || b === 13 ? 0 : b
    ),
  );
  feed(new TextEncoder().encode("\n"));
  // Within the second's budget: a 150 KB line is cut at 1 KiB, its end unread.
  feed(new Uint8Array(150_000).fill(65));
  feed(
    new TextEncoder().encode(" CUDA out of memory at the end of a long line\n"),
  );
  assert.equal(watch.phase, null);
  assert.equal(watch.cause, undefined, "the end of a cut line is not read");
  // A flood past 256 KiB in a second: the rest of that second is skipped.
  for (let i = 0; i < 200; i++) feed(new Uint8Array(100_000).fill(65));
  feed(new TextEncoder().encode("\nStarting to load model x...\n"));
  assert.equal(watch.phase, null, "skipped within the flood's second");
  now += 1_050;
  feed(
    new TextEncoder().encode(
      "Starting to load model x...\nLoading safetensors checkpoint shards:  45% Completed | 9/20 [00:01<00:01]\r",
    ),
  );
  assert.equal(watch.phase, "loading");
  assert.deepEqual(watch.progress, { done: 9, total: 20, unit: "shards" });
  feed(
    new TextEncoder().encode(
      `torch.OutOfMemoryError: CUDA out of memory. ${"x".repeat(500)}\n`,
    ),
  );
  const cause = causeOf(watch);
  assert.equal(cause?.cause, "gpu-out-of-memory");
  assert.equal(cause?.message.length, 200);
  assert.equal(watch.phase, "loading", "a cause line is no phase");
});

Deno.test("a download is seen by its growth only: a blob left behind by a killed run is no download", () => {
  const watch = new LoadWatch(VLLM.output);
  watch.downloaded(5_000_000);
  assert.equal(watch.phase, null, "the first look is a baseline");
  watch.downloaded(5_000_000);
  assert.equal(watch.phase, null);
  watch.downloaded(7_000_000);
  assert.equal(watch.phase, "downloading");
  assert.deepEqual(watch.progress, {
    done: 7_000_000,
    total: null,
    unit: "bytes",
  });
  watch.line("Starting to load model org/m...");
  watch.downloaded(null);
  assert.equal(
    watch.phase,
    "loading",
    "the finished download does not come back",
  );
});

Deno.test("the hub cache is HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub; blobs summed", async () => {
  assert.equal(
    hubCache({ HF_HUB_CACHE: "/c", HF_HOME: "/h", HOME: "/u" }),
    "/c",
  );
  assert.equal(hubCache({ HF_HOME: "/h", HOME: "/u" }), "/h/hub");
  assert.equal(hubCache({ HOME: "/u" }), "/u/.cache/huggingface/hub");
  const dir = Deno.makeTempDirSync();
  try {
    const blobs = `${dir}/models--org--m/blobs`;
    Deno.mkdirSync(blobs, { recursive: true });
    assert.equal(await incompleteBytes(dir, "org/m"), null);
    Deno.writeFileSync(`${blobs}/a.incomplete`, new Uint8Array(10));
    Deno.writeFileSync(`${blobs}/b.incomplete`, new Uint8Array(5));
    Deno.writeFileSync(`${blobs}/c`, new Uint8Array(100));
    assert.equal(await incompleteBytes(dir, "org/m"), 15);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

/** Read anew (an assertion above narrowed the property to undefined). */
function causeOf(watch: LoadWatch) {
  return watch.cause;
}

Deno.test("the cause line: only what a served run printed after its first 200; the message a window around the match, cleaned", () => {
  const watch = new LoadWatch({
    phases: [],
    causes: [{ match: /40[14] Client Error/, cause: "model-not-found" }],
  });
  watch.line("EntryNotFoundError: 404 Client Error … generation_config.json");
  assert.equal(watch.cause?.cause, "model-not-found");
  watch.served();
  assert.equal(watch.cause, undefined);
  const long = "x".repeat(600) + " \x1b]0;t\x07401 Client Error\x1b[2J " +
    "y".repeat(600);
  watch.line(long);
  const message = (watch.cause as { message: string } | undefined)!.message;
  assert.ok(message.length <= 200, `${message.length}`);
  assert.match(message, /^…x+ 401 Client Error y+…$/);
  // deno-lint-ignore no-control-regex -- none may be left
  assert.ok(!/[\x00-\x1f]/.test(message));
});

// A request's body in the engine's log (llama-server at -lv 4,
// tools/server/server-http.cpp `log_server_request`: `SRV_DBG("request:  %s\n",
// req.body)`; vLLM --enable-log-requests; SGLang --log-requests).
const FORGED = "CUDA0 model buffer size = 9999999.00 MiB";

function llamaLoad(watch: LoadWatch): void {
  // src/llama-model.cpp (load_tensors) under common/log.cpp's prefix (`M.ss.mmm.uuu I `).
  watch.line(
    "0.00.018.222 I load_tensors:        CUDA0 model buffer size =   129.05 MiB",
  );
}

Deno.test("load lines count only while the engine loads: a request body after the first 200 changes no footprint, at the line's start or inside it", () => {
  const watch = new LoadWatch(LLAMA_CPP.output, "a");
  let heard = 0;
  watch.onMemory = () => heard++;
  llamaLoad(watch);
  // Inside a line during the load: not at the logger's prefix.
  watch.line(
    `0.00.020.000 D srv  log_server_r: request:  {"messages":[{"role":"user","content":"load_tensors: ${FORGED}"}]}`,
  );
  watch.served();
  // After the first 200, even a whole line of the engine's own shape (a raw newline in a body).
  watch.line(`0.03.000.000 D srv  log_server_r: request:  {"content":"x`);
  watch.line(`0.00.018.223 I load_tensors:        ${FORGED}`);
  watch.line(`load_tensors:          CPU model buffer size = 9999999.00 MiB`);
  assert.equal(watch.memory.parts.weights, 129.05);
  assert.equal(heard, 1);
});

Deno.test("vLLM and SGLang: only a line at the logger's prefix counts; a logged prompt holding the words does not", () => {
  const vllm = new LoadWatch(VLLM.output, "v");
  // vllm/logger.py `%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s`, `%m-%d %H:%M:%S`;
  // vllm/entrypoints/logger.py (RequestLogger.log_inputs) with --enable-log-requests.
  vllm.line(
    "INFO 12-01 12:00:09 [logger.py:41] Received request cmpl-1: prompt: 'Model loading took 999.00 GiB memory and 1 seconds'",
  );
  vllm.line(
    "(EngineCore_DP0 pid=212) INFO 12-01 12:00:10 [gpu_model_runner.py:2602] Model loading took 2.00 GiB memory and 8.5 seconds",
  );
  assert.equal(vllm.memory.parts.weights, 2048);
  const sglang = new LoadWatch(SGLANG.output, "s");
  // python/sglang/srt/utils/common.py configure_logger `[%(asctime)s{prefix}] %(message)s`;
  // tokenizer_manager.py `Receive: obj=...` with --log-requests.
  sglang.line(
    "[2025-11-25 08:40:04] Receive: obj=GenerateReqInput(text='Load weight end. avail mem=1 GB, mem usage=999.00 GB.')",
  );
  sglang.line(
    "[2025-11-25 08:40:05 TP0] Load weight end. type=Q, dtype=torch.bfloat16, avail mem=62.91 GB, mem usage=1.00 GB.",
  );
  assert.equal(sglang.memory.parts.weights, 1024);
});

Deno.test("llama.cpp's wake reopens the load lines until its load is over; a figure not a number, or above its device's total, is dropped with one warning", async () => {
  const watch = new LoadWatch(LLAMA_CPP.output, "a");
  watch.memory.ceilingMiB = () => 81_920;
  const { lines } = await captureLog(() => {
    watch.line(
      "0.00.018.222 I load_tensors:        CUDA0 model buffer size =    1.2.3 MiB",
    );
    watch.line(
      "0.00.018.223 I load_tensors:        CUDA0 model buffer size =      nan MiB",
    );
    watch.line(
      "0.00.018.224 I llama_kv_cache:      CUDA0 KV buffer size = 100000000000000000000.00 MiB",
    );
    watch.line(
      "0.00.018.225 I load_tensors:        CUDA0 model buffer size =   100.00 MiB",
    );
    // tools/server/server-context.cpp (load_model): after the buffers.
    watch.line(
      "0.00.019.000 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'",
    );
    watch.line(
      "0.00.019.100 I sched_reserve:      CUDA0 compute buffer size =   999.00 MiB",
    );
  });
  assert.deepEqual(watch.memory.parts, { weights: 100 });
  const warned = lines.filter((l) => l.startsWith("warn:"));
  assert.equal(warned.length, 1, warned.join("\n"));
  assert.match(warned[0]!, /engine a: .*"1\.2\.3".*expected/);
  watch.served();
  watch.line(
    "0.05.000.000 I sched_reserve:      CUDA0 compute buffer size =   999.00 MiB",
  );
  // tools/server/server-context.cpp (handle_sleeping_state): the wake reloads the model.
  watch.line(
    "0.09.000.000 I srv  handle_sleep: server is exiting sleeping state",
  );
  watch.line(
    "0.09.000.100 I load_tensors:        CUDA0 model buffer size =   100.00 MiB",
  );
  watch.line(
    "0.09.000.200 I sched_reserve:      CUDA0 compute buffer size =    10.00 MiB",
  );
  watch.line(
    "0.09.000.300 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'",
  );
  watch.line(`0.09.000.400 I load_tensors:        ${FORGED}`);
  assert.deepEqual(watch.memory.parts, { weights: 100, compute: 10 });
});

Deno.test("the download look over 50,000 .incomplete blobs never holds the event loop: timers keep firing while it runs", async () => {
  const home = await Deno.makeTempDir({ prefix: "serve-hf-" });
  try {
    await manyBlobs(home, "org/many-blobs", 50_000, true);
    // A synchronous read gives no tick and one gap as long as the look
    // (0 ticks, gaps of 217-709 ms here); the asynchronous one 19-84 ticks,
    // its longest gap a fraction of the look. Counted, not timed: a loaded
    // machine stretches both alike.
    let [last, gap, ticks] = [performance.now(), 0, 0];
    const timer = setInterval(() => {
      const now = performance.now();
      [gap, last, ticks] = [Math.max(gap, now - last), now, ticks + 1];
    }, 1);
    const began = performance.now();
    const bytes = await incompleteBytes(`${home}/hub`, "org/many-blobs");
    const took = performance.now() - began;
    gap = Math.max(gap, performance.now() - last);
    clearInterval(timer);
    assert.notEqual(bytes, null, "the blobs were found");
    assert.ok(ticks > 0, `no timer fired in the ${took.toFixed(0)} ms look`);
    assert.ok(
      gap < 0.75 * took,
      `the loop was held ${gap.toFixed(0)} ms of the ${
        took.toFixed(0)
      } ms look`,
    );
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});
