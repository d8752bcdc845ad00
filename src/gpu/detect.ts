// A failing `nvidia-smi` is a warning and no pool, never an error.
import { ConfigError } from "../common/config_error.ts";
import { clip, foldLines } from "../common/one_line.ts";
import type { GpuDetection } from "./placement.ts";
import { parseVisibleDevices } from "./need.ts";
import {
  type GpuQuery,
  lines,
  type QueryGpusOptions,
  runNvidiaSmi,
} from "./nvidia_smi.ts";

// More devices than any machine holds: a typo such as `0-70000` is refused.
const MAX_DEVICES = 1024;
const EXPECTED =
  "expected device indices or ranges such as 0-7 or 0,2,4-5, GPU-<uuid> entries, or none; leave --gpus out to detect the devices";

/** `0,2,4-5` → `["0", "2", "4", "5"]`; `GPU-…`/`MIG-…` as written; `none`. */
export function parseGpuList(text: string, what: string): string[] | "none" {
  const trimmed = text.trim();
  function bad(detail: string): ConfigError {
    return new ConfigError(
      foldLines(`Cannot use ${what}=${JSON.stringify(text)}: ${detail}`),
    );
  }
  if (trimmed.toLowerCase() === "none") return "none";
  if (trimmed === "") throw bad(EXPECTED);
  const entries: string[] = [];
  for (const raw of trimmed.split(",")) {
    const part = raw.trim();
    const [, first, last = first] = /^(\d+)(?:\s*-\s*(\d+))?$/.exec(part) ?? [];
    let items: string[];
    if (first !== undefined) {
      const [low, high] = [Number(first), Number(last)];
      if (high < low) {
        throw bad(
          `the range ${part} goes down (expected low-high, such as ${high}-${low})`,
        );
      }
      if (high - low >= MAX_DEVICES) {
        throw bad(`the range ${part} holds more than ${MAX_DEVICES} devices`);
      }
      items = Array.from({ length: high - low + 1 }, (_, i) => `${low + i}`);
    } else if (/^(?:GPU|MIG)-[A-Za-z0-9/_.:-]+$/.test(part)) items = [part];
    else {
      const what = part === "" ? "an empty entry" : `'${part.slice(0, 40)}'`;
      throw bad(`${what} is not a device (${EXPECTED})`);
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

// An empty `CUDA_VISIBLE_DEVICES` hides every GPU: no pool, and `nvidia-smi`
// is not asked (it would list devices the launcher was not given).
export async function detectGpuPool(
  options: QueryGpusOptions & {
    readonly gpus?: string | undefined;
    readonly query?: Promise<GpuQuery> | undefined;
  },
): Promise<GpuDetection> {
  if (options.gpus !== undefined) {
    const list = parseGpuList(options.gpus, "--gpus");
    return list === "none" ? none("--gpus none") : pooled(list, "--gpus", true);
  }
  const visible = options.env["CUDA_VISIBLE_DEVICES"];
  if (visible !== undefined) {
    const entries = parseVisibleDevices(visible);
    const hides = `CUDA_VISIBLE_DEVICES=${JSON.stringify(visible)} hides`;
    return entries.length > 0
      ? pooled(entries, "CUDA_VISIBLE_DEVICES")
      : none(`the launcher's ${hides} every GPU`);
  }
  const look = await options.query;
  if (look?.ok) {
    return pooled(look.snapshot.devices.map((d) => d.index), "nvidia-smi");
  }
  if (look?.absent) return none(NO_NVIDIA_SMI);
  const run = await runNvidiaSmi(
    ["--query-gpu=index", "--format=csv,noheader"],
    options,
  );
  if (!run.ok) {
    if (run.reason === "failed") return failed(run.detail);
    return none(
      run.reason === "absent"
        ? NO_NVIDIA_SMI
        : `${NO_NVIDIA_SMI}, or not allowed by --allow-run`,
    );
  }
  const entries: string[] = [];
  for (const line of lines(run.stdout)) {
    const entry = String(Number(line));
    if (!/^\d+$/.test(line)) {
      return failed(
        `it printed '${clip(line)}' where a device index was expected`,
      );
    }
    if (entries.includes(entry)) {
      return failed(`it printed device index ${entry} twice`);
    }
    entries.push(entry);
  }
  return entries.length === 0
    ? failed("it printed no device index")
    : pooled(entries, "nvidia-smi");
}

const NO_NVIDIA_SMI =
  "no --gpus, no CUDA_VISIBLE_DEVICES and no nvidia-smi on PATH";

function pooled(entries: string[], source: string, explicit = false) {
  return { pool: { entries, explicit }, source };
}

function none(source: string): GpuDetection {
  return { pool: undefined, source };
}

function failed(detail: string): GpuDetection {
  return {
    pool: undefined,
    source: "nvidia-smi failed",
    warning:
      `Cannot detect GPUs with nvidia-smi: ${detail}; GPUs are not placed (give the pool with --gpus)`,
  };
}
