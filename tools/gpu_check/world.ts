/**
 * The machine `gpu-check` runs on, real or stand-in, behind one shape: where
 * `nvidia-smi` and the engine are found (PATH), what the engine's card args
 * are for a behaviour, which pids hold memory on the checked GPU, and the
 * lines that describe the machine in the report.
 *
 * - real: the machine's `nvidia-smi`, and `tools/gpu_engine.py` (PyTorch,
 *   real memory) on PATH as `vllm`; it also sleeps and wakes as vLLM does, so
 *   it is the `sleeper` too.
 * - stand-in: the stand-in `nvidia-smi` (tests/fixtures/nvidia_smi.ts) over a
 *   ledger, and the stand-in engine (tests/fixtures/fake_engine.ts) as
 *   `vllm`, entering its MiB in the ledger; a dead pid stays listed for
 *   `releaseMs` after its exit. The `sleeper` is the vLLM stand-in
 *   (tests/fixtures/vllm_stand_in.ts), on the same ledger.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import {
  type GpuDevice,
  queryGpus,
  runNvidiaSmi,
} from "../../src/gpu/nvidia_smi.ts";
import {
  type FakeDevice,
  fakeDevices,
  type FakeGpuMachine,
  fakeGpuMachine,
} from "../../tests/support/fake_gpus.ts";
import { pathWith } from "../../tests/support/helpers.ts";

const PYTHON_ENGINE = fileURLToPath(
  new URL("../gpu_engine.py", import.meta.url),
);
const FAKE_ENGINE = fileURLToPath(
  new URL("../../tests/fixtures/fake_engine.ts", import.meta.url),
);
const VLLM_STAND_IN = fileURLToPath(
  new URL("../../tests/fixtures/vllm_stand_in.ts", import.meta.url),
);

/** What an engine does, whichever engine plays it. */
export interface EngineSpec {
  /** MiB it holds on its device. */
  readonly mib: number;
  /** 503 this long after it holds its memory, then 200. */
  readonly loadMs?: number;
  /** Exits with code 3 this long after it holds its memory. */
  readonly crashAfterMs?: number;
  /** Survives SIGTERM. */
  readonly ignoreSigterm?: boolean;
}

/** What an engine that sleeps as vLLM does (its dev routes, parking, `/load`) does. */
export interface SleeperSpec {
  /** MiB it holds on its device awake. */
  readonly mib: number;
  /** Tokens a request gets, one every `tokenMs`. */
  readonly tokens: number;
  readonly tokenMs: number;
}

/** An engine run's record (`<records>/<port>.json`), as either engine writes it. */
export interface EngineRecord {
  readonly pid: number;
  readonly startedAt: number;
  /** When it answers 200 (the Python engine says; for the stand-in, start + load). */
  readonly readyAt?: number;
  readonly env: { readonly CUDA_VISIBLE_DEVICES?: string | null };
  /** The Python engine: what PyTorch sees. */
  readonly devices?: {
    readonly count: number;
    readonly uuid?: string | null;
    readonly name?: string;
  };
}

/** The checked machine. */
export interface GpuWorld extends AsyncDisposable {
  readonly mode: "real" | "stand-in";
  /** The GPU the check uses. */
  readonly gpu: GpuDevice;
  /** Another GPU, where there is one: the packing scenario's second device. */
  readonly spare?: string;
  /** Directory first on PATH (the `vllm` wrapper; scenarios may add more). */
  readonly bin: string;
  /** Where engines write their records. */
  readonly records: string;
  /** A folder for the scenarios' root directories, removed with the world. */
  readonly work: string;
  /** Environment for the launcher, engines and `nvidia-smi`. */
  readonly env: Record<string, string>;
  /**
   * How long a dead engine's memory may stay listed after its exit before
   * the check calls it left behind: 60 s on a real GPU, the stand-in's
   * release time + 10 s.
   */
  readonly releaseBoundMs: number;
  /** Card args for a behaviour. */
  engineArgs(spec: EngineSpec): Record<string, number | boolean>;
  /** A vLLM build that sleeps and parks requests: an `engine: vllm` card's `executable`. */
  readonly sleeper: string;
  /** Its card args. */
  sleeperArgs(spec: SleeperSpec): Record<string, number>;
  /** Command line of an engine outside the launcher (a foreign process). */
  engineCommand(spec: EngineSpec): string[];
  /**
   * Stand-in only: how `nvidia-smi` answers from now on (`hostPids`: pids of
   * a container's host; `error`: the GPU's memory fields); `{}` restores it.
   */
  stage?(trouble: { hostPids?: boolean; error?: string }): Promise<void>;
  /** Pid → MiB listed on the checked GPU now; undefined when the query fails. */
  listed(): Promise<Map<number, number> | undefined>;
  /** The Machine section of the report. */
  describe(): Promise<string[]>;
}

/** Why there is no GPU to check, or undefined when there is one. */
export async function noGpu(): Promise<string | undefined> {
  const run = await runNvidiaSmi(["-L"], {
    env: Deno.env.toObject(),
    timeoutMs: 10_000,
  });
  if (!run.ok) {
    return run.reason === "absent"
      ? "nvidia-smi is not on PATH"
      : `nvidia-smi -L failed: ${run.detail}`;
  }
  return /^GPU \d+:/m.test(run.stdout)
    ? undefined
    : "nvidia-smi -L lists no GPU";
}

async function writeScript(path: string, body: string): Promise<void> {
  await Deno.writeTextFile(path, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
}

/**
 * A temp directory (`dir`, removed with the world) with `bin/`, `records/`
 * and `runs/`: the world's `bin`, `records` and `work`.
 */
async function workDirs(): Promise<
  { dir: string } & Pick<GpuWorld, "bin" | "records" | "work">
> {
  const dir = await Deno.makeTempDir({ prefix: "gpu-check-" });
  await Deno.mkdir(`${dir}/bin`);
  await Deno.mkdir(`${dir}/records`);
  await Deno.mkdir(`${dir}/runs`);
  return {
    dir,
    bin: `${dir}/bin`,
    records: `${dir}/records`,
    work: `${dir}/runs`,
  };
}

async function listedOn(
  uuid: string,
  env: Record<string, string>,
): Promise<Map<number, number> | undefined> {
  const query = await queryGpus({ env, timeoutMs: 10_000 });
  if (!query.ok) return undefined;
  const out = new Map<number, number>();
  for (const p of query.snapshot.processes) {
    if (p.gpuUuid === uuid) out.set(p.pid, (out.get(p.pid) ?? 0) + p.usedMiB);
  }
  return out;
}

/**
 * The real machine: its `nvidia-smi` and the Python engine.
 *
 * @param index The GPU to use (`nvidia-smi`'s index); the first when undefined.
 * @throws {Error} when `nvidia-smi` cannot be queried or has no such GPU.
 */
export async function realWorld(index?: string): Promise<GpuWorld> {
  const query = await queryGpus({
    env: Deno.env.toObject(),
    timeoutMs: 10_000,
  });
  if (!query.ok) throw new Error(query.error);
  const gpu = index === undefined
    ? query.snapshot.devices[0]
    : query.snapshot.devices.find((d) => d.index === index);
  if (!gpu) {
    throw new Error(
      `Cannot use GPU ${index}: nvidia-smi lists ${
        query.snapshot.devices.map((d) => d.index).join(", ")
      }`,
    );
  }
  const { dir, ...dirs } = await workDirs();
  await writeScript(
    `${dirs.bin}/vllm`,
    `exec python3 '${PYTHON_ENGINE}' "$@"`,
  );
  const env = {
    PATH: pathWith(dirs.bin),
    GPU_ENGINE_RECORD_DIR: dirs.records,
  };
  const spare = query.snapshot.devices.find((d) => d.index !== gpu.index);
  return {
    mode: "real",
    gpu,
    ...spare ? { spare: spare.index } : {},
    ...dirs,
    env,
    releaseBoundMs: 60_000,
    engineArgs: (spec) => ({
      "hold-mib": spec.mib,
      ...(spec.loadMs ? { "load-ms": spec.loadMs } : {}),
      ...(spec.crashAfterMs ? { "crash-after-ms": spec.crashAfterMs } : {}),
      ...(spec.ignoreSigterm ? { "ignore-sigterm": true } : {}),
    }),
    sleeper: `${dirs.bin}/vllm`,
    sleeperArgs: (spec) => ({
      "hold-mib": spec.mib,
      tokens: spec.tokens,
      "token-ms": spec.tokenMs,
    }),
    engineCommand: (spec) => [
      "python3",
      PYTHON_ENGINE,
      "--no-listen",
      "--hold-mib",
      String(spec.mib),
    ],
    listed: () => listedOn(gpu.uuid, env),
    describe: () => describeReal(env),
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

async function describeReal(env: Record<string, string>): Promise<string[]> {
  const lines: string[] = [];
  const ask = async (args: string[]) => {
    const run = await runNvidiaSmi(args, { env, timeoutMs: 10_000 });
    return run.ok ? run.stdout.trim() : `(failed: ${run.detail})`;
  };
  lines.push("`nvidia-smi -L`:", "", "```", await ask(["-L"]), "```", "");
  const driver = await ask([
    "--query-gpu=driver_version",
    "--format=csv,noheader",
  ]);
  const header = await ask([]);
  const cuda = /CUDA Version:\s*([\d.]+)/.exec(header)?.[1] ?? "not shown";
  lines.push(
    `- driver: ${driver.split("\n")[0]}; CUDA (driver's): ${cuda}`,
  );
  for (
    const args of [
      ["--query-gpu=index,uuid,memory.total,memory.used,name"],
      ["--query-compute-apps=pid,used_memory,gpu_uuid"],
    ]
  ) {
    const out = await ask([...args, "--format=csv,noheader,nounits"]);
    lines.push(
      `- \`${args[0]}\` as parsed, before the scenarios: ${
        out === ""
          ? "(empty)"
          : "`" + out.split("\n").slice(0, 4).join("` / `") + "`"
      }`,
    );
  }
  return lines;
}

/**
 * The stand-in machine: one fake 80 GiB GPU, the stand-in `nvidia-smi` and engine.
 *
 * @param releaseMs How long a dead pid stays listed after its exit.
 */
export async function standInWorld(releaseMs: number): Promise<GpuWorld> {
  const [device, second] = fakeDevices(2) as [FakeDevice, FakeDevice];
  const machine: FakeGpuMachine = await fakeGpuMachine({
    devices: [device, second],
    releaseMs,
  });
  const { dir, ...dirs } = await workDirs();
  await writeScript(
    `${dirs.bin}/vllm`,
    `exec '${Deno.execPath()}' run -A --quiet '${FAKE_ENGINE}' "$@"`,
  );
  await writeScript(
    `${dirs.bin}/vllm-sleeper`,
    `exec '${Deno.execPath()}' run -A --quiet '${VLLM_STAND_IN}' "$@"`,
  );
  const env = {
    PATH: pathWith(`${dirs.bin}:${machine.bin}`),
    FAKE_GPU_LEDGER: machine.ledger,
    FAKE_ENGINE_RECORD_DIR: dirs.records,
  };
  const gpu: GpuDevice = {
    index: device.index,
    uuid: device.uuid,
    totalMiB: device.totalMiB,
    usedMiB: 0,
    memoryKnown: true,
    name: "NVIDIA H100 80GB HBM3",
  };
  return {
    mode: "stand-in",
    gpu,
    spare: second.index,
    ...dirs,
    env,
    releaseBoundMs: releaseMs + 10_000,
    engineArgs: (spec) => ({
      "fake-gpu-mib": spec.mib,
      ...(spec.loadMs ? { "fake-load-ms": spec.loadMs } : {}),
      ...(spec.crashAfterMs
        ? { "fake-crash-after-ms": spec.crashAfterMs }
        : {}),
      ...(spec.ignoreSigterm ? { "fake-ignore-sigterm": true } : {}),
    }),
    sleeper: `${dirs.bin}/vllm-sleeper`,
    // Level 1 keeps 1 GiB; a 200 ms wake (the stand-in's own figure).
    sleeperArgs: (spec) => ({
      "fake-awake-mib": spec.mib,
      "fake-residue-mib": 1024,
      "fake-load-ms": 300,
      "fake-wake-ms": 200,
      "fake-tokens": spec.tokens,
      "fake-token-ms": spec.tokenMs,
    }),
    engineCommand: (spec) => [
      Deno.execPath(),
      "run",
      "-A",
      "--quiet",
      FAKE_ENGINE,
      "--port",
      "0",
      "--fake-gpu-mib",
      String(spec.mib),
    ],
    stage: (trouble) =>
      machine.setMachine({
        devices: [{
          ...device,
          ...(trouble.error ? { error: trouble.error } : {}),
        }, second],
        releaseMs,
        ...(trouble.hostPids ? { hostPids: true } : {}),
      }),
    listed: () => listedOn(gpu.uuid, env),
    describe: () =>
      Promise.resolve([
        "- **stand-in**: no GPU was used. `nvidia-smi` is the stand-in " +
        "(tests/fixtures/nvidia_smi.ts) answering from a ledger; the engine is " +
        "the stand-in (tests/fixtures/fake_engine.ts), entering its MiB there; " +
        "the vLLM cards' is the vLLM stand-in (tests/fixtures/vllm_stand_in.ts).",
        `- fake GPUs: index ${gpu.index}, ${gpu.uuid}, ${gpu.totalMiB} MiB (index ${second.index} only for llama-packing); ` +
        `a dead pid stays listed ${releaseMs} ms after its exit (a made-up figure, not a driver's)`,
      ]),
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
      await machine[Symbol.asyncDispose]();
    },
  };
}
