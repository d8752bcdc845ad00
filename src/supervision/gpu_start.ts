/**
 * One engine's passage through the GPU start gate: what holds its start now,
 * the time spent per reason (metrics), one log line per change of what holds
 * it, the slot its load holds, and the memory its run holds (what its
 * restart waits to see released, the gate's rule 2). The supervisor owns one
 * and asks it before every start.
 *
 * @module
 */
import { log } from "../common/log.ts";
import type { GpuReading } from "../gpu/memory_use.ts";
import type { GpuMemoryNeed } from "../gpu/need.ts";
import type {
  GpuStartGate,
  Released,
  StartSlot,
  WaitingFor,
  WaitReason,
} from "../gpu/start_gate.ts";

/** What the gate needs to know of the engine, read at each start (a reload may change it). */
export interface GpuStartNeed {
  /** Its devices as placed, or null when not placed. */
  readonly devices: readonly string[] | null;
  /** Free memory its engine demands at start, where known. */
  readonly memory?: GpuMemoryNeed | undefined;
}

/**
 * One engine's starts at the gate.
 *
 * @example
 * ```ts ignore
 * const start = new GpuStart("bge-m3", gate, () => ({ devices: ["0"] }), () => setState("waiting"));
 * if (await start.admit(undefined, signal)) spawn(); // then start.launched()
 * ```
 */
export class GpuStart {
  readonly #name: string;
  readonly #gate: GpuStartGate | undefined;
  readonly #need: () => GpuStartNeed;
  readonly #onHeld: () => void;
  #current: WaitingFor | null = null;
  #since = 0;
  #ms: Partial<Record<WaitReason, number>> = {};
  #slot: StartSlot | undefined;
  /** Each device's used MiB just before the current run spawned. */
  #startUsed: Readonly<Record<string, number>> = {};
  #pgid: number | undefined;
  #memory: GpuReading | null = null;
  /** The last reading after the load ended: what a restart waits to see released. */
  #settled: GpuReading | null = null;

  /**
   * @param name The engine's catalogue name, for log lines.
   * @param gate The launcher's gate; undefined: starts are never held.
   * @param need Its devices and memory need, read at each start.
   * @param onHeld Called whenever what holds the start changes.
   */
  constructor(
    name: string,
    gate: GpuStartGate | undefined,
    need: () => GpuStartNeed,
    onHeld: () => void,
  ) {
    this.#name = name;
    this.#gate = gate;
    this.#need = need;
    this.#onHeld = onHeld;
  }

  /** Whether the engine's starts pass the gate at all. */
  get gated(): boolean {
    return this.#gatedDevices() !== undefined;
  }

  /** What holds the start now, or null. */
  get waitingFor(): WaitingFor | null {
    return this.#current;
  }

  /** Whether the current run's load still holds its devices. */
  get loading(): boolean {
    return this.#slot !== undefined;
  }

  /** The current run's GPU memory (per device, and how it was attributed), or null when unknown. */
  get memory(): GpuReading | null {
    return this.#memory;
  }

  set memory(reading: GpuReading | null) {
    this.#memory = reading;
    if (reading && !this.loading) this.#settled = reading;
  }

  /** Each device's used MiB just before the current run spawned (device attribution's start). */
  get startUsed(): Readonly<Record<string, number>> {
    return this.#startUsed;
  }

  /** What the last run held, for its restart or replacement (rule 2); undefined when not gated. */
  released(): Released | undefined {
    if (!this.#gatedDevices()) return undefined;
    const settled = this.#settled;
    const devices: Record<string, number> = {};
    if (settled) {
      for (const [entry, used] of Object.entries(settled.usedMiB)) {
        devices[entry] = used - (settled.mib[entry] ?? 0);
      }
    } else Object.assign(devices, this.#startUsed); // died loading
    const pids = new Set(settled?.pids ?? []);
    if (this.#pgid !== undefined) pids.add(this.#pgid);
    return { devices, pids: [...pids], byPid: settled?.by === "pid" };
  }

  /**
   * Waits at the gate. False when `signal` ended the wait.
   *
   * @param released For a restart: what the dead run held (rule 2 applies).
   * @param signal Ends the wait.
   * @returns Whether the start may proceed.
   */
  async admit(
    released: Released | undefined,
    signal: AbortSignal,
  ): Promise<boolean> {
    const devices = this.#gatedDevices();
    if (!devices) return true;
    const slot = await this.#gate!.admit({
      name: this.#name,
      devices,
      memory: this.#need().memory,
      released,
      signal,
      onWait: (waiting) => this.#held(waiting),
    }).catch(() => undefined);
    const waited = this.#current;
    this.#held(null);
    // Granted as the stop came: the caller must not spawn, the devices go back.
    if (slot && signal.aborted) {
      slot.release();
      return false;
    }
    if (slot && waited) {
      log.info(
        `engine ${this.#name} starts on GPU ${
          devices.join(",")
        } (waited for ${waited.reason})`,
      );
    }
    this.#slot = slot;
    if (slot) this.#startUsed = slot.usedMiB;
    return slot !== undefined;
  }

  /** The run spawned (process group `pgid`): its devices' facts change from now on. */
  launched(pgid: number | undefined): void {
    const devices = this.#gatedDevices();
    if (devices) this.#gate!.changed(devices);
    this.#pgid = pgid;
    this.#memory = this.#settled = null;
  }

  /** The load is over (first 200, exit, stop, a failed spawn): the next engine may start; facts are asked anew. */
  release(): void {
    const devices = this.#gatedDevices();
    if (devices) this.#gate!.changed(devices);
    this.#slot?.release();
    this.#slot = undefined;
  }

  #gatedDevices(): readonly string[] | undefined {
    const devices = this.#need().devices;
    return this.#gate && devices?.length ? devices : undefined;
  }

  /** Seconds held per reason, the current wait included. */
  seconds(): Partial<Record<WaitReason, number>> {
    const out: Partial<Record<WaitReason, number>> = {};
    for (const [reason, ms] of Object.entries(this.#ms)) {
      out[reason as WaitReason] = ms / 1000;
    }
    const now = this.#current?.reason;
    if (now !== undefined) {
      out[now] = (out[now] ?? 0) + (Date.now() - this.#since) / 1000;
    }
    return out;
  }

  #held(waiting: WaitingFor | null): void {
    const now = Date.now();
    const before = this.#current;
    if (before) {
      this.#ms[before.reason] = (this.#ms[before.reason] ?? 0) + now -
        this.#since;
    }
    this.#since = now;
    this.#current = waiting;
    if (!waiting) return;
    if (
      before?.reason !== waiting.reason ||
      before.devices.join() !== waiting.devices.join()
    ) {
      log.info(
        `engine ${this.#name} waits for GPU ${
          waiting.devices.join(",")
        }: ${waiting.detail}`,
      );
    }
    this.#onHeld();
  }
}
