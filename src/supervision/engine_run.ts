/**
 * One model's engine, its whole life: one state field, one dispatch (`#on`)
 * handing each event to its handler (docs/development.md's table); the rules
 * are pure, every per-card setting its plan's.
 * Folder `supervision/` knows nothing of HTTP, authentication or the CLI.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { type Clock, late, REAL_CLOCK, shownAt } from "../common/sleep.ts";
import type { Watchdog } from "./watchdog.ts";
import type { EngineLog } from "../engines/log_sink.ts";
import type { Released } from "../gpu/start_gate.ts";
import { GpuSeat } from "../gpu/gpu_lifecycle.ts";
import { Liveness } from "./liveness.ts";
import {
  CauseStreak,
  type EndReason,
  restartDelayMs,
  shouldRestart,
  stopVerdict,
  type Verdict,
} from "./restart_policy.ts";
import type { EngineState } from "./engine_state.ts";
import type { EngineEvent, EventOf } from "./engine_events.ts";
import type { EngineCounts, EngineRunOptions } from "./engine_run_options.ts";
import { ServingWatch } from "./serving_watch.ts";
import {
  type EngineDetail,
  exitLine,
  type LastExit,
  lastExitOf,
} from "./engine_detail.ts";
import type { ExitCause } from "../engines/kinds/engine_kind.ts";
import { ServerProcess } from "../engines/server_process.ts";
import { type EnginePlan, replan } from "../engines/engine_plan.ts";
import { isPortFree } from "../engines/ports.ts";
import { Drain } from "./drain.ts";
import { footprintOf, FootprintSeen } from "../engines/footprint_lines.ts";
import { Starts } from "./start_record.ts";

export class EngineRun {
  readonly log: EngineLog;
  /** The running run's plan, amended by a reload: every reader's. */
  #plan: EnginePlan;
  /** The key of the next start: a reload's new one reaches the engine there. */
  #key: string;
  #o: EngineRunOptions;
  #clock: Clock;
  #process: ServerProcess;
  #state: EngineState = "starting";
  #since: Date;
  #restarts = 0;
  #spawned = false; // a run of this object spawned: later starts are restarts
  #step = 0;
  #lastExit: LastExit | null = null;
  #causes = new CauseStreak();
  #exits: Partial<Record<ExitCause, number>> = {};
  #nextRestart: Date | null = null;
  #endReason: EndReason = "exit";
  #seen: string | null = null; // what the stall verdict saw: the exit's message
  #stopWhy: string | undefined;
  /** Ends a backoff, a wait at the gate, the load and download watches. */
  #interrupt = new AbortController();
  readonly #gpu: GpuSeat;
  #watchdog: Watchdog | undefined;
  #done: PromiseWithResolvers<void> | undefined;
  readonly #liveness: Liveness;
  #drain: Drain | undefined;
  #cut = 0;
  #footprint = new FootprintSeen();
  #starts = new Starts(); // each start to ready, and the last recovery
  readonly serving: ServingWatch;

  constructor(plan: EnginePlan, options: EngineRunOptions) {
    this.#plan = plan;
    this.#key = plan.apiKey;
    this.#o = options;
    this.#clock = options.clock ?? REAL_CLOCK;
    this.#since = new Date(this.#clock.wall());
    this.log = options.log;
    this.#process = this.#spawn(plan);
    const { gate, released } = options;
    const now = () => this.#clock.now();
    this.#gpu = new GpuSeat(gate, plan.placement.gpus, now, released);
    const on = (e: EngineEvent) => this.#on(e);
    this.#liveness = new Liveness(this.name, this.#clock, options, (run) => {
      this.#on({ kind: "silence", run });
    });
    this.serving = new ServingWatch(this, options, on, this.#interrupt.signal);
  }

  get plan(): EnginePlan {
    return this.#plan;
  }

  /** Its catalogue name; where it runs is its plan's (a reload that moves it replaces its run). */
  get name(): string {
    return this.#plan.name;
  }

  get process(): ServerProcess {
    return this.#process;
  }

  get pgid(): number | undefined {
    return this.#process.running ? this.#process.pid : undefined;
  }

  get state(): EngineState {
    return this.#state;
  }

  get gpus(): readonly string[] | null {
    return this.#plan.placement.gpus;
  }

  detail(): EngineDetail {
    const run = this.#process;
    const loading = this.#state === "starting" && run.running;
    const phaseSince = loading ? run.watch.phaseSince : undefined;
    return {
      state: this.#state,
      pid: run.running ? run.pid ?? null : null,
      restarts: this.#restarts,
      since: this.#since.toISOString(),
      last_exit: this.#lastExit,
      next_restart: this.#nextRestart?.toISOString() ?? null,
      gpus: this.#plan.placement.gpus,
      waiting_for: this.#gpu.facts.waiting ?? null,
      gpu_memory_mib: this.#gpu.facts.memory?.mib ?? null,
      gpu_memory_by: this.#gpu.facts.memory?.by ?? null,
      footprint: this.#footprint.last,
      phase: loading ? run.watch.phase : null,
      phase_since: phaseSince && shownAt(this.#clock, phaseSince) || null,
      progress: loading ? run.watch.progress : null,
      last_start: this.#starts.last,
      last_recovery: this.#starts.recovery,
      ...this.serving.detail(),
      drain: this.#state === "draining" ? this.#drain!.view() : null,
    };
  }

  /** What the metrics count beyond the detail view. */
  counts(): EngineCounts {
    return {
      exits: { ...this.#exits },
      requestsCut: this.#cut,
      healthPollSeconds: this.#liveness.pollSeconds,
      startWaitSeconds: this.gpus?.length ? this.#gpu.waitSeconds() : undefined,
      starts: this.#starts.tally,
    };
  }

  /** A memory round's reading of this run; the launcher's sleep or wake of it (`serve/residency.ts`). */
  send(event: EventOf<"gpu-memory" | "sleep" | "wake-failed">): void {
    this.#on(event);
  }

  get gpuStartUsed(): Readonly<Record<string, number>> {
    return this.#gpu.facts.startUsed;
  }

  gpuReleased(): Released | undefined {
    return this.#gpu.released();
  }

  /** Starts the first run; one that cannot be spawned ends this engine alone (one warning). */
  start(watchdog?: Watchdog): void {
    if (this.#done) return;
    this.#watchdog = watchdog;
    this.#done = Promise.withResolvers();
    if (this.#gpu.gated) return void this.#admit();
    this.#on({ kind: "admitted", slot: undefined });
  }

  /** A background poll (`counts`) is a liveness check, a `GET /models` request's is not. */
  async healthy(timeoutMs: number, counts = false): Promise<boolean> {
    const run = this.#process;
    const off = counts ? ["stopping", "draining"] : ["draining"];
    if (!run.running || off.includes(this.#state)) return false;
    const result = await run.check(timeoutMs);
    this.#on({ kind: "probe", run, result, counts });
    if (counts) await this.serving.round(run, this.#state);
    // A drain begun while the poll was out: it takes no new work all the same.
    return result.ok && !off.includes(this.#state);
  }

  /** Stops for good: a ready run drains first; `keepLog` for a replacement. */
  async stop(
    graceMs: number = this.#o.graceMs,
    options: { keepLog?: boolean; why?: string } = {},
  ): Promise<void> {
    const why = options.why === undefined ? "" : ` (${options.why})`;
    this.#on({ kind: "stop", why });
    await this.#drain?.over;
    await this.#process.stop(graceMs);
    await this.#done?.promise;
    const sink = this.log; // bounded: a disk that hangs never holds a stop
    await (options.keepLog ? late(sink.flush(), 2_000) : sink.close(2_000));
  }

  /** A reload's change that does not reach the engine: the whole plan, its key from the next start. */
  amend(plan: EnginePlan): void {
    this.#key = plan.apiKey;
    this.#plan = { ...plan, apiKey: this.#plan.apiKey };
    this.#o.onChange();
  }

  /** A reload's replacement counts on from `old` (restarts, exits, requests cut, tokens). */
  inherit(old: EngineRun): void {
    [this.#restarts, this.#lastExit] = [old.#restarts, old.#lastExit];
    this.#starts.inherit(old.#starts);
    this.#exits = { ...old.#exits };
    this.#cut = old.#cut;
    this.serving.inherit(old.serving);
  }

  /** A second signal cuts a drain short; `exited`: the engine's own drain (SIGTERM) ended it. */
  hurry(why: "skipped" | "exited" = "skipped"): boolean {
    if (this.#state !== "draining") return false;
    this.#on({ kind: "drain-over", why });
    return true;
  }

  /** The table of docs/development.md: one handler per event. */
  #on(event: EngineEvent): void {
    if (this.#over(event)) return;
    switch (event.kind) {
      case "held":
        return this.#held(event);
      case "admitted":
        return this.#admitted(event);
      case "probe":
        if (event.run === this.#process) {
          this.#starts.answered(event.result, this.#clock.now());
        }
        return this.#judge(
          event.run,
          () => this.#liveness.poll(event.result, event.counts),
        );
      case "silence":
        return this.#judge(event.run, () => this.#liveness.silent(event.run));
      case "exited":
        return this.#exited(event);
      case "backoff-over":
        return this.#backoffOver();
      case "retry":
        return this.#retry();
      case "sleep":
        return this.#sleep(event);
      case "stalled":
        return this.#judge(event.run, () => this.#stalled(event.seen));
      case "wake-failed": {
        const { run, seen } = event;
        run.watch.cause = { cause: "wake-failed", message: seen };
        return this.#judge(run, () => stopVerdict("unhealthy", seen));
      }
      case "stop":
        return this.#stop(event);
      case "drain-read":
      case "drain-over":
        return this.#drained(event);
      case "load-end":
        return this.#gpu.loadEnd(event.pgid, event.used);
      case "gpu-memory":
        this.#gpu.reading(event.reading);
        // Unread (or exited) says nothing of what the run took.
        return event.reading ? this.#measured() : undefined;
    }
  }

  /** Exited and failed take only a retry (failed); a slot or timer the stop ended goes back. */
  #over(event: EngineEvent): boolean {
    const state = this.#state;
    if (state !== "exited" && state !== "failed") return false;
    if (event.kind === "admitted") event.slot?.release();
    if (event.kind === "stop") this.#interrupt.abort(); // a retry's timer
    return event.kind !== "retry" || state !== "failed";
  }

  #held({ waiting }: EventOf<"held">): void {
    this.#gpu.hold(waiting, this.name);
    if (this.#state === "waiting") return this.#o.onChange();
    this.#readAhead();
    this.#enter("waiting", waiting.reason, waiting.detail);
  }

  #admitted({ slot }: EventOf<"admitted">): void {
    const waited = this.#gpu.hold(null, this.name);
    if (slot === null || this.#stopWhy !== undefined) {
      slot?.release();
      return this.#enter("exited");
    }
    if (slot) this.#gpu.seat(slot, this.name, waited);
    const restart = this.#spawned;
    try {
      this.#respawn(restart);
    } catch (error) {
      return this.#unspawned(restart, (error as Error).message);
    }
    this.#starts.spawned(this.#clock.now());
    // A restart counts once it runs, not when it fails to spawn.
    if (restart) this.#restarts++;
    this.#spawned = true;
    this.#endReason = "exit";
    this.#enter("starting");
    this.#watch(this.#process);
  }

  /** A restart checks its port and resolves its command line again, with the key of a reload. */
  #respawn(restart: boolean): void {
    if (restart) {
      const { host, port } = this.#plan;
      if (!isPortFree(host, port)) {
        throw new Error(`port ${port} is taken by another process`);
      }
      this.#plan = replan({ ...this.#plan, apiKey: this.#key });
      this.#process = this.#spawn(this.#plan);
    }
    this.#process.start();
  }

  #unspawned(restart: boolean, what: string): void {
    this.#releaseGpu();
    if (!restart) {
      this.#report("warn", `cannot start: ${what}`);
      return this.#enter("exited");
    }
    const cause = this.#lastExit!.cause; // of the run it restarts
    this.#backoff(cause, `cannot restart: ${what}`);
  }

  /** A verdict on the current run: a poll's, the silence timer's, the serving watch's. */
  #judge(run: ServerProcess, judge: () => Verdict | undefined): void {
    const state = this.#state; // no verdict once a stop began (a late poll's)
    if (
      run !== this.#process || !run.running || this.#stopWhy !== undefined ||
      state === "stopping"
    ) return;
    const verdict = judge();
    const restart = `the liveness restart of engine ${this.name}`;
    switch (verdict?.kind) {
      case "ready":
        if (verdict.first) this.#ready(run);
        return this.#enter(
          state === "sleeping" || state === "waking" ? state : "ready",
        );
      case "unhealthy":
        return this.#enter("unhealthy");
      case "stop":
        this.#endReason = verdict.reason;
        this.#report("warn", verdict.why);
        this.#enter("stopping", verdict.reason, verdict.why);
        return void this.#gpu.quiet(this.name, restart, this.#interrupt.signal)
          .then(() => run.stop(this.#o.graceMs));
    }
  }

  #stalled(seen: string): Verdict {
    this.#seen = seen;
    return stopVerdict("stalled", `stalled: ${seen}`);
  }

  #exited({ run, status }: EventOf<"exited">): void {
    if (this.#state === "draining") this.hurry("exited");
    this.#liveness.exited();
    this.#o.readAhead?.end(this.name);
    this.#releaseGpu();
    this.#gpu.exited();
    this.#watchdog?.remove(run.pid!);
    this.#o.records.remove(this.name);
    const end = lastExitOf(run, status, this.#endReason, this.#seen);
    this.#lastExit = end;
    this.#exits[end.cause] = (this.#exits[end.cause] ?? 0) + 1;
    const exit = exitLine(end);
    if (this.#stopWhy !== undefined) {
      this.#report("info", `${exit}${this.#stopWhy}`);
      return this.#enter("exited", end.cause, this.#stopWhy.trim() || exit);
    }
    this.#starts.down(this.#clock.now(), end.cause);
    if (!shouldRestart(this.#plan.restart, end)) {
      const why = `${exit}; not restarted (restart: ${this.#plan.restart})`;
      this.#report("warn", why, true);
      return this.#enter("exited", end.cause, why);
    }
    const byCause = this.#causes.next(end.cause, !!this.#liveness.firstOkAt);
    if (byCause === "failed") return this.#failed(end.cause, exit);
    // A run healthy for long enough earns a fresh, short delay.
    const okFor = this.#clock.now() - (this.#liveness.firstOkAt ?? Infinity);
    if (okFor >= this.#o.stableAfterMs) this.#step = 0;
    if (byCause === "same-delay") this.#step = Math.max(this.#step - 1, 0);
    this.#gpu.restarting();
    this.#backoff(end.cause, exit);
  }

  #failed(cause: ExitCause, exit: string): void {
    const retryMs = this.#plan.failedRetryMs;
    const again = retryMs > 0 ? `; tried again in ${retryMs / 1000} s` : "";
    const why =
      `${exit}; not restarted: ${cause} twice in a row (fix the card or its files, then reload)${again}`;
    this.#report("warn", why, true);
    if (retryMs > 0) this.#later(retryMs, { kind: "retry" });
    this.#enter("failed", cause, why);
  }

  #backoffOver(): void {
    this.#nextRestart = null;
    void this.#admit();
  }

  /** `--failed-retry` ran out: as a restart, its command line resolved anew. */
  #retry(): void {
    this.#done = Promise.withResolvers();
    this.#enter("backoff", "retry");
    this.#backoffOver();
  }

  #sleep({ run, asleep, why, waking, sure }: EventOf<"sleep">): void {
    const to = this.serving.sleep.move(run, asleep, this.#state, waking, sure);
    const reason = waking ? "waking" : asleep ? "asleep" : "awake";
    if (to) this.#enter(to, reason, why);
  }

  #stop({ why }: EventOf<"stop">): void {
    const state = this.#state;
    this.#stopWhy = why;
    this.#interrupt.abort();
    if (state === "draining") return; // a second stop() waits for the same drain
    if (this.#process.running) {
      this.#drain = Drain.begin(
        state,
        this.#plan, // its key: a reload's new one is for the next run
        (e) => this.#on(e),
        (line) => this.#report("info", line),
        () => this.#process.term(), // its SIGTERM drains: at once
        this.#clock,
      );
      return this.#enter(this.#drain ? "draining" : "stopping");
    }
    if (!this.#done) return; // never started
    // Exited, its group not yet cleared: its exit event ends the engine.
    const unspawned = state === "backoff" || state === "waiting";
    if (this.#process.startedAt !== undefined && !unspawned) return;
    this.#nextRestart = null;
    this.#enter("exited");
  }

  #drained(event: EventOf<"drain-read" | "drain-over">): void {
    const end = this.#state === "draining" && this.#drain!.step(event);
    if (!end) return;
    this.#cut += end.drain.cut + (end.drain.arrived ?? 0);
    this.#report("info", end.detail);
    this.#o.journal?.record({ model: this.name, event: "drain", ...end });
    this.#enter("stopping", end.reason, end.detail);
  }

  #enter(state: EngineState, reason?: string, detail?: string): void {
    if (state === this.#state) return;
    const from = this.#state;
    if (from === "draining") this.#drain?.close();
    this.#state = state;
    this.#since = new Date(this.#clock.wall());
    const at = this.#since.toISOString();
    this.#o.journal?.state(at, this.name, from, state, reason, detail);
    if (state === "exited" || state === "failed") this.#done?.resolve();
    this.#o.onChange();
  }

  #spawn(plan: EnginePlan): ServerProcess {
    const run = this.#o.spawn?.(plan, this.log, this.#clock) ??
      new ServerProcess(plan, this.log, this.#clock);
    run.watch.onMemory = () => this.#measured();
    run.watch.memory.ceilingMiB = () => this.#o.deviceMiB?.(plan) ?? Infinity;
    return run;
  }

  /** The run's lines and nvidia-smi's figure, kept when a figure changed; handed on once its load is whole (`ready`: its first 200), never before (a run stopped or dead before it measured no load). */
  #measured(ready = false): void {
    const memory = this.#gpu.facts.memory?.mib;
    const at = new Date(this.#clock.wall());
    // Asleep it holds its residue: its footprint stays the awake one, the residue beside it.
    const residue = this.serving.sleep.view()?.residue_bytes;
    const last = this.#footprint.last;
    const next = this.#state !== "sleeping"
      ? footprintOf(this.#process.watch.memory, memory, at)
      : last && residue != null
      ? { ...last, residue_mib: Math.round(residue / 2 ** 20) }
      : null;
    const changed = this.#footprint.changed(next);
    // 0 MiB is no measurement: nvidia-smi's round came before the load did.
    if (!next?.total_mib) return;
    if (ready || changed && this.#process.watch.loaded) {
      this.#o.footprint?.(this.#plan, next);
    }
  }

  /** A first 200: the gate's next may start; this start (and a recovery) measured and journaled. */
  #ready(run: ServerProcess): void {
    this.#releaseGpu(true);
    this.#measured(true);
    const at = this.#at();
    const start = this.#starts.ready(this.#clock.now(), run.watch.began);
    this.#o.journal?.record({ at, model: this.name, ...start });
  }

  async #admit(): Promise<void> {
    this.#starts.begin(this.#clock.now(), !!this.#gpu.gated);
    if (!this.#gpu.gated) {
      return this.#on({ kind: "admitted", slot: undefined });
    }
    const slot = await this.#gpu.pass(
      this.name,
      this.#plan.placement.memoryNeed ?? undefined,
      this.#interrupt.signal,
      (waiting) => this.#on({ kind: "held", waiting }),
    );
    this.#on({ kind: "admitted", slot });
  }

  #watch(run: ServerProcess): void {
    this.#watchdog?.add(run.pid!);
    const { host, port } = run.plan;
    const [model, pid, command] = [this.name, run.pid!, run.commandLine];
    this.#o.records.write({ model, pid, command, host, port });
    this.#gpu.spawned(run.pid);
    this.#o.readAhead?.loading(this.name, this.#plan);
    this.serving.sleep.attach(run);
    if (this.#gpu.loading || run.plan.card.hub) void this.#watchLoad(run);
    this.#liveness.spawned(run);
    void run.ended.then((status) => this.#on({ kind: "exited", run, status }));
  }

  #backoff(cause: string, what: string): void {
    this.#step++;
    const delay = restartDelayMs(this.#step, this.#o.restartMaxDelayMs);
    const next = `restart ${this.#restarts + 1} in ${delay / 1000} s`;
    this.#report("warn", `${what}; ${next}`, true);
    this.#later(delay, { kind: "backoff-over" });
    this.#readAhead();
    this.#enter("backoff", cause, what);
  }

  /** Through the wait and the spawn, until ready, an exit or a stop. */
  #readAhead(): void {
    this.#o.readAhead?.begin(
      this.#plan,
      this.#interrupt.signal,
      (line, skip) =>
        skip
          ? this.#report("info", line)
          : this.log.line(`--- ${this.#at()} ${line}`),
    );
  }

  /** `event` after `ms`, unless the engine stops first. */
  #later(ms: number, event: EngineEvent): void {
    this.#nextRestart = new Date(this.#clock.wall() + ms);
    const signal = this.#interrupt.signal;
    if (signal.aborted) return;
    const cancel = this.#clock.schedule(() => {
      signal.removeEventListener("abort", cancel);
      if (!signal.aborted) this.#on(event);
    }, ms);
    signal.addEventListener("abort", cancel, { once: true });
  }

  // Polled while its load holds the gate: neighbours start at its first 200, not a round later.
  #watchLoad(run: ServerProcess): void {
    const current = () => run === this.#process;
    void run.loadPolls(
      this.#o.loadPollMs ?? 1_000,
      this.#interrupt.signal,
      () => current() && this.#state === "starting",
      () => current() && this.#gpu.loading,
      (result) => this.#on({ kind: "probe", run, result, counts: false }),
    );
  }

  /** The load is over (`served`: by a first 200): the next engine may start. */
  #releaseGpu(served = false): void {
    this.#o.readAhead?.loading(this.name, null);
    if (served) this.#o.readAhead?.end(this.name);
    this.#gpu.release(served, (pgid, used) => {
      this.#on({ kind: "load-end", pgid, used });
    });
    // What it printed while loading decides no exit cause.
    if (served) this.#process.watch.served();
  }

  #report(level: "info" | "warn", text: string, where = false): void {
    const path = where ? `; log ${this.log.path}` : "";
    log[level](`engine ${this.name} (pid ${this.#process.pid}) ${text}${path}`);
    this.log.line(`--- ${this.#at()} ${text}`);
  }

  #at(): string {
    return new Date(this.#clock.wall()).toISOString();
  }
}
