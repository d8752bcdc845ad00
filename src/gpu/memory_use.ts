/**
 * One engine run's GPU memory per device, from an `nvidia-smi` snapshot: the
 * listed processes of the run's process group (vLLM's workers are children
 * of the engine), summed per device. Pure: the process groups are handed in.
 *
 * @module
 */
import { deviceOf, type GpuSnapshot } from "./nvidia_smi.ts";

/**
 * The MiB a run's process group holds on each of its devices.
 *
 * @param snapshot One `nvidia-smi` snapshot.
 * @param devices The run's devices as placed (`CUDA_VISIBLE_DEVICES` entries).
 * @param pgid The run's process group.
 * @param groups Process group of each listed pid that is alive.
 * @returns MiB per device entry (0 where it holds none); devices
 *   `nvidia-smi` does not list (MIG entries) are left out.
 *
 * @example
 * ```ts ignore
 * runMemoryMiB(snapshot, ["0"], 4242, new Map([[4243, 4242]])); // { "0": 5000 }
 * ```
 */
export function runMemoryMiB(
  snapshot: GpuSnapshot,
  devices: readonly string[],
  pgid: number,
  groups: ReadonlyMap<number, number>,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const entry of devices) {
    const device = deviceOf(entry, snapshot);
    if (device === undefined) continue;
    out[entry] = snapshot.processes
      .filter((p) => p.gpuUuid === device.uuid && groups.get(p.pid) === pgid)
      .reduce((sum, p) => sum + p.usedMiB, 0);
  }
  return out;
}
