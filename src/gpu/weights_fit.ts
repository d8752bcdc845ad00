// Will a card's weights fit the memory its engine may use? Warned before the
// engine loads for minutes and then fails; never refused, since quantisation
// at load time can make weights smaller than their files.
import type { ModelCard } from "../catalogue.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { gpuMemoryNeed, weightSplit } from "./need.ts";
import { deviceOf, type GpuSnapshot } from "./nvidia_smi.ts";

// Above this share of what it may use, little is left for the KV cache.
const TIGHT = 0.9;
const GIB = 1024 ** 3;

// The smallest of the engine's devices decides.
export function weightFitWarning({ card, devices, weightBytes, snapshot }: {
  readonly card: ModelCard;
  readonly devices: readonly string[] | null;
  readonly weightBytes: number;
  readonly snapshot: GpuSnapshot | undefined;
}): string | undefined {
  if (!snapshot || !devices || devices.length === 0) return undefined;
  const need = gpuMemoryNeed(card);
  if (need === undefined) return undefined;
  const totals = devices.map((entry) => deviceOf(entry, snapshot))
    .filter((d) => d !== undefined && d.memoryKnown)
    .map((d) => d!.totalMiB);
  if (totals.length === 0) return undefined;
  const totalMiB = Math.min(...totals);
  const split = weightSplit(card);
  const mayUse = need.fraction * totalMiB * 1024 * 1024 * split.count;
  // A known need means the kind names its share flag.
  const kind = ENGINE_KINDS[card.engine]!;
  const flag = kind.sizing!.share!.flag.slice(2);
  const engine = kind.title;
  const gpus = `${devices.length === 1 ? "GPU" : "GPUs"} ${devices.join(",")}`;
  const times = split.count > 1 ? ` × ${split.from}` : "";
  const share = `${flag} ${need.fraction} × ${gib(totalMiB / 1024)} GiB`;
  const where = `${gpus} (${share}${times})`;
  const weights = `${card.name}: weights ${(weightBytes / GIB).toFixed(1)} GiB`;
  const limit = `${(mayUse / GIB).toFixed(1)} GiB it may use on ${where}`;
  if (weightBytes > mayUse) {
    return `${weights} exceed the ${limit}: ${engine} will fail to allocate its KV cache`;
  }
  if (weightBytes > TIGHT * mayUse) {
    const percent = Math.round(100 * weightBytes / mayUse);
    return `${weights} take ${percent} % of the ${limit}: little is left for ${engine}'s KV cache`;
  }
  return undefined;
}

function gib(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}
