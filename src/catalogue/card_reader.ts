/**
 * The YAML card reader: validates a catalogue's text into frozen model cards,
 * and notes where each expandable value is written so a `${NAME}` that is not
 * set can be reported with its file, card, field and line.
 *
 * Folder `catalogue/`: the catalogue's YAML, its cards and their fields,
 * `${NAME}` expansion and the catalogue's errors; public through
 * `catalogue.ts`. It knows nothing of processes, HTTP or GPUs.
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
  type Where,
} from "./yaml_nodes.ts";

import {
  oneOf,
  readArgs,
  readCommand,
  readEnv,
  readGpus,
  readLocal,
  readModality,
  siteOf,
  text,
} from "./card_fields.ts";

// ---------------------------------------------------------------------------
// Parsing and validation.

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
  "gpus",
] as const;
type CardField = typeof CARD_FIELDS[number];
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
/**
 * The longest card name. Names become file names, the longest
 * `data/<name>.engine.json.<pid>.tmp` (24 bytes more; `logs/<name>.log.<n>`
 * fewer): 128 leaves room under the 255-byte limit of Linux file systems.
 */
const MAX_NAME_LENGTH = 128;
const DEFAULT_ENGINE = "vllm";
const COMMAND_ENGINE = "command";

/** A validated catalogue: the cards by name, and where each card's expandable values are written. */
export interface ReadCatalogue {
  /** The cards, in file order. */
  cards: Map<string, ModelCard>;
  /** Per card, the file lines of its `executable`, `command`, `args` and `env` values. */
  sites: Map<string, CardSites>;
}

/**
 * Reads and validates a catalogue's YAML text.
 *
 * @param text The YAML text.
 * @param file The name used in error messages.
 * @returns The frozen cards and their value sites.
 * @throws {CatalogueError} At the first problem, naming file, card, field and line.
 */
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
  /** A field's value as `read` makes it; undefined when the card does not give the field. */
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
  if (engine !== COMMAND_ENGINE && command !== undefined) {
    fail(
      ctx,
      { card: name, field: "command", node: command.key },
      `not allowed with engine ${engine} (expected only with engine: command)`,
    );
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
  given("gpus", (f) => {
    card.gpus = readGpus(ctx, f);
  });
  return { card: Object.freeze(card), sites: Object.freeze(sites) };
}
