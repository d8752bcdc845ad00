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
import { LogThrottle } from "../common/log_throttle.ts";
import type { RunRecorder } from "./records.ts";
import type { RunWatcher } from "./watchdog.ts";
import { EngineLog } from "../engines/log_sink.ts";
import {
  DEFAULT_RESTART_MAX_DELAY_MS,
  DEFAULT_STABLE_AFTER_MS,
  describeEnd,
  type EngineState,
  restartDelayMs,
  type RunEnd,
  shouldRestart,
} from "./restart_policy.ts";
import {
  type HealthCheck,
  ServerProcess,
  type ServerProcessOptions,
} from "../engines/server_process.ts";

export type { EngineState } from "./restart_policy.ts";
export type { RunRecord, RunRecorder } from "./records.ts";
export type { RunWatcher } from "./watchdog.ts";

/** How an engine run ended, as `GET /models?detail=1` reports it. */
export interface LastExit {
  /** Exit code, or null when a signal ended it. */
  code: number | null;
  /** The signal that ended it, or null. */
  signal: string | null;
  /** ISO time of the end. */
  at: string;
  /** How long the run lasted, in seconds. */
  ran_seconds: number;
  /** `"unhealthy"` when the liveness check stopped it, else `"exit"`. */
  reason: "exit" | "unhealthy";
}

/** One engine's supervision facts (the `?detail=1` fields). */
export interface EngineDetail {
  /** Where the engine is in its lifecycle. */
  state: EngineState;
  /** The running engine process's pid, or null. */
  pid: number | null;
  /** Restarts since the launcher started. */
  restarts: number;
  /** ISO time of the last state change. */
  since: string;
  /** How the last run ended, or null before any run ended. */
  last_exit: LastExit | null;
  /** ISO time of the next start while in backoff, else null. */
  next_restart: string | null;
  /** Devices handed to the engine (`CUDA_VISIBLE_DEVICES`), `[]` for none, null when not placed. */
  gpus: readonly string[] | null;
}

/** What a reload changes for an engine besides its card (see {@linkcode EngineSupervisor.replace}). */
export interface EngineChange {
  /** The environment placement adds (`CUDA_VISIBLE_DEVICES`). */
  env?: Record<string, string>;
  /** The devices it was placed on. */
  gpus?: readonly string[] | null;
  /** The key the engine demands from this start on. */
  apiKey?: string;
}

/** How a model's engine is supervised. */
export interface SupervisorOptions extends ServerProcessOptions {
  /**
   * The policy when the card sets none.
   * @default {"on-failure"}
   */
  restart?: RestartPolicy;
  /**
   * Cap of the restart delay, in milliseconds.
   * @default {300000}
   */
  restartMaxDelayMs?: number;
  /**
   * A run that stays up this long after its first 200 resets the delay to 1 s.
   * @default {600000}
   */
  stableAfterMs?: number;
  /**
   * Consecutive failed background polls, after a first 200, that count as a
   * failure; 0 turns liveness restarts off.
   * @default {6}
   */
  livenessFailures?: number;
  /**
   * Time a run gets between SIGTERM and SIGKILL when liveness stops it.
   * @default {10000}
   */
  graceMs?: number;
  /** Devices this engine was placed on, for reporting (its `env` carries them). */
  gpus?: readonly string[] | null;
  /** Where engine runs are recorded while they run. */
  records?: RunRecorder;
  /** The launcher's watchdog, told each run's process group. */
  watchdog?: RunWatcher;
  /** Whether the engine's port is free before a restart. */
  portFree?: (host: string, port: number) => boolean;
  /** Called after every state change (metrics). */
  onChange?: () => void;
}

/**
 * Supervises one model's engine: starts it, restarts it by policy, kills it
 * when it stops answering, and keeps the facts operators read.
 *
 * @example
 * ```ts ignore
 * import { EngineSupervisor } from "@mymodel/serve/serve";
 * const supervisor = new EngineSupervisor(card, {
 *   host: "127.0.0.1", port: 5001, directory: "/srv/mymodel", restart: "always",
 * });
 * supervisor.start();
 * console.log(supervisor.detail().state); // "starting"
 * await supervisor.stop(10_000);
 * ```
 */
export class EngineSupervisor {
  /** The engine's log, shared by every run. */
  readonly log: EngineLog;
  // Not readonly: a reload swaps them (see replace() and amend()).
  #card: ModelCard;
  #options: SupervisorOptions;
  #policy: RestartPolicy;
  #process: ServerProcess;
  #state: EngineState = "starting";
  #since = new Date();
  #restarts = 0;
  #step = 0;
  #lastExit: LastExit | null = null;
  #nextRestart: Date | null = null;
  #failures = 0;
  #firstOkAt: number | undefined;
  #killedUnhealthy = false;
  #stopRequested = false;
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;
  #lastPollMs: number | undefined;
  /** Polls that failed on our side: one line per 10 s, then a count of the rest. */
  #localFailures = new LogThrottle({ write: log.warn });
  #watchdog: RunWatcher | undefined;
  /** reload: the supervise loop ends without a verdict; replace() starts the next run. */
  #pausing = false;
  /** reload: the replace() under way, awaited by stop(). */
  #replacing: Promise<void> | undefined;

  /**
   * Prepares the first run (command line resolved, nothing started).
   *
   * @param card The catalogue card.
   * @param options Where the engine runs and how it is supervised.
   * @throws {EngineError} When the first run cannot be prepared.
   */
  constructor(card: ModelCard, options: SupervisorOptions) {
    this.#card = card;
    this.#options = options;
    this.#policy = card.restart ?? options.restart ?? "on-failure";
    this.#watchdog = options.watchdog;
    this.log = options.log ??
      new EngineLog(`${options.directory}/logs/${card.name}.log`);
    this.#process = this.#prepare();
  }

  #prepare(): ServerProcess {
    const o = this.#options;
    return new ServerProcess(this.card, {
      host: o.host,
      port: o.port,
      directory: o.directory,
      ...(o.apiKey !== undefined ? { apiKey: o.apiKey } : {}),
      ...(o.env !== undefined ? { env: o.env } : {}),
      log: this.log,
      announceExit: false,
    });
  }

  /** The catalogue card (the expanded one this engine runs, or will run, with). */
  get card(): ModelCard {
    return this.#card;
  }

  /** The catalogue name. */
  get name(): string {
    return this.card.name;
  }

  /** The current (or last) run. */
  get process(): ServerProcess {
    return this.#process;
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
    return this.#options.gpus ?? null;
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
      gpus: this.#options.gpus ?? null,
    };
  }

  #set(state: EngineState): void {
    if (state === this.#state) return;
    this.#state = state;
    this.#since = new Date();
    this.#options.onChange?.();
  }

  /**
   * Starts the first run and supervises it until {@linkcode EngineSupervisor.stop}.
   *
   * @param watchdog The launcher's watchdog, told each run's process group.
   * @throws {EngineError} When the first run cannot be spawned.
   */
  start(watchdog?: RunWatcher): void {
    if (this.#loop) return;
    this.#watchdog = watchdog ?? this.#watchdog;
    this.#launch(this.#process);
    this.#loop = this.#supervise();
  }

  /**
   * Spawns a run and records it (throws only what `ServerProcess.start`
   * throws). A restart is counted once it runs: an attempt that could not
   * spawn is not one.
   */
  #launch(run: ServerProcess, restart = false): void {
    run.start();
    if (restart) this.#restarts++;
    this.#failures = 0;
    this.#firstOkAt = undefined;
    this.#killedUnhealthy = false;
    this.#set("starting");
    const pid = run.pid!;
    this.#watchdog?.add(pid);
    this.#options.records?.write({
      model: this.name,
      pid,
      command: run.commandLine,
      host: run.host,
      port: run.port,
    });
  }

  async #supervise(): Promise<void> {
    while (true) {
      const run = this.#process;
      const status = await run.ended;
      const endedAt = Date.now();
      this.#watchdog?.remove(run.pid!);
      this.#options.records?.remove(this.name);
      const end: RunEnd = {
        code: status.signal ? null : status.code,
        signal: status.signal ?? null,
        reason: this.#killedUnhealthy ? "unhealthy" : "exit",
      };
      const ranMs = endedAt - (run.startedAt ?? endedAt);
      this.#lastExit = {
        code: end.code,
        signal: end.signal,
        at: new Date(endedAt).toISOString(),
        ran_seconds: Math.round(ranMs / 100) / 10,
        reason: end.reason,
      };
      const ran = `after ${(ranMs / 1000).toFixed(1)} s`;
      if (this.#pausing && !this.#stopRequested) {
        // reload: a deliberate stop, neither a crash nor a restart.
        this.#report("info", `exit: ${describeEnd(end)} ${ran} (reload)`);
        return;
      }
      if (this.#stopRequested) {
        this.#report("info", `exit: ${describeEnd(end)} ${ran}`);
        this.#set("exited");
        return;
      }
      if (!shouldRestart(this.#policy, end)) {
        this.#report(
          "warn",
          `exit: ${
            describeEnd(end)
          } ${ran}; not restarted (restart: ${this.#policy})`,
        );
        this.#set("exited");
        return;
      }
      // A run that was healthy for long enough earns a fresh, short delay.
      const stableAfter = this.#options.stableAfterMs ??
        DEFAULT_STABLE_AFTER_MS;
      if (
        this.#firstOkAt !== undefined &&
        endedAt - this.#firstOkAt >= stableAfter
      ) {
        this.#step = 0;
      }
      let next: ServerProcess | undefined;
      let what = `exit: ${describeEnd(end)} ${ran}`;
      while (next === undefined) {
        this.#step++;
        const delay = restartDelayMs(
          this.#step,
          this.#options.restartMaxDelayMs ?? DEFAULT_RESTART_MAX_DELAY_MS,
        );
        this.#report(
          "warn",
          `${what}; restart ${this.#restarts + 1} in ${delay / 1000} s`,
        );
        this.#nextRestart = new Date(Date.now() + delay);
        this.#set("backoff");
        await this.#sleep(delay);
        this.#nextRestart = null;
        if (this.#stopRequested) {
          this.#set("exited");
          return;
        }
        if (this.#pausing) return; // reload: replace() starts the new card's run

        const portFree = this.#options.portFree;
        if (portFree && !portFree(run.host, run.port)) {
          what = `cannot restart: port ${run.port} is taken by another process`;
          continue;
        }
        try {
          const candidate = this.#prepare();
          this.#process = candidate;
          this.#launch(candidate, true);
          next = candidate;
        } catch (error) {
          what = `cannot restart: ${(error as Error).message}`;
        }
      }
    }
  }

  /** One line in the launcher's log and the same in the engine's log. */
  #report(level: "info" | "warn", text: string): void {
    const pid = this.#process.pid;
    log[level](`engine ${this.name} (pid ${pid}) ${text}`);
    this.log.line(`--- ${new Date().toISOString()} ${text}`);
  }

  /** Waits `ms`, or less when stop() wakes it. */
  #sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.#wake = done;
    }).finally(() => {
      this.#wake = undefined;
    });
  }

  /**
   * Polls the engine once for a `GET /models` answer. True only when the
   * current run answered 200 now.
   *
   * @param timeoutMs How long the poll may take.
   * @returns Whether the engine is healthy now.
   */
  async healthy(timeoutMs = 2_000): Promise<boolean> {
    const run = this.#process;
    if (!run.running) return false;
    const result = await run.check(timeoutMs);
    this.#observe(run, result, false);
    return result.ok;
  }

  /**
   * One background liveness poll. After the run's first 200, enough
   * consecutive failures stop it and the restart policy applies as for a
   * crash. A run that never answered 200 is loading and is left alone; a poll
   * that failed for a local reason (no socket to be had) never counts.
   *
   * @param timeoutMs How long the poll may take.
   */
  async poll(timeoutMs = 2_000): Promise<void> {
    const run = this.#process;
    if (!run.running || this.#state === "stopping") return;
    const result = await run.check(timeoutMs);
    this.#observe(run, result, true);
  }

  #observe(run: ServerProcess, result: HealthCheck, counts: boolean): void {
    if (run !== this.#process || !run.running) return;
    if (this.#state === "stopping") return;
    this.#lastPollMs = result.ms;
    if (result.local) {
      const cause = result.local;
      // The key doubles as the summary's subject: "<key>: … and 212 more in 10 s".
      this.#localFailures.hit(
        `health polls of engine ${this.name} that failed on the launcher's side`,
        () =>
          `health poll of engine ${this.name} failed on the launcher's side, not counted against the engine: ${cause}`,
      );
      return;
    }
    if (result.ok) {
      this.#firstOkAt ??= Date.now();
      this.#failures = 0;
      this.#set("ready");
      return;
    }
    if (this.#firstOkAt === undefined) return; // still loading
    this.#set("unhealthy");
    if (!counts) return;
    this.#failures++;
    const limit = this.#options.livenessFailures ?? 6;
    if (limit > 0 && this.#failures >= limit) {
      this.#killedUnhealthy = true;
      this.#report(
        "warn",
        `failed ${this.#failures} health polls in a row after answering 200: stopping it (SIGTERM, then SIGKILL)`,
      );
      this.#set("stopping");
      run.stop(this.#options.graceMs ?? 10_000);
    }
  }

  /**
   * Stops supervising: ends a backoff wait at once, stops the current run
   * (SIGTERM, grace, SIGKILL) and resolves when it is gone.
   *
   * @param graceMs Time between SIGTERM and SIGKILL.
   */
  async stop(graceMs = 10_000): Promise<void> {
    this.#stopRequested = true;
    this.#wake?.();
    // reload: a replace() under way sees the stop and starts nothing more.
    await this.#replacing?.catch(() => {});
    if (this.#process.running) this.#set("stopping");
    await this.#process.stop(graceMs);
    await this.#loop;
    await this.log.close();
  }

  // --- reload ------------------------------------------------------------------
  // amend() swaps what does not reach the engine; replace() stops the run as
  // stop() does and starts the new card's run through start(), the first
  // start's path: not counted as a restart, no backoff.

  /**
   * Restarts the engine with a new card: stops the current run (SIGTERM to
   * its group, `graceMs`, SIGKILL) or ends a backoff wait, then starts the new
   * run as the first one starts (not counted as a restart). An engine that
   * had exited for good is started again; after {@linkcode EngineSupervisor.stop}
   * nothing is started.
   *
   * @param card The new expanded card, same name.
   * @param change The new placement and engine key, where they change.
   * @param graceMs Time between SIGTERM and SIGKILL.
   * @throws {EngineError} When the new run cannot be prepared or spawned (the
   *   engine is then left exited).
   *
   * @example
   * ```ts ignore
   * await supervisor.replace(card, { env: { CUDA_VISIBLE_DEVICES: "1" }, gpus: ["1"] }, 10_000);
   * ```
   */
  async replace(
    card: ModelCard,
    change: EngineChange,
    graceMs: number,
  ): Promise<void> {
    this.#sameName(card);
    this.#replacing = this.#replace(card, change, graceMs);
    try {
      await this.#replacing;
    } finally {
      this.#replacing = undefined;
    }
  }

  async #replace(
    card: ModelCard,
    change: EngineChange,
    graceMs: number,
  ): Promise<void> {
    const started = this.#loop !== undefined;
    if (started && !this.#stopRequested) {
      this.#pausing = true;
      this.#wake?.();
      if (this.#process.running) this.#set("stopping");
      try {
        await this.#process.stop(graceMs);
        await this.#loop;
      } finally {
        this.#pausing = false;
      }
    }
    if (this.#stopRequested) return;
    const { env, gpus, apiKey } = change;
    this.amend(card, apiKey === undefined ? {} : { apiKey });
    this.#options = {
      ...this.#options,
      ...(env !== undefined ? { env } : {}),
      ...(gpus !== undefined ? { gpus } : {}),
    };
    this.#step = 0;
    try {
      this.#process = this.#prepare();
      if (started) {
        this.#loop = undefined;
        this.start();
      }
    } catch (error) {
      this.#set("exited");
      throw error;
    }
  }

  /**
   * Applies a change that does not reach the engine, without touching the
   * process: the card (its `restart:` policy, `description`, `verb`) and the
   * engine key later starts use.
   *
   * @param card The new expanded card, same name.
   * @param next `apiKey`: the key every later start demands.
   *
   * @example
   * ```ts ignore
   * supervisor.amend({ ...supervisor.card, restart: "always" });
   * ```
   */
  amend(card: ModelCard, next: { apiKey?: string } = {}): void {
    this.#sameName(card);
    this.#card = card;
    this.#policy = card.restart ?? this.#options.restart ?? "on-failure";
    if (next.apiKey !== undefined) {
      this.#options = { ...this.#options, apiKey: next.apiKey };
    }
    this.#options.onChange?.();
  }

  #sameName(card: ModelCard): void {
    if (card.name !== this.name) {
      throw new RangeError(
        `Cannot give engine ${this.name} the card ${card.name} (expected the same name)`,
      );
    }
  }
  // --- end reload --------------------------------------------------------------

  /** Sends SIGKILL to the current run's group at once (a second Ctrl-C). */
  kill(): void {
    this.#process.kill();
  }
}
