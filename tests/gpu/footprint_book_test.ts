/**
 * Issue 43, items 3 to 5 without processes: the footprint book
 * (src/gpu/footprint_book.ts), packing by footprint or budget
 * (src/gpu/placement.ts), each kind's budget args and the need they give
 * (src/gpu/memory_plan.ts), and the knob conflict (src/engines/engine_plan.ts).
 */
import assert from "node:assert/strict";
import {
  BOOK_ENTRIES,
  bookPath,
  cardMemory,
  FootprintBook,
  footprintKey,
  readBook,
} from "../../src/gpu/footprint_book.ts";
import { enginePlacement } from "../../src/gpu/memory_plan.ts";
import { placeEngines, placeGpus } from "../../src/gpu/placement.ts";
import type { GpuSnapshot } from "../../src/gpu/nvidia_smi.ts";
import type { Footprint } from "../../src/engines/footprint.ts";
import { planEngine } from "../../src/engines/engine_plan.ts";
import { EngineError } from "../../src/engines/engine_error.ts";
import { captureLog, listDir, makeRoot } from "../support/helpers.ts";
import {
  card,
  catalogue,
  devices,
  pool,
  refusal,
} from "../support/gpu_cards.ts";

function footprint(total: number, extra: Partial<Footprint> = {}): Footprint {
  return {
    weights_mib: null,
    kv_cache_mib: null,
    kv_tokens: null,
    graphs_mib: null,
    compute_mib: null,
    total_mib: total,
    device: "CUDA0",
    measured_at: "2026-12-01T12:00:00.000Z",
    from: "load lines",
    ...extra,
  };
}

const H100 = "NVIDIA H100 80GB HBM3";

/** Two 81559 MiB devices, nothing used. */
function snapshot(used = 0): GpuSnapshot {
  return {
    devices: ["0", "1"].map((index) => ({
      index,
      uuid: `GPU-0000000${index}-0000-0000-0000-000000000000`,
      totalMiB: 81559,
      usedMiB: used,
      memoryKnown: true,
      name: H100,
    })),
    processes: [],
    at: 0,
  };
}

const detection = { pool: pool("0,1"), source: "--gpus 0,1" };

// --- the book ---------------------------------------------------------------------

Deno.test("the book: atomic, kept per card key and device, read back by a new launcher (restart)", async () => {
  const root = await makeRoot();
  const llama = card({ engine: "llama.cpp", args: ["-c", "4096"] });
  const other = card({ engine: "llama.cpp", args: ["-c", "8192"] });
  assert.notEqual(footprintKey(llama), footprintKey(other));
  // A flag that does not change memory does not change the key.
  assert.equal(
    footprintKey(llama),
    footprintKey(
      card({ engine: "llama.cpp", args: ["-c", "4096", "--jinja"] }),
    ),
  );
  const book = new FootprintBook(root);
  book.note(llama, H100, footprint(2000));
  book.note(llama, "CPU", footprint(150, { device: "CPU" }));
  book.note(llama, H100, footprint(2100));
  // Written whole: no temporary file is left beside it.
  assert.deepEqual(listDir(`${root}/data`), ["footprints.json"]);
  const again = await readBook(root);
  assert.equal(again.unreadable, undefined);
  assert.deepEqual(
    again.entries.map((e) => [e.device, e.footprint.total_mib]),
    [["CPU", 150], [H100, 2100]],
  );
  assert.deepEqual(cardMemory(llama, again.entries), {
    measured: { CPU: 150, [H100]: 2100 },
  });
  assert.equal(cardMemory(other, again.entries), undefined);
  await Deno.remove(root, { recursive: true });
});

Deno.test("the book keeps the newest BOOK_ENTRIES entries, the oldest dropped", async () => {
  const root = await makeRoot();
  const book = new FootprintBook(root);
  const m = card({ engine: "llama.cpp" });
  for (let i = 0; i < BOOK_ENTRIES + 5; i++) {
    book.note(m, `device ${i}`, footprint(i));
  }
  const { entries } = await readBook(root);
  assert.equal(entries.length, BOOK_ENTRIES);
  assert.equal(entries[0]!.device, "device 5");
  assert.equal(entries.at(-1)!.device, `device ${BOOK_ENTRIES + 4}`);
  await Deno.remove(root, { recursive: true });
});

Deno.test("a corrupt or foreign book: one warning naming where it went, moved aside intact, a fresh one written", async () => {
  for (
    const text of ["{not json", '{"format": "someone else", "entries": []}']
  ) {
    const root = await makeRoot();
    const path = bookPath(root);
    await Deno.writeTextFile(path, text);
    // A dry run's read says so and touches nothing.
    assert.match((await readBook(root)).unreadable!, /not JSON|not a "/);
    assert.equal(await Deno.readTextFile(path), text);
    const read = await readBook(root);
    const { result: book, lines } = await captureLog(() =>
      new FootprintBook(root, read)
    );
    assert.equal(lines.length, 1, lines.join("\n"));
    const aside = listDir(`${root}/data`).find((n) =>
      n.includes("unreadable")
    )!;
    assert.ok(aside, listDir(`${root}/data`).join());
    assert.match(
      lines[0]!,
      /^warn: footprint book .*footprints\.json: .*ignored, moved to .*footprints\.json\.unreadable-/,
    );
    assert.ok(lines[0]!.includes(aside));
    assert.equal(await Deno.readTextFile(`${root}/data/${aside}`), text);
    book.note(card({ engine: "llama.cpp" }), H100, footprint(1));
    assert.equal((await readBook(root)).entries.length, 1);
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("the book is read like the catalogue: a FIFO, a device or a file past the cap is no book, and the read never blocks", async () => {
  const root = await makeRoot();
  const path = bookPath(root);
  try {
    await Deno.writeTextFile(path, " ".repeat(2 * 2 ** 20));
    assert.match((await readBook(root)).unreadable!, /more than 1 MiB/);
    await Deno.remove(path);
    // A FIFO with no writer: opening it would block until one came.
    await new Deno.Command("mkfifo", { args: [path] }).output();
    const fifo = await readBook(root);
    assert.match(fifo.unreadable!, /a FIFO \(expected a regular file/);
    await Deno.remove(path);
    await Deno.symlink("/dev/zero", path);
    assert.match((await readBook(root)).unreadable!, /a character device/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("the book's entries are checked field by field: a need that is no size makes the file no book", async () => {
  const good = {
    key: "[]",
    device: H100,
    footprint: footprint(2000),
  };
  for (
    const [bad, says] of [
      [
        { ...good, footprint: { ...good.footprint, total_mib: "lots" } },
        /entry 2: total_mib "lots"/,
      ],
      [
        { ...good, footprint: { ...good.footprint, total_mib: -100000 } },
        /entry 2: total_mib -100000/,
      ],
      [
        { ...good, footprint: { ...good.footprint, weights_mib: 1e20 } },
        /entry 2: weights_mib 100000000000000000000/,
      ],
      [{ ...good, device: 7 }, /entry 2: device 7/],
      [
        { ...good, footprint: { ...good.footprint, measured_at: "soon" } },
        /entry 2: measured_at "soon"/,
      ],
      [null, /entry 2: key undefined \(expected a string\)/],
    ] as const
  ) {
    const root = await makeRoot();
    const text = JSON.stringify({
      format: "mymodel-serve footprints 1",
      entries: [good, bad],
    });
    await Deno.writeTextFile(bookPath(root), text);
    const read = await readBook(root);
    assert.equal(read.entries.length, 0);
    assert.match(read.unreadable ?? "", says);
    await Deno.remove(root, { recursive: true });
  }
  // 1e400 is Infinity to JSON.parse.
  const root = await makeRoot();
  await Deno.writeTextFile(
    bookPath(root),
    `{"format":"mymodel-serve footprints 1","entries":[{"key":"[]","device":"x","footprint":${
      JSON.stringify(footprint(1)).replace('"total_mib":1', '"total_mib":1e400')
    }}]}`,
  );
  assert.match(
    (await readBook(root)).unreadable ?? "",
    /entry 1: total_mib Infinity/,
  );
  await Deno.remove(root, { recursive: true });
});

// --- placement --------------------------------------------------------------------

function llamaPair(a: number, b: number) {
  const cards = catalogue({
    a: { engine: "llama.cpp", local: "a" },
    b: { engine: "llama.cpp", local: "b" },
  });
  const memory = {
    a: { measured: { [H100]: a } },
    b: { measured: { [H100]: b } },
  };
  return placeGpus([...cards], pool("0,1"), { snapshot: snapshot(), memory });
}

Deno.test("two llama.cpp cards share one device when their footprints fit, take one each when not", () => {
  assert.deepEqual(devices(llamaPair(30000, 40000)), { a: ["0"], b: ["0"] });
  assert.deepEqual(devices(llamaPair(50000, 40000)), { a: ["0"], b: ["1"] });
  // Unknown footprints: today's way, a whole device each.
  const cards = catalogue({
    a: { engine: "llama.cpp" },
    b: { engine: "llama.cpp" },
  });
  assert.deepEqual(
    devices(placeGpus([...cards], pool("0,1"), { snapshot: snapshot() })),
    { a: ["0"], b: ["1"] },
  );
});

function budgets(models: Record<string, Record<string, unknown>>) {
  const cards = [...catalogue(models)];
  const memory = Object.fromEntries(
    cards.map((c) => [c.name, cardMemory(c, [])!]),
  );
  return { cards, memory };
}

Deno.test("budgets are summed per device exactly; an over-commit is refused in one line", () => {
  // 40 GiB + 39 GiB = 80896 MiB of 81559: a and b share GPU 0; c goes to GPU 1.
  const { cards, memory } = budgets({
    a: { gpu_memory: "40GiB" },
    b: { gpu_memory: "39GiB", engine: "sglang" },
    c: { gpu_memory: "2GiB" },
  });
  const placed = placeEngines(
    cards,
    detection,
    snapshot(),
    "PCI_BUS_ID",
    memory,
  );
  assert.deepEqual(
    Object.fromEntries(
      Object.entries(placed.assigned).map(([n, a]) => [n, [a.devices, a.mib]]),
    ),
    { a: [["0"], 40960], b: [["0"], 39936], c: [["1"], 2048] },
  );
  // One MiB more than GPU 0 holds beside a, and GPU 1 is full: refused.
  const over = budgets({
    a: { gpu_memory: "40GiB" },
    big: { gpu_memory: "81559MiB" },
    b: { gpu_memory: `${81559 - 40960 + 1}MiB` },
  });
  assert.match(
    refusal(() =>
      placeEngines(over.cards, detection, snapshot(), "PCI_BUS_ID", over.memory)
    ),
    /^Cannot place b: its gpu_memory 40600 MiB fits on no GPU: over-committed in pool 0-1 \(a holds 40960 MiB of 81559 MiB on GPU 0; big holds 81559 MiB of 81559 MiB on GPU 1\) \(expected the budgets on each device to add up to at most its total\)$/,
  );
  const exact = budgets({
    a: { gpu_memory: "40GiB" },
    b: { gpu_memory: `${81559 - 40960}MiB` },
  });
  assert.deepEqual(
    devices(
      new Map(Object.entries(
        placeEngines(exact.cards, detection, snapshot(), "x", exact.memory)
          .assigned,
      )),
    ),
    { a: ["0"], b: ["0"] },
  );
});

// --- the budget's args and the need ----------------------------------------------------

function planned(fields: Record<string, unknown>, measured?: Footprint) {
  const c = card(fields);
  const memory = { m: cardMemory(c, [])! };
  const placement = placeEngines([c], detection, snapshot(1000), "x", memory);
  const entries = measured
    ? [{ key: footprintKey(c), device: H100, footprint: measured }]
    : [];
  const { args, memoryNeed } = enginePlacement(c, placement, entries);
  return { args, memoryNeed };
}

Deno.test("gpu_memory becomes each engine's own knob, and the need the gate waits for", () => {
  // vLLM, nothing measured: its share of the total (81559 MiB), rounded down.
  assert.deepEqual(planned({ gpu_memory: "24GiB" }), {
    args: ["--gpu-memory-utilization", "0.3013"],
    memoryNeed: {
      fraction: 24576 / 81559,
      mib: 24576,
      from: "gpu_memory 24576 MiB",
    },
  });
  // vLLM, weights and graphs measured: the KV cache is the rest, in bytes.
  const measured = footprint(20000, { weights_mib: 15000, graphs_mib: 576 });
  assert.deepEqual(planned({ gpu_memory: "24GiB" }, measured).args, [
    "--gpu-memory-utilization",
    "0.3013",
    "--kv-cache-memory-bytes",
    String(9000 * 2 ** 20),
  ]);
  assert.match(
    refusal(() => planned({ gpu_memory: "10GiB" }, measured)),
    /^Cannot place m: its gpu_memory 10240 MiB cannot be held: its weights and graphs measured 15576 MiB, no room for a KV cache$/,
  );
  assert.deepEqual(planned({ engine: "sglang", gpu_memory: "40GiB" }).args, [
    "--mem-fraction-static",
    "0.5022",
  ]);
  // llama.cpp: --fit leaves free what the device has beyond the budgets (1000 MiB used by others).
  assert.deepEqual(planned({ engine: "llama.cpp", gpu_memory: "8GiB" }).args, [
    "--fit",
    "on",
    "--fit-target",
    String(81559 - 8192 - 1000),
  ]);
  // Without a budget, a measured footprint is the need.
  const llama = card({ engine: "llama.cpp" });
  const entries = [{
    key: footprintKey(llama),
    device: H100,
    footprint: footprint(2100),
  }];
  const memory = { m: cardMemory(llama, entries)! };
  const placement = placeEngines([llama], detection, snapshot(), "x", memory);
  assert.deepEqual(enginePlacement(llama, placement, entries).memoryNeed, {
    fraction: 2100 / 81559,
    mib: 2100,
    from: `measured 2100 MiB on ${H100} at 2026-12-01T12:00:00.000Z`,
  });
  // No GPU total known: the budget cannot be mapped, refused in one line.
  const noTotal = card({ gpu_memory: "24GiB" });
  assert.match(
    refusal(() =>
      enginePlacement(
        noTotal,
        placeEngines([noTotal], detection, undefined, "x", {}),
        [],
      )
    ),
    /^Cannot place m: its gpu_memory 24576 MiB needs a placed GPU whose total memory nvidia-smi reports \(GPU 0: not known\)/,
  );
});

Deno.test("a card setting its engine's own knob and gpu_memory is refused in one line naming both", () => {
  const site = {
    host: "127.0.0.1",
    port: 5001,
    directory: "/nonexistent",
    baseEnv: { PATH: "/nonexistent" },
  };
  for (
    const [fields, knob] of [
      [
        { args: ["--gpu-memory-utilization", "0.5"] },
        "--gpu-memory-utilization",
      ],
      [
        { engine: "sglang", args: ["--mem-fraction-static=0.5"] },
        "--mem-fraction-static",
      ],
      [{ engine: "llama.cpp", args: ["-fitt", "512"] }, "-fitt"],
    ] as const
  ) {
    const c = card({ ...fields, gpu_memory: "8GiB" });
    assert.throws(() => planEngine(c, site), (error: Error) => {
      assert.ok(error instanceof EngineError);
      assert.match(
        error.message,
        new RegExp(
          `^Cannot prepare m: card 'm' sets both gpu_memory and ${knob} in args \\(expected one of them`,
        ),
      );
      assert.ok(!error.message.includes("\n"));
      return true;
    });
  }
});
