/**
 * The card reader: a catalogue's YAML validated into frozen model cards, each
 * field by its reader, with the line of each expandable value so that an
 * unset `${NAME}` is reported with its file, card, field and line.
 *
 * Folder `catalogue/`: the catalogue's YAML, its cards, `${NAME}` expansion
 * and its errors; public through `catalogue.ts`. It knows nothing of
 * processes, HTTP or GPUs.
 *
 * @module
 */
import { isMap, type Pair } from "yaml";
import { ENGINE_NAMES } from "./engine_names.ts";
import { hint } from "./catalogue_error.ts";
import {
  Modality,
  type ModelCard,
  RESTART_POLICIES,
  Verb,
} from "./model_card.ts";
import type { CardSites } from "./card_expand.ts";
import {
  type Context,
  deref,
  describe,
  fail,
  type FieldValue,
  keyText,
  readYamlDocument,
  scalarValue,
  type Where,
} from "./yaml_nodes.ts";
import {
  oneOf,
  readArgs,
  readCommand,
  readEnv,
  readGpus,
  readLocal,
  readMetrics,
  readModality,
  seconds,
  siteOf,
  text,
} from "./card_fields.ts";

const VERBS: readonly Verb[] = Object.values(Verb);
const CARD_FIELDS = [
  "verb",
  "modality",
  "hub",
  "local",
  "engine",
  "executable",
  "command",
  "args",
  "env",
  "description",
  "restart",
  "failed_retry",
  "drain_timeout",
  "gpus",
  "metrics",
  "stall_timeout",
  "canary",
] as const;
type CardField = typeof CARD_FIELDS[number];
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
// Names become file names, the longest the temporary
// `data/.<name>.engine.json.<16 hex>.tmp` (34 bytes
// more): 128 leaves room under Linux's 255-byte limit.
const MAX_NAME_LENGTH = 128;
const DEFAULT_ENGINE = "vllm";
const COMMAND_ENGINE = "command";

/** The cards in file order, and where each card's expandable values are written. */
export interface ReadCatalogue {
  cards: Map<string, ModelCard>;
  sites: Map<string, CardSites>;
}

/** A {@linkcode CatalogueError} at the first problem. */
export function readCatalogue(text: string, file: string): ReadCatalogue {
  const ctx = readYamlDocument(text, file);
  const top = deref(ctx, {}, ctx.doc.contents);
  if (!isMap(top)) {
    fail(
      ctx,
      { node: top },
      `expected a mapping with the one key 'models', got ${describe(top)}`,
    );
  }
  let models: unknown;
  let modelsKey: unknown;
  for (const pair of top.items) {
    const key = keyText(ctx, { node: pair.key }, pair.key);
    if (key !== "models") {
      fail(
        ctx,
        { field: key, node: pair.key },
        `unknown top-level field (expected only 'models'${
          hint(key, ["models"])
        })`,
      );
    }
    models = deref(
      ctx,
      { field: "models", node: pair.value ?? pair.key },
      pair.value,
    );
    modelsKey = pair.key;
  }
  if (modelsKey === undefined) {
    fail(
      ctx,
      { field: "models", node: top },
      "missing (expected a mapping of catalogue names to model cards)",
    );
  }
  if (!isMap(models) || models.items.length === 0) {
    fail(
      ctx,
      { field: "models", node: models ?? modelsKey },
      `expected a non-empty mapping of catalogue names to model cards, got ${
        isMap(models) ? "an empty mapping" : describe(models)
      }`,
    );
  }

  const cards = new Map<string, ModelCard>();
  const sites = new Map<string, CardSites>();
  const folded = new Map<string, string>();
  for (const pair of models.items) {
    const name = keyText(ctx, { field: "models", node: pair.key }, pair.key);
    if (name.length > MAX_NAME_LENGTH) {
      fail(
        ctx,
        { card: name, node: pair.key },
        `card name of ${name.length} characters (expected at most ${MAX_NAME_LENGTH}: the name becomes file names such as logs/<name>.log and data/<name>.engine.json, which must fit in 255 bytes)`,
      );
    }
    if (!NAME.test(name)) {
      fail(
        ctx,
        { card: name, node: pair.key },
        "bad card name (expected letters, digits, '.', '_' or '-', starting with a letter or digit: the name becomes a log file name)",
      );
    }
    const clash = folded.get(name.toLowerCase());
    if (clash !== undefined) {
      fail(
        ctx,
        { card: name, node: pair.key },
        `card name differs from '${clash}' only in case (expected names that differ in more than case: they become log file names)`,
      );
    }
    folded.set(name.toLowerCase(), name);
    const read = readCard(ctx, name, pair);
    cards.set(name, read.card);
    sites.set(name, read.sites);
  }
  return { cards, sites };
}

function readCard(
  ctx: Context,
  name: string,
  pair: Pair<unknown, unknown>,
): { card: ModelCard; sites: CardSites } {
  const at: Where = { card: name, node: pair.key };
  const body = deref(ctx, at, pair.value);
  if (!isMap(body)) {
    fail(
      ctx,
      { card: name, node: body ?? pair.key },
      `expected a mapping with at least 'verb' and 'hub' or 'local', got ${
        describe(body)
      }`,
    );
  }

  const fields = new Map<CardField, { key: unknown; value: unknown }>();
  for (const item of body.items) {
    const key = keyText(ctx, at, item.key);
    if (!(CARD_FIELDS as readonly string[]).includes(key)) {
      fail(
        ctx,
        { card: name, field: key, node: item.key },
        `unknown field (expected one of ${CARD_FIELDS.join(", ")}${
          hint(key, CARD_FIELDS)
        })`,
      );
    }
    const where: Where = {
      card: name,
      field: key,
      node: item.value ?? item.key,
    };
    fields.set(key as CardField, {
      key: item.key,
      value: deref(ctx, where, item.value),
    });
  }
  function given<T>(
    field: CardField,
    read: (value: FieldValue) => T,
  ): T | undefined {
    const entry = fields.get(field);
    if (entry === undefined) return undefined;
    const where = { card: name, field, node: entry.value ?? entry.key };
    return read({ value: entry.value, where });
  }

  const verb = given("verb", (f) => oneOf(ctx, f, VERBS)) ?? fail(
    ctx,
    { card: name, field: "verb", node: pair.key },
    `missing (expected one of ${VERBS.join(", ")})`,
  );
  const modality = given("modality", (f) => readModality(ctx, f)) ??
    [Modality.TEXT];
  const hub = given(
    "hub",
    (f) => text(ctx, f, "a hub identifier such as org/model"),
  );
  const local = given("local", (f) => readLocal(ctx, f));
  if (hub === undefined && local === undefined) {
    fail(
      ctx,
      { card: name, field: "hub", node: pair.key },
      "neither 'hub' nor 'local' is given (expected at least one: where the weights come from)",
    );
  }
  const engine = given("engine", (f) => oneOf(ctx, f, ENGINE_NAMES)) ??
    DEFAULT_ENGINE;
  const command = fields.get("command");
  if (engine === COMMAND_ENGINE && command === undefined) {
    fail(
      ctx,
      {
        card: name,
        field: "command",
        node: fields.get("engine")?.value ?? pair.key,
      },
      'missing (expected an argv list such as [my-engine, --model, "{model}", --port, "{port}"] when engine is command)',
    );
  }
  for (const only of ["command", "metrics"] as const) {
    const entry = fields.get(only);
    if (engine !== COMMAND_ENGINE && entry !== undefined) {
      fail(
        ctx,
        { card: name, field: only, node: entry.key },
        `not allowed with engine ${engine} (expected only with engine: command${
          only === "metrics" ? "; the other engines name their own" : ""
        })`,
      );
    }
  }
  const args = given("args", (f) => readArgs(ctx, f)) ??
    { argv: [], sites: [] };
  const env = given("env", (f) => readEnv(ctx, f)) ?? { env: {}, sites: {} };
  const card: {
    -readonly [K in keyof ModelCard]: ModelCard[K];
  } = {
    name,
    verb,
    modality: Object.freeze(modality),
    local: local ?? name,
    engine,
    args: Object.freeze(args.argv),
    env: Object.freeze(env.env),
  };
  const sites: { -readonly [K in keyof CardSites]: CardSites[K] } = {
    command: [],
    args: Object.freeze(args.sites),
    env: Object.freeze(env.sites),
  };
  if (hub !== undefined) card.hub = hub;
  given("executable", (f) => {
    card.executable = text(ctx, f, "a program name or path");
    sites.executable = siteOf(ctx, f.where, card.executable);
  });
  given("command", (f) => {
    const read = readCommand(ctx, f);
    card.command = Object.freeze(read.argv);
    sites.command = Object.freeze(read.sites);
  });
  given("description", (f) => {
    card.description = text(ctx, f, "a text", true);
  });
  given("restart", (f) => {
    card.restart = oneOf(ctx, f, RESTART_POLICIES);
  });
  given("failed_retry", (f) => {
    card.failedRetry = seconds(
      ctx,
      f,
      "seconds ≥ 0 before a failed engine is tried again (0: never)",
    );
  });
  given("gpus", (f) => {
    card.gpus = readGpus(ctx, f);
  });
  given("drain_timeout", (f) => {
    card.drainTimeout = seconds(
      ctx,
      f,
      "a number of seconds, 0 or more (0: no drain)",
    );
  });
  given("metrics", (f) => {
    card.metrics = readMetrics(ctx, f);
  });
  given("stall_timeout", (f) => {
    card.stallTimeout = seconds(
      ctx,
      f,
      "seconds (0 or more; 0 turns stall detection off)",
    );
  });
  given("canary", (f) => {
    const value = scalarValue(f.value);
    if (typeof value !== "boolean") {
      fail(ctx, f.where, `expected true or false, got ${describe(f.value)}`);
    }
    card.canary = value;
  });
  return { card: Object.freeze(card), sites: Object.freeze(sites) };
}
