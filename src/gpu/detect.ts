/**
 * Where the GPU pool comes from: `--gpus`, else the launcher's own
 * `CUDA_VISIBLE_DEVICES`, else `nvidia-smi`, else no pool. Detection never
 * throws for a machine's state: a failing `nvidia-smi` is a warning and no pool.
 *
 * @module
 */
import { ConfigError } from "../common/config_error.ts";
import { clip } from "../common/one_line.ts";
import {
  formatGpuList,
  type GpuPool,
  parseVisibleDevices,
} from "./placement.ts";
import type { GpuQuery } from "./nvidia_smi.ts";
import { listGpuIndices } from "./gpu_monitor.ts";

/** What {@linkcode detectGpuPool} found. */
export interface GpuDetection {
  /** The pool, or `undefined` when GPUs are not placed. */
  readonly pool: GpuPool | undefined;
  /**
   * Where the pool came from (`--gpus`, `CUDA_VISIBLE_DEVICES`, `nvidia-smi`),
   * or why there is none, for the start-up line.
   */
  readonly source: string;
  /** One line to log as a warning when `nvidia-smi` failed; absent otherwise. */
  readonly warning?: string;
}

/** How {@linkcode detectGpuPool} looks. */
export interface DetectGpuOptions {
  /** The `--gpus` flag's text, when given; it wins over everything else. */
  readonly gpus?: string | undefined;
  /**
   * The launcher's environment: `CUDA_VISIBLE_DEVICES`, and `PATH` to find
   * `nvidia-smi`, which runs with it.
   */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** How long `nvidia-smi` may take before it is killed. @default {5000} */
  readonly timeoutMs?: number;
  /**
   * A memory look ({@linkcode queryGpus}) already under way: when step 3 is
   * reached and it answered, the pool is its devices and `nvidia-smi` is not
   * asked again (one round instead of two); when it failed, step 3 asks as
   * usual.
   */
  readonly query?: Promise<GpuQuery> | undefined;
}

/** More devices than any machine holds: a typo such as `0-70000` is refused. */
const MAX_DEVICES = 1024;
const EXPECTED =
  "expected device indices or ranges such as 0-7 or 0,2,4-5, GPU-<uuid> entries, or none; leave --gpus out to detect the devices";

/**
 * Parses a device list such as `--gpus` takes: indices and ranges (`0-7`,
 * `0,2,4-5`), `GPU-<uuid>` / `MIG-<uuid>` entries as written, or `none`.
 * Indices are written without leading zeros.
 *
 * @param text The text to parse.
 * @param what Names the input in the error, e.g. `--gpus`.
 * @returns The entries in the order given, or `"none"`.
 * @throws {ConfigError} One line naming `what`, when the text is empty, has an
 *   entry that is neither, a range that goes down, a device listed twice, or
 *   more than 1024 devices.
 *
 * @example
 * ```ts ignore
 * parseGpuList("0,2,4-5", "--gpus"); // ["0", "2", "4", "5"]
 * parseGpuList("none", "--gpus"); // "none"
 * ```
 */
export function parseGpuList(text: string, what: string): string[] | "none" {
  const trimmed = text.trim();
  function bad(detail: string): ConfigError {
    return new ConfigError(
      `Cannot use ${what}=${JSON.stringify(text)}: ${detail}`.replace(
        /[\r\n]+/g,
        " ",
      ),
    );
  }
  if (trimmed.toLowerCase() === "none") return "none";
  if (trimmed === "") throw bad(EXPECTED);
  const entries: string[] = [];
  for (const raw of trimmed.split(",")) {
    const part = raw.trim();
    const range = /^(\d+)\s*-\s*(\d+)$/.exec(part);
    let items: string[];
    if (/^\d+$/.test(part)) items = [String(Number(part))];
    else if (range) {
      const low = Number(range[1]);
      const high = Number(range[2]);
      if (high < low) {
        throw bad(
          `the range ${part} goes down (expected low-high, such as ${high}-${low})`,
        );
      }
      if (high - low >= MAX_DEVICES) {
        throw bad(`the range ${part} holds more than ${MAX_DEVICES} devices`);
      }
      items = [];
      for (let i = low; i <= high; i++) items.push(String(i));
    } else if (/^(?:GPU|MIG)-[A-Za-z0-9/_.:-]+$/.test(part)) items = [part];
    else {
      throw bad(
        `${
          part === "" ? "an empty entry" : `'${part.slice(0, 40)}'`
        } is not a device (${EXPECTED})`,
      );
    }
    for (const item of items) {
      if (entries.includes(item)) {
        throw bad(`device ${item} is listed twice (expected each device once)`);
      }
      entries.push(item);
    }
    if (entries.length > MAX_DEVICES) {
      throw bad(`more than ${MAX_DEVICES} devices`);
    }
  }
  return entries;
}

/**
 * Finds the pool of GPUs the launcher may hand out, in this order:
 *
 * 1. `gpus` (the `--gpus` flag): that list, an explicit pool; `none` means no
 *    pool at all.
 * 2. The launcher's own `CUDA_VISIBLE_DEVICES`, when set: its entries exactly
 *    as written (indices or `GPU-<uuid>`). An empty value (or `-1`) hides every
 *    GPU from the launcher, so there is no pool and `nvidia-smi` is not asked
 *    (it would list devices the launcher was not given); engines inherit the
 *    empty value.
 * 3. `nvidia-smi --query-gpu=index --format=csv,noheader`, when an
 *    `nvidia-smi` is on PATH: one index per line. It runs through
 *    `listGpuIndices` (`gpu_monitor.ts`): in its own process group, killed (with
 *    anything it started) after `timeoutMs`. A non-zero
 *    exit, a timeout or output other than distinct indices gives a `warning`
 *    and no pool.
 * 4. Otherwise no pool (a machine without NVIDIA tools), and no warning.
 *
 * @param options The flag's text, the environment, the timeout.
 * @returns The pool (or none), where it came from, and a warning if any.
 * @throws {ConfigError} Only when `gpus` is not a valid list (see
 *   {@linkcode parseGpuList}).
 *
 * @example
 * ```ts ignore
 * const { pool, source, warning } = await detectGpuPool({ gpus: flags.gpus });
 * if (warning) log.warn(warning);
 * ```
 */
export async function detectGpuPool(
  options: DetectGpuOptions,
): Promise<GpuDetection> {
  if (options.gpus !== undefined) {
    const list = parseGpuList(options.gpus, "--gpus");
    return list === "none"
      ? { pool: undefined, source: "--gpus none" }
      : { pool: { entries: list, explicit: true }, source: "--gpus" };
  }
  const env = options.env;
  const visible = env["CUDA_VISIBLE_DEVICES"];
  if (visible !== undefined) {
    const entries = parseVisibleDevices(visible);
    return entries.length === 0
      ? {
        pool: undefined,
        source: `the launcher's CUDA_VISIBLE_DEVICES=${
          JSON.stringify(visible)
        } hides every GPU`,
      }
      : {
        pool: { entries, explicit: false },
        source: "CUDA_VISIBLE_DEVICES",
      };
  }
  const look = await options.query;
  if (look?.ok) {
    const entries = [...new Set(look.snapshot.devices.map((d) => d.index))];
    return { pool: { entries, explicit: false }, source: "nvidia-smi" };
  }
  if (look?.absent) return { pool: undefined, source: NO_NVIDIA_SMI };
  return await askNvidiaSmi(env, options.timeoutMs ?? 5000);
}

/**
 * The start-up line for a detection: `GPU pool 0-7 (from nvidia-smi)`, or
 * `GPUs not placed (no nvidia-smi on PATH): engines get no CUDA_VISIBLE_DEVICES from the launcher`.
 *
 * @param detection What {@linkcode detectGpuPool} returned.
 * @returns The line, without the logger's prefix.
 *
 * @example
 * ```ts ignore
 * log.info(gpuPoolLine(await detectGpuPool()));
 * ```
 */
export function gpuPoolLine(detection: GpuDetection): string {
  return detection.pool === undefined
    ? `GPUs not placed (${detection.source}): engines get no CUDA_VISIBLE_DEVICES from the launcher`
    : `GPU pool ${
      formatGpuList(detection.pool.entries)
    } (from ${detection.source})`;
}

const NO_NVIDIA_SMI =
  "no --gpus, no CUDA_VISIBLE_DEVICES and no nvidia-smi on PATH";

async function askNvidiaSmi(
  env: Readonly<Record<string, string | undefined>>,
  timeoutMs: number,
): Promise<GpuDetection> {
  const run = await listGpuIndices({ env, timeoutMs });
  if (!run.ok) {
    if (run.reason === "absent") {
      return { pool: undefined, source: NO_NVIDIA_SMI };
    }
    if (run.reason === "unsure") {
      return {
        pool: undefined,
        source: `${NO_NVIDIA_SMI}, or not allowed by --allow-run`,
      };
    }
    return failed(run.detail);
  }
  const lines = run.stdout.split(/\r?\n/).map((line) => line.trim()).filter(
    Boolean,
  );
  if (lines.length === 0) return failed("it printed no device index");
  const entries: string[] = [];
  for (const line of lines) {
    if (!/^\d+$/.test(line)) {
      return failed(
        `it printed '${clip(line)}' where a device index was expected`,
      );
    }
    const entry = String(Number(line));
    if (entries.includes(entry)) {
      return failed(`it printed device index ${entry} twice`);
    }
    entries.push(entry);
  }
  return { pool: { entries, explicit: false }, source: "nvidia-smi" };
}

function failed(detail: string): GpuDetection {
  return {
    pool: undefined,
    source: "nvidia-smi failed",
    warning:
      `Cannot detect GPUs with nvidia-smi: ${detail}; GPUs are not placed (give the pool with --gpus)`,
  };
}
