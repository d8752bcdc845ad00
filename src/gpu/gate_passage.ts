/**
 * One engine's passage through the GPU start gate, as plain data its engine
 * run keeps: what holds its start and for how long, the slot its load holds,
 * what its run must see released before a restart, and what it is charged.
 * Pure functions over that record; the gate's own rules are `start_gate.ts`.
 *
 * @module
 */
import type { GpuReading } from "./gpu_lifecycle.ts";
import type {
  GpuStartGate,
  Released,
  StartRequest,
  StartSlot,
  WaitingFor,
  WaitReason,
} from "./start_gate.ts";

/** Takes a request through the gate: each hold to `held`, then the slot; null when the wait was aborted. */
export async function passGate(
  gate: GpuStartGate,
  request: StartRequest,
  held: (waiting: WaitingFor) => void,
): Promise<StartSlot | null> {
  try {
    const ticket = gate.admit(request);
    let step = await ticket.next();
    for (; !step.done; step = await ticket.next()) held(step.value);
    return step.value;
  } catch {
    return null; // aborted: the engine is stopping
  }
}

/** One engine's passage through the gate, as plain data its engine run keeps. */
export interface GateFacts {
  waiting?: WaitingFor | null;
  since: number;
  ms: Partial<Record<WaitReason, number>>;
  /** Held while its run loads: released on the first 200, on exit, on stop, on a failed spawn. */
  slot?: StartSlot | undefined;
  startUsed: Readonly<Record<string, number>>;
  /** Each device's used MiB where run `pgid`'s load ended (it served): device attribution stops there. */
  loadEnd?: { pgid: number; used: Readonly<Record<string, number>> };
  pgid?: number | undefined;
  memory?: GpuReading | null;
  /** The last reading after the load ended: what a restart waits to see released. */
  settled?: GpuReading | null;
}

/** Notes what holds the start now (null: nothing); true when the reason or the devices changed. */
export function noteWait(
  facts: GateFacts,
  waiting: WaitingFor | null,
  now: number = Date.now(),
): boolean {
  const before = facts.waiting;
  if (before) {
    facts.ms[before.reason] = (facts.ms[before.reason] ?? 0) + now -
      facts.since;
  }
  facts.since = now;
  facts.waiting = waiting;
  return before?.reason !== waiting?.reason ||
    before?.devices.join() !== waiting?.devices.join();
}

export function waitSeconds(
  facts: GateFacts,
  now: number = Date.now(),
): Partial<Record<WaitReason, number>> {
  const out: Partial<Record<WaitReason, number>> = {};
  for (const [reason, ms] of Object.entries(facts.ms)) {
    out[reason as WaitReason] = ms / 1000;
  }
  const current = facts.waiting?.reason;
  if (current !== undefined) {
    out[current] = (out[current] ?? 0) + (now - facts.since) / 1000;
  }
  return out;
}

/** What a run held, for its restart or replacement (rule 2). */
export function releasedBy(facts: GateFacts): Released {
  const { settled, startUsed, pgid } = facts;
  const devices: Record<string, number> = {};
  if (settled) {
    for (const [entry, used] of Object.entries(settled.usedMiB)) {
      devices[entry] = used - (settled.mib[entry] ?? 0);
    }
  } else Object.assign(devices, startUsed); // died loading
  const pids = new Set(settled?.pids ?? []);
  if (pgid !== undefined) pids.add(pgid);
  return { devices, pids: [...pids], byPid: settled?.by === "pid" };
}

/** The load is over: the slot goes back; a run that `served` is charged by device what its load took. */
export function endLoad(facts: GateFacts, served: boolean): void {
  const slot = facts.slot;
  facts.slot = undefined;
  slot?.release();
  const pgid = facts.pgid;
  void slot?.loadEnd?.then((used) => {
    if (served && pgid !== undefined) facts.loadEnd = { pgid, used };
  });
}

/**
 * `reading` as the run is charged: by device, once its load has ended, the
 * device's change across the load (spawn to first 200), not since: a
 * neighbour that loads later on the device is never its.
 */
export function chargedLoad(
  reading: GpuReading | null,
  facts: GateFacts,
): GpuReading | null {
  const end = facts.loadEnd?.pgid === facts.pgid
    ? facts.loadEnd?.used
    : undefined;
  if (!reading || reading.by !== "device" || !end) return reading;
  const mib: Record<string, number> = { ...reading.mib };
  for (const entry of Object.keys(mib)) {
    const [before, after] = [facts.startUsed[entry], end[entry]];
    if (before !== undefined && after !== undefined) {
      mib[entry] = Math.max(0, after - before);
    }
  }
  return { ...reading, mib };
}
