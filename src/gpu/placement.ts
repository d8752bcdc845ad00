/**
 * GPU placement: which devices of the pool each engine gets. A pure function of
 * the cards' needs (see {@linkcode gpuNeed}) and the pool; detection of the pool
 * lives in `detect.ts`, and `place_engines.ts` composes the two for `serve`.
 *
 * Folder `gpu/`: what a card needs, placement on a pool (both pure), pool
 * detection and `nvidia-smi`, the launcher's placement composition, and the
 * start gate that says when a start may happen. It knows nothing of HTTP and
 * spawns no engine.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { type GpuNeed, gpuNeed, GpuPlacementError } from "./need.ts";

export {
  type GpuNeed,
  gpuNeed,
  GpuPlacementError,
  parseVisibleDevices,
} from "./need.ts";

/**
 * The devices the launcher may hand out.
 *
 * @example
 * ```ts ignore
 * const pool: GpuPool = { entries: ["0", "1", "2", "3"], explicit: true }; // --gpus 0-3
 * ```
 */
export interface GpuPool {
  /** Device entries as they will be written into `CUDA_VISIBLE_DEVICES`: indices or `GPU-<uuid>`. */
  readonly entries: readonly string[];
  /**
   * True when the operator gave the pool with `--gpus`: a card pinned to a
   * device outside it is then refused. A pool read from the launcher's
   * environment or from `nvidia-smi` may name devices differently from a
   * card's `CUDA_VISIBLE_DEVICES`, so such pins are only kept apart from
   * each other.
   */
  readonly explicit: boolean;
}

/** What one engine was given. */
export interface GpuAssignment {
  /**
   * The device entries handed to the engine: `null` when not placed (its
   * environment is left alone), `[]` for no GPU (`CUDA_VISIBLE_DEVICES=""`).
   * For a pinned card, the entries its own `CUDA_VISIBLE_DEVICES` names.
   */
  readonly devices: readonly string[] | null;
  /** What the card needs; `need.pinned` is set for a pinned card. */
  readonly need: GpuNeed;
}

/**
 * Places every card on the pool, in this order: pinned cards (their own
 * `env.CUDA_VISIBLE_DEVICES`) first, then the others in request order, so the
 * same request always gives the same layout.
 *
 * - A whole-device need takes the lowest run of adjacent free devices (indices
 *   that follow each other; for a pool with non-numeric entries, entries that
 *   follow each other in the pool), else the lowest free devices.
 * - A share goes to the first device already holding shares with room left,
 *   else to the lowest free device. Shares are summed in millionths, so
 *   0.3 + 0.3 + 0.4 fills a device exactly.
 * - Pinned cards may share a device only when all of them are shares adding up
 *   to at most 1.
 *
 * Without a pool nothing is placed: every card maps to `null` (today's
 * behaviour), except that a pinned card reports its own entries and a card with
 * `gpus: 0` still gets `[]`, since it asked to see no GPU whatever the machine.
 * Nothing is refused then.
 *
 * On a reload, `options.held` names the engines that keep their devices (the
 * unchanged ones): their devices are taken before anything is placed, and
 * `cards` are then only the changed ones, placed in what is left (their own
 * old devices are free again, since they are not held).
 *
 * @param cards The requested cards, in request order; names must be unique.
 * @param pool The pool, or `undefined` for none (`--gpus none`, or nothing
 *   detected).
 * @param options `held`: assignments already in force, by engine name, that
 *   `cards` must fit around.
 * @returns Each card's assignment, keyed by catalogue name, in request order.
 * @throws {GpuPlacementError} When a card does not fit, two pinned cards clash,
 *   a pinned device lies outside an explicit pool, or a card's parallel settings
 *   are not a device count.
 *
 * @example
 * ```ts ignore
 * const placed = placeGpus([llama70b, qwen8b], { entries: ["0", "1", "2", "3", "4"], explicit: true });
 * placed.get("llama-3.3-70b")?.devices; // ["0", "1", "2", "3"]
 * placed.get("qwen3-8b")?.devices; // ["4"]
 * ```
 */
export function placeGpus(
  cards: readonly ModelCard[],
  pool: GpuPool | undefined,
  options: PlaceOptions = {},
): Map<string, GpuAssignment> {
  const names = new Set<string>();
  for (const card of cards) {
    if (names.has(card.name)) {
      throw new GpuPlacementError(
        card.name,
        "it is requested twice (expected each model once)",
      );
    }
    names.add(card.name);
  }
  if (pool === undefined) return unplacedLayout(cards);
  const layout = new Layout(pool, options.avoid);
  for (const [name, assignment] of options.held ?? []) {
    layout.keep(name, assignment);
  }
  const needs = new Map(cards.map((card) => [card.name, gpuNeed(card)]));
  const result = new Map<string, GpuAssignment>();
  // Insert in request order first; pinned cards are placed before the rest.
  for (const card of cards) {
    result.set(card.name, { devices: null, need: needs.get(card.name)! });
  }
  for (const card of cards) {
    const need = needs.get(card.name)!;
    if (need.kind !== "unplaced" && need.pinned !== undefined) {
      result.set(card.name, { devices: layout.pin(card.name, need), need });
    }
  }
  for (const card of cards) {
    const need = needs.get(card.name)!;
    if (need.kind === "unplaced" || need.pinned !== undefined) continue;
    const devices = need.kind === "whole"
      ? layout.takeWhole(card.name, need.count)
      : layout.takeShare(card.name, need.share);
    result.set(card.name, { devices, need });
  }
  for (const [name, { devices, need }] of result) {
    const mig = devices?.filter((d) => d.startsWith("MIG-")) ?? [];
    if (mig.length > 0 && devices!.length > 1) {
      // A CUDA process sees one MIG device, whatever CUDA_VISIBLE_DEVICES lists.
      throw new GpuPlacementError(
        name,
        `needs ${devices!.length} devices (${need.from}), given ${
          devices!.join(",")
        }: a CUDA process sees one MIG instance (expected a tensor parallelism of 1 on MIG)`,
      );
    }
  }
  return result;
}

/** Settings of {@linkcode placeGpus}. */
export interface PlaceOptions {
  /**
   * Assignments in force that stay as they are (a reload's unchanged
   * engines): their devices are taken first.
   */
  held?: ReadonlyMap<string, GpuAssignment>;
  /**
   * Pool entries automatic placement leaves out (a device reporting its
   * memory as an error); a pin there still holds.
   */
  avoid?: ReadonlySet<string>;
}

/** The layout without a pool: only pinned and `gpus: 0` cards say anything. */
function unplacedLayout(
  cards: readonly ModelCard[],
): Map<string, GpuAssignment> {
  const result = new Map<string, GpuAssignment>();
  for (const card of cards) {
    if (card.env["CUDA_VISIBLE_DEVICES"] !== undefined || card.gpus === 0) {
      const need = gpuNeed(card);
      const devices = need.kind === "unplaced" ? null : need.pinned ?? [];
      result.set(card.name, { devices, need });
    } else {
      result.set(card.name, {
        devices: null,
        need: { kind: "unplaced", from: "no GPU pool" },
      });
    }
  }
  return result;
}

/** Shares are counted in millionths of a device so that sums are exact. */
const WHOLE = 1_000_000;

/** Who holds one device: one card whole, or cards with shares. */
interface Holding {
  whole?: string;
  shares: { name: string; units: number }[];
}

/** The pool's devices and who holds them, while placing. */
class Layout {
  readonly #pool: GpuPool;
  /** Pool entries, lowest first (numerically when every entry is an index). */
  readonly #order: readonly string[];
  readonly #numeric: boolean;
  /** Every held entry, in the pool or (pinned) not. */
  readonly #held = new Map<string, Holding>();
  /** Who holds what, in placement order, for refusal messages. */
  readonly #holders: { name: string; devices: string[]; units?: number }[] = [];

  /** Entries open to automatic placement, lowest first. */
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

  /** Records a pinned card's entries; refuses clashes and pins outside an explicit pool. */
  pin(name: string, need: Exclude<GpuNeed, { kind: "unplaced" }>): string[] {
    const devices = [...need.pinned!];
    const units = need.kind === "share" ? toUnits(need.share) : WHOLE;
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
      const used = holding.shares.reduce((sum, s) => sum + s.units, 0);
      if (
        holding.whole !== undefined || need.kind === "whole" ||
        used + units > WHOLE
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
    for (const device of devices) this.#hold(name, device, need.kind, units);
    this.#holders.push(
      need.kind === "share" ? { name, devices, units } : { name, devices },
    );
    return devices;
  }

  /** Takes what an engine already holds (a reload's unchanged engine), as it holds it. */
  keep(name: string, assignment: GpuAssignment): void {
    const { devices, need } = assignment;
    if (devices === null || devices.length === 0 || need.kind === "unplaced") {
      return;
    }
    const units = need.kind === "share" ? toUnits(need.share) : WHOLE;
    for (const device of devices) this.#hold(name, device, need.kind, units);
    this.#holders.push(
      need.kind === "share"
        ? { name, devices: [...devices], units }
        : { name, devices: [...devices] },
    );
  }

  /** Takes `count` whole free devices: the lowest adjacent run, else the lowest free ones. */
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
    const devices = this.#adjacentRun(count) ?? free.slice(0, count);
    for (const device of devices) this.#hold(name, device, "whole", WHOLE);
    this.#holders.push({ name, devices });
    return devices;
  }

  /** Takes a share of the first device holding shares with room, else of the lowest free device. */
  takeShare(name: string, share: number): string[] {
    const units = toUnits(share);
    const device = this.#open.find((entry) => {
      const holding = this.#held.get(entry);
      return holding !== undefined && holding.whole === undefined &&
        holding.shares.reduce((sum, s) => sum + s.units, 0) + units <= WHOLE;
    }) ?? this.#open.find((entry) => !this.#held.has(entry));
    if (device === undefined) {
      throw new GpuPlacementError(
        name,
        `needs ${share} of a GPU, 0 free and none with ${share} left ${this.#where()}`,
      );
    }
    this.#hold(name, device, "share", units);
    this.#holders.push({ name, devices: [device], units });
    return [device];
  }

  #hold(
    name: string,
    device: string,
    kind: "whole" | "share",
    units: number,
  ): void {
    const holding = this.#held.get(device) ?? { shares: [] };
    if (kind === "whole") holding.whole = name;
    else holding.shares.push({ name, units });
    this.#held.set(device, holding);
  }

  /** The first `count` free devices in a row with no gap between them. */
  #adjacentRun(count: number): string[] | undefined {
    let run: string[] = [];
    for (const device of this.#open) {
      const last = run.at(-1);
      if (this.#held.has(device)) run = [];
      else if (last !== undefined && !this.#adjacent(last, device)) {
        run = [device];
      } else run.push(device);
      if (run.length === count) return run;
    }
    return undefined;
  }

  #adjacent(a: string, b: string): boolean {
    return !this.#numeric || Number(b) === Number(a) + 1;
  }

  /** `in pool 0-3 (a holds 0,1; b holds 0.3 of 2)`. */
  #where(): string {
    const inPool = new Set(this.#order);
    const held = this.#holders.map((holder) => ({
      ...holder,
      devices: holder.devices.filter((device) => inPool.has(device)),
    })).filter((holder) => holder.devices.length > 0).map((holder) =>
      `${holder.name} holds ${
        holder.units === undefined ? "" : `${holder.units / WHOLE} of `
      }${holder.devices.join(",")}`
    );
    return `in pool ${formatGpuList(this.#order)}${
      held.length > 0 ? ` (${held.join("; ")})` : ""
    }`;
  }
}

function toUnits(share: number): number {
  return Math.max(1, Math.min(WHOLE, Math.round(share * WHOLE)));
}

/**
 * Formats device entries compactly: runs of consecutive indices as ranges,
 * everything else as written, comma-separated, in the order given.
 *
 * @param entries Device entries, e.g. from a {@linkcode GpuPool}.
 * @returns `0-3`, `0,2,4-5`, `GPU-a,GPU-b`, or `none` for no entries.
 *
 * @example
 * ```ts ignore
 * formatGpuList(["0", "2", "4", "5"]); // "0,2,4-5"
 * ```
 */
export function formatGpuList(entries: readonly string[]): string {
  if (entries.length === 0) return "none";
  const parts: string[] = [];
  let i = 0;
  while (i < entries.length) {
    // Extend a run while each next entry is the previous index + 1.
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

/**
 * The environment the launcher adds to an engine's for its assignment:
 * `CUDA_VISIBLE_DEVICES` with the entries comma-separated (`""` for no GPU),
 * or nothing when the card was not placed or is pinned (its own `env` already
 * says it, exactly as written). Merge it after the card's `env`.
 *
 * @param assignment The card's assignment from {@linkcode placeGpus}.
 * @returns The variables to add.
 *
 * @example
 * ```ts ignore
 * gpuEnv({ devices: ["0", "1"], need: { kind: "whole", count: 2, from: "gpus: 2" } });
 * // { CUDA_VISIBLE_DEVICES: "0,1" }
 * ```
 */
export function gpuEnv(
  assignment: GpuAssignment | undefined,
): Record<string, string> {
  if (assignment === undefined || assignment.devices === null) return {};
  const need = assignment.need;
  if (need.kind !== "unplaced" && need.pinned !== undefined) return {};
  return { CUDA_VISIBLE_DEVICES: assignment.devices.join(",") };
}

/**
 * One start-up line for an engine's devices, e.g.
 * `llama-3.3-70b: GPUs 0,1,2,3 (tensor-parallel-size 4)`,
 * `bge-m3: 0.3 of GPU 4 (gpu-memory-utilization 0.3)`,
 * `tiny: no GPU (gpus: 0)`, `tool: GPUs not placed (engine command)`.
 *
 * @param name The catalogue name.
 * @param assignment The card's assignment from {@linkcode placeGpus}.
 * @returns The line, without the logger's prefix.
 *
 * @example
 * ```ts ignore
 * for (const [name, assignment] of placed) log.info(gpuLine(name, assignment));
 * ```
 */
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
