/**
 * `nvidia-smi`, the one door to the machine's GPU facts: the runner every
 * query goes through (own process group, killed with what it started after a
 * timeout, output capped), and {@linkcode queryGpus}, one look at the devices'
 * memory and the compute processes holding it. Pool detection (`detect.ts`)
 * runs its own query through the same runner.
 *
 * Nothing here throws for the machine's state: a missing binary, a refusal, a
 * failing driver, a hang or output it cannot read is a one-line reason.
 *
 * @module
 */
import { signalGroup } from "../engines/process_group.ts";
import { clip } from "../common/one_line.ts";
import { within } from "../common/sleep.ts";

/** One GPU as `nvidia-smi --query-gpu` lists it. */
export interface GpuDevice {
  /** The index `nvidia-smi` gives it (PCI bus order), e.g. `"3"`. */
  readonly index: string;
  /** `GPU-<uuid>`. */
  readonly uuid: string;
  /** Memory in MiB; `NaN` when {@linkcode GpuDevice.memoryKnown} is false. */
  readonly totalMiB: number;
  /** Memory used, by anyone, in MiB; `NaN` when {@linkcode GpuDevice.memoryKnown} is false. */
  readonly usedMiB: number;
  /**
   * False when `nvidia-smi` reports the memory as `[N/A]` or
   * `[Not Supported]` (some unified-memory boards do): the device is listed,
   * but rules needing its memory facts must skip it. `NaN` in the two fields
   * makes every comparison with them false, so a forgotten check errs towards
   * "no fact", not towards a made-up zero.
   */
  readonly memoryKnown: boolean;
  /**
   * `nvidia-smi`'s words where a memory field reads as an error (`ERR!`,
   * `[GPU requires reset]`, `[Unknown Error]`, `[GPU is lost]`: a device
   * after an Xid error); then `memoryKnown` is false and nothing is started
   * there until it reports memory again.
   */
  readonly error?: string;
}

/** One compute process as `nvidia-smi --query-compute-apps` lists it: one entry per device it uses. */
export interface GpuProcess {
  /**
   * Its pid as the driver sees it: in a container that cannot see the host's
   * pids, a number that may match no process here.
   */
  readonly pid: number;
  /** MiB it holds on this device; 0 when `nvidia-smi` reports `[N/A]` (not known). */
  readonly usedMiB: number;
  /** The device's `GPU-<uuid>`. */
  readonly gpuUuid: string;
}

/** What one {@linkcode queryGpus} saw. */
export interface GpuSnapshot {
  /** The devices, in `nvidia-smi`'s order. */
  readonly devices: readonly GpuDevice[];
  /** The compute processes, one entry per process and device. */
  readonly processes: readonly GpuProcess[];
  /** `Date.now()` when both answers were in. */
  readonly at: number;
}

/** The outcome of {@linkcode queryGpus}. */
export type GpuQuery =
  | { readonly ok: true; readonly snapshot: GpuSnapshot }
  | {
    readonly ok: false;
    /** One line naming what failed, e.g. `nvidia-smi --query-gpu: it exited with code 9 (…)`. */
    readonly error: string;
    /** True when no `nvidia-smi` is on PATH: a steady state, worth re-checking only rarely. */
    readonly absent?: boolean;
  };

/** How `nvidia-smi` is found and how long it may take. */
export interface QueryGpusOptions {
  /**
   * The environment `nvidia-smi` runs with (its `PATH` finds it), merged
   * over this process's own.
   */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** How long each run may take before it is killed. @default {5000} */
  readonly timeoutMs?: number;
}

/** What one run of `nvidia-smi` gave. */
export type NvidiaSmiRun =
  | { readonly ok: true; readonly stdout: string }
  | {
    readonly ok: false;
    /**
     * `absent`: not on PATH. `unsure`: not found, and PATH could not be read
     * (under a narrowed `--allow-read`), or not in `--allow-run`: Deno cannot
     * tell these apart. `failed`: it ran (or could not be run) and did not answer.
     */
    readonly reason: "absent" | "unsure" | "failed";
    /** One line, e.g. `it exited with code 9 (Failed to initialize NVML)`. */
    readonly detail: string;
  };

const NVIDIA_SMI = "nvidia-smi";
const DEVICE_ARGS = [
  "--query-gpu=index,uuid,memory.total,memory.used",
  "--format=csv,noheader,nounits",
];
const PROCESS_ARGS = [
  "--query-compute-apps=pid,used_memory,gpu_uuid",
  "--format=csv,noheader,nounits",
];
/** `nvidia-smi` output kept; more is a failure (a cut line would read as a fact). */
const OUTPUT_CAP = 64 * 1024;
/** After a kill, how long to wait for the process and its pipes before giving up on them. */
const REAP_MS = 1000;

/**
 * Runs `nvidia-smi` once with `args`, in its own process group; after
 * `timeoutMs` the group (the program and whatever it started) is killed.
 * Output is kept up to 64 KiB; more is a failure. Never throws.
 *
 * @param args The arguments, e.g. `["--query-gpu=index", "--format=csv,noheader"]`.
 * @param options The environment (its `PATH` finds the program) and the timeout.
 * @returns Its standard output when it exited with 0, else why not.
 *
 * @example
 * ```ts ignore
 * const run = await runNvidiaSmi(["--query-gpu=index", "--format=csv,noheader"]);
 * if (run.ok) console.log(run.stdout);
 * ```
 */
export async function runNvidiaSmi(
  args: readonly string[],
  options: QueryGpusOptions,
): Promise<NvidiaSmiRun> {
  const env = definedOnly(options.env);
  const timeoutMs = options.timeoutMs ?? 5000;
  const found = findOnPath(
    NVIDIA_SMI,
    env["PATH"],
  );
  if (found === false) {
    return { ok: false, reason: "absent", detail: "not found on PATH" };
  }
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(NVIDIA_SMI, {
      args: [...args],
      env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      // Its own group, so a timeout kills whatever it started too.
      detached: true,
    }).spawn();
  } catch (error) {
    // Under a narrowed --allow-run, a program missing from PATH at start-up is "not capable".
    // (Deno cannot tell that apart from a program left out of the list.)
    if (error instanceof Deno.errors.NotFound) {
      return { ok: false, reason: "absent", detail: "not found on PATH" };
    }
    if (found === undefined && error instanceof Deno.errors.NotCapable) {
      return {
        ok: false,
        reason: "unsure",
        detail: "not found on PATH, or not allowed by --allow-run",
      };
    }
    return {
      ok: false,
      reason: "failed",
      detail: error instanceof Deno.errors.NotCapable
        ? "not allowed to run it (add nvidia-smi to --allow-run)"
        : `cannot run it (${clip((error as Error).message)})`,
    };
  }
  const stdout = drain(child.stdout);
  const stderr = drain(child.stderr);
  const all = Promise.all([child.status, stdout.text, stderr.text]);
  const done = await within(all, timeoutMs);
  if (done === undefined) {
    try {
      signalGroup(child.pid, "SIGKILL");
    } catch {
      // Already gone.
    }
    if (await within(all, REAP_MS) === undefined) {
      // Stuck in the kernel (a hung driver): stop reading and move on.
      stdout.cancel();
      stderr.cancel();
      child.unref();
    }
    return {
      ok: false,
      reason: "failed",
      detail: `no answer within ${timeoutMs / 1000} s (killed)`,
    };
  }
  const [status, out, err] = done;
  if (!status.success) {
    const firstLine = err.text.trim().split(/\r?\n/)[0]?.trim() ||
      out.text.trim().split(/\r?\n/)[0]?.trim();
    return {
      ok: false,
      reason: "failed",
      detail: `it ${
        status.signal
          ? `died of ${status.signal}`
          : `exited with code ${status.code}`
      }${firstLine ? ` (${clip(firstLine)})` : ""}`,
    };
  }
  if (out.truncated) {
    return {
      ok: false,
      reason: "failed",
      detail: `it printed more than ${OUTPUT_CAP / 1024} KiB`,
    };
  }
  return { ok: true, stdout: out.text };
}

/**
 * One look at the machine's GPUs: `nvidia-smi --query-gpu=index,uuid,memory.total,memory.used`
 * and `--query-compute-apps=pid,used_memory,gpu_uuid` (both `--format=csv,noheader,nounits`),
 * run at the same time through {@linkcode runNvidiaSmi}.
 *
 * Reading: fields are trimmed and blank lines skipped. A device's memory
 * given as `[N/A]`, `[Not Supported]` or any other bracketed word makes it
 * `memoryKnown: false` (with `NaN` values); a process's memory given so is 0.
 * Any other line that does not read (a wrong field count, an index or pid
 * that is not a number, a uuid that is not `GPU-…`) fails the whole query:
 * half-read facts are worse than none. A compute-apps answer of
 * `No running processes found` (older drivers) is no process.
 *
 * @param options The environment (its `PATH` finds `nvidia-smi`) and the timeout of each run.
 * @returns The snapshot, or `ok: false` with one line naming the query and
 *   what failed (`absent: true` when no `nvidia-smi` is on PATH). Never throws.
 *
 * @example
 * ```ts ignore
 * const query = await queryGpus({ timeoutMs: 2000 });
 * if (query.ok) for (const d of query.snapshot.devices) console.log(d.index, d.usedMiB);
 * else log.warn(query.error);
 * ```
 */
export async function queryGpus(
  options: QueryGpusOptions,
): Promise<GpuQuery> {
  const [devices, processes] = await Promise.all([
    runNvidiaSmi(DEVICE_ARGS, options),
    runNvidiaSmi(PROCESS_ARGS, options),
  ]);
  if (!devices.ok) return failure(devices, DEVICE_ARGS);
  if (!processes.ok) return failure(processes, PROCESS_ARGS);
  const parsedDevices = parseDevices(devices.stdout);
  if (typeof parsedDevices === "string") {
    return { ok: false, error: `${queryName(DEVICE_ARGS)}: ${parsedDevices}` };
  }
  const parsedProcesses = parseProcesses(processes.stdout);
  if (typeof parsedProcesses === "string") {
    return {
      ok: false,
      error: `${queryName(PROCESS_ARGS)}: ${parsedProcesses}`,
    };
  }
  return {
    ok: true,
    snapshot: {
      devices: parsedDevices,
      processes: parsedProcesses,
      at: Date.now(),
    },
  };
}

/**
 * The device a pool entry names, as `CUDA_VISIBLE_DEVICES` would read it: an
 * index (`"3"`, `"03"`), or `GPU-<uuid>`, whole or a prefix naming exactly
 * one device (CUDA accepts unique prefixes), case-insensitive.
 *
 * @param entry A pool entry, e.g. `"3"` or `"GPU-8e1c0a2b"`.
 * @param snapshot What {@linkcode queryGpus} saw.
 * @returns The device; `undefined` for a `MIG-…` entry (its memory is not a
 *   device's), an ambiguous prefix, or an entry naming no listed device.
 *
 * @example
 * ```ts ignore
 * const device = deviceOf("GPU-8e1c0a2b", snapshot);
 * if (device?.memoryKnown) console.log(device.totalMiB - device.usedMiB, "MiB free");
 * ```
 */
export function deviceOf(
  entry: string,
  snapshot: GpuSnapshot,
): GpuDevice | undefined {
  const name = entry.trim();
  if (/^\d+$/.test(name)) {
    const index = String(Number(name));
    return snapshot.devices.find((device) => device.index === index);
  }
  if (!/^GPU-./i.test(name)) return undefined;
  const wanted = name.toLowerCase();
  const exact = snapshot.devices.find((device) =>
    device.uuid.toLowerCase() === wanted
  );
  if (exact) return exact;
  const prefixed = snapshot.devices.filter((device) =>
    device.uuid.toLowerCase().startsWith(wanted)
  );
  return prefixed.length === 1 ? prefixed[0] : undefined;
}

function failure(
  run: NvidiaSmiRun & { ok: false },
  args: readonly string[],
): GpuQuery {
  return run.reason === "absent"
    ? { ok: false, error: `${NVIDIA_SMI}: ${run.detail}`, absent: true }
    : { ok: false, error: `${queryName(args)}: ${run.detail}` };
}

/** `nvidia-smi --query-gpu` from `--query-gpu=index,…`, to name a query in one line. */
function queryName(args: readonly string[]): string {
  return `${NVIDIA_SMI} ${args[0]!.replace(/=.*$/, "")}`;
}

function parseDevices(text: string): GpuDevice[] | string {
  const devices: GpuDevice[] = [];
  for (const line of lines(text)) {
    const fields = line.split(",").map((field) => field.trim());
    const [index, uuid, total, used] = fields;
    if (
      fields.length !== 4 || !/^\d+$/.test(index!) || !isUuid(uuid!)
    ) {
      return unreadable(line, "index, GPU-<uuid>, total MiB, used MiB");
    }
    const totalMiB = mib(total!);
    const usedMiB = mib(used!);
    if (totalMiB === undefined || usedMiB === undefined) {
      return unreadable(line, "memory in MiB or [N/A]");
    }
    const memoryKnown = totalMiB !== "unknown" && usedMiB !== "unknown";
    if (
      devices.some((d) => d.index === String(Number(index)) || d.uuid === uuid)
    ) {
      return `it listed GPU ${index} (${uuid}) twice`;
    }
    const error = [total!, used!].find(isError);
    devices.push({
      ...(error === undefined ? {} : { error }),
      index: String(Number(index)),
      uuid: uuid!,
      totalMiB: memoryKnown ? totalMiB : NaN,
      usedMiB: memoryKnown ? usedMiB : NaN,
      memoryKnown,
    });
  }
  return devices.length === 0 ? "it listed no device" : devices;
}

function parseProcesses(text: string): GpuProcess[] | string {
  const processes: GpuProcess[] = [];
  for (const line of lines(text)) {
    if (/^no running processes found$/i.test(line)) continue;
    const fields = line.split(",").map((field) => field.trim());
    const [pid, used, uuid] = fields;
    const usedMiB = fields.length === 3 ? mib(used!) : undefined;
    if (
      fields.length !== 3 || !/^\d+$/.test(pid!) || !isUuid(uuid!) ||
      usedMiB === undefined
    ) {
      return unreadable(line, "pid, used MiB or [N/A], GPU-<uuid>");
    }
    processes.push({
      pid: Number(pid),
      usedMiB: usedMiB === "unknown" ? 0 : usedMiB,
      gpuUuid: uuid!,
    });
  }
  return processes;
}

function lines(text: string): string[] {
  return text.split(/\r?\n/).map((line) => line.trim()).filter(Boolean);
}

function isUuid(text: string): boolean {
  return /^GPU-[A-Za-z0-9-]+$/.test(text);
}

/** A memory field that reads as a device error rather than as a missing figure (`[N/A]`). */
function isError(text: string): boolean {
  return text === "ERR!" ||
    /^\[(?:GPU requires reset|Unknown Error|GPU is lost)\]$/i.test(text);
}

/** MiB as a number, `"unknown"` for `[N/A]`-like words, undefined for anything else. */
function mib(text: string): number | "unknown" | undefined {
  if (/^\[[^\]]*\]$/.test(text) || /^(?:n\/a|ERR!)$/i.test(text)) {
    return "unknown";
  }
  if (!/^\d+(?:\.\d+)?$/.test(text)) return undefined;
  return Number(text);
}

function unreadable(line: string, expected: string): string {
  return `it printed '${clip(line)}' (expected ${expected})`;
}

function definedOnly(
  env: Readonly<Record<string, string | undefined>>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) {
    if (value !== undefined) out[key] = value;
  }
  return out;
}

/**
 * Whether an executable `name` is on `path`: true, false, or undefined when
 * it cannot be told (no read access to PATH; the spawn then decides).
 */
function findOnPath(
  name: string,
  path: string | undefined,
): boolean | undefined {
  let unsure = false;
  for (const dir of (path ?? "").split(":").filter(Boolean)) {
    try {
      const info = Deno.statSync(`${dir}/${name}`);
      if (info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0) return true;
    } catch (error) {
      if (error instanceof Deno.errors.NotCapable) unsure = true;
    }
  }
  return unsure ? undefined : false;
}

/** Reads a stream to its end, keeping at most {@linkcode OUTPUT_CAP} bytes as text. */
function drain(
  stream: ReadableStream<Uint8Array>,
): { text: Promise<{ text: string; truncated: boolean }>; cancel(): void } {
  const reader = stream.getReader();
  async function read(): Promise<{ text: string; truncated: boolean }> {
    const chunks: Uint8Array[] = [];
    let kept = 0;
    let truncated = false;
    try {
      while (true) {
        const { done, value } = await reader.read();
        if (done) break;
        if (kept + value.length > OUTPUT_CAP) truncated = true;
        if (kept < OUTPUT_CAP) {
          const part = value.subarray(0, OUTPUT_CAP - kept);
          chunks.push(part);
          kept += part.length;
        }
      }
    } catch {
      // Cancelled or broken: what was read is all there is.
    } finally {
      reader.releaseLock();
    }
    const bytes = new Uint8Array(kept);
    let at = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, at);
      at += chunk.length;
    }
    return { text: new TextDecoder().decode(bytes), truncated };
  }
  return {
    text: read(),
    cancel() {
      reader.cancel().catch(() => {});
    },
  };
}
