/**
 * The plan of a start: one function, {@linkcode planStart}, that a start, a
 * dry run and a reload all call. It checks everything a start needs, in
 * start-up's order, and resolves what a start runs, each engine as one
 * {@linkcode EnginePlan}. It builds nothing that runs: a start applies the
 * plan (`launcher.ts`), a dry run prints it (`start_plan.ts`), a reload
 * applies its difference from the running plan (`reload.ts`).
 *
 * The modes differ only where the running launcher matters: a dry run
 * reports a killed launcher's leftovers and a running launcher's own ports
 * instead of refusing them; a reload keeps the running launcher's ports,
 * records and mode, and resolves again only the engines whose card changed.
 * Nothing here spawns an engine, listens for longer than a port probe,
 * writes under the directory or takes a lock.
 *
 * @module
 */
import { type ModelCard, Registry } from "../catalogue.ts";
import { AssertionError } from "node:assert";
import { ConfigError } from "../common/config_error.ts";
import {
  checkDirectory,
  checkEnginePorts,
  type Environment,
  isDevMode,
  ROOT_SUBDIRECTORIES,
} from "../common/settings.ts";
import { SSLConfig } from "../web.ts";
import { OpsStance } from "../web/ops_stance.ts";
import { type EnginePlan, planEngine } from "../engines/engine_plan.ts";
import { checkPortFree } from "../engines/ports.ts";
import { portHolders } from "../engines/port_holder.ts";
import { type LocalWeights, localWeights } from "../engines/launch.ts";
import { flagWarnings } from "../engines/engine_help.ts";
import {
  placeEngines,
  type Placement,
  readsIntegerDevices,
} from "../gpu/place_engines.ts";
import { gpuMemoryNeed, parseVisibleDevices } from "../gpu/need.ts";
import type { GpuSnapshot } from "../gpu/nvidia_smi.ts";
import type { GpuMonitor } from "../gpu/gpu_monitor.ts";
import { weightFitWarning } from "../gpu/weights_fit.ts";
import { EngineRecords, type RecordSurvey } from "../supervision/records.ts";
import { diffCards, type ReloadDiff } from "./reload_diff.ts";
import { NO_MODEL, type ResolvedOptions } from "./options.ts";

/** A start applies the plan, a dry run prints it, a reload compares it with the running one. */
export type PlanMode = "start" | "dry-run" | "reload";

/** Reads and validates the catalogue: `Registry.load`, or a reload's `loadInWorker`. */
export type CatalogueLoader = (
  source: string | URL | undefined,
) => Promise<Registry>;

/** What a start runs, checked; nothing in it runs yet. */
export interface Plan {
  /** The root directory. */
  readonly directory: string;
  /** The host of the management API and every engine. */
  readonly host: string;
  /** The management port. */
  readonly port: number;
  /** Every name in the catalogue. */
  readonly catalogue: readonly string[];
  /** One per requested model, in request order. */
  readonly engines: readonly EnginePlan[];
  /** Each engine's devices, and where the pool came from. */
  readonly placement: Placement;
  /** The mode and its authentication. */
  readonly stance: OpsStance;
  /** The TLS pair under `<directory>/ssl/`, if any. */
  readonly tls: SSLConfig | undefined;
  /** The HS512 secret as read (empty when unset). */
  readonly idpSecret: string;
  /** The engine API key as read (empty for none). */
  readonly engineKey: string;
  /** The one `nvidia-smi` look taken, when one was needed and answered. */
  readonly snapshot: GpuSnapshot | undefined;
  /** The local weights of each engine this plan resolved, by name. */
  readonly weights: ReadonlyMap<string, LocalWeights>;
  /** For a reload: what happens to each engine, from its running and new card. */
  readonly changes?: ReloadDiff;
  /** The engine records as found; undefined for a reload (its own are kept). */
  readonly survey: RecordSurvey | undefined;
  /**
   * Warnings for people, in check order: for a dry run first what a start
   * would do (leftovers stopped) and a running launcher's own ports; then
   * weights that may not fit, unreadable weight directories (for a reload,
   * of the engines it restarts); for a dry run and a reload, last, the flags
   * the engines' help does not list.
   */
  readonly warnings: readonly string[];
}

/**
 * Runs every start-up check, in start-up's order, and resolves what a start
 * runs. Throws the first refusal, as one line, exactly as a start prints it.
 *
 * @param o The launcher's options, resolved.
 * @param env The environment as read (for a reload: read again, so the
 *   `*_FILE` secrets are new).
 * @param monitor The launcher's one road to GPU facts; the plan takes at most
 *   one look.
 * @param mode What the plan is for.
 * @param running For a reload: the running launcher's plan, its engines as
 *   they run now.
 * @param load Reads the catalogue; a reload passes one that parses off the
 *   event loop serving the management API.
 * @returns The plan.
 * @throws {AssertionError} When the root directory lacks a subdirectory.
 * @throws {KeyError} When a model is not in the catalogue.
 * @throws {ConfigError | CatalogueError | EngineError | SSLConfigError | GpuPlacementError} On any other bad input.
 */
export async function planStart(
  o: ResolvedOptions,
  env: Environment,
  monitor: GpuMonitor,
  mode: PlanMode,
  running?: Plan,
  load: CatalogueLoader = (source) => Registry.load(source),
): Promise<Plan> {
  const directory = o.directory ?? env.myLocal;
  if (!directory) {
    throw new ConfigError(
      "Cannot start: no root directory (set MY_LOCAL or pass --directory)",
    );
  }
  if (o.models.length === 0) throw new ConfigError(NO_MODEL);
  checkEnginePorts(o.port, o.models.length, "port");
  checkRoot(directory);
  if (o.gpus === undefined) checkVisibleDevices();
  // One nvidia-smi look, shared with pool detection: for a dry run always,
  // and asked at once so that it runs while the catalogue is read; otherwise
  // only when a local checkpoint is to be compared with device memory.
  let look = mode === "dry-run" && mayLook(o.gpus) ? monitor.look() : undefined;
  try {
    const registry = await load(o.catalogue);
    const cards = requestedCards(
      registry,
      o.models,
      mode === "reload" ? "reload" : "start",
    );
    // A reload resolves again only the engines whose change reaches the engine.
    const changes = running &&
      diffCards(running.engines.map((e) => e.card), cards);
    const changed = changes && new Set(changes.restart);
    const fresh = cards.filter((card) => changed?.has(card.name) ?? true);
    // By `stat` alone: a weight file is never opened.
    const weights = new Map(
      fresh.map((card) => [card.name, localWeights(card, directory)]),
    );
    look ??= mayLook(o.gpus) && wantsLook(fresh, weights)
      ? monitor.look()
      : undefined;
    const placement = running
      ? running.placement.replan(cards, changed!)
      : await placeEngines(cards, o.gpus, look);
    const answered = await look;
    const snapshot = answered?.ok ? answered.snapshot : undefined;
    const engines = cards.map((card, i): EnginePlan => {
      const kept = running?.engines[i];
      if (kept && !changed?.has(card.name)) return { ...kept, card };
      const need = placement.assignment(card)?.need;
      const devices = placement.devices(card);
      return planEngine(card, {
        host: o.host,
        port: o.port + i + 1,
        directory,
        apiKey: env.engineKey,
        env: placement.env(card),
        gpus: devices,
        share: devices === null || devices.length === 0
          ? null
          : need?.kind === "share"
          ? need.share
          : 1,
      });
    });
    // A reload keeps the running mode: only its secret file is read again.
    const stance = running?.stance ?? resolveStance(o, env);
    const tls = await SSLConfig.fromDirectory(directory, {
      devMode: stance.devMode,
    });
    const warnings: string[] = [];
    let survey: RecordSurvey | undefined;
    if (!running) {
      const records = new EngineRecords(directory);
      survey = records.survey(cards.map((card) => card.name));
      if (mode === "start") records.refuseServed(survey);
      else warnings.push(...dryRunNotes(survey, directory));
      warnings.push(...checkPorts(o, engines, survey, mode));
    }
    warnings.push(...cardWarnings(fresh, weights, placement, snapshot));
    // A start leaves flags to the engines' own parsers; a plan asks their help,
    // and so does a reload, for the cards the operator changed.
    if (mode !== "start") warnings.push(...await flagWarnings(fresh));
    return {
      directory,
      host: o.host,
      port: o.port,
      catalogue: registry.names(),
      engines,
      placement,
      stance,
      tls,
      idpSecret: env.idpSecret,
      engineKey: env.engineKey,
      snapshot,
      weights,
      ...(changes ? { changes } : {}),
      survey,
      warnings,
    };
  } finally {
    // A refusal before placement leaves no nvidia-smi run behind.
    await look;
  }
}

/**
 * Checks the root directory holds `models`, `logs`, `metrics` and `data`,
 * and that the launcher can write `logs`, `data` and `metrics`: each is probed
 * by creating and removing one empty file, then its times are put back (Deno
 * has no access(2), and mode bits alone miss ACLs, read-only mounts and the
 * user's groups), so nothing is left behind.
 */
function checkRoot(directory: string): void {
  checkDirectory(directory, "--directory");
  const missing: string[] = [];
  for (const sub of ROOT_SUBDIRECTORIES) {
    const path = `${directory}/${sub}`;
    let info: Deno.FileInfo;
    try {
      info = Deno.statSync(path);
    } catch {
      missing.push(sub);
      continue;
    }
    if (!info.isDirectory) {
      throw new ConfigError(
        `Cannot use root directory ${directory}: ${sub} is a file, not a directory (expected a directory: move the file away, then mkdir ${path})`,
      );
    }
  }
  if (missing.length > 0) {
    const paths = missing.map((sub) => `${directory}/${sub}`);
    throw new AssertionError({
      message: `Cannot use root directory ${directory}: missing ${
        missing.join(", ")
      } (create with: mkdir -p ${paths.join(" ")})`,
    });
  }
  for (const sub of ["logs", "data", "metrics"]) {
    const dir = `${directory}/${sub}`;
    const { atime, mtime } = Deno.statSync(dir);
    try {
      const probe = `${dir}/.write-check-${Deno.pid}`;
      Deno.writeFileSync(probe, new Uint8Array(), { createNew: true });
      Deno.removeSync(probe);
      // The directory's times as they were: a dry run leaves the root as it found it.
      if (atime && mtime) Deno.utimeSync(dir, atime, mtime);
    } catch (cause) {
      const reason = (cause as Error).message.replace(/:.*$/s, "");
      throw new ConfigError(
        `Cannot use root directory ${directory}: ${sub}/ is not writable by the launcher's user (${reason}) (expected a directory it can write: logs/, data/ and metrics/ take the engines' logs, their records and the metrics; chown or chmod ${directory}/${sub})`,
        { cause },
      );
    }
  }
}

/**
 * The mode from `--dev_mode`, else `NUCLEUS_MODE`; a production refusal that
 * the variable chose says its value (`DEV` is production: only a value
 * starting with lowercase `dev` is development).
 */
function resolveStance(o: ResolvedOptions, env: Environment): OpsStance {
  try {
    return OpsStance.resolve({
      dev_mode: o.dev_mode ?? isDevMode(env.mode),
      secret: env.idpSecret,
      issuer: env.idpIssuer,
    });
  } catch (error) {
    if (o.dev_mode !== undefined || !(error instanceof ConfigError)) {
      throw error;
    }
    throw new ConfigError(
      `${error.message}; production mode because NUCLEUS_MODE=${env.mode} (only a value starting with lowercase "dev" means development)`,
      { cause: error },
    );
  }
}

/**
 * Checks the launcher's `CUDA_VISIBLE_DEVICES`, the pool when `--gpus` is not
 * given: each entry must be a device index or a `GPU-`/`MIG-` UUID (CUDA
 * itself would ignore everything from a bad entry on).
 */
function checkVisibleDevices(): void {
  const visible = Deno.env.get("CUDA_VISIBLE_DEVICES");
  const bad = parseVisibleDevices(visible ?? "").find((entry) =>
    !/^(\d+|GPU-[\w-]+|MIG-[\w/-]+)$/.test(entry)
  );
  if (bad !== undefined) {
    throw new ConfigError(
      `Cannot use CUDA_VISIBLE_DEVICES=${visible}: entry '${bad}' is not a device (expected device indices such as 0,1 or GPU-/MIG- UUIDs; or pass --gpus)`,
    );
  }
}

/**
 * The requested cards, in request order: each spec looked up in the
 * catalogue, its `${NAME}` values filled in from the launcher's environment
 * (requested cards only), each model at most once.
 */
function requestedCards(
  registry: Registry,
  specs: readonly string[],
  doing: "start" | "reload",
): ModelCard[] {
  const cards: ModelCard[] = [];
  const env = Deno.env.toObject();
  for (const spec of specs) {
    const card = registry.expand(registry.resolve(spec), env);
    if (cards.some((c) => c.name === card.name)) {
      throw new ConfigError(
        `Cannot ${doing}: model '${card.name}' is requested twice (expected each model once)`,
      );
    }
    cards.push(card);
  }
  return cards;
}

/**
 * False when GPUs are hidden from the launcher (`--gpus none`, an empty
 * `CUDA_VISIBLE_DEVICES`): then no `nvidia-smi` look is asked for.
 */
function mayLook(gpus: string | undefined): boolean {
  const visible = Deno.env.get("CUDA_VISIBLE_DEVICES");
  return gpus === undefined
    ? visible === undefined || parseVisibleDevices(visible).length > 0
    : gpus.trim().toLowerCase() !== "none";
}

/**
 * Whether an `nvidia-smi` look would tell these cards anything: some card has
 * local weights and a share of GPU memory to compare them with, or an engine
 * that reads `CUDA_VISIBLE_DEVICES` as integers (its indices, the devices' state).
 */
function wantsLook(
  cards: readonly ModelCard[],
  weights: ReadonlyMap<string, LocalWeights>,
): boolean {
  return cards.some((card) =>
    (weights.get(card.name)?.kind === "local" &&
      gpuMemoryNeed(card) !== undefined) || readsIntegerDevices(card)
  );
}

/**
 * The warnings each card earns, in card order: weights that cannot be read,
 * weights that may not fit the memory it may use on its devices.
 */
function cardWarnings(
  cards: readonly ModelCard[],
  weights: ReadonlyMap<string, LocalWeights>,
  placement: Placement,
  snapshot: GpuSnapshot | undefined,
): string[] {
  const warnings: string[] = [];
  for (const card of cards) {
    const found = weights.get(card.name);
    if (found?.kind === "unreadable") {
      warnings.push(
        `${card.name}: cannot read its weights at ${found.path} (${found.reason}): their size is not compared with GPU memory`,
      );
    } else if (found?.kind === "local") {
      const fit = weightFitWarning({
        card,
        devices: placement.devices(card),
        weightBytes: found.bytes,
        snapshot,
      });
      if (fit) warnings.push(fit);
    }
  }
  return warnings;
}

/** What a start would do about the records that a dry run leaves alone. */
function dryRunNotes(survey: RecordSurvey, directory: string): string[] {
  const notes: string[] = [];
  const serving = new Map<number, string[]>();
  for (const record of survey.serving) {
    serving.set(record.launcherPid, [
      ...serving.get(record.launcherPid) ?? [],
      record.model,
    ]);
  }
  for (const [pid, models] of serving) {
    notes.push(
      `launcher pid ${pid} already serves ${
        models.join(", ")
      } from ${directory}: a start beside it would refuse (stop it first); this plan is what a reload of it reads`,
    );
  }
  for (const { record, running } of survey.stale) {
    if (!running) continue;
    notes.push(
      `engine ${record.model} (pid ${record.pid}) outlived its launcher (pid ${record.launcherPid}, gone): a start stops it first`,
    );
  }
  return notes;
}

/**
 * Checks the management port and every engine port. A start takes the ports
 * a killed launcher's engines hold (it stops them first); a dry run reports a
 * port held by a launcher running on this directory, or by such a leftover,
 * as a warning instead of refusing it.
 */
function checkPorts(
  o: ResolvedOptions,
  engines: readonly EnginePlan[],
  survey: RecordSurvey,
  mode: PlanMode,
): string[] {
  const warnings: string[] = [];
  const wanted = [
    { port: o.port, what: "the management API" },
    ...engines.map((e) => ({ port: e.port, what: `engine ${e.name}` })),
  ];
  for (const { port, what } of wanted) {
    try {
      checkPortFree(o.host, port, what);
    } catch (error) {
      if (mode === "start") {
        if (leftoverOn(port, survey)) continue;
        throw error;
      }
      const owner = ownerOf(port, survey);
      if (!owner) throw error;
      warnings.push(
        `port ${port} on ${o.host} for ${what}: in use by ${owner}`,
      );
    }
  }
  return warnings;
}

/** The running engine a killed launcher left on a port, if any. */
function leftoverOn(port: number, survey: RecordSurvey) {
  return survey.stale.find(({ record, running }) =>
    running && record.port === port
  );
}

/** Who of this directory's launchers holds a port, as a dry run words it. */
function ownerOf(port: number, survey: RecordSurvey): string | undefined {
  const engine = survey.live.find((record) => record.port === port);
  if (engine) {
    return `engine ${engine.model} of launcher pid ${engine.launcherPid}, running on this directory (its own port: a reload keeps it; a start refuses it until that launcher stops)`;
  }
  const leftover = leftoverOn(port, survey);
  if (leftover) {
    return `engine ${leftover.record.model} (pid ${leftover.record.pid}) left by a killed launcher: a start stops it first`;
  }
  const launchers = new Set(survey.live.map((record) => record.launcherPid));
  const holder = portHolders(port).find((h) => launchers.has(h.pid));
  return holder
    ? `launcher pid ${holder.pid}, running on this directory (its management API: a reload keeps it; a start refuses it until that launcher stops)`
    : undefined;
}
