// The launcher: config → facts → plan → diff from what runs → apply, then the
// management API over the engines until it stops them.
import { type Handler, withSecurityHeaders } from "../web/security_headers.ts";
import {
  createManagementHandler,
  type ManagementState,
} from "../http/handler.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import { flagWarnings } from "../engines/engine_help.ts";
import {
  cacheProblem,
  type EnginePlan,
  replan,
} from "../engines/engine_plan.ts";
import { EngineLog } from "../engines/log_sink.ts";
import { perDevice } from "../engines/footprint.ts";
import { EngineRun } from "../supervision/engine_run.ts";
import { type EngineView, engineView } from "../supervision/engine_detail.ts";
import { DRAINS_FROM, plannedDrainMs } from "../supervision/drain.ts";
import { EngineRecords } from "../supervision/records.ts";
import { Watchdog } from "../supervision/watchdog.ts";
import { ReadAhead } from "../supervision/read_ahead.ts";
import { HealthLoop } from "../supervision/health_loop.ts";
import { Residency } from "./residency.ts";
import { Journal, journalPath } from "../supervision/journal.ts";
import { GpuLifecycle } from "../gpu/gpu_lifecycle.ts";
import { GpuMonitor } from "../gpu/nvidia_smi.ts";
import { placementReport } from "../gpu/placement.ts";
import type { Released } from "../gpu/start_gate.ts";
import { bookPath, FootprintBook } from "../gpu/footprint_book.ts";
import { deviceOf } from "../gpu/nvidia_smi.ts";
import { OpsStance } from "../web/ops_stance.ts";
import {
  type Config,
  readConfig,
  type SemioserveOptions,
  withSecretsReread,
} from "./config.ts";
import { type Facts, gather, type GatherOptions } from "./facts.ts";
import { dryRunNotes, type Plan, plan, refuseStart } from "./plan.ts";
import {
  type Changes,
  diff,
  refusedReload,
  type ReloadResult,
  reloadResult,
} from "./diff.ts";
import { type StartPlan, startPlan } from "./start_plan.ts";
import { renewed } from "./card_change.ts";
import { onShutdownSignal, SignalListeners } from "./signals.ts";
import { reloadDeadline, ReloadQueue, STOPPING } from "./reload_queue.ts";
import { GuardedServer } from "../http/connection_guard.ts";
import { reportOpenFiles } from "../http/open_files.ts";
import { log } from "../common/log.ts";
import { oneLine } from "../common/one_line.ts";
import { urlHost } from "../common/settings.ts";
import { MetricsWriter } from "../metrics/file.ts";
import { metricsSnapshot } from "../metrics/snapshot.ts";
import type { ReloadMetrics } from "../metrics/text.ts";

interface Live {
  plan: Plan;
  runs: EngineRun[];
  records: EngineRecords;
  book: FootprintBook;
  journal: Journal;
  gpu: GpuLifecycle | undefined;
  stance: OpsStance;
  state: ManagementState;
  handler: Handler;
  watchdog?: Watchdog | undefined;
}

/**
 * The launcher: starts one engine per model and serves the management API
 * until SIGTERM, SIGINT, {@linkcode Semioserve.stop} or an abort. A
 * singleton: constructing it again returns the existing instance (tests call
 * {@linkcode Semioserve.reset} between cases).
 *
 * @example
 * ```ts ignore
 * import { Semioserve } from "@mymodel/serve";
 *
 * await using serve = new Semioserve({ models: ["llama-3"], directory: "/srv/mymodel" });
 * console.log((await serve.plan()).engines[0]?.command.join(" ")); // what a start runs
 * const running = serve.run();
 * const result = await serve.reload(); // as SIGHUP: "reload: 1 engine restarted (llama-3)"
 * console.log(result.summary, serve.engineViews()[0]?.state);
 * await running;
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
  #config!: Config;
  /** One for the plan's look, the gate and the memory rounds. */
  #gpus!: GpuMonitor;
  #live: Live | undefined;
  #server: GuardedServer | undefined;
  #url: URL | undefined;
  #running: Promise<void> | undefined;
  #shutdown = Promise.withResolvers<void>();
  /** Aborted when the stop begins: a reload's read ends, the stop never waits for it. */
  #stopping = new AbortController();
  #writeMetrics: (() => void) | undefined;
  readonly #reloadCounts: ReloadMetrics = { ok: 0, refused: 0 };
  readonly #readAhead = new ReadAhead();
  #hostMiB: number | undefined;
  #reloads = new ReloadQueue<ReloadResult>(
    () => this.#reload(),
    () => refusedReload(),
  );

  /**
   * Creates the launcher, or returns the one that exists; reads the
   * environment (`MY_LOCAL`, `NUCLEUS_*`, the secrets) here, once.
   *
   * @throws {UsageError} Without a model, or a port leaving no room for the engines.
   * @throws {ConfigError} On a bad variable or secret file.
   */
  constructor(options: SemioserveOptions) {
    if (Semioserve.#instance) {
      log.warn(
        "Semioserve is a singleton: returning the existing instance (see Semioserve.reset)",
      );
      return Semioserve.#instance;
    }
    this.options = { ...options };
    this.#config = readConfig(options);
    this.#gpus = new GpuMonitor({ env: this.#config.env });
    this.host = this.#config.host;
    this.port = this.#config.port;
    Semioserve.#instance = this;
  }

  /** Stops the current instance, if any, and forgets it. */
  static async reset(): Promise<void> {
    const instance = Semioserve.#instance;
    Semioserve.#instance = undefined;
    await instance?.stop();
  }

  /** The management API's URL once it listens. */
  get url(): URL | undefined {
    return this.#url;
  }

  /** Each model's current engine run, in request order. */
  get engines(): readonly ServerProcess[] {
    return (this.#live?.runs ?? []).map((run) => run.process);
  }

  /** Each model's engine as `GET /models?detail=1` shows it, a snapshot. */
  engineViews(): readonly EngineView[] {
    return (this.#live?.runs ?? []).map(engineView);
  }

  /** `running`: a reload's plan in force, its engines as they run. */
  async #plan(
    options: Omit<GatherOptions, "running">,
    config = this.#config,
    running?: { plan: Plan; failed: readonly string[] },
  ): Promise<{ facts: Facts; plan: Plan }> {
    const signal = options.signal ?? config.signal;
    const facts = await gather(config, this.#gpus, {
      ...options,
      ...signal ? { signal } : {},
      ...running
        ? { running: { ...running.plan, failed: running.failed } }
        : {},
    });
    return { facts, plan: plan(config, facts, running?.plan) };
  }

  /**
   * Plans the start (every check), stops what a killed launcher left running
   * and builds the engines' runs. Starts nothing.
   *
   * @throws {AssertionError | KeyError | ConfigError | CatalogueError | EngineError | SSLConfigError} The first refusal.
   */
  async prepare(): Promise<void> {
    if (this.#live) return;
    const { facts, plan } = await this.#plan({});
    refuseStart(facts);
    const config = this.#config;
    const records = new EngineRecords(plan.directory);
    // A killed launcher's engines go first, so their ports are free again.
    await records.reap(facts.survey!, config.graceMs);
    const runs: EngineRun[] = [];
    const rotation = { maxBytes: config.logMaxBytes, keep: config.logKeep };
    const parts = {
      records,
      book: new FootprintBook(plan.directory, facts.footprints),
      journal: new Journal(journalPath(plan.directory), rotation),
      gpu: plan.engines.some((e) => (e.placement.gpus?.length ?? 0) > 0)
        ? new GpuLifecycle({
          intervalMs: config.healthIntervalMs,
          releaseTimeoutMs: config.gpuReleaseTimeoutMs,
          runs: () => runs,
          monitor: this.#gpus,
        })
        : undefined,
    };
    // Before the handler: it counts the engines once.
    runs.push(...plan.engines.map((e) => this.#engineRun(e, parts)));
    const { devMode: dev_mode, idpSecret: secret, idpIssuer: issuer } = plan;
    const stance = OpsStance.resolve({ dev_mode, secret, issuer });
    const state: ManagementState = {
      engines: runs,
      catalogue: plan.catalogue,
      pollTimeoutMs: config.pollTimeoutMs,
    };
    const app = stance.auth.wrap(createManagementHandler(state));
    this.#live = {
      ...parts,
      plan,
      runs,
      stance,
      state,
      handler: withSecurityHeaders(app, { https: plan.tls !== undefined }),
    };
  }

  /** Builds every engine run, a start's and a reload's: the replacement of `old` keeps its log and waits for its GPU memory to be `released`. */
  #engineRun(
    plan: EnginePlan,
    { records, book, journal, gpu }: Pick<
      Live,
      "records" | "book" | "journal" | "gpu"
    >,
    old?: EngineRun,
    released?: Released,
  ): EngineRun {
    const o = this.#config;
    const rotation = { maxBytes: o.logMaxBytes, keep: o.logKeep };
    return new EngineRun(plan, {
      log: old?.log ?? new EngineLog(plan.logFile, rotation),
      records,
      journal,
      onChange: () => this.#writeMetrics?.(),
      released: old ? released : undefined,
      gate: gpu?.gate,
      restartMaxDelayMs: o.restartMaxDelayMs,
      stableAfterMs: o.stableAfterMs,
      livenessFailures: o.livenessFailures,
      graceMs: o.graceMs,
      startTimeoutMs: o.startTimeoutMs,
      loadPollMs: Math.min(1_000, o.healthIntervalMs),
      canaryTimeoutMs: o.canaryTimeoutMs,
      // Kept per device, by nvidia-smi's name of it, else by the engine's own (CPU).
      footprint: (run, footprint) => {
        const gpus = run.placement.gpus ?? [];
        const snapshot = this.#live?.plan.placement.snapshot;
        const device = gpus.length === 0
          ? footprint.device
          : snapshot && deviceOf(gpus[0]!, snapshot)?.name;
        if (device) book.note(run.card, device, perDevice(footprint, gpus));
      },
      deviceMiB: (run) => {
        // The plan's look, else the rounds' latest (a start may look at none).
        const snapshot = this.#live?.plan.placement.snapshot ??
          this.#gpus.latest;
        const totals = (run.placement.gpus ?? []).map((entry) =>
          snapshot && deviceOf(entry, snapshot)?.totalMiB
        ).filter((mib): mib is number => Number.isFinite(mib));
        if (totals.length) return Math.max(...totals);
        // On no GPU: the host's memory.
        this.#hostMiB ??= Number(
          /^MemTotal:\s+(\d+) kB/m.exec(this.#readAhead.meminfo())?.[1],
        ) / 1024;
        return run.placement.gpus?.length === 0 && this.#hostMiB || undefined;
      },
      readAhead: this.#readAhead,
    });
  }

  async #replace(index: number, plan: EnginePlan): Promise<void> {
    const live = this.#live!;
    const { runs, gpu, watchdog } = live;
    const old = runs[index]!;
    // Before the launcher stops an engine itself: a neighbour's release mid-load aborts or mis-sizes vLLM's profiling.
    await gpu?.gate.quiet(
      old.gpus ?? [],
      old.name,
      `the reload's restart of engine ${old.name}`,
      this.#stopping.signal,
    );
    const released = old.gpuReleased();
    // The new run starts once the old one is gone (its port).
    await old.stop(this.#config.graceMs, { keepLog: true, why: "reload" });
    if (this.#stopping.signal.aborted) {
      throw new Error("the launcher is stopping");
    }
    const fresh = this.#engineRun(plan, live, old, released);
    fresh.inherit(old);
    runs[index] = fresh;
    this.#writeMetrics?.();
    fresh.start(watchdog);
  }

  /**
   * What a start would do, after the same checks: the plan `--dry-run --json`
   * prints. A running launcher's ports and leftovers are warnings here.
   *
   * @throws The errors of {@linkcode Semioserve.prepare}.
   */
  async plan(): Promise<StartPlan> {
    const { facts, plan } = await this.#plan({ look: true });
    const { unreadable } = facts.footprints;
    const book = unreadable &&
      `footprint book ${
        bookPath(plan.directory)
      }: ${unreadable}: ignored; a start moves it aside and measures anew`;
    return startPlan({
      ...plan,
      warnings: [
        ...book ? [book] : [],
        ...dryRunNotes(facts, plan.host),
        ...plan.engines.flatMap((engine) => {
          const cache = cacheProblem(engine);
          return cache
            ? [
              `Cannot use a compile cache of ${cache}: the start stops this engine alone`,
            ]
            : [];
        }),
        ...plan.warnings,
        ...await flagWarnings(facts.cards),
      ],
    }, facts);
  }

  /** The management API handler (with authentication in production); after {@linkcode Semioserve.prepare}. */
  handler(): Handler {
    if (!this.#live) {
      throw new Error("Cannot build the handler: call prepare() first");
    }
    return this.#live.handler;
  }

  /** Prepares, starts every engine, serves the API; resolves after shutdown. */
  run(): Promise<void> {
    this.#running ??= this.#run();
    return this.#running;
  }

  /**
   * Reloads as SIGHUP does: the catalogue, the TLS pair and the `*_FILE`
   * secrets are read and planned again; only engines whose change reaches
   * them restart. A refusal changes nothing (`ok: false`). Reloads never
   * overlap, and wait for the API to listen.
   *
   * @returns What the reload did, or why it was refused.
   */
  reload(): Promise<ReloadResult> {
    return this.#reloads.request();
  }

  async #reload(): Promise<ReloadResult> {
    const began = performance.now();
    const live = this.#live!;
    let done: ReloadResult;
    try {
      const config = withSecretsReread(this.#config);
      const { runs } = live;
      const running = {
        plan: { ...live.plan, engines: runs.map((run) => run.plan) },
        failed: runs.filter((r) => r.state === "failed").map((r) => r.name),
      };
      using deadline = reloadDeadline(this.#stopping.signal);
      const { facts, plan } = await this.#plan(
        { signal: deadline.signal },
        config,
        running,
      );
      const renew = renewed(facts.changes);
      const fresh = facts.cards.filter((card) => renew.has(card.name));
      // The help reads may take seconds: a stop ends them, and the reload.
      const signal = this.#stopping.signal;
      const warnings = [
        ...plan.warnings,
        ...await flagWarnings(fresh, { signal }),
      ];
      signal.throwIfAborted();
      for (const warning of warnings) log.warn(warning);
      const changes = diff(running.plan, plan);
      const failed = await this.#apply(changes, plan);
      this.#config = config;
      done = reloadResult(changes, failed, warnings, began);
    } catch (error) {
      done = refusedReload(oneLine(error), performance.now() - began);
    }
    (done.ok ? log.info : log.warn)(done.summary);
    live.journal.record({
      model: null,
      event: "reload",
      reason: done.ok ? "applied" : "refused",
      detail: done.summary,
    });
    const counts = this.#reloadCounts;
    counts[done.ok ? "ok" : "refused"]++;
    if (done.ok) counts.lastOkSeconds = Date.now() / 1000;
    this.#writeMetrics?.();
    return done;
  }

  /** A retry resolves its command line anew, as a restart does. */
  async #apply(
    changes: Changes,
    next: Plan,
  ): Promise<{ name: string; error: string }[]> {
    const live = this.#live!;
    // First: the one step that can still be refused, before anything changed.
    const { tls } = changes;
    if (tls) this.#server?.replaceTls({ cert: tls.cert, key: tls.key });
    if (changes.secret) live.stance.auth.rotateSecret(next.idpSecret);
    live.state.catalogue = next.catalogue;
    live.plan = next;
    const { runs, watchdog } = live;
    const { start, amend, retry } = changes;
    const failed: { name: string; error: string }[] = [];
    await Promise.all(runs.map(async (run, i) => {
      const engine = next.engines[i]!;
      const { name } = engine;
      if (start.includes(name)) return run.start(watchdog);
      if (amend.includes(name) || changes.same.includes(name)) {
        if (amend.includes(name) || changes.engineKey) run.amend(engine);
        return;
      }
      try {
        await this.#replace(i, retry.includes(name) ? replan(engine) : engine);
      } catch (error) {
        failed.push({ name, error: oneLine(error) });
      }
    }));
    return failed;
  }

  async #run(): Promise<void> {
    using signals = new SignalListeners(this.#config.handleSignals);
    // From the first moment (its default action would end the process); a SIGHUP before the API listens waits for it (see ReloadQueue).
    signals.on(["SIGHUP"], () => void this.reload());
    try {
      await this.prepare();
      // Stopped during the checks (or the reaping): start nothing.
      if (!this.#config.signal?.aborted) await this.#serve(signals);
    } finally {
      this.#stopping.abort(STOPPING);
      await this.#reloads.close();
    }
  }

  async #serve(signals: SignalListeners): Promise<void> {
    const live = this.#live!;
    const { plan, runs, stance, journal, gpu } = live;
    const o = this.#config;
    const startedAt = Date.now();
    const openFiles = await reportOpenFiles();
    log.info(stance.describe());
    const cards = plan.engines.map((engine) => engine.card);
    for (const { level, text } of placementReport(plan.placement, cards)) {
      log[level](text);
    }
    for (const warning of plan.warnings) log.warn(warning);
    signals.on(
      ["SIGTERM", "SIGINT"],
      onShutdownSignal(
        () => this.#shutdown.resolve(),
        () => runs.forEach((run) => run.process.kill()),
        () => runs.map((run) => run.hurry()).includes(true),
        log.warn,
      ),
    );
    const onAbort = () => this.#shutdown.resolve();
    o.signal?.addEventListener("abort", onAbort, { once: true });
    if (o.signal?.aborted) this.#shutdown.resolve();
    live.watchdog = Watchdog.start(o.graceMs);
    const metrics = new MetricsWriter(plan.directory, this.port);
    const launcher = {
      port: this.port,
      stance,
      tls: plan.tls !== undefined,
      startedAt,
      startWarnings: plan.warnings.length,
      reloads: this.#reloadCounts,
    };
    const writeMetrics = this.#writeMetrics = () =>
      metrics.update(metricsSnapshot(launcher, runs));
    const healthLoop = new HealthLoop(runs, {
      intervalMs: o.healthIntervalMs,
      timeoutMs: o.pollTimeoutMs,
      onRound: gpu
        // One nvidia-smi query a round serves every engine's memory figure.
        ? () => void gpu.round().then(writeMetrics)
        : writeMetrics,
    });
    const residency = new Residency({
      runs: () => live.runs,
      gpu,
      monitor: this.#gpus,
      journal,
    });
    const { tls } = plan;
    let stopAsked = false;
    try {
      const names = runs.map((run) => run.name).join(", ");
      const detail = `${runs.length} engine(s): ${names}`;
      journal.record({ model: null, event: "started", detail });
      await this.#apply(diff(undefined, plan), plan);
      healthLoop.start();
      residency.start();
      writeMetrics();
      this.#server = new GuardedServer({
        hostname: this.host,
        port: this.port,
        ...(tls ? { tls: { cert: tls.cert, key: tls.key } } : {}),
        handler: live.handler,
        headerTimeoutMs: o.headerTimeoutMs,
        idleTimeoutMs: o.idleTimeoutMs,
        maxConnections: o.maxConnections,
        ...(openFiles === undefined ? {} : { openFilesLimit: openFiles }),
        onListen: ({ port }) => {
          const scheme = tls ? "https" : "http";
          this.#url = new URL(`${scheme}://${urlHost(this.host)}:${port}`);
          const how = tls ? `TLS, ${tls.certFile}` : "plain HTTP";
          log.info(
            `listening on ${this.#url.origin} (${how}) with ${runs.length} engine(s)`,
          );
          o.onListen?.(this.#url);
        },
      });
      this.#reloads.open();
      await this.#shutdown.promise;
      stopAsked = true;
    } finally {
      log.info("shutting down: stopping engines");
      const draining = drainLine(runs, o);
      if (draining) log.info(draining);
      journal.record({ model: null, event: "stopping" });
      // One event every engine hears at once: a reload's restart under way is
      // abandoned (its read ends, its drain goes on beside the others').
      this.#stopping.abort(STOPPING);
      await Promise.all([
        residency.stop(), // no sleep or wake from now on
        ...runs.map((run) => run.stop(o.graceMs)),
        this.#reloads.close(),
        healthLoop.stop(),
      ]);
      journal.record({ model: null, event: "stopped" });
      await journal.close();
      this.#writeMetrics = undefined;
      // A stop asked for leaves the file saying so, engines gone (the alert
      // rules tell it from a death); one that ended on an error removes it.
      await (stopAsked
        ? metrics.stop(metricsSnapshot(launcher, []))
        : metrics.close());
      await live.watchdog?.close();
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

/** `stopping: draining 2 engines (up to 30 s); a second signal stops at once`, or null when none will drain. */
function drainLine(runs: readonly EngineRun[], o: Config): string | null {
  const ms = runs.flatMap((run) => {
    const ms = DRAINS_FROM.includes(run.state) || run.state === "draining"
      ? plannedDrainMs(run.plan)
      : 0;
    return ms > 0 ? [ms] : [];
  });
  if (ms.length === 0) return null;
  const n = ms.length;
  return `stopping: draining ${n} engine${n === 1 ? "" : "s"} (up to ${
    Math.max(...ms) / 1000
  } s)${o.handleSignals ? "; a second signal stops at once" : ""}`;
}
