/**
 * The launcher: one engine subprocess per requested catalogue model, and the
 * management API (`GET /health`, `GET /models`) over them.
 *
 * @example Embed the launcher
 * ```ts ignore
 * import { Semioserve } from "@mymodel/serve/serve";
 *
 * const controller = new AbortController();
 * const serve = new Semioserve({
 *   models: ["llama-3", "EMBED:bge-m3"],
 *   port: 5000,
 *   directory: "/srv/mymodel",
 *   signal: controller.signal,
 * });
 * await serve.run(); // resolves after shutdown (SIGTERM, SIGINT, stop() or abort)
 * ```
 *
 * @module
 */
import { AssertionError } from "node:assert";
import { type ModelCard, Registry } from "./catalogue.ts";
import {
  checkDirectory,
  ConfigError,
  MY_LOCAL,
  NUCLEUS_HOST,
  NUCLEUS_PORT,
  ROOT_SUBDIRECTORIES,
} from "./common.ts";
import { type Handler, SSLConfig } from "./web.ts";
import { createManagementHandler } from "./_handler.ts";
import { ServerProcess, urlHost } from "./_server_process.ts";
import { OpsStance } from "./_ops_stance.ts";
import { parseCli, USAGE, UsageError } from "./_cli.ts";
import { type GuardedServer, serveGuarded } from "./_connection_guard.ts";
import { raiseOpenFilesLimit } from "./_open_files.ts";
import { log } from "./_log.ts";

export {
  EngineError,
  ServerProcess,
  type ServerProcessOptions,
} from "./_server_process.ts";
export { type Mode, OpsStance, type OpsStanceOptions } from "./_ops_stance.ts";

/** How a {@linkcode Semioserve} is configured; unset fields fall back to the environment. */
export interface SemioserveOptions {
  /** Model specs: `<name>` or `<VERB>:<name>`. Engine n listens on `port + n`. */
  models: readonly string[];
  /**
   * Host of the API and every engine.
   * @default {NUCLEUS_HOST}
   */
  host?: string;
  /**
   * Management port.
   * @default {NUCLEUS_PORT}
   */
  port?: number;
  /**
   * Development mode (no authentication).
   * @default {true while NUCLEUS_MODE starts with "dev"}
   */
  dev_mode?: boolean;
  /**
   * Root directory holding `models/`, `logs/`, `metrics/` and `data/`.
   * @default {MY_LOCAL}
   */
  directory?: string;
  /**
   * Catalogue file: a path or a URL.
   * @default {the catalogue shipped with the package}
   */
  catalogue?: string | URL;
  /**
   * Milliseconds engines get between SIGTERM and SIGKILL.
   * @default {10000}
   */
  graceMs?: number;
  /**
   * Milliseconds one engine health poll may take in `GET /models`.
   * @default {2000}
   */
  pollTimeoutMs?: number;
  /**
   * Milliseconds a client connection to the management API gets to send its
   * first complete request head (a TLS handshake included) before it is closed.
   * @default {10000}
   */
  headerTimeoutMs?: number;
  /**
   * Milliseconds a management API connection may stay idle before it is closed.
   * @default {120000}
   */
  idleTimeoutMs?: number;
  /**
   * Management API connections open at once; one more is accepted and closed
   * at once. Lowered to what the open-files limit leaves room for.
   * @default {1024}
   */
  maxConnections?: number;
  /** Aborting it shuts the launcher down, like SIGTERM. */
  signal?: AbortSignal;
  /**
   * Shut down on SIGTERM and SIGINT while running.
   * @default {true}
   */
  handleSignals?: boolean;
  /** Called once the management API listens. */
  onListen?: (url: URL) => void;
}

/** Signals closer together than this are one signal delivered twice. */
const DUPLICATE_SIGNAL_MS = 500;

/** What start-up resolved, before anything runs. */
interface Prepared {
  engines: ServerProcess[];
  handler: Handler;
  stance: OpsStance;
  tls: SSLConfig | undefined;
}

/**
 * Checks the root directory holds `models`, `logs`, `metrics` and `data`.
 *
 * @throws {AssertionError} Naming what is missing and how to create it.
 */
function checkRoot(directory: string): void {
  checkDirectory(directory, "--directory");
  const missing = ROOT_SUBDIRECTORIES.filter((sub) => {
    try {
      return !Deno.statSync(`${directory}/${sub}`).isDirectory;
    } catch {
      return true;
    }
  });
  if (missing.length > 0) {
    const paths = missing.map((sub) => `${directory}/${sub}`);
    throw new AssertionError({
      message: `Cannot use root directory ${directory}: missing ${
        missing.join(", ")
      } (create with: mkdir -p ${paths.join(" ")})`,
    });
  }
}

/** Fails when something already listens on a port we are about to use. */
function checkPortFree(hostname: string, port: number, what: string): void {
  let listener: Deno.Listener;
  try {
    listener = Deno.listen({ hostname, port });
  } catch (cause) {
    const reason = cause instanceof Deno.errors.AddrInUse
      ? "already in use"
      : (cause as Error).message;
    throw new ConfigError(
      `Cannot use port ${port} on ${hostname} for ${what}: ${reason}`,
      { cause },
    );
  }
  listener.close();
}

/**
 * The launcher: starts one engine per model and serves the management API
 * until SIGTERM, SIGINT, {@linkcode Semioserve.stop} or an abort.
 *
 * It is a singleton: constructing it again returns the existing instance (tests
 * call {@linkcode Semioserve.reset} between cases).
 *
 * @example
 * ```ts ignore
 * import { Semioserve } from "@mymodel/serve";
 *
 * await using serve = new Semioserve({ models: ["llama-3"], directory: "/srv/mymodel" });
 * await serve.run();
 * ```
 */
export class Semioserve implements AsyncDisposable {
  static #instance: Semioserve | undefined;

  // Definite: the constructor either sets these or returns the existing instance.
  /** The options as given. */
  readonly options!: Readonly<SemioserveOptions>;
  /** The resolved host. */
  readonly host!: string;
  /** The resolved management port. */
  readonly port!: number;
  #prepared: Prepared | undefined;
  #server: GuardedServer | undefined;
  #url: URL | undefined;
  #running: Promise<void> | undefined;
  #shutdown = Promise.withResolvers<void>();

  /**
   * Creates the launcher, or returns the one that exists.
   *
   * @param options Models and settings.
   */
  constructor(options: SemioserveOptions) {
    if (Semioserve.#instance) {
      log.warn(
        "Semioserve is a singleton: returning the existing instance (see Semioserve.reset)",
      );
      return Semioserve.#instance;
    }
    this.options = { ...options };
    this.host = options.host ?? NUCLEUS_HOST;
    this.port = options.port ?? NUCLEUS_PORT;
    Semioserve.#instance = this;
  }

  /**
   * Stops the current instance, if any, and forgets it, so the next
   * `new Semioserve(...)` makes a fresh one.
   */
  static async reset(): Promise<void> {
    const instance = Semioserve.#instance;
    Semioserve.#instance = undefined;
    await instance?.stop();
  }

  /** The management API's URL once it listens. */
  get url(): URL | undefined {
    return this.#url;
  }

  /** The engines, in request order (empty before {@linkcode Semioserve.prepare}). */
  get engines(): readonly ServerProcess[] {
    return this.#prepared?.engines ?? [];
  }

  /**
   * Validates everything without starting anything: root directory, catalogue,
   * model specs, engine command lines, free ports, mode and TLS files.
   *
   * @throws {AssertionError} When the root directory lacks a subdirectory.
   * @throws {KeyError} When a model is not in the catalogue.
   * @throws {ConfigError | CatalogueError | EngineError | SSLConfigError} On any other bad input.
   */
  async prepare(): Promise<void> {
    if (this.#prepared) return;
    const o = this.options;
    const directory = o.directory ?? MY_LOCAL;
    if (!directory) {
      throw new ConfigError(
        "Cannot start: no root directory (set MY_LOCAL or pass --directory)",
      );
    }
    if (o.models.length === 0) {
      throw new ConfigError("Cannot start: no model given");
    }
    if (this.port + o.models.length > 65535) {
      throw new ConfigError(
        `Cannot use port ${this.port} for ${o.models.length} models: engine ports would pass 65535`,
      );
    }
    checkRoot(directory);
    const registry = await Registry.load(o.catalogue);
    const cards: ModelCard[] = [];
    for (const spec of o.models) {
      const card = registry.resolve(spec);
      if (cards.some((c) => c.name === card.name)) {
        throw new ConfigError(
          `Cannot start: model '${card.name}' is requested twice (expected each model once)`,
        );
      }
      cards.push(card);
    }
    const engines = cards.map((card, i) =>
      new ServerProcess(card, {
        host: this.host,
        port: this.port + i + 1,
        directory,
      })
    );
    const stance = OpsStance.resolve(
      o.dev_mode === undefined ? {} : { dev_mode: o.dev_mode },
    );
    const tls = await SSLConfig.fromDirectory(directory, {
      devMode: stance.devMode,
    });
    checkPortFree(this.host, this.port, "the management API");
    for (const engine of engines) {
      checkPortFree(this.host, engine.port, `engine ${engine.name}`);
    }
    const app = stance.auth.wrap(
      createManagementHandler({
        engines,
        catalogue: registry.names(),
        pollTimeoutMs: o.pollTimeoutMs ?? 2_000,
      }),
    );
    this.#prepared = {
      engines,
      stance,
      tls,
      handler: tls ? withHsts(app) : app,
    };
  }

  /**
   * The management API handler (authentication included in production mode),
   * for tests or to mount in another server.
   *
   * @throws {Error} Before {@linkcode Semioserve.prepare} has resolved.
   */
  handler(): Handler {
    if (!this.#prepared) {
      throw new Error("Cannot build the handler: call prepare() first");
    }
    return this.#prepared.handler;
  }

  /**
   * Prepares, starts every engine, serves the management API, and resolves
   * after shutdown.
   *
   * @throws The errors of {@linkcode Semioserve.prepare}, before anything starts.
   */
  run(): Promise<void> {
    this.#running ??= this.#run();
    return this.#running;
  }

  async #run(): Promise<void> {
    await this.prepare();
    const { engines, stance, tls, handler } = this.#prepared as Prepared;
    const o = this.options;
    const openFiles = await raiseOpenFilesLimit().then(({ before, after }) => {
      log.info(
        `open files: limit ${after.soft}${
          before.soft < after.soft ? ` (raised from ${before.soft})` : ""
        }, hard limit ${after.hard}`,
      );
      return after.soft;
    }, (error: Error) => {
      log.warn(`${error.message}; the connection limit is not capped to it`);
      return undefined;
    });
    log.info(stance.describe());
    let firstSignalAt = 0;
    const onSignal = () => {
      // A second signal (an impatient Ctrl-C) skips the grace period. One that
      // arrives at once is the same signal relayed twice (a wrapper such as
      // `deno task` or `timeout` forwarding to the whole group): not a second ask.
      if (firstSignalAt && Date.now() - firstSignalAt > DUPLICATE_SIGNAL_MS) {
        log.warn("second signal: SIGKILL to every engine");
        for (const engine of engines) engine.kill();
      }
      firstSignalAt ||= Date.now();
      this.#requestShutdown();
    };
    const signals: Deno.Signal[] = o.handleSignals === false
      ? []
      : ["SIGTERM", "SIGINT"];
    for (const signal of signals) Deno.addSignalListener(signal, onSignal);
    const onAbort = () => this.#requestShutdown();
    o.signal?.addEventListener("abort", onAbort, { once: true });
    if (o.signal?.aborted) this.#requestShutdown();
    try {
      for (const engine of engines) engine.start();
      const scheme = tls ? "https" : "http";
      this.#server = serveGuarded({
        hostname: this.host,
        port: this.port,
        ...(tls ? { tls: { cert: tls.cert, key: tls.key } } : {}),
        handler,
        headerTimeoutMs: o.headerTimeoutMs ?? 10_000,
        idleTimeoutMs: o.idleTimeoutMs ?? 120_000,
        maxConnections: o.maxConnections ?? 1024,
        ...(openFiles === undefined ? {} : { openFilesLimit: openFiles }),
        onListen: ({ port }) => {
          this.#url = new URL(`${scheme}://${urlHost(this.host)}:${port}`);
          log.info(
            `listening on ${this.#url.origin} (${
              tls ? `TLS, ${tls.certFile}` : "plain HTTP"
            }) with ${engines.length} engine(s)`,
          );
          o.onListen?.(this.#url);
        },
      });
      await this.#shutdown.promise;
    } finally {
      log.info("shutting down: stopping engines");
      await Promise.all(engines.map((e) => e.stop(o.graceMs ?? 10_000)));
      await this.#server?.shutdown();
      for (const signal of signals) Deno.removeSignalListener(signal, onSignal);
      o.signal?.removeEventListener("abort", onAbort);
      log.info("stopped");
    }
  }

  #requestShutdown(): void {
    this.#shutdown.resolve();
  }

  /** Shuts down (engines first, then the API) and resolves when done. */
  async stop(): Promise<void> {
    this.#requestShutdown();
    await this.#running?.catch(() => {});
  }

  /** Same as {@linkcode Semioserve.stop}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/** HTTPS answers carry HSTS, 401s included (scanners flag its absence). */
function withHsts(handler: Handler): Handler {
  return async function hsts(req, info) {
    // Our handlers build their responses, so the headers are mutable: no copy.
    const response = await handler(req, info);
    response.headers.set("strict-transport-security", "max-age=31536000");
    return response;
  };
}

/**
 * The command-line program: parses `args`, runs the launcher until SIGTERM or
 * SIGINT, and returns the exit code (0 after a clean stop, 1 when start-up
 * fails, 2 on a usage error).
 *
 * @param args The command-line arguments.
 * @returns The process exit code.
 *
 * @example
 * ```ts ignore
 * import { main } from "@mymodel/serve/serve";
 * Deno.exit(await main(["llama-3", "--port", "5000"]));
 * ```
 */
export async function main(
  args: readonly string[] = Deno.args,
): Promise<number> {
  let cli;
  try {
    cli = parseCli(args);
    if (cli.port !== undefined && cli.port + cli.models.length > 65535) {
      throw new UsageError(
        `Cannot use --port ${cli.port} for ${cli.models.length} models: engine ports would pass 65535`,
      );
    }
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    log.error(`${error.message} (see --help)`);
    return 2;
  }
  if (cli.help) {
    console.log(USAGE);
    return 0;
  }
  const { help: _, ...options } = cli;
  try {
    await new Semioserve(options).run();
    return 0;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    log.error(message.replaceAll("\n", " "));
    return 1;
  }
}
