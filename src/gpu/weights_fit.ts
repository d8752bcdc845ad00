/**
 * Will a card's weights fit the memory its engine may use? Compared before
 * the engine loads for minutes and then fails: vLLM may use
 * `gpu-memory-utilization` (default 0.9) of each device's total, SGLang
 * `mem-fraction-static` of it where the card sets it; the weights are split
 * over `tensor-parallel-size` × `pipeline-parallel-size` devices. Pure: the
 * weight size (`engines/launch.ts`) and the devices' totals (one
 * `nvidia-smi` look) are handed in. Warnings, never refusals: quantisation at
 * load time can make weights smaller than their files.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { gpuMemoryNeed, weightSplit } from "./need.ts";
import { deviceOf, type GpuSnapshot } from "./nvidia_smi.ts";

/** Above this share of what it may use, little is left for the KV cache. */
const TIGHT = 0.9;
const GIB = 1024 ** 3;

/** What {@linkcode weightFitWarnings} compares. */
export interface WeightFit {
  /** The expanded card. */
  readonly card: ModelCard;
  /** Its devices as placed; null or `[]` when not placed (nothing to compare). */
  readonly devices: readonly string[] | null;
  /** The local weights' size in bytes. */
  readonly weightBytes: number;
  /** One look at the machine's GPUs; undefined when there is none. */
  readonly snapshot: GpuSnapshot | undefined;
}

/**
 * The warning for a card whose weights exceed what its engine may use, or
 * take more than 90 % of it, e.g.
 * `qwen3-32b: weights 61.0 GiB exceed the 32.0 GiB it may use on GPU 0 (gpu-memory-utilization 0.4 × 80 GiB): vLLM will fail to allocate its KV cache`.
 * Nothing for other engines, an SGLang card without `mem-fraction-static`,
 * an engine not placed on devices, or devices `nvidia-smi` gives no total
 * for (MIG entries, `[N/A]` memory). The smallest device of the engine's
 * decides.
 *
 * @param fit The card, its devices, its weights and the GPU look.
 * @returns The warning, or undefined when the weights fit.
 *
 * @example
 * ```ts ignore
 * weightFitWarning({ card, devices: ["0"], weightBytes: 61 * 2 ** 30, snapshot });
 * ```
 */
export function weightFitWarning(fit: WeightFit): string | undefined {
  const { card, devices, weightBytes, snapshot } = fit;
  if (!snapshot || !devices || devices.length === 0) return undefined;
  const need = gpuMemoryNeed(card);
  if (need === undefined) return undefined;
  const totals = devices.map((entry) => deviceOf(entry, snapshot))
    .filter((d) => d !== undefined && d.memoryKnown)
    .map((d) => d!.totalMiB);
  if (totals.length === 0) return undefined;
  const totalMiB = Math.min(...totals);
  const split = weightSplit(card);
  const mayUse = need.fraction * totalMiB * 1024 * 1024 * split.ways;
  // A known need means the kind names its share flag.
  const kind = ENGINE_KINDS[card.engine]!;
  const flag = kind.memoryShare!.flag.slice(2);
  const engine = kind.title;
  const where = `${devices.length === 1 ? "GPU" : "GPUs"} ${
    devices.join(",")
  } (${flag} ${need.fraction} × ${gib(totalMiB / 1024)} GiB${
    split.ways > 1 ? ` × ${split.from}` : ""
  })`;
  const weights = `${card.name}: weights ${(weightBytes / GIB).toFixed(1)} GiB`;
  const limit = `${(mayUse / GIB).toFixed(1)} GiB it may use on ${where}`;
  if (weightBytes > mayUse) {
    return `${weights} exceed the ${limit}: ${engine} will fail to allocate its KV cache`;
  }
  if (weightBytes > TIGHT * mayUse) {
    return `${weights} take ${
      Math.round(100 * weightBytes / mayUse)
    } % of the ${limit}: little is left for ${engine}'s KV cache`;
  }
  return undefined;
}

/** `80` for a whole number of GiB, else one decimal. */
function gib(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}
