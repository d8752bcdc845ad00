/**
 * GPU placement as the launcher composes it: find the pool, place every card,
 * and hand each engine its devices through its environment.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { detectGpuPool, type GpuDetection, gpuPoolLine } from "./detect.ts";
import { type GpuAssignment, gpuEnv, gpuLine, placeGpus } from "./placement.ts";
import type { GpuQuery } from "./nvidia_smi.ts";
import { log } from "../common/log.ts";

/** Each engine's devices and the environment that hands them over. */
export interface Placement {
  env(card: ModelCard): Record<string, string>;
  devices(card: ModelCard): readonly string[] | null;
  /** What the card was given (devices and need), by catalogue name. */
  assignment(card: ModelCard): GpuAssignment | undefined;
  /** Where the pool came from (the pool itself, its source, a warning). */
  readonly detection: GpuDetection;
  /** The pool and each engine's devices, logged once start-up checks have passed. */
  report(): void;
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
  return composePlacement(detection, placeGpus(cards, detection.pool));
}

function composePlacement(
  detection: GpuDetection,
  placed: ReadonlyMap<string, GpuAssignment>,
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
      if (
        pciOrder && env.CUDA_VISIBLE_DEVICES &&
        card.env.CUDA_DEVICE_ORDER === undefined
      ) {
        env.CUDA_DEVICE_ORDER = "PCI_BUS_ID";
      }
      return env;
    },
    devices(card) {
      return assignment(card)?.devices ?? null;
    },
    report() {
      if (detection.warning) log.warn(detection.warning);
      log.info(gpuPoolLine(detection));
      for (const [name, a] of placed) log.info(gpuLine(name, a));
    },
    replan(cards, changed) {
      const held = new Map<string, GpuAssignment>();
      for (const card of cards) {
        const kept = placed.get(card.name);
        if (!changed.has(card.name) && kept) held.set(card.name, kept);
      }
      const fresh = placeGpus(
        cards.filter((card) => changed.has(card.name)),
        detection.pool,
        { held },
      );
      const next = new Map<string, GpuAssignment>();
      for (const card of cards) {
        const a = fresh.get(card.name) ?? held.get(card.name);
        if (a) next.set(card.name, a);
      }
      return composePlacement(detection, next);
    },
  };
}
