/**
 * Issue 53 item 4: a sleeper that wakes itself (llama.cpp's
 * `--sleep-idle-seconds`) is counted in the per-device ledger as its awake
 * footprint (its residue plus the room its wake takes back), never as the
 * little it holds asleep. Through the real CLI: stand-in llama-servers that
 * hold 30000 MiB awake and 600 MiB asleep (`--fake-gpu-residue-mib`, as the
 * real one keeps its CUDA context) in a stand-in `nvidia-smi` on fake 80 GiB
 * GPUs; placement, the start gate and `--dry-run` read the same ledger.
 */
import assert from "node:assert/strict";
import { models, waitFor } from "../support/helpers.ts";
import { fakeDevices } from "../support/fake_gpus.ts";
import { catalogue, seedFootprints } from "../support/gpu_cards.ts";
import { gpuSite } from "../support/gpu_site.ts";
import { footprintKey } from "../../src/gpu/footprint_book.ts";
import type { StartPlan } from "../../src/serve.ts";

const H100 = "NVIDIA H100 80GB HBM3";
const MIB = 2 ** 20;

const CARDS = {
  // Sleeps after 3 idle seconds: rounds every 0.3 s measure it awake first.
  dozy: {
    engine: "llama.cpp",
    sleep_after: 3,
    args: { "fake-gpu-mib": 30000, "fake-gpu-residue-mib": 600 },
  },
  // The flag in its args means the same as sleep_after.
  nap: { engine: "llama.cpp", args: { "sleep-idle-seconds": 5 } },
  big: { engine: "llama.cpp" },
  late: { engine: "llama.cpp", gpu_memory: "40GiB" },
};

async function site() {
  const s = await gpuSite({
    cards: CARDS,
    bin: ["llama-server"],
    devices: fakeDevices(2),
    gpus: "0-1",
  });
  const book = `${s.root}/data/footprints.json`;
  const key = (name: string) => footprintKey(catalogue(CARDS).get(name));
  return {
    ...s,
    /** The book's entry for card `name` on the H100s. */
    async entry(name: string) {
      const { entries } = JSON.parse(await Deno.readTextFile(book));
      return entries.find((e: { key: string; device: string }) =>
        e.key === key(name) && e.device === H100
      )?.footprint;
    },
    /** The book a start would have left: `mib` measured per card on the H100s. */
    seed(mib: Record<string, number>, residue?: number) {
      return seedFootprints(s.root, CARDS, mib, (name) => ({
        ...name === "dozy" && residue ? { residue_mib: residue } : {},
        device: null,
        from: "nvidia-smi",
      }));
    },
  };
}

/** Until `name` sleeps and its residue was measured at a round. */
async function asleep(port: number, name: string): Promise<void> {
  await waitFor(
    async () => {
      const engine = (await models(port, true)).active[name];
      return engine?.state === "sleeping" &&
        engine.sleep?.residue_bytes === 600 * MIB;
    },
    `${name} asleep, its residue measured`,
    20_000,
  );
}

Deno.test("a self-waking sleeper's footprint stays its awake one while it sleeps: the book keeps 30000 MiB (600 MiB beside it as its residue), so the next placement does not pack a 60000 MiB card beside it, and --dry-run shows what it holds awake and asleep", async () => {
  await using s = await site();
  await s.seed({ big: 60000 });
  const launcher = s.start(["dozy"]);
  try {
    await launcher.ready();
    await waitFor(
      async () => (await s.entry("dozy"))?.total_mib === 30000,
      "its awake footprint in the book",
    );
    await asleep(s.port, "dozy");
    // Rounds go on while it sleeps: none of them may shrink its footprint.
    await new Promise((r) => setTimeout(r, 1_000));
  } finally {
    await launcher.stop();
  }
  const kept = await s.entry("dozy");
  assert.equal(kept?.total_mib, 30000, "counted at its residue only");
  assert.equal(kept?.residue_mib, 600);

  const plan = JSON.parse(await s.dryRun(["dozy", "big"])) as StartPlan;
  // 30000 + 60000 MiB do not fit 81920: big gets the next device.
  assert.deepEqual(plan.engines.map((e) => [e.name, e.gpus]), [
    ["dozy", ["0"]],
    ["big", ["1"]],
  ]);
  const [dozy] = plan.gpus[0]!.engines;
  assert.equal(dozy!.need_mib, 30000);
  assert.deepEqual(dozy!.sleep, {
    after_seconds: 3,
    woken_by: "itself",
    awake_mib: 30000,
    asleep_mib: 600,
  });
  assert.equal(plan.gpus[1]!.engines[0]!.sleep, undefined, "big never sleeps");
  const text = await s.dryRun(["dozy", "big"], false);
  assert.match(
    text,
    /^0 +81920 MiB +81920 MiB +dozy 0\.3662 \(30000 MiB measured awake, 600 MiB asleep after 3 s idle\) +30000 MiB +51920 MiB +-$/m,
  );
});

Deno.test("--dry-run says not measured for a sleeper's residue the book does not know, and counts the flag in args as sleep_after", async () => {
  await using s = await site();
  await s.seed({ nap: 30000 });
  const plan = JSON.parse(await s.dryRun(["nap"])) as StartPlan;
  assert.deepEqual(plan.gpus[0]!.engines[0]!.sleep, {
    after_seconds: 5,
    woken_by: "itself",
    awake_mib: 30000,
    asleep_mib: null,
  });
  assert.match(
    await s.dryRun(["nap"], false),
    /^0 +81920 MiB +81920 MiB +nap 0\.3662 \(30000 MiB measured awake, not measured asleep after 5 s idle\) +30000 MiB +51920 MiB +-$/m,
  );
});

Deno.test("while a self-waking sleeper holds only its residue, a start packed beside it still waits for the memory its wake takes back", async () => {
  await using s = await site();
  await s.seed({ dozy: 30000 }, 600);
  // Someone else's 20000 MiB: late's 40960 fit beside dozy asleep, not awake.
  await s.machine.addForeign("other", { pid: 4242, gpu: "0", mib: 20000 });
  const launcher = s.start(["dozy", "late"]);
  try {
    await launcher.ready();
    await asleep(s.port, "dozy");
    // Rounds and gate looks go on while it sleeps: late never starts.
    await new Promise((r) => setTimeout(r, 1_500));
    const late = (await models(s.port, true)).active.late!;
    assert.deepEqual(late.gpus, ["0"], "placed beside dozy");
    assert.equal(late.state, "waiting");
    assert.equal(late.pid, null);
    assert.equal(late.waiting_for?.reason, "gpu-memory-free");
    assert.match(
      late.waiting_for!.detail,
      /^31920 MiB free \(29400 MiB kept for sleeping engines\), needs 40960 MiB/,
    );
  } finally {
    await launcher.stop();
  }
});
