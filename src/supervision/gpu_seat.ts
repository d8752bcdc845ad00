// One engine run's passage through the GPU start gate and the memory it
// holds: plain facts (`GateFacts`) that gpu_lifecycle.ts's pure functions
// derive anew. Only its engine run's handlers change them; what the gate
// measures later (a load's end) comes back to the run as an event.
import type { Clock } from "../common/sleep.ts";
import {
  type GateFacts,
  type GpuReading,
  noteWait,
  passGate,
  releasedBy,
  waitSeconds,
  withReading,
} from "../gpu/gpu_lifecycle.ts";
import type { GpuMemoryNeed } from "../gpu/need.ts";
import type {
  GpuStartGate,
  Released,
  StartSlot,
  WaitingFor,
  WaitReason,
} from "../gpu/start_gate.ts";

export class GpuSeat {
  #facts: GateFacts = { since: 0, ms: {}, startUsed: {} };
  readonly #gate: GpuStartGate | undefined;
  /** Its devices where a gate holds them, else undefined: nothing here applies. */
  readonly gated: readonly string[] | undefined;
  readonly #clock: Clock;
  /** What the next start waits to see released: the replaced or the dead run's memory. */
  #released: Released | undefined;

  constructor(
    gate: GpuStartGate | undefined,
    devices: readonly string[] | null,
    clock: Clock,
    released: Released | undefined,
  ) {
    this.#gate = gate;
    this.gated = gate && devices?.length ? devices : undefined;
    this.#clock = clock;
    this.#released = released;
  }

  get facts(): GateFacts {
    return this.#facts;
  }

  /** Notes what holds the start now (null: nothing); returns what held it before and whether that changed. */
  hold(
    waiting: WaitingFor | null,
  ): { was: WaitingFor | null; changed: boolean } {
    const was = this.#facts.waiting ?? null;
    const noted = noteWait(this.#facts, waiting, this.#clock.now());
    this.#facts = noted.facts;
    return { was, changed: noted.changed };
  }

  /** Each hold to `held`, then the slot; null when `signal` ended the wait. */
  pass(
    name: string,
    memory: GpuMemoryNeed | undefined,
    signal: AbortSignal,
    held: (waiting: WaitingFor) => void,
  ): Promise<StartSlot | null> {
    const devices = this.gated!;
    const released = this.#released;
    const request = { name, devices, memory, released, signal };
    return passGate(this.#gate!, request, held);
  }

  seat(slot: StartSlot): void {
    this.#facts = { ...this.#facts, slot, startUsed: slot.usedMiB };
  }

  get loading(): boolean {
    return this.#facts.slot !== undefined;
  }

  spawned(pgid: number | undefined): void {
    if (this.gated) this.#gate!.changed(this.gated);
    this.#facts = { ...this.#facts, pgid, memory: null, settled: null };
  }

  /** The load is over: the slot goes back; `served` (a first 200): `measured` gets what the gate reads at its end. */
  release(
    served: boolean,
    measured: (pgid: number, used: Readonly<Record<string, number>>) => void,
  ): void {
    if (this.gated) this.#gate!.changed(this.gated);
    const { slot, pgid } = this.#facts;
    this.#facts = { ...this.#facts, slot: undefined };
    slot?.release();
    if (served && pgid !== undefined) {
      void slot?.loadEnd?.then((used) => measured(pgid, used));
    }
  }

  loadEnd(pgid: number, used: Readonly<Record<string, number>>): void {
    this.#facts = { ...this.#facts, loadEnd: { pgid, used } };
  }

  reading(reading: GpuReading | null): void {
    this.#facts = withReading(this.#facts, reading);
  }

  exited(): void {
    this.#facts = { ...this.#facts, memory: null };
  }

  /** What the ended run held is what its restart waits to see released. */
  restarting(): void {
    this.#released = this.released();
  }

  released(): Released | undefined {
    return this.gated ? releasedBy(this.#facts) : undefined;
  }

  waitSeconds(): Partial<Record<WaitReason, number>> {
    return waitSeconds(this.#facts, this.#clock.now());
  }

  /** Waits while a neighbour loads on its devices (vLLM profiles device-wide free memory). */
  quiet(name: string, why: string, signal: AbortSignal): Promise<void> {
    return Promise.resolve(
      this.#gate?.quiet(this.gated ?? [], name, why, signal),
    );
  }
}
