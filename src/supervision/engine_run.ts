/**
 * One model's engine, its whole life in one place: successive runs, the GPU
 * start gate, liveness, restarts. One state field and one transition
 * function, `#on`, fed by events; the rules it applies are pure
 * (`restart_policy.ts`, the gate). Folder `supervision/` knows nothing of
 * HTTP, authentication or the command line.
 *
 * @module
 */
import type { ModelCard, RestartPolicy } from "../catalogue.ts";
import { log } from "../common/log.ts";
import { LogThrottle } from "../common/log_throttle.ts";
import { late, sleep } from "../common/sleep.ts";
import type { Watchdog } from "./watchdog.ts";
import type { EngineLog } from "../engines/log_sink.ts";
import type { GpuMemoryNeed } from "../gpu/need.ts";
import type {
  GpuStartGate,
  Released,
  StartSlot,
  WaitingFor,
  WaitReason,
} from "../gpu/start_gate.ts";
import {
  chargedLoad,
  endLoad,
  type GateFacts,
  type GpuReading,
  noteWait,
  passGate,
  releasedBy,
  waitSeconds,
} from "../gpu/gpu_lifecycle.ts";
import {
  CauseStreak,
  type EndReason,
  type EngineState,
  pollVerdict,
  restartDelayMs,
  type RunHealth,
  shouldRestart,
  silenceVerdict,
  stopVerdict,
  type Verdict,
} from "./restart_policy.ts";
import {
  type ServingEvent,
  type ServingOptions,
  ServingWatch,
} from "./serving_watch.ts";
import {
  type EngineDetail,
  exitLine,
  type LastExit,
  lastExitOf,
} from "./engine_detail.ts";
import type { ExitCause } from "../engines/kinds/engine_kind.ts";
import type { EngineRecords } from "./records.ts";
import type { Journal } from "./journal.ts";
import { type HealthCheck, ServerProcess } from "../engines/server_process.ts";
import { type EnginePlan, planEngine } from "../engines/engine_plan.ts";
import { isPortFree } from "../engines/ports.ts";
import { Drain, type DrainEvent } from "./drain.ts";

/** What an engine run is told; anything async (the gate, a timer, a poll, an exit) ends in one. */
type EngineEvent =
  | { readonly kind: "held"; readonly waiting: WaitingFor }
  /** `undefined`: not gated; `null`: the wait ended without a start. */
  | { readonly kind: "admitted"; readonly slot: StartSlot | undefined | null }
  | {
    readonly kind: "probe";
    readonly run: ServerProcess;
    readonly result: HealthCheck;
    readonly counts: boolean;
  }
  /** The `--start-timeout` timer fired. */
  | { readonly kind: "silence"; readonly run: ServerProcess }
  | {
    readonly kind: "exited";
    readonly run: ServerProcess;
    readonly status: Deno.CommandStatus;
  }
  /** `retry`: `--failed-retry` ran out for a `failed` engine. */
  | { readonly kind: "backoff-over" | "retry" }
  | { readonly kind: "stop"; readonly why: string }
  | ServingEvent
  | DrainEvent;

export interface EngineCounts {
  exits: Partial<Record<ExitCause, number>>;
  requestsCut: number;
  healthPollSeconds: number | undefined;
  startWaitSeconds: Partial<Record<WaitReason, number>> | undefined;
}

export interface EngineRunOptions {
  log: EngineLog;
  restart: RestartPolicy; // when the card sets none
  restartMaxDelayMs: number;
  /** A `failed` engine is tried again after this long, unless its card says; 0 or unset: never. */
  failedRetryMs?: number;
  /** A run that stays up this long after its first 200 resets the delay to 1 s. */
  stableAfterMs: number;
  /** Failed background polls in a row, after a first 200, that stop a run; 0: never. */
  livenessFailures: number;
  graceMs: number;
  records: EngineRecords;
  onChange: () => void;
  journal?: Journal | undefined;
  gate?: GpuStartGate;
  memoryNeed?: GpuMemoryNeed | undefined;
  /** A loading run silent this long is stopped; 0: never. */
  startTimeoutMs: number;
  loadPollMs?: number;
  /** A replacement's first start waits, as a restart would, for the replaced run's memory. */
  released?: Released | undefined;
  serving?: ServingOptions; // absent: no stall or canary (traffic is still read)
  /** A planned stop of a ready engine drains it this long at most (a card may say); 0: never. */
  drainTimeoutMs?: number;
}

export class EngineRun {
  readonly log: EngineLog;
  // A reload that moves an engine replaces its run: these never change.
  readonly name: string;
  readonly host: string;
  readonly port: number;
  readonly url: string;
  #plan: EnginePlan;
  #o: EngineRunOptions;
  #process: ServerProcess;
  #state: EngineState = "starting";
  #since = new Date();
  #restarts = 0;
  #spawned = false; // a run of this object spawned: later starts are restarts
  #step = 0;
  #lastExit: LastExit | null = null;
  #causes = new CauseStreak();
  #exits: Partial<Record<ExitCause, number>> = {};
  #nextRestart: Date | null = null;
  #health: RunHealth = { firstOkAt: undefined, failures: 0 };
  #endReason: EndReason = "exit";
  #seen: string | null = null; // what the stall verdict saw: the exit's message
  #stopWhy: string | undefined;
  /** Ends a backoff, a wait at the gate, the load and download watches. */
  #interrupt = new AbortController();
  #gpu: GateFacts = { since: 0, ms: {}, startUsed: {} };
  #released: Released | undefined;
  #watchdog: Watchdog | undefined;
  #done: PromiseWithResolvers<void> | undefined;
  #lastPollSeconds: number | undefined;
  #silence: ReturnType<typeof setTimeout> | undefined;
  #drain: Drain | undefined;
  #cut = 0;
  #local = new LogThrottle({ write: log.warn });
  readonly serving: ServingWatch;

  constructor(plan: EnginePlan, options: EngineRunOptions) {
    this.#plan = plan;
    this.#o = options;
    this.#released = options.released;
    this.log = options.log;
    this.#process = new ServerProcess(plan, this.log);
    this.name = plan.name;
    this.host = plan.host;
    this.port = plan.port;
    this.url = this.#process.url;
    const on = (e: EngineEvent) => this.#on(e);
    this.serving = new ServingWatch(this, options, on, this.#interrupt.signal);
  }

  get plan(): EnginePlan {
    return this.#plan;
  }

  get card(): ModelCard {
    return this.#plan.card;
  }

  get process(): ServerProcess {
    return this.#process;
  }

  get pgid(): number | undefined {
    return this.#process.running ? this.#process.pid : undefined;
  }

  get policy(): RestartPolicy {
    return this.card.restart ?? this.#o.restart;
  }

  get state(): EngineState {
    return this.#state;
  }

  get gpus(): readonly string[] | null {
    return this.#plan.gpus;
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
      gpus: this.#plan.gpus,
      waiting_for: this.#gpu.waiting ?? null,
      gpu_memory_mib: this.#gpu.memory?.mib ?? null,
      gpu_memory_by: this.#gpu.memory?.by ?? null,
      phase: loading ? run.watch.phase : null,
      phase_since: phaseSince === undefined
        ? null
        : new Date(phaseSince).toISOString(),
      progress: loading ? run.watch.progress : null,
      ...this.serving.detail(),
      drain: this.#state === "draining" ? this.#drain!.view() : null,
    };
  }

  /** What the metrics count beyond the detail view. */
  counts(): EngineCounts {
    return {
      exits: { ...this.#exits },
      requestsCut: this.#cut,
      healthPollSeconds: this.#lastPollSeconds,
      startWaitSeconds: this.gpus?.length ? waitSeconds(this.#gpu) : undefined,
    };
  }

  observeGpuMemory(reading: GpuReading | null): void {
    this.#gpu.memory = reading = chargedLoad(reading, this.#gpu);
    if (reading && !this.#gpu.slot) this.#gpu.settled = reading;
  }

  get gpuStartUsed(): Readonly<Record<string, number>> {
    return this.#gpu.startUsed;
  }

  gpuReleased(): Released | undefined {
    return this.#gated() ? releasedBy(this.#gpu) : undefined;
  }

  /** Starts the first run; throws an `EngineError` when an ungated one cannot be spawned. */
  start(watchdog?: Watchdog): void {
    if (this.#done) return;
    this.#watchdog = watchdog;
    this.#done = Promise.withResolvers();
    if (this.#gated()) return void this.#admit();
    try {
      this.#on({ kind: "admitted", slot: undefined });
    } catch (error) {
      this.#done = undefined;
      throw error;
    }
  }

  /** A background poll (`counts`) is a liveness check, a `GET /models` request's is not. */
  async healthy(timeoutMs: number, counts = false): Promise<boolean> {
    const run = this.#process;
    const off = counts ? ["stopping", "draining"] : ["draining"];
    if (!run.running || off.includes(this.#state)) return false;
    const result = await run.check(timeoutMs);
    this.#on({ kind: "probe", run, result, counts });
    if (counts) await this.serving.round(run, this.#state);
    return result.ok;
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

  /** A reload's change that does not reach the engine (one that does gets a new engine run). */
  amend(card: ModelCard, next: { apiKey?: string } = {}): void {
    this.#plan = { ...this.#plan, card, ...next };
    this.#o.onChange();
  }

  /** A reload's replacement counts on from `old` (restarts, exits, requests cut, tokens). */
  inherit(old: EngineRun): void {
    [this.#restarts, this.#lastExit] = [old.#restarts, old.#lastExit];
    this.#exits = { ...old.#exits };
    this.#cut = old.#cut;
    this.serving.inherit(old.serving);
  }

  kill = (): void => this.#process.kill();

  /** A second signal cuts a drain short; `exited`: the engine's own drain (SIGTERM) ended it. */
  hurry(why: "skipped" | "exited" = "skipped"): boolean {
    if (this.#state !== "draining") return false;
    this.#on({ kind: "drain-over", why });
    return true;
  }

  #on(event: EngineEvent): void {
    const state = this.#state;
    if (state === "exited" || state === "failed") {
      // The wait or timer the stop ended: the devices go back.
      if (event.kind === "admitted") event.slot?.release();
      if (event.kind === "stop") this.#interrupt.abort(); // a retry's timer
      if (event.kind !== "retry" || state !== "failed") return;
    }
    switch (event.kind) {
      case "held": {
        const { waiting } = event;
        const on = waiting.devices.join(",");
        const line =
          `engine ${this.name} waits for GPU ${on}: ${waiting.detail}`;
        if (noteWait(this.#gpu, waiting)) log.info(line);
        if (state === "waiting") return this.#o.onChange();
        return this.#enter("waiting", waiting.reason, waiting.detail);
      }
      case "admitted": {
        const waited = this.#gpu.waiting;
        noteWait(this.#gpu, null);
        const slot = event.slot;
        if (slot === null || this.#stopWhy !== undefined) {
          slot?.release();
          return this.#enter("exited");
        }
        if (slot) {
          if (waited) {
            log.info(
              `engine ${this.name} starts on GPU ${
                this.gpus!.join(",")
              } (waited for ${waited.reason})`,
            );
          }
          this.#gpu.slot = slot;
          this.#gpu.startUsed = slot.usedMiB;
        }
        const restart = this.#spawned;
        try {
          if (restart) {
            const old = this.#process;
            if (!isPortFree(old.host, old.port)) {
              throw new Error(`port ${old.port} is taken by another process`);
            }
            this.#plan = planEngine(this.#plan.card, this.#plan);
            this.#process = new ServerProcess(this.#plan, this.log);
          }
          this.#process.start();
        } catch (error) {
          if (!restart && slot === undefined) throw error;
          this.#releaseGpu();
          const what = (error as Error).message;
          if (!restart) {
            this.#report("warn", `cannot start: ${what}`);
            return this.#enter("exited");
          }
          const cause = this.#lastExit!.cause; // of the run it restarts
          return this.#backoff(cause, `cannot restart: ${what}`);
        }
        // A restart counts once it runs, not when it fails to spawn.
        if (restart) this.#restarts++;
        this.#spawned = true;
        this.#health = { firstOkAt: undefined, failures: 0 };
        this.#endReason = "exit";
        this.#enter("starting");
        return this.#watch(this.#process);
      }
      case "sleep": {
        const from = event.asleep ? "ready" : "sleeping";
        const to = event.asleep ? "sleeping" : "ready";
        if (event.run !== this.#process || state !== from) return;
        return this.#enter(to, event.asleep ? "asleep" : "awake", event.why);
      }
      case "probe":
      case "silence":
      case "stalled": {
        const run = event.run;
        if (run !== this.#process || !run.running) return;
        if (state === "stopping") return;
        if (event.kind === "stalled") this.#seen = event.seen;
        const verdict = event.kind === "probe"
          ? this.#poll(event.result, event.counts)
          : event.kind === "silence"
          ? this.#silent(run)
          : stopVerdict("stalled", `stalled: ${event.seen}`);
        switch (verdict?.kind) {
          case "ready":
            if (verdict.first) this.#releaseGpu(true);
            return this.#enter(state === "sleeping" ? state : "ready");
          case "unhealthy":
            return this.#enter("unhealthy");
          case "stop":
            this.#endReason = verdict.reason;
            this.#report("warn", verdict.why);
            this.#enter("stopping", verdict.reason, verdict.why);
            // Not while a neighbour loads on its devices (vLLM profiles device-wide free memory).
            return void Promise.resolve(
              this.#o.gate?.quiet(
                this.gpus ?? [],
                this.name,
                `the liveness restart of engine ${this.name}`,
                this.#interrupt.signal,
              ),
            ).then(() => run.stop(this.#o.graceMs));
        }
        return;
      }
      case "exited": {
        if (state === "draining") this.hurry("exited");
        const { run, status } = event;
        clearTimeout(this.#silence);
        this.#releaseGpu();
        this.#gpu.memory = null;
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
        if (!shouldRestart(this.policy, end)) {
          const why = `${exit}; not restarted (restart: ${this.policy})`;
          this.#report("warn", why, true);
          return this.#enter("exited", end.cause, why);
        }
        const byCause = this.#causes.next(end.cause, !!this.#health.firstOkAt);
        if (byCause === "failed") {
          const retry = this.card.failedRetry ??
            (this.#o.failedRetryMs ?? 0) / 1000;
          const again = retry > 0 ? `; tried again in ${retry} s` : "";
          const why =
            `${exit}; not restarted: ${end.cause} twice in a row (fix the card or its files, then reload)${again}`;
          this.#report("warn", why, true);
          if (retry > 0) this.#later(retry * 1000, { kind: "retry" });
          return this.#enter("failed", end.cause, why);
        }
        // A run healthy for long enough earns a fresh, short delay.
        const okFor = Date.now() - (this.#health.firstOkAt ?? Infinity);
        if (okFor >= this.#o.stableAfterMs) this.#step = 0;
        if (byCause === "same-delay") this.#step = Math.max(this.#step - 1, 0);
        this.#released = this.gpuReleased();
        return this.#backoff(end.cause, exit);
      }
      case "retry": // --failed-retry ran out: as a restart, its command line resolved anew
      case "backoff-over":
        if (event.kind === "retry") {
          this.#done = Promise.withResolvers();
          this.#enter("backoff", "retry");
        }
        this.#nextRestart = null;
        return void this.#admit();
      case "drain-read":
      case "drain-over": {
        const end = state === "draining" ? this.#drain!.step(event) : undefined;
        if (!end) return;
        this.#cut += end.drain.cut + (end.drain.arrived ?? 0);
        this.#report("info", end.detail);
        this.#o.journal?.record({ model: this.name, event: "drain", ...end });
        return this.#enter("stopping", end.reason, end.detail);
      }
      case "stop": {
        this.#stopWhy = event.why;
        this.#interrupt.abort();
        if (state === "draining") return; // a second stop() waits for the same drain
        if (this.#process.running) {
          this.#drain = Drain.begin(
            state,
            this.#process.plan, // its key: a reload's new one is for the next run
            this.#o.drainTimeoutMs ?? 0,
            (e) => this.#on(e),
            (line) => this.#report("info", line),
            () => this.#process.term(), // its SIGTERM drains: at once
          );
          return this.#enter(this.#drain ? "draining" : "stopping");
        }
        if (!this.#done) return; // never started
        // Exited, its group not yet cleared: its exit event ends the engine.
        const unspawned = state === "backoff" || state === "waiting";
        if (this.#process.startedAt !== undefined && !unspawned) return;
        this.#nextRestart = null;
        return this.#enter("exited");
      }
    }
  }

  #enter(state: EngineState, reason?: string, detail?: string): void {
    if (state === this.#state) return;
    const from = this.#state;
    if (from === "draining") this.#drain?.close();
    this.#state = state;
    this.#since = new Date();
    this.#o.journal?.record({
      at: this.#since.toISOString(),
      model: this.name,
      event: "state",
      from,
      to: state,
      reason: reason ?? null,
      detail: detail ?? null,
    });
    if (state === "exited" || state === "failed") this.#done?.resolve();
    this.#o.onChange();
  }

  async #admit(): Promise<void> {
    const devices = this.#gated();
    if (!devices) return this.#on({ kind: "admitted", slot: undefined });
    const slot = await passGate(this.#o.gate!, {
      name: this.name,
      devices,
      memory: this.#o.memoryNeed,
      released: this.#released,
      signal: this.#interrupt.signal,
    }, (waiting) => this.#on({ kind: "held", waiting }));
    this.#on({ kind: "admitted", slot });
  }

  #watch(run: ServerProcess): void {
    this.#watchdog?.add(run.pid!);
    this.#o.records.write({
      model: this.name,
      pid: run.pid!,
      command: run.commandLine,
      host: run.host,
      port: run.port,
    });
    const devices = this.#gated();
    if (devices) this.#o.gate!.changed(devices);
    this.#gpu.pgid = run.pid;
    this.#gpu.memory = this.#gpu.settled = null;
    if (this.#gpu.slot || run.card.hub) void this.#watchLoad(run);
    this.#armSilence(run, this.#o.startTimeoutMs);
    void run.ended.then((status) => this.#on({ kind: "exited", run, status }));
  }

  #backoff(cause: string, what: string): void {
    this.#step++;
    const delay = restartDelayMs(this.#step, this.#o.restartMaxDelayMs);
    const next = `restart ${this.#restarts + 1} in ${delay / 1000} s`;
    this.#report("warn", `${what}; ${next}`, true);
    this.#later(delay, { kind: "backoff-over" });
    this.#enter("backoff", cause, what);
  }

  #later(ms: number, event: EngineEvent): void {
    this.#nextRestart = new Date(Date.now() + ms);
    const signal = this.#interrupt.signal;
    void sleep(ms, signal).then(() => signal.aborted || this.#on(event));
  }

  #poll(result: HealthCheck, counts: boolean): Verdict | undefined {
    this.#lastPollSeconds = result.ms / 1000;
    if (result.local) {
      // The key doubles as the summary's subject.
      this.#local.hit(
        `health polls of engine ${this.name} that failed on the launcher's side`,
        () =>
          `health poll of engine ${this.name} failed on the launcher's side, not counted against the engine: ${result.local}`,
      );
      return undefined;
    }
    const [verdict, health] = pollVerdict(
      this.#health,
      result.ok,
      counts,
      this.#o.livenessFailures,
    );
    this.#health = health;
    return verdict;
  }

  #silent(run: ServerProcess): Verdict | undefined {
    if (this.#health.firstOkAt !== undefined) return undefined;
    const last = run.lastSignOfLife;
    const timeout = this.#o.startTimeoutMs;
    const verdict = silenceVerdict(undefined, last, timeout, run.watch.phase);
    if (!verdict) {
      this.#armSilence(run, Math.max(last + timeout - Date.now(), 1));
    }
    return verdict;
  }

  // A timer, not the health round: a round may be far longer than the timeout.
  #armSilence(run: ServerProcess, ms: number): void {
    clearTimeout(this.#silence);
    this.#silence = ms > 0
      ? setTimeout(() => this.#on({ kind: "silence", run }), ms)
      : undefined;
  }

  // Polled while its load holds the gate: neighbours start at its first 200, not a round later.
  async #watchLoad(run: ServerProcess): Promise<void> {
    const current = () => run === this.#process;
    for await (
      const result of run.loadPolls(
        this.#o.loadPollMs ?? 1_000,
        this.#interrupt.signal,
        () => current() && this.#state === "starting",
        () => current() && this.#gpu.slot !== undefined,
      )
    ) this.#on({ kind: "probe", run, result, counts: false });
  }

  /** The load is over (`served`: by a first 200): the next engine may start. */
  #releaseGpu(served = false): void {
    const devices = this.#gated();
    if (devices) this.#o.gate!.changed(devices);
    endLoad(this.#gpu, served);
    // What it printed while loading decides no exit cause.
    if (served) this.#process.watch.served();
  }

  #gated(): readonly string[] | undefined {
    const devices = this.gpus;
    return this.#o.gate && devices?.length ? devices : undefined;
  }

  #report(level: "info" | "warn", text: string, where = false): void {
    const path = where ? `; log ${this.log.path}` : "";
    log[level](`engine ${this.name} (pid ${this.#process.pid}) ${text}${path}`);
    this.log.line(`--- ${new Date().toISOString()} ${text}`);
  }
}
