/**
 * Issue 35 on one engine's pieces, in this process: the record never written
 * through a planted link, the cause taken only from the run that ended, the
 * streak of hopeless causes reset by a ready run.
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { reloadDeadline, STOPPING } from "../../src/serve/reload_queue.ts";
import { LoadWatch } from "../../src/engines/load_watch.ts";
import { CauseStreak } from "../../src/supervision/restart_policy.ts";
import { Journal } from "../../src/supervision/journal.ts";
import { EngineRecords } from "../../src/supervision/records.ts";
import { captureLog, makeRoot } from "../support/helpers.ts";

Deno.test("an engine record is never written through a link planted at its old or a guessed temporary name", async () => {
  const root = await makeRoot();
  try {
    await Deno.mkdir(`${root}/data`, { recursive: true });
    const target = `${root}/precious.txt`;
    await Deno.writeTextFile(target, "keep me\n");
    const planted = [
      `${root}/data/m.engine.json.${Deno.pid}.tmp`,
      `${root}/data/.m.engine.json.0000000000000000.tmp`,
    ];
    for (const link of planted) await Deno.symlink(target, link);
    const records = new EngineRecords(root);
    records.write({
      model: "m",
      pid: Deno.pid,
      command: "x",
      host: "127.0.0.1",
      port: 1,
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(await Deno.readTextFile(target), "keep me\n");
    const written = await Deno.lstat(`${root}/data/m.engine.json`);
    assert.ok(written.isFile && !written.isSymlink);
    const record = JSON.parse(
      await Deno.readTextFile(`${root}/data/m.engine.json`),
    );
    assert.equal(record.pid, Deno.pid);
    // Nothing left behind but the planted links.
    const names = [...Deno.readDirSync(`${root}/data`)].map((e) => e.name)
      .sort();
    assert.deepEqual(
      names,
      ["m.engine.json", ...planted.map((p) => p.split("/").at(-1)!)].sort(),
    );
    records.remove("m");
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

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

Deno.test("the hopeless streak counts only runs that never answered 200", () => {
  const streak = new CauseStreak();
  assert.equal(streak.next("model-not-found", true), "grow");
  assert.equal(streak.next("model-not-found", true), "grow");
  assert.equal(streak.next("model-not-found"), "grow");
  assert.equal(streak.next("model-not-found", true), "grow");
  assert.equal(streak.next("model-not-found"), "grow");
  assert.equal(streak.next("model-not-found"), "failed");
});

Deno.test("a journal that is a FIFO is refused in one warning, the journal off; one that becomes a FIFO is never opened", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const fifo = `${dir}/events.jsonl`;
    await new Deno.Command("mkfifo", { args: [fifo] }).output();
    const { lines } = await captureLog(async () => {
      const journal = new Journal(fifo);
      journal.record({ model: "m", event: "state" });
      const began = Date.now();
      await journal.close();
      assert.ok(Date.now() - began < 500);
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

Deno.test("a reload's read that does not finish within its deadline is refused in one line; a stop ends it at once", async () => {
  const text = "models:\n  a: { verb: chat, hub: o/a }\n";
  const timers = new Set<ReturnType<typeof setInterval>>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => {
      let timer: ReturnType<typeof setInterval>;
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          // A byte every 100 ms: never silent, never done.
          timer = setInterval(
            () => controller.enqueue(new Uint8Array([32])),
            100,
          );
          timers.add(timer);
        },
        cancel() {
          clearInterval(timer);
          timers.delete(timer);
        },
      });
      return new Response(body);
    },
  );
  const url = `http://127.0.0.1:${server.addr.port}/c.yaml`;
  try {
    const stop = new AbortController();
    {
      using deadline = reloadDeadline(stop.signal, 500);
      const began = Date.now();
      await assert.rejects(
        Registry.load(url, { signal: deadline.signal }),
        (error: Error) => {
          assert.equal(
            error.message,
            `Cannot load catalogue ${url}: no complete read within 0.5 s (expected the catalogue read and parsed in time; the running engines are kept)`,
          );
          return true;
        },
      );
      assert.ok(Date.now() - began < 2_000);
    }
    {
      using deadline = reloadDeadline(stop.signal, 30_000);
      setTimeout(() => stop.abort(STOPPING), 200);
      await assert.rejects(
        Registry.load(url, { signal: deadline.signal }),
        /the launcher is stopping/,
      );
    }
    assert.ok(text);
  } finally {
    for (const timer of timers) clearInterval(timer);
    await server.shutdown();
  }
});
