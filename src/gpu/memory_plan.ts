// What one engine takes on its device, for the start gate and `--dry-run`:
// its `gpu_memory`, else its last footprint on such a device, else its kind's
// share of the total (an estimate); and the args that hold it to its budget.
// Pure: the book's entries and the plan's one nvidia-smi look are data.
import type { ModelCard } from "../catalogue.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { type BookEntry, measuredOf } from "./footprint_book.ts";
import { type GpuMemoryNeed as MemoryNeed, GpuPlacementError } from "./need.ts";
import type { Placement } from "./placement.ts";
import { deviceOf } from "./nvidia_smi.ts";

/** @throws {GpuPlacementError} A budget that cannot be held: no GPU, no total, no room. */
export function engineMemory(
  card: ModelCard,
  placement: Placement,
  entries: readonly BookEntry[],
  estimate: MemoryNeed | null,
): { args: string[]; memoryNeed: MemoryNeed | null } {
  const entry = placement.assigned[card.name]?.devices?.[0];
  const { snapshot } = placement;
  const device = entry && snapshot ? deviceOf(entry, snapshot) : undefined;
  const total = device?.memoryKnown ? device.totalMiB : undefined;
  const measured = device?.name === undefined
    ? undefined
    : measuredOf(entries, card)[device.name];
  const refuse = (why: string) => {
    throw new GpuPlacementError(card.name, `its gpu_memory ${why}`);
  };
  if (card.gpuMemory === undefined) {
    const mib = measured?.total_mib;
    return {
      args: [],
      memoryNeed: mib == null || total === undefined ? estimate : {
        fraction: mib / total,
        mib,
        from: `measured ${Math.ceil(mib)} MiB on ${device!.name} at ${
          measured!.measured_at
        }`,
      },
    };
  }
  const budgetMiB = card.gpuMemory / 2 ** 20;
  const text = `${Math.ceil(budgetMiB)} MiB`;
  if (total === undefined) {
    refuse(
      `${text} needs a placed GPU whose total memory nvidia-smi reports${
        entry === undefined ? " (it has none)" : ` (GPU ${entry}: not known)`
      } (expected a GPU pool nvidia-smi lists, or no gpu_memory)`,
    );
  }
  // What stays free once each engine there holds its own, less what others held at the look.
  let left = total!;
  for (const a of Object.values(placement.assigned)) {
    if (!a.devices?.includes(entry!)) continue;
    left -= a.mib ??
      (a.need.kind === "share" ? a.need.share * total! : budgetMiB);
  }
  if (left < 0) {
    refuse(
      `${text} is above GPU ${entry}'s ${total} MiB (expected at most its total)`,
    );
  }
  const spareMiB = Math.max(0, Math.floor(left - device!.usedMiB));
  const given = { budgetMiB, totalMiB: total!, spareMiB, measured };
  const mapped = ENGINE_KINDS[card.engine]?.sizing?.budget(given) ?? [];
  if (typeof mapped === "string") refuse(`${text} cannot be held: ${mapped}`);
  const from = `gpu_memory ${text}`;
  return {
    args: mapped as string[],
    memoryNeed: { fraction: budgetMiB / total!, mib: budgetMiB, from },
  };
}
