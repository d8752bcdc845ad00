// What runs, as a value computed without I/O; the first refusal in start-up's
// order is thrown. `--dry-run` renders it, a start applies it, a reload
// applies its difference from the running one (`diff.ts`).
import { ConfigError } from "../common/config_error.ts";
import { type EnginePlan, keySplit, placed } from "../engines/engine_plan.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { termDrains } from "../engines/kinds/engine_kind.ts";
import {
  placeEngines,
  type Placement,
  replacePlacement,
} from "../gpu/placement.ts";
import { weightFitWarning } from "../gpu/weights_fit.ts";
import { cardMemory } from "../gpu/footprint_book.ts";
import { enginePlacement } from "../gpu/memory_plan.ts";
import { EngineRecords } from "../supervision/records.ts";
import { productionRefusal } from "../web/ops_stance.ts";
import { type Config, engineKeySource } from "./config.ts";
import { type Facts, leftoverOn, type TlsPair } from "./facts.ts";
import { type EngineChanges, renewed } from "./card_change.ts";

/** What runs, checked: plain data (`JSON.stringify` round-trips it). */
export interface Plan {
  readonly directory: string;
  readonly host: string;
  readonly port: number;
  readonly catalogue: readonly string[];
  readonly engines: readonly EnginePlan[];
  /** What happens to each engine against the plan it was made from (`diff` reads it). */
  readonly changes: EngineChanges;
  readonly placement: Placement;
  readonly devMode: boolean;
  readonly tls: TlsPair | undefined;
  readonly idpSecret: string;
  readonly idpIssuer: string;
  readonly engineKey: string;
  /** Weights that may not fit or cannot be read, for the engines this plan resolved. */
  readonly warnings: readonly string[];
}

/** A reload keeps unchanged engines, the pool and the mode of `running`. @throws The first refusal. */
export function plan(config: Config, facts: Facts, running?: Plan): Plan {
  const { cards, changes } = facts;
  const fresh = renewed(changes);
  const { entries } = facts.footprints;
  const memory = Object.fromEntries(cards.flatMap((card) => {
    const known = cardMemory(card, entries);
    return known ? [[card.name, known]] : [];
  }));
  const placement = running
    ? replacePlacement(running.placement, cards, fresh, memory)
    : placeEngines(
      cards,
      facts.detection!,
      facts.snapshot,
      config.env.CUDA_DEVICE_ORDER,
      memory,
    );
  const engines = cards.map((card): EnginePlan => {
    // Every card, a running one too: a reload's key reaches it at its next start.
    const split = keySplit(card, config.engineKey);
    const source = split && engineKeySource(config.env);
    if (split) {
      throw new ConfigError(
        `Cannot use ${source} for ${card.name}: the key ${split}`,
      );
    }
    const resolved = facts.engines[card.name]!;
    if (resolved instanceof Error) throw resolved;
    if (!fresh.has(card.name)) return resolved;
    return placed(resolved, enginePlacement(card, placement, entries));
  });
  const devMode = running?.devMode ?? config.devMode;
  const refusal = !running && !devMode &&
    productionRefusal(config.idpSecret, config.idpIssuer);
  if (refusal) {
    throw new ConfigError(
      config.modeVariable === undefined
        ? refusal
        : `${refusal}; production mode because NUCLEUS_MODE=${
          /^\S+$/.test(config.modeVariable)
            ? config.modeVariable
            : `${JSON.stringify(config.modeVariable)}${
              config.modeVariable ? "" : " (set but empty)"
            }`
        } (only a value starting with lowercase "dev" means development)`,
    );
  }
  if (facts.tls instanceof Error) throw facts.tls;
  if (running && (facts.tls === undefined) !== (running.tls === undefined)) {
    const ssl = `${facts.directory}/ssl/server.crt and server.key`;
    throw new ConfigError(
      running.tls
        ? `Cannot reload TLS: ${ssl} are gone (expected the pair; serving plain HTTP instead takes a restart)`
        : `Cannot reload TLS: ${ssl} appeared (serving HTTPS instead of plain HTTP takes a restart)`,
    );
  }
  return {
    directory: facts.directory,
    host: config.host,
    port: config.port,
    catalogue: facts.catalogue.names(),
    engines,
    changes,
    placement,
    devMode,
    tls: facts.tls,
    idpSecret: config.idpSecret,
    idpIssuer: config.idpIssuer,
    engineKey: config.engineKey,
    warnings: cardWarnings(engines.filter((e) => fresh.has(e.name)), facts),
  };
}

/** Weights that cannot be read, or may not fit the memory the engine may use, in card order. */
function cardWarnings(
  engines: readonly EnginePlan[],
  { weights, snapshot }: Facts,
): string[] {
  return engines.flatMap(({ card, placement }) => {
    const found = weights[card.name];
    if (found?.kind === "unreadable") {
      return `${card.name}: cannot read its weights at ${found.path} (${found.reason}): their size is not compared with GPU memory`;
    }
    if (found?.kind !== "local") return [];
    const devices = placement.gpus;
    const weightBytes = found.bytes;
    return weightFitWarning({ card, devices, weightBytes, snapshot }) ?? [];
  });
}

/** A port a killed launcher's engine holds is no refusal: the start stops it first. */
export function refuseStart(facts: Facts): void {
  const survey = facts.survey!;
  new EngineRecords(facts.directory).refuseServed(survey);
  for (const { port, error } of facts.ports) {
    if (error && !leftoverOn(port, survey)) throw error;
  }
}

/** What a dry run says instead of refusing; a port held by anyone else is refused as a start would. */
export function dryRunNotes(facts: Facts, host: string): string[] {
  const survey = facts.survey!;
  const notes: string[] = [];
  const serving = Map.groupBy(survey.serving, (record) => record.launcherPid);
  for (const [pid, records] of serving) {
    const models = records.map((record) => record.model).join(", ");
    notes.push(
      `launcher pid ${pid} already serves ${models} from ${facts.directory}: a start beside it would refuse (stop it first); this plan is what a reload of it reads`,
    );
  }
  for (const { record, running } of survey.stale) {
    if (!running) continue;
    notes.push(
      `engine ${record.model} (pid ${record.pid}) outlived its launcher (pid ${record.launcherPid}, gone): a start stops it first`,
    );
  }
  for (const { port, what, error, owner } of facts.ports) {
    if (!error) continue;
    if (!owner) throw error;
    notes.push(`port ${port} on ${host} for ${what}: in use by ${owner}`);
  }
  for (const card of facts.cards) {
    const kind = ENGINE_KINDS[card.engine];
    if (!kind?.termDrain || termDrains(kind, card.args)) continue;
    notes.push(
      `${card.name}: without ${kind.termDrain.flag} (${kind.title} ${kind.termDrain.since}+) its SIGTERM is no drain: a planned stop under steady traffic runs to its drain deadline, then cuts what is in flight`,
    );
  }
  return notes;
}
