/**
 * One engine subprocess: its command line, its log file, its health and its
 * shutdown.
 *
 * Folder `engines/`: one engine run and what it needs: engine kinds and their
 * command lines (pure), launch facts, process groups, `/proc`, ports and the
 * engine's log file. It knows nothing of restart policy, supervision, GPUs'
 * start order or HTTP routes.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { EngineError } from "./engine_error.ts";
import { engineEnv, inheritedEnv } from "./launch.ts";
import {
  baseUrl,
  type EnginePlan,
  type EngineSite,
  masked,
  planEngine,
} from "./engine_plan.ts";

export { EngineError } from "./engine_error.ts";
import { forget, signalGroup, stopGroup, track } from "./process_group.ts";
import { log } from "../common/log.ts";
import { within } from "../common/sleep.ts";
import { isWildcardHost, urlHost } from "../common/settings.ts";
import { EngineLog } from "./log_sink.ts";
import { LoadWatch } from "./load_watch.ts";
import { ENGINE_KINDS } from "./kinds.ts";
import { hubCache, incompleteBytes } from "./hf_download.ts";

/** Where and how an engine runs. */
export interface ServerProcessOptions extends EngineSite {
  /**
   * Where output goes. A supervisor passes one log shared by successive runs;
   * by default each run opens `<directory>/logs/<name>.log` with the default
   * rotation.
   */
  log?: EngineLog;
  /**
   * Log a warning and an exit line when the engine exits on its own. A
   * supervisor turns this off and writes its own line, restart plan included.
   * @default {true}
   */
  announceExit?: boolean;
}

/** The outcome of one health poll. */
export interface HealthCheck {
  /** True only for a 200 answer within the timeout. */
  ok: boolean;
  /**
   * Set when the poll failed for a reason of this process, not of the engine
   * (no socket could be opened: too many open files, no buffer space).
   */
  local?: string;
  /** How long the poll took, in milliseconds. */
  ms: number;
}

/** How long logs may drain after the engine is gone. */
const DRAIN_WAIT_MS = 1_000;
/** Grace given to what an engine that exited on its own left in its group. */
const ORPHAN_GRACE_MS = 5_000;
/** Errors that say this process could not open a socket: not the engine's fault. */
const LOCAL_FAILURE =
  /too many open files|os error 24\b|no buffer space|os error 105\b|cannot allocate memory|os error 12\b/i;

/**
 * One engine subprocess serving one catalogue model.
 *
 * It runs an engine's plan (`planEngine`); given a card and options instead,
 * the constructor resolves the command line (executable, weights) itself and
 * throws {@linkcode EngineError} if it cannot; {@linkcode ServerProcess.start} spawns the
 * engine in its own process group without waiting for it to load;
 * {@linkcode ServerProcess.stop} sends SIGTERM to the group, waits up to a
 * grace period, then SIGKILLs what is left.
 *
 * @example Start and stop one engine
 * ```ts ignore
 * import { Registry } from "@mymodel/serve/catalogue";
 * import { ServerProcess } from "@mymodel/serve";
 *
 * const card = (await Registry.load()).get("llama-3");
 * await using engine = new ServerProcess(card, {
 *   host: "localhost",
 *   port: 5001,
 *   directory: "/srv/mymodel",
 * });
 * engine.start();
 * console.log(engine.url, await engine.healthy());
 * ```
 */
export class ServerProcess implements AsyncDisposable {
  /** What this run runs: its card, where, and its command line. */
  readonly plan: EnginePlan;
  #log: EngineLog;
  #ownLog: boolean;
  #announceExit: boolean;
  #startedAt: number | undefined;
  #ended: Promise<Deno.CommandStatus> | undefined;
  #child: Deno.ChildProcess | undefined;
  #status: Deno.CommandStatus | undefined;
  #exited: Promise<Deno.CommandStatus> | undefined;
  #drained: Promise<unknown> | undefined;
  #stopping: Promise<void> | undefined;
  #poll: Promise<HealthCheck> | undefined;
  /** This run's phase and exit cause, read from its output by its kind's rules. */
  readonly watch: LoadWatch;

  /**
   * Prepares a run of an engine's plan, or resolves the command line for a
   * card first.
   *
   * @param from The engine's plan, or a catalogue card.
   * @param options For a card: host, port, root directory and API key; for
   *   either: the log and whether the run announces its own exit.
   * @throws {EngineError} Given a card, when the executable is missing, or
   *   neither local weights nor a hub id exist.
   */
  constructor(
    from: EnginePlan | ModelCard,
    options:
      | ServerProcessOptions
      | Pick<ServerProcessOptions, "log" | "announceExit"> = {},
  ) {
    this.plan = "card" in from ? from : planEngine(from, {
      baseEnv: inheritedEnv(Deno.env.toObject()),
      ...options as ServerProcessOptions,
    });
    this.#ownLog = options.log === undefined;
    this.#log = options.log ?? new EngineLog(this.plan.logFile);
    this.#announceExit = options.announceExit ?? true;
    this.watch = new LoadWatch(ENGINE_KINDS[this.plan.card.engine]?.output);
  }

  /**
   * Looks once at the Hugging Face cache this run uses for a download of its
   * card's hub id under way (growing `*.incomplete` blobs) and tells
   * {@linkcode ServerProcess.watch}. Only a run given the hub id (no local
   * weights) downloads.
   */
  lookForDownload(): void {
    const hub = this.card.hub;
    if (!hub || !this.args.includes(hub)) return;
    this.watch.downloaded(
      incompleteBytes(hubCache(engineEnv(this.plan)), hub),
    );
  }

  /** The catalogue card this engine serves. */
  get card(): ModelCard {
    return this.plan.card;
  }

  /** Host the engine binds. */
  get host(): string {
    return this.plan.host;
  }

  /** Port the engine listens on. */
  get port(): number {
    return this.plan.port;
  }

  /** The executable that is run. */
  get executable(): string {
    return this.plan.executable;
  }

  /** Its arguments. */
  get args(): readonly string[] {
    return this.plan.args;
  }

  /** The log file for the engine's stdout and stderr. */
  get logFile(): string {
    return this.#log.path;
  }

  /** The catalogue name. */
  get name(): string {
    return this.card.name;
  }

  /** The OpenAI-compatible base URL, e.g. `http://localhost:5001/v1`. */
  get url(): string {
    return baseUrl(this.plan);
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

  /**
   * Resolves once the engine has exited and whatever it left in its group is
   * gone, with how it exited. Rejects if the engine was never started.
   */
  get ended(): Promise<Deno.CommandStatus> {
    return this.#ended ??
      Promise.reject(new EngineError(`${this.name} was never started`));
  }

  /** The command line as logged: the API key masked. */
  get commandLine(): string {
    return this.mask([this.executable, ...this.args].join(" "));
  }

  /**
   * A text with this engine's API key replaced by `***`, for anything shown
   * or written about the engine.
   *
   * @param text A command line, an argument, an environment value.
   * @returns The text, the key masked.
   *
   * @example
   * ```ts ignore
   * console.log(engine.args.map((arg) => engine.mask(arg)).join(" "));
   * ```
   */
  mask(text: string): string {
    return masked(this.plan, text);
  }

  /**
   * Spawns the engine in its own process group, its output appended to
   * {@linkcode ServerProcess.logFile}. Does not wait for the model to load.
   *
   * @throws {EngineError} When already started or the spawn fails.
   */
  start(): void {
    if (this.#child) {
      throw new EngineError(`Cannot start ${this.name}: already started`);
    }
    try {
      this.#child = new Deno.Command(this.executable, {
        args: [...this.args],
        env: engineEnv(this.plan),
        clearEnv: true,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        detached: true,
      }).spawn();
    } catch (cause) {
      this.#log.line(
        `--- ${new Date().toISOString()} cannot start: ${this.commandLine}`,
      );
      throw new EngineError(
        `Cannot start ${this.name}: ${this.executable}: ${
          cause instanceof Error ? cause.message : cause
        }`,
        { cause },
      );
    }
    const child = this.#child;
    this.#startedAt = Date.now();
    track(child.pid);
    this.#log.line(
      `--- ${
        new Date().toISOString()
      } start: ${this.commandLine} (pid ${child.pid})`,
    );
    this.#drained = Promise.allSettled([
      pump(child.stdout, this.#log, this.watch.feeder()),
      pump(child.stderr, this.#log, this.watch.feeder()),
    ]);
    this.#exited = child.status.then((status) => {
      this.#status = status;
      if (!this.#stopping) {
        if (this.#announceExit) {
          log.warn(
            `engine ${this.name} (pid ${child.pid}) exited on its own with ${
              describe(status)
            }; see ${this.logFile}`,
          );
        }
        // Its children may live on (vLLM's EngineCore does): clear the group.
        this.#stopping = this.#terminate(child.pid, ORPHAN_GRACE_MS);
      }
      return status;
    });
    this.#ended = this.#exited.then(async (status) => {
      await this.#stopping;
      return status;
    });
    log.info(
      `engine ${this.name} (${this.card.engine}) started, pid ${child.pid}, ${this.url}, log ${this.logFile}`,
    );
  }

  /**
   * Polls the engine's `GET /health` once. True only for a 200 answer within
   * the timeout. Concurrent callers share one poll; an exited engine is false
   * without a poll.
   *
   * @param timeoutMs How long to wait for an answer.
   * @returns Whether the engine is healthy now.
   */
  async healthy(timeoutMs = 2_000): Promise<boolean> {
    if (!this.running) return false;
    return (await this.check(timeoutMs)).ok;
  }

  /**
   * Polls the engine's `GET /health` once and says how it went, telling a
   * failure of this process (no socket to be had) from one of the engine.
   * Concurrent callers share one poll.
   *
   * @param timeoutMs How long to wait for an answer.
   * @returns The outcome.
   */
  check(timeoutMs = 2_000): Promise<HealthCheck> {
    if (!this.running) return Promise.resolve({ ok: false, ms: 0 });
    this.#poll ??= this.#probe(timeoutMs).finally(() => {
      this.#poll = undefined;
    });
    return this.#poll;
  }

  async #probe(timeoutMs: number): Promise<HealthCheck> {
    const host = isWildcardHost(this.host)
      ? (this.host.includes(":") ? "[::1]" : "127.0.0.1")
      : urlHost(this.host);
    // A cleared timer, not AbortSignal.timeout(): that one lives on for the whole
    // timeout after the poll ends, and under load thousands pile up (RSS grew 2x).
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    const began = performance.now();
    try {
      const response = await fetch(`http://${host}:${this.port}/health`, {
        signal: abort.signal,
      });
      await response.body?.cancel();
      const ok = response.status === 200 && this.running;
      return { ok, ms: performance.now() - began };
    } catch (error) {
      // Refused, reset, timed out: not healthy (yet). Unless we could not even open a socket.
      const local = localFailure(error);
      const ms = performance.now() - began;
      return local ? { ok: false, local, ms } : { ok: false, ms };
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Stops the engine and every process in its group: SIGTERM, then SIGKILL
   * after the grace period. Resolves once they are gone and the log is flushed.
   * Safe to call more than once and on an engine that already exited.
   *
   * @param graceMs How long to wait after SIGTERM.
   */
  async stop(graceMs = 10_000): Promise<void> {
    const child = this.#child;
    if (!child) return;
    this.#stopping ??= this.#terminate(child.pid, graceMs);
    await this.#stopping;
  }

  /** Sends SIGKILL to the whole group at once (a second Ctrl-C). */
  kill(): void {
    if (this.#child) signalGroup(this.#child.pid, "SIGKILL");
  }

  async #terminate(pgid: number, graceMs: number): Promise<void> {
    await stopGroup(pgid, graceMs, {
      onKill: () =>
        log.warn(
          `engine ${this.name} (pgid ${pgid}) outlived ${graceMs} ms after SIGTERM: SIGKILL`,
        ),
    });
    // While this promise is pending, the exit handler sees `#stopping` set and stays quiet.
    const status = await this.#exited;
    forget(pgid);
    await within(this.#drained ?? Promise.resolve(), DRAIN_WAIT_MS);
    if (status && this.#announceExit) {
      const ran = ((Date.now() - (this.#startedAt ?? Date.now())) / 1000)
        .toFixed(1);
      this.#log.line(
        `--- ${new Date().toISOString()} exit: ${
          describe(status)
        } after ${ran} s`,
      );
    }
    if (this.#ownLog) await this.#log.close();
    else await this.#log.flush();
  }

  /** Stops the engine (see {@linkcode ServerProcess.stop}). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/**
 * Hands an engine's output to its log as it arrives. The log never makes the
 * pump wait, so the engine never blocks on a full pipe.
 */
async function pump(
  stream: ReadableStream<Uint8Array>,
  sink: EngineLog,
  watch: (chunk: Uint8Array) => void,
): Promise<void> {
  for await (const chunk of stream) {
    watch(chunk);
    sink.write(chunk);
  }
}

/** The local cause of a failed poll, if the failure was ours rather than the engine's. */
function localFailure(error: unknown): string | undefined {
  for (let e = error; e instanceof Error; e = e.cause) {
    const match = LOCAL_FAILURE.exec(e.message);
    if (match) return e.message.split("\n")[0];
  }
  return undefined;
}

function describe(status: Deno.CommandStatus): string {
  return status.signal ? `signal ${status.signal}` : `code ${status.code}`;
}
