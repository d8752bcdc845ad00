/** The engine log: rotation by size and count, and loss instead of blocking. */
import assert from "node:assert/strict";
import { EngineLog } from "../../src/engines/log_sink.ts";
import { listDir } from "../support/helpers.ts";

const LINE = new TextEncoder().encode("y".repeat(99) + "\n");

Deno.test("a log rotates past maxBytes, keeping `keep` older files, newest as .1", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const log = new EngineLog(`${dir}/e.log`, { maxBytes: 1_000, keep: 2 });
    for (let i = 0; i < 55; i++) {
      log.write(LINE);
      if (i % 10 === 9) await log.flush(); // batches, like a real engine's bursts
      if (i === 29) log.line("--- marker");
    }
    await log.close();
    assert.deepEqual(listDir(dir), ["e.log", "e.log.1", "e.log.2"]);
    for (const name of ["e.log.1", "e.log.2"]) {
      const size = (await Deno.stat(`${dir}/${name}`)).size;
      assert.ok(size >= 1_000 && size < 1_000 + 1_100, `${name}: ${size}`);
    }
    // 5,511 bytes written: the oldest went, what is kept is the newest.
    const current = await Deno.readTextFile(`${dir}/e.log`);
    const newest = await Deno.readTextFile(`${dir}/e.log.1`);
    assert.ok(current.length > 0 && current.length < 1_000);
    assert.ok(!newest.includes("marker") || !current.includes("marker"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("keep 0 rotates by truncation: one file, never past maxBytes by more than a batch", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const log = new EngineLog(`${dir}/e.log`, { maxBytes: 500, keep: 0 });
    for (let i = 0; i < 20; i++) {
      log.write(LINE);
      await log.flush();
    }
    await log.close();
    // The last rotation may have just removed the file; never a `.1`.
    assert.ok(
      listDir(dir).every((name) => name === "e.log"),
      `${listDir(dir)}`,
    );
    const size = await Deno.stat(`${dir}/e.log`).then((s) => s.size, () => 0);
    assert.ok(size < 500, `${size} bytes`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("when the log cannot be written, output is dropped and counted, and one line says so once it can", async () => {
  const parent = await Deno.makeTempDir();
  const dir = `${parent}/logs`; // not there yet: every write fails
  try {
    const log = new EngineLog(`${dir}/e.log`);
    for (let i = 0; i < 3; i++) log.write(LINE);
    await log.flush();
    assert.equal(log.lostBytes, 300);
    await Deno.mkdir(dir);
    log.write(LINE);
    await log.close();
    const text = await Deno.readTextFile(`${dir}/e.log`);
    const notes = text.split("\n").filter((l) => l.includes("were lost"));
    assert.equal(notes.length, 1);
    assert.match(
      notes[0]!,
      /^--- \S+ log: 300 bytes of engine output were lost/,
    );
    assert.equal(text.split("\n").filter((l) => l.startsWith("yyy")).length, 1);
    assert.equal(log.lostBytes, 0);
  } finally {
    await Deno.remove(parent, { recursive: true });
  }
});

Deno.test("write never waits: past the queue bound new output is dropped, not buffered", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const log = new EngineLog(`${dir}/e.log`, { maxQueuedBytes: 1_000 });
    // write() is synchronous (void): the writer cannot run inside this loop.
    for (let i = 0; i < 1_000; i++) log.write(LINE); // 100 kB at once
    assert.ok(log.lostBytes > 0, "some output was dropped");
    await log.close();
    const size = (await Deno.stat(`${dir}/e.log`)).size;
    // The queue bound, plus what the writer had already taken off the queue.
    assert.ok(size < 2_000, `about the queue bound reached the file: ${size}`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
