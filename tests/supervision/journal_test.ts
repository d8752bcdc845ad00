import assert from "node:assert/strict";
import { Journal } from "../../src/supervision/journal.ts";
import { LoadWatch } from "../../src/engines/load_watch.ts";
import { VLLM } from "../../src/engines/kinds/vllm.ts";
import { captureLog } from "../support/helpers.ts";

Deno.test("a journal that cannot be written costs one warning, and recording never throws", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const { lines } = await captureLog(async () => {
      await using journal = new Journal(`${dir}/gone/events.jsonl`);
      for (let i = 0; i < 50; i++) {
        journal.record({ model: "m", event: "state", from: "a", to: "b" });
        await journal.flush();
      }
    });
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(
      lines[0]!,
      /^warn: Cannot write the journal .*gone\/events\.jsonl/,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("a storm of events is written whole and in order across rotations", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const journal = new Journal(`${dir}/events.jsonl`, {
      maxBytes: 4096,
      keep: 100,
    });
    for (let i = 0; i < 2000; i++) {
      journal.record({ model: "m", event: "state", detail: String(i) });
    }
    await journal.close();
    const files = [...Deno.readDirSync(dir)].map((e) => e.name);
    const rank = (n: string) => Number(/\.(\d+)$/.exec(n)?.[1] ?? 0);
    files.sort((a, b) => rank(b) - rank(a));
    assert.ok(files.length > 10);
    const details = files.flatMap((f) =>
      Deno.readTextFileSync(`${dir}/${f}`).trim().split("\n").map((l) =>
        JSON.parse(l).detail
      )
    );
    assert.deepEqual(
      details,
      Array.from({ length: 2000 }, (_, i) => String(i)),
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("the load watch: unknown, binary and endless lines change nothing and are never held whole", () => {
  const watch = new LoadWatch(VLLM.output);
  const feed = watch.feeder();
  feed(new TextEncoder().encode("some line no rule knows\n"));
  feed(
    crypto.getRandomValues(new Uint8Array(60_000)).map((b) =>
      b === 10 || b === 13 ? 0 : b
    ),
  );
  for (let i = 0; i < 200; i++) feed(new Uint8Array(100_000).fill(65));
  feed(
    new TextEncoder().encode(
      " CUDA out of memory at the end of an endless line\n",
    ),
  );
  assert.equal(watch.phase, null);
  assert.equal(watch.cause, undefined, "the end of a cut line is not read");
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

/** Read anew (an assertion above narrowed the property to undefined). */
function causeOf(watch: LoadWatch) {
  return watch.cause;
}
