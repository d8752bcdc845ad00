/**
 * Folder `gpu/`: what a card needs and its placement on a pool (both pure:
 * functions of the pool, the cards and one `nvidia-smi` look), pool detection
 * and `nvidia-smi`, and the start gate. It knows nothing of HTTP and spawns no
 * engine.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { type GpuNeed, gpuNeed, GpuPlacementError } from "./need.ts";
import { deviceOf, type GpuSnapshot } from "./nvidia_smi.ts";

export interface GpuPool {
  readonly entries: readonly string[];
  // Given by --gpus: a pin outside it is refused. Another pool may name
  // devices differently from a card's CUDA_VISIBLE_DEVICES, so such pins are
  // only kept apart from each other.
  readonly explicit: boolean;
}

export interface GpuDetection {
  readonly pool: GpuPool | undefined;
  /** Where the pool came from, or why there is none. */
  readonly source: string;
  readonly warning?: string;
}

export interface GpuAssignment {
  /** `null`: not placed (its environment is left alone); `[]`: no GPU. */
  readonly devices: readonly string[] | null;
  readonly need: GpuNeed;
  /** MiB it takes on its device where packed by its budget or footprint (its `need` then the share of that device). */
  readonly mib?: number;
}

/** A card's MiB on a device: its `gpu_memory`, else its footprints by device name. */
export type CardMemory = {
  readonly budgetMiB?: number;
  readonly measured?: Readonly<Record<string, number>>;
};
type Memories = Readonly<Record<string, CardMemory>>;

/** What a layout starts from: engines kept, devices avoided, the look (totals, names), the cards' memory. */
interface LayoutFacts {
  readonly held?: ReadonlyMap<string, GpuAssignment>;
  /** Left out of automatic placement; a pin there still holds. */
  readonly avoid?: ReadonlySet<string>;
  readonly snapshot?: GpuSnapshot | undefined;
  readonly memory?: Memories;
}

/** Where every engine runs: plain data (`JSON.stringify` round-trips it). */
export interface Placement {
  readonly detection: GpuDetection;
  /** By catalogue name, in placement order. */
  readonly assigned: Readonly<Record<string, GpuAssignment>>;
  /** Pool entries left out of automatic placement: their memory reads as an error. */
  readonly avoid: readonly string[];
  readonly snapshot: GpuSnapshot | undefined;
  /** Whether engines get `CUDA_DEVICE_ORDER=PCI_BUS_ID`. */
  readonly pciOrder: boolean;
}

export type ReportLine = { level: "info" | "warn"; text: string };

/** @throws {GpuPlacementError} When a card does not fit. */
export function placeEngines(
  cards: readonly ModelCard[],
  detection: GpuDetection,
  snapshot: GpuSnapshot | undefined,
  cudaDeviceOrder: string | undefined,
  memory: Memories = {},
): Placement {
  const avoid =
    detection.pool?.entries.filter((e) =>
      snapshot && deviceOf(e, snapshot)?.error
    ) ?? [];
  const nothing = {
    detection,
    assigned: {},
    avoid,
    snapshot,
    // nvidia-smi numbers devices in PCI bus order, CUDA by default fastest
    // first: make the indices mean the same devices to the engine.
    pciOrder: detection.pool !== undefined &&
      !detection.source.includes("CUDA_VISIBLE_DEVICES") &&
      cudaDeviceOrder === undefined,
  };
  const all = new Set(cards.map((c) => c.name));
  return replacePlacement(nothing, cards, all, memory);
}

export function readsIntegerDevices(card: ModelCard): boolean {
  return ENGINE_KINDS[card.engine]?.integerDevices === true;
}

// For an engine reading integers, `GPU-<uuid>` entries become nvidia-smi's
// index (PCI bus order) where it lists them; MIG and unmapped entries stay.
function integerEntries(
  placement: Placement,
  card: ModelCard,
): string[] | undefined {
  const visible = gpuEnv(placement.assigned[card.name]).CUDA_VISIBLE_DEVICES;
  if (!visible || !readsIntegerDevices(card)) return undefined;
  const { snapshot } = placement;
  return visible.split(",").map((entry) =>
    isIndex(entry) || entry.startsWith("MIG-")
      ? entry
      : (snapshot && deviceOf(entry, snapshot)?.index) ?? entry
  );
}

export function devicesOf(
  placement: Placement,
  card: ModelCard,
): readonly string[] | null {
  return placement.assigned[card.name]?.devices ?? null;
}

export function placementEnv(
  placement: Placement,
  card: ModelCard,
): Record<string, string> {
  const env = gpuEnv(placement.assigned[card.name]);
  const integers = integerEntries(placement, card)?.join(",");
  const mapped = integers && integers !== env.CUDA_VISIBLE_DEVICES;
  if (integers) env.CUDA_VISIBLE_DEVICES = integers;
  if (
    (placement.pciOrder || mapped) && env.CUDA_VISIBLE_DEVICES &&
    card.env.CUDA_DEVICE_ORDER === undefined
  ) {
    env.CUDA_DEVICE_ORDER = "PCI_BUS_ID";
  }
  return env;
}

export function placementReport(
  placement: Placement,
  cards: readonly ModelCard[],
): ReportLine[] {
  const { detection, snapshot } = placement;
  const lines: ReportLine[] = [];
  if (detection.warning) lines.push({ level: "warn", text: detection.warning });
  lines.push({ level: "info", text: gpuPoolLine(detection) });
  for (const entry of placement.avoid) {
    lines.push({
      level: "warn",
      text: `GPU ${entry} reports its memory as an error (${
        deviceOf(entry, snapshot!)?.error
      }): left out of automatic placement; engines pinned there wait until it reports memory again`,
    });
  }
  for (const [name, a] of Object.entries(placement.assigned)) {
    lines.push({ level: "info", text: gpuLine(name, a) });
  }
  for (const card of cards) {
    const unmapped = integerEntries(placement, card)
      ?.filter((entry) => !isIndex(entry) && !entry.startsWith("MIG-")) ?? [];
    if (unmapped.length === 0) continue;
    lines.push({
      level: "warn",
      text: `engine ${card.name}: GPU ${
        unmapped.join(",")
      } passed as given, and its engine reads CUDA_VISIBLE_DEVICES as integers: nvidia-smi could not map them to indices`,
    });
  }
  return lines;
}

/**
 * The placement after a reload, on the same pool: engines not in `changed`
 * keep their devices, the changed ones are placed in what is left.
 *
 * @throws {GpuPlacementError} When a changed card does not fit.
 */
export function replacePlacement(
  placement: Placement,
  cards: readonly ModelCard[],
  changed: ReadonlySet<string>,
  memory: Memories = {},
): Placement {
  const held = new Map<string, GpuAssignment>();
  for (const card of cards) {
    const kept = placement.assigned[card.name];
    if (!changed.has(card.name) && kept) held.set(card.name, kept);
  }
  const changedCards = cards.filter((card) => changed.has(card.name));
  const { pool } = placement.detection;
  const avoid = new Set(placement.avoid);
  const facts = { held, snapshot: placement.snapshot, memory };
  let fresh;
  try {
    fresh = placeGpus(changedCards, pool, { ...facts, avoid });
  } catch (error) {
    // Devices in trouble are left out where the rest has room, else used (their engines then wait).
    if (avoid.size === 0) throw error;
    fresh = placeGpus(changedCards, pool, facts);
  }
  const assigned: Record<string, GpuAssignment> = {};
  for (const card of cards) {
    const a = fresh.get(card.name) ?? held.get(card.name);
    if (a) assigned[card.name] = a;
  }
  return { ...placement, assigned };
}

// The same request always gives the same layout. Whole devices: the lowest
// run of adjacent free ones, else the lowest free ones. A share: the first
// device with shares and room left, else the lowest free one.
export function placeGpus(
  cards: readonly ModelCard[],
  pool: GpuPool | undefined,
  options: LayoutFacts = {},
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
  const layout = new Layout(pool, options);
  const needs = cards.map((card) => [card.name, gpuNeed(card)] as const);
  // Pinned cards are placed before the rest.
  for (const [name, need] of needs) {
    if (need.pinned) layout.pin(name, need);
  }
  for (const [name, need] of needs) {
    if (need.pinned || layout.pack(name, need)) continue;
    if (need.kind === "whole") layout.takeWhole(name, need);
    if (need.kind === "share") layout.takeShare(name, need);
  }
  const result = new Map(needs.map(([name, need]) => [
    name,
    layout.placed.get(name) ?? { devices: null, need },
  ]));
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

function unplacedLayout(
  cards: readonly ModelCard[],
): Map<string, GpuAssignment> {
  return new Map(cards.map((card): [string, GpuAssignment] => {
    const need: GpuNeed =
      card.env["CUDA_VISIBLE_DEVICES"] === undefined && card.gpus !== 0
        ? { kind: "unplaced", from: "no GPU pool" }
        : gpuNeed(card);
    const devices = need.kind === "unplaced" ? null : need.pinned ?? [];
    return [card.name, { devices, need }];
  }));
}

// Shares in millionths of a device, so that 0.3 + 0.3 + 0.4 fills one exactly.
const WHOLE = 1_000_000;

class Layout {
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
      if (this.#explicit && !this.#order.includes(device)) {
        throw new GpuPlacementError(
          name,
          `its CUDA_VISIBLE_DEVICES pins GPU ${device}, outside the pool ${
            formatGpuList(this.#order)
          } given by --gpus (expected devices from that pool, or a wider --gpus)`,
        );
      }
      const others = this.#on(device).map(([other]) => other);
      if (others.length > 0 && !this.#fits(device, units)) {
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
    this.placed.set(name, { devices: need.pinned!, need });
  }

  takeWhole(name: string, need: GpuNeed & { kind: "whole" }): void {
    const { count } = need;
    const free = this.#open.filter((device) => this.#isFree(device));
    if (free.length < count) {
      throw new GpuPlacementError(
        name,
        `needs ${count} ${
          count === 1 ? "GPU" : "GPUs"
        }, ${free.length} free ${this.#where()}`,
      );
    }
    const devices = this.#adjacentRun(count) ?? free.slice(0, count);
    this.placed.set(name, { devices, need });
  }

  /**
   * One device's worth by MiB: the first device in use it fits beside, else
   * the lowest free one. False when nothing is known of it (today's way then).
   * @throws {GpuPlacementError} When a budget fits nowhere: an over-commit.
   */
  pack(name: string, need: GpuNeed): boolean {
    const memory = this.#memory[name];
    if (!memory || need.kind === "unplaced") return false;
    if (need.kind === "whole" && need.count !== 1) return false;
    const sized = this.#open.flatMap((device) => {
      const mib = this.#mibOn(device, memory);
      return mib === undefined ? [] : [[device, mib] as const];
    });
    if (sized.length === 0) return false;
    const pick = [...sized].sort(([a], [b]) =>
      Number(this.#isFree(a)) - Number(this.#isFree(b))
    ).find(([d, mib]) => this.#fits(d, 0, mib));
    if (pick === undefined) {
      if (memory.budgetMiB === undefined) return false;
      throw new GpuPlacementError(
        name,
        `its gpu_memory ${
          mibText(memory.budgetMiB)
        } fits on no GPU: over-committed ${this.#where()} (expected the budgets on each device to add up to at most its total)`,
      );
    }
    const [device, mib] = pick;
    const { totalMiB, name: model } = deviceOf(device, this.#snapshot!)!;
    const from = memory.budgetMiB === undefined
      ? `measured ${mibText(mib)} on ${model}`
      : `gpu_memory ${mibText(mib)}`;
    const share = Math.max(1e-4, Math.round((mib / totalMiB) * 1e4) / 1e4);
    const need_: GpuNeed = { kind: "share", share, from };
    this.placed.set(name, { devices: [device], need: need_, mib });
    return true;
  }

  /** Its budget, else its footprint on a device of that name; only where the total is known. */
  #mibOn(device: string, memory: CardMemory): number | undefined {
    const known = this.#snapshot && deviceOf(device, this.#snapshot);
    if (!known?.memoryKnown) return undefined;
    return memory.budgetMiB ??
      (known.name === undefined ? undefined : memory.measured?.[known.name]);
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

  /** Whether a share of `units` (or `mib`, summed exactly) fits beside the device's holds; a whole device never does. */
  #fits(device: string, units: number | undefined, mib?: number): boolean {
    if (mib !== undefined) {
      const total = deviceOf(device, this.#snapshot!)!.totalMiB;
      return this.#on(device).reduce(
        (sum, [, a]) =>
          sum + (a.mib ?? (unitsOf(a.need) ?? NaN) / WHOLE * total),
        mib,
      ) <= total;
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
      const share = a.mib !== undefined
        ? `${mibText(a.mib)} of `
        : units === undefined
        ? ""
        : `${units / WHOLE} of `;
      return inPool.length > 0
        ? [`${name} holds ${share}${inPool.join(",")}`]
        : [];
    });
    return `in pool ${formatGpuList(this.#order)}${
      held.length > 0 ? ` (${held.join("; ")})` : ""
    }`;
  }
}

function mibText(mib: number): string {
  return `${Math.ceil(mib)} MiB`;
}

function unitsOf(need: GpuNeed): number | undefined {
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

function isIndex(entry: string): boolean {
  return /^\d+$/.test(entry);
}

/** Nothing for a pinned card: its own `env` already says it, exactly as written. */
export function gpuEnv(
  assignment: GpuAssignment | undefined,
): Record<string, string> {
  if (!assignment?.devices || assignment.need.pinned) return {};
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

export function gpuPoolLine(detection: GpuDetection): string {
  return detection.pool === undefined
    ? `GPUs not placed (${detection.source}): engines get no CUDA_VISIBLE_DEVICES from the launcher`
    : `GPU pool ${
      formatGpuList(detection.pool.entries)
    } (from ${detection.source})`;
}

// The start gate's rule 1 known in advance, for `--dry-run`: engine name →
// the earlier engines (request order) sharing one of its devices.
export function startWaits(
  engines: readonly {
    readonly name: string;
    readonly devices: readonly string[] | null;
  }[],
): Map<string, string[]> {
  return new Map(engines.map((engine, i) => [
    engine.name,
    engines.slice(0, i).filter((earlier) =>
      earlier.devices?.some((device) => engine.devices?.includes(device))
    ).map((earlier) => earlier.name),
  ]));
}
