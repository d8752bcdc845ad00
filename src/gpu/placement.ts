/**
 * Folder `gpu/`: what a card needs and its placement on a pool (both pure),
 * pool detection and `nvidia-smi`, and the start gate. It knows nothing of
 * HTTP and spawns no engine.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { type GpuNeed, gpuNeed, GpuPlacementError } from "./need.ts";

export interface GpuPool {
  readonly entries: readonly string[];
  // Given by --gpus: a pin outside it is refused. Another pool may name
  // devices differently from a card's CUDA_VISIBLE_DEVICES, so such pins are
  // only kept apart from each other.
  readonly explicit: boolean;
}

export interface GpuAssignment {
  /** `null`: not placed (its environment is left alone); `[]`: no GPU. */
  readonly devices: readonly string[] | null;
  readonly need: GpuNeed;
}

// The same request always gives the same layout. Whole devices: the lowest
// run of adjacent free ones, else the lowest free ones. A share: the first
// device with shares and room left, else the lowest free one.
export function placeGpus(
  cards: readonly ModelCard[],
  pool: GpuPool | undefined,
  options: PlaceOptions = {},
): Map<string, GpuAssignment> {
  const twice = cards.find((card, i) =>
    cards.findIndex((other) => other.name === card.name) < i
  );
  if (twice) {
    throw new GpuPlacementError(
      twice.name,
      "it is requested twice (expected each model once)",
    );
  }
  if (pool === undefined) return unplacedLayout(cards);
  const layout = new Layout(pool, options.avoid);
  for (const [name, assignment] of options.held ?? []) {
    layout.keep(name, assignment);
  }
  // Keys in request order; pinned cards are placed before the rest.
  const result = new Map<string, GpuAssignment>(
    cards.map((card) => [card.name, { devices: null, need: gpuNeed(card) }]),
  );
  for (const [name, { need }] of result) {
    if (need.kind !== "unplaced" && need.pinned !== undefined) {
      result.set(name, { devices: layout.pin(name, need), need });
    }
  }
  for (const [name, { need }] of result) {
    if (need.kind === "unplaced" || need.pinned !== undefined) continue;
    const devices = need.kind === "whole"
      ? layout.takeWhole(name, need.count)
      : layout.takeShare(name, need.share);
    result.set(name, { devices, need });
  }
  for (const [name, { devices, need }] of result) {
    if (
      devices && devices.length > 1 && devices.some((d) => d.startsWith("MIG-"))
    ) {
      // A CUDA process sees one MIG device, whatever CUDA_VISIBLE_DEVICES lists.
      throw new GpuPlacementError(
        name,
        `needs ${devices.length} devices (${need.from}), given ${
          devices.join(",")
        }: a CUDA process sees one MIG instance (expected a tensor parallelism of 1 on MIG)`,
      );
    }
  }
  return result;
}

export interface PlaceOptions {
  held?: ReadonlyMap<string, GpuAssignment>;
  /** Left out of automatic placement (a device reporting a memory error); a pin there still holds. */
  avoid?: ReadonlySet<string>;
}

function unplacedLayout(
  cards: readonly ModelCard[],
): Map<string, GpuAssignment> {
  return new Map(cards.map((card): [string, GpuAssignment] => {
    if (card.env["CUDA_VISIBLE_DEVICES"] === undefined && card.gpus !== 0) {
      return [card.name, {
        devices: null,
        need: { kind: "unplaced", from: "no GPU pool" },
      }];
    }
    const need = gpuNeed(card);
    return [card.name, {
      devices: need.kind === "unplaced" ? null : need.pinned ?? [],
      need,
    }];
  }));
}

// Shares in millionths of a device, so that 0.3 + 0.3 + 0.4 fills one exactly.
const WHOLE = 1_000_000;

interface Holding {
  whole?: string;
  shares: { name: string; units: number }[];
}

class Layout {
  readonly #pool: GpuPool;
  readonly #order: readonly string[];
  readonly #numeric: boolean;
  readonly #held = new Map<string, Holding>();
  // In placement order, for refusal messages.
  readonly #holders: { name: string; devices: string[]; units?: number }[] = [];
  readonly #open: readonly string[];

  constructor(pool: GpuPool, avoid: ReadonlySet<string> = new Set()) {
    this.#pool = pool;
    const entries = [...new Set(pool.entries)];
    this.#numeric = entries.every(isIndex);
    this.#order = this.#numeric
      ? entries.sort((a, b) => Number(a) - Number(b))
      : entries;
    this.#open = this.#order.filter((entry) => !avoid.has(entry));
  }

  pin(name: string, need: Exclude<GpuNeed, { kind: "unplaced" }>): string[] {
    const devices = [...need.pinned!];
    const units = need.kind === "share" ? toUnits(need.share) : undefined;
    for (const device of devices) {
      if (this.#pool.explicit && !this.#order.includes(device)) {
        throw new GpuPlacementError(
          name,
          `its CUDA_VISIBLE_DEVICES pins GPU ${device}, outside the pool ${
            formatGpuList(this.#order)
          } given by --gpus (expected devices from that pool, or a wider --gpus)`,
        );
      }
      const holding = this.#held.get(device);
      if (holding === undefined) continue;
      const others = [
        ...(holding.whole === undefined ? [] : [holding.whole]),
        ...holding.shares.map((share) => share.name),
      ];
      if (
        holding.whole !== undefined || units === undefined ||
        used(holding) + units > WHOLE
      ) {
        throw new GpuPlacementError(
          name,
          `its CUDA_VISIBLE_DEVICES pins GPU ${device}, which ${
            others.join(" and ")
          } also ${
            others.length === 1 ? "pins" : "pin"
          } (expected each device pinned by one card, or by shares adding up to at most 1)`,
        );
      }
    }
    return this.#hold(name, devices, units);
  }

  keep(name: string, { devices, need }: GpuAssignment): void {
    if (devices === null || devices.length === 0 || need.kind === "unplaced") {
      return;
    }
    const units = need.kind === "share" ? toUnits(need.share) : undefined;
    this.#hold(name, [...devices], units);
  }

  takeWhole(name: string, count: number): string[] {
    if (count === 0) return [];
    const free = this.#open.filter((device) => !this.#held.has(device));
    if (free.length < count) {
      throw new GpuPlacementError(
        name,
        `needs ${count} ${
          count === 1 ? "GPU" : "GPUs"
        }, ${free.length} free ${this.#where()}`,
      );
    }
    return this.#hold(name, this.#adjacentRun(count) ?? free.slice(0, count));
  }

  takeShare(name: string, share: number): string[] {
    const units = toUnits(share);
    const device = this.#open.find((entry) => {
      const holding = this.#held.get(entry);
      return holding !== undefined && holding.whole === undefined &&
        used(holding) + units <= WHOLE;
    }) ?? this.#open.find((entry) => !this.#held.has(entry));
    if (device === undefined) {
      throw new GpuPlacementError(
        name,
        `needs ${share} of a GPU, 0 free and none with ${share} left ${this.#where()}`,
      );
    }
    return this.#hold(name, [device], units);
  }

  /** `units` undefined: whole devices. */
  #hold(name: string, devices: string[], units?: number): string[] {
    for (const device of devices) {
      const holding = this.#held.get(device) ?? { shares: [] };
      if (units === undefined) holding.whole = name;
      else holding.shares.push({ name, units });
      this.#held.set(device, holding);
    }
    this.#holders.push(
      units === undefined ? { name, devices } : { name, devices, units },
    );
    return devices;
  }

  #adjacentRun(count: number): string[] | undefined {
    let run: string[] = [];
    for (const device of this.#open) {
      const last = run.at(-1);
      if (this.#held.has(device)) run = [];
      else if (
        last !== undefined && this.#numeric &&
        Number(device) !== Number(last) + 1
      ) {
        run = [device];
      } else run.push(device);
      if (run.length === count) return run;
    }
    return undefined;
  }

  #where(): string {
    const held = this.#holders.flatMap(({ name, devices, units }) => {
      const inPool = devices.filter((device) => this.#order.includes(device));
      const share = units === undefined ? "" : `${units / WHOLE} of `;
      return inPool.length > 0
        ? [`${name} holds ${share}${inPool.join(",")}`]
        : [];
    });
    return `in pool ${formatGpuList(this.#order)}${
      held.length > 0 ? ` (${held.join("; ")})` : ""
    }`;
  }
}

function used(holding: Holding): number {
  return holding.shares.reduce((sum, s) => sum + s.units, 0);
}

function toUnits(share: number): number {
  return Math.max(1, Math.min(WHOLE, Math.round(share * WHOLE)));
}

export function formatGpuList(entries: readonly string[]): string {
  if (entries.length === 0) return "none";
  const parts: string[] = [];
  let i = 0;
  while (i < entries.length) {
    let j = i;
    while (
      j + 1 < entries.length && isIndex(entries[j]!) &&
      isIndex(entries[j + 1]!) &&
      Number(entries[j + 1]) === Number(entries[j]) + 1
    ) j++;
    parts.push(i === j ? entries[i]! : `${entries[i]}-${entries[j]}`);
    i = j + 1;
  }
  return parts.join(",");
}

function isIndex(entry: string): boolean {
  return /^\d+$/.test(entry);
}

/** Nothing for a pinned card: its own `env` already says it, exactly as written. */
export function gpuEnv(
  assignment: GpuAssignment | undefined,
): Record<string, string> {
  if (assignment === undefined || assignment.devices === null) return {};
  const need = assignment.need;
  if (need.kind !== "unplaced" && need.pinned !== undefined) return {};
  return { CUDA_VISIBLE_DEVICES: assignment.devices.join(",") };
}

export function gpuLine(name: string, assignment: GpuAssignment): string {
  const { devices, need } = assignment;
  const what = devices === null
    ? "GPUs not placed"
    : devices.length === 0
    ? "no GPU"
    : need.kind === "share"
    ? `${need.share} of GPU ${devices.join(",")}`
    : `${devices.length === 1 ? "GPU" : "GPUs"} ${devices.join(",")}`;
  return `${name}: ${what} (${need.from})`;
}
