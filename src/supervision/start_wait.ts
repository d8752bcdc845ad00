/**
 * One engine's waits at the GPU start gate: what holds it now, the time spent
 * per reason (for metrics), and one log line per change of what holds it.
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

/** What one pass through the gate asks. */
export interface GatePass {
  /** The engine's devices. */
  readonly devices: readonly string[];
  /** Free memory its engine demands at start, where known. */
  readonly memory?: GpuMemoryNeed | undefined;
  /** For a restart: the dead run's baseline of gone pids. */
  readonly baseline?: ReadonlySet<number> | undefined;
  /** Ends the wait (the supervisor is stopping). */
  readonly signal: AbortSignal;
}

/**
 * One engine's waits at the gate.
 *
 * @example
 * ```ts ignore
 * const waits = new StartWait("bge-m3", () => setState("waiting"));
 * const slot = await waits.pass(gate, { devices: ["0"], signal });
 * ```
 */
export class StartWait {
  readonly #name: string;
  readonly #onHeld: () => void;
  #current: WaitingFor | null = null;
  #since = 0;
  #ms: Partial<Record<WaitReason, number>> = {};

  /**
   * @param name The engine's catalogue name, for log lines.
   * @param onHeld Called whenever what holds the start changes.
   */
  constructor(name: string, onHeld: () => void) {
    this.#name = name;
    this.#onHeld = onHeld;
  }

  /** What holds the start now, or null. */
  get current(): WaitingFor | null {
    return this.#current;
  }

  /**
   * Waits at the gate; undefined when the signal ended the wait.
   *
   * @param gate The launcher's GPU start gate.
   * @param pass The devices, needs and signal.
   * @returns The granted slot, or undefined.
   */
  async pass(
    gate: GpuStartGate,
    pass: GatePass,
  ): Promise<StartSlot | undefined> {
    const slot = await gate.admit({
      name: this.#name,
      devices: pass.devices,
      memory: pass.memory,
      baseline: pass.baseline,
      signal: pass.signal,
      onWait: (waiting) => this.#held(waiting),
    }).catch(() => undefined);
    const waited = this.#current;
    this.#held(null);
    if (slot && waited) {
      log.info(
        `engine ${this.#name} starts on GPU ${
          pass.devices.join(",")
        } (waited for ${waited.reason})`,
      );
    }
    return slot;
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
