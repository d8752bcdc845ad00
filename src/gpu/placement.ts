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
import {
  formatGpuList,
  type GpuAssignment,
  type GpuPool,
  isIndex,
  Layout,
  type LayoutFacts,
  type Memories,
} from "./layout.ts";

export interface GpuDetection {
  readonly pool: GpuPool | undefined;
  /** Where the pool came from, or why there is none. */
  readonly source: string;
  readonly warning?: string;
}

/** Where every engine runs: plain data (`JSON.stringify` round-trips it). */
export interface Placement {
  readonly detection: GpuDetection;
  /** By catalogue name, in placement order. */
  readonly assigned: Readonly<Record<string, GpuAssignment>>;
  /** Pool entries left out of automatic placement: their memory reads as an error. */
  readonly avoid: readonly string[];
  readonly snapshot: GpuSnapshot | undefined;
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
  const warn = (text: string) => lines.push({ level: "warn", text });
  const info = (text: string) => lines.push({ level: "info", text });
  if (detection.warning) warn(detection.warning);
  info(gpuPoolLine(detection));
  for (const entry of placement.avoid) {
    const error = deviceOf(entry, snapshot!)?.error;
    warn(
      `GPU ${entry} reports its memory as an error (${error}): left out of automatic placement; engines pinned there wait until it reports memory again`,
    );
  }
  for (const [name, a] of Object.entries(placement.assigned)) {
    info(gpuLine(name, a));
  }
  for (const card of cards) {
    const unmapped = integerEntries(placement, card)
      ?.filter((entry) => !isIndex(entry) && !entry.startsWith("MIG-")) ?? [];
    if (unmapped.length === 0) continue;
    const gpus = unmapped.join(",");
    warn(
      `engine ${card.name}: GPU ${gpus} passed as given, and its engine reads CUDA_VISIBLE_DEVICES as integers: nvidia-smi could not map them to indices`,
    );
  }
  return lines;
}

/** Engines not in `changed` keep their devices. @throws {GpuPlacementError} A changed card does not fit. */
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
  const again = "it is requested twice (expected each model once)";
  if (twice) throw new GpuPlacementError(twice.name, again);
  if (pool === undefined) return unplacedLayout(cards);
  const layout = new Layout(pool, options);
  const needs = cards.map((card) => [card.name, gpuNeed(card)] as const);
  for (const [name, need] of needs) if (need.pinned) layout.pin(name, need);
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
      const given = devices.join(",");
      throw new GpuPlacementError(
        name,
        `needs ${devices.length} devices (${need.from}), given ${given}: a CUDA process sees one MIG instance (expected a tensor parallelism of 1 on MIG)`,
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
