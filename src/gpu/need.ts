/**
 * What GPUs one card needs: read from its `gpus` field, its own
 * `CUDA_VISIBLE_DEVICES`, or its engine's settings. Pure: no I/O.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { foldLines } from "../common/one_line.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import type { EngineDevices } from "../engines/kinds/engine_kind.ts";
import {
  flagValue,
  FlagValueError,
  sizeFlag,
} from "../engines/kinds/flag_values.ts";
import { InputError } from "../common/config_error.ts";

/**
 * What a card needs from the GPU pool.
 *
 * - `unplaced`: the launcher leaves the engine's environment alone (`command`
 *   cards, vLLM with `distributed-executor-backend ray`).
 * - `whole`: `count` whole devices; `0` means no GPU (`CUDA_VISIBLE_DEVICES=""`).
 * - `share`: a fraction of one device, `0 < share ≤ 1`; shares on one device add
 *   up to at most 1.
 *
 * `pinned` is set when the card's own `env` names its devices: it keeps exactly
 * those (for a share, each of them holds the share).
 * `from` says, for people, where the need came from.
 *
 * @example
 * ```ts ignore
 * const need: GpuNeed = { kind: "whole", count: 4, from: "tensor-parallel-size 4" };
 * ```
 */
export type GpuNeed = EngineDevices & { readonly pinned?: readonly string[] };

/**
 * Thrown when the engines cannot be given GPUs: a card that does not fit in
 * what is free, two pinned cards claiming one device, a pinned device outside
 * an explicit `--gpus` pool, or a card whose parallel settings are not a device
 * count. The message is one line naming the card.
 *
 * @example
 * ```ts ignore
 * const error = new GpuPlacementError("qwen3-30b-a3b", "needs 2 GPUs, 1 free in pool 0-3");
 * console.log(error.message); // Cannot place qwen3-30b-a3b: needs 2 GPUs, 1 free in pool 0-3
 * ```
 */
export class GpuPlacementError extends InputError {
  /** The catalogue name of the card that could not be placed. */
  readonly card: string;

  /**
   * Builds the one-line message `Cannot place <card>: <detail>`.
   *
   * @param card The catalogue name of the card.
   * @param detail What it needs and why that cannot be given.
   */
  constructor(card: string, detail: string) {
    super(foldLines(`Cannot place ${card}: ${detail}`));
    this.name = "GpuPlacementError";
    this.card = card;
  }
}

/**
 * Splits a `CUDA_VISIBLE_DEVICES` value into its entries, as written (trimmed;
 * empty entries and repeats dropped). CUDA stops reading at the first entry it
 * cannot use, so a negative index such as `-1` hides it and everything after it.
 *
 * @param value The variable's value, e.g. `0,1` or `GPU-8e1c…,GPU-77aa…`.
 * @returns The entries, in the order written; `[]` for `""` or `-1`.
 *
 * @example
 * ```ts ignore
 * parseVisibleDevices("0, 2,GPU-abc"); // ["0", "2", "GPU-abc"]
 * parseVisibleDevices("-1"); // []
 * ```
 */
export function parseVisibleDevices(value: string): string[] {
  const entries: string[] = [];
  for (const raw of value.split(",")) {
    const entry = raw.trim();
    if (entry === "") continue;
    if (entry.startsWith("-")) break;
    if (!entries.includes(entry)) entries.push(entry);
  }
  return entries;
}

/**
 * What GPUs a card needs, by these rules, first match wins:
 *
 * 1. `env.CUDA_VISIBLE_DEVICES` set: pinned to those entries, whole devices
 *    unless the card's `gpus` is a share (0 < gpus < 1).
 * 2. `gpus` set: `0` no GPU, an integer n whole devices, else a share.
 * 3. Else its engine kind's rule (`engines/kinds/`): vLLM
 *    `tensor-parallel-size` × `pipeline-parallel-size` × data-parallel size
 *    whole devices, else a `gpu-memory-utilization` share (unplaced with
 *    Ray); SGLang `tp-size` ÷ `nnodes`; llama.cpp one device; `command`
 *    unplaced. Flags are read as the engine reads them (`--flag=value`,
 *    `_` for `-`, short aliases); the last occurrence wins.
 *
 * @param card The model card.
 * @returns The need.
 * @throws {GpuPlacementError} When a parallel size or memory share in the
 *   card's args is not a usable number.
 *
 * @example
 * ```ts ignore
 * const card = Registry.parse(
 *   "models:\n  m:\n    verb: chat\n    hub: a/b\n    args: { tensor-parallel-size: 2 }\n",
 * ).get("m");
 * gpuNeed(card); // { kind: "whole", count: 2, from: "tensor-parallel-size 2" }
 * ```
 */
export function gpuNeed(card: ModelCard): GpuNeed {
  const visible = card.env["CUDA_VISIBLE_DEVICES"];
  if (visible !== undefined) {
    const pinned = parseVisibleDevices(visible);
    const from = "pinned by its CUDA_VISIBLE_DEVICES";
    return isShare(card.gpus)
      ? { kind: "share", share: card.gpus, from, pinned }
      : { kind: "whole", count: pinned.length, from, pinned };
  }
  if (card.gpus !== undefined) {
    const from = `gpus: ${card.gpus}`;
    return isShare(card.gpus)
      ? { kind: "share", share: card.gpus, from }
      : { kind: "whole", count: card.gpus, from };
  }
  const kind = ENGINE_KINDS[card.engine];
  if (kind === undefined) {
    return { kind: "unplaced", from: `engine ${card.engine}` };
  }
  return asPlacement(card, () => kind.devices(card.args));
}

/** The free memory an engine checks for at start, as a fraction of each device's total. */
export interface GpuMemoryNeed {
  /** Fraction of each device's total memory that must be free, 0 < x ≤ 1. */
  readonly fraction: number;
  /** Where it comes from, for people: `gpu-memory-utilization 0.9 (vLLM's default)`. */
  readonly from: string;
}

/**
 * The free memory a card's engine demands on each of its devices before it
 * starts, where that is known: vLLM refuses to start when a device's free
 * memory is below `gpu-memory-utilization` (default 0.9) × its total; SGLang
 * sizes its static pool from `mem-fraction-static` when the card sets it.
 * Other engines (and SGLang without the flag) have no known need.
 *
 * @param card The model card.
 * @returns The need, or undefined when none is known.
 *
 * @example
 * ```ts ignore
 * gpuMemoryNeed(vllmCard); // { fraction: 0.9, from: "gpu-memory-utilization 0.9 (vLLM's default)" }
 * ```
 */
export function gpuMemoryNeed(card: ModelCard): GpuMemoryNeed | undefined {
  const kind = ENGINE_KINDS[card.engine];
  const share = kind?.memoryShare;
  if (share === undefined) return undefined;
  const flag = flagValue(card.args, [share.flag]);
  if (flag === undefined) {
    return share.default === undefined ? undefined : {
      fraction: share.default,
      from: `${share.flag.slice(2)} ${share.default} (${
        kind!.title
      }'s default)`,
    };
  }
  const fraction = Number(flag.value);
  // An unusable value is the engine's to refuse; placement reports vLLM's already.
  if (!(fraction > 0 && fraction <= 1)) return undefined;
  return { fraction, from: `${flag.name} ${fraction}` };
}

/**
 * Over how many devices a card's engine splits its weights: vLLM's
 * `tensor-parallel-size` × `pipeline-parallel-size`, SGLang's `tp-size` ×
 * `pp-size`; data-parallel replicas each hold the whole model, so they do not
 * divide it. Other engines: 1.
 *
 * @param card The model card.
 * @returns The number of ways, and the flags it comes from (`""` for 1).
 * @throws {GpuPlacementError} When a size in the card's args is not a whole number.
 *
 * @example
 * ```ts ignore
 * weightSplit(card); // { ways: 4, from: "tensor-parallel-size 4" }
 * ```
 */
export function weightSplit(card: ModelCard): { ways: number; from: string } {
  const names = ENGINE_KINDS[card.engine]?.splitFlags ?? [];
  const factors = asPlacement(
    card,
    () => names.map((flags) => sizeFlag(card.args, flags)),
  ).filter((f) => f !== undefined && f.size > 1) as {
    name: string;
    size: number;
  }[];
  return {
    ways: factors.reduce((product, f) => product * f.size, 1),
    from: factors.map((f) => `${f.name} ${f.size}`).join(" × "),
  };
}

function isShare(gpus: number | undefined): gpus is number {
  return gpus !== undefined && gpus > 0 && gpus < 1;
}

/** `read()`, its unusable flag values refused as the card's placement error. */
function asPlacement<T>(card: ModelCard, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (!(error instanceof FlagValueError)) throw error;
    throw new GpuPlacementError(card.name, error.message);
  }
}
