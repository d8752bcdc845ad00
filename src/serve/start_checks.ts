/**
 * Every check a start makes, in one function that a start and `--dry-run`
 * both run: the root directory, the catalogue and the requested models with
 * their `${NAME}` values, GPU placement on the pool, each engine's command
 * line (executable, weights), the mode with its secrets and the TLS pair, the
 * engine records, and the management and engine ports. They differ only
 * where a start acts: a start stops what a killed launcher left running,
 * a dry run reports it; a dry run beside a running launcher on the same
 * directory reports that launcher's own ports and models instead of refusing
 * them. Nothing here spawns an engine, listens for longer than a port probe,
 * writes under the directory or takes a lock. A reload (`reload.ts`) runs the
 * same card checks ({@linkcode cardWarnings}, the command lines, the TLS
 * pair) on what it would restart; the ports it keeps are its own.
 *
 * @module
 */
import { type ModelCard, Registry } from "../catalogue.ts";
import { ConfigError } from "../common/config_error.ts";
import {
  checkEnginePorts,
  type Environment,
  isDevMode,
} from "../common/settings.ts";
import { SSLConfig } from "../web.ts";
import { OpsStance } from "../web/ops_stance.ts";
import { checkPortFree } from "../engines/ports.ts";
import { portHolders } from "../engines/port_holder.ts";
import { type LocalWeights, localWeights } from "../engines/weight_files.ts";
import { unknownFlagWarnings } from "../engines/unknown_flags.ts";
import { placeEngines, type Placement } from "../gpu/place_engines.ts";
import { GpuLifecycle } from "../gpu/gpu_lifecycle.ts";
import { gpuMemoryNeed, parseVisibleDevices } from "../gpu/need.ts";
import {
  type GpuQuery,
  type GpuSnapshot,
  queryGpus,
} from "../gpu/nvidia_smi.ts";
import { weightFitWarning } from "../gpu/weights_fit.ts";
import { EngineRecords, type RecordSurvey } from "../supervision/records.ts";
import type { EngineSupervisor } from "../supervision/supervisor.ts";
import { type EngineSite, superviseEngines } from "./engine_supervisors.ts";
import { checkRoot } from "./root_directory.ts";
import { requestedCards } from "./requested_cards.ts";
import { NO_MODEL, type ResolvedOptions } from "./options.ts";

/** A start acts on what it finds; a dry run only reports it. */
export type CheckMode = "start" | "dry-run";

/** Where the launcher listens, and whom engines tell of a change. */
export interface CheckSite {
  /** The environment as the launcher read it. */
  readonly env: Environment;
  readonly host: string;
  readonly port: number;
  readonly onChange: () => void;
}

/** What the checks resolved: everything a start goes on with, or a plan shows. */
export interface CheckedStart {
  readonly directory: string;
  readonly registry: Registry;
  readonly cards: readonly ModelCard[];
  readonly placement: Placement;
  /** Where and how engines are supervised: directory, records, the GPU gate. */
  readonly site: EngineSite;
  /** One per card, in request order; nothing started. */
  readonly supervisors: EngineSupervisor[];
  readonly stance: OpsStance;
  readonly tls: SSLConfig | undefined;
  /** The one `nvidia-smi` look taken, when one was needed and answered. */
  readonly snapshot: GpuSnapshot | undefined;
  /** Each card's local weights, by name. */
  readonly weights: ReadonlyMap<string, LocalWeights>;
  /** The engine records as found (before a start cleaned them up). */
  readonly survey: RecordSurvey;
  /**
   * Warnings for people, in check order: weights that may not fit, unknown
   * engine flags, unreadable weight directories; for a dry run also what a
   * start would do (leftovers stopped) and a running launcher's own ports.
   */
  readonly warnings: readonly string[];
}

/**
 * Runs every start-up check, in start-up's order, and resolves what a start
 * needs. Throws the first refusal, as one line, exactly as a start prints it.
 *
 * @param o The launcher's options, resolved.
 * @param at Host, management port and the engines' change callback.
 * @param mode `start` stops a killed launcher's leftovers; `dry-run` reports them.
 * @returns What was checked and resolved.
 * @throws {AssertionError} When the root directory lacks a subdirectory.
 * @throws {KeyError} When a model is not in the catalogue.
 * @throws {ConfigError | CatalogueError | EngineError | SSLConfigError | GpuPlacementError} On any other bad input.
 *
 * @example
 * ```ts ignore
 * const checked = await checkStart(options, { host, port, onChange() {} }, "dry-run");
 * console.log(checked.warnings);
 * ```
 */
export async function checkStart(
  o: ResolvedOptions,
  at: CheckSite,
  mode: CheckMode,
): Promise<CheckedStart> {
  const directory = o.directory ?? at.env.myLocal;
  if (!directory) {
    throw new ConfigError(
      "Cannot start: no root directory (set MY_LOCAL or pass --directory)",
    );
  }
  if (o.models.length === 0) {
    throw new ConfigError(NO_MODEL);
  }
  checkEnginePorts(at.port, o.models.length, "port");
  checkRoot(directory);
  // One nvidia-smi look, shared with pool detection: for a plan always, and
  // asked at once so that it runs while the catalogue is read; for a start
  // only when a local checkpoint is to be compared with device memory.
  let look = mode === "dry-run" && mayLook(o.gpus) ? queryGpus() : undefined;
  try {
    return await checkRest(
      o,
      at,
      mode,
      directory,
      (cards, weights) =>
        look ??= mayLook(o.gpus) && wantsLook(cards, weights)
          ? queryGpus()
          : undefined,
    );
  } finally {
    // A refusal before placement leaves no nvidia-smi run behind.
    await look;
  }
}

/** The checks after the root directory's, with the GPU look started on demand. */
async function checkRest(
  o: ResolvedOptions,
  at: CheckSite,
  mode: CheckMode,
  directory: string,
  lookFor: (
    cards: readonly ModelCard[],
    weights: ReadonlyMap<string, LocalWeights>,
  ) => Promise<GpuQuery> | undefined,
): Promise<CheckedStart> {
  const registry = await Registry.load(o.catalogue);
  const cards = requestedCards(registry, o.models, "start");
  const weights = weightsOf(cards, directory);
  const look = lookFor(cards, weights);
  const placement = await placeEngines(cards, o.gpus, look);
  const answered = await look;
  const snapshot = answered?.ok ? answered.snapshot : undefined;
  const records = new EngineRecords(directory);
  const gpu = cards.some((card) => (placement.devices(card)?.length ?? 0) > 0)
    ? new GpuLifecycle({
      intervalMs: o.healthIntervalMs,
      releaseTimeoutMs: o.gpuReleaseTimeoutMs,
      runs: () => supervisors,
    })
    : undefined;
  const site: EngineSite = {
    apiKey: at.env.engineKey,
    host: at.host,
    port: at.port,
    directory,
    records,
    gpu,
    options: o,
    onChange: at.onChange,
  };
  const supervisors = superviseEngines(cards, placement, site);
  const stance = OpsStance.resolve({
    dev_mode: o.dev_mode ?? isDevMode(at.env.mode),
    secret: at.env.idpSecret,
    issuer: at.env.idpIssuer,
  });
  const tls = await SSLConfig.fromDirectory(directory, {
    devMode: stance.devMode,
  });
  const survey = records.survey(cards.map((card) => card.name));
  const warnings: string[] = [];
  if (mode === "start") {
    // What a launcher killed outright left behind goes first, so its ports are free again.
    await records.reap(survey, o.graceMs);
  } else warnings.push(...dryRunNotes(survey, directory));
  warnings.push(
    ...checkPorts(at, supervisors, mode === "dry-run" ? survey : undefined),
  );
  warnings.push(...cardWarnings(cards, weights, placement, snapshot));
  return {
    directory,
    registry,
    cards,
    placement,
    site,
    supervisors,
    stance,
    tls,
    snapshot,
    weights,
    survey,
    warnings,
  };
}

/**
 * False when GPUs are hidden from the launcher (`--gpus none`, an empty
 * `CUDA_VISIBLE_DEVICES`): then no `nvidia-smi` look is asked for.
 *
 * @param gpus The `--gpus` option as given.
 */
function mayLook(gpus: string | undefined): boolean {
  const visible = Deno.env.get("CUDA_VISIBLE_DEVICES");
  return gpus === undefined
    ? visible === undefined || parseVisibleDevices(visible).length > 0
    : gpus.trim().toLowerCase() !== "none";
}

/**
 * Each card's local weights, by `stat` alone: a weight file is never opened.
 *
 * @param cards The cards to look at.
 * @param directory The root directory (`models/` lives there).
 */
function weightsOf(
  cards: readonly ModelCard[],
  directory: string,
): Map<string, LocalWeights> {
  return new Map(
    cards.map((card) => [card.name, localWeights(card, directory)]),
  );
}

/**
 * Whether an `nvidia-smi` look would tell these cards anything: some card has
 * local weights and a share of GPU memory to compare them with.
 */
function wantsLook(
  cards: readonly ModelCard[],
  weights: ReadonlyMap<string, LocalWeights>,
): boolean {
  return cards.some((card) =>
    weights.get(card.name)?.kind === "local" &&
    gpuMemoryNeed(card) !== undefined
  );
}

/**
 * The warnings each card earns, in card order: weights that cannot be read,
 * weights that may not fit the memory it may use on its devices, `args` that
 * are not flags of its engine. A start, a dry run and a reload (for the cards
 * it restarts) all give them; none refuses.
 *
 * @param cards The cards, in request order.
 * @param weights Each card's local weights ({@linkcode weightsOf}).
 * @param placement Where the cards are placed.
 * @param snapshot The `nvidia-smi` look, when one answered.
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
    warnings.push(...unknownFlagWarnings(card));
  }
  return warnings;
}

/**
 * The warnings a start gives, for the engines a reload restarts: their
 * weights, an `nvidia-smi` look when a local checkpoint is to be compared
 * with device memory, then {@linkcode cardWarnings}.
 *
 * @param cards The cards restarted.
 * @param directory The root directory.
 * @param gpus The `--gpus` option as given.
 * @param placement Where the cards are placed.
 *
 * @example
 * ```ts ignore
 * const warnings = await restartWarnings(restarting, directory, options.gpus, placement);
 * ```
 */
export async function restartWarnings(
  cards: readonly ModelCard[],
  directory: string,
  gpus: string | undefined,
  placement: Placement,
): Promise<string[]> {
  const weights = weightsOf(cards, directory);
  const look = mayLook(gpus) && wantsLook(cards, weights)
    ? await queryGpus()
    : undefined;
  return cardWarnings(
    cards,
    weights,
    placement,
    look?.ok ? look.snapshot : undefined,
  );
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
 * Checks the management port and every engine port as a start does. A dry
 * run (given the records' survey) reports a port held by a launcher running
 * on this directory, or by a killed launcher's engine that a start would stop
 * first, as a warning instead of refusing it.
 */
function checkPorts(
  at: CheckSite,
  supervisors: readonly EngineSupervisor[],
  survey: RecordSurvey | undefined,
): string[] {
  const warnings: string[] = [];
  const wanted = [
    { port: at.port, what: "the management API" },
    ...supervisors.map((s) => ({ port: s.port, what: `engine ${s.name}` })),
  ];
  for (const { port, what } of wanted) {
    try {
      checkPortFree(at.host, port, what);
    } catch (error) {
      const owner = survey && ownerOf(port, survey);
      if (!owner) throw error;
      warnings.push(
        `port ${port} on ${at.host} for ${what}: in use by ${owner}`,
      );
    }
  }
  return warnings;
}

/** Who of this directory's launchers holds a port, as a dry run words it. */
function ownerOf(port: number, survey: RecordSurvey): string | undefined {
  const engine = survey.live.find((record) => record.port === port);
  if (engine) {
    return `engine ${engine.model} of launcher pid ${engine.launcherPid}, running on this directory (its own port: a reload keeps it; a start refuses it until that launcher stops)`;
  }
  const leftover = survey.stale.find(({ record, running }) =>
    running && record.port === port
  );
  if (leftover) {
    return `engine ${leftover.record.model} (pid ${leftover.record.pid}) left by a killed launcher: a start stops it first`;
  }
  const launchers = new Set(survey.live.map((record) => record.launcherPid));
  const holder = portHolders(port).find((h) => launchers.has(h.pid));
  return holder
    ? `launcher pid ${holder.pid}, running on this directory (its management API: a reload keeps it; a start refuses it until that launcher stops)`
    : undefined;
}
