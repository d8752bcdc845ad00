/**
 * GPU placement as data: every card placed on the pool, each engine's devices
 * and the environment that hands them over, the report lines, and a reload's
 * placement; pure functions of the pool, the cards and one `nvidia-smi` look.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { type GpuDetection, gpuPoolLine } from "./detect.ts";
import { type GpuAssignment, gpuEnv, gpuLine, placeGpus } from "./placement.ts";
import { deviceOf, type GpuSnapshot } from "./nvidia_smi.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";

/** Where every engine runs: plain data (`JSON.stringify` round-trips it). */
export interface Placement {
  /** Where the pool came from (the pool itself, its source, a warning). */
  readonly detection: GpuDetection;
  /** What each card was given (devices and need), by catalogue name, in placement order. */
  readonly assigned: Readonly<Record<string, GpuAssignment>>;
  /** Pool entries left out of automatic placement: their memory reads as an error. */
  readonly avoid: readonly string[];
  /** The look the placement read (integer indices, errors). */
  readonly snapshot: GpuSnapshot | undefined;
  /** Whether engines get `CUDA_DEVICE_ORDER=PCI_BUS_ID` (see {@linkcode placeEngines}). */
  readonly pciOrder: boolean;
}

/** One line to log, as the start-up reports placement. */
export interface ReportLine {
  readonly level: "info" | "warn";
  readonly text: string;
}

/**
 * Places every card on the detected pool.
 *
 * @throws {GpuPlacementError} When a card does not fit.
 */
export function placeEngines(
  cards: readonly ModelCard[],
  detection: GpuDetection,
  snapshot: GpuSnapshot | undefined,
  cudaDeviceOrder: string | undefined,
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
  return replacePlacement(nothing, cards, new Set(cards.map((c) => c.name)));
}

/** Whether the card's engine reads `CUDA_VISIBLE_DEVICES` entries as integers (vLLM). */
export function readsIntegerDevices(card: ModelCard): boolean {
  return ENGINE_KINDS[card.engine]?.integerDevices === true;
}

/**
 * For an engine reading integers, its placed `GPU-<uuid>` entries as
 * nvidia-smi's index (PCI bus order) where it lists them; MIG and unmapped
 * entries stay.
 */
function integerEntries(
  placement: Placement,
  card: ModelCard,
): { entries: string[]; mapped: boolean; unmapped: string[] } | undefined {
  const visible = gpuEnv(placement.assigned[card.name]).CUDA_VISIBLE_DEVICES;
  if (!visible || !readsIntegerDevices(card)) return undefined;
  let mapped = false;
  const unmapped: string[] = [];
  const entries = visible.split(",").map((entry) => {
    if (/^\d+$/.test(entry) || entry.startsWith("MIG-")) return entry;
    const index = placement.snapshot &&
      deviceOf(entry, placement.snapshot)?.index;
    if (index === undefined) unmapped.push(entry);
    else mapped = true;
    return index ?? entry;
  });
  return { entries, mapped, unmapped };
}

/** A card's devices: `[]` for none, null when not placed. */
export function devicesOf(
  placement: Placement,
  card: ModelCard,
): readonly string[] | null {
  return placement.assigned[card.name]?.devices ?? null;
}

/** The environment that hands a card its devices. */
export function placementEnv(
  placement: Placement,
  card: ModelCard,
): Record<string, string> {
  const env = gpuEnv(placement.assigned[card.name]);
  const integers = integerEntries(placement, card);
  if (integers) env.CUDA_VISIBLE_DEVICES = integers.entries.join(",");
  if (
    (placement.pciOrder || integers?.mapped) && env.CUDA_VISIBLE_DEVICES &&
    card.env.CUDA_DEVICE_ORDER === undefined
  ) {
    env.CUDA_DEVICE_ORDER = "PCI_BUS_ID";
  }
  return env;
}

/**
 * The pool and each engine's devices, as the start logs them: one warning per
 * device left out for an error, one per card of an engine reading integers
 * whose `GPU-<uuid>` entries could not be mapped.
 */
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
    const unmapped = integerEntries(placement, card)?.unmapped ?? [];
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
 * The placement after a reload (or the first, from nothing), on the same pool:
 * engines not in `changed` keep their devices, the changed ones are placed in
 * what is free plus their own old devices.
 *
 * @throws {GpuPlacementError} When a changed card does not fit.
 */
export function replacePlacement(
  placement: Placement,
  cards: readonly ModelCard[],
  changed: ReadonlySet<string>,
): Placement {
  const held = new Map<string, GpuAssignment>();
  for (const card of cards) {
    const kept = placement.assigned[card.name];
    if (!changed.has(card.name) && kept) held.set(card.name, kept);
  }
  const changedCards = cards.filter((card) => changed.has(card.name));
  const { pool } = placement.detection;
  const avoid = new Set(placement.avoid);
  let fresh;
  try {
    fresh = placeGpus(changedCards, pool, { held, avoid });
  } catch (error) {
    // Devices in trouble are left out where the rest has room, else used (their engines then wait).
    if (avoid.size === 0) throw error;
    fresh = placeGpus(changedCards, pool, { held });
  }
  const assigned: Record<string, GpuAssignment> = {};
  for (const card of cards) {
    const a = fresh.get(card.name) ?? held.get(card.name);
    if (a) assigned[card.name] = a;
  }
  return { ...placement, assigned };
}
