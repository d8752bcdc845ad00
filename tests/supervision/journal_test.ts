import assert from "node:assert/strict";
import { Journal } from "../../src/supervision/journal.ts";
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
