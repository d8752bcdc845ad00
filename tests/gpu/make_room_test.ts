/**
 * Issue 54 items 2 and 3 without processes: who is put to sleep to make room
 * (src/gpu/make_room.ts), the device's ledger (`deviceLoad`, src/gpu/layout.ts)
 * and placement packing launcher-woken cards past a device's memory while a
 * card that could never fit alone is refused.
 */
import assert from "node:assert/strict";
import {
  makeRoom,
  type RoomCandidate,
  startsAsleep,
} from "../../src/gpu/make_room.ts";
import { deviceLoad } from "../../src/gpu/layout.ts";
import { placeGpus } from "../../src/gpu/placement.ts";
import { cardMemory } from "../../src/gpu/footprint_book.ts";
import type { GpuSnapshot } from "../../src/gpu/nvidia_smi.ts";
import { catalogue, devices, pool, refusal } from "../support/gpu_cards.ts";

const idle: RoomCandidate = {
  name: "x",
  freesMiB: 9000,
  pinned: false,
  priority: 0,
  busy: false,
  awakeSeconds: 60,
  idleSeconds: 30,
  wakeSeconds: 0.3,
};

Deno.test("makeRoom never takes a pinned, busy or just-woken engine, takes the lowest priority first, then the most idle seconds per wake second, and only as many bytes as are missing", () => {
  const candidates = [
    { ...idle, name: "pinned", pinned: true, idleSeconds: 1e6 },
    { ...idle, name: "busy", busy: true, idleSeconds: 1e6 },
    { ...idle, name: "fresh", awakeSeconds: 0.5, idleSeconds: 1e6 },
    { ...idle, name: "slow", idleSeconds: 60, wakeSeconds: 30 }, // 2 per s
    { ...idle, name: "quick", idleSeconds: 60, wakeSeconds: 0.3 }, // 200 per s
    { ...idle, name: "keep", priority: 5, idleSeconds: 1e6 },
  ];
  assert.deepEqual(makeRoom(8000, candidates, 1), {
    victims: ["quick"],
    freesMiB: 9000,
  });
  // More missing than one frees: the next in order, priority before idleness.
  assert.deepEqual(makeRoom(17000, candidates, 1), {
    victims: ["quick", "slow"],
    freesMiB: 18000,
  });
  assert.deepEqual(makeRoom(20000, candidates, 1), {
    victims: ["quick", "slow", "keep"],
    freesMiB: 27000,
  });
  // Bytes, not counts: the idler small one is spared when the big one alone
  // covers what is missing; never a lower priority spared for a higher one.
  const big = { ...idle, name: "big", freesMiB: 20000, idleSeconds: 10 };
  const small = { ...idle, name: "small", freesMiB: 4000, idleSeconds: 50 };
  assert.deepEqual(
    makeRoom(18000, [small, big], 1),
    { victims: ["big"], freesMiB: 20000 },
  );
  assert.deepEqual(
    makeRoom(18000, [small, { ...big, priority: 1 }], 1),
    { victims: ["small", "big"], freesMiB: 24000 },
  );
});

Deno.test("makeRoom says why there is no room, naming each engine that cannot sleep and what can be freed", () => {
  const room = makeRoom(8000, [
    { ...idle, name: "a", pinned: true },
    { ...idle, name: "b", busy: true },
    { ...idle, name: "c", awakeSeconds: 0.2 },
  ], 1);
  assert.ok("why" in room);
  assert.equal(
    room.why,
    "needs 8000 MiB more, 0 MiB can be freed (a pinned, b busy, c woken 0.2 s ago)",
  );
  const none = makeRoom(1, [], 1);
  assert.ok("why" in none && /no engine the launcher wakes/.test(none.why));
});

Deno.test("deviceLoad counts launcher-woken engines as their residues plus room for the largest to wake; the others whole", () => {
  const need = { kind: "unplaced", from: "" } as const;
  const woken = (mib: number, residueMiB: number) => ({
    devices: ["0"],
    need,
    mib,
    residueMiB,
  });
  assert.equal(
    deviceLoad([woken(10240, 1434), woken(10240, 1434), woken(10240, 1434)], 0),
    3 * 1434 + (10240 - 1434),
  );
  // A self-waking or never-sleeping engine holds all of it.
  assert.equal(
    deviceLoad([woken(10240, 1024), { devices: ["0"], need, mib: 8000 }], 0),
    8000 + 1024 + (10240 - 1024),
  );
  assert.equal(
    deviceLoad([woken(4000, 1000), woken(12000, 2000)], 0),
    1000 + 2000 + 10000,
  );
});

/** One 24576 MiB device. */
function snapshot(): GpuSnapshot {
  return {
    devices: [{
      index: "0",
      uuid: "GPU-00000000-0000-0000-0000-000000000000",
      totalMiB: 24576,
      usedMiB: 0,
      memoryKnown: true,
      name: "NVIDIA L4",
    }],
    processes: [],
    at: 0,
  };
}

function place(models: Record<string, Record<string, unknown>>) {
  const cards = [...catalogue(models)];
  const memory = Object.fromEntries(
    cards.flatMap((c) => {
      const known = cardMemory(c, []);
      return known ? [[c.name, known]] : [];
    }),
  );
  return placeGpus(cards, pool("0"), { snapshot: snapshot(), memory });
}

Deno.test("placement packs three 10 GiB launcher-woken vLLM cards on one 24 GiB device, not three without sleep_after, and refuses one that could never fit alone", () => {
  const card = (extra: Record<string, unknown> = {}) => ({
    engine: "vllm",
    gpu_memory: "10GiB",
    sleep_after: 600,
    ...extra,
  });
  const placed = place({ a: card(), b: card(), c: card() });
  assert.deepEqual(devices(placed), { a: ["0"], b: ["0"], c: ["0"] });
  assert.equal(placed.get("c")!.residueMiB, 1434, "vLLM's level-1 estimate");
  // Without sleep_after each holds all of its budget: the third fits nowhere.
  assert.match(
    refusal(() =>
      place({
        a: card({ sleep_after: 0 }),
        b: card({ sleep_after: 0 }),
        c: card({ sleep_after: 0 }),
      })
    ),
    /c: .*gpu_memory 10240 MiB fits on no GPU: over-committed/,
  );
  assert.match(
    refusal(() => place({ a: card(), huge: card({ gpu_memory: "30GiB" }) })),
    /huge: .*30720 MiB.* fits on no GPU: .*expected room on a device to wake it while every other engine there that the launcher wakes sleeps/,
  );
  // A llama.cpp sleeper wakes itself: it is no residue, its whole budget counts.
  assert.match(
    refusal(() =>
      place({
        a: card(),
        b: card(),
        l: { engine: "llama.cpp", gpu_memory: "14GiB", sleep_after: 60 },
      })
    ),
    /l: .*fits on no GPU/,
  );
});

Deno.test("startsAsleep loads in order and puts the earliest idle, unpinned ones to sleep as room requires; what is left after", () => {
  const e = (name: string, extra: Record<string, unknown> = {}) => ({
    name,
    needMiB: 10240,
    residueMiB: 1434,
    pinned: false,
    priority: 0,
    ...extra,
  });
  assert.deepEqual(startsAsleep([e("a"), e("b"), e("c")], 24576), {
    asleep: ["a"],
    leftMiB: 24576 - 2 * 10240 - 1434,
  });
  assert.deepEqual(
    startsAsleep([e("a", { pinned: true }), e("b"), e("c")], 24576).asleep,
    ["b"],
  );
  assert.deepEqual(
    startsAsleep(
      [e("a", { priority: 3 }), e("b", { priority: 3 }), e("c")],
      24576,
    )
      .asleep,
    ["a"],
  );
});
