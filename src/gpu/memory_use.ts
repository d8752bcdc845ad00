/**
 * One engine run's GPU memory per device, from an `nvidia-smi` snapshot. By
 * pid where the listed pids match the run's process group (vLLM's workers
 * are children of the engine); else (a container lists the host's pids,
 * which match nothing here) by the device's change since just before the
 * spawn: rule 1 of the start gate lets one load at a time onto a device, so
 * what the device gained during the load is the run's (once the load is over
 * the figure stops there: `chargedLoad` in start_gate.ts). Pure: the process
 * groups are handed in.
 *
 * @module
 */
import { deviceOf, type GpuSnapshot } from "./nvidia_smi.ts";

/** A run's memory as one reading saw it. */
export interface GpuReading {
  /** MiB the run holds per device entry (devices `nvidia-smi` does not list, MIG ones, left out). */
  readonly mib: Readonly<Record<string, number>>;
  /** `pid`: its listed pids; `device`: the device's change across its start. */
  readonly by: "pid" | "device";
  readonly pids: readonly number[];
  readonly usedMiB: Readonly<Record<string, number>>;
}

/** The MiB a run holds on each of its devices; `groups`: the process group of each listed live pid. */
export function runMemory(
  snapshot: GpuSnapshot,
  devices: readonly string[],
  pgid: number,
  groups: ReadonlyMap<number, number>,
  startUsed: Readonly<Record<string, number>>,
): GpuReading {
  const mine = snapshot.processes.filter((p) => groups.get(p.pid) === pgid);
  const by = mine.length > 0 ? "pid" : "device";
  const mib: Record<string, number> = {};
  const usedMiB: Record<string, number> = {};
  for (const entry of devices) {
    const device = deviceOf(entry, snapshot);
    if (device === undefined || !device.memoryKnown) continue;
    usedMiB[entry] = device.usedMiB;
    const before = startUsed[entry];
    if (by === "pid") {
      mib[entry] = mine.filter((p) => p.gpuUuid === device.uuid)
        .reduce((sum, p) => sum + p.usedMiB, 0);
    } else if (before !== undefined) {
      mib[entry] = Math.max(0, device.usedMiB - before);
    }
  }
  return { mib, by, pids: [...new Set(mine.map((p) => p.pid))], usedMiB };
}
