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
import { isMap, isSeq, type Pair } from "yaml";
import { ENGINE_NAMES } from "./engine_names.ts";
import { hint } from "./catalogue_error.ts";
import {
  type CardMetrics,
  Modality,
  type ModelCard,
  RESTART_POLICIES,
  Verb,
} from "./model_card.ts";
import {
  type CardSites,
  referenceProblem,
  type ValueSite,
} from "./card_expand.ts";
import {
  clip,
  type Context,
  deref,
  describe,
  fail,
  type FieldValue,
  keyText,
  lineOf,
  plainValue,
  readYamlDocument,
  scalarValue,
  type Where,
} from "./yaml_nodes.ts";

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
    const value = scalarValue(f.value);
    if (typeof value !== "number" || !(value >= 0) || !Number.isFinite(value)) {
      fail(
        ctx,
        f.where,
        `expected seconds ≥ 0 before a failed engine is tried again (0: never), got ${
          describe(f.value)
        }`,
      );
    }
    card.failedRetry = value;
  });
  given("gpus", (f) => {
    card.gpus = readGpus(ctx, f);
  });
  given("drain_timeout", (f) => {
    const value = scalarValue(f.value);
    if (typeof value !== "number" || !(value >= 0) || value === Infinity) {
      fail(
        ctx,
        f.where,
        `expected a number of seconds, 0 or more (0: no drain), got ${
          describe(f.value)
        }`,
      );
    }
    card.drainTimeout = value;
  });
  given("metrics", (f) => {
    card.metrics = readMetrics(ctx, f);
  });
  given("stall_timeout", (f) => {
    const value = scalarValue(f.value);
    if (typeof value !== "number" || !(value >= 0) || value === Infinity) {
      fail(
        ctx,
        f.where,
        `expected seconds (0 or more; 0 turns stall detection off), got ${
          describe(f.value)
        }`,
      );
    }
    card.stallTimeout = value;
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

const MODALITIES: readonly Modality[] = Object.values(Modality);
const SAMPLE_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const METRICS_KEYS = {
  running: "running",
  waiting: "waiting",
  prompt_tokens: "promptTokens",
  generated_tokens: "generatedTokens",
} as const;

function readMetrics(ctx: Context, field: FieldValue): CardMetrics {
  const node = field.value;
  const expected =
    "a mapping of path (default /metrics), running, waiting, prompt_tokens and generated_tokens to Prometheus sample names";
  if (!isMap(node)) {
    fail(ctx, field.where, `expected ${expected}, got ${describe(node)}`);
  }
  const read: Record<string, string> = { path: "/metrics" };
  for (const pair of node.items) {
    const key = keyText(ctx, field.where, pair.key);
    const where = {
      ...field.where,
      field: `metrics.${key}`,
      node: pair.value ?? pair.key,
    };
    if (key !== "path" && !(key in METRICS_KEYS)) {
      fail(
        ctx,
        { ...where, node: pair.key },
        `unknown key (expected ${expected})`,
      );
    }
    const value = scalarValue(pair.value);
    const ok = typeof value === "string" &&
      (key === "path" ? /^\/\S*$/.test(value) : SAMPLE_NAME.test(value));
    if (!ok) {
      fail(
        ctx,
        where,
        `expected ${
          key === "path"
            ? "a path such as /metrics"
            : "a Prometheus sample name such as my_engine:requests_running"
        }, got ${describe(pair.value)}`,
      );
    }
    read[
      key === "path" ? key : METRICS_KEYS[key as keyof typeof METRICS_KEYS]
    ] = value as string;
  }
  for (const [key, name] of Object.entries(METRICS_KEYS)) {
    if (read[name] === undefined) {
      fail(ctx, field.where, `${key} is missing (expected ${expected})`);
    }
  }
  return Object.freeze(read) as unknown as CardMetrics;
}
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** References are checked at load time: a typo fails even in a card nobody requests. */
function siteOf(ctx: Context, where: Where, value: string): ValueSite {
  const problem = referenceProblem(value);
  if (problem !== undefined) fail(ctx, where, problem);
  return {
    field: where.field ?? "",
    line: lineOf(ctx, where.node) ?? 0,
  };
}

function readGpus(ctx: Context, field: FieldValue): number {
  const value = scalarValue(field.value);
  const ok = typeof value === "number" && Number.isFinite(value) &&
    (Number.isInteger(value) ? value >= 0 : value > 0 && value < 1);
  if (!ok) {
    fail(
      ctx,
      field.where,
      `expected 0 (no GPU), a whole number of GPUs (1, 2, ...) or a share of one GPU between 0 and 1 (such as 0.3), got ${
        describe(field.value)
      }`,
    );
  }
  return value as number;
}

function text(
  ctx: Context,
  field: FieldValue,
  expected: string,
  allowEmpty = false,
): string {
  const value = scalarValue(field.value);
  if (typeof value !== "string" || (!allowEmpty && value.trim() === "")) {
    fail(
      ctx,
      field.where,
      `expected ${expected}, got ${describe(field.value)}`,
    );
  }
  return value;
}

function oneOf<T extends string>(
  ctx: Context,
  field: FieldValue,
  allowed: readonly T[],
): T {
  const value = scalarValue(field.value);
  if (
    typeof value !== "string" || !(allowed as readonly string[]).includes(value)
  ) {
    const guess = typeof value === "string" ? hint(value, allowed) : "";
    fail(
      ctx,
      field.where,
      `expected one of ${allowed.join(", ")}, got ${
        describe(field.value)
      }${guess}`,
    );
  }
  return value as T;
}

function readModality(
  ctx: Context,
  field: FieldValue,
): Modality[] {
  if (!isSeq(field.value)) return [oneOf(ctx, field, MODALITIES)];
  if (field.value.items.length === 0) {
    fail(
      ctx,
      field.where,
      `expected one or more of ${MODALITIES.join(", ")}, got an empty list`,
    );
  }
  const out: Modality[] = [];
  field.value.items.forEach((item, index) => {
    const where = {
      ...field.where,
      field: `${field.where.field}[${index}]`,
      node: item,
    };
    const modality = oneOf(
      ctx,
      { value: deref(ctx, where, item), where },
      MODALITIES,
    );
    if (!out.includes(modality)) out.push(modality);
  });
  return out;
}

function readLocal(
  ctx: Context,
  field: FieldValue,
): string {
  const local = text(ctx, field, "a path relative to <directory>/models");
  if (/^(?:[\\/]|[A-Za-z]:)/.test(local)) {
    fail(
      ctx,
      field.where,
      `expected a path relative to <directory>/models, got the absolute path '${
        clip(local)
      }'`,
    );
  }
  if (local.split(/[\\/]/).includes("..")) {
    fail(
      ctx,
      field.where,
      `expected a path inside <directory>/models, got '${
        clip(local)
      }' (no '..' segments)`,
    );
  }
  return local;
}

/** Numbers in decimal, booleans as `true`/`false`. */
function argText(
  ctx: Context,
  where: Where,
  item: unknown,
  expected = "a string, number or boolean",
): string {
  const node = deref(ctx, where, item);
  const value = scalarValue(node);
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return String(value);
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  fail(ctx, where, `expected ${expected}, got ${describe(node)}`);
}

function readArgs(
  ctx: Context,
  field: FieldValue,
): { argv: string[]; sites: (ValueSite | undefined)[] } {
  const node = field.value;
  const base = field.where.field ?? "args";
  const argv: string[] = [];
  const sites: (ValueSite | undefined)[] = [];
  function flagItem(flag: string): void {
    argv.push(flag);
    sites.push(undefined);
  }
  function valueItem(where: Where, value: string): void {
    sites.push(siteOf(ctx, where, value));
    argv.push(value);
  }
  if (isSeq(node)) {
    // A list is literal argv.
    node.items.forEach((item, index) => {
      const where = { ...field.where, field: `${base}[${index}]`, node: item };
      valueItem(where, argText(ctx, where, item));
    });
    return { argv, sites };
  }
  if (!isMap(node)) {
    fail(
      ctx,
      field.where,
      `expected a mapping of flags to values or a list of arguments, got ${
        describe(node)
      }`,
    );
  }
  for (const pair of node.items) {
    const key = keyText(ctx, field.where, pair.key);
    const where = {
      ...field.where,
      field: `${base}.${key}`,
      node: pair.value ?? pair.key,
    };
    if (key === "" || key === "-" || key === "--") {
      fail(
        ctx,
        { ...where, node: pair.key },
        `expected a flag name, got '${key}'`,
      );
    }
    const flag = key.startsWith("-") ? key : `--${key}`;
    const value = deref(ctx, where, pair.value);
    const scalar = scalarValue(value);
    if (scalar === true) flagItem(flag);
    else if (scalar === false) continue;
    else if (isMap(value)) {
      flagItem(flag);
      valueItem(where, JSON.stringify(plainValue(ctx, where, value)));
    } else if (isSeq(value)) {
      value.items.forEach((item, index) => {
        const itemWhere = {
          ...where,
          field: `${where.field}[${index}]`,
          node: item,
        };
        const resolved = deref(ctx, itemWhere, item);
        flagItem(flag);
        valueItem(
          itemWhere,
          isMap(resolved) || isSeq(resolved)
            ? JSON.stringify(plainValue(ctx, itemWhere, resolved))
            : argText(
              ctx,
              itemWhere,
              resolved,
              "a string, number, boolean or mapping",
            ),
        );
      });
    } else {
      flagItem(flag);
      valueItem(
        where,
        argText(
          ctx,
          where,
          value,
          "true, false, a string, number, list or mapping",
        ),
      );
    }
  }
  return { argv, sites };
}

function readEnv(
  ctx: Context,
  field: FieldValue,
): { env: Record<string, string>; sites: Record<string, ValueSite> } {
  const node = field.value;
  if (!isMap(node)) {
    fail(
      ctx,
      field.where,
      `expected a mapping of variable names to values, got ${describe(node)}`,
    );
  }
  const env: Record<string, string> = {};
  const sites: Record<string, ValueSite> = {};
  for (const pair of node.items) {
    const key = keyText(ctx, field.where, pair.key);
    const where = {
      ...field.where,
      field: `env.${key}`,
      node: pair.value ?? pair.key,
    };
    if (!ENV_NAME.test(key)) {
      fail(
        ctx,
        { ...where, node: pair.key },
        `expected a variable name ([A-Za-z_][A-Za-z0-9_]*), got '${clip(key)}'`,
      );
    }
    env[key] = argText(ctx, where, pair.value);
    sites[key] = siteOf(ctx, where, env[key]);
  }
  return { env, sites };
}

function readCommand(
  ctx: Context,
  field: FieldValue,
): { argv: string[]; sites: ValueSite[] } {
  const node = field.value;
  if (!isSeq(node) || node.items.length === 0) {
    fail(
      ctx,
      field.where,
      `expected a non-empty argv list such as [my-engine, --port, "{port}"], got ${
        isSeq(node) ? "an empty list" : describe(node)
      }`,
    );
  }
  const wheres = node.items.map((item, index) => ({
    ...field.where,
    field: `command[${index}]`,
    node: item,
  }));
  const argv = node.items.map((item, index) =>
    argText(ctx, wheres[index]!, item)
  );
  if (argv[0]?.trim() === "") {
    fail(
      ctx,
      { ...field.where, field: "command[0]" },
      "expected a program name, got ''",
    );
  }
  return {
    argv,
    sites: argv.map((item, index) => siteOf(ctx, wheres[index]!, item)),
  };
}
