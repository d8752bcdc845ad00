// An engine that sleeps when idle by itself (llama.cpp): its own lines move
// it to `sleeping` and back at once; each health round measures what it
// holds awake and what it keeps asleep (its residue); a wake is timed from
// its line to its reload's end; a reload that aborts is the run's exit cause.
// Nothing here sends the engine anything: a request would wake it.
import { log } from "../common/log.ts";
import { type Clock, REAL_CLOCK, shownAt } from "../common/sleep.ts";
import type { EnginePlan } from "../engines/engine_plan.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import type { SleepLine } from "../engines/kinds/engine_kind.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import { procFile } from "../engines/proc.ts";
import { sleepSeconds } from "../engines/sleep_after.ts";
import { routesOf } from "../engines/sleep_routes.ts";
import type { EngineDetail, EngineView } from "./engine_detail.ts";
import type { EngineRunOptions } from "./engine_run_options.ts";
import type { EngineState } from "./engine_state.ts";

/** An engine set to sleep when idle, as `GET /models?detail=1` shows it. */
export type SleepView = NonNullable<EngineView["sleep"]>;

type Own = Omit<SleepView, "last_wake_check">;

/** What it tells the engine run (the serving watch's `sleep` event). */
export type SleepEvent = { kind: "sleep"; run: ServerProcess } & Told;
/** `waking`: asleep still, its wake begun (the launcher's, for a parked request); `sure`: the launcher's own sleep or wake, as sure as a line. */
type Told = { asleep: boolean; why: string; waking?: boolean; sure?: boolean };

/** An engine as the watches read it, afresh each time: a reload amends the plan (its key, the stall and canary settings, the traffic rule). */
export interface Watched {
  readonly name: string;
  readonly plan: EnginePlan;
  readonly state: EngineState;
  detail?(): Pick<EngineDetail, "gpu_memory_mib" | "gpu_memory_by">;
}

// Freeing takes milliseconds: a round before this reads the awake figure.
const SETTLE_MS = 1_000;
// vLLM's sleep has leaked pinned memory cycle after cycle (torch_memory_saver #71).
const GROWTH_BYTES = 256 * 2 ** 20;

/** One engine's sleep, fed by its run's lines and the health rounds (`ServingWatch.sleep`); e.g. `watch.view()?.residue_bytes`. */
export class SleepWatch {
  readonly #engine: Watched;
  readonly #o: Pick<EngineRunOptions, "journal" | "clock">;
  readonly #on: (event: SleepEvent) => void;
  readonly #woken: (run: ServerProcess) => void;
  #run: ServerProcess | undefined;
  #asleepAt: number | null = null;
  #wakingAt: number | null = null;
  #told = false; // this sleep's residue journaled
  #roundAt = 0; // a poll of this round asked after it
  #lineAt = -Infinity; // a poll asked before the last line answered before it
  #byLine = false;
  #because: string | null = null;
  #first: number | null = null; // the run's first residue: growth is against it
  #v: { -readonly [K in keyof Own]: Own[K] } = {
    after_seconds: 0,
    asleep_since: null,
    residue_bytes: null,
    awake_bytes: null,
    freed_bytes: null,
    by: null,
    sleeps: 0,
    wakes: 0,
    wake_seconds_sum: 0,
    last_wake_seconds: null,
    woken_by: "itself",
    engine_freed_bytes: null,
    engine_in_use_bytes: null,
    waits_for: null,
    switches: 0,
    switch_seconds_sum: 0,
    last_switch_seconds: null,
    last_made_room: [],
    made_room: 0,
    launcher_sleep_off: null,
  };

  constructor(
    engine: Watched,
    options: Pick<EngineRunOptions, "journal" | "clock">,
    on: (event: SleepEvent) => void,
    woken: (run: ServerProcess) => void = () => {},
  ) {
    [this.#engine, this.#o, this.#on] = [engine, options, on];
    this.#woken = woken; // a wake's end: the serving watch checks it
  }

  /** Null for an engine never set to sleep; its wake's check is the serving watch's. */
  view(): Own | null {
    const after = this.#after();
    const since = this.#asleepAt && shownAt(this.#clock, this.#asleepAt);
    if (after === undefined) return null;
    const woken_by = routesOf(this.#engine.plan) ? "launcher" : "itself";
    return {
      ...this.#v,
      after_seconds: after,
      asleep_since: since || null,
      woken_by,
    };
  }

  /** The next sleep's reason, for its line's state change and its journal line (the launcher's: idle, room for another, the probe); null: none asked. */
  because(why: string | null): void {
    this.#because = why;
  }

  /** It was put to sleep to make room for another. */
  madeRoom(): void {
    this.#v.made_room++;
  }

  /** The launcher's wake began (a parked request): it waits for `what`. */
  waitsFor(what: string | null): void {
    this.#v.waits_for = what;
  }

  /** The launcher asks it to wake now: the wake is timed from here. */
  wakeSent(run: ServerProcess): void {
    if (run === this.#run) this.#wakingAt = this.#now();
  }

  /** The wake's answer came: its end, where its line did not say so first. */
  woken(run: ServerProcess): void {
    if (run === this.#run) this.#woke(run);
  }

  /** A parked request's wait, to the wake's end; the engines put to sleep for it. */
  switched(seconds: number, madeRoom: readonly string[]): void {
    const v = this.#v;
    v.switches++;
    v.switch_seconds_sum += seconds;
    v.last_switch_seconds = seconds;
    v.last_made_room = [...madeRoom];
  }

  /** The launcher will not sleep it (null: it will again). */
  off(why: string | null): void {
    this.#v.launcher_sleep_off = why;
  }

  /** A new run: its lines come here. */
  attach(run: ServerProcess): void {
    this.#run = run;
    this.#asleepAt = this.#wakingAt = this.#first = null;
    run.watch.onSleep = (line, text, said) => this.#line(run, line, text, said);
  }

  /** A reload's replacement counts on. */
  inherit(old: SleepWatch): void {
    const { sleeps, wakes, wake_seconds_sum, switches, switch_seconds_sum } =
      old.#v;
    Object.assign(this.#v, {
      made_room: old.#v.made_room,
      sleeps,
      wakes,
      wake_seconds_sum,
      switches,
      switch_seconds_sum,
    });
  }

  /**
   * Where a sleep event (a line, a poll's `is_sleeping`) moves run `run` in
   * `state`: undefined when not its current run or state, or when a poll
   * says asleep while a wake reloads (the engine clears it at the reload's
   * end), or a poll asked before its last line.
   */
  move(
    run: ServerProcess,
    asleep: boolean,
    state: EngineState,
    waking = false,
    sure = false,
  ): "sleeping" | "waking" | "ready" | undefined {
    if (run !== this.#run) return;
    if (sure) this.#lineAt = this.#now();
    if (waking) return asleep && state === "sleeping" ? "waking" : undefined;
    // A wake given up (its parked request left first): asleep still.
    if (asleep && sure && state === "waking") {
      this.#v.waits_for = null;
      return "sleeping";
    }
    const from = asleep ? ["ready"] : ["sleeping", "waking"];
    if (!from.includes(state)) return;
    if (asleep && this.#wakingAt !== null) return;
    if (!this.#byLine && !sure && this.#lineAt >= this.#roundAt) return;
    this.#asleepAt = asleep ? this.#now() : null;
    if (!asleep) return this.#v.waits_for = null, "ready";
    this.#told = false;
    this.#v.sleeps++;
    return "sleeping";
  }

  /** A health round: what it holds, awake or (once settled) asleep. */
  round(run: ServerProcess, state: EngineState): void {
    const after = this.#after();
    this.#roundAt = this.#now();
    if (run !== this.#run || after === undefined || !run.running) return;
    const asleep = state === "sleeping";
    if (!asleep && (state !== "ready" || this.#wakingAt !== null)) return;
    if (asleep && this.#now() - (this.#asleepAt ?? 0) < SETTLE_MS) return;
    const bytes = this.#read(run);
    if (bytes === undefined || this.#engine.state !== state) return;
    const v = this.#v;
    if (!asleep) return void (v.awake_bytes = bytes);
    v.residue_bytes = bytes;
    if (!this.#told) {
      this.#told = true;
      v.freed_bytes = v.awake_bytes && Math.max(v.awake_bytes - bytes, 0);
      const gave = v.freed_bytes === null
        ? ""
        : `freed ${size(v.freed_bytes)}, `;
      const why = this.#because ?? `asleep after ${after} s idle`;
      this.#because = null;
      const said = `${why}: ${gave}keeps ${size(bytes)}`;
      this.#say("asleep", said);
    }
    const first = this.#first ??= bytes;
    if (bytes - first <= GROWTH_BYTES) return;
    this.#first = Infinity; // said once a run
    const [from, to] = [size(first), size(bytes)];
    const grew = `its residue grew from ${from} to ${to} asleep`;
    this.#say("residue-grew", grew, "warn");
  }

  #line(
    run: ServerProcess,
    line: SleepLine,
    text: string,
    said?: readonly string[],
  ): void {
    if (run !== this.#run) return;
    // vLLM says what its sleep freed and what is still in use, in GiB.
    const [freed, inUse] = (said ?? []).map((g) => Number(g) * 2 ** 30);
    if (line === "asleep" && Number.isFinite(inUse)) {
      this.#v.engine_freed_bytes = Number.isFinite(freed) ? freed! : null;
      this.#v.engine_in_use_bytes = inUse!;
    }
    // Its run's exit cause, over a line the failed reload printed first (an out of memory).
    if (line === "failed") {
      run.watch.cause = { cause: "wake-failed", message: text.slice(0, 200) };
    }
    const told = LINES[line]?.(this.#after(), this.#because);
    if (told) {
      this.#wakingAt = told.asleep ? null : this.#now();
      [this.#lineAt, this.#byLine] = [this.#now(), true];
      this.#on({ kind: "sleep", run, ...told });
      this.#byLine = false;
    }
    if (line === "awake") this.#woke(run);
  }

  #woke(run: ServerProcess): void {
    if (this.#wakingAt === null) return; // a first load's line, or told twice
    const seconds = (this.#now() - this.#wakingAt) / 1000;
    this.#wakingAt = null;
    this.#v.wakes++;
    this.#v.wake_seconds_sum += seconds;
    this.#v.last_wake_seconds = seconds;
    const by = routesOf(this.#engine.plan) ? "the launcher" : "a request";
    this.#say("woken", `woken by ${by} in ${seconds.toFixed(2)} s`);
    this.#woken(run);
  }

  #read(run: ServerProcess): number | undefined {
    // A GPU engine's residue is on its devices: its resident memory is not it.
    if (this.#engine.plan.placement.gpus?.length) {
      const { gpu_memory_mib: mib, gpu_memory_by: by } =
        this.#engine.detail?.() ?? {};
      if (!mib || by !== "pid") return undefined; // a device's change is not its own
      this.#v.by = "nvidia-smi";
      return Object.values(mib).reduce((sum, n) => sum + n, 0) * 2 ** 20;
    }
    const status = procFile(`/proc/${run.pid}/status`);
    const kib = /^VmRSS:\s+(\d+) kB/m.exec(status)?.[1];
    if (kib === undefined) return undefined;
    this.#v.by = "rss";
    return Number(kib) * 1024;
  }

  #say(reason: string, detail: string, level: "info" | "warn" = "info"): void {
    const { name } = this.#engine;
    log[level](`engine ${name} (pid ${this.#run?.pid}) ${detail}`);
    const [at, journal] = [shownAt(this.#clock, this.#now()), this.#o.journal];
    journal?.record({ at, model: name, event: "sleep", reason, detail });
  }

  #after(): number | undefined {
    const card = this.#engine.plan.card;
    return sleepSeconds(card, ENGINE_KINDS[card.engine]);
  }

  get #clock(): Clock {
    return this.#o.clock ?? REAL_CLOCK;
  }

  #now(): number {
    return this.#clock.now();
  }
}

const LINES: Partial<
  Record<SleepLine, (after?: number, because?: string | null) => Told>
> = {
  asleep: (after, because) => ({
    asleep: true,
    why: because ?? `asleep after ${after} s idle`,
  }),
  waking: () => ({ asleep: false, why: "woken by a request" }),
};

/** `21.3 GiB`, `19.0 MiB`. */
function size(bytes: number): string {
  const gib = Math.abs(bytes) >= 2 ** 30;
  return `${(bytes / 2 ** (gib ? 30 : 20)).toFixed(1)} ${gib ? "GiB" : "MiB"}`;
}
