// The GPU start gate: says when an engine placed on devices D may spawn
// (supervision asks before every start). It spawns nothing and stops nothing.
// A start on D proceeds only when:
// 1. no other engine on D is loading, nor asked earlier (vLLM sizes its KV
//    cache from device-wide free memory while it loads);
// 2. for a restart, the dead run's pids (where they match ours) are gone from
//    `nvidia-smi`'s list, or two readings in a row show D's used memory fell
//    by what it held, within max(256 MiB, 2 %); bounded by the release timeout;
// 3. no device of D reports its memory as an error (`ERR!`, `[GPU requires reset]`);
// 4. each device of D has the free memory the engine needs (its budget, or
//    its measured footprint, else what it checks at start), less what
//    sleeping engines there take back when they wake.
//
// Rules 2 to 4 read facts asked after the last event on D
// ({@linkcode GpuStartGate.changed}); without facts they are skipped.
import { log } from "../common/log.ts";
import { type Clock, REAL_CLOCK } from "../common/sleep.ts";
import type { ProcStat } from "../engines/proc.ts";
import {
  deviceOf,
  type GpuMonitor,
  type GpuSnapshot,
  usedOn,
} from "./nvidia_smi.ts";
import type { MemoryNeed } from "../engines/kinds/engine_kind.ts";

/** Rules 1 to 4: `waiting_for.reason` in `GET /models?detail=1`. */
export const WAIT_REASONS = [
  "gpu-busy-loading",
  "gpu-memory-release",
  "gpu-error",
  "gpu-memory-free",
] as const;

export type WaitReason = typeof WAIT_REASONS[number];

export interface WaitingFor {
  readonly reason: WaitReason;
  readonly devices: readonly string[];
  readonly detail: string;
}

export type GpuFacts =
  & Pick<GpuMonitor, "snapshot" | "mark">
  & Partial<Pick<GpuMonitor, "next">>;

export type ProcessFacts = Pick<ProcStat, "pgid" | "comm">;

export interface StartGateOptions {
  /** Absent when no pool is placed: rules 2 to 4 are skipped. */
  readonly facts?: GpuFacts | undefined;
  readonly intervalMs: number;
  readonly releaseTimeoutMs: number;
  /** The live processes among `pids`: rule 4's detail names who holds the memory. */
  readonly processes: (
    pids: readonly number[],
  ) => ReadonlyMap<number, ProcessFacts>;
  /** Process group → engine name. */
  readonly ownGroups: () => ReadonlyMap<number, string>;
  /** MiB the sleeping engines on a device take back when they wake: rule 4 counts them used. */
  readonly asleep?: (entry: string, snapshot: GpuSnapshot) => number;
  /** Its waits and the release timeout's. @default {REAL_CLOCK} */
  readonly clock?: Clock;
}

/** What a dead run held, for its restart (rule 2). */
export interface Released {
  /** Per device entry, the used MiB it comes back to. */
  readonly devices: Readonly<Record<string, number>>;
  readonly pids: readonly number[];
  /** Its pids were listed while it lived: none listed now means released. */
  readonly byPid?: boolean;
}

export interface StartRequest {
  readonly name: string;
  /** `[]` is never held. */
  readonly devices: readonly string[];
  readonly memory?: MemoryNeed | undefined;
  readonly released?: Released | undefined;
  readonly signal?: AbortSignal | undefined;
}

/** A granted start: release it when the load is over (first 200, exit or stop). */
export interface StartSlot {
  /** Each device's used MiB just before the spawn: where device attribution starts. */
  readonly usedMiB: Readonly<Record<string, number>>;
  /** Once released, each device's used MiB at the first look after: where it ends. */
  readonly loadEnd?: Promise<Readonly<Record<string, number>>> | undefined;
  release(): void;
}

interface Waiter {
  readonly request: StartRequest;
  /** The mark after its last look: the next look needs newer facts. */
  looked?: number;
  last?: GpuSnapshot;
  lows: number;
  releaseSince?: number;
  releaseDone?: boolean;
  sawPids?: boolean;
  /** Entries whose unchecked memory was logged. */
  noted: Set<string>;
}

/** A release wait polls this often at most (Ollama's waitForVRAMRecovery polls at 250 ms). */
const RELEASE_POLL_MS = 500;

export class GpuStartGate {
  readonly #options: StartGateOptions;
  /** Device → the engine loading there. */
  readonly #loading = new Map<string, string>();
  readonly #queue: Waiter[] = [];
  /** Device → the mark of the last event there. */
  readonly #changed = new Map<string, number>();
  readonly #wakers = new Set<() => void>();

  constructor(options: StartGateOptions) {
    this.#options = options;
  }

  /** A spawn, a load's end or an exit changed `devices`' facts: later decisions ask after it. */
  changed(devices: readonly string[]): void {
    const mark = this.#options.facts?.mark();
    if (mark === undefined) return;
    for (const device of devices) this.#changed.set(device, mark);
  }

  #lastChange(devices: readonly string[]): number {
    return Math.max(0, ...devices.map((d) => this.#changed.get(d) ?? 0));
  }

  loadingOn(devices: readonly string[], name: string): string | undefined {
    return devices.map((d) => this.#loading.get(d))
      .find((loading) => loading !== undefined && loading !== name);
  }

  /** Until no engine but `name` loads on `devices`: vLLM measures device-wide free memory while it loads. */
  async quiet(
    devices: readonly string[],
    name: string,
    what: string,
    signal?: AbortSignal,
  ): Promise<void> {
    const loading = this.loadingOn(devices, name);
    if (loading === undefined) return;
    const on = devices.join(",");
    log.info(
      `${what} waits until engine ${loading} on GPU ${on} has started (it measures the device's free memory while it loads)`,
    );
    while (this.loadingOn(devices, name) !== undefined && !signal?.aborted) {
      await this.#wait(undefined, signal);
    }
  }

  /** Yields what holds the start at each look, then returns the slot; queues at the first `next()`. */
  async *admit(request: StartRequest): AsyncGenerator<WaitingFor, StartSlot> {
    if (request.devices.length === 0) return { usedMiB: {}, release() {} };
    const waiter: Waiter = { request, lows: 0, noted: new Set() };
    this.#queue.push(waiter);
    try {
      while (true) {
        request.signal?.throwIfAborted();
        const held = this.#busy(waiter) ?? await this.#facts(waiter) ??
          // The world may have moved while nvidia-smi answered.
          this.#busy(waiter);
        if (held === undefined) return this.#grant(waiter);
        const { intervalMs } = this.#options;
        // Armed before the yield: a wake while the asker reads it is not lost.
        const woken = this.#wait(
          held.reason === "gpu-busy-loading"
            ? undefined
            : held.reason === "gpu-memory-release"
            ? Math.min(RELEASE_POLL_MS, intervalMs)
            : intervalMs,
          request.signal,
        );
        yield held;
        await woken;
      }
    } finally {
      this.#queue.splice(this.#queue.indexOf(waiter), 1);
      this.#pump();
    }
  }

  #grant(waiter: Waiter): StartSlot {
    const { name, devices } = waiter.request;
    for (const device of devices) this.#loading.set(device, name);
    let released = false;
    const slot: { -readonly [K in keyof StartSlot]: StartSlot[K] } = {
      usedMiB: usedOn(devices, waiter.last),
      release: () => {
        if (released) return;
        released = true;
        // A neighbour's start here waits for a look asked after this event:
        // the first such look, before it can spawn, is where this load ended.
        slot.loadEnd = this.#options.facts?.next?.(this.#lastChange(devices))
          .then((snapshot) => usedOn(devices, snapshot));
        for (const device of devices) {
          if (this.#loading.get(device) === name) this.#loading.delete(device);
        }
        this.#pump();
      },
    };
    return slot;
  }

  /** Rule 1: a load on one of its devices, or an earlier request for one. */
  #busy(waiter: Waiter): WaitingFor | undefined {
    const { devices } = waiter.request;
    const reason = "gpu-busy-loading";
    const device = devices.find((d) => this.#loading.has(d));
    if (device !== undefined) {
      const detail = `engine ${this.#loading.get(device)} is loading there`;
      return { reason, devices: [device], detail };
    }
    for (const earlier of this.#queue.slice(0, this.#queue.indexOf(waiter))) {
      const shared = earlier.request.devices.find((d) => devices.includes(d));
      if (shared === undefined) continue;
      const detail =
        `engine ${earlier.request.name} asked first and starts before it`;
      return { reason, devices: [shared], detail };
    }
    return undefined;
  }

  /** Rules 2 to 4, from one snapshot asked after the last event and look. */
  async #facts(waiter: Waiter): Promise<WaitingFor | undefined> {
    const facts = this.#options.facts;
    if (!facts) return undefined;
    const after = Math.max(
      waiter.looked ?? 0,
      this.#lastChange(waiter.request.devices),
    );
    const snapshot = await facts.snapshot(this.#options.intervalMs, after);
    waiter.looked = facts.mark();
    if (!snapshot) return undefined;
    waiter.last = snapshot;
    return this.#release(waiter, snapshot) ??
      this.#errored(waiter, snapshot) ?? this.#free(waiter, snapshot);
  }

  /** Rule 2: the dead run's pids gone, or its memory back in two readings in a row. */
  #release(waiter: Waiter, snapshot: GpuSnapshot): WaitingFor | undefined {
    const { name, devices, released } = waiter.request;
    if (!released || waiter.releaseDone) return undefined;
    const { processes } = snapshot;
    const listed = processes.filter((p) => released.pids.includes(p.pid));
    const still = listed.map((p) =>
      `pid ${p.pid} (${p.usedMiB} MiB) still listed`
    );
    for (const [entry, back] of Object.entries(released.devices)) {
      const device = deviceOf(entry, snapshot);
      if (listed.length > 0 || !device?.memoryKnown) continue;
      // Released within max(256 MiB, 2 %) of what it comes back to.
      const tolerance = Math.max(256, Math.ceil(0.02 * device.totalMiB));
      if (device.usedMiB > back + tolerance) {
        still.push(
          `GPU ${entry} uses ${device.usedMiB} MiB, ${back} MiB once the dead run's memory is released`,
        );
      }
    }
    waiter.lows = still.length === 0 ? waiter.lows + 1 : 0;
    // Pids gone from the list is enough once; the device's memory, twice.
    const enough = waiter.lows >= (released.byPid || waiter.sawPids ? 1 : 2);
    waiter.sawPids ||= listed.length > 0;
    const now = (this.#options.clock ?? REAL_CLOCK).now();
    const waited = now - (waiter.releaseSince ??= now);
    if (enough || waited >= this.#options.releaseTimeoutMs) {
      waiter.releaseDone = true;
      if (enough) return undefined;
      const what = still.join(", ") || "memory back in one reading only";
      const s = Math.round(waited / 1000);
      log.warn(
        `engine ${name}: GPU ${
          devices.join(",")
        }: ${what} ${s} s after the exit (--gpu-release-timeout); starting anyway`,
      );
      return undefined;
    }
    return {
      reason: "gpu-memory-release",
      devices: [...devices],
      detail:
        (still.join(", ") || "memory back in one reading, waits for a second") +
        (listed.length > 0
          ? ", process gone: the driver has not released its memory yet"
          : still.length > 0
          ? " (by the device's used memory: its pids are not listed)"
          : ""),
    };
  }

  /** Rule 3: a device whose memory reads as an error (Xid: `ERR!`, `[GPU requires reset]`). */
  #errored(waiter: Waiter, snapshot: GpuSnapshot): WaitingFor | undefined {
    const error = (e: string) => deviceOf(e, snapshot)?.error;
    const bad = waiter.request.devices.filter(error);
    if (bad.length === 0) return undefined;
    const detail = bad.map((e) => `GPU ${e}: ${error(e)}`).join("; ");
    return { reason: "gpu-error", devices: bad, detail };
  }

  /** MiB the sleepers on a device take back when they wake (rule 4 counts them used). */
  kept(entry: string, snapshot: GpuSnapshot): number {
    return this.#options.asleep?.(entry, snapshot) ?? 0;
  }

  /** Rule 4: each device has the fraction of its total free. */
  #free(waiter: Waiter, snapshot: GpuSnapshot): WaitingFor | undefined {
    const { name, devices, memory: need } = waiter.request;
    if (!need) return undefined;
    for (const entry of devices) {
      const device = deviceOf(entry, snapshot);
      if (!device?.memoryKnown) {
        const why = device
          ? "nvidia-smi reports no memory figures for it"
          : entry.startsWith("MIG-")
          ? "it is a MIG device"
          : "it is not in nvidia-smi's list";
        if (waiter.noted.has(entry)) continue;
        waiter.noted.add(entry);
        log.info(
          `engine ${name}: GPU ${entry}: ${why}: its free memory is not checked before a start`,
        );
        continue;
      }
      const kept = this.#options.asleep?.(entry, snapshot) ?? 0;
      const free = device.totalMiB - device.usedMiB - kept;
      // What it took when measured (or its budget), else its share of the total.
      const needed = Math.ceil(need.mib ?? need.fraction * device.totalMiB);
      if (free >= needed) continue;
      const asleep = kept ? ` (${kept} MiB kept for sleeping engines)` : "";
      const who = this.#holders(snapshot, device.uuid);
      return {
        reason: "gpu-memory-free",
        devices: [entry],
        detail:
          `${free} MiB free${asleep}, needs ${needed} MiB (${need.from})${who}`,
      };
    }
    return undefined;
  }

  /** `; held by pid 4242 (python3, 60000 MiB), not an engine of this launcher`. */
  #holders(snapshot: GpuSnapshot, uuid: string): string {
    const listed = snapshot.processes
      .filter((p) => p.gpuUuid === uuid)
      .sort((a, b) => b.usedMiB - a.usedMiB);
    if (listed.length === 0) return "";
    const live = this.#options.processes(listed.map((p) => p.pid));
    const ours = this.#options.ownGroups();
    const who = listed.map((p) => {
      const facts = live.get(p.pid);
      if (!facts) {
        return `pid ${p.pid} (${p.usedMiB} MiB), gone or not visible here`;
      }
      const engine = ours.get(facts.pgid);
      const whose = engine === undefined
        ? "not an engine of this launcher"
        : `engine ${engine}`;
      return `pid ${p.pid} (${facts.comm}, ${p.usedMiB} MiB), ${whose}`;
    });
    return `; held by ${who.join("; ")}`;
  }

  #wait(ms: number | undefined, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      // Aborted while the facts were read: that event will not come again.
      if (signal?.aborted) return resolve();
      const clock = this.#options.clock ?? REAL_CLOCK;
      const cancel = ms === undefined ? undefined : clock.schedule(done, ms);
      const wakers = this.#wakers;
      function done(): void {
        cancel?.();
        signal?.removeEventListener("abort", done);
        wakers.delete(done);
        resolve();
      }
      wakers.add(done);
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  #pump(): void {
    for (const wake of [...this.#wakers]) wake();
  }
}
