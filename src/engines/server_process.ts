/**
 * One engine subprocess: spawn a plan in its own process group, pump its
 * output to the log and the load watch, probe its `/health`, stop the group.
 * Folder `engines/`: one engine run and what it needs; it knows nothing of
 * restart policy, supervision, GPUs' start order or HTTP routes.
 * @module
 */
import { EngineError } from "./engine_error.ts";
import { cacheProblem, type EnginePlan, masked } from "./engine_plan.ts";
import { forget, signalGroup, stopGroup, track } from "./process_group.ts";
import { log } from "../common/log.ts";
import { abortAfter, sleep, within } from "../common/sleep.ts";
import { type Clock, REAL_CLOCK } from "../common/sleep.ts";
import { engineOrigin } from "./metrics_read.ts";
import { EngineLog } from "./log_sink.ts";
import { hubCache, incompleteBytes, LoadWatch } from "./load_watch.ts";
import { ENGINE_KINDS } from "./kinds.ts";

export type HealthCheck = Awaited<ReturnType<ServerProcess["check"]>>;

const DRAIN_WAIT_MS = 1_000;
const REAP_MS = 5_000;
/** Grace given to what an engine that exited on its own left in its group. */
const ORPHAN_GRACE_MS = 5_000;
const LOCAL_FAILURE =
  /too many open files|os error 24\b|no buffer space|os error 105\b|cannot allocate memory|os error 12\b/i;

/**
 * One engine subprocess serving one catalogue model, run from its plan, in
 * its own process group.
 *
 * @example Start and stop one engine
 * ```ts ignore
 * import { planEngine, ServerProcess } from "@mymodel/serve/serve";
 * import { Registry } from "@mymodel/serve/catalogue";
 *
 * const card = (await Registry.load()).get("llama-3");
 * const site = { host: "localhost", port: 5001, directory: "/srv/mymodel" };
 * // baseEnv: what the engine inherits; its PATH finds the executable.
 * const baseEnv = { PATH: "/usr/local/bin:/usr/bin:/bin" };
 * const plan = planEngine(card, { ...site, baseEnv });
 * await using engine = new ServerProcess(plan);
 * engine.start();
 * console.log(engine.url, await engine.healthy());
 * ```
 */
export class ServerProcess implements AsyncDisposable {
  /** What this run runs: its card, where, and its command line. */
  readonly plan: EnginePlan;
  /** @ignore The launcher's own plumbing: phase and exit cause, read from the output. */
  readonly watch: LoadWatch;
  /** @ignore Its durations' and timers' clock (tests: one they move). */
  readonly clock: Clock;
  #log: EngineLog;
  #ownLog: boolean;
  #startedAt: number | undefined;
  #spawnedAt: number | undefined; // the spawn on `clock`: durations start here
  #outputAt: number | undefined;
  #child: Deno.ChildProcess | undefined;
  #status: Deno.CommandStatus | undefined;
  #ended: Promise<Deno.CommandStatus> | undefined;
  #drained: Promise<unknown> | undefined;
  #stopping: Promise<void> | undefined;
  #termed = false;
  #poll: Promise<HealthCheck> | undefined;
  #looking: Promise<void> | undefined;

  /** Spawns nothing. A shared `log` is its owner's, who writes the exit lines; by default `plan.logFile`. */
  constructor(plan: EnginePlan, log?: EngineLog, clock: Clock = REAL_CLOCK) {
    this.plan = plan;
    this.clock = clock;
    this.#ownLog = log === undefined;
    this.#log = log ?? new EngineLog(plan.logFile);
    const rules = ENGINE_KINDS[plan.card.engine]?.output;
    this.watch = new LoadWatch(rules, plan.card.name);
    this.watch.now = () => clock.now();
  }

  /** The OpenAI-compatible base URL, e.g. `http://localhost:5001/v1`: its plan's. */
  get url(): string {
    return this.plan.url;
  }

  /** The log file for the engine's stdout and stderr. */
  get logFile(): string {
    return this.#log.path;
  }

  /** The engine's pid (and process group id) once started. */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** True from {@linkcode ServerProcess.start} until the engine process exits. */
  get running(): boolean {
    return this.#child !== undefined && this.#status === undefined;
  }

  /** How the engine exited, once it has. */
  get status(): Deno.CommandStatus | undefined {
    return this.#status;
  }

  /** When the engine was spawned (milliseconds since the epoch), once it was. */
  get startedAt(): number | undefined {
    return this.#startedAt;
  }

  /** @ignore When it spawned, on `clock` (monotonic ms). */
  get spawnedAt(): number | undefined {
    return this.#spawnedAt;
  }

  /** @ignore The spawn, the last output, phase line or download growth, on `clock`. */
  get lastSignOfLife(): number {
    return Math.max(
      this.spawnedAt ?? this.clock.now(),
      this.#outputAt ?? 0,
      this.watch.progressAt ?? 0,
    );
  }

  /** How the engine exited, once it and what it left in its group are gone; rejects if never started. */
  get ended(): Promise<Deno.CommandStatus> {
    return this.#ended ??
      Promise.reject(new EngineError(`${this.plan.name} was never started`));
  }

  /** The command line as logged: the API key masked. */
  get commandLine(): string {
    const { executable, args } = this.plan;
    return masked(this.plan, [executable, ...args].join(" "));
  }

  /** @ignore While `loading()`, every `every` ms: a look at its hub download and, while `polls()`, a `/health` poll to `answer`. */
  async loadPolls(
    every: number,
    signal: AbortSignal,
    loading: () => boolean,
    polls: () => boolean,
    answer: (result: HealthCheck) => void,
  ): Promise<void> {
    while (loading() && this.running && !signal.aborted) {
      this.#lookForDownload();
      await sleep(every, signal, this.clock);
      if (polls() && this.running) answer(await this.check(every));
    }
  }

  // Only a run given the hub id downloads. One look at a time: a slow disk never piles them up.
  #lookForDownload(): void {
    const hub = this.plan.card.hub;
    if (!hub || !this.plan.args.includes(hub) || this.#looking) return;
    const cache = hubCache({ ...this.plan.baseEnv, ...this.plan.env });
    this.#looking = incompleteBytes(cache, hub)
      .then((bytes) => this.watch.downloaded(bytes))
      .finally(() => {
        this.#looking = undefined;
      });
  }

  /**
   * Spawns the engine in its own process group; does not wait for it to load.
   * @throws {EngineError} When already started or the spawn fails.
   */
  start(): void {
    if (this.#child) {
      throw new EngineError(`Cannot start ${this.plan.name}: already started`);
    }
    const cache = cacheProblem(this.plan);
    if (cache) throw new EngineError(`Cannot use a compile cache of ${cache}`);
    try {
      for (const dir of this.plan.caches) {
        Deno.mkdirSync(dir, { recursive: true });
      }
      this.#child = new Deno.Command(this.plan.executable, {
        args: [...this.plan.args],
        env: { ...this.plan.baseEnv, ...this.plan.env },
        clearEnv: true,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        // Its own session, made in the child before the exec: its group is
        // its pid before spawn() returns, whatever `setsid` PATH holds.
        detached: true,
      }).spawn();
    } catch (cause) {
      this.#mark(`cannot start: ${this.commandLine}`);
      const why = cause instanceof Error ? cause.message : cause;
      throw new EngineError(
        `Cannot start ${this.plan.name}: ${this.plan.executable}: ${why}`,
        { cause },
      );
    }
    const child = this.#child;
    [this.#startedAt, this.#spawnedAt] = [this.clock.wall(), this.clock.now()];
    track(child.pid);
    this.#mark(`start: ${this.commandLine} (pid ${child.pid})`);
    // The log never makes the pump wait, so the engine never blocks on a full pipe.
    const pump = async (stream: ReadableStream<Uint8Array>) => {
      const watch = this.watch.feeder();
      for await (const chunk of stream) {
        // Output the log drops past its bound is still a sign of life (`--start-timeout`).
        this.#outputAt = this.clock.now();
        watch(chunk);
        this.#log.write(chunk);
      }
    };
    this.#drained = Promise.allSettled([
      pump(child.stdout),
      pump(child.stderr),
    ]);
    this.#ended = child.status.then(async (status) => {
      this.#status = status;
      if (!this.#stopping) {
        if (this.#ownLog && !this.#termed) {
          const how = describe(status);
          log.warn(
            `engine ${this.plan.name} (pid ${child.pid}) exited on its own with ${how}; see ${this.logFile}`,
          );
        }
        // Its children may live on (vLLM's EngineCore does): clear the group.
        this.#stopping = this.#terminate(child, ORPHAN_GRACE_MS);
      }
      await this.#stopping;
      return status;
    });
    log.info(
      `engine ${this.plan.name} (${this.plan.card.engine}) started, pid ${child.pid}, ${this.url}, log ${this.logFile}`,
    );
  }

  /** Whether the engine's `GET /health` answers 200 within `timeoutMs` now. */
  async healthy(timeoutMs = 2_000): Promise<boolean> {
    return (await this.check(timeoutMs)).ok;
  }

  /** Polls `GET /health` once (concurrent callers share the poll) and says how it went. */
  check(timeoutMs = 2_000): Promise<{
    /** True only for a 200 answer within the timeout. */
    ok: boolean;
    /** Set when the poll failed for a reason of this process (no socket to be had), not of the engine. */
    local?: string;
    /** Any HTTP answer came, 200 or not: it listens. */
    answered?: boolean;
    /** How long the poll took, in milliseconds. */
    ms: number;
  }> {
    if (!this.running) return Promise.resolve({ ok: false, ms: 0 });
    this.#poll ??= this.#probe(timeoutMs).finally(() => {
      this.#poll = undefined;
    });
    return this.#poll;
  }

  async #probe(timeoutMs: number): Promise<HealthCheck> {
    const abort = abortAfter(timeoutMs);
    const url = `${engineOrigin(this.plan.host, this.plan.port)}/health`;
    const began = performance.now();
    try {
      const response = await fetch(url, { signal: abort.signal });
      await response.body?.cancel();
      const ok = response.status === 200 && this.running;
      return { ok, answered: true, ms: performance.now() - began };
    } catch (error) {
      // Refused, reset, timed out: not healthy (yet). Unless we could not even open a socket.
      const local = localFailure(error);
      const ms = performance.now() - began;
      return local ? { ok: false, local, ms } : { ok: false, ms };
    } finally {
      abort.clear();
    }
  }

  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves once gone and logged. Safe to repeat. */
  async stop(graceMs = 10_000): Promise<void> {
    const child = this.#child;
    if (!child) return;
    this.#stopping ??= this.#terminate(child, graceMs);
    await this.#stopping;
  }

  /** SIGTERM to the group, nothing after: an engine whose SIGTERM drains exits when done, as asked. */
  term(): void {
    if (!this.#child || this.#stopping) return;
    this.#termed = true;
    signalGroup(this.#child.pid, "SIGTERM");
  }

  /** Sends SIGKILL to the whole group at once (a second Ctrl-C). */
  kill(): void {
    if (this.#child) signalGroup(this.#child.pid, "SIGKILL");
  }

  async #terminate(child: Deno.ChildProcess, graceMs: number): Promise<void> {
    const pgid = child.pid;
    await stopGroup(pgid, graceMs, {
      againMs: ENGINE_KINDS[this.plan.card.engine]?.termAgainMs,
      onKill: () =>
        log.warn(
          `engine ${this.plan.name} (pgid ${pgid}) outlived ${graceMs} ms after SIGTERM: SIGKILL`,
        ),
    });
    // Until this resolves, the exit handler sees `#stopping` set and stays
    // quiet. Bounded: a child stuck in the kernel past SIGKILL is left.
    const status = await within(child.status, REAP_MS);
    forget(pgid);
    await within(this.#drained!, DRAIN_WAIT_MS);
    if (!this.#ownLog) return await this.#log.flush();
    const ran = (this.clock.now() - this.#spawnedAt!) / 1000;
    const how = status ? describe(status) : "not reaped after SIGKILL";
    this.#mark(`exit: ${how} after ${ran.toFixed(1)} s`);
    await this.#log.close();
  }

  #mark(text: string): void {
    this.#log.line(`--- ${new Date(this.clock.wall()).toISOString()} ${text}`);
  }

  /** Stops the engine (see {@linkcode ServerProcess.stop}). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

function localFailure(error: unknown): string | undefined {
  for (let e = error; e instanceof Error; e = e.cause) {
    if (LOCAL_FAILURE.test(e.message)) return e.message.split("\n")[0];
  }
  return undefined;
}

function describe(status: Deno.CommandStatus): string {
  return status.signal ? `signal ${status.signal}` : `code ${status.code}`;
}
