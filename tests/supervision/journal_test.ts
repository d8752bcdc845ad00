import assert from "node:assert/strict";
import { Journal } from "../../src/supervision/journal.ts";
import { captureLog, withinGuard } from "../support/helpers.ts";

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

Deno.test("a journal that is a FIFO is refused in one warning, the journal off; one that becomes a FIFO is never opened", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const fifo = `${dir}/events.jsonl`;
    await new Deno.Command("mkfifo", { args: [fifo] }).output();
    const { lines } = await captureLog(async () => {
      const journal = new Journal(fifo);
      journal.record({ model: "m", event: "state" });
      // Off: nothing to wait for (a write to the FIFO would block for good).
      await withinGuard(journal.close(), "the journal's close");
    });
    assert.deepEqual(lines, [
      `warn: Cannot use the journal ${fifo}: it is a FIFO (expected a regular file, or none yet): the journal is off`,
    ]);
    // Not there at start, a FIFO at its first write: the write fails, one warning.
    const later = `${dir}/later.jsonl`;
    const { lines: warned } = await captureLog(async () => {
      const journal = new Journal(later);
      await new Deno.Command("mkfifo", { args: [later] }).output();
      for (let i = 0; i < 5; i++) journal.record({ model: "m", event: "x" });
      await journal.close();
    });
    assert.equal(warned.length, 1, warned.join("\n"));
    assert.match(
      warned[0]!,
      /Cannot write the journal .*later\.jsonl: .*is not a regular file/,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("a journal that cannot rotate says so once and stops growing past its limit; no false 'lost' note", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const path = `${dir}/events.jsonl`;
    // Its one rotation's name is a directory that is not empty: the rename fails.
    Deno.mkdirSync(`${path}.1/blocker`, { recursive: true });
    const { lines } = await captureLog(async () => {
      const journal = new Journal(path, { maxBytes: 1000, keep: 1 });
      for (let i = 0; i < 200; i++) {
        journal.record({ model: "m", event: "state", detail: String(i) });
        await journal.flush();
      }
      await journal.close();
    });
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(
      lines[0]!,
      /^warn: Cannot write the journal .*events\.jsonl: cannot rotate it past 1000 bytes: .* \(events are dropped until it can be written\)$/,
    );
    const text = Deno.readTextFileSync(path);
    assert.ok(text.length < 1200, `${text.length} bytes`);
    assert.ok(!text.includes("were lost"), text);
    // Every line written is whole, in order from the first.
    const details = text.trim().split("\n").map((l) => JSON.parse(l).detail);
    assert.deepEqual(details, details.map((_, i) => String(i)));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
