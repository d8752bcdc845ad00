/**
 * GPU placement as the launcher composes it: find the pool, place every card,
 * and hand each engine its devices through its environment.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { detectGpuPool, gpuPoolLine } from "./detect.ts";
import { type GpuAssignment, gpuEnv, gpuLine, placeGpus } from "./placement.ts";
import { log } from "../common/log.ts";

/** Each engine's devices and the environment that hands them over. */
export interface Placement {
  env(card: ModelCard): Record<string, string>;
  devices(card: ModelCard): readonly string[] | null;
  /** The pool and each engine's devices, logged once start-up checks have passed. */
  report(): void;
}

/**
 * Finds the GPU pool and places every card on it, logging the pool and each
 * engine's devices. Throws `GpuPlacementError` (one line) when a card does not fit.
 */
export async function placeEngines(
  cards: readonly ModelCard[],
  gpus: string | undefined,
): Promise<Placement> {
  const detection = await detectGpuPool(gpus === undefined ? {} : { gpus });
  const placed = placeGpus(cards, detection.pool);
  // nvidia-smi numbers devices in PCI bus order, CUDA by default fastest first:
  // make the indices mean the same devices to the engine.
  const pciOrder = detection.pool !== undefined &&
    !detection.source.includes("CUDA_VISIBLE_DEVICES") &&
    Deno.env.get("CUDA_DEVICE_ORDER") === undefined;
  function assignment(card: ModelCard): GpuAssignment | undefined {
    return placed.get(card.name);
  }
  return {
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
  };
}
