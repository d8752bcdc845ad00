// `nvidia-smi`, the one door to the machine's GPU facts. Nothing here throws
// for the machine's state: a missing binary, a refusal, a failing driver, a
// hang or output it cannot read is a one-line reason.
import { runHelper } from "../engines/helper_run.ts";
import { locateExecutable } from "../engines/launch.ts";
import { clip } from "../common/one_line.ts";
import { FailureRun } from "../common/log_throttle.ts";

export interface GpuDevice {
  readonly index: string;
  readonly uuid: string;
  // NaN when memory is unknown (`[N/A]`, `[Not Supported]` on some
  // unified-memory boards): every comparison with NaN is false, so a
  // forgotten `memoryKnown` check errs towards "no fact", not a made-up zero.
  readonly totalMiB: number;
  readonly usedMiB: number;
  readonly memoryKnown: boolean;
  /** Its product name (`NVIDIA H200`), where nvidia-smi gave one: the footprint book's device. */
  readonly name?: string;
  /** `ERR!`, `[GPU requires reset]` … (after an Xid error): nothing starts there until it reports memory again. */
  readonly error?: string;
}

interface GpuProcess {
  /** As the driver sees it: in a container, maybe no process here. */
  readonly pid: number;
  readonly usedMiB: number;
  readonly gpuUuid: string;
}

export interface GpuSnapshot {
  readonly devices: readonly GpuDevice[];
  readonly processes: readonly GpuProcess[];
  readonly at: number;
}

export type GpuQuery =
  | { readonly ok: true; readonly snapshot: GpuSnapshot }
  | {
    readonly ok: false;
    readonly error: string;
    /** No `nvidia-smi` on PATH: a steady state, worth re-checking only rarely. */
    readonly absent?: boolean;
  };

export interface QueryGpusOptions {
  readonly env: Readonly<Record<string, string>>;
  readonly timeoutMs?: number;
}

export type NvidiaSmiRun =
  | { readonly ok: true; readonly stdout: string }
  | {
    readonly ok: false;
    // `unsure`: not found, and PATH could not be read (narrowed --allow-read),
    // or not in --allow-run: Deno cannot tell these apart.
    readonly reason: "absent" | "unsure" | "failed";
    readonly detail: string;
  };

const NVIDIA_SMI = "nvidia-smi";
const CSV = "--format=csv,noheader,nounits";
// The name last: it may hold commas.
const DEVICE_ARGS = [
  "--query-gpu=index,uuid,memory.total,memory.used,name",
  CSV,
];
const PROCESS_ARGS = ["--query-compute-apps=pid,used_memory,gpu_uuid", CSV];
// More output is a failure: a cut line would read as a fact.
const CAP = 64 * 1024;

/** Runs `nvidia-smi` once, killed with what it started after the timeout (5 s); never throws. */
export async function runNvidiaSmi(
  args: readonly string[],
  options: QueryGpusOptions,
): Promise<NvidiaSmiRun> {
  const env = { ...options.env };
  const timeoutMs = options.timeoutMs ?? 5000;
  const found = locateExecutable(NVIDIA_SMI, env.PATH);
  const absent = failed("not found on PATH", "absent");
  if (!found.found) return absent;
  let run;
  try {
    run = await runHelper(NVIDIA_SMI, args, { env, timeoutMs, cap: CAP });
  } catch (error) {
    // Under a narrowed --allow-run, a program missing from PATH at start-up is "not capable".
    if (error instanceof Deno.errors.NotFound) return absent;
    if (!(error instanceof Deno.errors.NotCapable)) {
      return failed(`cannot run it (${clip((error as Error).message)})`);
    }
    return found.unsure
      ? failed("not found on PATH, or not allowed by --allow-run", "unsure")
      : failed("not allowed to run it (add nvidia-smi to --allow-run)");
  }
  if (run === "timeout") {
    return failed(`no answer within ${timeoutMs / 1000} s (killed)`);
  }
  const { status, stdout, stderr } = run;
  if (!status.success) {
    const firstLine = lines(stderr)[0] ?? lines(stdout)[0];
    const end = status.signal
      ? `died of ${status.signal}`
      : `exited with code ${status.code}`;
    return failed(`it ${end}${firstLine ? ` (${clip(firstLine)})` : ""}`);
  }
  if (run.truncated) return failed(`it printed more than ${CAP / 1024} KiB`);
  return { ok: true, stdout };
}

function failed(
  detail: string,
  reason: "absent" | "unsure" | "failed" = "failed",
): NvidiaSmiRun {
  return { ok: false, reason, detail };
}

// A line that does not read fails the whole query: half-read facts are worse than none.
export async function queryGpus(
  options: QueryGpusOptions,
): Promise<GpuQuery> {
  const [devices, processes] = await Promise.all([
    read(DEVICE_ARGS, parseDevices, options),
    read(PROCESS_ARGS, parseProcesses, options),
  ]);
  if (!Array.isArray(devices)) return devices;
  if (!Array.isArray(processes)) return processes;
  return { ok: true, snapshot: { devices, processes, at: Date.now() } };
}

async function read<T>(
  args: readonly string[],
  parse: (stdout: string) => T[] | string,
  options: QueryGpusOptions,
): Promise<T[] | GpuQuery & { ok: false }> {
  const run = await runNvidiaSmi(args, options);
  if (!run.ok && run.reason === "absent") {
    return { ok: false, error: `${NVIDIA_SMI}: ${run.detail}`, absent: true };
  }
  const parsed = run.ok ? parse(run.stdout) : run.detail;
  if (typeof parsed !== "string") return parsed;
  const query = args[0]!.replace(/=.*$/, "");
  return { ok: false, error: `${NVIDIA_SMI} ${query}: ${parsed}` };
}

// As CUDA_VISIBLE_DEVICES reads an entry: an index, or a `GPU-<uuid>` or its
// unique prefix. `MIG-…` is no device: its memory is not a device's.
export function deviceOf(
  entry: string,
  snapshot: GpuSnapshot,
): GpuDevice | undefined {
  const name = entry.trim();
  if (/^\d+$/.test(name)) {
    return snapshot.devices.find((d) => d.index === String(Number(name)));
  }
  if (!/^GPU-./i.test(name)) return undefined;
  const wanted = name.toLowerCase();
  const prefixed = snapshot.devices.filter((d) =>
    d.uuid.toLowerCase().startsWith(wanted)
  );
  return prefixed.find((d) => d.uuid.toLowerCase() === wanted) ??
    (prefixed.length === 1 ? prefixed[0] : undefined);
}

export function usedOn(
  entries: readonly string[],
  snapshot: GpuSnapshot | undefined,
): Record<string, number> {
  const used: Record<string, number> = {};
  for (const entry of entries) {
    const device = snapshot && deviceOf(entry, snapshot);
    if (device?.memoryKnown) used[entry] = device.usedMiB;
  }
  return used;
}

function parseDevices(text: string): GpuDevice[] | string {
  const devices: GpuDevice[] = [];
  for (const line of lines(text)) {
    const fields = line.split(",").map((field) => field.trim());
    const [number, uuid, total, used] = fields;
    const name = fields.slice(4).join(", ");
    if (fields.length < 4 || !/^\d+$/.test(number!) || !isUuid(uuid!)) {
      return unreadable(line, "index, GPU-<uuid>, total MiB, used MiB, name");
    }
    const [totalMiB, usedMiB] = [mib(total!), mib(used!)];
    if (totalMiB === undefined || usedMiB === undefined) {
      return unreadable(line, "memory in MiB or [N/A]");
    }
    const index = String(Number(number));
    if (devices.some((d) => d.index === index || d.uuid === uuid)) {
      return `it listed GPU ${number} (${uuid}) twice`;
    }
    const memoryKnown = !Number.isNaN(totalMiB + usedMiB);
    const error = [total!, used!].find(isError);
    devices.push({
      ...(error === undefined ? {} : { error }),
      ...(name ? { name } : {}),
      index,
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
    // Older drivers say so instead of printing nothing.
    if (/^no running processes found$/i.test(line)) continue;
    const fields = line.split(",").map((field) => field.trim());
    const [pid, used, uuid] = fields;
    const usedMiB = fields.length === 3 ? mib(used!) : undefined;
    if (usedMiB === undefined || !/^\d+$/.test(pid!) || !isUuid(uuid!)) {
      return unreadable(line, "pid, used MiB or [N/A], GPU-<uuid>");
    }
    processes.push({
      pid: Number(pid),
      usedMiB: Number.isNaN(usedMiB) ? 0 : usedMiB,
      gpuUuid: uuid!,
    });
  }
  return processes;
}

export function lines(text: string): string[] {
  return text.split(/\r?\n/).map((line) => line.trim()).filter(Boolean);
}

function isUuid(text: string): boolean {
  return /^GPU-[A-Za-z0-9-]+$/.test(text);
}

// A memory field that reads as a device error rather than as a missing figure (`[N/A]`).
function isError(text: string): boolean {
  return text === "ERR!" ||
    /^\[(?:GPU requires reset|Unknown Error|GPU is lost)\]$/i.test(text);
}

/** NaN for a figure the device does not give (`[N/A]`, `ERR!`); undefined when unreadable. */
function mib(text: string): number | undefined {
  if (/^\[[^\]]*\]$/.test(text) || /^(?:n\/a|ERR!)$/i.test(text)) return NaN;
  return /^\d+(?:\.\d+)?$/.test(text) ? Number(text) : undefined;
}

function unreadable(line: string, expected: string): string {
  return `it printed '${clip(line)}' (expected ${expected})`;
}

// The launcher's GPU facts: one query per interval and one in flight, whatever
// the number of callers (the start gate, the memory rounds).
const FIRST_BACKOFF_MS = 1000;

interface Answer {
  readonly snapshot: GpuSnapshot | undefined;
  readonly came: number;
  readonly backoffMs: number;
  readonly mark: number;
}

// Failures are cached too, so that a failing or hanging `nvidia-smi` is not
// run once a call: 1 s, 2 s, 4 s… up to `maxBackoffMs` (at once without one on
// PATH), even past a mark, since an event does not mend `nvidia-smi`.
export class GpuMonitor {
  #options: QueryGpusOptions;
  #query: (options: QueryGpusOptions) => Promise<GpuQuery>;
  #maxBackoffMs: number;
  #now: () => number;
  #latest: Answer | undefined;
  #inFlight:
    | { answer: Promise<GpuSnapshot | undefined>; mark: number }
    | undefined;
  #marks = 0;
  #queries = 0;
  #failures = new FailureRun("query GPUs", "warn");
  #next: { mark: number; resolve: (snapshot: GpuSnapshot) => void }[] = [];

  constructor(
    options: Partial<QueryGpusOptions> & {
      readonly query?: (options: QueryGpusOptions) => Promise<GpuQuery>;
      readonly maxBackoffMs?: number;
      readonly now?: () => number;
    } = {},
  ) {
    const { query, maxBackoffMs, now, ...queryOptions } = options;
    this.#options = { ...queryOptions, env: queryOptions.env ?? {} };
    this.#query = query ?? queryGpus;
    this.#maxBackoffMs = maxBackoffMs ?? 60_000;
    this.#now = now ?? (() => performance.now());
  }

  /** One whole look for the launcher's plan: neither counted nor kept, logging nothing. */
  look(): Promise<GpuQuery> {
    return this.#query(this.#options);
  }

  get queries(): number {
    return this.#queries;
  }

  /** The last answer, however old; undefined before one (or while `nvidia-smi` fails). */
  get latest(): GpuSnapshot | undefined {
    return this.#latest?.snapshot;
  }

  /** The facts may change from now on (a run exited or spawned). */
  mark(): number {
    return ++this.#marks;
  }

  /** The last mark: `snapshot(age, marked)` is an answer asked after it. */
  get marked(): number {
    return this.#marks;
  }

  /** The first successful answer to a query asked at `mark` or later, whoever asks it; asks nothing. */
  next(mark: number): Promise<GpuSnapshot> {
    return new Promise((resolve) => this.#next.push({ mark, resolve }));
  }

  /** The latest answer no older than `maxAgeMs`, asked at mark `after` or later; undefined while `nvidia-smi` fails. */
  snapshot(maxAgeMs: number, after = 0): Promise<GpuSnapshot | undefined> {
    const inFlight = this.#inFlight;
    if (inFlight) {
      return inFlight.mark >= after
        ? inFlight.answer
        : inFlight.answer.then(() => this.snapshot(maxAgeMs, after));
    }
    const latest = this.#latest;
    if (latest !== undefined) {
      const age = this.#now() - latest.came;
      if (age < latest.backoffMs || (age < maxAgeMs && latest.mark >= after)) {
        return Promise.resolve(latest.snapshot);
      }
    }
    const mark = this.#marks;
    const answer = this.#answer(mark).finally(() => {
      this.#inFlight = undefined;
    });
    this.#inFlight = { answer, mark };
    return answer;
  }

  async #answer(mark: number): Promise<GpuSnapshot | undefined> {
    this.#queries++;
    let answer: GpuQuery;
    try {
      answer = await this.#query(this.#options);
    } catch (error) {
      // queryGpus never throws; a replaced query might.
      answer = { ok: false, error: (error as Error)?.message ?? String(error) };
    }
    if (answer.ok) {
      this.#failures.ok();
      const { snapshot } = answer;
      this.#latest = { snapshot, came: this.#now(), backoffMs: 0, mark };
      this.#next = this.#next.filter((next) => {
        if (next.mark > mark) return true;
        next.resolve(snapshot);
        return false;
      });
      return snapshot;
    }
    this.#failures.fail(
      `${answer.error}; rules needing GPU memory facts are skipped while it fails`,
    );
    const max = this.#maxBackoffMs;
    const doubled = 2 * (this.#latest?.backoffMs || FIRST_BACKOFF_MS / 2);
    const backoffMs = answer.absent ? max : Math.min(max, doubled);
    this.#latest = { snapshot: undefined, came: this.#now(), backoffMs, mark };
    return undefined;
  }
}
