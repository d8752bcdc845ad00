/**
 * The launcher itself: {@linkcode Semioserve} plans (every check start-up
 * makes, `start_checks.ts`), applies the plan: one supervised engine per
 * requested model and the management API over them; reloads on request (a
 * new plan's difference) and stops everything it started.
 *
 * @module
 */
import { type Handler, withSecurityHeaders } from "../web.ts";
import {
  createManagementHandler,
  type ManagementState,
} from "../http/handler.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import type { EngineRun } from "../supervision/engine_run.ts";
import { type EngineView, engineView } from "../supervision/engine_detail.ts";
import { EngineRecords } from "../supervision/records.ts";
import { Watchdog } from "../supervision/watchdog.ts";
import { HealthLoop } from "../supervision/health_loop.ts";
import { GpuLifecycle } from "../gpu/gpu_lifecycle.ts";
import { GpuMonitor } from "../gpu/gpu_monitor.ts";
import {
  replaceEngine,
  supervise,
  type Supervision,
} from "./engine_supervisors.ts";
import { type Plan, planStart } from "./start_checks.ts";
import { type StartPlan, startPlan } from "./start_plan.ts";
import {
  type ResolvedOptions,
  resolveOptions,
  type SemioserveOptions,
} from "./options.ts";
import { LauncherSignals } from "./signals.ts";
import { type GuardedServer, serveGuarded } from "../http/connection_guard.ts";
import { raiseAndReportOpenFiles } from "../http/open_files.ts";
import { log } from "../common/log.ts";
import {
  type Environment,
  readEnvironment,
  urlHost,
} from "../common/settings.ts";
import { MetricsWriter } from "../metrics/file.ts";
import { metricsSnapshot } from "../metrics/snapshot.ts";
import type { ReloadMetrics } from "../metrics/text.ts";
import { Reloader } from "./reload.ts";
import { Journal, journalPath } from "../supervision/journal.ts";
import { loadInWorker } from "../catalogue/worker_load.ts";
import { ReloadQueue } from "./reload_queue.ts";
import { refusedReload, type ReloadResult } from "./reload_result.ts";

/** A plan applied: what it built, nothing started yet. */
interface Applied {
  plan: Plan;
  supervisors: EngineRun[];
  /** How engines are supervised: records, the GPU gate, the options. */
  supervision: Supervision;
  handler: Handler;
  state: ManagementState;
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
  /** The options with every default applied. */
  #o!: ResolvedOptions;
  /** The environment, read once when the launcher was made. */
  #env!: Environment;
  /** The one road to GPU facts: the plan's look, the gate, the memory rounds. */
  #gpus = new GpuMonitor();
  #prepared: Applied | undefined;
  #server: GuardedServer | undefined;
  #url: URL | undefined;
  #running: Promise<void> | undefined;
  #shutdown = Promise.withResolvers<void>();
  #onEngineChange: () => void = () => {};
  #reloader: Reloader | undefined;
  #reloads = new ReloadQueue<ReloadResult>(
    () => this.#reloader?.reload() ?? Promise.resolve(refusedReload()),
    () => refusedReload(),
  );

  /**
   * Creates the launcher, or returns the one that exists. The environment
   * (`MY_LOCAL`, `NUCLEUS_*`, the secrets and their `*_FILE` files) is read
   * here, once.
   *
   * @param options Models and settings.
   * @throws {ConfigError} On a bad `MY_LOCAL` or `NUCLEUS_PORT`, or a secret
   *   that cannot be read.
   */
  constructor(options: SemioserveOptions) {
    if (Semioserve.#instance) {
      log.warn(
        "Semioserve is a singleton: returning the existing instance (see Semioserve.reset)",
      );
      return Semioserve.#instance;
    }
    this.options = { ...options };
    this.#env = readEnvironment(Deno.env, options);
    this.#o = resolveOptions(options, this.#env);
    this.host = this.#o.host;
    this.port = this.#o.port;
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

  /**
   * Each model's current engine run, in request order (empty before
   * {@linkcode Semioserve.prepare}). A restart replaces a model's run.
   */
  get engines(): readonly ServerProcess[] {
    return this.#supervisors().map((s) => s.process);
  }

  /**
   * Each model's engine, in request order, as `GET /models?detail=1` shows
   * it (name, state, pid, port, GPUs, restarts, last exit): a read-only
   * snapshot taken now; empty before {@linkcode Semioserve.prepare}.
   *
   * @returns One frozen view per requested model.
   *
   * @example
   * ```ts ignore
   * const [engine] = serve.engineViews();
   * console.log(engine?.state, engine?.restarts, engine?.last_exit?.code);
   * ```
   */
  engineViews(): readonly EngineView[] {
    return this.#supervisors().map(engineView);
  }

  #supervisors(): readonly EngineRun[] {
    return this.#prepared?.supervisors ?? [];
  }

  /**
   * Plans the start, validating everything (root directory, catalogue, model
   * specs, GPU placement, engine command lines, mode and TLS files, free
   * ports), then applies the plan up to the start itself: stops what a killed
   * launcher left running and builds the engines' supervisors. Starts nothing.
   *
   * @throws {AssertionError} When the root directory lacks a subdirectory.
   * @throws {KeyError} When a model is not in the catalogue.
   * @throws {ConfigError | CatalogueError | EngineError | SSLConfigError} On any other bad input.
   */
  async prepare(): Promise<void> {
    if (this.#prepared) return;
    this.#prepared = await this.#apply(
      await planStart(this.#o, this.#env, this.#gpus, "start"),
    );
  }

  /** {@linkcode Semioserve.prepare}'s application of the plan. */
  async #apply(plan: Plan): Promise<Applied> {
    const o = this.#o;
    const records = new EngineRecords(plan.directory);
    // What a launcher killed outright left behind goes first, so its ports are free again.
    await records.reap(plan.survey!, o.graceMs);
    const supervisors: EngineRun[] = [];
    const placed = plan.engines.some((e) => (e.gpus?.length ?? 0) > 0);
    const journal = new Journal(journalPath(plan.directory), {
      maxBytes: o.logMaxBytes,
      keep: o.logKeep,
    });
    const supervision: Supervision = {
      options: o,
      records,
      journal,
      gpu: placed
        ? new GpuLifecycle({
          intervalMs: o.healthIntervalMs,
          releaseTimeoutMs: o.gpuReleaseTimeoutMs,
          runs: () => supervisors,
          monitor: this.#gpus,
        })
        : undefined,
      onChange: () => this.#onEngineChange(),
    };
    supervisors.push(...plan.engines.map((e) => supervise(e, supervision)));
    const state: ManagementState = {
      engines: supervisors,
      catalogue: plan.catalogue,
      pollTimeoutMs: o.pollTimeoutMs,
    };
    const app = plan.stance.auth.wrap(createManagementHandler(state));
    return {
      plan,
      supervisors,
      supervision,
      state,
      handler: withSecurityHeaders(app, { https: plan.tls !== undefined }),
    };
  }

  /**
   * What a start would do, without doing it: every check
   * {@linkcode Semioserve.prepare} makes (the same code), then each engine's
   * port, URL, devices, command line and environment (the engine API key as
   * `***`), the engines each waits for at the GPU start gate, each GPU's
   * memory and who holds it, and the warnings. Starts no engine, writes
   * nothing under the directory, leaves the records alone (a killed
   * launcher's leftovers are reported, not stopped) and probes each port
   * only by binding and closing it at once. Beside a launcher running on the
   * same directory, that launcher's models and ports are reported in
   * `warnings` instead of refused.
   *
   * @returns The plan; the same object `--dry-run --json` prints.
   * @throws The errors of {@linkcode Semioserve.prepare}, with the same messages.
   *
   * @example
   * ```ts ignore
   * import { Semioserve } from "@mymodel/serve";
   *
   * const plan = await new Semioserve({ models: ["bge-m3"], directory: "/srv/mymodel" }).plan();
   * console.log(plan.engines[0]?.command.join(" ")); // vllm serve BAAI/bge-m3 --host localhost --port 5001 ...
   * for (const warning of plan.warnings) console.warn(warning);
   * ```
   */
  async plan(): Promise<StartPlan> {
    return startPlan(
      await planStart(this.#o, this.#env, this.#gpus, "dry-run"),
    );
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

  /**
   * Reloads the configuration, as SIGHUP does: the catalogue, the TLS pair
   * under `<directory>/ssl/` and the `IDP_SECRET_FILE` and
   * `LOCAL_ENGINE_API_KEY_FILE` files are read again and validated as at
   * start; only then are the engines whose change reaches the engine
   * restarted, the other changes applied, and one summary line logged. On any
   * failure nothing changes (`ok: false`, `error`). Reloads never overlap: a
   * call during a reload runs one more after it, and calls while that one
   * waits share it. Before the API listens, the reload waits until it does.
   *
   * @returns What the reload did, or why it was refused.
   *
   * @example
   * ```ts ignore
   * const result = await serve.reload();
   * console.log(result.summary); // "reload: 1 engine restarted (qwen3-8b)"
   * ```
   */
  reload(): Promise<ReloadResult> {
    return this.#reloads.request();
  }

  async #run(): Promise<void> {
    using signals = new LauncherSignals(this.#o.handleSignals);
    // A SIGHUP before the API listens waits for it (see ReloadQueue).
    signals.onHangup(() => void this.reload());
    try {
      await this.#runLauncher(signals);
    } finally {
      this.#reloads.close();
      await this.#reloads.settled();
    }
  }

  async #runLauncher(signals: LauncherSignals): Promise<void> {
    await this.prepare();
    // Stopped during the checks (or the reaping, which finished): start nothing.
    if (this.#o.signal?.aborted) return;
    const { plan, supervisors, supervision, handler, state } = this
      .#prepared as Applied;
    const { directory, stance, tls, placement, warnings } = plan;
    const gpu = supervision.gpu;
    const journal = supervision.journal!;
    const o = this.#o;
    const graceMs = o.graceMs;
    const startedAt = Date.now();
    // Raised before the engines start, so they inherit the higher limit too.
    const openFiles = await raiseAndReportOpenFiles();
    log.info(stance.describe());
    placement.report(plan.engines.map((engine) => engine.card));
    for (const warning of warnings) log.warn(warning);
    signals.onShutdown(
      () => this.#shutdown.resolve(),
      () => supervisors.forEach((s) => s.kill()),
    );
    const onAbort = () => this.#shutdown.resolve();
    o.signal?.addEventListener("abort", onAbort, { once: true });
    if (o.signal?.aborted) this.#shutdown.resolve();
    const watchdog = Watchdog.start(graceMs);
    const metrics = new MetricsWriter(directory, this.port);
    const reloads: ReloadMetrics = { ok: 0, refused: 0 };
    const facts = {
      stance,
      tls: tls !== undefined,
      port: this.port,
      startedAt,
      reloads,
      startWarnings: warnings.length,
    };
    const writeMetrics = () =>
      metrics.update(metricsSnapshot(facts, supervisors));
    this.#onEngineChange = writeMetrics;
    this.#reloader = new Reloader({
      plan,
      // The same planning as a start's, the environment read again (its *_FILE secrets).
      replan: (running) =>
        planStart(
          o,
          readEnvironment(Deno.env, o),
          this.#gpus,
          "reload",
          running,
          // The YAML parse off the loop that answers /health (npm:yaml is synchronous).
          loadInWorker,
        ),
      supervisors,
      replace: (index, engine) =>
        replaceEngine(supervisors, index, engine, supervision, watchdog),
      server: () => this.#server,
      state,
      onReloaded(result) {
        journal.record({
          model: null,
          event: "reload",
          reason: result.ok ? "applied" : "refused",
          detail: result.summary,
        });
        if (result.ok) {
          reloads.ok++;
          reloads.lastOkSeconds = Date.now() / 1000;
        } else reloads.refused++;
        writeMetrics();
      },
    });
    const healthLoop = new HealthLoop(supervisors, {
      intervalMs: o.healthIntervalMs,
      timeoutMs: o.pollTimeoutMs,
      onRound: gpu
        // One nvidia-smi query a round serves every engine's memory figure.
        ? () => void gpu.round().then(writeMetrics)
        : writeMetrics,
    });
    try {
      journal.record({
        model: null,
        event: "started",
        detail: `${supervisors.length} engine(s): ${
          supervisors.map((s) => s.name).join(", ")
        }`,
      });
      for (const s of supervisors) s.start(watchdog);
      healthLoop.start();
      writeMetrics();
      const scheme = tls ? "https" : "http";
      this.#server = serveGuarded({
        hostname: this.host,
        port: this.port,
        ...(tls ? { tls: { cert: tls.cert, key: tls.key } } : {}),
        handler,
        headerTimeoutMs: o.headerTimeoutMs,
        idleTimeoutMs: o.idleTimeoutMs,
        maxConnections: o.maxConnections,
        ...(openFiles === undefined ? {} : { openFilesLimit: openFiles }),
        onListen: ({ port }) => {
          this.#url = new URL(`${scheme}://${urlHost(this.host)}:${port}`);
          log.info(
            `listening on ${this.#url.origin} (${
              tls ? `TLS, ${tls.certFile}` : "plain HTTP"
            }) with ${supervisors.length} engine(s)`,
          );
          o.onListen?.(this.#url);
        },
      });
      this.#reloads.open();
      await this.#shutdown.promise;
    } finally {
      log.info("shutting down: stopping engines");
      journal.record({ model: null, event: "stopping" });
      // A reload under way finishes first: no engine starts after the others stopped.
      this.#reloads.close();
      await this.#reloads.settled();
      await healthLoop.stop();
      await Promise.all(supervisors.map((s) => s.stop(graceMs)));
      journal.record({ model: null, event: "stopped" });
      await journal.close();
      this.#onEngineChange = () => {};
      await metrics.close();
      await watchdog?.close();
      await this.#server?.shutdown();
      o.signal?.removeEventListener("abort", onAbort);
      log.info("stopped");
    }
  }

  /** Shuts down (engines first, then the API) and resolves when done. */
  async stop(): Promise<void> {
    this.#shutdown.resolve();
    await this.#running?.catch(() => {});
  }

  /** Same as {@linkcode Semioserve.stop}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
