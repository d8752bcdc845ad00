/** Placement of cards on a pool (src/gpu/placement.ts), without processes. */
import assert from "node:assert/strict";
import { gpuEnv, gpuLine, placeGpus } from "../../src/gpu/placement.ts";
import { formatGpuList } from "../../src/gpu/layout.ts";
import { GpuPlacementError } from "../../src/gpu/need.ts";
import {
  card,
  catalogue,
  devices,
  pool,
  range,
  refusal,
  shippedCards,
} from "../support/gpu_cards.ts";

// --- placement -----------------------------------------------------------------

Deno.test("the 8-GPU example: a tensor-parallel 4 card, a default chat card and three embedding cards", () => {
  const placed = placeGpus(
    shippedCards(
      "llama-3.3-70b",
      "qwen3-8b",
      "qwen3-embedding-0.6b",
      "bge-m3",
      "nomic-embed-text-v1.5",
    ),
    range(0, 7),
  );
  assert.deepEqual(devices(placed), {
    "llama-3.3-70b": ["0", "1", "2", "3"],
    "qwen3-8b": ["4"],
    "qwen3-embedding-0.6b": ["5"],
    "bge-m3": ["5"],
    "nomic-embed-text-v1.5": ["5"],
  });
  assert.deepEqual(
    [...placed].map(([name, a]) => gpuLine(name, a)),
    [
      "llama-3.3-70b: GPUs 0,1,2,3 (tensor-parallel-size 4)",
      "qwen3-8b: 0.9 of GPU 4 (gpu-memory-utilization 0.9 (vLLM's default))",
      "qwen3-embedding-0.6b: 0.3 of GPU 5 (gpu-memory-utilization 0.3)",
      "bge-m3: 0.3 of GPU 5 (gpu-memory-utilization 0.3)",
      "nomic-embed-text-v1.5: 0.2 of GPU 5 (gpu-memory-utilization 0.2)",
    ],
  );
});

Deno.test("the shipped embedding and rerank cards (0.3, 0.3, 0.2) share one GPU", () => {
  const placed = placeGpus(
    shippedCards("bge-m3", "bge-reranker-v2-m3", "nomic-embed-text-v1.5"),
    range(0, 1),
  );
  assert.deepEqual(devices(placed), {
    "bge-m3": ["0"],
    "bge-reranker-v2-m3": ["0"],
    "nomic-embed-text-v1.5": ["0"],
  });
});

Deno.test("two chat cards at 0.9 never share a GPU; with one GPU the second is refused", () => {
  const chats = shippedCards("llama-3", "qwen3-8b");
  assert.deepEqual(devices(placeGpus(chats, range(0, 1))), {
    "llama-3": ["0"],
    "qwen3-8b": ["1"],
  });
  assert.equal(
    refusal(() => placeGpus(chats, range(0, 0))),
    "Cannot place qwen3-8b: needs 0.9 of a GPU, 0 free and none with 0.9 left in pool 0 (llama-3 holds 0.9 of 0)",
  );
});

Deno.test("shares add up to exactly 1 without float error: 0.3 + 0.3 + 0.4 fill one GPU", () => {
  const cards = catalogue({
    a: { gpus: 0.3 },
    b: { gpus: 0.3 },
    c: { gpus: 0.4 },
    d: { gpus: 0.1 },
  });
  assert.deepEqual(devices(placeGpus([...cards], range(0, 1))), {
    a: ["0"],
    b: ["0"],
    c: ["0"],
    d: ["1"], // device 0 is full
  });
  // 0.1 added ten times is not 1 in floating point; in millionths it is.
  const tenths = catalogue(
    Object.fromEntries(
      Array.from({ length: 10 }, (_, i) => [`t${i}`, { gpus: 0.1 }]),
    ),
  );
  const placed = devices(placeGpus([...tenths], range(0, 0)));
  assert.ok(Object.values(placed).every((d) => d?.[0] === "0"));
});

Deno.test("a share goes to the first GPU already holding shares with room, else to the lowest free GPU", () => {
  const cards = catalogue({
    a: { gpus: 0.5 }, // free 0
    b: { gpus: 1 }, // whole: 1
    c: { gpus: 0.6 }, // no room on 0: free 2
    d: { gpus: 0.4 }, // room on 0 (first), also on 2
    e: { gpus: 0.4 }, // 0 is at 0.9: room on 2
    f: { gpus: 0.2 }, // 0 and 2 full enough: free 3
  });
  assert.deepEqual(devices(placeGpus([...cards], range(0, 3))), {
    a: ["0"],
    b: ["1"],
    c: ["2"],
    d: ["0"],
    e: ["2"],
    f: ["3"],
  });
});

Deno.test("a whole-GPU need takes the lowest run of adjacent free GPUs, else the lowest free ones", () => {
  const cards = catalogue({
    pin: { env: { CUDA_VISIBLE_DEVICES: "1" } },
    tp2: { args: { "tensor-parallel-size": 2 } },
    one: { gpus: 1 },
  });
  // 0 alone is free below the pinned 1; the first adjacent pair is 2,3.
  assert.deepEqual(devices(placeGpus([...cards], range(0, 3))), {
    pin: ["1"],
    tp2: ["2", "3"],
    one: ["0"],
  });
  const tp2 = [cards.get("tp2")];
  assert.deepEqual(devices(placeGpus(tp2, pool("0,2,4,5"))), {
    tp2: ["4", "5"],
  });
  // No adjacent pair: the lowest free GPUs.
  assert.deepEqual(devices(placeGpus(tp2, pool("6,0,3"))), {
    tp2: ["0", "3"],
  });
});

Deno.test("a card that does not fit is refused naming what it needs, what is free and who holds the rest", () => {
  const cards = catalogue({
    "llama-3.3-70b": { args: { "tensor-parallel-size": 3 } },
    "qwen3-30b-a3b": { args: { "tensor-parallel-size": 2 } },
  });
  assert.equal(
    refusal(() => placeGpus([...cards], range(0, 3))),
    "Cannot place qwen3-30b-a3b: needs 2 GPUs, 1 free in pool 0-3 (llama-3.3-70b holds 0,1,2)",
  );
  assert.equal(
    refusal(() => placeGpus(shippedCards("deepseek-v3"), range(0, 3))),
    "Cannot place deepseek-v3: needs 8 GPUs, 4 free in pool 0-3",
  );
  assert.throws(
    () => placeGpus(shippedCards("deepseek-v3"), range(0, 3)),
    (error: unknown) =>
      error instanceof GpuPlacementError && error.card === "deepseek-v3",
  );
});

Deno.test("a refusal lists share holders with their share and pinned holders in the pool", () => {
  const cards = catalogue({
    pin: { env: { CUDA_VISIBLE_DEVICES: "0" } },
    emb: { gpus: 0.3 },
    big: { gpus: 1 },
  });
  assert.equal(
    refusal(() => placeGpus([...cards], range(0, 1))),
    "Cannot place big: needs 1 GPU, 0 free in pool 0-1 (pin holds 0; emb holds 0.3 of 1)",
  );
});

Deno.test("pinned cards are placed first, whatever the request order", () => {
  const cards = catalogue({
    a: { gpus: 1 },
    b: { env: { CUDA_VISIBLE_DEVICES: "0" } },
  });
  const placed = placeGpus([...cards], range(0, 1));
  assert.deepEqual(devices(placed), { a: ["1"], b: ["0"] });
  // The map keeps request order.
  assert.deepEqual([...placed.keys()], ["a", "b"]);
});

Deno.test("share-pinned cards may share a GPU up to 1; other placements then use what is left", () => {
  const cards = catalogue({
    p1: { env: { CUDA_VISIBLE_DEVICES: "1" }, gpus: 0.5 },
    p2: { env: { CUDA_VISIBLE_DEVICES: "1" }, gpus: 0.3 },
    s: { gpus: 0.2 },
    w: { gpus: 1 },
  });
  assert.deepEqual(devices(placeGpus([...cards], range(0, 1))), {
    p1: ["1"],
    p2: ["1"],
    s: ["1"], // the first GPU holding shares with room
    w: ["0"],
  });
});

Deno.test("two pinned cards claiming one GPU are refused", () => {
  const whole = catalogue({
    a: { env: { CUDA_VISIBLE_DEVICES: "1" } },
    b: { env: { CUDA_VISIBLE_DEVICES: "2,1" } },
  });
  assert.equal(
    refusal(() => placeGpus([...whole], range(0, 3))),
    "Cannot place b: its CUDA_VISIBLE_DEVICES pins GPU 1, which a also pins (expected each device pinned by one card, or by shares adding up to at most 1)",
  );
  const wholeAndShare = catalogue({
    a: { env: { CUDA_VISIBLE_DEVICES: "1" }, gpus: 0.5 },
    b: { env: { CUDA_VISIBLE_DEVICES: "1" } },
  });
  assert.match(
    refusal(() => placeGpus([...wholeAndShare], range(0, 3))),
    /^Cannot place b: its CUDA_VISIBLE_DEVICES pins GPU 1, which a also pins/,
  );
  const tooMuch = catalogue({
    a: { env: { CUDA_VISIBLE_DEVICES: "1" }, gpus: 0.5 },
    b: { env: { CUDA_VISIBLE_DEVICES: "1" }, gpus: 0.3 },
    c: { env: { CUDA_VISIBLE_DEVICES: "1" }, gpus: 0.3 },
  });
  assert.match(
    refusal(() => placeGpus([...tooMuch], range(0, 3))),
    /^Cannot place c: its CUDA_VISIBLE_DEVICES pins GPU 1, which a and b also pin/,
  );
  // Pins clash even outside a detected pool: they name the same device.
  assert.match(
    refusal(() => placeGpus([...whole], pool("GPU-x", false))),
    /^Cannot place b: its CUDA_VISIBLE_DEVICES pins GPU 1/,
  );
});

Deno.test("a pinned GPU outside an explicit pool is refused; outside a detected pool it is kept", () => {
  const cards = catalogue({
    a: { env: { CUDA_VISIBLE_DEVICES: "5" } },
    b: { gpus: 2 },
  });
  assert.equal(
    refusal(() => placeGpus([...cards], range(0, 1))),
    "Cannot place a: its CUDA_VISIBLE_DEVICES pins GPU 5, outside the pool 0-1 given by --gpus (expected devices from that pool, or a wider --gpus)",
  );
  assert.deepEqual(devices(placeGpus([...cards], range(0, 1, false))), {
    a: ["5"],
    b: ["0", "1"], // 5 is not in the pool, so it takes nothing from it
  });
});

Deno.test("the same request always gives the same layout, and request order decides it", () => {
  const cards = catalogue({ x: { gpus: 2 }, y: { gpus: 1 } });
  const xy = [cards.get("x"), cards.get("y")];
  const yx = [cards.get("y"), cards.get("x")];
  assert.deepEqual(devices(placeGpus(xy, range(0, 3))), {
    x: ["0", "1"],
    y: ["2"],
  });
  assert.deepEqual(devices(placeGpus(yx, range(0, 3))), {
    y: ["0"],
    x: ["1", "2"],
  });
  assert.deepEqual(
    devices(placeGpus(xy, range(0, 3))),
    devices(placeGpus(xy, range(0, 3))),
  );
});

Deno.test("a pool of GPU-<uuid> entries is handed out exactly as written, in pool order", () => {
  const uuids = pool("GPU-8e1c0a2b,GPU-77aa13f0,GPU-0b5e9d41", false);
  const cards = catalogue({
    tp2: { args: { "tensor-parallel-size": 2 } },
    emb: { gpus: 0.3 },
  });
  const placed = placeGpus([...cards], uuids);
  assert.deepEqual(devices(placed), {
    tp2: ["GPU-8e1c0a2b", "GPU-77aa13f0"],
    emb: ["GPU-0b5e9d41"],
  });
  assert.deepEqual(gpuEnv(placed.get("tp2")), {
    CUDA_VISIBLE_DEVICES: "GPU-8e1c0a2b,GPU-77aa13f0",
  });
  // A card pinned to one of the pool's UUIDs holds it.
  const pinned = catalogue({
    p: { env: { CUDA_VISIBLE_DEVICES: "GPU-8e1c0a2b" } },
    one: { gpus: 1 },
  });
  assert.deepEqual(devices(placeGpus([...pinned], uuids)), {
    p: ["GPU-8e1c0a2b"],
    one: ["GPU-77aa13f0"],
  });
});

Deno.test("gpus: 0 gets no GPU, an unplaced card nothing, a pinned card its own value", () => {
  const cards = catalogue({
    cpu: { engine: "llama.cpp", gpus: 0 },
    tool: { engine: "command", command: ["x"] },
    ray: { args: { "distributed-executor-backend": "ray" } },
    pin: { env: { CUDA_VISIBLE_DEVICES: "3" } },
  });
  const placed = placeGpus([...cards], range(0, 3));
  assert.deepEqual(devices(placed), {
    cpu: [],
    tool: null,
    ray: null,
    pin: ["3"],
  });
  assert.deepEqual(gpuEnv(placed.get("cpu")), { CUDA_VISIBLE_DEVICES: "" });
  assert.deepEqual(gpuEnv(placed.get("tool")), {});
  assert.deepEqual(gpuEnv(placed.get("pin")), {}); // its own env says it
  assert.deepEqual(gpuEnv(undefined), {});
  assert.equal(gpuLine("cpu", placed.get("cpu")!), "cpu: no GPU (gpus: 0)");
  assert.equal(
    gpuLine("tool", placed.get("tool")!),
    "tool: GPUs not placed (engine command)",
  );
  assert.equal(
    gpuLine("pin", placed.get("pin")!),
    "pin: GPU 3 (pinned by its CUDA_VISIBLE_DEVICES)",
  );
});

Deno.test("without a pool nothing is placed or refused; gpus: 0 and pinned cards still say what they see", () => {
  const cards = catalogue({
    chat: { args: { "tensor-parallel-size": "four" } }, // would be refused with a pool
    cpu: { gpus: 0 },
    a: { env: { CUDA_VISIBLE_DEVICES: "1" } },
    b: { env: { CUDA_VISIBLE_DEVICES: "1" } }, // would clash with a pool
  });
  const placed = placeGpus([...cards], undefined);
  assert.deepEqual(devices(placed), {
    chat: null,
    cpu: [],
    a: ["1"],
    b: ["1"],
  });
  assert.deepEqual(gpuEnv(placed.get("chat")), {});
  assert.deepEqual(gpuEnv(placed.get("cpu")), { CUDA_VISIBLE_DEVICES: "" });
  assert.equal(
    gpuLine("chat", placed.get("chat")!),
    "chat: GPUs not placed (no GPU pool)",
  );
});

Deno.test("a card requested twice is refused", () => {
  const m = card({});
  assert.equal(
    refusal(() => placeGpus([m, m], range(0, 1))),
    "Cannot place m: it is requested twice (expected each model once)",
  );
});

Deno.test("formatGpuList writes runs of indices as ranges and other entries as they are", () => {
  assert.equal(formatGpuList(["0", "1", "2", "3"]), "0-3");
  assert.equal(formatGpuList(["0", "2", "4", "5"]), "0,2,4-5");
  assert.equal(formatGpuList(["3"]), "3");
  assert.equal(formatGpuList(["5", "4"]), "5,4");
  assert.equal(formatGpuList(["GPU-a", "GPU-b", "0", "1"]), "GPU-a,GPU-b,0-1");
  assert.equal(formatGpuList([]), "none");
});

// --- reload: held assignments --------------------------------------------------

Deno.test("held assignments keep their devices; the others are placed around them", () => {
  const cards = catalogue({
    a: { gpus: 1 },
    b: { gpus: 2 },
    e: { gpus: 0.5 },
  });
  const before = placeGpus([...cards], range(0, 3));
  assert.deepEqual(devices(before), { a: ["0"], b: ["1", "2"], e: ["3"] });
  // b changed: a and e are held, b is placed in what is free plus its own.
  const held = new Map([["a", before.get("a")!], ["e", before.get("e")!]]);
  const moved = catalogue({ b: { gpus: 1 } });
  assert.deepEqual(
    devices(placeGpus([moved.get("b")], range(0, 3), { held })),
    { b: ["1"] },
  );
  // A share fits beside a held share on the same device.
  const share = catalogue({ s: { gpus: 0.5 } }).get("s");
  const withE = new Map([["e", before.get("e")!]]);
  assert.deepEqual(
    devices(placeGpus([share], pool("3"), { held: withE })),
    { s: ["3"] },
  );
});

Deno.test("a changed card that no longer fits beside the held ones is refused, naming the holders", () => {
  const cards = catalogue({ a: { gpus: 1 }, b: { gpus: 1 } });
  const before = placeGpus([...cards], range(0, 1));
  const held = new Map([["a", before.get("a")!]]);
  const grown = catalogue({ b: { gpus: 2 } }).get("b");
  assert.equal(
    refusal(() => placeGpus([grown], range(0, 1), { held })),
    "Cannot place b: needs 2 GPUs, 1 free in pool 0-1 (a holds 0)",
  );
  const pinned = catalogue({ b: { env: { CUDA_VISIBLE_DEVICES: "0" } } })
    .get("b");
  assert.match(
    refusal(() => placeGpus([pinned], range(0, 1), { held })),
    /pins GPU 0, which a also pins/,
  );
});
