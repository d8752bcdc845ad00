// The start gate, and the memory each run holds, read once per health round and sent to each run as an event.
import { log } from "../common/log.ts";
import { procStats } from "../engines/proc.ts";
import {
  deviceOf,
  type GpuMonitor,
  type GpuSnapshot,
  usedOn,
} from "./nvidia_smi.ts";
import type { MemoryNeed } from "../engines/kinds/engine_kind.ts";
import type { EnginePlan } from "../engines/engine_plan.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { launcherSleep, wakesItself } from "../engines/sleep_after.ts";
import {
  GpuStartGate,
  type Released,
  type StartSlot,
  type WaitingFor,
  type WaitReason,
} from "./start_gate.ts";

export interface GpuReading {
  /** MiB the run holds per device entry `nvidia-smi` lists. */
  readonly mib: Readonly<Record<string, number>>;
  /** `pid`: its listed pids; `device`: the device's change across its start. */
  readonly by: "pid" | "device";
  readonly pids: readonly number[];
  readonly usedMiB: Readonly<Record<string, number>>;
}

/** What a round tells a run: the memory it holds now, null when unread. */
export interface GpuMemoryEvent {
  readonly kind: "gpu-memory";
  readonly reading: GpuReading | null;
}

export interface GpuRun {
  readonly name: string;
  readonly state: string;
  readonly gpus: readonly string[] | null;
  readonly pgid: number | undefined;
  readonly gpuStartUsed: Readonly<Record<string, number>>;
  /** Its card and placement's need: a sleeper that wakes itself is held to it. */
  readonly plan?: Pick<EnginePlan, "card" | "placement">;
  send(event: GpuMemoryEvent): void;
}

export interface GpuLifecycleOptions {
  readonly intervalMs: number;
  readonly releaseTimeoutMs: number;
  readonly runs: () => readonly GpuRun[];
  readonly monitor: GpuMonitor;
}

export class GpuLifecycle {
  readonly gate: GpuStartGate;
  readonly #options: GpuLifecycleOptions;
  /** Each run's last reading while awake, and its reading now. */
  readonly #awake = new WeakMap<GpuRun, GpuReading>();
  readonly #now = new WeakMap<GpuRun, GpuReading>();
  /** Each run's state when the last round's look was asked. */
  readonly #asked = new WeakMap<GpuRun, string>();

  constructor(options: GpuLifecycleOptions) {
    this.#options = options;
    this.gate = new GpuStartGate({
      facts: options.monitor,
      intervalMs: options.intervalMs,
      releaseTimeoutMs: options.releaseTimeoutMs,
      processes: procStats,
      ownGroups: () =>
        new Map(
          options.runs().flatMap((run) =>
            run.pgid === undefined ? [] : [[run.pgid, run.name]]
          ),
        ),
      // Asleep (llama-server's --sleep-idle-seconds, vLLM's /sleep) an engine
      // frees most of its memory; the gate keeps it for its wake. One that
      // wakes itself may take it back at any time, before any round saw it
      // awake or midway through a wake: never less than its planned need.
      // What it holds now is read from the gate's own look where its pids are
      // listed: the last round's can predate a sleep whose line is not heard yet.
      asleep: (entry, snapshot) => {
        let kept = 0;
        let groups: Map<number, number> | undefined;
        for (const run of options.runs()) {
          const { card, placement } = run.plan ?? {};
          const kind = card && ENGINE_KINDS[card.engine];
          const self = card && wakesItself(card, kind);
          // One the launcher wakes holds its room until the launcher marks
          // it asleep (its memory frees before its sleep's answer comes), and
          // again from its wake's start; asleep, room is made before its wake.
          const woken = card && launcherSleep(card, kind);
          const holds = woken
            ? run.state === "ready" || run.state === "waking"
            : run.state === "sleeping" || (self && run.state === "ready");
          if (!holds) continue;
          groups ??= new Map(
            [...procStats(snapshot.processes.map((p) => p.pid))]
              .map(([pid, { pgid }]) => [pid, pgid]),
          );
          const look = run.pgid !== undefined && run.gpus
            ? runMemory(snapshot, run.gpus, run.pgid, groups, run.gpuStartUsed)
            : undefined;
          const planned = (self || woken) && placement?.memoryNeed?.mib || 0;
          const awake = this.#awake.get(run)?.mib[entry] ?? 0;
          const now = look?.by === "pid"
            ? look.mib[entry] ?? 0
            : this.#now.get(run)?.mib[entry] ?? 0;
          kept += Math.max(awake, planned, now) - now;
        }
        return kept;
      },
    });
  }

  /** MiB free on a device for a start or a wake: its total less what is used and what sleepers that wake themselves (or wake now) take back; undefined where unknown. */
  free(entry: string, snapshot: GpuSnapshot): number | undefined {
    const device = deviceOf(entry, snapshot);
    if (!device?.memoryKnown) return undefined;
    const kept = this.gate.kept(entry, snapshot);
    return device.totalMiB - device.usedMiB - kept;
  }

  /** What a run holds in `snapshot` by its listed pids, by device entry; undefined where they are not listed. */
  holds(
    run: GpuRun,
    snapshot: GpuSnapshot,
  ): Readonly<Record<string, number>> | undefined {
    if (run.pgid === undefined || !run.gpus?.length) return undefined;
    const groups = groupsOf(snapshot);
    const reading = runMemory(
      snapshot,
      run.gpus,
      run.pgid,
      groups,
      run.gpuStartUsed,
    );
    return reading.by === "pid" ? reading.mib : undefined;
  }

  /** What a run held at its last round awake, by device entry. */
  awake(run: GpuRun): Readonly<Record<string, number>> | undefined {
    return this.#awake.get(run)?.mib;
  }

  /** At most one `nvidia-smi` query (shared with the gate), then each placed run's memory. */
  async round(): Promise<void> {
    const { runs, monitor, intervalMs } = this.#options;
    const placed = runs().filter((run) => (run.gpus?.length ?? 0) > 0);
    if (placed.length === 0) return;
    // Younger than half an interval: a fresh answer each round while nvidia-smi
    // is quick, never more than one query a round when it is slow.
    // A run that slept or woke since the last round's look: one asked before
    // would charge it what it held in its other state.
    const moved = placed.some((run) => this.#asked.get(run) !== run.state);
    const asked = new Map(placed.map((run) => [run, run.state]));
    const snapshot = moved
      ? await monitor.snapshot(0, monitor.mark())
      : await monitor.snapshot(intervalMs / 2);
    const groups = groupsOf(snapshot);
    for (const run of placed) {
      this.#asked.set(run, asked.get(run)!);
      // Its state changed while the query ran: its next round reads it.
      if (run.state !== asked.get(run)) continue;
      const reading = snapshot && run.pgid !== undefined
        ? runMemory(snapshot, run.gpus!, run.pgid, groups, run.gpuStartUsed)
        : null;
      run.send({ kind: "gpu-memory", reading });
      if (!reading) continue;
      this.#now.set(run, reading);
      if (run.state === "ready") this.#awake.set(run, reading);
    }
  }
}

/** Each listed pid's process group. */
function groupsOf(snapshot: GpuSnapshot | undefined): Map<number, number> {
  const live = procStats(snapshot?.processes.map((p) => p.pid) ?? []);
  return new Map([...live].map(([pid, { pgid }]) => [pid, pgid]));
}

// By pid where listed pids are in its process group (vLLM's workers are the
// engine's children); else (a container lists the host's pids) by the device's
// change since just before the spawn: rule 1 lets one load at a time onto it.
export function runMemory(
  snapshot: GpuSnapshot,
  devices: readonly string[],
  pgid: number,
  groups: ReadonlyMap<number, number>,
  startUsed: Readonly<Record<string, number>>,
): GpuReading {
  const mine = snapshot.processes.filter((p) => groups.get(p.pid) === pgid);
  const by = mine.length > 0 ? "pid" : "device";
  const usedMiB = usedOn(devices, snapshot);
  const mib: Record<string, number> = {};
  for (const [entry, used] of Object.entries(usedMiB)) {
    const uuid = deviceOf(entry, snapshot)!.uuid;
    const before = startUsed[entry];
    if (by === "pid") {
      mib[entry] = mine.filter((p) => p.gpuUuid === uuid)
        .reduce((sum, p) => sum + p.usedMiB, 0);
    } else if (before !== undefined) mib[entry] = Math.max(0, used - before);
  }
  return { mib, by, pids: [...new Set(mine.map((p) => p.pid))], usedMiB };
}

/** One run's passage through the gate; a later measurement (a load's end) goes back to the run as an event. */
export class GpuSeat {
  #facts: GateFacts = { since: 0, ms: {}, startUsed: {} };
  readonly #gate: GpuStartGate | undefined;
  /** Its devices where a gate holds them, else undefined: nothing here applies. */
  readonly gated: readonly string[] | undefined;
  readonly #now: () => number;
  /** What the next start waits to see released: the replaced or the dead run's memory. */
  #released: Released | undefined;

  constructor(
    gate: GpuStartGate | undefined,
    devices: readonly string[] | null,
    now: () => number,
    released: Released | undefined,
  ) {
    this.#gate = gate;
    this.gated = gate && devices?.length ? devices : undefined;
    [this.#now, this.#released] = [now, released];
  }

  get facts(): GateFacts {
    return this.#facts;
  }

  get loading(): boolean {
    return this.#facts.slot !== undefined;
  }

  /** Notes what holds engine `name`'s start now (null: nothing), said once a reason or its devices change; returns what held it before. */
  hold(waiting: WaitingFor | null, name: string): WaitingFor | null {
    const facts = this.#facts;
    const was = facts.waiting ?? null;
    const now = this.#now();
    const ms = { ...facts.ms };
    if (was) ms[was.reason] = (ms[was.reason] ?? 0) + now - facts.since;
    this.#facts = { ...facts, ms, since: now, waiting };
    const changed = was?.reason !== waiting?.reason ||
      was?.devices.join() !== waiting?.devices.join();
    if (waiting && changed) {
      const on = waiting.devices.join(",");
      log.info(`engine ${name} waits for GPU ${on}: ${waiting.detail}`);
    }
    return was;
  }

  /** Through the gate: each hold to `held`, then the slot; null when `signal` ended the wait. */
  async pass(
    name: string,
    memory: MemoryNeed | undefined,
    signal: AbortSignal,
    held: (waiting: WaitingFor) => void,
  ): Promise<StartSlot | null> {
    const [devices, released] = [this.gated!, this.#released];
    try {
      const request = { name, devices, memory, released, signal };
      const ticket = this.#gate!.admit(request);
      let step = await ticket.next();
      for (; !step.done; step = await ticket.next()) held(step.value);
      return step.value;
    } catch {
      return null; // aborted: the engine is stopping
    }
  }

  /** Engine `name` starts through the gate, having `waited` for a rule or not. */
  seat(slot: StartSlot, name: string, waited: WaitingFor | null): void {
    this.#facts = { ...this.#facts, slot, startUsed: slot.usedMiB };
    if (!waited) return;
    const on = `GPU ${this.gated!.join(",")}`;
    log.info(`engine ${name} starts on ${on} (waited for ${waited.reason})`);
  }

  spawned(pgid: number | undefined): void {
    if (this.gated) this.#gate!.changed(this.gated);
    this.#facts = { ...this.#facts, pgid, memory: null, settled: null };
  }

  /** The load is over: the slot goes back; `served` (a first 200): `measured` gets the devices' use the gate reads at its end. */
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

  /** A round's reading, charged (below); `settled` once the load is over. */
  reading(reading: GpuReading | null): void {
    const memory = chargedLoad(reading, this.#facts);
    const settled = memory && !this.#facts.slot ? { settled: memory } : {};
    this.#facts = { ...this.#facts, memory, ...settled };
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
    const { ms, waiting, since } = this.#facts;
    const out: Partial<Record<WaitReason, number>> = Object.fromEntries(
      Object.entries(ms).map(([reason, ms]) => [reason, ms / 1000]),
    );
    const current = waiting?.reason;
    if (current !== undefined) {
      out[current] = (out[current] ?? 0) + (this.#now() - since) / 1000;
    }
    return out;
  }

  /** Waits while a neighbour loads on its devices (vLLM profiles device-wide free memory). */
  quiet(name: string, why: string, signal: AbortSignal): Promise<void> {
    return this.#gate?.quiet(this.gated ?? [], name, why, signal) ??
      Promise.resolve();
  }
}

/** One run's passage through the gate and its memory, as plain data. */
export interface GateFacts {
  readonly waiting?: WaitingFor | null;
  readonly since: number;
  readonly ms: Readonly<Partial<Record<WaitReason, number>>>;
  readonly slot?: StartSlot | undefined;
  readonly startUsed: Readonly<Record<string, number>>;
  /** Each device's used MiB where run `pgid`'s load ended (it served): device attribution stops there. */
  readonly loadEnd?: { pgid: number; used: Readonly<Record<string, number>> };
  readonly pgid?: number | undefined;
  readonly memory?: GpuReading | null;
  /** The last reading after the load ended: what a restart waits to see released. */
  readonly settled?: GpuReading | null;
}

export function releasedBy(facts: GateFacts): Released {
  const { settled, startUsed, pgid } = facts;
  const devices = settled
    ? Object.fromEntries(
      Object.entries(settled.usedMiB)
        .map(([entry, used]) => [entry, used - (settled.mib[entry] ?? 0)]),
    )
    : startUsed; // died loading
  const pids = new Set(settled?.pids ?? []);
  if (pgid !== undefined) pids.add(pgid);
  return { devices, pids: [...pids], byPid: settled?.by === "pid" };
}

/** By device, once its load ended: the change across the load (spawn to first 200); a later neighbour is never its. */
export function chargedLoad(
  reading: GpuReading | null,
  facts: GateFacts,
): GpuReading | null {
  const end = facts.loadEnd?.pgid === facts.pgid && facts.loadEnd?.used;
  if (!reading || reading.by !== "device" || !end) return reading;
  const mib: Record<string, number> = { ...reading.mib };
  for (const entry of Object.keys(mib)) {
    const [before, after] = [facts.startUsed[entry], end[entry]];
    if (before === undefined || after === undefined) continue;
    mib[entry] = Math.max(0, after - before);
  }
  return { ...reading, mib };
}
