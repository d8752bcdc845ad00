import assert from "node:assert/strict";
import { withinGuard } from "../support/helpers.ts";
import { detectGpuPool } from "../../src/gpu/detect.ts";
import {
  deviceOf,
  type GpuSnapshot,
  queryGpus,
} from "../../src/gpu/nvidia_smi.ts";
import { fakeDevices, fakeGpuMachine } from "../support/fake_gpus.ts";

const DEVICE_QUERY =
  "--query-gpu=index,uuid,memory.total,memory.used,name --format=csv,noheader,nounits";
const PROCESS_QUERY =
  "--query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits";

/**
 * A temp directory holding a shell `nvidia-smi` that prints `devices` for the
 * device query and `processes` for the compute-apps query (printf formats),
 * and fails on anything else; removed on dispose.
 */
async function printing(devices: string, processes: string) {
  const dir = await Deno.makeTempDir({ prefix: "serve-nvsmi-" });
  await Deno.writeTextFile(
    `${dir}/nvidia-smi`,
    `#!/bin/sh
case "$*" in
  '${DEVICE_QUERY}') printf -- '${devices}' ;;
  '${PROCESS_QUERY}') printf -- '${processes}' ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
`,
    { mode: 0o755 },
  );
  return {
    env: { PATH: `${dir}:/usr/bin:/bin` },
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

const A = "GPU-8e1c0a2b-1f3d-4c6e-9a7b-0123456789ab";
const B = "GPU-77aa13f0-5e2d-4b1c-8f9e-ba9876543210";

// --- reading the answers ----------------------------------------------------------

Deno.test("queryGpus reads devices and processes, trimming fields and skipping blank lines", async () => {
  await using smi = await printing(
    `0, ${A}, 81920, 65536, NVIDIA H100, 80GB\\r\\n\\n  1 ,${B} , 81920 ,  0  \\n\\n`,
    `\\n4321, 60000, ${A}\\r\\n 99, 5536 , ${A}\\n`,
  );
  const before = Date.now();
  const query = await queryGpus({ env: smi.env });
  assert.ok(query.ok, JSON.stringify(query));
  const { devices, processes, at } = query.snapshot;
  assert.deepEqual(devices, [
    {
      index: "0",
      uuid: A,
      totalMiB: 81920,
      usedMiB: 65536,
      memoryKnown: true,
      // The name last, its commas kept; an older answer without it still reads.
      name: "NVIDIA H100, 80GB",
    },
    { index: "1", uuid: B, totalMiB: 81920, usedMiB: 0, memoryKnown: true },
  ]);
  assert.deepEqual(processes, [
    { pid: 4321, usedMiB: 60000, gpuUuid: A },
    { pid: 99, usedMiB: 5536, gpuUuid: A },
  ]);
  assert.ok(at >= before && at <= Date.now(), `at ${at}`);
});

Deno.test("[N/A] memory: a device's memory is unknown (NaN), a process's is 0", async () => {
  await using smi = await printing(
    `0, ${A}, [N/A], [N/A]\\n1, ${B}, 81920, [Not Supported]\\n`,
    `7, [N/A], ${A}\\n8, [Not Supported], ${B}\\n9, 100, ${B}\\n`,
  );
  const query = await queryGpus({ env: smi.env });
  assert.ok(query.ok, JSON.stringify(query));
  const [a, b] = query.snapshot.devices;
  for (const device of [a!, b!]) {
    assert.equal(device.memoryKnown, false, device.uuid);
    assert.ok(Number.isNaN(device.totalMiB) && Number.isNaN(device.usedMiB));
    // Comparisons with unknown memory are false: no rule fires on it by accident.
    assert.equal(device.totalMiB - device.usedMiB < 1, false);
  }
  assert.deepEqual(query.snapshot.processes, [
    { pid: 7, usedMiB: 0, gpuUuid: A },
    { pid: 8, usedMiB: 0, gpuUuid: B },
    { pid: 9, usedMiB: 100, gpuUuid: B },
  ]);
});

Deno.test("a device after an Xid error (ERR!, [GPU requires reset]) is listed with nvidia-smi's words as its error; [N/A] is no error", async () => {
  await using smi = await printing(
    `0, ${A}, 81920, ERR!\n1, ${B}, [GPU requires reset], [GPU requires reset]\n`,
    "",
  );
  const query = await queryGpus({ env: smi.env });
  assert.ok(query.ok, JSON.stringify(query));
  const [a, b] = query.snapshot.devices;
  assert.equal(a!.error, "ERR!");
  assert.equal(b!.error, "[GPU requires reset]");
  assert.equal(a!.memoryKnown || b!.memoryKnown, false);
});

Deno.test("a device listed twice fails the whole query: GPU facts unknown", async () => {
  await using smi = await printing(
    `0, ${A}, 81920, 0\n0, ${A}, 81920, 0\n`,
    "",
  );
  const query = await queryGpus({ env: smi.env });
  assert.equal(query.ok, false);
  assert.match(
    !query.ok ? query.error : "",
    /listed GPU 0 \(GPU-[^)]+\) twice/,
  );
});

Deno.test("no compute process (empty, or an older driver's sentence) is an empty list", async () => {
  for (const processes of ["", "\\n", "No running processes found\\n"]) {
    await using smi = await printing(`0, ${A}, 81920, 0\\n`, processes);
    const query = await queryGpus({ env: smi.env });
    assert.ok(query.ok, JSON.stringify(query));
    assert.deepEqual(query.snapshot.processes, []);
    assert.equal(query.snapshot.devices.length, 1);
  }
});

Deno.test("output that does not read fails the whole query, naming the query and the line", async () => {
  const good = `0, ${A}, 81920, 0\\n`;
  const cases: [string, string, string][] = [
    [
      `${good}garbage\\n`,
      "",
      "nvidia-smi --query-gpu: it printed 'garbage' (expected index, GPU-<uuid>, total MiB, used MiB, name)",
    ],
    [
      `0, ${A}, 80 GiB, 0\\n`,
      "",
      `nvidia-smi --query-gpu: it printed '0, ${A}, 80 GiB, 0' (expected memory in MiB or [N/A])`,
    ],
    [
      `x, ${A}, 81920, 0\\n`,
      "",
      `nvidia-smi --query-gpu: it printed 'x, ${A}, 81920, 0' (expected index, GPU-<uuid>, total MiB, used MiB, name)`,
    ],
    [
      `0, ${A}, 81920\\n`,
      "",
      `nvidia-smi --query-gpu: it printed '0, ${A}, 81920' (expected index, GPU-<uuid>, total MiB, used MiB, name)`,
    ],
    ["\\n", "", "nvidia-smi --query-gpu: it listed no device"],
    [
      good,
      `12, 5000\\n`,
      "nvidia-smi --query-compute-apps: it printed '12, 5000' (expected pid, used MiB or [N/A], GPU-<uuid>)",
    ],
    [
      good,
      `-1, 5000, ${A}\\n`,
      `nvidia-smi --query-compute-apps: it printed '-1, 5000, ${A}' (expected pid, used MiB or [N/A], GPU-<uuid>)`,
    ],
    [
      good,
      `12, lots, ${A}\\n`,
      `nvidia-smi --query-compute-apps: it printed '12, lots, ${A}' (expected pid, used MiB or [N/A], GPU-<uuid>)`,
    ],
  ];
  for (const [devices, processes, error] of cases) {
    await using smi = await printing(devices, processes);
    assert.deepEqual(await queryGpus({ env: smi.env }), { ok: false, error });
  }
});

// --- deviceOf -------------------------------------------------------------------

const SNAPSHOT: GpuSnapshot = {
  devices: [
    { index: "0", uuid: A, totalMiB: 81920, usedMiB: 0, memoryKnown: true },
    { index: "1", uuid: B, totalMiB: 81920, usedMiB: 10, memoryKnown: true },
    {
      index: "2",
      uuid: "GPU-77aa0000-0000-0000-0000-000000000000",
      totalMiB: 40960,
      usedMiB: 0,
      memoryKnown: true,
    },
  ],
  processes: [],
  at: 0,
};

Deno.test("deviceOf finds a pool entry's device by index or by uuid", () => {
  assert.equal(deviceOf("1", SNAPSHOT)?.uuid, B);
  assert.equal(deviceOf("01", SNAPSHOT)?.uuid, B);
  assert.equal(deviceOf(" 2 ", SNAPSHOT)?.index, "2");
  assert.equal(deviceOf(A, SNAPSHOT)?.index, "0");
  assert.equal(
    deviceOf(`GPU-${B.slice(4).toUpperCase()}`, SNAPSHOT)?.index,
    "1",
  );
  // A unique prefix names its device, as in CUDA_VISIBLE_DEVICES.
  assert.equal(deviceOf("GPU-8e1c", SNAPSHOT)?.index, "0");
  assert.equal(deviceOf("GPU-77aa13", SNAPSHOT)?.index, "1");
});

Deno.test("deviceOf: MIG entries, ambiguous prefixes and unknown devices give undefined", () => {
  assert.equal(deviceOf(`MIG-${A}/1/0`, SNAPSHOT), undefined);
  assert.equal(
    deviceOf("MIG-4b6e8f2a-1d3c-5e7f-9a0b-123456789abc", SNAPSHOT),
    undefined,
  );
  assert.equal(deviceOf("GPU-77aa", SNAPSHOT), undefined, "two devices match");
  assert.equal(deviceOf("GPU-", SNAPSHOT), undefined);
  assert.equal(deviceOf("3", SNAPSHOT), undefined);
  assert.equal(deviceOf("GPU-ffff", SNAPSHOT), undefined);
  assert.equal(deviceOf("", SNAPSHOT), undefined);
});

// --- through the stand-in nvidia-smi ------------------------------------------------

Deno.test("the stand-in answers both queries, and pool detection's", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(2) });
  await gpus.addForeign("job", { pid: 4242, gpu: "1", mib: 60000 });
  const query = await queryGpus({ env: gpus.env });
  assert.ok(query.ok, JSON.stringify(query));
  assert.deepEqual(
    query.snapshot.devices.map((d) => [d.index, d.usedMiB, d.totalMiB]),
    [["0", 0, 81920], ["1", 60000, 81920]],
  );
  assert.deepEqual(query.snapshot.processes, [
    { pid: 4242, usedMiB: 60000, gpuUuid: fakeDevices(2)[1]!.uuid },
  ]);
  assert.deepEqual(
    (await gpus.calls()).map((call) => call.args.join(" ")).sort(),
    [DEVICE_QUERY, PROCESS_QUERY].sort(),
  );
  assert.deepEqual(await detectGpuPool({ env: gpus.env }), {
    pool: { entries: ["0", "1"], explicit: false },
    source: "nvidia-smi",
  });
});

Deno.test("a failing nvidia-smi gives ok:false with its exit code and first line", async () => {
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    fail: true,
  });
  assert.deepEqual(await queryGpus({ env: gpus.env }), {
    ok: false,
    error:
      "nvidia-smi --query-gpu: it exited with code 9 (Failed to initialize NVML: Driver/library version mismatch)",
  });
  // A machine whose driver sees no device: the real tool exits 6.
  await using empty = await fakeGpuMachine();
  assert.deepEqual(await queryGpus({ env: empty.env }), {
    ok: false,
    error:
      "nvidia-smi --query-gpu: it exited with code 6 (No devices were found)",
  });
});

Deno.test("a hanging nvidia-smi is killed after timeoutMs and leaves no process", async () => {
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    hang: true,
  });
  // The stand-in never answers: the line says the timeout ended it; the
  // guard fails a query that waited for the stand-in instead.
  const query = await withinGuard(
    queryGpus({ env: gpus.env, timeoutMs: 1500 }),
    "the query",
  );
  assert.deepEqual(query, {
    ok: false,
    error: "nvidia-smi --query-gpu: no answer within 1.5 s (killed)",
  });
  // Both runs reached the stand-in's hang (they read the ledger), and both are gone.
  assert.equal((await gpus.calls()).length, 2);
  assert.deepEqual(await gpus.processes(), []);
});

Deno.test("without nvidia-smi on PATH the query is ok:false, absent, and nothing is spawned", async () => {
  const empty = await Deno.makeTempDir({ prefix: "serve-nopath-" });
  try {
    assert.deepEqual(await queryGpus({ env: { PATH: empty } }), {
      ok: false,
      error: "nvidia-smi: not found on PATH",
      absent: true,
    });
    // Not executable is not found either.
    await Deno.writeTextFile(`${empty}/nvidia-smi`, "#!/bin/sh\necho 0\n", {
      mode: 0o644,
    });
    assert.deepEqual(await queryGpus({ env: { PATH: empty } }), {
      ok: false,
      error: "nvidia-smi: not found on PATH",
      absent: true,
    });
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
});
