/**
 * The GPU start gate: says when an engine placed on devices D may spawn. It
 * spawns nothing and stops nothing; supervision asks it before every start
 * (the first, every restart, a reload's) and tells it when a load is over.
 *
 * A start on D proceeds only when:
 * 1. no other engine on a device of D is loading (spawned, no first 200 yet),
 *    and no engine that asked earlier waits for one of them (request order per
 *    device): vLLM sizes its KV cache from whole-device free-memory deltas
 *    during start-up, so two loads on one device mis-size each other;
 * 2. for a restart, `nvidia-smi` no longer lists, on D, a process that is gone
 *    (the driver frees a dead process's memory seconds after it leaves the
 *    process table), except pids already listed and already invisible when
 *    the dead run started; bounded by the release timeout, then one warning;
 * 3. where the card's engine checks free memory at start, each device of D has
 *    that much free (MIG devices are not checked).
 *
 * Rules 2 and 3 decide from facts gathered after the last event on D that
 * can change them (a spawn, a load's end, an exit or stop: supervision calls
 * {@linkcode GpuStartGate.changed}), never from an older snapshot however
 * young: a run that failed during its load allocated after the last health
 * round, and its restart must see that. A held start looks again at each new
 * answer and at least once an interval, each time with facts asked after its
 * previous look, so it starts within one interval (and a query) of the
 * memory's release.
 *
 * Without GPU facts (no `nvidia-smi`, or it fails) rules 2 and 3 are skipped
 * and rule 1 holds from placement alone. Engines without devices are never held.
 *
 * @module
 */
import { log } from "../common/log.ts";
import type { GpuMemoryNeed } from "./need.ts";
import { deviceOf, type GpuSnapshot } from "./nvidia_smi.ts";

/** Why an engine is held: `waiting_for.reason` in `GET /models?detail=1`. */
export type WaitReason =
  | "gpu-busy-loading"
  | "gpu-memory-release"
  | "gpu-memory-free";

/** Every reason the gate holds a start for (rules 1, 2 and 3). */
export const WAIT_REASONS: readonly WaitReason[] = [
  "gpu-busy-loading",
  "gpu-memory-release",
  "gpu-memory-free",
];

/** What an engine waits for, as `waiting_for` reports it. */
export interface WaitingFor {
  /** Which rule holds it. */
  readonly reason: WaitReason;
  /** The devices concerned, as placed (`CUDA_VISIBLE_DEVICES` entries). */
  readonly devices: readonly string[];
  /** One line for people: who loads there, which pids hold the memory. */
  readonly detail: string;
}

/** Where the gate reads GPU facts (a `GpuMonitor`): one snapshot no older than asked, or none. */
export interface GpuFacts {
  /**
   * The latest snapshot no older than `maxAgeMs` and asked after the mark
   * `after`; undefined when unknown.
   */
  snapshot(maxAgeMs: number, after?: number): Promise<GpuSnapshot | undefined>;
  /** A new mark: answers asked from now on are at or after it. */
  mark(): number;
  /** Calls `listener` with the mark of each answer as it comes (the mark it was asked at). */
  watch?(listener: (mark: number) => void): void;
}

/** A live process the gate asks about. */
export interface ProcessFacts {
  /** Its process group. */
  readonly pgid: number;
  /** Its command name, e.g. `python3`. */
  readonly comm: string;
}

/** How the gate decides. */
export interface StartGateOptions {
  /** GPU facts; absent when no pool is placed: rules 2 and 3 are skipped. */
  readonly facts?: GpuFacts | undefined;
  /** How often a held start is checked again, in ms (`--health-interval`). */
  readonly intervalMs: number;
  /** Bound of rule 2, in ms (`--gpu-release-timeout`). */
  readonly releaseTimeoutMs: number;
  /** The live processes among `pids`; a pid missing from the answer is gone. */
  readonly processes: (
    pids: readonly number[],
  ) => ReadonlyMap<number, ProcessFacts>;
  /** The launcher's running engines: process group → engine name. */
  readonly ownGroups: () => ReadonlyMap<number, string>;
}

/** One engine's request to start. */
export interface StartRequest {
  /** The engine's catalogue name. */
  readonly name: string;
  /** Its devices as placed; `[]` is never held. */
  readonly devices: readonly string[];
  /** Free memory its engine demands at start, where known (rule 3). */
  readonly memory?: GpuMemoryNeed | undefined;
  /**
   * Present for a restart (rule 2 applies): the pids listed on its devices,
   * and already gone, when the dead run started; they do not count.
   */
  readonly baseline?: ReadonlySet<number> | undefined;
  /** Aborting it ends the wait: `admit` rejects with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
  /** Called whenever what holds the start changes. */
  readonly onWait?: ((waiting: WaitingFor) => void) | undefined;
}

/** A granted start: release it when the load is over (first 200, exit or stop). */
export interface StartSlot {
  /** Frees the devices for the next load; later calls do nothing. */
  release(): void;
}

interface Waiter {
  readonly request: StartRequest;
  wake: () => void;
  /** Held for memory: new facts wake it. */
  polling?: boolean;
  /** A mark taken after its last look at the facts: the next look needs newer ones. */
  looked?: number;
  releaseSince?: number;
  releaseGaveUp?: boolean;
  noted: Set<string>;
}

const NO_SLOT: StartSlot = { release() {} };

/**
 * Decides when engines placed on GPUs may start (see the module doc).
 *
 * @example
 * ```ts ignore
 * const gate = new GpuStartGate({
 *   intervalMs: 10_000, releaseTimeoutMs: 30_000,
 *   processes: liveProcesses, ownGroups: () => new Map(),
 * });
 * const slot = await gate.admit({ name: "bge-m3", devices: ["0"] });
 * // spawn; once it answered 200 (or ended):
 * slot.release();
 * ```
 */
export class GpuStartGate {
  readonly #options: StartGateOptions;
  /** Device → the engine loading there. */
  readonly #loading = new Map<string, string>();
  /** Held requests, in request order. */
  readonly #queue: Waiter[] = [];
  /** Device → the mark of the last event there that can change its facts. */
  readonly #changed = new Map<string, number>();

  /**
   * Creates a gate with nothing loading and nobody waiting.
   *
   * @param options Facts and bounds.
   */
  constructor(options: StartGateOptions) {
    this.#options = options;
    options.facts?.watch?.((mark) => {
      for (const waiter of this.#queue) {
        if (waiter.polling && (waiter.looked ?? 0) <= mark) waiter.wake();
      }
    });
  }

  /**
   * Notes an event that can change the GPU facts of `devices`: a run spawned
   * there, its load ended, it exited or was stopped. Every later decision and
   * baseline for these devices uses facts asked after it. Queries nothing.
   *
   * @param devices The run's devices as placed.
   */
  changed(devices: readonly string[]): void {
    const mark = this.#options.facts?.mark();
    if (mark === undefined) return;
    for (const device of devices) this.#changed.set(device, mark);
  }

  /** Whether a start on these devices can ever be held. */
  gates(devices: readonly string[] | null): boolean {
    return devices !== null && devices.length > 0;
  }

  /**
   * Resolves when the start may proceed, with the slot to release once the
   * load is over. Engines without devices get a slot at once.
   *
   * @param request The engine, its devices and needs.
   * @returns The granted slot.
   * @throws The signal's reason when the request's signal aborts first.
   */
  async admit(request: StartRequest): Promise<StartSlot> {
    if (!this.gates(request.devices)) return NO_SLOT;
    const waiter: Waiter = { request, wake: () => {}, noted: new Set() };
    this.#queue.push(waiter);
    try {
      while (true) {
        request.signal?.throwIfAborted();
        let held = this.#busy(waiter);
        if (held === undefined) {
          held = await this.#memory(waiter);
          // The world may have moved while nvidia-smi answered.
          held ??= this.#busy(waiter);
          if (held === undefined) return this.#grant(waiter);
        }
        request.onWait?.(held);
        await this.#wait(waiter, held.reason !== "gpu-busy-loading");
      }
    } finally {
      this.#queue.splice(this.#queue.indexOf(waiter), 1);
      this.#pump();
    }
  }

  /**
   * The pids listed on `devices` whose process is already gone: a run's
   * baseline for rule 2, taken when it starts.
   *
   * @param devices The run's devices.
   * @returns The pids; empty without GPU facts.
   */
  async baseline(devices: readonly string[]): Promise<Set<number>> {
    const snapshot = await this.#options.facts?.snapshot(
      this.#options.intervalMs,
      this.#after(devices),
    );
    if (!snapshot) return new Set();
    return new Set(this.#gone(snapshot, devices).map((p) => p.pid));
  }

  #grant(waiter: Waiter): StartSlot {
    const { name, devices } = waiter.request;
    for (const device of devices) this.#loading.set(device, name);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        for (const device of devices) {
          if (this.#loading.get(device) === name) this.#loading.delete(device);
        }
        this.#pump();
      },
    };
  }

  /** Rule 1: a load on one of its devices, or an earlier request for one. */
  #busy(waiter: Waiter): WaitingFor | undefined {
    const { devices } = waiter.request;
    for (const device of devices) {
      const loading = this.#loading.get(device);
      if (loading !== undefined) {
        return {
          reason: "gpu-busy-loading",
          devices: [device],
          detail: `engine ${loading} is loading there`,
        };
      }
    }
    for (const earlier of this.#queue) {
      if (earlier === waiter) break;
      const shared = earlier.request.devices.find((d) => devices.includes(d));
      if (shared !== undefined) {
        return {
          reason: "gpu-busy-loading",
          devices: [shared],
          detail:
            `engine ${earlier.request.name} asked first and starts before it`,
        };
      }
    }
    return undefined;
  }

  /** Rules 2 and 3, from one snapshot. */
  async #memory(waiter: Waiter): Promise<WaitingFor | undefined> {
    const { request } = waiter;
    const needsRelease = request.baseline !== undefined &&
      !waiter.releaseGaveUp;
    const facts = this.#options.facts;
    if (!facts || (!needsRelease && request.memory === undefined)) {
      return undefined;
    }
    const snapshot = await facts.snapshot(
      this.#options.intervalMs,
      this.#after(request.devices, waiter.looked),
    );
    waiter.looked = facts.mark();
    if (!snapshot) return undefined;
    if (needsRelease) {
      const held = this.#release(waiter, snapshot);
      if (held) return held;
    }
    return request.memory && this.#free(waiter, request.memory, snapshot);
  }

  /** Rule 2: no gone process still listed on its devices (but the baseline). */
  #release(waiter: Waiter, snapshot: GpuSnapshot): WaitingFor | undefined {
    const { name, devices, baseline } = waiter.request;
    const gone = this.#gone(snapshot, devices).filter((p) =>
      !baseline?.has(p.pid)
    );
    if (gone.length === 0) return undefined;
    const listed = gone.map((p) => `pid ${p.pid} (${p.usedMiB} MiB)`).join(
      ", ",
    );
    const now = Date.now();
    waiter.releaseSince ??= now;
    if (now - waiter.releaseSince >= this.#options.releaseTimeoutMs) {
      waiter.releaseGaveUp = true;
      log.warn(
        `engine ${name}: GPU ${devices.join(",")} still lists ${listed}, gone ${
          Math.round((now - waiter.releaseSince) / 1000)
        } s (--gpu-release-timeout); starting anyway`,
      );
      return undefined;
    }
    return {
      reason: "gpu-memory-release",
      devices: [...devices],
      detail:
        `${listed} still listed, process gone: the driver has not released its memory yet`,
    };
  }

  /** Rule 3: each checked device has the fraction of its total free. */
  #free(
    waiter: Waiter,
    need: GpuMemoryNeed,
    snapshot: GpuSnapshot,
  ): WaitingFor | undefined {
    const { name, devices } = waiter.request;
    for (const entry of devices) {
      const device = deviceOf(entry, snapshot);
      if (device === undefined) {
        this.#noteOnce(
          waiter,
          entry,
          entry.startsWith("MIG-")
            ? `engine ${name}: GPU ${entry} is a MIG device: its free memory is not checked before a start`
            : `engine ${name}: GPU ${entry} is not in nvidia-smi's list: its free memory is not checked before a start`,
        );
        continue;
      }
      if (!device.memoryKnown) {
        this.#noteOnce(
          waiter,
          entry,
          `engine ${name}: nvidia-smi reports no memory figures for GPU ${entry}: its free memory is not checked before a start`,
        );
        continue;
      }
      const free = device.totalMiB - device.usedMiB;
      const needed = Math.ceil(need.fraction * device.totalMiB);
      if (free >= needed) continue;
      return {
        reason: "gpu-memory-free",
        devices: [entry],
        detail: `${free} MiB free, needs ${needed} MiB (${need.from})${
          this.#holders(snapshot, device.uuid)
        }`,
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
      return `pid ${p.pid} (${facts.comm}, ${p.usedMiB} MiB), ${
        engine === undefined
          ? "not an engine of this launcher"
          : `engine ${engine}`
      }`;
    });
    return `; held by ${who.join("; ")}`;
  }

  /** The mark facts about `devices` must be asked after. */
  #after(devices: readonly string[], looked = 0): number {
    let after = looked;
    for (const device of devices) {
      after = Math.max(after, this.#changed.get(device) ?? 0);
    }
    return after;
  }

  /** Listed processes on `devices` whose pid no longer exists. */
  #gone(snapshot: GpuSnapshot, devices: readonly string[]) {
    const uuids = new Set(
      devices.map((entry) => deviceOf(entry, snapshot)?.uuid).filter(Boolean),
    );
    const listed = snapshot.processes.filter((p) => uuids.has(p.gpuUuid));
    if (listed.length === 0) return [];
    const live = this.#options.processes(listed.map((p) => p.pid));
    return listed.filter((p) => !live.has(p.pid));
  }

  #noteOnce(waiter: Waiter, key: string, line: string): void {
    if (waiter.noted.has(key)) return;
    waiter.noted.add(key);
    log.info(line);
  }

  /**
   * Until woken (a load ended, a request left) or, when polling (held for
   * memory), until new facts came or one interval passed.
   */
  #wait(waiter: Waiter, poll: boolean): Promise<void> {
    const signal = waiter.request.signal;
    waiter.polling = poll;
    return new Promise<void>((resolve) => {
      const timer = poll
        ? setTimeout(done, this.#options.intervalMs)
        : undefined;
      function done(): void {
        clearTimeout(timer);
        waiter.polling = false;
        signal?.removeEventListener("abort", done);
        resolve();
      }
      waiter.wake = done;
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  #pump(): void {
    for (const waiter of [...this.#queue]) waiter.wake();
  }
}
