import assert from "node:assert/strict";
import { withinGuard } from "../support/helpers.ts";
import { ConfigError } from "../../src/common.ts";
import { detectGpuPool, parseGpuList } from "../../src/gpu/detect.ts";
import { gpuPoolLine } from "../../src/gpu/placement.ts";

/**
 * A temp directory holding a stand-in `nvidia-smi` with this shell body (`@DIR@`
 * names the directory) that records its arguments; removed on dispose.
 */
async function standIn(body: string, mode = 0o755) {
  const dir = await Deno.makeTempDir({ prefix: "serve-nvsmi-" });
  await Deno.writeTextFile(
    `${dir}/nvidia-smi`,
    `#!/bin/sh\necho "$@" >> '${dir}/calls'\n${
      body.replaceAll("@DIR@", dir)
    }\n`,
    { mode },
  );
  return {
    dir,
    /** PATH with the stand-in first, the system after it (for `sleep`, `cat`...). */
    path: `${dir}:/usr/bin:/bin`,
    async calls(): Promise<string[]> {
      try {
        return (await Deno.readTextFile(`${dir}/calls`)).trim().split("\n");
      } catch {
        return [];
      }
    },
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function configError(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    assert.ok(!/[\r\n]/.test(error.message), error.message);
    return error.message;
  }
  assert.fail("expected a ConfigError");
}

// --- --gpus --------------------------------------------------------------------

Deno.test("--gpus takes indices, ranges, GPU-<uuid> entries and none", () => {
  assert.deepEqual(parseGpuList("0-7", "--gpus"), [
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
  ]);
  assert.deepEqual(parseGpuList("0,2,4-5", "--gpus"), ["0", "2", "4", "5"]);
  assert.deepEqual(parseGpuList(" 3 , 1 ", "--gpus"), ["3", "1"]);
  assert.deepEqual(parseGpuList("07", "--gpus"), ["7"]);
  assert.deepEqual(parseGpuList("2-2", "--gpus"), ["2"]);
  assert.deepEqual(parseGpuList("GPU-8e1c0a2b-1f,MIG-GPU-aa/1/0", "--gpus"), [
    "GPU-8e1c0a2b-1f",
    "MIG-GPU-aa/1/0",
  ]);
  assert.equal(parseGpuList("none", "--gpus"), "none");
  assert.equal(parseGpuList("NONE", "--gpus"), "none");
});

Deno.test("a bad --gpus is one line naming the flag and what was expected", () => {
  const expected =
    "expected device indices or ranges such as 0-7 or 0,2,4-5, GPU-<uuid> entries, or none; leave --gpus out to detect the devices";
  assert.equal(
    configError(() => parseGpuList("", "--gpus")),
    `Cannot use --gpus="": ${expected}`,
  );
  assert.equal(
    configError(() => parseGpuList("all", "--gpus")),
    `Cannot use --gpus="all": 'all' is not a device (${expected})`,
  );
  assert.equal(
    configError(() => parseGpuList("1,,2", "--gpus")),
    `Cannot use --gpus="1,,2": an empty entry is not a device (${expected})`,
  );
  assert.match(
    configError(() => parseGpuList("-1", "--gpus")),
    /^Cannot use --gpus="-1": '-1' is not a device/,
  );
  assert.equal(
    configError(() => parseGpuList("5-3", "--gpus")),
    `Cannot use --gpus="5-3": the range 5-3 goes down (expected low-high, such as 3-5)`,
  );
  assert.equal(
    configError(() => parseGpuList("0-3,2", "--gpus")),
    `Cannot use --gpus="0-3,2": device 2 is listed twice (expected each device once)`,
  );
  assert.equal(
    configError(() => parseGpuList("0-70000", "--gpus")),
    `Cannot use --gpus="0-70000": the range 0-70000 holds more than 1024 devices`,
  );
  assert.match(
    configError(() => parseGpuList("0\n1", "--gpus")),
    /^Cannot use --gpus="0\\n1": /,
  );
});

Deno.test("--gpus wins over CUDA_VISIBLE_DEVICES and nvidia-smi, and is an explicit pool", async () => {
  await using smi = await standIn("echo 0");
  const env = { CUDA_VISIBLE_DEVICES: "5", PATH: smi.path };
  assert.deepEqual(await detectGpuPool({ gpus: "0-1", env }), {
    pool: { entries: ["0", "1"], explicit: true },
    source: "--gpus",
  });
  assert.deepEqual(await detectGpuPool({ gpus: "none", env }), {
    pool: undefined,
    source: "--gpus none",
  });
  await assert.rejects(
    () => detectGpuPool({ gpus: "x", env }),
    (error: unknown) =>
      error instanceof ConfigError &&
      error.message.startsWith("Cannot use --gpus="),
  );
  assert.deepEqual(await smi.calls(), []);
});

// --- the launcher's CUDA_VISIBLE_DEVICES --------------------------------------------

Deno.test("the launcher's CUDA_VISIBLE_DEVICES is the pool, entries as written, UUIDs included", async () => {
  await using smi = await standIn("echo 0");
  const detection = await detectGpuPool({
    env: {
      CUDA_VISIBLE_DEVICES: "GPU-8e1c0a2b, GPU-77aa13f0,3",
      PATH: smi.path,
    },
  });
  assert.deepEqual(detection, {
    pool: { entries: ["GPU-8e1c0a2b", "GPU-77aa13f0", "3"], explicit: false },
    source: "CUDA_VISIBLE_DEVICES",
  });
  assert.equal(
    gpuPoolLine(detection),
    "GPU pool GPU-8e1c0a2b,GPU-77aa13f0,3 (from CUDA_VISIBLE_DEVICES)",
  );
  assert.deepEqual(await smi.calls(), [], "nvidia-smi must not be asked");
});

Deno.test("an empty CUDA_VISIBLE_DEVICES means no pool, and nvidia-smi is not asked", async () => {
  await using smi = await standIn("echo 0");
  for (const value of ["", "-1"]) {
    const detection = await detectGpuPool({
      env: { CUDA_VISIBLE_DEVICES: value, PATH: smi.path },
    });
    assert.equal(detection.pool, undefined);
    assert.equal(detection.warning, undefined);
    assert.equal(
      detection.source,
      `the launcher's CUDA_VISIBLE_DEVICES=${
        JSON.stringify(value)
      } hides every GPU`,
    );
  }
  assert.deepEqual(await smi.calls(), []);
});

// --- nvidia-smi ---------------------------------------------------------------------

Deno.test("nvidia-smi on PATH gives the pool, asked with exactly --query-gpu=index --format=csv,noheader", async () => {
  await using smi = await standIn("printf '0\\n1\\r\\n2\\n3\\n'");
  const detection = await detectGpuPool({ env: { PATH: smi.path } });
  assert.deepEqual(detection, {
    pool: { entries: ["0", "1", "2", "3"], explicit: false },
    source: "nvidia-smi",
  });
  assert.equal(gpuPoolLine(detection), "GPU pool 0-3 (from nvidia-smi)");
  assert.deepEqual(await smi.calls(), [
    "--query-gpu=index --format=csv,noheader",
  ]);
});

Deno.test("nvidia-smi failing is a one-line warning with its message, and no pool", async () => {
  await using smi = await standIn(
    "echo 'NVIDIA-SMI has failed because it couldn'\\''t communicate with the NVIDIA driver.' >&2\necho 'Make sure that the latest driver is installed.' >&2\nexit 9",
  );
  const detection = await detectGpuPool({ env: { PATH: smi.path } });
  assert.equal(detection.pool, undefined);
  assert.equal(detection.source, "nvidia-smi failed");
  assert.equal(
    detection.warning,
    "Cannot detect GPUs with nvidia-smi: it exited with code 9 (NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.); GPUs are not placed (give the pool with --gpus)",
  );
  assert.equal(
    gpuPoolLine(detection),
    "GPUs not placed (nvidia-smi failed): engines get no CUDA_VISIBLE_DEVICES from the launcher",
  );
});

Deno.test("nvidia-smi printing something other than distinct indices is a warning and no pool", async () => {
  const cases: [string, string][] = [
    [
      "echo 'No devices were found'",
      "it printed 'No devices were found' where a device index was expected",
    ],
    ["true", "it printed no device index"],
    ["printf '0\\n0\\n'", "it printed device index 0 twice"],
    [
      "printf '0, GPU-x\\n'",
      "it printed '0, GPU-x' where a device index was expected",
    ],
  ];
  for (const [body, detail] of cases) {
    await using smi = await standIn(body);
    const detection = await detectGpuPool({ env: { PATH: smi.path } });
    assert.equal(detection.pool, undefined, body);
    assert.equal(
      detection.warning,
      `Cannot detect GPUs with nvidia-smi: ${detail}; GPUs are not placed (give the pool with --gpus)`,
    );
  }
});

Deno.test("a hanging nvidia-smi is killed with what it started after the timeout: a warning and no pool", async () => {
  // The stand-in starts a child that would hold the output pipe open for 30 s.
  await using smi = await standIn("sleep 30 &\necho $! > '@DIR@/child'\nwait");
  // Killed at the timeout with its child: waiting for the pipe would take
  // the child's 30 s, which the guard fails.
  const detection = await withinGuard(
    detectGpuPool({ env: { PATH: smi.path }, timeoutMs: 300 }),
    "the detection",
  );
  assert.equal(detection.pool, undefined);
  assert.equal(
    detection.warning,
    "Cannot detect GPUs with nvidia-smi: no answer within 0.3 s (killed); GPUs are not placed (give the pool with --gpus)",
  );
  const child = Number((await Deno.readTextFile(`${smi.dir}/child`)).trim());
  assert.ok(child > 1);
  assert.ok(await gone(child), `sleep ${child} survived`);
});

/** True once `pid` is no process (or only a zombie) within a second. */
async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 20; i++) {
    try {
      const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) return true;
    } catch {
      return true;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

Deno.test("without nvidia-smi on PATH there is no pool and no warning", async () => {
  const empty = await Deno.makeTempDir({ prefix: "serve-nopath-" });
  try {
    const detection = await detectGpuPool({ env: { PATH: empty } });
    assert.deepEqual(detection, {
      pool: undefined,
      source: "no --gpus, no CUDA_VISIBLE_DEVICES and no nvidia-smi on PATH",
    });
    assert.equal(
      gpuPoolLine(detection),
      "GPUs not placed (no --gpus, no CUDA_VISIBLE_DEVICES and no nvidia-smi on PATH): engines get no CUDA_VISIBLE_DEVICES from the launcher",
    );
    // A file named nvidia-smi that is not executable does not count.
    await using smi = await standIn("echo 0", 0o644);
    assert.equal(
      (await detectGpuPool({ env: { PATH: smi.path } })).source,
      "no --gpus, no CUDA_VISIBLE_DEVICES and no nvidia-smi on PATH",
    );
    assert.deepEqual(await smi.calls(), []);
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
});
