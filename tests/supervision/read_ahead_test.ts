/**
 * The read-ahead of an engine's local weights (src/supervision/read_ahead.ts):
 * bounded by MemAvailable (an injected /proc/meminfo), abortable, never for a
 * hub id, off by card, stopped by another engine loading from the same disk;
 * and through the command line, read during a stand-in engine's backoff.
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { type EnginePlan, planEngine } from "../../src/engines/engine_plan.ts";
import {
  READ_AHEAD_MARGIN,
  ReadAhead,
} from "../../src/supervision/read_ahead.ts";
import { launch, makeRoot, waitFor } from "../support/helpers.ts";
import { ManualClock } from "../support/manual_clock.ts";

const MIB = 2 ** 20;
const CARDS = Registry.parse(`models:
  gguf: { verb: chat, local: gguf, engine: command, command: [sh, "{model}"] }
  shards: { verb: chat, local: shards, engine: command, command: [sh, "{model}"] }
  hubbed: { verb: chat, engine: command, hub: org/m, command: [sh, "{model}"] }
  off: { verb: chat, local: off, engine: command, read_ahead: false, command: [sh, "{model}"] }
`);

function plan(name: string, root: string): EnginePlan {
  return planEngine(CARDS.get(name), {
    baseEnv: { PATH: "/bin" },
    host: "127.0.0.1",
    port: 1,
    directory: root,
  });
}

/** A /proc/meminfo whose MemAvailable leaves `spare` bytes over the margin. */
const meminfo = (spare: number) => () =>
  `MemTotal:       99999999 kB\nMemAvailable:   ${
    (READ_AHEAD_MARGIN + spare) / 1024
  } kB\n`;

async function withRoot(
  body: (root: string, said: string[]) => Promise<void>,
): Promise<void> {
  const root = await makeRoot();
  try {
    await Deno.writeFile(`${root}/models/gguf`, new Uint8Array(12 * MIB));
    await Deno.writeFile(`${root}/models/off`, new Uint8Array(MIB));
    await Deno.mkdir(`${root}/models/shards`);
    for (const [file, mib] of [["b.safetensors", 3], ["a.safetensors", 2]]) {
      const data = new Uint8Array(Number(mib) * MIB);
      await Deno.writeFile(`${root}/models/shards/${file}`, data);
    }
    await Deno.writeFile(`${root}/models/shards/x.bin`, new Uint8Array(MIB));
    await body(root, []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

const none = new AbortController().signal;

Deno.test("a read-ahead reads the whole file, or a directory's safetensors, when memory allows", async () => {
  await withRoot(async (root, said) => {
    const reader = new ReadAhead(meminfo(64 * MIB), new ManualClock());
    const say = (line: string) => said.push(line);
    assert.equal(await reader.read(plan("gguf", root), none, say), 12 * MIB);
    assert.equal(await reader.read(plan("shards", root), none, say), 5 * MIB);
    // Its seconds on its clock: this one stands still.
    assert.match(
      said[0]!,
      /^read-ahead of .*\/models\/gguf: 12 MiB in 0\.0 s$/,
    );
    assert.match(
      said[1]!,
      /^read-ahead of .*\/models\/shards: 5 MiB in 0\.0 s$/,
    );
  });
});

Deno.test("a read-ahead reads no more than MemAvailable less its margin, and says so", async () => {
  await withRoot(async (root, said) => {
    const say = (line: string, skipped: boolean) =>
      said.push(`${skipped} ${line}`);
    const reader = new ReadAhead(meminfo(4 * MIB));
    assert.equal(await reader.read(plan("gguf", root), none, say), 4 * MIB);
    assert.match(
      said[0]!,
      /^true read-ahead stopped at MemAvailable 2052 MiB less a 2048 MiB margin: 4 MiB/,
    );
    const tight = new ReadAhead(meminfo(-MIB));
    assert.equal(await tight.read(plan("gguf", root), none, say), 0);
    assert.match(said[1]!, /^true no read-ahead: MemAvailable 2047 MiB less/);
    const blind = new ReadAhead(() => "MemTotal: 1 kB\n");
    assert.equal(await blind.read(plan("gguf", root), none, say), 0);
    assert.equal(
      said[2],
      "true no read-ahead: no MemAvailable in /proc/meminfo",
    );
  });
});

Deno.test("an aborted read-ahead ends at once; a hub id and a card's read_ahead: false read nothing and say nothing", async () => {
  await withRoot(async (root, said) => {
    const reader = new ReadAhead(meminfo(64 * MIB));
    const say = (line: string) => said.push(line);
    const stop = new AbortController();
    stop.abort();
    assert.equal(await reader.read(plan("gguf", root), stop.signal, say), 0);
    assert.match(said.pop()!, /^read-ahead ended: 0 MiB/);
    assert.equal(await reader.read(plan("hubbed", root), none, say), 0);
    assert.equal(await reader.read(plan("off", root), none, say), 0);
    assert.deepEqual(said, []);
  });
});

Deno.test("a read-ahead never runs beside another engine's load from the same disk", async () => {
  await withRoot(async (root, said) => {
    const reader = new ReadAhead(meminfo(64 * MIB));
    const say = (line: string) => said.push(line);
    reader.loading("shards", plan("shards", root));
    reader.loading("gguf", plan("gguf", root)); // its own load does not count
    assert.equal(await reader.read(plan("gguf", root), none, say), 0);
    assert.match(
      said[0]!,
      /^read-ahead stopped \(engine shards loads from its disk\)/,
    );
    reader.loading("shards", null);
    assert.equal(await reader.read(plan("gguf", root), none, say), 12 * MIB);
  });
});

Deno.test("a card's read_ahead that is not true or false is refused in one line naming card and field", () => {
  assert.throws(
    () =>
      Registry.parse("models:\n  m: { verb: chat, hub: o/m, read_ahead: 1 }\n"),
    (error: Error) =>
      /\bm\b/.test(error.message) && /read_ahead/.test(error.message) &&
      /expected true or false, got/.test(error.message) &&
      !error.message.includes("\n"),
  );
});

Deno.test("through the command line: a stand-in engine's weights are read ahead during its backoff", async () => {
  const root = await makeRoot();
  await Deno.writeFile(`${root}/models/crash1`, new Uint8Array(8 * MIB));
  await using s = await launch(["crash1"], { root });
  await s.launcher.ready();
  const log = `${root}/logs/crash1.log`;
  let lines: string[] = [];
  await waitFor(async () => {
    // The engine's log is made at its spawn, which may follow the API's listening line.
    const text = await Deno.readTextFile(log).catch(() => "");
    lines = text.split("\n");
    const read = lines.findIndex((l) => / read-ahead of /.test(l));
    return read >= 0 && lines.slice(read).some((l) => / start: /.test(l));
  }, "a read-ahead, then the restart");
  const read = lines.findIndex((l) => / read-ahead of /.test(l));
  const exit = lines.findIndex((l) => / exit: code 3 /.test(l));
  assert.ok(exit >= 0 && exit < read, "after the exit");
  assert.match(lines[read]!, /read-ahead of \S+\/models\/crash1: 8 MiB in /);
});
