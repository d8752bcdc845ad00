/**
 * The model catalogue: a YAML file that maps catalogue names to model cards,
 * each saying what the model does (its verb), where its weights come from, which
 * inference engine serves it and with which extra flags.
 *
 * ```yaml
 * models:
 *   llama-3:
 *     verb: chat
 *     hub: meta-llama/Meta-Llama-3-8B-Instruct
 *     args: { max-model-len: 8192, enable-prefix-caching: true }
 * ```
 *
 * Every mistake in a catalogue is reported as a {@linkcode CatalogueError} whose
 * one-line message names the file, the card, the field and the line.
 *
 * @example Load the shipped catalogue and look a model up
 * ```ts
 * import { Registry } from "@mymodel/serve/catalogue";
 *
 * const registry = await Registry.load();
 * const card = registry.resolve("CHAT:llama-3");
 * console.log(card.hub, card.args.join(" "));
 * ```
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
import { ENGINE_NAMES } from "./_engines.ts";
import { log } from "./_log.ts";

/**
 * What a model does: the kind of request it answers.
 *
 * @example
 * ```ts
 * import { Verb } from "@mymodel/serve/catalogue";
 * console.log(Verb.CHAT); // "chat"
 * ```
 */
export const Verb = {
  CHAT: "chat",
  COMPLETE: "complete",
  EMBED: "embed",
  RERANK: "rerank",
  CLASSIFY: "classify",
  TRANSCRIBE: "transcribe",
} as const;
/** One of the {@linkcode Verb} values: `chat`, `complete`, `embed`, `rerank`, `classify`, `transcribe`. */
export type Verb = typeof Verb[keyof typeof Verb];

/**
 * What kind of input a model takes.
 *
 * @example
 * ```ts
 * import { Modality } from "@mymodel/serve/catalogue";
 * console.log(Modality.IMAGE); // "image"
 * ```
 */
export const Modality = {
  TEXT: "text",
  IMAGE: "image",
  AUDIO: "audio",
  VIDEO: "video",
} as const;
/** One of the {@linkcode Modality} values: `text`, `image`, `audio`, `video`. */
export type Modality = typeof Modality[keyof typeof Modality];

/** One model of the catalogue, validated and normalized. Cards are frozen. */
export interface ModelCard {
  /** The catalogue name; safe as a file name (`^[A-Za-z0-9][A-Za-z0-9._-]*$`). */
  readonly name: string;
  /** What the model does. */
  readonly verb: Verb;
  /** The inputs the model takes, never empty. @default {["text"]} */
  readonly modality: readonly Modality[];
  /** The hub identifier (for llama.cpp: `<user>/<repo>[:quant]`), if the card names one. */
  readonly hub?: string;
  /** Where the weights live, relative to `<directory>/models`. @default {name} */
  readonly local: string;
  /** The engine kind that serves the model. @default {"vllm"} */
  readonly engine: string;
  /** An explicit engine executable, overriding the engine's default. */
  readonly executable?: string;
  /** The argv template of an `engine: command` card (placeholders like `{model}`, `{port}`). */
  readonly command?: readonly string[];
  /** Extra engine arguments, rendered to argv. */
  readonly args: readonly string[];
  /** Extra environment variables for the engine. */
  readonly env: Readonly<Record<string, string>>;
  /** Free text for people. */
  readonly description?: string;
  /**
   * When the engine is started again after it ends; unset means the launcher's
   * `--restart` default.
   */
  readonly restart?: RestartPolicy;
  /**
   * GPUs the engine needs: an integer n ≥ 1 is n whole devices, a value
   * between 0 and 1 a share of one device, `0` no GPU. Unset means the need
   * follows from the engine's own settings.
   */
  readonly gpus?: number;
}

/**
 * When a stopped engine is started again: `on-failure` after a non-zero exit,
 * a signal or a failed liveness check; `always` also after exit 0; `never`.
 *
 * @example
 * ```ts
 * import { RESTART_POLICIES } from "@mymodel/serve/catalogue";
 * console.log(RESTART_POLICIES.join(" | ")); // on-failure | always | never
 * ```
 */
export type RestartPolicy = "on-failure" | "always" | "never";

/**
 * Every {@linkcode RestartPolicy}, in the order the help text lists them.
 *
 * @example
 * ```ts
 * import { RESTART_POLICIES } from "@mymodel/serve/catalogue";
 * console.assert(RESTART_POLICIES.includes("always"));
 * ```
 */
export const RESTART_POLICIES: readonly RestartPolicy[] = [
  "on-failure",
  "always",
  "never",
];

/**
 * Thrown when a model name is not in the catalogue. The message suggests close
 * names, or lists the known ones when nothing is close.
 *
 * @example
 * ```ts
 * import { KeyError } from "@mymodel/serve/catalogue";
 *
 * const error = new KeyError("lama-3", ["llama-3", "bge-m3"]);
 * console.log(error.message);
 * // Unknown model 'lama-3': not in the catalogue (did you mean llama-3?)
 * ```
 */
export class KeyError extends Error {
  /** The name that was looked up. */
  readonly model: string;
  /** Up to three catalogue names close to {@linkcode KeyError.model}, closest first. */
  readonly suggestions: string[];

  /**
   * Builds the error and its suggestions.
   *
   * @param model The name that was looked up.
   * @param known Every name in the catalogue.
   * @param options Standard error options (`cause`).
   */
  constructor(model: string, known: Iterable<string>, options?: ErrorOptions) {
    const names = [...known].sort();
    const suggestions = closeMatches(model, names);
    super(
      `Unknown model '${model}': not in the catalogue (${
        suggestions.length > 0
          ? `did you mean ${orList(suggestions)}?`
          : `known: ${knownList(names)}`
      })`,
      options,
    );
    this.name = "KeyError";
    this.model = model;
    this.suggestions = suggestions;
  }
}

/** Where in a catalogue a {@linkcode CatalogueError} happened, and what caused it. */
export interface CatalogueErrorOptions {
  /** The catalogue name of the card at fault. */
  card?: string;
  /** The field at fault (`verb`, `args.max-model-len`, `command[0]`, ...). */
  field?: string;
  /** The 1-based line at fault. */
  line?: number;
  /** The underlying error, kept as `cause`. */
  cause?: unknown;
}

/**
 * Thrown when a catalogue cannot be read or is not valid. The message is one line:
 * `Cannot load catalogue <file>: card '<card>', field '<field>' (line <n>): <what was expected>`.
 *
 * @example
 * ```ts
 * import { CatalogueError, Registry } from "@mymodel/serve/catalogue";
 *
 * try {
 *   Registry.parse("models:\n  x:\n    verb: talk\n    hub: a/b\n", "x.yaml");
 * } catch (error) {
 *   if (error instanceof CatalogueError) console.log(error.card, error.field, error.line); // x verb 3
 * }
 * ```
 */
export class CatalogueError extends Error {
  /** The catalogue file (or URL, or `<inline>`). */
  readonly file: string;
  /** The catalogue name of the card at fault, if one is. */
  readonly card?: string;
  /** The field at fault, if one is. */
  readonly field?: string;
  /** The 1-based line at fault, if known. */
  readonly line?: number;

  /**
   * Builds the one-line message from its parts.
   *
   * @param file The catalogue file.
   * @param detail What was wrong and what was expected.
   * @param options Where it happened, and the underlying error.
   */
  constructor(
    file: string,
    detail: string,
    options: CatalogueErrorOptions = {},
  ) {
    const { card, field, line, cause } = options;
    const where = [
      card === undefined ? "" : `card '${card}'`,
      field === undefined ? "" : `field '${field}'`,
    ].filter(Boolean).join(", ");
    const at = line === undefined
      ? ""
      : where
      ? ` (line ${line})`
      : `line ${line}`;
    const prefix = where + at;
    super(
      oneLine(
        `Cannot load catalogue ${file}: ${
          prefix ? `${prefix}: ` : ""
        }${detail}`,
      ),
      cause === undefined ? undefined : { cause },
    );
    this.name = "CatalogueError";
    this.file = file;
    if (card !== undefined) this.card = card;
    if (field !== undefined) this.field = field;
    if (line !== undefined) this.line = line;
  }
}

/**
 * The catalogue shipped with the package.
 *
 * @example
 * ```ts
 * import { DEFAULT_CATALOGUE, Registry } from "@mymodel/serve/catalogue";
 * const registry = await Registry.load(DEFAULT_CATALOGUE);
 * console.log(registry.size);
 * ```
 */
export const DEFAULT_CATALOGUE: URL = new URL(
  "../catalogue/optimizers.yaml",
  import.meta.url,
);

/**
 * A loaded catalogue: the model cards by name.
 *
 * @example
 * ```ts
 * import { Registry } from "@mymodel/serve/catalogue";
 *
 * const registry = Registry.parse(`
 * models:
 *   my-model:
 *     verb: chat
 *     hub: org/my-model
 *     args: { max-model-len: 4096 }
 * `);
 * console.log(registry.get("my-model").args); // ["--max-model-len", "4096"]
 * ```
 */
export class Registry implements Iterable<ModelCard> {
  /** The file (or URL, or `<inline>`) the catalogue came from. */
  readonly file: string;
  #cards: ReadonlyMap<string, ModelCard>;
  #warned = new Set<string>();

  private constructor(file: string, cards: ReadonlyMap<string, ModelCard>) {
    this.file = file;
    this.#cards = cards;
  }

  /**
   * Reads and validates a catalogue.
   *
   * @param source A file path, or a URL (`file:`, `https:`; read with `fetch`, so
   *   the shipped catalogue loads even when this module runs from a remote
   *   registry). A string starting with `file://`, `http://` or `https://` is
   *   taken as a URL.
   * @returns The registry.
   * @throws {CatalogueError} When the catalogue cannot be read or is not valid.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * const registry = await Registry.load();
   * console.log(registry.has("llama-3")); // true
   * ```
   */
  static async load(
    source: string | URL = DEFAULT_CATALOGUE,
  ): Promise<Registry> {
    const url = typeof source === "string"
      ? (URL_LIKE.test(source) ? new URL(source) : undefined)
      : source;
    const file = url === undefined ? String(source) : displayName(url);
    let text: string;
    try {
      text = url === undefined
        ? await Deno.readTextFile(file)
        : await fetchText(url);
    } catch (error) {
      throw new CatalogueError(file, errorText(error), { cause: error });
    }
    return Registry.parse(text, file);
  }

  /**
   * Validates a catalogue given as text.
   *
   * @param text The YAML text.
   * @param file The name used in error messages.
   * @returns The registry.
   * @throws {CatalogueError} When the catalogue is not valid.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * const registry = Registry.parse("models:\n  e5:\n    verb: embed\n    hub: intfloat/e5-small-v2\n");
   * console.log(registry.get("e5").engine); // "vllm"
   * ```
   */
  static parse(text: string, file = "<inline>"): Registry {
    return new Registry(file, parseCatalogue(text, file));
  }

  /**
   * How many cards the catalogue holds.
   *
   * @returns The number of cards.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * console.log((await Registry.load()).size > 0); // true
   * ```
   */
  get size(): number {
    return this.#cards.size;
  }

  /**
   * Every catalogue name.
   *
   * @returns The names, sorted ascending.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * console.log((await Registry.load()).names().includes("llama-3")); // true
   * ```
   */
  names(): string[] {
    return [...this.#cards.keys()].sort();
  }

  /**
   * Whether a name is in the catalogue.
   *
   * @param name A catalogue name (no verb prefix).
   * @returns True when a card has that name.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * console.log((await Registry.load()).has("no-such-model")); // false
   * ```
   */
  has(name: string): boolean {
    return this.#cards.has(name);
  }

  /**
   * Looks a card up by its exact name.
   *
   * @param name A catalogue name (no verb prefix).
   * @returns The card.
   * @throws {KeyError} When no card has that name; the message suggests close names.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * console.log((await Registry.load()).get("llama-3").verb); // "chat"
   * ```
   */
  get(name: string): ModelCard {
    const card = this.#cards.get(name);
    if (card === undefined) throw new KeyError(name, this.#cards.keys());
    return card;
  }

  /**
   * Looks a card up by a model spec: `<name>` or `<VERB>:<name>`. Only the text
   * after the first colon is looked up; a verb prefix that does not match the
   * card's verb (compared case-insensitively) is logged once as a warning, and
   * the card is returned anyway.
   *
   * @param spec The model spec, e.g. `llama-3` or `CHAT:llama-3`.
   * @returns The card.
   * @throws {KeyError} When no card has that name.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * const registry = await Registry.load();
   * console.log(registry.resolve("CHAT:llama-3") === registry.get("llama-3")); // true
   * ```
   */
  resolve(spec: string): ModelCard {
    const colon = spec.indexOf(":");
    if (colon < 0) return this.get(spec);
    const prefix = spec.slice(0, colon);
    const card = this.get(spec.slice(colon + 1));
    if (prefix.toLowerCase() !== card.verb && !this.#warned.has(spec)) {
      this.#warned.add(spec);
      const known = (VERBS as readonly string[]).includes(prefix.toLowerCase())
        ? ""
        : ` ('${prefix}' is not a verb: expected one of ${VERBS.join(", ")})`;
      log.warn(
        `Model spec '${spec}' asks for ${prefix} but '${card.name}' is a ${card.verb} model${known}; serving it as ${card.verb}`,
      );
    }
    return card;
  }

  /**
   * Iterates over the cards in catalogue (file) order.
   *
   * @returns An iterator over the cards.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * for (const card of await Registry.load()) console.log(card.name, card.verb);
   * ```
   */
  [Symbol.iterator](): IterableIterator<ModelCard> {
    return this.#cards.values();
  }
}

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
const URL_LIKE = /^(?:file|https?):\/\//i;
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

function parseCatalogue(text: string, file: string): Map<string, ModelCard> {
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
    cards.set(name, readCard(ctx, name, pair));
  }
  return cards;
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
): ModelCard {
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

  const card: {
    -readonly [K in keyof ModelCard]: ModelCard[K];
  } = {
    name,
    verb,
    modality: Object.freeze(modality),
    local,
    engine,
    args: Object.freeze(
      argsField === undefined ? [] : readArgs(ctx, argsField),
    ),
    env: Object.freeze(envField === undefined ? {} : readEnv(ctx, envField)),
  };
  if (hub !== undefined) card.hub = hub;
  if (executableField !== undefined) {
    card.executable = text(ctx, executableField, "a program name or path");
  }
  if (commandField !== undefined) {
    card.command = Object.freeze(readCommand(ctx, commandField));
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
  return Object.freeze(card);
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

function readArgs(
  ctx: Context,
  field: FieldValue,
): string[] {
  const node = field.value;
  const base = field.where.field ?? "args";
  if (isSeq(node)) {
    // A list is literal argv.
    return node.items.map((item, index) => {
      const where = { ...field.where, field: `${base}[${index}]`, node: item };
      return argText(
        ctx,
        where,
        deref(ctx, where, item),
        "a string, number or boolean",
      );
    });
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
  const argv: string[] = [];
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
    if (scalar === true) argv.push(flag);
    else if (scalar === false) continue;
    else if (isMap(value)) argv.push(flag, JSON.stringify(value.toJS(ctx.doc)));
    else if (isSeq(value)) {
      value.items.forEach((item, index) => {
        const itemWhere = {
          ...where,
          field: `${where.field}[${index}]`,
          node: item,
        };
        const resolved = deref(ctx, itemWhere, item);
        argv.push(
          flag,
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
      argv.push(
        flag,
        argText(
          ctx,
          where,
          value,
          "true, false, a string, number, list or mapping",
        ),
      );
    }
  }
  return argv;
}

function readEnv(
  ctx: Context,
  field: FieldValue,
): Record<string, string> {
  const node = field.value;
  if (!isMap(node)) {
    fail(
      ctx,
      field.where,
      `expected a mapping of variable names to values, got ${describe(node)}`,
    );
  }
  const env: Record<string, string> = {};
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
  }
  return env;
}

function readCommand(
  ctx: Context,
  field: FieldValue,
): string[] {
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
  const argv = node.items.map((item, index) => {
    const where = { ...field.where, field: `command[${index}]`, node: item };
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
  return argv;
}

// ---------------------------------------------------------------------------
// Small helpers.

async function fetchText(url: URL): Promise<string> {
  const response = await fetch(url);
  if (!response.ok) {
    await response.body?.cancel();
    throw new Error(`HTTP ${response.status} ${response.statusText}`.trim());
  }
  return await response.text();
}

function displayName(url: URL): string {
  if (url.protocol !== "file:") return url.href;
  const path = decodeURIComponent(url.pathname);
  return /^\/[A-Za-z]:\//.test(path) ? path.slice(1) : path;
}

function errorText(error: unknown): string {
  return error instanceof Error
    ? `${error.name}: ${error.message}`
    : String(error);
}

function oneLine(text: string): string {
  return text.replace(/\s*[\r\n]+\s*/g, " ");
}

function orList(items: readonly string[]): string {
  return items.length <= 1
    ? items.join("")
    : `${items.slice(0, -1).join(", ")} or ${items.at(-1)}`;
}

function knownList(names: readonly string[]): string {
  return names.length > 0 ? names.join(", ") : "none";
}

/** ` (did you mean x?)` when a close match exists, else the empty string. */
function hint(value: string, allowed: readonly string[]): string {
  const [best] = closeMatches(value, allowed);
  return best === undefined ? "" : `; did you mean ${best}?`;
}

/** Up to `max` names close to `query` (edit distance or substring), closest first. */
function closeMatches(
  query: string,
  names: readonly string[],
  max = 3,
): string[] {
  const q = query.toLowerCase();
  if (q === "") return [];
  const scored: [number, string][] = [];
  for (const name of names) {
    const n = name.toLowerCase();
    const distance = editDistance(q, n);
    const limit = Math.max(1, Math.floor(Math.max(q.length, n.length) / 3));
    if (distance <= limit && distance < Math.max(q.length, n.length)) {
      scored.push([distance, name]);
    } else if (
      q.length >= 3 && n.length >= 3 && (n.includes(q) || q.includes(n))
    ) {
      scored.push([100 + Math.abs(n.length - q.length), name]);
    }
  }
  scored.sort((a, b) =>
    a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0)
  );
  return scored.slice(0, max).map(([, name]) => name);
}

/** Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps. */
function editDistance(a: string, b: string): number {
  const width = b.length + 1;
  const d = new Array<number>((a.length + 1) * width).fill(0);
  for (let i = 0; i <= a.length; i++) d[i * width] = i;
  for (let j = 0; j <= b.length; j++) d[j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(
        d[(i - 1) * width + j]! + 1,
        d[i * width + j - 1]! + 1,
        d[(i - 1) * width + j - 1]! + cost,
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, d[(i - 2) * width + j - 2]! + 1);
      }
      d[i * width + j] = best;
    }
  }
  return d[a.length * width + b.length]!;
}
