/** The stand-in `nvidia-smi` and the stand-in engine's `--fake-gpu-mib`: the facts GPU tests rely on. */
import assert from "node:assert/strict";
import { queryGpus } from "../../src/gpu/nvidia_smi.ts";
import {
  fakeDevices,
  type FakeGpuMachine,
  fakeGpuMachine,
} from "../support/fake_gpus.ts";
import { freePorts, listening, waitFor } from "../support/helpers.ts";

const FAKE_ENGINE =
  new URL("../fixtures/fake_engine.ts", import.meta.url).pathname;
const [GPU0, GPU1] = fakeDevices(2).map((device) => device.uuid) as [
  string,
  string,
];

/** A stand-in engine holding `mib` on `visible`, killed and reaped on dispose. */
function engine(gpus: FakeGpuMachine, visible: string, mib: number) {
  const port = freePorts(1);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--quiet",
      FAKE_ENGINE,
      "--port",
      String(port),
      "--fake-gpu-mib",
      String(mib),
    ],
    env: { ...gpus.env, CUDA_VISIBLE_DEVICES: visible },
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  let reaped = false;
  return {
    pid: child.pid,
    port,
    /** Kills it and waits until it is reaped: its /proc entry is gone. */
    async kill(): Promise<void> {
      if (reaped) return;
      child.kill("SIGKILL");
      await child.status;
      reaped = true;
    },
    async [Symbol.asyncDispose]() {
      await this.kill();
    },
  };
}

/** pid → MiB per device uuid, and used MiB per device index, as the stand-in answers now. */
async function seen(gpus: FakeGpuMachine) {
  const query = await queryGpus({ env: gpus.env });
  assert.ok(query.ok, JSON.stringify(query));
  const processes: Record<string, number> = {};
  for (const proc of query.snapshot.processes) {
    processes[`${proc.pid}@${proc.gpuUuid}`] = proc.usedMiB;
  }
  const used: Record<string, number> = {};
  for (const device of query.snapshot.devices) {
    used[device.index] = device.usedMiB;
  }
  return { processes, used };
}

Deno.test("an engine with --fake-gpu-mib is listed on each of its devices, and used memory sums", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(2) });
  await gpus.addForeign("other-user", { pid: 4242, gpu: GPU1, mib: 60000 });
  // Entries as in CUDA_VISIBLE_DEVICES: an index and a uuid.
  await using a = engine(gpus, `0,${GPU1}`, 5000);
  await using b = engine(gpus, "1", 700);
  await waitFor(async () => (await gpus.procs()).size === 2, "both entries");
  assert.deepEqual((await gpus.procs()).get(a.pid), {
    pid: a.pid,
    gpus: ["0", GPU1],
    mib: 5000,
  });
  assert.deepEqual(await seen(gpus), {
    processes: {
      [`${a.pid}@${GPU0}`]: 5000,
      [`${a.pid}@${GPU1}`]: 5000,
      [`${b.pid}@${GPU1}`]: 700,
      [`4242@${GPU1}`]: 60000,
    },
    used: { "0": 5000, "1": 65700 },
  });
});

Deno.test("an engine with an empty CUDA_VISIBLE_DEVICES enters nothing", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using gpuless = engine(gpus, "", 5000);
  await using placed = engine(gpus, "0", 1);
  // Listening means past the point where it would have entered itself.
  await waitFor(() => listening(gpuless.port), "the GPU-less engine");
  await waitFor(() => listening(placed.port), "the placed engine");
  assert.deepEqual([...(await gpus.procs()).keys()], [placed.pid]);
});

Deno.test("a dead engine stays listed for releaseMs after the stand-in first sees it gone, then is dropped", async () => {
  const releaseMs = 1500;
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    releaseMs,
  });
  await using dead = engine(gpus, "0", 5000);
  await waitFor(async () => (await gpus.procs()).has(dead.pid), "its entry");
  assert.deepEqual((await seen(gpus)).used, { "0": 5000 });
  await dead.kill();
  const killed = Date.now();
  // Still listed, with the moment it was first seen gone recorded.
  assert.deepEqual((await seen(gpus)).processes, {
    [`${dead.pid}@${GPU0}`]: 5000,
  });
  const goneAt = (await gpus.procs()).get(dead.pid)?.goneAt;
  assert.ok(goneAt !== undefined && goneAt >= killed, `goneAt ${goneAt}`);
  // Later queries keep the first sighting: the release is counted from it.
  assert.equal((await seen(gpus)).used["0"], 5000);
  assert.equal((await gpus.procs()).get(dead.pid)?.goneAt, goneAt);
  // After releaseMs: dropped, file and all.
  await new Promise((resolve) =>
    setTimeout(resolve, goneAt + releaseMs - Date.now() + 50)
  );
  assert.deepEqual(await seen(gpus), { processes: {}, used: { "0": 0 } });
  assert.equal((await gpus.procs()).size, 0);
});

Deno.test("with releaseMs 0 a dead engine disappears at the first query after its death", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using dead = engine(gpus, "0", 5000);
  await waitFor(async () => (await gpus.procs()).has(dead.pid), "its entry");
  await dead.kill();
  assert.deepEqual(await seen(gpus), { processes: {}, used: { "0": 0 } });
});

Deno.test("foreign entries are listed while their file exists, whether or not the pid does", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(2) });
  // Pid 4194304 exceeds Linux's pid_max: surely no process here.
  await gpus.addForeign("ghost", { pid: 4194304, gpu: "0", mib: 30000 });
  await gpus.addForeign("self", { pid: Deno.pid, gpu: GPU1, mib: 1000 });
  assert.deepEqual(await seen(gpus), {
    processes: { [`4194304@${GPU0}`]: 30000, [`${Deno.pid}@${GPU1}`]: 1000 },
    used: { "0": 30000, "1": 1000 },
  });
  await gpus.removeForeign("ghost");
  assert.deepEqual(await seen(gpus), {
    processes: { [`${Deno.pid}@${GPU1}`]: 1000 },
    used: { "0": 0, "1": 1000 },
  });
});

Deno.test("a device with memoryNA prints [N/A], read as unknown memory", async () => {
  await using gpus = await fakeGpuMachine({
    devices: [{ ...fakeDevices(1)[0]!, memoryNA: true }],
  });
  const query = await queryGpus({ env: gpus.env });
  assert.ok(query.ok, JSON.stringify(query));
  assert.equal(query.snapshot.devices[0]!.memoryKnown, false);
  assert.ok(Number.isNaN(query.snapshot.devices[0]!.totalMiB));
});
