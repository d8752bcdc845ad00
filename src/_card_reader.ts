/**
 * The YAML card reader: validates a catalogue's text into frozen model cards,
 * and notes where each expandable value is written so a `${NAME}` that is not
 * set can be reported with its file, card, field and line.
 *
 * @module
 */
import {
  type Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  type Node,
  type Pair,
  parseDocument,
  type YAMLError,
  type YAMLMap,
} from "yaml";
import { ENGINE_NAMES } from "./_engine_names.ts";
import {
  CatalogueError,
  type CatalogueErrorOptions,
  hint,
} from "./_catalogue_error.ts";
import {
  Modality,
  type ModelCard,
  RESTART_POLICIES,
  Verb,
} from "./_model_card.ts";
import {
  type CardSites,
  referenceProblem,
  type ValueSite,
} from "./_card_expand.ts";

// ---------------------------------------------------------------------------
// Parsing and validation.

const VERBS: readonly Verb[] = Object.values(Verb);
const MODALITIES: readonly Modality[] = Object.values(Modality);
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
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const DEFAULT_ENGINE = "vllm";
const COMMAND_ENGINE = "command";

/** What validation needs to read nodes and report where they are. */
interface Context {
  readonly file: string;
  readonly doc: Document.Parsed;
  readonly lines: LineCounter;
}

/** A field's value node (aliases followed) and where to report problems with it. */
interface FieldValue {
  value: unknown;
  where: Where;
}

/** Where a problem is: the card, the field, and the node whose line is reported. */
interface Where {
  card?: string | undefined;
  field?: string | undefined;
  node?: unknown;
}

/** Throws the CatalogueError for a problem at `where`. */
function fail(ctx: Context, where: Where, detail: string): never {
  const line = lineOf(ctx, where.node);
  const options: CatalogueErrorOptions = {};
  if (where.card !== undefined) options.card = where.card;
  if (where.field !== undefined) options.field = where.field;
  if (line !== undefined) options.line = line;
  throw new CatalogueError(ctx.file, detail, options);
}

function lineOf(ctx: Context, node: unknown): number | undefined {
  const range = (node as Node | null | undefined)?.range;
  return range ? ctx.lines.linePos(range[0]).line : undefined;
}

/** Follows an alias to the node it names; every other node is returned as is. */
function deref(ctx: Context, where: Where, node: unknown): unknown {
  if (!isAlias(node)) return node;
  const target = node.resolve(ctx.doc);
  if (target === undefined) {
    fail(
      ctx,
      where,
      `unknown anchor '${node.source}' (expected an anchor defined earlier with &${node.source})`,
    );
  }
  return target;
}

/** A short description of a node for "got ..." in messages. */
function describe(node: unknown): string {
  if (node === null || node === undefined) return "nothing";
  if (isMap(node)) return "a mapping";
  if (isSeq(node)) return "a list";
  if (isScalar(node)) {
    const value = node.value;
    if (value === null || value === undefined) return "null";
    if (typeof value === "string") return `'${clip(value)}'`;
    return String(value);
  }
  return "an unsupported value";
}

function clip(text: string): string {
  const escaped = JSON.stringify(text).slice(1, -1);
  return escaped.length > 60 ? `${escaped.slice(0, 57)}...` : escaped;
}

function scalarValue(node: unknown): unknown {
  return isScalar(node) ? node.value : undefined;
}

/** A mapping key as text; keys must be strings. */
function keyText(ctx: Context, where: Where, key: unknown): string {
  const value = scalarValue(deref(ctx, where, key));
  if (typeof value !== "string") {
    fail(
      ctx,
      { ...where, node: key },
      `expected a string key, got ${describe(deref(ctx, where, key))}`,
    );
  }
  return value;
}

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
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const ctx: Context = { file, doc, lines };
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) yamlProblem(ctx, text, problem);

  const top = deref(ctx, {}, doc.contents);
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

/** Reports a YAML syntax error or warning, naming the card and field it falls in when it can. */
function yamlProblem(ctx: Context, text: string, problem: YAMLError): never {
  // An error found at the very end points at the last line that has text.
  const offset = Math.max(0, Math.min(problem.pos[0], text.trimEnd().length));
  const line = ctx.lines.linePos(offset).line;
  const duplicate = problem.code === "DUPLICATE_KEY";
  const where = locate(ctx, offset, duplicate);
  let detail = `invalid YAML: ${problem.message}`;
  if (duplicate) {
    detail = `duplicate key '${
      where.key ?? text.slice(offset, problem.pos[1])
    }' (expected each key once in a mapping)`;
  } else if (problem.code === "MULTIPLE_DOCS") {
    detail =
      "invalid YAML: a second document starts here (expected one document)";
  }
  const options: CatalogueErrorOptions = { line, cause: problem };
  if (where.card !== undefined) options.card = where.card;
  if (where.field !== undefined) options.field = where.field;
  throw new CatalogueError(ctx.file, detail, options);
}

/** What {@linkcode locate} finds at an offset. */
interface Location {
  card?: string;
  field?: string;
  /** The key that starts exactly at the offset, if one does. */
  key?: string;
}

/**
 * Whether a problem at `offset` lies in a pair: in its key or value text. A
 * problem found where a key starts usually belongs to what came before, so the
 * pair counts only when the problem is about the key itself (`atKey`).
 */
function spans(
  pair: Pair<unknown, unknown>,
  offset: number,
  atKey: boolean,
): boolean {
  const start = (pair.key as Node | null)?.range?.[0];
  const end = (pair.value as Node | null)?.range?.[2] ??
    (pair.key as Node | null)?.range?.[2];
  if (start === undefined || end === undefined) return false;
  return (atKey ? start <= offset : start < offset) && offset < end;
}

/** A pair's key as text (strings and numbers), noting it when it starts at the offset. */
function pairName(
  pair: Pair<unknown, unknown>,
  offset: number,
  found: Location,
): string | undefined {
  const value = scalarValue(pair.key);
  if (typeof value !== "string" && typeof value !== "number") return undefined;
  if ((pair.key as Node | null)?.range?.[0] === offset) {
    found.key = String(value);
  }
  return String(value);
}

/** Finds the card and field a YAML problem at an offset lies in. */
function locate(ctx: Context, offset: number, atKey: boolean): Location {
  const found: Location = {};
  const top = ctx.doc.contents;
  if (!isMap(top)) return found;
  const pair = top.items.find((p) => spans(p, offset, atKey));
  if (pair === undefined) return found;
  const field = pairName(pair, offset, found);
  if (field !== "models" || !isMap(pair.value)) {
    if (field !== undefined) found.field = field;
    return found;
  }
  const cardPair = (pair.value as YAMLMap).items.find((p) =>
    spans(p, offset, atKey)
  );
  if (cardPair === undefined) {
    found.field = "models";
    return found;
  }
  const card = pairName(cardPair, offset, found);
  if (card !== undefined) found.card = card;
  if (!isMap(cardPair.value)) return found;
  const fieldPair = (cardPair.value as YAMLMap).items.find((p) =>
    spans(p, offset, atKey)
  );
  const cardField = fieldPair && pairName(fieldPair, offset, found);
  if (cardField !== undefined) found.field = cardField;
  return found;
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
  /** The value node of a field and the node whose line reports it. */
  function get(field: CardField): FieldValue | undefined {
    const entry = fields.get(field);
    if (entry === undefined) return undefined;
    return {
      value: entry.value,
      where: { card: name, field, node: entry.value ?? entry.key },
    };
  }

  const verbField = get("verb");
  if (verbField === undefined) {
    fail(
      ctx,
      { card: name, field: "verb", node: pair.key },
      `missing (expected one of ${VERBS.join(", ")})`,
    );
  }
  const verb = oneOf(ctx, verbField, VERBS);
  const modalityField = get("modality");
  const modality = modalityField === undefined
    ? [Modality.TEXT]
    : readModality(ctx, modalityField);
  const hubField = get("hub");
  const hub = hubField === undefined
    ? undefined
    : text(ctx, hubField, "a hub identifier such as org/model");
  const localField = get("local");
  const local = localField === undefined ? name : readLocal(ctx, localField);
  if (hubField === undefined && localField === undefined) {
    fail(
      ctx,
      { card: name, field: "hub", node: pair.key },
      "neither 'hub' nor 'local' is given (expected at least one: where the weights come from)",
    );
  }
  const engineField = get("engine");
  const engine = engineField === undefined
    ? DEFAULT_ENGINE
    : oneOf(ctx, engineField, ENGINE_NAMES);
  const executableField = get("executable");
  const commandField = get("command");
  if (engine === COMMAND_ENGINE && commandField === undefined) {
    fail(
      ctx,
      {
        card: name,
        field: "command",
        node: engineField?.where.node ?? pair.key,
      },
      'missing (expected an argv list such as [my-engine, --model, "{model}", --port, "{port}"] when engine is command)',
    );
  }
  if (engine !== COMMAND_ENGINE && commandField !== undefined) {
    fail(
      ctx,
      { ...commandField.where, node: fields.get("command")?.key },
      `not allowed with engine ${engine} (expected only with engine: command)`,
    );
  }
  const argsField = get("args");
  const envField = get("env");
  const descriptionField = get("description");

  const args = argsField === undefined
    ? { argv: [], sites: [] }
    : readArgs(ctx, argsField);
  const env = envField === undefined
    ? { env: {}, sites: {} }
    : readEnv(ctx, envField);
  const card: {
    -readonly [K in keyof ModelCard]: ModelCard[K];
  } = {
    name,
    verb,
    modality: Object.freeze(modality),
    local,
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
  if (executableField !== undefined) {
    card.executable = text(ctx, executableField, "a program name or path");
    sites.executable = siteOf(ctx, executableField.where, card.executable);
  }
  if (commandField !== undefined) {
    const command = readCommand(ctx, commandField);
    card.command = Object.freeze(command.argv);
    sites.command = Object.freeze(command.sites);
  }
  if (descriptionField !== undefined) {
    card.description = text(ctx, descriptionField, "a text", true);
  }
  const restartField = get("restart");
  if (restartField !== undefined) {
    card.restart = oneOf(ctx, restartField, RESTART_POLICIES);
  }
  const gpusField = get("gpus");
  if (gpusField !== undefined) card.gpus = readGpus(ctx, gpusField);
  return { card: Object.freeze(card), sites: Object.freeze(sites) };
}

/**
 * Where an expandable value is written. Its `${...}` references are checked
 * here, at load time, so a typo fails even in a card nobody requests.
 */
function siteOf(ctx: Context, where: Where, value: string): ValueSite {
  const problem = referenceProblem(value);
  if (problem !== undefined) fail(ctx, where, problem);
  return {
    field: where.field ?? "",
    line: lineOf(ctx, where.node) ?? 0,
  };
}

/** A whole number of devices (0 for none), or a share of one device (0 < x < 1). */
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

/** A non-empty string (or any string when `allowEmpty`). */
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

/** A scalar argv item: strings as they are, numbers in decimal, booleans as `true`/`false`. */
function argText(
  ctx: Context,
  where: Where,
  node: unknown,
  expected: string,
): string {
  const value = scalarValue(node);
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return String(value);
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  fail(ctx, where, `expected ${expected}, got ${describe(node)}`);
}

/** Argv, and per item the site of a value (`undefined` for a flag name). */
interface ReadArgv {
  argv: string[];
  sites: (ValueSite | undefined)[];
}

function readArgs(
  ctx: Context,
  field: FieldValue,
): ReadArgv {
  const node = field.value;
  const base = field.where.field ?? "args";
  const argv: string[] = [];
  const sites: (ValueSite | undefined)[] = [];
  /** Appends a flag name, never expanded. */
  function flagItem(flag: string): void {
    argv.push(flag);
    sites.push(undefined);
  }
  /** Appends a value, expanded at start-up. */
  function valueItem(where: Where, value: string): void {
    sites.push(siteOf(ctx, where, value));
    argv.push(value);
  }
  if (isSeq(node)) {
    // A list is literal argv.
    node.items.forEach((item, index) => {
      const where = { ...field.where, field: `${base}[${index}]`, node: item };
      valueItem(
        where,
        argText(
          ctx,
          where,
          deref(ctx, where, item),
          "a string, number or boolean",
        ),
      );
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
      valueItem(where, JSON.stringify(value.toJS(ctx.doc)));
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
            ? JSON.stringify(resolved.toJS(ctx.doc))
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
    env[key] = argText(
      ctx,
      where,
      deref(ctx, where, pair.value),
      "a string, number or boolean",
    );
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
  const argv = node.items.map((item, index) => {
    const where = wheres[index]!;
    return argText(
      ctx,
      where,
      deref(ctx, where, item),
      "a string, number or boolean",
    );
  });
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
