/**
 * Supervision of one model's engine: successive {@linkcode ServerProcess} runs,
 * restarted after a crash or a failed liveness check as the restart policy
 * says, with the state `GET /models?detail=1` reports.
 *
 * Folder `supervision/`: what sits above one engine run: the supervisor, the
 * restart policy, the health loop, the watchdog and the engine records. It
 * knows nothing of HTTP, authentication or the command line.
 *
 * @module
 */
import type { ModelCard, RestartPolicy } from "../catalogue.ts";
import { log } from "../common/log.ts";
import { sleep } from "../common/sleep.ts";
import type { Watchdog } from "./watchdog.ts";
import type { EngineLog } from "../engines/log_sink.ts";
import type { GpuReading } from "../gpu/memory_use.ts";
import type { Released, WaitReason } from "../gpu/start_gate.ts";
import { GpuStart } from "./gpu_start.ts";
import { Liveness, type Verdict } from "./liveness.ts";
import {
  CauseStreak,
  describeEnd,
  type EndReason,
  type EngineState,
  restartDelayMs,
  shouldRestart,
} from "./restart_policy.ts";
import {
  type EngineDetail,
  type LastExit,
  phaseFields,
} from "./engine_detail.ts";
import type { ExitCause } from "../engines/kinds/engine_kind.ts";
import type { SupervisorOptions } from "./supervisor_options.ts";
import { type HealthCheck, ServerProcess } from "../engines/server_process.ts";
import { type EnginePlan, planEngine } from "../engines/engine_plan.ts";
import { isPortFree } from "../engines/ports.ts";

/** How often a starting run's Hugging Face cache is looked at. */
const DOWNLOAD_POLL_MS = 1_000;

/**
 * Supervises one model's engine: starts it, restarts it by policy, kills it
 * when it stops answering, and keeps the facts operators read.
 */
export class EngineSupervisor {
  // Not readonly: a reload amends it, a restart resolves it again (see amend()).
  #plan: EnginePlan;
  /** The engine's log, shared by every run. */
  readonly log: EngineLog;
  #options: SupervisorOptions;
  #policy: RestartPolicy;
  #process: ServerProcess;
  #state: EngineState = "starting";
  #since = new Date();
  #restarts = 0;
  #step = 0;
  #lastExit: LastExit | null = null;
  #causes = new CauseStreak();
  #exits: Partial<Record<ExitCause, number>> = {};
  #nextRestart: Date | null = null;
  #liveness: Liveness;
  /** Why the launcher is ending the current run itself, or "exit". */
  #endReason: EndReason = "exit";
  #stopRequested = false;
  #stopWhy = "";
  /** Ends a backoff, a wait at the GPU start gate or a load watch: stop() aborts it. */
  #interrupt = new AbortController();
  /** This engine's passage through the GPU start gate; while it waits, the state is `waiting`. */
  #gpu: GpuStart;
  #watchdog: Watchdog | undefined;
  #loop: Promise<void> | undefined;
  #lastPollMs: number | undefined;
  /** Fires when a loading run's silence reaches `--start-timeout`; armed only when it is on. */
  #silence: ReturnType<typeof setTimeout> | undefined;

  /**
   * Prepares the first run of an engine's plan (nothing started).
   *
   * @param plan The engine: card, where it runs, its command line.
   * @param options How it is supervised.
   */
  constructor(plan: EnginePlan, options: SupervisorOptions) {
    const card = plan.card;
    this.#plan = plan;
    this.#options = options;
    this.#policy = card.restart ?? options.restart;
    this.#liveness = new Liveness(card.name, options);
    this.#gpu = new GpuStart(
      card.name,
      options.gate,
      () => ({ devices: this.gpus, memory: this.#options.memoryNeed }),
      () => {
        if (this.#state === "waiting") this.#options.onChange?.();
        else this.#set("waiting");
      },
    );
    this.log = options.log;
    this.#process = this.#run();
  }

  /** A run of the plan in force; `again` resolves its command line anew (a restart). */
  #run(again = false): ServerProcess {
    if (again) this.#plan = planEngine(this.#plan.card, this.#plan);
    return new ServerProcess(this.#plan, {
      log: this.log,
      announceExit: false,
    });
  }

  /** The engine's plan in force (a reload may amend it, a restart resolve it again). */
  get plan(): EnginePlan {
    return this.#plan;
  }

  /** The catalogue card (a reload may replace it). */
  get card(): ModelCard {
    return this.#plan.card;
  }

  /** The catalogue name. */
  get name(): string {
    return this.#plan.name;
  }

  /** The current (or last) run. */
  get process(): ServerProcess {
    return this.#process;
  }

  /** The running engine's process group (its pid), or undefined. */
  get pgid(): number | undefined {
    return this.#process.running ? this.#process.pid : undefined;
  }

  /** Host the engine binds. */
  get host(): string {
    return this.#process.host;
  }

  /** Port the engine listens on. */
  get port(): number {
    return this.#process.port;
  }

  /** The OpenAI-compatible base URL. */
  get url(): string {
    return this.#process.url;
  }

  /** The policy in force (the card's, else the launcher's default). */
  get policy(): RestartPolicy {
    return this.#policy;
  }

  /** The current state. */
  get state(): EngineState {
    return this.#state;
  }

  /** Devices handed to the engine, `[]` for none, null when not placed. */
  get gpus(): readonly string[] | null {
    return this.#plan.gpus;
  }

  /** Restarts since the launcher started. */
  get restarts(): number {
    return this.#restarts;
  }

  /** True when the current run's last health poll answered 200. */
  get up(): boolean {
    // `ready` is exactly "the last poll of this run answered 200".
    return this.#state === "ready" && this.#process.running;
  }

  /** Duration of the last health poll, in seconds (for metrics). */
  get lastPollSeconds(): number | undefined {
    return this.#lastPollMs === undefined ? undefined : this.#lastPollMs / 1000;
  }

  /** The supervision facts `GET /models?detail=1` reports. */
  detail(): EngineDetail {
    return {
      state: this.#state,
      pid: this.#process.running ? this.#process.pid ?? null : null,
      restarts: this.#restarts,
      since: this.#since.toISOString(),
      last_exit: this.#lastExit,
      next_restart: this.#nextRestart?.toISOString() ?? null,
      gpus: this.#plan.gpus,
      waiting_for: this.#gpu.waitingFor,
      gpu_memory_mib: this.#gpu.memory?.mib ?? null,
      gpu_memory_by: this.#gpu.memory?.by ?? null,
      ...phaseFields(this.#state === "starting", this.#process),
    };
  }

  /** Runs ended so far, by cause (for metrics). */
  exitsByCause(): Partial<Record<ExitCause, number>> {
    return { ...this.#exits };
  }

  /** Seconds spent held by the GPU start gate, per reason, the current wait included. */
  startWaitSeconds(): Partial<Record<WaitReason, number>> {
    return this.#gpu.seconds();
  }

  /**
   * Notes the current run's GPU memory per device (the last `nvidia-smi` round).
   *
   * @param mib MiB per device entry, or null when unknown.
   */
  observeGpuMemory(reading: GpuReading | null): void {
    this.#gpu.memory = reading;
  }

  /**
   * Enters a state and journals the change, `reason` and `detail` saying why
   * (a `waiting` engine's reason is what holds it).
   */
  #set(state: EngineState, reason?: string, detail?: string): void {
    if (state === this.#state) return;
    const from = this.#state;
    this.#state = state;
    this.#since = new Date();
    this.#options.journal?.record({
      at: this.#since.toISOString(),
      model: this.name,
      event: "state",
      from,
      to: state,
      reason: reason ??
        (state === "waiting" ? this.#gpu.waitingFor?.reason ?? null : null),
      detail: detail ??
        (state === "waiting" ? this.#gpu.waitingFor?.detail ?? null : null),
    });
    this.#options.onChange();
  }

  /**
   * Starts the first run and supervises it until {@linkcode EngineSupervisor.stop}.
   * An engine on GPUs may first wait at the GPU start gate (state `waiting`);
   * one that is never held spawns before this returns.
   *
   * @param watchdog The launcher's watchdog, told each run's process group.
   * @throws {EngineError} When an ungated first run cannot be spawned.
   */
  start(watchdog?: Watchdog): void {
    if (this.#loop) return;
    this.#watchdog = watchdog;
    if (this.#gpu.gated) {
      this.#loop = this.#begin();
      return;
    }
    this.#launch(this.#process);
    this.#loop = this.#supervise();
  }

  /** A gated first start (after a reload, the replaced run's memory must be back). */
  async #begin(): Promise<void> {
    if (
      !(await this.#gpu.admit(this.#options.released, this.#interrupt.signal))
    ) {
      return this.#set("exited");
    }
    try {
      this.#launch(this.#process);
    } catch (error) {
      this.#gpu.release();
      this.#report("warn", `cannot start: ${(error as Error).message}`);
      return this.#set("exited");
    }
    return this.#supervise();
  }

  /**
   * What its last run held on its GPUs: a replacement's start waits until it is released.
   *
   * @returns The memory to see released, or undefined when the engine is not gated.
   */
  gpuReleased(): Released | undefined {
    return this.#gpu.released();
  }

  /** Each device's used MiB just before the current run spawned (device attribution). */
  get gpuStartUsed(): Readonly<Record<string, number>> {
    return this.#gpu.startUsed;
  }

  /** Spawns a run and records it; a restart counts once it runs, not when it fails to spawn. */
  #launch(run: ServerProcess, restart = false): void {
    run.start();
    if (restart) this.#restarts++;
    this.#liveness.reset();
    this.#endReason = "exit";
    this.#set("starting");
    // The watchdog and the records learn the run's group while it runs.
    this.#watchdog?.add(run.pid!);
    this.#options.records.write({
      model: this.name,
      pid: run.pid!,
      command: run.commandLine,
      host: run.host,
      port: run.port,
    });
    this.#gpu.launched(run.pid);
    if (this.#gpu.loading) this.#watchLoad(run);
    if (run.card.hub) this.#watchDownload(run);
    this.#watchSilence(run, this.#options.startTimeoutMs);
  }

  /**
   * While this run starts, looks at its Hugging Face cache each second for a
   * download under way: whatever the engine prints, growing bytes are the
   * `downloading` phase and count as progress for `--start-timeout`.
   */
  async #watchDownload(run: ServerProcess): Promise<void> {
    while (
      this.#state === "starting" && run === this.#process && run.running &&
      !this.#interrupt.signal.aborted
    ) {
      run.lookForDownload();
      await sleep(DOWNLOAD_POLL_MS, this.#interrupt.signal);
    }
  }

  /**
   * Stops a loading run at `--start-timeout` of silence, to the second (a
   * health round may be far longer): one timer per run, set again for what
   * is left whenever the run spoke meanwhile, gone at its first 200.
   */
  #watchSilence(run: ServerProcess, ms: number): void {
    clearTimeout(this.#silence);
    this.#silence = undefined;
    if (ms <= 0) return;
    this.#silence = setTimeout(() => {
      this.#silence = undefined;
      if (run !== this.#process || !run.running) return;
      if (this.#state === "stopping") return;
      if (this.#liveness.firstOkAt !== undefined) return;
      // Output, a phase line or a growing download: each is a sign of life.
      const last = Math.max(
        run.startedAt ?? Date.now(),
        this.log.lastOutputAt ?? 0,
        run.watch.progressAt ?? 0,
      );
      const verdict = this.#liveness.silentLoad(last, run.watch.phase);
      if (verdict) return this.#act(run, verdict);
      const left = last + this.#options.startTimeoutMs - Date.now();
      this.#watchSilence(run, Math.max(left, 1));
    }, ms);
  }

  /**
   * While this run's load holds its GPUs, polls it every second (not every
   * health interval): its neighbours start as soon as it answers 200.
   */
  async #watchLoad(run: ServerProcess): Promise<void> {
    const every = this.#options.loadPollMs ?? 1_000;
    while (this.#gpu.loading && run === this.#process && run.running) {
      await sleep(every, this.#interrupt.signal);
      if (!this.#gpu.loading || run !== this.#process || !run.running) return;
      this.#observe(run, await run.check(every), false);
    }
  }

  async #supervise(): Promise<void> {
    while (true) {
      const run = this.#process;
      const status = await run.ended;
      this.#watchSilence(run, 0);
      this.#gpu.release();
      this.#gpu.memory = null;
      const end = this.#lastExit = this.#ended(run, status);
      // A cause the code or signal does not already say, with its line.
      const said = end.message ? ` (${end.cause}: ${end.message})` : "";
      const exit = `exit: ${describeEnd(end)} after ${
        end.ran_seconds.toFixed(1)
      } s${said}`;
      if (this.#stopRequested) {
        this.#report("info", `${exit}${this.#stopWhy}`);
        return this.#set("exited", end.cause, this.#stopWhy.trim() || exit);
      }
      if (!shouldRestart(this.#policy, end)) {
        const why = `not restarted (restart: ${this.#policy})`;
        this.#report("warn", `${exit}; ${why}`, true);
        return this.#set("exited", end.cause, `${exit}; ${why}`);
      }
      const byCause = this.#causes.next(end.cause);
      if (byCause === "failed") {
        const why =
          `not restarted: ${end.cause} twice in a row (fix the card or its files, then reload)`;
        this.#report("warn", `${exit}; ${why}`, true);
        return this.#set("failed", end.cause, `${exit}; ${why}`);
      }
      // A run that was healthy for long enough earns a fresh, short delay.
      const stableAfter = this.#options.stableAfterMs;
      const firstOkAt = this.#liveness.firstOkAt;
      if (firstOkAt !== undefined && Date.now() - firstOkAt >= stableAfter) {
        this.#step = 0;
      }
      if (byCause === "same-delay") this.#step = Math.max(this.#step - 1, 0);
      const released = this.#gpu.released();
      let what = exit;
      while (true) {
        this.#step++;
        const delay = restartDelayMs(
          this.#step,
          this.#options.restartMaxDelayMs,
        );
        this.#report(
          "warn",
          `${what}; restart ${this.#restarts + 1} in ${delay / 1000} s`,
          true,
        );
        this.#nextRestart = new Date(Date.now() + delay);
        this.#set("backoff", end.cause, what);
        await sleep(delay, this.#interrupt.signal);
        this.#nextRestart = null;
        if (
          this.#stopRequested ||
          !(await this.#gpu.admit(released, this.#interrupt.signal))
        ) return this.#set("exited");
        if (!isPortFree(run.host, run.port)) {
          this.#gpu.release();
          what = `cannot restart: port ${run.port} is taken by another process`;
          continue;
        }
        try {
          this.#process = this.#run(true);
          this.#launch(this.#process, true);
          break;
        } catch (error) {
          this.#gpu.release();
          what = `cannot restart: ${(error as Error).message}`;
        }
      }
    }
  }

  /** A run ended: the watchdog and the records forget it; how it ended. */
  #ended(run: ServerProcess, status: Deno.CommandStatus): LastExit {
    const endedAt = Date.now();
    const ranMs = endedAt - (run.startedAt ?? endedAt);
    this.#watchdog?.remove(run.pid!);
    this.#options.records.remove(this.name);
    // The engine's own line decides; else how it ended.
    const line = run.watch.cause;
    const cause: ExitCause = line?.cause ?? (status.signal ? "signal" : "exit");
    this.#exits[cause] = (this.#exits[cause] ?? 0) + 1;
    return {
      code: status.signal ? null : status.code,
      signal: status.signal ?? null,
      at: new Date(endedAt).toISOString(),
      ran_seconds: Math.round(ranMs / 100) / 10,
      reason: this.#endReason,
      cause,
      message: line?.message ?? null,
    };
  }

  /**
   * One line in the launcher's log and the same in the engine's log; with
   * `where`, the launcher's line names the engine's log (its last words are
   * there, not in the launcher's log).
   */
  #report(level: "info" | "warn", text: string, where = false): void {
    const pid = this.#process.pid;
    const path = where ? `; log ${this.log.path}` : "";
    log[level](`engine ${this.name} (pid ${pid}) ${text}${path}`);
    this.log.line(`--- ${new Date().toISOString()} ${text}`);
  }

  /**
   * Polls the current run once. A background poll (`counts`) is a liveness
   * check: after the run's first 200, enough consecutive failures stop it and
   * the restart policy applies as for a crash. A run that never answered 200
   * is loading and is left alone; a poll that failed for a local reason (no
   * socket to be had) never counts; a `GET /models` request's poll never does.
   *
   * @param timeoutMs How long the poll may take.
   * @param counts Whether a failure counts against the engine.
   * @returns Whether the current run answered 200 now.
   */
  async healthy(timeoutMs: number, counts = false): Promise<boolean> {
    const run = this.#process;
    if (!run.running || (counts && this.#state === "stopping")) return false;
    const result = await run.check(timeoutMs);
    this.#observe(run, result, counts);
    return result.ok;
  }

  #observe(run: ServerProcess, result: HealthCheck, counts: boolean): void {
    if (run !== this.#process || !run.running) return;
    if (this.#state === "stopping") return;
    this.#lastPollMs = result.ms;
    this.#act(run, this.#liveness.observe(result, counts));
  }

  #act(run: ServerProcess, verdict: Verdict): void {
    switch (verdict.kind) {
      case "ready":
        // The load is over: the next engine on these GPUs may start.
        if (verdict.first) this.#gpu.release();
        return this.#set("ready");
      case "loading":
      case "ignored":
        return;
      case "unhealthy":
        return this.#set("unhealthy");
      case "stop":
        // The launcher ends the run itself; the restart policy then applies.
        this.#endReason = verdict.reason;
        this.#report("warn", verdict.why);
        this.#set("stopping", verdict.reason, verdict.why);
        // Not while a neighbour loads on its devices (vLLM profiles device-wide free memory).
        void Promise.resolve(
          this.#options.gate?.quiet(
            this.gpus ?? [],
            this.name,
            `the liveness restart of engine ${this.name}`,
            this.#interrupt.signal,
          ),
        ).then(() => run.stop(this.#options.graceMs));
    }
  }

  /**
   * Stops supervising: ends a backoff wait at once, stops the current run
   * (SIGTERM, grace, SIGKILL) and resolves when it is gone.
   *
   * @param graceMs Time between SIGTERM and SIGKILL (the supervisor's own
   *   `graceMs` when left out).
   * @param options `keepLog`: leave the log open for the engine that replaces
   *   this one; `why`: said on the exit line (`reload`).
   */
  async stop(
    graceMs: number = this.#options.graceMs,
    options: { keepLog?: boolean; why?: string } = {},
  ): Promise<void> {
    this.#stopWhy = options.why === undefined ? "" : ` (${options.why})`;
    this.#stopRequested = true;
    this.#interrupt.abort();
    if (this.#process.running) this.#set("stopping");
    await this.#process.stop(graceMs);
    await this.#loop;
    if (options.keepLog) await this.log.flush();
    else await this.log.close();
  }

  /**
   * Applies a reload's change that does not reach the engine, without touching
   * the process: the card (its `restart:` policy, `description`, `verb`) and
   * the engine key later starts use. (A change that reaches the engine gets a
   * new supervisor: `serve/engine_supervisors.ts`.)
   *
   * @param card The new expanded card, same name.
   * @param next `apiKey`: the key every later start demands.
   */
  amend(card: ModelCard, next: { apiKey?: string } = {}): void {
    if (card.name !== this.name) {
      throw new RangeError(
        `Cannot give engine ${this.name} the card ${card.name} (expected the same name)`,
      );
    }
    this.#plan = { ...this.#plan, card, ...next };
    this.#policy = card.restart ?? this.#options.restart;
    this.#options.onChange();
  }

  /** Sends SIGKILL to the current run's group at once (a second Ctrl-C). */
  kill(): void {
    this.#process.kill();
  }
}
