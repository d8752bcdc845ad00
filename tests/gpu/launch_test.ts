/**
 * GPU placement through the real launcher: stand-in engines record the
 * `CUDA_VISIBLE_DEVICES` they were given; a stand-in `nvidia-smi` on PATH.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  launch,
  Launcher,
  listDir,
  makeRoot,
  models,
  pathWith,
  readRecord,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";

/** Each engine's recorded environment, by model, once all have started. */
async function devicesOf(
  records: string,
  port: number,
  names: readonly string[],
): Promise<Record<string, string | undefined>> {
  const out: Record<string, string | undefined> = {};
  await waitFor(async () => {
    for (const [i, name] of names.entries()) {
      const record = await readRecord(records, port + i + 1);
      if (!record) return false;
      out[name] = record.env.CUDA_VISIBLE_DEVICES;
    }
    return true;
  }, "every engine recorded");
  return out;
}

Deno.test("--gpus 0-3: a tensor-parallel 2 card gets a run of two devices, a default vLLM card its own device", async () => {
  const names = ["tp2", "alpha"];
  await using s = await launch(names, { args: ["--gpus", "0-3"] });
  await s.launcher.ready();
  assert.deepEqual(await devicesOf(s.records, s.port, names), {
    tp2: "0,1",
    alpha: "2",
  });
  assert.match(s.launcher.stderr, /GPU pool 0-3 \(from --gpus\)/);
  assert.match(s.launcher.stderr, /tp2: GPUs 0,1/);
  const detail = await models(s.port, true);
  assert.deepEqual(detail.active.tp2?.gpus, ["0", "1"]);
  assert.deepEqual(detail.active.alpha?.gpus, ["2"]);
  const record = await readRecord(s.records, s.port + 1);
  assert.equal(record?.env.CUDA_DEVICE_ORDER, "PCI_BUS_ID");
});

Deno.test("three embedding cards share one device; gpus: 0 gets an empty CUDA_VISIBLE_DEVICES", async () => {
  const names = ["emb1", "emb2", "emb3", "cpu"];
  await using s = await launch(names, { args: ["--gpus", "0-1"] });
  await s.launcher.ready();
  assert.deepEqual(await devicesOf(s.records, s.port, names), {
    emb1: "0",
    emb2: "0",
    emb3: "0",
    cpu: "",
  });
  assert.deepEqual((await models(s.port, true)).active.cpu?.gpus, []);
});

Deno.test("a pool too small is refused before anything starts or listens", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  const records = await Deno.makeTempDir();
  const port = freePorts(2);
  try {
    const launcher = new Launcher(
      ["big4", "tp2", ...siteArgs(port, root), "--gpus", "0-3"],
      { PATH: pathWith(bin), FAKE_ENGINE_RECORD_DIR: records },
    );
    const status = await launcher.exited();
    assert.equal(status.code, 1);
    const errors = launcher.lines.filter((l) => l.includes("error"));
    assert.equal(errors.length, 1, launcher.stderr);
    assert.match(
      errors[0]!,
      /Cannot place tp2: needs 2 GPUs, 0 free in pool 0-3 \(big4 holds 0,1,2,3\)/,
    );
    assert.deepEqual(listDir(records), [], "no engine started");
    assert.doesNotMatch(launcher.stderr, /listening on/);
  } finally {
    for (const dir of [root, bin, records]) {
      await Deno.remove(dir, { recursive: true });
    }
  }
});

Deno.test("the pool comes from the launcher's own CUDA_VISIBLE_DEVICES, UUIDs as written", async () => {
  const names = ["tp2", "alpha"];
  const uuids = ["GPU-1a2b", "GPU-3c4d", "GPU-5e6f"];
  await using s = await launch(names, {
    env: { CUDA_VISIBLE_DEVICES: uuids.join(",") },
  });
  await s.launcher.ready();
  assert.deepEqual(await devicesOf(s.records, s.port, names), {
    tp2: "GPU-1a2b,GPU-3c4d",
    alpha: "GPU-5e6f",
  });
  const record = await readRecord(s.records, s.port + 1);
  assert.equal(record?.env.CUDA_DEVICE_ORDER, undefined);
});

Deno.test("the pool comes from a stand-in nvidia-smi on PATH", async () => {
  const names = ["alpha", "beta"];
  await using s = await launch(names, {
    bin: {
      "nvidia-smi":
        `#!/bin/sh\n[ "$*" = "--query-gpu=index --format=csv,noheader" ] || exit 9\nprintf '0\\n1\\n'\n`,
    },
  });
  await s.launcher.ready();
  assert.match(s.launcher.stderr, /GPU pool 0-1 \(from nvidia-smi\)/);
  assert.deepEqual(await devicesOf(s.records, s.port, names), {
    alpha: "0",
    beta: "1",
  });
});

Deno.test("no pool: engines' environment is left as it was", async () => {
  await using s = await launch(["alpha"]);
  await s.launcher.ready();
  assert.match(s.launcher.stderr, /GPUs not placed/);
  const devices = await devicesOf(s.records, s.port, ["alpha"]);
  assert.equal(devices.alpha, undefined);
  assert.equal((await models(s.port, true)).active.alpha?.gpus, null);
});

Deno.test("a crashed and restarted engine keeps its devices", async () => {
  const names = ["alpha", "crash1"];
  await using s = await launch(names, { args: ["--gpus", "4-5"] });
  await s.launcher.ready();
  const before = await devicesOf(s.records, s.port, names);
  assert.deepEqual(before, { alpha: "4", crash1: "5" });
  const first = (await readRecord(s.records, s.port + 2))!.pid;
  await waitFor(async () => {
    const record = await readRecord(s.records, s.port + 2);
    return record !== undefined && record.pid !== first;
  }, "restarted");
  const again = await readRecord(s.records, s.port + 2);
  assert.equal(again?.env.CUDA_VISIBLE_DEVICES, "5");
});
