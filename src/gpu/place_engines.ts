/**
 * GPU placement as the launcher composes it: find the pool, place every card,
 * and hand each engine its devices through its environment.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { detectGpuPool, type GpuDetection, gpuPoolLine } from "./detect.ts";
import {
  type GpuAssignment,
  gpuEnv,
  gpuLine,
  placeGpus,
  type PlaceOptions,
} from "./placement.ts";
import { deviceOf, type GpuQuery, type GpuSnapshot } from "./nvidia_smi.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { log } from "../common/log.ts";

/** Each engine's devices and the environment that hands them over. */
export interface Placement {
  env(card: ModelCard): Record<string, string>;
  devices(card: ModelCard): readonly string[] | null;
  /** What the card was given (devices and need), by catalogue name. */
  assignment(card: ModelCard): GpuAssignment | undefined;
  /** Where the pool came from (the pool itself, its source, a warning). */
  readonly detection: GpuDetection;
  /**
   * The pool and each engine's devices, logged once start-up checks have
   * passed: one warning per device left out for an error, and one per card of
   * an engine reading integers whose `GPU-<uuid>` entries could not be mapped.
   */
  report(cards?: readonly ModelCard[]): void;
  /**
   * The placement after a reload, on the same pool: engines not in `changed`
   * keep their devices, the changed ones are placed in what is free plus
   * their own old devices. Pure: nothing is detected again, nothing logged.
   * Throws `GpuPlacementError` (one line) when a changed card does not fit.
   */
  replan(cards: readonly ModelCard[], changed: ReadonlySet<string>): Placement;
}

/**
 * Finds the GPU pool and places every card on it, logging the pool and each
 * engine's devices. Throws `GpuPlacementError` (one line) when a card does not fit.
 */
export async function placeEngines(
  cards: readonly ModelCard[],
  gpus: string | undefined,
  query?: Promise<GpuQuery>,
): Promise<Placement> {
  const detection = await detectGpuPool({
    ...(gpus === undefined ? {} : { gpus }),
    ...(query === undefined ? {} : { query }),
  });
  const look = await query;
  const snapshot = look?.ok ? look.snapshot : undefined;
  const avoid = new Set(
    detection.pool?.entries.filter((e) =>
      snapshot && deviceOf(e, snapshot)?.error
    ),
  );
  return composePlacement(
    detection,
    placeAvoiding(cards, detection.pool, { avoid }),
    snapshot,
    avoid,
  );
}

/** Placement leaving out devices in trouble where the rest has room, else on the whole pool (their engines then wait). */
function placeAvoiding(
  cards: readonly ModelCard[],
  pool: GpuDetection["pool"],
  options: PlaceOptions,
): Map<string, GpuAssignment> {
  try {
    return placeGpus(cards, pool, options);
  } catch (error) {
    if (!options.avoid?.size) throw error;
    return placeGpus(cards, pool, { ...options, avoid: new Set() });
  }
}

/**
 * Whether the card's engine reads `CUDA_VISIBLE_DEVICES` entries as integers
 * (vLLM): it needs nvidia-smi's indices for `GPU-<uuid>` entries.
 *
 * @param card The card.
 * @returns True for such an engine.
 *
 * @example
 * ```ts ignore
 * readsIntegerDevices(vllmCard); // true
 * ```
 */
export function readsIntegerDevices(card: ModelCard): boolean {
  return ENGINE_KINDS[card.engine]?.integerDevices === true;
}

/**
 * Entries as an engine that reads `CUDA_VISIBLE_DEVICES` as integers needs
 * them: `GPU-<uuid>` entries become nvidia-smi's index (PCI bus order) where
 * it lists them; MIG entries and entries it cannot map stay as given.
 */
function integerEntries(
  entries: readonly string[],
  snapshot: GpuSnapshot | undefined,
): { entries: string[]; mapped: boolean; unmapped: string[] } {
  let mapped = false;
  const unmapped: string[] = [];
  const out = entries.map((entry) => {
    if (/^\d+$/.test(entry) || entry.startsWith("MIG-")) return entry;
    const index = snapshot && deviceOf(entry, snapshot)?.index;
    if (index === undefined) unmapped.push(entry);
    else mapped = true;
    return index ?? entry;
  });
  return { entries: out, mapped, unmapped };
}

function composePlacement(
  detection: GpuDetection,
  placed: ReadonlyMap<string, GpuAssignment>,
  snapshot: GpuSnapshot | undefined,
  avoid: ReadonlySet<string>,
): Placement {
  // nvidia-smi numbers devices in PCI bus order, CUDA by default fastest first:
  // make the indices mean the same devices to the engine.
  const pciOrder = detection.pool !== undefined &&
    !detection.source.includes("CUDA_VISIBLE_DEVICES") &&
    Deno.env.get("CUDA_DEVICE_ORDER") === undefined;
  function assignment(card: ModelCard): GpuAssignment | undefined {
    return placed.get(card.name);
  }
  return {
    detection,
    assignment,
    env(card) {
      const env = gpuEnv(assignment(card));
      const visible = env.CUDA_VISIBLE_DEVICES;
      const integers = visible !== undefined &&
          readsIntegerDevices(card)
        ? integerEntries(visible.split(","), snapshot)
        : undefined;
      if (integers) env.CUDA_VISIBLE_DEVICES = integers.entries.join(",");
      if (
        (pciOrder || integers?.mapped) && visible &&
        card.env.CUDA_DEVICE_ORDER === undefined
      ) {
        env.CUDA_DEVICE_ORDER = "PCI_BUS_ID";
      }
      return env;
    },
    devices(card) {
      return assignment(card)?.devices ?? null;
    },
    report(cards = []) {
      if (detection.warning) log.warn(detection.warning);
      log.info(gpuPoolLine(detection));
      for (const entry of avoid) {
        log.warn(
          `GPU ${entry} reports its memory as an error (${
            deviceOf(entry, snapshot!)?.error
          }): left out of automatic placement; engines pinned there wait until it reports memory again`,
        );
      }
      for (const [name, a] of placed) log.info(gpuLine(name, a));
      for (const card of cards) {
        const visible = gpuEnv(assignment(card)).CUDA_VISIBLE_DEVICES;
        if (!visible || !readsIntegerDevices(card)) continue;
        const { unmapped } = integerEntries(visible.split(","), snapshot);
        if (unmapped.length === 0) continue;
        log.warn(
          `engine ${card.name}: GPU ${
            unmapped.join(",")
          } passed as given, and its engine reads CUDA_VISIBLE_DEVICES as integers: nvidia-smi could not map them to indices`,
        );
      }
    },
    replan(cards, changed) {
      const held = new Map<string, GpuAssignment>();
      for (const card of cards) {
        const kept = placed.get(card.name);
        if (!changed.has(card.name) && kept) held.set(card.name, kept);
      }
      const fresh = placeAvoiding(
        cards.filter((card) => changed.has(card.name)),
        detection.pool,
        { held, avoid },
      );
      const next = new Map<string, GpuAssignment>();
      for (const card of cards) {
        const a = fresh.get(card.name) ?? held.get(card.name);
        if (a) next.set(card.name, a);
      }
      return composePlacement(detection, next, snapshot, avoid);
    },
  };
}
