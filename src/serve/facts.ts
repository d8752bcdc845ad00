// What the machine says, read once for a plan. A refusal that start-up gives
// later (an engine, TLS, a port) is kept as a value, so the plan throws the
// first one in start-up's order.
import { AssertionError } from "node:assert";
import { type ModelCard, Registry } from "../catalogue.ts";
import { ConfigError } from "../common/config_error.ts";
import { checkDirectory, ROOT_SUBDIRECTORIES } from "../common/settings.ts";
import { SSLConfig } from "../web.ts";
import {
  amendPlan,
  type EnginePlan,
  planEngine,
} from "../engines/engine_plan.ts";
import { type LocalWeights, localWeights } from "../engines/launch.ts";
import { checkPortFree, portHolders } from "../engines/ports.ts";
import { detectGpuPool } from "../gpu/detect.ts";
import type { GpuMonitor, GpuQuery, GpuSnapshot } from "../gpu/nvidia_smi.ts";
import { gpuMemoryNeed, parseVisibleDevices } from "../gpu/need.ts";
import { type GpuDetection, readsIntegerDevices } from "../gpu/placement.ts";
import { EngineRecords, type RecordSurvey } from "../supervision/records.ts";
import {
  type BookEntry,
  measuredOf,
  type ReadBook,
  readBook,
} from "../gpu/footprint_book.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { type Config, engineDefaults } from "./config.ts";
import { type EngineChanges, engineChanges, renewed } from "./card_change.ts";

/** The TLS pair under `<directory>/ssl/`, as plain data. */
export type TlsPair = Pick<SSLConfig, "cert" | "key" | "certFile" | "serial">;

/** A port a start needs: `error` when it is not free. */
export interface PortFact {
  readonly port: number;
  readonly what: string;
  readonly error?: Error;
  /** Who of this directory's launchers holds it, as a dry run words it. */
  readonly owner?: string;
}

export interface Facts {
  readonly directory: string;
  readonly catalogue: Registry;
  /** The requested cards, expanded, in request order. */
  readonly cards: readonly ModelCard[];
  /** Each engine without a new placement, or why it cannot run: resolved anew, else the running one amended. */
  readonly engines: Readonly<Record<string, EnginePlan | Error>>;
  /** What happens to each engine, against the running plan (none: a start, every engine `start`). */
  readonly changes: EngineChanges;
  readonly weights: Readonly<Record<string, LocalWeights>>;
  /** Undefined for a reload, as `survey` (it keeps its own). */
  readonly detection: GpuDetection | undefined;
  readonly snapshot: GpuSnapshot | undefined;
  readonly tls: TlsPair | Error | undefined;
  readonly survey: RecordSurvey | undefined;
  readonly ports: readonly PortFact[];
  /** The footprint book's entries; `unreadable`: why its file is no book (a start moves it aside). */
  readonly footprints: ReadBook;
}

export interface GatherOptions {
  /** A reload's engines as they run (those `failed` among them): only the changed ones are resolved anew. */
  readonly running?: {
    readonly engines: readonly EnginePlan[];
    readonly failed?: readonly string[];
    readonly devMode: boolean;
  };
  /** Ask `nvidia-smi` whatever the cards (a dry run), at once. */
  readonly look?: boolean;
  /** Ends the catalogue's read (a reload's deadline, the launcher's stop). */
  readonly signal?: AbortSignal;
}

/** @throws {AssertionError | KeyError | ConfigError | CatalogueError} A bad root, model, pool or catalogue. */
export async function gather(
  config: Config,
  monitor: GpuMonitor,
  options: GatherOptions = {},
): Promise<Facts> {
  const directory = config.directory;
  if (!directory) {
    throw new ConfigError(
      "Cannot start: no root directory (set MY_LOCAL or pass --directory)",
    );
  }
  checkRoot(directory);
  const visible = config.env.CUDA_VISIBLE_DEVICES;
  if (config.gpus === undefined) checkVisibleDevices(visible);
  const { running } = options;
  const mayLook = config.gpus === undefined
    ? visible === undefined || parseVisibleDevices(visible).length > 0
    : config.gpus.trim().toLowerCase() !== "none";
  // Asked at once, so that it runs while the catalogue is read.
  let look: Promise<GpuQuery> | undefined = options.look && mayLook
    ? monitor.look()
    : undefined;
  try {
    const catalogue = await Registry.load(config.catalogue, options);
    const cards: ModelCard[] = [];
    for (const spec of config.models) {
      const card = catalogue.expand(catalogue.resolve(spec), config.env);
      if (cards.some((c) => c.name === card.name)) {
        const verb = running ? "reload" : "start";
        throw new ConfigError(
          `Cannot ${verb}: model '${card.name}' is requested twice (expected each model once)`,
        );
      }
      cards.push(card);
    }
    const changes = engineChanges(running?.engines, cards, running?.failed);
    const renew = renewed(changes);
    const fresh = cards.filter((card) => renew.has(card.name));
    // By `stat` alone: a weight file is never opened.
    const weights = Object.fromEntries(
      fresh.map((card) => [card.name, localWeights(card, directory)]),
    );
    const book = await readBook(directory, options.signal);
    look ??= mayLook && wantsLook(fresh, weights, book.entries)
      ? monitor.look()
      : undefined;
    const detection = running ? undefined : await detectGpuPool({
      gpus: config.gpus,
      env: config.env,
      query: look,
    });
    const answered = await look;
    const engines: Record<string, EnginePlan | Error> = {};
    const defaults = engineDefaults(config);
    cards.forEach((card, i) => {
      const was = running?.engines[i];
      try {
        engines[card.name] = was && !renew.has(card.name)
          ? amendPlan(was, card, config.engineKey, defaults)
          : planEngine(card, {
            host: config.host,
            port: config.port + i + 1,
            directory,
            apiKey: config.engineKey,
            baseEnv: config.engineEnv,
            defaults,
          });
      } catch (error) {
        engines[card.name] = error as Error;
      }
    });
    const tls = await SSLConfig.fromDirectory(directory, {
      devMode: running?.devMode ?? config.devMode,
      keyLogFile: config.env.SSLKEYLOGFILE,
    }).then((pair) => pair && { ...pair }, (error: Error) => error);
    const names = cards.map((card) => card.name);
    const survey = running
      ? undefined
      : new EngineRecords(directory).survey(names);
    return {
      directory,
      catalogue,
      cards,
      engines,
      changes,
      weights,
      detection,
      snapshot: answered?.ok ? answered.snapshot : undefined,
      tls,
      survey,
      ports: survey ? probePorts(config, cards, survey) : [],
      footprints: book,
    };
  } finally {
    // A refusal before placement leaves no nvidia-smi run behind.
    await look;
  }
}

// Writability is probed with one empty file, its times then put back: Deno has
// no access(2), and mode bits alone miss ACLs, read-only mounts and groups.
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
    const mkdir = `mkdir -p ${paths.join(" ")}`;
    throw new AssertionError({
      message: `Cannot use root directory ${directory}: missing ${
        missing.join(", ")
      } (create with: ${mkdir})`,
    });
  }
  for (const sub of ["logs", "data", "metrics"]) {
    const dir = `${directory}/${sub}`;
    const { atime, mtime } = Deno.statSync(dir);
    try {
      const probe = `${dir}/.write-check-${Deno.pid}`;
      Deno.writeFileSync(probe, new Uint8Array(), { createNew: true });
      Deno.removeSync(probe);
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

/** CUDA ignores everything from a bad entry on: each must be an index or a `GPU-`/`MIG-` UUID. */
function checkVisibleDevices(visible: string | undefined): void {
  const bad = parseVisibleDevices(visible ?? "").find((entry) =>
    !/^(\d+|GPU-[\w-]+|MIG-[\w/-]+)$/.test(entry)
  );
  if (bad !== undefined) {
    throw new ConfigError(
      `Cannot use CUDA_VISIBLE_DEVICES=${visible}: entry '${bad}' is not a device (expected device indices such as 0,1 or GPU-/MIG- UUIDs; or pass --gpus)`,
    );
  }
}

// A dry run looks whatever the cards: a start that looked less would place them otherwise.
function wantsLook(
  cards: readonly ModelCard[],
  weights: Readonly<Record<string, LocalWeights>>,
  entries: readonly BookEntry[],
): boolean {
  return cards.some((card) =>
    (weights[card.name]?.kind === "local" &&
      gpuMemoryNeed(card) !== undefined) ||
    readsIntegerDevices(card) ||
    card.gpuMemory !== undefined ||
    ENGINE_KINDS[card.engine]?.sizing?.packs === true ||
    Object.keys(measuredOf(entries, card)).length > 0
  );
}

function probePorts(
  config: Config,
  cards: readonly ModelCard[],
  survey: RecordSurvey,
): PortFact[] {
  const wanted = [
    { port: config.port, what: "the management API" },
    ...cards.map((card, i) => ({
      port: config.port + i + 1,
      what: `engine ${card.name}`,
    })),
  ];
  return wanted.map(({ port, what }) => {
    try {
      checkPortFree(config.host, port, what, hostAsGiven(config));
      return { port, what };
    } catch (error) {
      const owner = ownerOf(port, survey);
      return { port, what, error: error as Error, ...owner ? { owner } : {} };
    }
  });
}

/** The host as the operator gave it: a flag, the variable, or the default. */
function hostAsGiven({ host, hostFrom }: Config): string {
  return hostFrom === undefined
    ? `host ${host} (the default)`
    : `${hostFrom}=${host}`;
}

export function leftoverOn(
  port: number,
  survey: RecordSurvey,
): RecordSurvey["stale"][number] | undefined {
  return survey.stale.find(({ record, running }) =>
    running && record.port === port
  );
}

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
