/**
 * One engine's passage through the GPU start gate: what holds its start now,
 * the time spent per reason (metrics), one log line per change of what holds
 * it, the slot its load holds, the baseline of gone pids its run started
 * with (the gate's rule 2 at the next start), and the memory figures its run
 * holds. The supervisor owns one and asks it before every start.
 *
 * @module
 */
import { log } from "../common/log.ts";
import type { GpuMemoryNeed } from "../gpu/need.ts";
import type {
  GpuStartGate,
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
  #baseline: Promise<Set<number>> | undefined;
  #memory: Readonly<Record<string, number>> | null = null;

  /**
   * @param name The engine's catalogue name, for log lines.
   * @param gate The launcher's gate; undefined: starts are never held.
   * @param need The engine's devices and memory need, read at each start.
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
    return this.#gate?.gates(this.#need().devices) ?? false;
  }

  /** What holds the start now, or null. */
  get waitingFor(): WaitingFor | null {
    return this.#current;
  }

  /** Whether the current run's load still holds its devices. */
  get loading(): boolean {
    return this.#slot !== undefined;
  }

  /** The current run's GPU memory per device, in MiB, or null when unknown. */
  get memory(): Readonly<Record<string, number>> | null {
    return this.#memory;
  }

  set memory(mib: Readonly<Record<string, number>> | null) {
    this.#memory = mib;
  }

  /**
   * Waits at the gate. False when `signal` ended the wait.
   *
   * @param baseline For a restart: the dead run's baseline (rule 2 applies).
   * @param signal Ends the wait.
   * @returns Whether the start may proceed.
   */
  async admit(
    baseline: Set<number> | undefined,
    signal: AbortSignal,
  ): Promise<boolean> {
    const { devices, memory } = this.#need();
    if (!this.#gate || devices === null || !this.#gate.gates(devices)) {
      return true;
    }
    const slot = await this.#gate.admit({
      name: this.#name,
      devices,
      memory,
      baseline,
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
    return slot !== undefined;
  }

  /**
   * The run spawned: the facts of its devices change from now on, and the
   * gone pids listed there, asked after the spawn, are its baseline (rule 2's).
   */
  launched(): void {
    const devices = this.#gatedDevices();
    if (devices) this.#gate!.changed(devices);
    this.#baseline = devices
      ? this.#gate!.baseline(devices).catch(() => new Set<number>())
      : undefined;
  }

  /** The baseline of the last run that spawned, for the next start. */
  baseline(): Promise<Set<number> | undefined> {
    return this.#baseline ?? Promise.resolve(undefined);
  }

  /**
   * The load is over (first 200, exit or stop, a failed spawn): the next
   * engine may start, and its devices' facts are to be asked anew: a load
   * that ended has allocated, a run that ended is releasing.
   */
  release(): void {
    const devices = this.#gatedDevices();
    if (devices) this.#gate!.changed(devices);
    this.#slot?.release();
    this.#slot = undefined;
  }

  #gatedDevices(): readonly string[] | undefined {
    const devices = this.#need().devices;
    return this.#gate && devices !== null && this.#gate.gates(devices)
      ? devices
      : undefined;
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
