// What a placed engine takes on each device (its `gpu_memory`, else its last
// footprint on such a device, else its kind's estimate), and the args that hold
// it there. Pure: the book's entries and the plan's one look are data.
import type { ModelCard } from "../catalogue.ts";
import type { EnginePlacement } from "../engines/engine_plan.ts";
import type { MemoryNeed } from "../engines/kinds/engine_kind.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { type BookEntry, measuredOf } from "./footprint_book.ts";
import { gpuMemoryNeed, GpuPlacementError } from "./need.ts";
import { deviceLoad, mibText } from "./layout.ts";
import { type Placement, placementEnv } from "./placement.ts";
import { deviceOf } from "./nvidia_smi.ts";

/** Kept for its restarts. @throws {GpuPlacementError} A budget that cannot be held: no GPU, no total, no room. */
export function enginePlacement(
  card: ModelCard,
  placement: Placement,
  entries: readonly BookEntry[],
): EnginePlacement {
  const assigned = placement.assigned[card.name];
  const gpus = assigned?.devices ?? null;
  const entry = gpus?.[0];
  const { snapshot } = placement;
  const device = entry && snapshot ? deviceOf(entry, snapshot) : undefined;
  const total = device?.memoryKnown ? device.totalMiB : undefined;
  const measured = device?.name === undefined
    ? undefined
    : measuredOf(entries, card)[device.name];
  const where = {
    gpus,
    share: !gpus?.length
      ? null
      : assigned!.need.kind === "share"
      ? assigned!.need.share
      : 1,
    env: placementEnv(placement, card),
  };
  const need = (mib: number, from: string): MemoryNeed => ({
    fraction: mib / total!,
    mib,
    from,
  });
  if (card.gpuMemory === undefined) {
    const mib = measured?.total_mib;
    if (mib == null || total === undefined) {
      return { ...where, args: [], memoryNeed: gpuMemoryNeed(card) ?? null };
    }
    const at = `on ${device!.name} at ${measured!.measured_at}`;
    return {
      ...where,
      args: [],
      memoryNeed: need(mib, `measured ${mibText(mib)} ${at}`),
    };
  }
  const refuse = (why: string): never => {
    throw new GpuPlacementError(card.name, `its gpu_memory ${why}`);
  };
  const budgetMiB = card.gpuMemory / 2 ** 20;
  const text = mibText(budgetMiB);
  if (total === undefined) {
    const which = entry === undefined
      ? "it has none"
      : `GPU ${entry}: not known`;
    refuse(
      `${text} needs a placed GPU whose total memory nvidia-smi reports (${which}) (expected a GPU pool nvidia-smi lists, or no gpu_memory)`,
    );
  }
  // What stays free once each engine there holds its own (by the device's
  // ledger), less what others held at the look.
  const on = Object.values(placement.assigned)
    .filter((a) => a.devices?.includes(entry!));
  const left = total! - deviceLoad(on, total!);
  if (left < 0) {
    refuse(
      `${text} is above GPU ${entry}'s ${total} MiB (expected at most its total)`,
    );
  }
  const spareMiB = Math.max(0, Math.floor(left - device!.usedMiB));
  const given = { budgetMiB, totalMiB: total!, spareMiB, measured };
  const args = ENGINE_KINDS[card.engine]?.sizing?.budget(given) ?? [];
  if (typeof args === "string") refuse(`${text} cannot be held: ${args}`);
  return {
    ...where,
    args: args as string[],
    memoryNeed: need(budgetMiB, `gpu_memory ${text}`),
  };
}
