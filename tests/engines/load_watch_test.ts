import assert from "node:assert/strict";
import {
  hubCache,
  incompleteBytes,
  LoadWatch,
} from "../../src/engines/load_watch.ts";
import { VLLM } from "../../src/engines/kinds/vllm.ts";

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
