/**
 * A fake GPU machine for tests: a bin directory whose `nvidia-smi` runs the
 * stand-in (tests/fixtures/nvidia_smi.ts) with the current Deno, and the
 * ledger it answers from. Stand-in engines started with `--fake-gpu-mib N`
 * and `FAKE_GPU_LEDGER` in their environment enter themselves in it.
 *
 * ```ts ignore
 * await using gpus = await fakeGpuMachine({ devices: fakeDevices(2), releaseMs: 500 });
 * const query = await queryGpus({ env: gpus.env });
 * // or, through the launcher:
 * launch(["m"], { bin: { "nvidia-smi": nvidiaSmiScript() }, env: { FAKE_GPU_LEDGER: gpus.ledger } });
 * ```
 */

const STAND_IN = new URL("../fixtures/nvidia_smi.ts", import.meta.url)
  .pathname;

/** One device of the fake machine. */
export interface FakeDevice {
  index: string;
  /** `GPU-<uuid>`. */
  uuid: string;
  totalMiB: number;
  /** Print `[N/A]` for its memory, as unified-memory boards do. */
  memoryNA?: boolean;
  /** Print this in its memory fields, as a GPU after an Xid error does: `ERR!`, `[GPU requires reset]`. */
  error?: string;
}

/** `<ledger>/devices.json`. */
export interface FakeMachine {
  devices: FakeDevice[];
  /** How long a dead engine stays listed after the stand-in first sees it gone. */
  releaseMs?: number;
  /** Every query fails: an NVML error on stderr, exit code 9. */
  fail?: boolean;
  /** Every query hangs until killed. */
  hang?: boolean;
  /** List host pids (pid + 7000000, matching no process here), as NVML does in a container. */
  hostPids?: boolean;
  /** Print a line no nvidia-smi prints. */
  garbage?: boolean;
  /** List the first device twice. */
  duplicate?: boolean;
}

/** `<ledger>/foreign/<name>.json`: another user's process. */
export interface FakeForeign {
  pid: number;
  /** The device: index or uuid. */
  gpu: string;
  mib: number;
}

/** `<ledger>/procs/<pid>.json` as a stand-in engine wrote it. */
export interface FakeProc {
  pid: number;
  gpus: string[];
  mib: number;
  /** When the stand-in `nvidia-smi` first saw the pid gone. */
  goneAt?: number;
}

/** `count` devices of 80 GiB, indices from 0, uuids `GPU-00000000-0000-0000-0000-00000000000<i>`. */
export function fakeDevices(count: number, totalMiB = 81920): FakeDevice[] {
  const devices: FakeDevice[] = [];
  for (let i = 0; i < count; i++) {
    devices.push({
      index: String(i),
      uuid: `GPU-00000000-0000-0000-0000-${String(i).padStart(12, "0")}`,
      totalMiB,
    });
  }
  return devices;
}

/** The `nvidia-smi` wrapper script running the stand-in with the current Deno. */
export function nvidiaSmiScript(): string {
  return `#!/bin/sh\nexec '${Deno.execPath()}' run -A --quiet '${STAND_IN}' "$@"\n`;
}

async function writeJson(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.tmp`;
  await Deno.writeTextFile(tmp, JSON.stringify(value));
  await Deno.rename(tmp, path);
}

/** Writes `<ledger>/devices.json` atomically. */
export async function writeMachine(
  ledger: string,
  machine: FakeMachine,
): Promise<void> {
  await writeJson(`${ledger}/devices.json`, machine);
}

/** Writes `<ledger>/foreign/<name>.json` atomically: a foreign process, listed until removed. */
export async function writeForeign(
  ledger: string,
  name: string,
  foreign: FakeForeign,
): Promise<void> {
  await Deno.mkdir(`${ledger}/foreign`, { recursive: true });
  await writeJson(`${ledger}/foreign/${name}.json`, foreign);
}

/** Removes `<ledger>/foreign/<name>.json`. */
export async function removeForeign(
  ledger: string,
  name: string,
): Promise<void> {
  await Deno.remove(`${ledger}/foreign/${name}.json`);
}

/** A temp directory with `bin/nvidia-smi` and `ledger/`, removed on dispose. */
export class FakeGpuMachine implements AsyncDisposable {
  /** The temp directory holding both. */
  readonly dir: string;
  /** The directory holding the `nvidia-smi` wrapper. */
  readonly bin: string;
  /** The ledger directory (`FAKE_GPU_LEDGER`). */
  readonly ledger: string;

  constructor(dir: string) {
    this.dir = dir;
    this.bin = `${dir}/bin`;
    this.ledger = `${dir}/ledger`;
  }

  /** PATH with the wrapper first, then this process's PATH. */
  get path(): string {
    return `${this.bin}:${Deno.env.get("PATH") ?? ""}`;
  }

  /** `PATH` and `FAKE_GPU_LEDGER` for `nvidia-smi` (and for stand-in engines). */
  get env(): Record<string, string> {
    return { PATH: this.path, FAKE_GPU_LEDGER: this.ledger };
  }

  /** Replaces `devices.json`. */
  async setMachine(machine: FakeMachine): Promise<void> {
    await writeMachine(this.ledger, machine);
  }

  /** Adds (or replaces) a foreign process. */
  async addForeign(name: string, foreign: FakeForeign): Promise<void> {
    await writeForeign(this.ledger, name, foreign);
  }

  /** Removes a foreign process. */
  async removeForeign(name: string): Promise<void> {
    await removeForeign(this.ledger, name);
  }

  /** The engines' entries (`procs/*.json`) by pid. */
  async procs(): Promise<Map<number, FakeProc>> {
    const out = new Map<number, FakeProc>();
    try {
      for await (const entry of Deno.readDir(`${this.ledger}/procs`)) {
        if (!entry.name.endsWith(".json")) continue;
        try {
          const proc = JSON.parse(
            await Deno.readTextFile(`${this.ledger}/procs/${entry.name}`),
          ) as FakeProc;
          out.set(proc.pid, proc);
        } catch {
          // Removed meanwhile by the stand-in.
        }
      }
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
    return out;
  }

  /** The stand-in's calls so far: its pid and arguments, one a run. */
  async calls(): Promise<{ pid: number; args: string[] }[]> {
    try {
      return (await Deno.readTextFile(`${this.ledger}/calls`)).trim().split(
        "\n",
      ).filter(Boolean).map((line) => JSON.parse(line));
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return [];
      throw error;
    }
  }

  /**
   * Pids of live processes (zombies left out) whose environment names this
   * ledger: stand-in `nvidia-smi` runs and engines still around.
   */
  processes(): Promise<number[]> {
    return processesWithEnv(`FAKE_GPU_LEDGER=${this.ledger}`);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    // A stand-in nvidia-smi asked just before its launcher stopped may still
    // append its call: wait for it (bounded), then remove.
    for (let i = 0; i < 50 && (await this.processes()).length > 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await Deno.remove(this.dir, { recursive: true }).catch(async () => {
      await new Promise((resolve) => setTimeout(resolve, 200));
      await Deno.remove(this.dir, { recursive: true });
    });
  }
}

/**
 * Pids of live processes (zombies left out) whose environment holds the
 * entry `entry` (`NAME=value`, whole): what a test's processes left running.
 */
export async function processesWithEnv(entry: string): Promise<number[]> {
  const needle = new TextEncoder().encode(`${entry}\0`);
  const out: number[] = [];
  for await (const proc of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(proc.name)) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${proc.name}/stat`);
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
      const environ = await Deno.readFile(`/proc/${proc.name}/environ`);
      if (contains(environ, needle)) out.push(Number(proc.name));
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return out;
}

function contains(haystack: Uint8Array, needle: Uint8Array): boolean {
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) {
      if (haystack[i + j] !== needle[j]) continue outer;
    }
    return true;
  }
  return false;
}

/**
 * A fake GPU machine: `bin/nvidia-smi` (the stand-in) and a ledger holding
 * `machine` (no `devices.json` when left out: "No devices were found"); made
 * in `dir` when given, else in the system's temp folder.
 */
export async function fakeGpuMachine(
  machine?: FakeMachine,
  dir?: string,
): Promise<FakeGpuMachine> {
  const fake = new FakeGpuMachine(
    await Deno.makeTempDir({
      prefix: "serve-gpus-",
      ...(dir === undefined ? {} : { dir }),
    }),
  );
  await Deno.mkdir(fake.bin);
  await Deno.mkdir(`${fake.ledger}/procs`, { recursive: true });
  await Deno.mkdir(`${fake.ledger}/foreign`);
  await Deno.writeTextFile(`${fake.bin}/nvidia-smi`, nvidiaSmiScript(), {
    mode: 0o755,
  });
  if (machine) await fake.setMachine(machine);
  return fake;
}
