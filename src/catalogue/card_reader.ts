/**
 * The card reader: a catalogue's YAML validated into frozen model cards, with
 * the line of each expandable value so that an unset `${NAME}` is reported
 * with its file, card, field and line.
 *
 * Folder `catalogue/`: the catalogue's YAML, its cards, `${NAME}` expansion
 * and its errors; public through `catalogue.ts`. It knows nothing of
 * processes, HTTP or GPUs.
 *
 * @module
 */
import { isMap } from "yaml";
import { hint } from "./catalogue_error.ts";
import {
  ENGINE_NAMES,
  Modality,
  type ModelCard,
  RESTART_POLICIES,
  Verb,
} from "./model_card.ts";
import type { CardSites } from "./card_expand.ts";
import { Context, describe, Field } from "./yaml_nodes.ts";
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
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
// Names become file names, the longest the temporary
// `data/.<name>.engine.json.<16 hex>.tmp` (34 bytes
// more): 128 leaves room under Linux's 255-byte limit.
const MAX_NAME_LENGTH = 128;
const COMMAND = "command";

type Card = { -readonly [K in keyof ModelCard]: ModelCard[K] };
type Sites = { -readonly [K in keyof CardSites]: CardSites[K] };

/** Each card field and its reader, in the order the reader checks them. */
const FIELDS: Record<string, (f: Field, card: Card, sites: Sites) => void> = {
  verb(f, card) {
    card.verb = oneOf(f, VERBS);
  },
  modality(f, card) {
    card.modality = Object.freeze(readModality(f));
  },
  hub(f, card) {
    card.hub = text(f, "a hub identifier such as org/model");
  },
  local(f, card) {
    card.local = readLocal(f);
  },
  engine(f, card) {
    card.engine = oneOf(f, ENGINE_NAMES);
  },
  args(f, card, sites) {
    const read = readArgs(f);
    card.args = Object.freeze(read.argv);
    sites.args = Object.freeze(read.sites);
  },
  env(f, card, sites) {
    const read = readEnv(f);
    card.env = Object.freeze(read.env);
    sites.env = Object.freeze(read.sites);
  },
  executable(f, card, sites) {
    card.executable = text(f, "a program name or path");
    sites.executable = siteOf(f, card.executable);
  },
  command(f, card, sites) {
    const read = readCommand(f);
    card.command = Object.freeze(read.argv);
    sites.command = Object.freeze(read.sites);
  },
  description(f, card) {
    card.description = text(f, "a text", true);
  },
  restart(f, card) {
    card.restart = oneOf(f, RESTART_POLICIES);
  },
  failed_retry(f, card) {
    card.failedRetry = seconds(
      f,
      "seconds ≥ 0 before a failed engine is tried again (0: never)",
    );
  },
  gpus(f, card) {
    card.gpus = readGpus(f);
  },
  drain_timeout(f, card) {
    card.drainTimeout = seconds(
      f,
      "a number of seconds, 0 or more (0: no drain)",
    );
  },
  metrics(f, card) {
    card.metrics = readMetrics(f);
  },
  stall_timeout(f, card) {
    card.stallTimeout = seconds(
      f,
      "seconds (0 or more; 0 turns stall detection off)",
    );
  },
  canary(f, card) {
    if (typeof f.scalar !== "boolean") f.expected("true or false");
    card.canary = f.scalar as boolean;
  },
};
const FIELD_NAMES = Object.keys(FIELDS);
const LISTED =
  "verb, modality, hub, local, engine, executable, command, args, env, description, restart, failed_retry, drain_timeout, gpus, metrics, stall_timeout, canary";

/** The cards in file order, and where each card's expandable values are written. */
export interface ReadCatalogue {
  cards: Map<string, ModelCard>;
  sites: Map<string, CardSites>;
}

/** A {@linkcode CatalogueError} at the first problem. */
export function readCatalogue(text: string, file: string): ReadCatalogue {
  const ctx: Context = new Context(text, file);
  const top = new Field(ctx, ctx.contents, {});
  if (!isMap(top.value)) {
    top.fail(
      `expected a mapping with the one key 'models', got ${
        describe(top.value)
      }`,
      top.value,
    );
  }
  let models: Field | undefined;
  for (const [key, entry] of top.entries()) {
    if (key !== "models") {
      entry.fail(
        `unknown top-level field (expected only 'models'${
          hint(key, ["models"])
        })`,
        entry.key,
      );
    }
    entry.value;
    models = entry;
  }
  if (models === undefined) {
    ctx.fail(
      { field: "models", node: top.value },
      "missing (expected a mapping of catalogue names to model cards)",
    );
  }
  const list = models.value;
  if (!isMap(list) || list.items.length === 0) {
    models.fail(
      `expected a non-empty mapping of catalogue names to model cards, got ${
        isMap(list) ? "an empty mapping" : describe(list)
      }`,
      list ?? models.key,
    );
  }

  const cards = new Map<string, ModelCard>();
  const sites = new Map<string, CardSites>();
  const folded = new Map<string, string>();
  for (const [name, entry] of models.entries()) {
    const at = { card: name, node: entry.key };
    if (name.length > MAX_NAME_LENGTH) {
      ctx.fail(
        at,
        `card name of ${name.length} characters (expected at most ${MAX_NAME_LENGTH}: the name becomes file names such as logs/<name>.log and data/<name>.engine.json, which must fit in 255 bytes)`,
      );
    }
    if (!NAME.test(name)) {
      ctx.fail(
        at,
        "bad card name (expected letters, digits, '.', '_' or '-', starting with a letter or digit: the name becomes a log file name)",
      );
    }
    const clash = folded.get(name.toLowerCase());
    if (clash !== undefined) {
      ctx.fail(
        at,
        `card name differs from '${clash}' only in case (expected names that differ in more than case: they become log file names)`,
      );
    }
    folded.set(name.toLowerCase(), name);
    const read = readCard(new Field(ctx, entry.node, at));
    cards.set(name, read.card);
    sites.set(name, read.sites);
  }
  return { cards, sites };
}

function readCard(body: Field): { card: ModelCard; sites: CardSites } {
  const name = body.where.card!;
  if (!isMap(body.value)) {
    body.fail(
      `expected a mapping with at least 'verb' and 'hub' or 'local', got ${
        describe(body.value)
      }`,
      body.value ?? body.where.node,
    );
  }
  const given = new Map<string, Field>();
  for (const [key, field] of body.entries()) {
    if (!Object.hasOwn(FIELDS, key)) {
      field.fail(
        `unknown field (expected one of ${LISTED}${hint(key, FIELD_NAMES)})`,
        field.key,
      );
    }
    // Read now: an unknown anchor is reported in the order of the text.
    field.value;
    given.set(key, field);
  }
  // In the order of ModelCard's fields.
  const card = {
    name,
    verb: undefined,
    modality: Object.freeze([Modality.TEXT]),
    local: name,
    engine: "vllm",
    args: Object.freeze([]),
    env: Object.freeze({}),
  } as unknown as Card;
  const sites: Sites = {
    command: [],
    args: Object.freeze([]),
    env: Object.freeze({}),
  };
  for (const [key, read] of Object.entries(FIELDS)) {
    const field = given.get(key);
    if (field !== undefined) read(field, card, sites);
    AFTER[key]?.(card, given, body);
  }
  return { card: Object.freeze(card), sites: Object.freeze(sites) };
}

/** The checks across fields, each made once the field it follows is read. */
const AFTER: Record<
  string,
  (card: Card, given: Map<string, Field>, body: Field) => void
> = {
  verb(_card, given, body) {
    if (!given.has("verb")) {
      body.ctx.fail(
        { ...body.where, field: "verb" },
        `missing (expected one of ${VERBS.join(", ")})`,
      );
    }
  },
  local(card, given, body) {
    if (card.hub === undefined && !given.has("local")) {
      body.ctx.fail(
        { ...body.where, field: "hub" },
        "neither 'hub' nor 'local' is given (expected at least one: where the weights come from)",
      );
    }
  },
  engine(card, given, body) {
    if (card.engine === COMMAND && !given.has("command")) {
      body.ctx.fail(
        {
          ...body.where,
          field: "command",
          node: given.get("engine")?.value ?? body.where.node,
        },
        'missing (expected an argv list such as [my-engine, --model, "{model}", --port, "{port}"] when engine is command)',
      );
    }
    for (const only of ["command", "metrics"]) {
      const field = given.get(only);
      if (card.engine !== COMMAND && field !== undefined) {
        field.fail(
          `not allowed with engine ${card.engine} (expected only with engine: command${
            only === "metrics" ? "; the other engines name their own" : ""
          })`,
          field.key,
        );
      }
    }
  },
};
