// The devices as placement fills them: whole devices, shares, pins, and
// engines packed by MiB (a budget or a measured footprint). Pure: placement
// (placement.ts) drives it over one pool and one look.
import { type GpuNeed, GpuPlacementError } from "./need.ts";
import { deviceOf, type GpuSnapshot } from "./nvidia_smi.ts";

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
  /** MiB it takes on its device where packed by its budget or footprint (its `need` then the share of that device). */
  readonly mib?: number;
  /** MiB it keeps asleep where the launcher sleeps and wakes it (vLLM's routes): only that is held for it while others wake. */
  readonly residueMiB?: number;
}

/** A card's MiB on a device: its `gpu_memory`, else its footprints by device name; `residue` where the launcher sleeps and wakes it. */
export type CardMemory = {
  readonly budgetMiB?: number;
  readonly measured?: Readonly<Record<string, number>>;
  /** What it keeps asleep: measured by device name, else `estimate`. */
  readonly residue?: {
    readonly measured: Readonly<Record<string, number>>;
    readonly estimate: number;
  };
};
export type Memories = Readonly<Record<string, CardMemory>>;

/** What a layout starts from: engines kept, devices avoided, the look (totals, names), the cards' memory. */
export interface LayoutFacts {
  readonly held?: ReadonlyMap<string, GpuAssignment>;
  /** Left out of automatic placement; a pin there still holds. */
  readonly avoid?: ReadonlySet<string>;
  readonly snapshot?: GpuSnapshot | undefined;
  readonly memory?: Memories;
}

const WHOLE = 1_000_000;

export class Layout {
  readonly #explicit: boolean;
  readonly #order: readonly string[];
  readonly #numeric: boolean;
  readonly #open: readonly string[];
  readonly #snapshot: GpuSnapshot | undefined;
  readonly #memory: Memories;
  /** The held ones, then in placement order (for refusal messages). */
  readonly placed: Map<string, GpuAssignment>;

  constructor(
    pool: GpuPool,
    { held = new Map(), avoid = new Set(), snapshot, memory = {} }: LayoutFacts,
  ) {
    this.#explicit = pool.explicit;
    this.#snapshot = snapshot;
    this.#memory = memory;
    this.placed = new Map(held);
    const entries = [...new Set(pool.entries)];
    this.#numeric = entries.every(isIndex);
    this.#order = this.#numeric
      ? entries.sort((a, b) => Number(a) - Number(b))
      : entries;
    this.#open = this.#order.filter((entry) => !avoid.has(entry));
  }

  pin(name: string, need: GpuNeed): void {
    const units = unitsOf(need);
    for (const device of need.pinned!) {
      const pins = `its CUDA_VISIBLE_DEVICES pins GPU ${device}`;
      if (this.#explicit && !this.#order.includes(device)) {
        const pool = formatGpuList(this.#order);
        throw new GpuPlacementError(
          name,
          `${pins}, outside the pool ${pool} given by --gpus (expected devices from that pool, or a wider --gpus)`,
        );
      }
      const others = this.#on(device).map(([other]) => other);
      if (others.length > 0 && !this.#fits(device, units)) {
        const who = `${others.join(" and ")} also ${
          others.length === 1 ? "pins" : "pin"
        }`;
        throw new GpuPlacementError(
          name,
          `${pins}, which ${who} (expected each device pinned by one card, or by shares adding up to at most 1)`,
        );
      }
    }
    this.placed.set(name, { devices: need.pinned!, need });
  }

  takeWhole(name: string, need: GpuNeed & { kind: "whole" }): void {
    const { count } = need;
    const free = this.#open.filter((device) => this.#isFree(device));
    if (free.length < count) {
      const gpus = count === 1 ? "GPU" : "GPUs";
      const why =
        `needs ${count} ${gpus}, ${free.length} free ${this.#where()}`;
      throw new GpuPlacementError(name, why);
    }
    const devices = this.#adjacentRun(count) ?? free.slice(0, count);
    this.placed.set(name, { devices, need });
  }

  /** The first device in use it fits beside by MiB, else the lowest free one; false when its MiB are unknown. */
  pack(name: string, need: GpuNeed): boolean {
    const memory = this.#memory[name];
    if (!memory || need.kind === "unplaced") return false;
    if (need.kind === "whole" && need.count !== 1) return false;
    const sized = this.#open.flatMap((device) => {
      const mib = this.#mibOn(device, memory, need);
      return mib === undefined ? [] : [[device, mib] as const];
    });
    if (sized.length === 0) return false;
    const residueOn = (device: string) => this.#residueOn(device, memory);
    const pick = [...sized].sort(([a], [b]) =>
      Number(this.#isFree(a)) - Number(this.#isFree(b))
    ).find(([d, mib]) => this.#fits(d, 0, mib, residueOn(d)));
    if (pick === undefined) {
      if (memory.budgetMiB === undefined && !memory.residue) return false;
      const what = memory.budgetMiB === undefined
        ? `its ${mibText(sized[0]![1])} (${need.from})`
        : `its gpu_memory ${mibText(memory.budgetMiB)}`;
      const rule = memory.residue
        ? "expected room on a device to wake it while every other engine there that the launcher wakes sleeps"
        : "expected the budgets on each device to add up to at most its total";
      throw new GpuPlacementError(
        name,
        `${what} fits on no GPU: over-committed ${this.#where()} (${rule})`,
      );
    }
    const [device, mib] = pick;
    const { totalMiB, name: model } = deviceOf(device, this.#snapshot!)!;
    const from = memory.budgetMiB !== undefined
      ? `gpu_memory ${mibText(mib)}`
      : memory.measured?.[model ?? ""] === mib
      ? `measured ${mibText(mib)} on ${model}`
      : need.from;
    const share = Math.max(1e-4, Math.round((mib / totalMiB) * 1e4) / 1e4);
    const need_: GpuNeed = { kind: "share", share, from };
    const residueMiB = residueOn(device);
    this.placed.set(name, {
      devices: [device],
      need: need_,
      mib,
      ...residueMiB === undefined ? {} : { residueMiB },
    });
    return true;
  }

  /** Its budget, else its footprint on a device of that name, else (one the launcher wakes) its share; only where the total is known. */
  #mibOn(
    device: string,
    memory: CardMemory,
    need: GpuNeed,
  ): number | undefined {
    const known = this.#snapshot && deviceOf(device, this.#snapshot);
    if (!known?.memoryKnown) return undefined;
    const share = memory.residue && need.kind === "share"
      ? need.share * known.totalMiB
      : undefined;
    return memory.budgetMiB ??
      (known.name === undefined ? undefined : memory.measured?.[known.name]) ??
      share;
  }

  #residueOn(device: string, memory: CardMemory): number | undefined {
    const { residue } = memory;
    if (!residue) return undefined;
    const model = this.#snapshot && deviceOf(device, this.#snapshot)?.name;
    return residue.measured[model ?? ""] ?? residue.estimate;
  }

  takeShare(name: string, need: GpuNeed & { kind: "share" }): void {
    const { share } = need;
    const units = unitsOf(need);
    const device =
      this.#open.find((entry) =>
        !this.#isFree(entry) && this.#fits(entry, units)
      ) ?? this.#open.find((entry) => this.#isFree(entry));
    if (device === undefined) {
      throw new GpuPlacementError(
        name,
        `needs ${share} of a GPU, 0 free and none with ${share} left ${this.#where()}`,
      );
    }
    this.placed.set(name, { devices: [device], need });
  }

  #on(device: string): [string, GpuAssignment][] {
    return [...this.placed].filter(([, a]) => a.devices?.includes(device));
  }

  #isFree(device: string): boolean {
    return this.#on(device).length === 0;
  }

  /** Whether a share of `units` (or `mib`, by the device's ledger) fits beside the device's holds; a whole device never does. */
  #fits(
    device: string,
    units: number | undefined,
    mib?: number,
    residueMiB?: number,
  ): boolean {
    if (mib !== undefined) {
      const total = deviceOf(device, this.#snapshot!)!.totalMiB;
      const on = this.#on(device).map(([, a]) => a);
      const self: GpuAssignment = {
        devices: [device],
        need: UNITLESS,
        mib,
        ...residueMiB === undefined ? {} : { residueMiB },
      };
      return deviceLoad([...on, self], total) <= total;
    }
    const held = this.#on(device).map(([, a]) => unitsOf(a.need));
    if (units === undefined || held.includes(undefined)) return false;
    return held.reduce((sum: number, u) => sum + u!, units) <= WHOLE;
  }

  #adjacentRun(count: number): string[] | undefined {
    let run: string[] = [];
    for (const device of this.#open) {
      const last = run.at(-1);
      if (!this.#isFree(device)) run = [];
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
    const held = [...this.placed].flatMap(([name, a]) => {
      const { devices, need } = a;
      const inPool = devices?.filter((d) => this.#order.includes(d)) ?? [];
      const units = unitsOf(need);
      const on = inPool.join(",");
      const total = this.#snapshot && deviceOf(inPool[0]!, this.#snapshot);
      const what = a.mib !== undefined && total?.memoryKnown
        ? `${mibText(a.mib)} of ${total.totalMiB} MiB on GPU ${on}`
        : units === undefined
        ? on
        : `${units / WHOLE} of ${on}`;
      return inPool.length > 0 ? [`${name} holds ${what}`] : [];
    });
    const holds = held.length > 0 ? ` (${held.join("; ")})` : "";
    return `in pool ${formatGpuList(this.#order)}${holds}`;
  }
}

const UNITLESS: GpuNeed = { kind: "unplaced", from: "" };

/**
 * What a device must hold for its engines, the one ledger placement and the
 * budgets read: every engine's MiB, except that the engines the launcher
 * sleeps and wakes count their residue, plus room for the largest of them to
 * wake (the launcher puts the others to sleep first).
 *
 * @example `deviceLoad([{ devices: ["0"], need, mib: 10240, residueMiB: 1434 }], 24576)` is 10240.
 */
export function deviceLoad(
  on: readonly GpuAssignment[],
  totalMiB: number,
): number {
  let [held, wake] = [0, 0];
  for (const a of on) {
    const mib = heldOn(a, totalMiB);
    if (a.residueMiB === undefined) held += mib;
    else {
      held += a.residueMiB;
      wake = Math.max(wake, mib - a.residueMiB);
    }
  }
  return held + wake;
}

/** Its budget or footprint where packed by it, else its share of `totalMiB`: the one rule packing and the budgets read. */
export function heldOn(a: GpuAssignment, totalMiB: number): number {
  return a.mib ?? (unitsOf(a.need) ?? WHOLE) / WHOLE * totalMiB;
}

export function mibText(mib: number): string {
  return `${Math.ceil(mib)} MiB`;
}

export function unitsOf(need: GpuNeed): number | undefined {
  if (need.kind !== "share") return undefined;
  return Math.max(1, Math.min(WHOLE, Math.round(need.share * WHOLE)));
}

export function formatGpuList(entries: readonly string[]): string {
  const runs: string[][] = [];
  for (const entry of entries) {
    const last = runs.at(-1)?.at(-1);
    if (
      last && isIndex(last) && isIndex(entry) &&
      Number(entry) === Number(last) + 1
    ) {
      runs.at(-1)!.push(entry);
    } else runs.push([entry]);
  }
  return runs.map((run) => run.length > 1 ? `${run[0]}-${run.at(-1)}` : run[0])
    .join(",") || "none";
}

export function isIndex(entry: string): boolean {
  return /^\d+$/.test(entry);
}
