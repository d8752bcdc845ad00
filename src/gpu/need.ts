import type { ModelCard } from "../catalogue.ts";
import { foldLines } from "../common/one_line.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import type { EngineDevices } from "../engines/kinds/engine_kind.ts";
import type { MemoryNeed } from "../engines/kinds/engine_kind.ts";
import {
  flagValue,
  FlagValueError,
  sizeFlag,
  sizeProduct,
} from "../engines/kinds/flag_values.ts";
import { InputError } from "../common/config_error.ts";

/** A share is `0 < share ≤ 1` of one device; `pinned`: the card's own `env` names its devices. */
export type GpuNeed = EngineDevices & { readonly pinned?: readonly string[] };

export class GpuPlacementError extends InputError {
  readonly card: string;

  constructor(card: string, detail: string) {
    super(foldLines(`Cannot place ${card}: ${detail}`));
    this.name = "GpuPlacementError";
    this.card = card;
  }
}

// CUDA stops reading at the first entry it cannot use, so `-1` hides it and everything after it.
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

// The fraction of each device's memory the engine demands free at start
// (vLLM refuses below `gpu-memory-utilization` × total), where known.
export function gpuMemoryNeed(card: ModelCard): MemoryNeed | undefined {
  const kind = ENGINE_KINDS[card.engine];
  const share = kind?.sizing?.share;
  if (share === undefined) return undefined;
  const flag = flagValue(card.args, [share.flag]);
  if (flag === undefined) {
    const fraction = share.default;
    if (fraction === undefined) return undefined;
    const from = `${share.flag.slice(2)} ${fraction} (${
      kind!.title
    }'s default)`;
    return { fraction, from };
  }
  const fraction = Number(flag.value);
  // An unusable value is the engine's to refuse; placement reports vLLM's already.
  if (!(fraction > 0 && fraction <= 1)) return undefined;
  return { fraction, from: `${flag.name} ${fraction}` };
}

// Data-parallel replicas each hold the whole model: they do not divide it.
export function weightSplit(card: ModelCard): { count: number; from: string } {
  const names = ENGINE_KINDS[card.engine]?.sizing?.split ?? [];
  return sizeProduct(
    asPlacement(card, () => names.map((flags) => sizeFlag(card.args, flags)))
      .filter((size) => size && size.size > 1),
  );
}

function isShare(gpus: number | undefined): gpus is number {
  return gpus !== undefined && gpus > 0 && gpus < 1;
}

function asPlacement<T>(card: ModelCard, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (!(error instanceof FlagValueError)) throw error;
    throw new GpuPlacementError(card.name, error.message);
  }
}
