/** The launcher's placement composition (src/gpu/placement.ts) on an explicit pool. */
import assert from "node:assert/strict";
import type { ModelCard } from "../../src/catalogue.ts";
import {
  devicesOf,
  placeEngines,
  type Placement,
  placementEnv,
  placementReport,
  replacePlacement,
} from "../../src/gpu/placement.ts";
import { detectGpuPool } from "../../src/gpu/detect.ts";
import { catalogue } from "../support/gpu_cards.ts";
import type { GpuQuery } from "../../src/gpu/nvidia_smi.ts";

/** The pool `gpus` detected and the cards placed on it, as the launcher's facts and plan do. */
async function placeOn(
  cards: readonly ModelCard[],
  gpus: string,
  query?: Promise<GpuQuery>,
): Promise<Placement> {
  const detection = await detectGpuPool({ gpus, env: {}, query });
  const look = await query;
  return placeEngines(
    cards,
    detection,
    look?.ok ? look.snapshot : undefined,
    undefined,
  );
}

/** The report's lines as the log writes them. */
function report(placement: Placement, cards: readonly ModelCard[]) {
  return {
    lines: placementReport(placement, cards).map((l) =>
      `${l.level}: ${l.text}`
    ),
  };
}

Deno.test("replan keeps unchanged engines' devices and places the changed ones in what is free", async () => {
  const before = catalogue({ a: { gpus: 1 }, b: { gpus: 1 }, c: { gpus: 1 } });
  const placement = await placeOn([...before], "0-3");
  assert.deepEqual(devicesOf(placement, before.get("b")), ["1"]);
  const after = catalogue({ a: { gpus: 1 }, b: { gpus: 2 }, c: { gpus: 1 } });
  const next = replacePlacement(placement, [...after], new Set(["b"]));
  assert.deepEqual(devicesOf(next, after.get("a")), ["0"]);
  assert.deepEqual(devicesOf(next, after.get("c")), ["2"]);
  // Free: 1 (its own) and 3; no adjacent run of two, so the lowest free ones.
  assert.deepEqual(devicesOf(next, after.get("b")), ["1", "3"]);
  assert.deepEqual(
    placementEnv(next, after.get("b")).CUDA_VISIBLE_DEVICES,
    "1,3",
  );
  assert.deepEqual(
    devicesOf(placement, before.get("b")),
    ["1"],
    "the old one stays",
  );
  const tooBig = catalogue({ a: { gpus: 1 }, b: { gpus: 3 }, c: { gpus: 1 } });
  assert.throws(
    () => replacePlacement(placement, [...tooBig], new Set(["b"])),
    /Cannot place b: needs 3 GPUs, 2 free in pool 0-3/,
  );
});

/** One look at two devices; GPU 1's memory reads as an error when `errored`. */
function look(errored = false): Promise<GpuQuery> {
  const device = (index: string, uuid: string, error?: string) => ({
    index,
    uuid,
    totalMiB: error ? NaN : 81920,
    usedMiB: error ? NaN : 0,
    memoryKnown: !error,
    ...(error ? { error } : {}),
  });
  return Promise.resolve({
    ok: true,
    snapshot: {
      devices: [
        device("0", "GPU-aaaa"),
        device("1", "GPU-bbbb", errored ? "[GPU requires reset]" : undefined),
      ],
      processes: [],
      at: 0,
    },
  });
}

Deno.test("vLLM gets nvidia-smi's integer indices under CUDA_DEVICE_ORDER=PCI_BUS_ID for a pool given as UUIDs; llama.cpp and command keep the entries as given", async () => {
  const cards = catalogue({
    v: { gpus: 1 },
    l: { engine: "llama.cpp", gpus: 1 },
  });
  const placement = await placeOn(
    [...cards],
    "GPU-bbbb,GPU-aaaa",
    look(),
  );
  assert.deepEqual(placementEnv(placement, cards.get("v")), {
    CUDA_VISIBLE_DEVICES: "1",
    CUDA_DEVICE_ORDER: "PCI_BUS_ID",
  });
  assert.equal(
    placementEnv(placement, cards.get("l")).CUDA_VISIBLE_DEVICES,
    "GPU-aaaa",
  );
  assert.deepEqual(devicesOf(placement, cards.get("v")), ["GPU-bbbb"]);
});

Deno.test("without nvidia-smi, UUIDs pass through with one warning per vLLM card", async () => {
  const cards = catalogue({
    v: { gpus: 1 },
    w: { gpus: 1 },
    l: { engine: "llama.cpp", gpus: 1 },
  });
  const placement = await placeOn(
    [...cards],
    "GPU-aaaa,GPU-bbbb,GPU-cccc",
    Promise.resolve({ ok: false, error: "no nvidia-smi", absent: true }),
  );
  assert.equal(
    placementEnv(placement, cards.get("v")).CUDA_VISIBLE_DEVICES,
    "GPU-aaaa",
  );
  const { lines } = report(placement, [...cards]);
  const warned = lines.filter((l) =>
    /reads CUDA_VISIBLE_DEVICES as integers/.test(l)
  );
  assert.equal(warned.length, 2, lines.join("\n"));
  assert.match(warned[0]!, /engine v: GPU GPU-aaaa passed as given/);
});

Deno.test("MIG instances with tensor parallelism above 1 are refused before start", async () => {
  const cards = catalogue({ v: { gpus: 2 } });
  await assert.rejects(
    () => placeOn([...cards], "MIG-1111,MIG-2222"),
    /Cannot place v: needs 2 devices .*a CUDA process sees one MIG instance/,
  );
});

Deno.test("a device whose memory reads as an error is left out of automatic placement, with one warning naming it", async () => {
  const cards = catalogue({ a: { gpus: 1 }, b: { gpus: 1 } });
  const placement = await placeOn([...cards], "0-2", look(true));
  assert.deepEqual(devicesOf(placement, cards.get("a")), ["0"]);
  assert.deepEqual(devicesOf(placement, cards.get("b")), ["2"]);
  const { lines } = report(placement, [...cards]);
  const warned = lines.filter((l) => /reports its memory as an error/.test(l));
  assert.equal(warned.length, 1, lines.join("\n"));
  assert.match(
    warned[0]!,
    /GPU 1 reports its memory as an error \(\[GPU requires reset\]\): left out of automatic placement/,
  );
});
